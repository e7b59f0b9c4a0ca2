//! A map that iterates in key order, as a `BTreeMap` does, and finds a key by its hash.
//!
//! The DC manager looks a holder up in its pod views and in each limit's ledger for every report
//! item and every lease: at 1,000 limits × 100 pods that is hundreds of thousands of lookups a
//! second, and in a `BTreeMap` each one compared its key (`pod#incarnation`, long shared
//! prefixes) with about seven others. Here a lookup hashes the key once and compares it once.
//! Splits and durable records still see the holders in key order, so nothing that depends on
//! the order changes.
//!
//! The price is in joins and leaves: inserting a key is a binary search, then a shift of the
//! entries after it and of their places in the hash index (O(n)); removing one shifts them
//! back. 10,000 keys inserted in random order took 120 ms here, against 3 ms for a `BTreeMap`
//! (a DC of 10,000 pods pays it once per map when a new term meets its pods), and removing them
//! 110 ms. A version keeping the order in a `BTreeMap` beside a hash map of slots inserted in
//! O(log n) but cost the DC manager 10% more per (pod, limit) than this one, so this is kept.
//!
//! The hasher is foldhash's with a seed drawn per map: keys come from pods (their ids and
//! incarnations), so a fixed seed would let a pod choose keys that collide. The order never
//! depends on the hash.

use indexmap::{Equivalent, IndexMap};
use std::hash::Hash;

type Hasher = foldhash::fast::RandomState;

/// A map in key order with hashed lookups.
#[derive(Clone, Debug)]
pub struct SortedMap<K, V> {
    /// Invariant: its keys are in ascending order.
    map: IndexMap<K, V, Hasher>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap { map: IndexMap::with_hasher(Hasher::default()) }
    }
}

impl<K: Hash + Ord, V> SortedMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value of `key`.
    pub fn get<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<&V> {
        self.map.get(key)
    }

    /// The value of `key`, to change.
    pub fn get_mut<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    /// Whether `key` is in the map.
    pub fn contains_key<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> bool {
        self.map.contains_key(key)
    }

    /// Insert `value` under `key` in its place in the order; the old value if `key` was there
    /// (the key keeps its place).
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.map.insert_sorted(key, value).1
    }

    /// The value under `key`, inserted (`make_key()`, which must equal `key`, and `make()`) if
    /// missing: one hashed lookup when it is there, and no key built.
    pub fn get_or_insert_with<Q: ?Sized + Hash + Equivalent<K>>(
        &mut self,
        key: &Q,
        make_key: impl FnOnce() -> K,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        let index = self.place_or_insert_with(key, make_key, make);
        &mut self.map[index]
    }

    /// [`get_or_insert_with`](Self::get_or_insert_with), giving the place of the value in key
    /// order.
    pub fn place_or_insert_with<Q: ?Sized + Hash + Equivalent<K>>(
        &mut self,
        key: &Q,
        make_key: impl FnOnce() -> K,
        make: impl FnOnce() -> V,
    ) -> usize {
        match self.map.get_index_of(key) {
            Some(i) => i,
            None => {
                let k = make_key();
                debug_assert!(key.equivalent(&k), "make_key() built another key");
                self.map.insert_sorted(k, make()).0
            }
        }
    }

    /// The place of `key` in key order, if it is there (one hashed lookup; the place then reaches
    /// its value with [`get_index`](Self::get_index) or [`get_index_mut`](Self::get_index_mut)
    /// without another).
    pub fn get_index_of<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<usize> {
        self.map.get_index_of(key)
    }

    /// The place of `key`, looked for first at `*hint` (one comparison of keys, no hashing), then
    /// by hash; `*hint` is set to it when found. A DC manager finds a report item's holder so,
    /// with the place it was found at last time: at 1,000 limits the maps are cold by then, and
    /// the hashed lookup's probe was a tenth of its time.
    pub fn place_from<Q: ?Sized + Hash + Equivalent<K>>(&self, hint: &mut PlaceHint, key: &Q) -> Option<usize> {
        if self.map.get_index(hint.0).is_some_and(|(k, _)| key.equivalent(k)) {
            return Some(hint.0);
        }
        let place = self.map.get_index_of(key)?;
        hint.0 = place;
        Some(place)
    }

    /// The entry at place `index` in key order.
    pub fn get_index(&self, index: usize) -> Option<(&K, &V)> {
        self.map.get_index(index)
    }

    /// The value at place `index` in key order.
    pub fn get_index_mut(&mut self, index: usize) -> Option<&mut V> {
        self.map.get_index_mut(index).map(|(_, v)| v)
    }

    /// Remove `key`, keeping the others in order.
    pub fn remove<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<V> {
        self.map.shift_remove(key)
    }

    /// Keep the entries `keep` says yes to, in order.
    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.map.retain(keep);
    }

    /// In key order.
    pub fn iter(&self) -> indexmap::map::Iter<'_, K, V> {
        self.map.iter()
    }

    /// In key order.
    pub fn keys(&self) -> indexmap::map::Keys<'_, K, V> {
        self.map.keys()
    }

    /// In key order.
    pub fn values(&self) -> indexmap::map::Values<'_, K, V> {
        self.map.values()
    }

    /// In key order.
    pub fn values_mut(&mut self) -> indexmap::map::ValuesMut<'_, K, V> {
        self.map.values_mut()
    }
}

