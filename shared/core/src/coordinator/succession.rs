//! A DC's successive manager terms on the coordinator's books: a term whose report says
//! `counts_predecessor` answers for its predecessor's pod leases, so the predecessor's DC leases
//! move under it (its claim is the larger of theirs and its own, and its confirmation of a newer
//! lease releases them) and its leases say how much they grant (`DcLease::predecessor`).

use super::CoordinatorCore;
use crate::quota::Quota;
use crate::wire::{LeaseVersion, PredecessorLeases};

impl CoordinatorCore {
    /// The DC's earlier term `old` (of term `old_term`) is succeeded by `new`, which answers for
    /// its pod leases: its DC leases move under `new` (see [`super::DcView::predecessor`]).
    pub(super) fn move_leases(&mut self, dc: &str, old: &str, old_term: u64, new: &str) {
        let Some(newest) = self.ledger.move_holder(&old.to_string(), &new.to_string()) else { return };
        let moved: Vec<(String, LeaseVersion)> = self.leases.keys().filter(|(h, _)| h == old).cloned().collect();
        for key in moved {
            let lease = self.leases.remove(&key).expect("listed");
            self.leases.insert((new.to_string(), key.1), lease);
        }
        self.dcs.get_mut(dc).expect("reporting").predecessor = Some((newest, old_term));
    }

    /// What the leases moved under `dc`'s holder (up to the version its view names) still live
    /// at `now_ns` grant at most, and the term they came from; forgotten once none is live.
    pub(super) fn predecessor_of(&mut self, dc: &str, now_ns: u64) -> Option<PredecessorLeases> {
        let view = self.dcs.get(dc)?;
        let ((through, term), holder) = (view.predecessor?, view.holder.as_ref()?);
        let quota = self
            .ledger
            .entries()
            .filter(|(h, e)| *h == holder && e.version <= through && e.live_until_ns > now_ns)
            .map(|(_, e)| e.quota)
            .reduce(Quota::max);
        if quota.is_none() {
            self.dcs.get_mut(dc).expect("found").predecessor = None;
        }
        Some(PredecessorLeases { quota: quota?, term })
    }
}
