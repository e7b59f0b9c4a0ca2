//! The ledger fence: one key in the leader bucket (a different stream from the ledger) that
//! outlives a lost ledger record and says what such a record may have held.

use super::messages::v1;
use super::{check_id, decode, LedgerRecord, WireError, WireMessage, MAX_TTL_MS, SCHEMA_VERSION};
use crate::quota::Quota;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Written by every new coordinator leader before its first record, and again before any record
/// that names a floor above what it holds (compare-and-set on the fence's revision), so it bounds
/// every record that may exist or have existed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerFence {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The highest coordinator epoch under which a ledger record may have been written.
    pub epoch: u64,
    /// The longest `dc_ttl_ms` of any term that raised the fence, and of any DC lease a record
    /// held: no DC lease in any record ever lasted longer. 0 when no record held a lease yet or
    /// unknown (a fence written as a bare decimal epoch): a leader then waits its own TTL.
    #[serde(default)]
    pub dc_ttl_ms_max: u64,
    /// Per limit, per DC: the largest floor any record named or reserved. A DC cut off from the
    /// coordinator may still spend the last floor it read, so a leader that finds a record lost
    /// reserves these until each DC confirms the floor it names now.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub floors_max: BTreeMap<String, BTreeMap<String, Quota>>,
    /// Every limit any record was written for (the fence goes up with a limit's name before
    /// its first record): a limit not listed never had a record, so a leader that finds none
    /// starts it fresh instead of waiting out a lost one. `None`: a fence written before the
    /// list existed (any limit may have had a record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeSet<String>>,
}

/// The longest TTL of a DC lease in `record` (0 if it holds none).
fn longest_lease_ms(record: &LedgerRecord) -> u64 {
    record.leases.iter().map(|l| l.ttl_ms).max().unwrap_or(0)
}

impl LedgerFence {
    /// The fence a new term of `epoch` writes over `previous`, with its own `dc_ttl_ms`.
    pub fn raised(previous: Option<&LedgerFence>, epoch: u64, dc_ttl_ms: u64) -> Self {
        let earlier = previous.map_or(0, |f| f.dc_ttl_ms_max);
        let floors_max = previous.map(|f| f.floors_max.clone()).unwrap_or_default();
        // The first fence ever knows every limit with a record: none yet.
        let limits = previous.map_or(Some(BTreeSet::new()), |f| f.limits.clone());
        LedgerFence { v: SCHEMA_VERSION, epoch, dc_ttl_ms_max: earlier.max(dc_ttl_ms), floors_max, limits }
    }

    /// The fence that must be written before `record` may be: `None` if this one already covers
    /// every floor the record names or reserves and every DC lease's TTL in it.
    pub fn covering(&self, record: &LedgerRecord) -> Option<LedgerFence> {
        // Checked first without a copy: a coordinator asks this of every record it writes, and
        // the fence holds every limit's floors.
        if self.covers(record) {
            return None;
        }
        let mut raised = self.clone();
        // A DC lease longer than any term raised the fence with (a TTL changed live, or a term
        // that had no limit defined when it raised the fence): a leader that finds this record
        // lost must wait that long. Raising an unknown 0 is safe too: a leader waits the longer
        // of its own TTL and the fence's.
        raised.dc_ttl_ms_max = raised.dc_ttl_ms_max.max(longest_lease_ms(record));
        if let Some(limits) = raised.limits.as_mut() {
            limits.insert(record.limit.clone());
        }
        let held = raised.floors_max.entry(record.limit.clone()).or_default();
        for (dc, floor) in record.floors.iter().chain(&record.floors_reserved) {
            let max = held.entry(dc.clone()).or_insert(Quota::ZERO);
            *max = (*max).max(*floor);
        }
        Some(raised)
    }

    /// Whether this fence already bounds `record`: its limit listed, every DC lease's TTL and
    /// every floor it names or reserves within the fence's.
    fn covers(&self, record: &LedgerRecord) -> bool {
        let held = self.floors_max.get(&record.limit);
        longest_lease_ms(record) <= self.dc_ttl_ms_max
            && self.limits.as_ref().is_none_or(|l| l.contains(&record.limit))
            && record.floors.iter().chain(&record.floors_reserved).all(|(dc, floor)| {
                let max = held.and_then(|h| h.get(dc)).copied().unwrap_or(Quota::ZERO);
                floor.fits_in(&max)
            })
    }

    /// Whether a record of `limit` may ever have been written (always, for an older fence).
    pub fn may_hold(&self, limit: &str) -> bool {
        self.limits.as_ref().is_none_or(|l| l.contains(limit))
    }

    /// The largest floors any record of `limit` named or reserved, per DC.
    pub fn floors_of(&self, limit: &str) -> Option<&BTreeMap<String, Quota>> {
        self.floors_max.get(limit)
    }

    /// The stored value: JSON, or a bare decimal epoch as older coordinators wrote it.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        match std::str::from_utf8(bytes).ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(epoch) => Ok(LedgerFence {
                v: SCHEMA_VERSION,
                epoch,
                dc_ttl_ms_max: 0,
                floors_max: BTreeMap::new(),
                limits: None,
            }),
            None => decode(bytes),
        }
    }
}

