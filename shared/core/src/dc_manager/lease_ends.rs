//! Pod grants against the instants the coordinator stops counting a DC lease.
//!
//! The manager's ledger holds the pods' leases within the budget (floor + current DC lease) at
//! the moment of each grant, and after a shrink it lets the leases cut under the larger budget
//! drain by themselves ("inherited"). That is safe only while what backed the larger budget is
//! still counted upstream. An older, larger DC lease stops being counted when it expires, with no
//! ack needed; a pod lease cut from the floor alone (no DC lease current: the full pod TTL,
//! nested in nothing) may live past that instant. So a grant must also keep, at the end of every
//! DC lease the coordinator may still count, the pod leases still admitting then within what
//! stays counted after it: the floor and the DC leases that end later.

use super::{DcManagerCore, HolderKey};
use crate::expiry::NS_PER_MS;
use crate::quota::{Quota, MILLI};

impl DcManagerCore {
    /// The most `pod` may be granted now, in a lease the ledger counts until `live_until_ns`, so
    /// that from now on, and at the end of each DC lease the coordinator may still count, the
    /// pod leases still admitting (their counted end less the egress spread: calls in flight are
    /// the coordinator's to count) fit the floor and the DC leases still running then. A lease
    /// whose end has passed on this clock backs nothing: the coordinator may stop counting it at
    /// any instant. The floor counts as in the budget ([`Self::floor_usable`]).
    pub(super) fn room_at_dc_lease_ends(&self, pod: &HolderKey, live_until_ns: u64, now_ns: u64) -> Quota {
        if self.cfg.bugs.pod_lease_outlives_counted_dc_lease() {
            return Quota::new(u64::MAX, u64::MAX);
        }
        let floor = self.floor_usable(now_ns);
        let egress_ns = self.cfg.expiry.egress_spread_ms * NS_PER_MS;
        // Leases older than the one acked are released upstream: they back nothing. (Walked
        // again each time rather than collected: this runs for every pod of every pass.)
        let counted = || self.dc_leases.held.iter().filter(|l| self.dc_leases.acked.is_none_or(|a| l.version >= a));
        let room_after = |at_ns: u64, counted_then: Quota| {
            let others = self.ledger.outstanding(at_ns).saturating_sub(self.ledger.holder_claim(pod, at_ns));
            counted_then.saturating_sub(others)
        };
        // From now on: a DC lease whose end has passed on this clock may stop counting at any
        // instant, so only those still running back what pods admit from now (or the budget,
        // which in best-effort mode holds the emergency allowance instead).
        let running = counted().filter(|l| l.expires_at_ns > now_ns).fold(Quota::ZERO, |m, l| m.max(l.quota));
        let mut room = Quota::new(u64::MAX, u64::MAX);
        let now_after = now_ns.saturating_add(egress_ns);
        if live_until_ns > now_after {
            room = room_after(now_after, self.budget(now_ns).0.max(floor.saturating_add(running)));
        }
        for end in counted().map(|l| l.expires_at_ns) {
            // Pods admitting after `end` hold leases counted past `end + egress`.
            let after = end.saturating_add(egress_ns);
            if end <= now_ns || live_until_ns <= after {
                continue;
            }
            let later = counted().filter(|l| l.expires_at_ns > end).fold(Quota::ZERO, |m, l| m.max(l.quota));
            room = room.min(room_after(after, floor.saturating_add(later)));
        }
        room
    }

    /// The ledger's grantable amount for `pod`, within [`room_at_dc_lease_ends`](Self::room_at_dc_lease_ends),
    /// in whole tokens of burst: a fraction of a token can never admit a call, and a rate with no
    /// token admits nothing, so a grant with less than one token is no grant at all.
    pub(super) fn grantable(&self, pod: &HolderKey, target: Quota, live_until_ns: u64, now_ns: u64) -> Quota {
        let room =
            self.ledger.grantable(pod, target, now_ns).min(self.room_at_dc_lease_ends(pod, live_until_ns, now_ns));
        let tokens = room.burst_milli / MILLI * MILLI;
        if tokens == 0 {
            return Quota::ZERO;
        }
        Quota::new(room.rate_milli_per_s, tokens)
    }
}
