//! The floors a DC's managers have confirmed: one key per DC in the DC's own leader bucket.

use super::{check_id, LeaseVersion, WireError, WireMessage, SCHEMA_VERSION};
use crate::quota::Quota;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

fn v1() -> u32 {
    SCHEMA_VERSION
}

/// Per limit, the newest floor (with its version) any term of the DC may have confirmed to the
/// coordinator (`DcReport.floor_version`): a term writes it (compare-and-set) before it confirms
/// it. The coordinator still reserves at least that floor for the DC (it releases a floor only
/// once a newer one is confirmed, which would be written here first), so a successor that cannot
/// read the ledger may run on it (`DcManagerCore::on_vouched_floor`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FloorConfirmations {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// Per limit, the newest floor confirmed.
    pub floors: BTreeMap<String, ConfirmedFloor>,
}

/// A floor and its version as a DC manager took it (from a record, or from the DC lease that
/// carried it: then the lease's version).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmedFloor {
    /// The floor.
    pub floor: Quota,
    /// Its version.
    pub version: LeaseVersion,
}

impl FloorConfirmations {
    /// Replace `limit`'s floor by `taken` if `taken` is newer.
    pub fn raise(&mut self, limit: &str, taken: ConfirmedFloor) {
        self.v = SCHEMA_VERSION;
        let slot = self.floors.entry(limit.to_string()).or_insert(taken);
        if taken.version > slot.version {
            *slot = taken;
        }
    }

    /// These with `limit`'s floor replaced by `taken` if `taken` is newer.
    pub fn with(&self, limit: &str, taken: ConfirmedFloor) -> Self {
        let mut out = self.clone();
        out.raise(limit, taken);
        out
    }
}

impl WireMessage for FloorConfirmations {
    /// Every limit of a DC in one value (as a ledger group holds several limits).
    const MAX_BYTES: usize = 1024 * 1024 - 4096;
    fn validate(&self) -> Result<(), WireError> {
        self.floors.keys().try_for_each(|l| check_id("floors", l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{decode, encode};

    fn taken(floor_per_s: u64, seq: u64) -> ConfirmedFloor {
        ConfirmedFloor { floor: Quota::per_s(floor_per_s, 4), version: LeaseVersion { epoch: 3, seq } }
    }

    #[test]
    fn a_confirmed_floor_is_replaced_only_by_a_newer_one_and_round_trips() {
        let a = FloorConfirmations::default().with("api", taken(50, 2));
        let b = a.with("api", taken(80, 1)).with("second", taken(10, 0));
        assert_eq!(b.floors["api"], taken(50, 2), "an older floor never replaces a newer one");
        assert_eq!(b.with("api", taken(20, 3)).floors["api"], taken(20, 3), "a newer one does, lower or not");
        assert_eq!(decode::<FloorConfirmations>(&encode(&b)).unwrap(), b);
        let empty_limit =
            br#"{"v":1,"floors":{"":{"floor":{"rate_milli_per_s":1,"burst_milli":0},"version":{"epoch":1,"seq":0}}}}"#;
        assert!(decode::<FloorConfirmations>(empty_limit).is_err());
    }
}