impl WireMessage for LedgerFence {
    /// It lists every limit: about 75 bytes per limit and DC.
    const MAX_BYTES: usize = super::MAX_BATCH_BYTES;
    fn validate(&self) -> Result<(), WireError> {
        if self.dc_ttl_ms_max > MAX_TTL_MS {
            let reason = format!("{} above {MAX_TTL_MS}", self.dc_ttl_ms_max);
            return Err(WireError::Invalid { field: "dc_ttl_ms_max", reason });
        }
        for (limit, floors) in &self.floors_max {
            check_id("floors_max", limit)?;
            floors.keys().try_for_each(|dc| check_id("floors_max", dc))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::encode;

    #[test]
    fn a_fence_round_trips_and_reads_the_older_bare_epoch() {
        let f = LedgerFence::raised(None, 7, 10_000);
        assert_eq!(LedgerFence::parse(&encode(&f)), Ok(f));
        let bare = LedgerFence { v: 1, epoch: 12, dc_ttl_ms_max: 0, floors_max: BTreeMap::new(), limits: None };
        assert_eq!(LedgerFence::parse(b"12\n"), Ok(bare));
        assert!(LedgerFence::parse(b"{\"v\":1}").is_err(), "an epoch is required");
        assert!(LedgerFence::parse(b"twelve").is_err());
    }

    #[test]
    fn a_raised_fence_keeps_the_longest_dc_lease_any_term_used() {
        let a = LedgerFence::raised(None, 1, 10_000);
        let b = LedgerFence::raised(Some(&a), 2, 4_000);
        assert_eq!((b.epoch, b.dc_ttl_ms_max), (2, 10_000));
        let c = LedgerFence::raised(Some(&b), 3, 20_000);
        assert_eq!(c.dc_ttl_ms_max, 20_000);
    }

    #[test]
    fn a_fence_lists_every_limit_before_its_first_record_and_keeps_it() {
        let f = LedgerFence::raised(None, 1, 10_000);
        assert!(!f.may_hold("api"), "the first fence: no record yet");
        let g = f.covering(&LedgerRecord::empty("api", 1, "c")).expect("api's first record raises it");
        assert!(g.may_hold("api") && !g.may_hold("other"));
        let h = LedgerFence::raised(Some(&g), 2, 10_000);
        assert!(h.may_hold("api"), "a new term keeps the list");
        assert_eq!(LedgerFence::parse(&encode(&h)), Ok(h));
        let old = LedgerFence::parse(b"5").unwrap();
        assert!(old.may_hold("anything"), "an older fence may have any limit's record");
        assert!(LedgerFence::raised(Some(&old), 6, 10_000).may_hold("anything"), "and stays unknown");
    }

    #[test]
    fn a_fence_covers_a_dc_lease_longer_than_any_term_raised_it_with() {
        let lease = |ttl_ms: u64| crate::wire::DcLease {
            v: 1,
            limit: "api".into(),
            dc: "bkk".into(),
            holder: "bkk-mgr".into(),
            version: crate::wire::LeaseVersion::new(1, 1),
            lease_id: "c-1-1".into(),
            quota: Quota::per_s(10, 0),
            floor: Quota::ZERO,
            ttl_ms,
            basis_seq: 1,
            predecessor: None,
        };
        let mut record = LedgerRecord::empty("api", 1, "c");
        record.leases = vec![lease(10_000)];
        let f = LedgerFence::raised(None, 1, 10_000).covering(&record).expect("the limit's first record");
        assert_eq!(f.covering(&record), None);
        record.leases = vec![lease(20_000)];
        assert_eq!(f.covering(&record).map(|g| g.dc_ttl_ms_max), Some(20_000), "a TTL raised live");
        let unknown = LedgerFence::parse(b"3").unwrap();
        let known = unknown.covering(&record).expect("an unknown TTL is raised too");
        assert_eq!(known.dc_ttl_ms_max, 20_000);
        let none_yet = LedgerFence::raised(None, 1, 0).covering(&record).expect("a first term without limits");
        assert_eq!(none_yet.dc_ttl_ms_max, 20_000, "FINDINGS F31: a term with no definitions raised 0");
    }

    #[test]
    fn a_fence_covers_the_largest_floor_any_record_named_and_keeps_it() {
        let record = |floor: u64| LedgerRecord {
            floors: BTreeMap::from([("bkk".to_string(), Quota::per_s(floor, 0))]),
            ..LedgerRecord::empty("api", 1, "c")
        };
        let f = LedgerFence::raised(None, 1, 10_000);
        let f = f.covering(&record(50)).expect("a floor above the fence raises it");
        assert_eq!(f.floors_of("api").map(|m| m["bkk"]), Some(Quota::per_s(50, 0)));
        assert_eq!(f.covering(&record(20)), None, "a lower floor is covered");
        let g = LedgerFence::raised(Some(&f), 2, 4_000);
        assert_eq!(g.floors_of("api"), f.floors_of("api"), "a new term keeps what earlier records named");
        assert_eq!(LedgerFence::parse(&encode(&g)), Ok(g));
    }
}
