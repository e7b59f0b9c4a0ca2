//! [`HolderKey`]: how a DC manager's pod views and ledger name one pod process.

use compact_str::CompactString;
use std::fmt;

/// One pod process: its pod id and its incarnation (a pod restarted under the same id is a new
/// holder). Ordered by pod id, then incarnation.
///
/// The pod id is kept inline up to 24 bytes (longer ones on the heap): a DC manager of 1,000
/// limits looks up 100,000 holders a second at 100 pods, each in a map of its limit, and a key
/// held as a `String` ("pod#incarnation") sent each lookup's comparison to a cold heap block
/// (the largest share of the manager's time on a profile).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HolderKey {
    pod: CompactString,
    incarnation: u64,
}

impl HolderKey {
    /// The key of `pod`'s process `incarnation`.
    pub fn new(pod: &str, incarnation: u64) -> Self {
        HolderKey { pod: CompactString::new(pod), incarnation }
    }

    /// The books' entry for what this term answers for of its predecessors' pod leases
    /// (`succession.rs`): an empty pod id, which no report or return may name.
    pub fn predecessor() -> Self {
        HolderKey::default()
    }

    /// Makes this key name `pod`'s `incarnation`, in the room it has (a key reused for every
    /// report allocates only for a longer pod id than it held before).
    pub fn set(&mut self, pod: &str, incarnation: u64) {
        self.pod.clear();
        self.pod.push_str(pod);
        self.incarnation = incarnation;
    }

    /// The pod id, as a pod lease carries it.
    pub fn pod(&self) -> &CompactString {
        &self.pod
    }

    /// The pod process's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
}

/// [`HolderKey::new`].
pub fn holder_key(pod: &str, incarnation: u64) -> HolderKey {
    HolderKey::new(pod, incarnation)
}

/// `pod#incarnation`, the incarnation in sixteen hex digits.
impl fmt::Display for HolderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{:016x}", self.pod, self.incarnation)
    }
}

/// As the `String` it used to be: [`Display`](fmt::Display)'s text, quoted and escaped.
impl fmt::Debug for HolderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_is_shown_as_the_pod_and_its_incarnation_in_sixteen_hex_digits() {
        for (pod, incarnation) in [("p1", 0), ("dc0-pod17", 0xabc), ("x", u64::MAX), ("", 1 << 63)] {
            assert_eq!(holder_key(pod, incarnation).to_string(), format!("{pod}#{incarnation:016x}"));
        }
    }

    #[test]
    fn holders_are_ordered_by_pod_then_incarnation_and_equal_only_in_both() {
        let long = "a-pod-id-longer-than-twenty-four-bytes";
        let mut keys = [holder_key("p2", 1), holder_key(long, 2), holder_key("p1", 9), holder_key("p1", 3)];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(|k| format!("{}/{}", k.pod(), k.incarnation())).collect();
        assert_eq!(shown, [format!("{long}/2"), "p1/3".into(), "p1/9".into(), "p2/1".into()]);
        assert_eq!(holder_key(long, 2), holder_key(long, 2));
        assert_ne!(holder_key("p1", 3), holder_key("p1", 4));
        assert_ne!(holder_key("p1", 3), holder_key("p10", 3));
        assert_eq!(format!("{:?}", holder_key("a\"b", 1)), format!("{:?}", "a\"b#0000000000000001"));
    }

    /// Found by a review: a key made per report allocated for every pod id longer than 24 bytes
    /// (a Kubernetes pod name, `example-app-7d9f8b6c5d-x2k4p`, is 28). Reused, it allocates once.
    #[test]
    fn a_key_set_again_reuses_its_room() {
        let long = "example-app-7d9f8b6c5d-x2k4p";
        let mut key = HolderKey::default();
        key.set(long, 1);
        let room = key.pod.as_ptr();
        for (pod, incarnation) in [("example-app-7d9f8b6c5d-q8r2z", 2), ("p1", 3), (long, 4)] {
            key.set(pod, incarnation);
            assert_eq!(key, holder_key(pod, incarnation));
            assert_eq!(key.pod.as_ptr(), room, "the same heap room for {pod}");
        }
    }
}