impl<K: Hash + Ord, V, Q: ?Sized + Hash + Equivalent<K>> std::ops::Index<&Q> for SortedMap<K, V> {
    type Output = V;

    fn index(&self, key: &Q) -> &V {
        &self.map[key]
    }
}

impl<'a, K, V> IntoIterator for &'a SortedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = indexmap::map::Iter<'a, K, V>;

    /// In key order.
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u32),
        GetOrInsert(u8, u32),
        Remove(u8),
        RetainBelow(u32),
        Bump(u8),
        BumpAll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
            any::<u8>().prop_map(Op::Remove),
            any::<u32>().prop_map(Op::RetainBelow),
            any::<u8>().prop_map(Op::Bump),
            Just(Op::BumpAll),
        ]
    }

    proptest! {
        /// Whatever is done to it, it holds what a `BTreeMap` would, in the same order.
        #[test]
        fn it_answers_as_a_btreemap_does(ops in proptest::collection::vec(op(), 0..200)) {
            let (mut ours, mut theirs) = (SortedMap::new(), BTreeMap::new());
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(ours.insert(k.to_string(), v), theirs.insert(k.to_string(), v)),
                    Op::GetOrInsert(k, v) => {
                        let key = k.to_string();
                        let a = *ours.get_or_insert_with(key.as_str(), || key.clone(), || v);
                        prop_assert_eq!(a, *theirs.entry(key).or_insert(v));
                    }
                    Op::Remove(k) => prop_assert_eq!(ours.remove(k.to_string().as_str()), theirs.remove(&k.to_string())),
                    Op::RetainBelow(t) => {
                        ours.retain(|_, v| *v < t);
                        theirs.retain(|_, v| *v < t);
                    }
                    Op::Bump(k) => {
                        if let Some(v) = ours.get_mut(k.to_string().as_str()) { *v = v.wrapping_add(1) }
                        if let Some(v) = theirs.get_mut(&k.to_string()) { *v = v.wrapping_add(1) }
                    }
                    Op::BumpAll => {
                        ours.values_mut().for_each(|v| *v = v.wrapping_add(1));
                        theirs.values_mut().for_each(|v| *v = v.wrapping_add(1));
                    }
                }
                let ours_now: Vec<(&String, &u32)> = ours.iter().collect();
                let theirs_now: Vec<(&String, &u32)> = theirs.iter().collect();
                prop_assert_eq!(ours_now, theirs_now);
                prop_assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>());
                prop_assert_eq!(ours.values().collect::<Vec<_>>(), theirs.values().collect::<Vec<_>>());
                for k in theirs.keys() {
                    prop_assert!(ours.contains_key(k.as_str()));
                    prop_assert_eq!(ours[k.as_str()], theirs[k]);
                }
                prop_assert_eq!(ours.len(), theirs.len());
                prop_assert_eq!(ours.is_empty(), theirs.is_empty());
            }
        }
    }

    #[test]
    fn a_key_found_by_a_borrowed_form_and_indexed() {
        let mut m = SortedMap::new();
        m.insert("b".to_string(), 2);
        m.insert("a".to_string(), 1);
        assert!(m.contains_key("a"));
        assert_eq!(m["b"], 2);
        assert_eq!(m.keys().cloned().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.insert("a".to_string(), 3), Some(1), "the old value, the key in its place");
        assert_eq!(m.iter().map(|(_, v)| *v).collect::<Vec<_>>(), [3, 2], "in key order");
    }

    #[test]
    fn a_place_hint_is_looked_at_first_and_a_wrong_one_only_costs_the_lookup() {
        let mut m: SortedMap<String, u32> = SortedMap::new();
        m.insert("b".to_string(), 2);
        let mut hint = PlaceHint::NOWHERE;
        assert_eq!(m.place_from(&mut hint, "b"), Some(0));
        assert_eq!(hint.0, 0, "found: the place is kept");
        m.insert("a".to_string(), 1);
        assert_eq!(m.place_from(&mut hint, "b"), Some(1), "the hint points at another key now");
        assert_eq!(hint.0, 1);
        assert_eq!(m.place_from(&mut hint, "c"), None);
        assert_eq!(hint.0, 1, "a key not there leaves the hint");
        let mut far = PlaceHint(99);
        assert_eq!(m.place_from(&mut far, "a"), Some(0), "a place past the end");
    }
}

/// Where a key was last found in a [`SortedMap`], kept beside something else about it to look
/// there first ([`SortedMap::place_from`]; places move when keys are added or removed before
/// it: a wrong one costs only the hashed lookup it was kept to spare). Its Debug says nothing: it
/// is no state of its own. It starts [`NOWHERE`](Self::NOWHERE).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlaceHint(pub usize);

impl PlaceHint {
    /// No place known.
    pub const NOWHERE: PlaceHint = PlaceHint(usize::MAX);
}

impl Default for PlaceHint {
    fn default() -> Self {
        PlaceHint::NOWHERE
    }
}

impl std::fmt::Debug for PlaceHint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("_")
    }
}
