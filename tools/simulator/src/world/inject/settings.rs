//! Settings faults: rolling restarts with new TTLs, and new limit definitions.

use super::Struck;
use crate::faults::{LimitEdit, Rollout};
use crate::world::World;
use leasehold_core::quota::Quota;

impl World {
    /// A rolling restart with new settings: the TTLs and the emergency allowance shrink to
    /// `ttl_scale` (every other change in a run; the others bring them back), `pod_ttl_ms` only
    /// if not `dc_ttl_only`; then the leaders `restarted` names restart.
    pub(super) fn change_config(&mut self, ttl_scale: f64, restarted: Rollout, dc_ttl_only: bool) -> Struck {
        let l = &mut self.live;
        l.changes += 1;
        let shrink = l.changes % 2 == 1;
        let scale = |base: u64| if shrink { (base as f64 * ttl_scale) as u64 } else { base };
        l.dc_ttl_ms = scale(self.sc.dc_ttl_ms);
        // Some rollouts lower dc_ttl_ms alone: nothing ties the pod leases' TTL to it, and a pod
        // lease cut from the floor alone then outlives DC leases.
        l.pod_ttl_ms = if dc_ttl_only { self.sc.pod_ttl_ms } else { scale(self.sc.pod_ttl_ms) };
        l.pod_ttl_ms_max = l.pod_ttl_ms_max.max(l.pod_ttl_ms);
        let e = self.sc.emergency_per_dc;
        l.emergency_per_dc = if shrink { Quota::new(scale(e.rate_milli_per_s), scale(e.burst_milli)) } else { e };
        // The leader restarts last (standbys already run the new settings): the coordinators'
        // (dc_ttl_ms), or each DC's managers' (pod_ttl_ms and E). Each DC's standbys restart with
        // the new settings first (a process takes its settings when it starts: what its term
        // records say), then its leader: the new term's own pod TTL is the new one, the old
        // term's leases run on.
        match restarted {
            Rollout::Coordinators => {
                if let Some(c) = self.leader() {
                    self.restart_coordinator(c);
                }
            }
            Rollout::DcManagers => {
                for d in 0..self.dcs.len() {
                    let leading = self.leading_mgr(d);
                    for r in 0..self.dcs[d].mgrs.len() {
                        if leading != Some((d, r)) && self.dcs[d].mgrs[r].alive {
                            self.restart_mgr(d, r);
                        }
                    }
                    if let Some((d, r)) = leading {
                        self.crash_mgr(d, r);
                        self.restart_mgr(d, r);
                    }
                }
            }
        }
        Struck::Everyone
    }

    /// The definition `change` names when the fault `starts`, or the scenario's when it heals.
    /// [`LimitEdit::Remove`] removes the limit (R, B and every floor zero: what a term runs a
    /// removed limit on); [`LimitEdit::Scale`] scales the parts it names from the scenario's.
    /// Applied live by the leading term, or (`by_restart`) by restarting every coordinator
    /// process that holds a term; standbys elected later read the new definition.
    pub(super) fn change_limit(&mut self, change: LimitEdit, by_restart: bool, starts: bool) -> Struck {
        let LimitEdit::Scale { rate, burst, floor_from, scale } = change else {
            let quota = if starts { Quota::ZERO } else { self.sc.quota };
            for (d, f) in self.live.floors.iter_mut().enumerate() {
                *f = if starts { Quota::ZERO } else { self.sc.dcs[d].floor };
            }
            self.apply_limit_change(by_restart, quota);
            return Struck::Everyone;
        };
        let s = if starts { scale } else { 1.0 };
        let scaled = |v: u64| (v as f64 * s) as u64;
        let base = self.sc.quota;
        let mut quota = self.live.quota;
        if rate {
            quota.rate_milli_per_s = scaled(base.rate_milli_per_s);
        }
        if burst {
            quota.burst_milli = scaled(base.burst_milli);
        }
        if let Some(giver) = floor_from {
            let taker = (giver + 1) % self.dcs.len();
            let (g, t) = (self.sc.dcs[giver].floor, self.sc.dcs[taker].floor);
            let kept = Quota::new(scaled(g.rate_milli_per_s), scaled(g.burst_milli));
            self.live.floors[giver] = kept;
            self.live.floors[taker] = t.saturating_add(g.saturating_sub(kept));
        }
        self.apply_limit_change(by_restart, quota);
        Struck::Everyone
    }

    fn apply_limit_change(&mut self, by_restart: bool, quota: Quota) {
        let in_force = self.live.limit_in_force(self.now);
        self.live.set_quota(quota, self.now, self.change_window_end());
        // Some changes restart the coordinators (a new term with the new definition), the others
        // are followed live by the term in place, as the service follows `lh_limits`.
        for c in 0..self.coords.len() {
            if !self.coords[c].alive || self.coords[c].core.is_none() {
                continue;
            }
            if by_restart {
                self.restart_coordinator(c);
            } else if self.coords[c].paused_until > self.now {
                // Frozen: it applies the change when it wakes, after the write it was about to make.
                self.coords[c].change_on_wake = Some(in_force);
            } else {
                self.reconfigure_coordinator(c);
            }
        }
    }

    /// When a lower limit stops being in force if a leader applies it now: one DC-lease lifetime.
    fn change_window_end(&self) -> u64 {
        let ttl_ms = self.live.dc_ttl_ms.max(self.sc.dc_ttl_ms);
        self.expiry().issuer_live_until_ns(self.now, ttl_ms)
    }

    /// Coordinator `c` takes the definition in force now in its term and writes its record. A
    /// leader that applies it late (it was frozen) keeps `in_force_before` in force for a full
    /// window from now: it may have cut leases under it until then.
    pub(in crate::world) fn reconfigure_coordinator_late(&mut self, c: usize, in_force_before: Quota) {
        let end = self.change_window_end();
        self.live.hold_until(in_force_before, end);
        self.reconfigure_coordinator(c);
    }

    fn reconfigure_coordinator(&mut self, c: usize) {
        let cfg = self.limit_config();
        let local = self.coords[c].clock.local(self.now);
        let Some(core) = self.coords[c].core.as_mut() else { return };
        core.reconfigure(cfg, local).expect("the same limit");
        self.metrics.live_reconfigurations += 1;
        self.write_record(c, false);
    }
}
