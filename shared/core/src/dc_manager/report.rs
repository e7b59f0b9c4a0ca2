//! The DC manager's report to the coordinator: its demand, its pods, and which DC lease and
//! floor it is bound by (the acks upward of the module docs).

use super::{DcManagerCore, HeldDcLease};
use crate::quota::Quota;
use crate::wire::{DcReport, SCHEMA_VERSION};

impl DcManagerCore {
    pub(super) fn report(&mut self, now_ns: u64) -> DcReport {
        // (No `Ledger::expire` here: the sums count only leases live at each instant, and the
        // books are swept at every split, at least once a renew interval. Sweeping at every tick
        // too was 5% of a DC manager's time at 1,000 limits × 100 pods. An instant already past
        // is asked as now, which is what the sweep made of it: a lease ended since counts no
        // more.)
        let outstanding = self.ledger.outstanding(now_ns);
        // Newest lease whose amount covers what pods may still spend, and after whose end the
        // pods may spend no more than the floor (leases cut under an older, longer lease may
        // outlive it: a takeover that shortened `dc_ttl_ms`).
        // During the quiet period the floor is not this term's to count: earlier terms' pods
        // may still spend all of it.
        let quiet = now_ns < self.floors.usable_from_ns && !self.cfg.bugs.ack_by_amount_only();
        let floor = if quiet { Quota::ZERO } else { self.floors.amount };
        let covers = |l: &&HeldDcLease| {
            outstanding.fits_in(&floor.saturating_add(l.quota))
                && (self.cfg.bugs.ack_by_amount_only()
                    || self.ledger.outstanding(l.expires_at_ns.max(now_ns)).fits_in(&floor))
        };
        if let Some(l) = self.dc_leases.held.iter().rev().find(covers) {
            self.dc_leases.acked = Some(self.dc_leases.acked.map_or(l.version, |a| a.max(l.version)));
        }
        let floor_in_use = self.floor_in_use(outstanding, now_ns);
        let (eligible, demand_milli) = self.pods.eligible_count_and_demand_milli(&self.cfg, now_ns);
        let seq = self.dc_leases.sent.record(now_ns);
        let (upstream_calls, upstream_429) = self.pods.take_upstream();
        DcReport {
            v: SCHEMA_VERSION,
            limit: self.cfg.limit.clone(),
            dc: self.cfg.dc.clone(),
            holder: self.cfg.instance.clone(),
            term: self.cfg.epoch,
            seq,
            demand: Quota::new(demand_milli, 0),
            pods_healthy: eligible as u32,
            lease_in_use: self.dc_leases.acked,
            floor_in_use,
            floor_version: self.confirmable_floor_version(),
            upstream_calls,
            upstream_429,
            counts_predecessor: true,
        }
    }
}
