//! Invariants checked after every control step, and the periodic metrics sample.

use super::{PodState, Policy, World, MS, S};
use leasehold_shared::quota::Quota;

impl World {
    /// Conservation, checked on ground truth (what pods may spend right now) and on the books.
    pub(super) fn check(&mut self) {
        if self.policy != Policy::Leasehold {
            return;
        }
        let mut total = Quota::ZERO;
        let mut per_dc = vec![Quota::ZERO; self.dcs.len()];
        for slot in &self.pods {
            if slot.state == PodState::Down {
                continue;
            }
            let local = slot.clock.local(self.now);
            if let Some(a) = slot.core.as_ref().and_then(|c| c.applied(local)) {
                total = total.saturating_add(a.quota);
                per_dc[slot.dc] = per_dc[slot.dc].saturating_add(a.quota);
            }
        }
        // The limit in force: a lowered R or B holds one DC-lease lifetime after the change.
        let limit = self.live.limit_in_force(self.now);
        self.metrics.overshoot(total.saturating_sub(limit));
        let allowed = limit.saturating_add(self.sc.overshoot_bound());
        if !total.fits_in(&allowed) {
            let msg = format!("pods may spend {total} together, above the limit in force {allowed}");
            self.metrics.invariant(self.now, msg);
        }
        // The leader the KV names (a paused, deposed one may still believe it leads).
        let named = self.leader_keys.holder("coordinator");
        let Some(c) = (0..self.coords.len()).find(|&c| {
            Some(self.coords[c].id.as_str()) == named && self.coords[c].core.is_some() && self.coords[c].alive
        }) else {
            return;
        };
        let local = self.coords[c].clock.local(self.now);
        let core = self.coords[c].core.as_ref().expect("leader");
        if let Err(e) = core.ledger().check(local) {
            self.metrics.invariant(self.now, format!("coordinator ledger: {e}"));
        }
        // Nesting: a DC's pods never hold more than the floor the coordinator reserves for it
        // plus what it counts for the DC's holders.
        // Every holder of the DC counts: a new manager term's pods and the previous term's may
        // overlap, and so do their DC leases on the coordinator's books.
        let record = core.record();
        for (d, used) in per_dc.iter().enumerate() {
            let mut holders: Vec<&str> =
                record.leases.iter().filter(|l| l.dc == self.sc.dcs[d].name).map(|l| l.holder.as_str()).collect();
            holders.sort_unstable();
            holders.dedup();
            let counted = holders
                .iter()
                .fold(Quota::ZERO, |s, h| s.saturating_add(core.ledger().holder_claim(&h.to_string(), local)));
            let floor = core.floor_reserved(&self.sc.dcs[d].name, local);
            let allowed = counted.saturating_add(floor).saturating_add(self.sc.emergency_per_dc);
            if !used.fits_in(&allowed) {
                let msg =
                    format!("dc {} pods hold {used}, above floor + counted DC lease {allowed}", self.sc.dcs[d].name);
                self.metrics.invariant(self.now, msg);
            }
        }
    }

    pub(super) fn on_sample(&mut self) {
        self.push(self.now + 100 * MS, super::Ev::Sample);
        self.upstream.advance(self.now);
        let t = self.now as f64 / S as f64;
        let demand: Vec<f64> = (0..self.dcs.len()).map(|d| self.sc.demand(d, t)).collect();
        let budgets: Vec<f64> = (0..self.dcs.len())
            .map(|d| match self.policy {
                Policy::Leasehold => {
                    let slot = &self.dcs[d];
                    slot.acting(self.now).map_or(0.0, |r| {
                        let m = &slot.mgrs[r];
                        m.core.as_ref().expect("acting").budget(m.clock.local(self.now)).0.rate_per_s()
                    })
                }
                _ => 0.0,
            })
            .collect();
        self.metrics.sample(self.now, &demand, &budgets);
    }
}
