//! Invariants checked after every control step, and the periodic metrics sample.

use super::{PodState, Policy, World, MS, S};
use leasehold_core::dc_manager::holder_key;
use leasehold_core::quota::Quota;

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
        self.check_one_term_acts();
        self.check_pods_nest_in_their_issuers();
        self.check_managers_books();
        self.check_removed_limit_admits_nothing(&per_dc);
        // The limit in force: a lowered R or B holds one DC-lease lifetime after the change.
        let limit = self.live.limit_in_force(self.now);
        self.metrics.overshoot(total.saturating_sub(limit));
        let allowed = limit.saturating_add(self.sc.overshoot_bound());
        if !total.fits_in(&allowed) {
            let msg = format!("pods may spend {total} together, above the limit in force {allowed}");
            self.metrics.invariant(self.now, msg);
        }
        // The leader the KV names (a paused, deposed one may still believe it leads).
        let named = self.leader_keys.coordinator();
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
        if local < core.issues_from_ns() {
            // A leader that found the record lost knows its books miss the leases it held; it
            // issues nothing until they have expired (only the total above can be judged).
            return;
        }
        // Nesting: a DC's pods never hold more than the floor the coordinator reserves for it
        // plus what it counts for the DC's holders.
        // Every holder of the DC counts: a new manager term's pods and the previous term's may
        // overlap, and so do their DC leases on the coordinator's books.
        let record = core.record();
        for (d, used) in per_dc.iter().enumerate() {
            let mut holders: Vec<&str> = record
                .leases
                .iter()
                .filter(|l| l.dc == self.sc.dcs[d].name)
                .map(|l| record.counted_holder(&l.holder))
                .collect();
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

    /// A removed limit admits nothing once its leases end, emergency allowance included: once
    /// the newest ledger record that reached DC `d` has said for a DC-lease and a pod-lease
    /// lifetime (twice each, and a second) that the limit was removed, the DC's pods may spend
    /// nothing, whatever an older record replayed or delivered late says.
    fn check_removed_limit_admits_nothing(&mut self, per_dc: &[Quota]) {
        let margin = 2 * (self.live.dc_ttl_ms + self.live.pod_ttl_ms_max) * MS + S;
        for (d, used) in per_dc.iter().enumerate() {
            let settled = self.dcs[d].removed_since.is_some_and(|since| self.now > since + margin);
            if settled && *used != Quota::ZERO {
                let msg = format!("dc {} pods may spend {used} of a removed limit", self.sc.dcs[d].name);
                self.metrics.invariant(self.now, msg);
            }
        }
    }

    /// Leadership's promise, on ground truth: at no instant do two terms of one role act (each
    /// judged on its own clock). The quiet periods and the coordinator's books rely on it.
    fn check_one_term_acts(&mut self) {
        let coordinators = (0..self.coords.len()).filter(|&c| self.coord_acts(c)).count();
        if coordinators > 1 {
            self.metrics.invariant(self.now, format!("{coordinators} coordinator terms act at once"));
        }
        for d in 0..self.dcs.len() {
            let acting = self.dcs[d].acting(self.now);
            if acting.len() > 1 {
                let msg = format!("{} manager terms of dc {} act at once", acting.len(), self.sc.dcs[d].name);
                self.metrics.invariant(self.now, msg);
            }
        }
    }

    /// Every running DC manager's ledger: its lasting leases within its capacity, and the sums it
    /// remembers equal to its books (`Ledger::check`).
    fn check_managers_books(&mut self) {
        let mut breaches = Vec::new();
        for dc in &self.dcs {
            for m in dc.mgrs.iter().filter(|m| m.alive) {
                let Some(core) = m.core.as_ref() else { continue };
                if let Err(e) = core.ledger().check(m.clock.local(self.now)) {
                    breaches.push(format!("{} manager ledger: {e}", core.config().instance));
                }
            }
        }
        breaches.into_iter().for_each(|msg| self.metrics.invariant(self.now, msg));
    }

    /// Sub-lease nesting, on ground truth: a lease a pod may spend is counted, in full, by the
    /// manager term that issued it (while that term lives; a dead term's pod leases are covered by
    /// its successor's quiet period and the DC check above). A continuation its pod has not yet
    /// confirmed is the earlier term's lease by another name: the pod must spend no more than the
    /// lease it continues (the DC check above covers the rest).
    fn check_pods_nest_in_their_issuers(&mut self) {
        for p in 0..self.pods.len() {
            let slot = &self.pods[p];
            if slot.state == PodState::Down {
                continue;
            }
            let Some(core) = slot.core.as_ref() else { continue };
            let Some(a) = core.applied(slot.clock.local(self.now)) else { continue };
            let issuer = self.dcs[slot.dc]
                .mgrs
                .iter()
                .find(|m| m.alive && m.core.as_ref().is_some_and(|c| c.config().instance == a.issuer));
            let Some(m) = issuer else { continue };
            let holder = holder_key(&core.config().pod, a.incarnation);
            let issuer = m.core.as_ref().expect("found");
            let counted = issuer.ledger().holder_claim(&holder, m.clock.local(self.now));
            let continued = || {
                let view = issuer.pods().find(|(k, _)| **k == holder).map(|(_, v)| v);
                view.and_then(|v| v.continuation)
                    .is_some_and(|c| c.version == a.version && a.quota.fits_in(&c.continues_quota))
            };
            if !a.quota.fits_in(&counted) && !continued() {
                let msg = format!(
                    "pod {} may spend {} under {}'s lease {}, which counts {counted} for it",
                    core.config().pod,
                    a.quota,
                    a.issuer,
                    a.version
                );
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
                    slot.acting(self.now).first().map_or(0.0, |&r| {
                        let m = &slot.mgrs[r];
                        m.core.as_ref().expect("acting").budget(m.clock.local(self.now)).0.rate_per_s()
                    })
                }
                _ => 0.0,
            })
            .collect();
        self.metrics.sample(self.now, &demand, &budgets);
        if let Some(c) = (0..self.coords.len()).find(|&c| self.coord_acts(c)) {
            let rate = self.coords[c].core.as_ref().expect("acting").effective_quota().rate_per_s();
            if let Some(e) = self.metrics.effective_rate_per_s.get_mut((self.now / S) as usize) {
                *e = rate;
            }
        }
    }
}
