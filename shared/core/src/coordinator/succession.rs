//! A DC's successive manager terms on the coordinator's books: a term whose report says
//! `counts_predecessor` answers for its predecessor's pod leases, so the predecessor's DC leases
//! move under it (its claim is the larger of theirs and its own, and its confirmation of a newer
//! lease releases them) and its leases say how much they grant (`DcLease::predecessor`).

use super::{CoordinatorCore, DcView};
use crate::quota::Quota;
use crate::wire::{DcReport, LeaseVersion, PredecessorLeases};

/// The DC's demand and healthy pods as its predecessor term last reported them, and until when
/// they count ([`CoordinatorCore::heard_demand`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InheritedDemand {
    /// The predecessor's last demand rate, in milli-requests per second.
    pub demand_milli: u64,
    /// Its last count of healthy pods.
    pub pods_healthy: u32,
    /// Until when they stand (the coordinator's clock).
    pub until_ns: u64,
}

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

    /// The demand and healthy pods `r` stands for: its own, but no less than what the
    /// predecessor last reported while the term that took over may not have heard every pod
    /// yet (its first reports say none: its pods report to it from their next period on, at
    /// least once a second). Otherwise the DC's share went to the others at the next split and
    /// came back only as fast as the rebalancer lets it. Demand shapes the split, never the
    /// books: waste at worst, for two renew intervals, if the pods really are gone.
    pub(super) fn heard_demand(view: &mut DcView, r: &DcReport, now_ns: u64) -> (u64, u32) {
        let own = (r.demand.rate_milli_per_s, r.pods_healthy);
        match view.inherited {
            Some(i) if now_ns < i.until_ns => (own.0.max(i.demand_milli), own.1.max(i.pods_healthy)),
            Some(_) => {
                view.inherited = None;
                own
            }
            None => own,
        }
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
