//! The DC's floor on the manager's side.
//!
//! A floor has no expiry: a manager cut off from the coordinator keeps the last one it read. So
//! the manager (1) never goes back to a floor older than the one it uses (floors carry versions),
//! and (2) tells the coordinator, in `DcReport.floor_in_use`, the largest floor its pods may
//! still be spending under, so that the coordinator knows when an older, larger floor it still
//! reserves is no longer used.

use super::{DcManagerCore, DcOutput, Pass};
use crate::quota::Quota;
use crate::wire::LeaseVersion;

impl DcManagerCore {
    /// The DC's reserved floor as the coordinator's durable record names it, with its version
    /// ([`LedgerRecord::floor_of`](crate::wire::LedgerRecord::floor_of)). A floor not newer than
    /// the one in use is ignored: a delayed record never brings back a floor the coordinator may
    /// already have given to someone else.
    /// A term awaiting its first direct read of the ledger ignores it (`unread.rs`).
    pub fn on_floor(&mut self, floor: Quota, version: LeaseVersion, now_ns: u64) -> Vec<DcOutput> {
        if self.ledger_unread || !self.take_floor(floor, version) {
            return Vec::new();
        }
        self.pass(now_ns, Pass::Full)
    }

    /// Use `floor` if `version` is newer than the floor's in use; true if the floor changed.
    pub(super) fn take_floor(&mut self, floor: Quota, version: LeaseVersion) -> bool {
        let newer = self.floors.version.is_none_or(|v| version > v) || self.cfg.bugs.dc_takes_any_floor();
        if !newer {
            return false;
        }
        self.floors.version = Some(version);
        std::mem::replace(&mut self.floors.amount, floor) != floor
    }

    /// A pass is about to cut pod leases from the floor in use: it bounds what the pods may
    /// spend from now on, whether or not a report goes out before the floor changes again (a
    /// term's first passes after its quiet period run before any report names a floor).
    pub(super) fn note_floor_spent(&mut self, now_ns: u64) {
        if !self.floor_usable(now_ns).is_zero() {
            self.floors.bound = self.floors.bound.max(self.floors.amount);
        }
    }

    /// The largest floor this DC's pods may still spend under, if this term knows it: not
    /// before the quiet period ends (pods of earlier terms may hold leases cut from any floor
    /// they saw). The floor in use, once the pods' leases fit it plus the DC leases the
    /// coordinator still counts (the acked one and newer) and those that outlive the first of
    /// these DC leases fit the floor alone; until then the larger floor before.
    pub(super) fn floor_in_use(&mut self, outstanding: Quota, now_ns: u64) -> Option<Quota> {
        if now_ns < self.floors.usable_from_ns {
            return None;
        }
        let counted: Vec<_> = self
            .dc_leases
            .held
            .iter()
            .filter(|l| l.expires_at_ns > now_ns && self.dc_leases.acked.is_none_or(|a| l.version >= a))
            .collect();
        let counted_quota = counted.iter().fold(Quota::ZERO, |m, l| m.max(l.quota));
        // Pod leases that outlive the DC leases counted beside the floor must fit the floor.
        let first_end = counted.iter().map(|l| l.expires_at_ns).min().unwrap_or(now_ns);
        let outlive = self.ledger.outstanding(first_end);
        let fits = outstanding.fits_in(&self.floors.amount.saturating_add(counted_quota))
            && (self.cfg.bugs.ack_by_amount_only() || outlive.fits_in(&self.floors.amount));
        self.floors.bound = if fits { self.floors.amount } else { self.floors.bound.max(self.floors.amount) };
        Some(self.floors.bound)
    }
}
