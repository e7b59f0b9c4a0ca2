//! The ledger's unit of storage: the records of every limit whose name hashes to one group
//! ([`crate::subjects::ledger_group_of`]), in one KV value written by compare-and-set. The
//! coordinator's durable writes per renewal then grow with the number of groups
//! ([`crate::subjects::LEDGER_GROUPS`]), not with the number of limits, and one write is
//! atomic across the limits it carries.

use super::{check_id, encode, LedgerRecord, WireError, WireMessage, MAX_BATCH_BYTES, SCHEMA_VERSION};
use crate::subjects::{ledger_group_of, LEDGER_GROUPS};
use serde::{Deserialize, Serialize};

/// Largest group a writer stores: NATS's default `max_payload` (1 MiB) less room for the
/// headers of a compare-and-set. About 1.5 KB per limit with two DCs: some 600 limits per
/// group, 40,000 limits in all.
pub const MAX_LEDGER_GROUP_BYTES: usize = MAX_BATCH_BYTES - 4 * 1024;

/// How many times its size a group keeps room to grow to when it takes a new limit.
pub const FRESH_GROWTH: usize = 3;

/// One ledger group: its records, one per limit, sorted by limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerGroup {
    /// Schema version.
    pub v: u32,
    /// The group's number: every record's limit hashes to it.
    pub group: u32,
    /// The group's records, one per limit, sorted by limit.
    pub records: Vec<LedgerRecord>,
}

impl LedgerGroup {
    /// Group `group` holding `records` (sorted here by limit).
    pub fn new(group: u32, mut records: Vec<LedgerRecord>) -> Self {
        records.sort_by(|a, b| a.limit.cmp(&b.limit));
        LedgerGroup { v: SCHEMA_VERSION, group, records }
    }

    /// The group of `stored` records (already in the ledger, or maybe lost from it: never left
    /// out) and `fresh` ones (never written, so no lease of theirs exists anywhere), within
    /// `max_bytes` encoded: every stored record, then fresh ones in name order while the whole
    /// group could grow [`FRESH_GROWTH`] times and still fit (a record grows once its DC leases
    /// and holders are written: a group filled to the byte with first records would soon hold
    /// more than it can store; and groups fill one limit at a time, so the room is kept for
    /// every record, not only the new ones). `Err(bytes)`: the stored records alone encode to
    /// `bytes`, above `max_bytes`.
    pub fn fit(
        group: u32,
        stored: Vec<LedgerRecord>,
        mut fresh: Vec<LedgerRecord>,
        max_bytes: usize,
    ) -> Result<FittedGroup, usize> {
        let base = LedgerGroup::new(group, stored);
        let mut size = encode(&base).len();
        if size > max_bytes {
            return Err(size);
        }
        let mut records = base.records;
        fresh.sort_by(|a, b| a.limit.cmp(&b.limit));
        let mut left_out = Vec::new();
        for rec in fresh {
            // A record in a JSON array costs its encoding and at most one comma.
            let cost = encode(&rec).len() + 1;
            if (size + cost).saturating_mul(FRESH_GROWTH) <= max_bytes {
                size += cost;
                records.push(rec);
            } else {
                left_out.push(rec.limit);
            }
        }
        let group = LedgerGroup::new(group, records);
        let bytes = encode(&group);
        debug_assert!(bytes.len() <= max_bytes, "each record's cost is counted in full");
        Ok(FittedGroup { group, bytes, left_out })
    }

    /// `limit`'s record, if the group holds one.
    pub fn record(&self, limit: &str) -> Option<&LedgerRecord> {
        self.records.binary_search_by(|r| r.limit.as_str().cmp(limit)).ok().map(|i| &self.records[i])
    }
}

/// A group cut to fit its size ([`LedgerGroup::fit`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FittedGroup {
    /// The group as cut to fit.
    pub group: LedgerGroup,
    /// The group encoded: what is written.
    pub bytes: Vec<u8>,
    /// Fresh limits that did not fit, in name order: none of their records is written.
    pub left_out: Vec<String>,
}

