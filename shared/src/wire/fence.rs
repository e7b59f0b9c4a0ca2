//! The ledger fence: one key in the leader bucket (a different stream from the ledger) that
//! outlives a lost ledger record and says what such a record may have held.

use super::{check_id, decode, LedgerRecord, WireError, WireMessage, MAX_TTL_MS, SCHEMA_VERSION};
use crate::quota::Quota;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

fn v1() -> u32 {
    SCHEMA_VERSION
}

/// Written by every new coordinator leader before its first record, and again before any record
/// that names a floor above what it holds (compare-and-set on the fence's revision), so it bounds
/// every record that may exist or have existed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerFence {
    #[serde(default = "v1")]
    pub v: u32,
    /// The highest coordinator epoch under which a ledger record may have been written.
    pub epoch: u64,
    /// The longest `dc_ttl_ms` of any term that raised the fence: no DC lease in any record ever
    /// lasted longer. 0 when unknown (a fence written as a bare decimal epoch).
    #[serde(default)]
    pub dc_ttl_ms_max: u64,
    /// Per limit, per DC: the largest floor any record named or reserved. A DC cut off from the
    /// coordinator may still spend the last floor it read, so a leader that finds a record lost
    /// reserves these until each DC confirms the floor it names now.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub floors_max: BTreeMap<String, BTreeMap<String, Quota>>,
}

impl LedgerFence {
    /// The fence a new term of `epoch` writes over `previous`, with its own `dc_ttl_ms`.
    pub fn raised(previous: Option<&LedgerFence>, epoch: u64, dc_ttl_ms: u64) -> Self {
        let earlier = previous.map_or(0, |f| f.dc_ttl_ms_max);
        let floors_max = previous.map(|f| f.floors_max.clone()).unwrap_or_default();
        LedgerFence { v: SCHEMA_VERSION, epoch, dc_ttl_ms_max: earlier.max(dc_ttl_ms), floors_max }
    }

    /// The fence that must be written before `record` may be: `None` if this one already covers
    /// every floor the record names or reserves.
    pub fn covering(&self, record: &LedgerRecord) -> Option<LedgerFence> {
        let mut raised = self.clone();
        let held = raised.floors_max.entry(record.limit.clone()).or_default();
        let mut changed = false;
        for (dc, floor) in record.floors.iter().chain(&record.floors_reserved) {
            let max = held.entry(dc.clone()).or_insert(Quota::ZERO);
            if !floor.fits_in(max) {
                *max = (*max).max(*floor);
                changed = true;
            }
        }
        changed.then_some(raised)
    }

    /// The largest floors any record of `limit` named or reserved, per DC.
    pub fn floors_of(&self, limit: &str) -> Option<&BTreeMap<String, Quota>> {
        self.floors_max.get(limit)
    }

    /// The stored value: JSON, or a bare decimal epoch as older coordinators wrote it.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        match std::str::from_utf8(bytes).ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(epoch) => Ok(LedgerFence { v: SCHEMA_VERSION, epoch, dc_ttl_ms_max: 0, floors_max: BTreeMap::new() }),
            None => decode(bytes),
        }
    }
}

impl WireMessage for LedgerFence {
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
        let bare = LedgerFence { v: 1, epoch: 12, dc_ttl_ms_max: 0, floors_max: BTreeMap::new() };
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
    fn a_fence_covers_the_largest_floor_any_record_named_and_keeps_it() {
        let record = |floor: u64| LedgerRecord {
            v: 1,
            limit: "api".into(),
            epoch: 1,
            writer: "c".into(),
            leases: Vec::new(),
            floors: BTreeMap::from([("bkk".to_string(), Quota::per_s(floor, 0))]),
            floor_versions: BTreeMap::new(),
            floors_reserved: BTreeMap::new(),
            capacity: None,
            inherited_below: BTreeMap::new(),
            lost_floors: BTreeMap::new(),
            lost_wait_dc_ttl_ms: None,
            dc_holders: BTreeMap::new(),
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