impl WireMessage for LedgerGroup {
    const MAX_BYTES: usize = MAX_LEDGER_GROUP_BYTES;
    fn validate(&self) -> Result<(), WireError> {
        if self.group >= LEDGER_GROUPS {
            let reason = format!("{} not below {LEDGER_GROUPS}", self.group);
            return Err(WireError::Invalid { field: "group", reason });
        }
        for (i, rec) in self.records.iter().enumerate() {
            rec.validate()?;
            check_id("limit", &rec.limit)?;
            if ledger_group_of(&rec.limit) != self.group {
                let reason = format!("limit {} belongs to group {}", rec.limit, ledger_group_of(&rec.limit));
                return Err(WireError::Invalid { field: "records", reason });
            }
            if i > 0 && self.records[i - 1].limit >= rec.limit {
                let reason = format!("limit {} out of order or twice", rec.limit);
                return Err(WireError::Invalid { field: "records", reason });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{decode, encode};

    fn name_in(group: u32, skip: usize) -> String {
        (0..).map(|i| format!("l{i}")).filter(|n| ledger_group_of(n) == group).nth(skip).unwrap()
    }

    #[test]
    fn a_group_roundtrips_sorted_and_finds_its_records() {
        let (a, b) = (name_in(7, 0), name_in(7, 1));
        let g = LedgerGroup::new(7, vec![LedgerRecord::empty(&b, 2, "c"), LedgerRecord::empty(&a, 2, "c")]);
        let back = decode::<LedgerGroup>(&encode(&g)).unwrap();
        assert_eq!(back, g);
        assert_eq!(back.record(&a).map(|r| r.limit.as_str()), Some(a.as_str()));
        assert_eq!(back.record(&b).map(|r| r.limit.as_str()), Some(b.as_str()));
        assert!(back.record("absent").is_none());
    }

    #[test]
    fn a_group_naming_a_foreign_limit_twice_or_out_of_range_is_refused() {
        let (a, other) = (name_in(7, 0), name_in(8, 0));
        let foreign = LedgerGroup::new(7, vec![LedgerRecord::empty(&other, 1, "c")]);
        assert!(matches!(decode::<LedgerGroup>(&encode(&foreign)), Err(WireError::Invalid { field: "records", .. })));
        let mut twice = LedgerGroup::new(7, vec![LedgerRecord::empty(&a, 1, "c")]);
        twice.records.push(LedgerRecord::empty(&a, 1, "c"));
        assert!(matches!(decode::<LedgerGroup>(&encode(&twice)), Err(WireError::Invalid { field: "records", .. })));
        let out = LedgerGroup::new(LEDGER_GROUPS, vec![]);
        assert!(matches!(decode::<LedgerGroup>(&encode(&out)), Err(WireError::Invalid { field: "group", .. })));
    }

    #[test]
    fn a_group_too_large_keeps_every_stored_record_and_the_fresh_ones_with_room_to_grow_in_name_order() {
        let names: Vec<String> = (0..6).map(|i| name_in(3, i)).collect();
        let rec = |n: &String| LedgerRecord::empty(n, 4, "coord-a");
        let stored: Vec<LedgerRecord> = names[..2].iter().map(rec).collect();
        let fresh: Vec<LedgerRecord> = names[2..].iter().rev().map(rec).collect();
        let mut sorted = names[2..].to_vec();
        sorted.sort();
        let base = encode(&LedgerGroup::new(3, stored.clone())).len();
        let cost = |n: &String| encode(&rec(n)).len() + 1;
        let room: usize = (base + sorted.iter().map(cost).sum::<usize>()) * FRESH_GROWTH;
        let all = LedgerGroup::fit(3, stored.clone(), fresh.clone(), room).unwrap();
        assert!(all.left_out.is_empty() && all.group.records.len() == 6);
        assert!(all.bytes.len() * FRESH_GROWTH <= room, "room left to grow: {} of {room} bytes", all.bytes.len());
        let cut = LedgerGroup::fit(3, stored.clone(), fresh.clone(), room - 1).unwrap();
        assert_eq!(cut.bytes, encode(&cut.group));
        assert_eq!(cut.left_out, vec![sorted[3].clone()], "the last fresh name is left out");
        for n in &names[..2] {
            assert!(cut.group.record(n).is_some(), "stored record {n} kept");
        }
        assert_eq!(LedgerGroup::fit(3, stored, fresh, base - 1), Err(base), "stored records are never cut");
    }
}
