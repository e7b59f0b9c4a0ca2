//! Applying and healing scheduled faults.

use super::{Ev, PodState, World, MS, S};
use crate::faults::FaultKind;
use leasehold_core::quota::Quota;

impl World {
    fn pick_pod(&self, target: u64, want: impl Fn(PodState) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.pods.len()).filter(|&p| want(self.pods[p].state)).collect();
        (!candidates.is_empty()).then(|| candidates[(target % candidates.len() as u64) as usize])
    }

    fn crash_mgr(&mut self, d: usize, r: usize) {
        let m = &mut self.dcs[d].mgrs[r];
        m.alive = false;
        m.core = None;
        m.incarnation += 1;
        m.send_on_wake.clear();
        m.pause_after_write_ns = None;
    }

    /// A new process in the replica's place, as a standby.
    fn restart_mgr(&mut self, d: usize, r: usize) {
        let id = format!("{}-mgr{r}", self.sc.dcs[d].name);
        let bugs = self.sc.bugs;
        let records = self.term_records(d, r);
        let m = &mut self.dcs[d].mgrs[r];
        m.alive = true;
        m.core = None;
        m.incarnation += 1;
        m.election = super::leaders::election(&id, self.sc.leader_ttl_ms, &bugs);
        m.records = records;
        m.record_rules = leasehold_core::dc_manager::RecordRules::with_bugs(bugs);
        m.watched_floor = None;
        m.watch_lag_until = 0;
        let inc = m.incarnation;
        self.push(self.now, Ev::DcTick(d, r, inc));
        // The new process's ledger watch delivers the kept history, oldest first.
        self.replay_records(d, r);
    }

    /// A new coordinator process in the slot's place, as a standby.
    fn restart_coordinator(&mut self, c: usize) {
        let bugs = self.sc.bugs;
        let co = &mut self.coords[c];
        co.alive = true;
        co.core = None;
        co.incarnation += 1;
        co.paused_until = 0;
        co.write_on_wake = false;
        co.change_on_wake = None;
        co.pause_after_write_ns = None;
        co.election = super::leaders::election(&co.id, self.sc.leader_ttl_ms, &bugs);
        let inc = co.incarnation;
        self.push(self.now, Ev::CoordTick(c, inc));
    }

    /// Freeze a manager replica until `until`. It had decided to renew every pod's lease just
    /// before it froze, and sends those leases when it wakes.
    pub(super) fn pause_mgr(&mut self, d: usize, r: usize, until: u64) {
        let stops = self.sc.clocks_stop_while_suspended;
        let m = &mut self.dcs[d].mgrs[r];
        let local = m.clock.local(self.now);
        m.send_on_wake = m.core.as_mut().map(|c| c.tick(local)).unwrap_or_default();
        m.paused_until = until;
        if stops {
            m.clock.stop(self.now, until);
        }
        m.pause_after_write_ns = None;
    }

    /// Freeze a coordinator until `until`, between checking its leadership and writing the
    /// ledger: it finishes that write when it wakes.
    pub(super) fn pause_coordinator(&mut self, c: usize, until: u64) {
        let stops = self.sc.clocks_stop_while_suspended;
        let co = &mut self.coords[c];
        co.paused_until = until;
        co.write_on_wake = true;
        if stops {
            co.clock.stop(self.now, until);
        }
        co.pause_after_write_ns = None;
    }

    /// The leading manager (term open, alive, not paused) of the DC `target` picks.
    fn leading_mgr(&self, target: u64) -> Option<(usize, usize)> {
        let d = (target % self.dcs.len() as u64) as usize;
        let slot = &self.dcs[d];
        (0..slot.mgrs.len())
            .find(|&r| slot.mgrs[r].alive && slot.mgrs[r].paused_until <= self.now && slot.mgrs[r].core.is_some())
            .map(|r| (d, r))
    }

    /// A leading manager, in the DC `target` picks or else the next DC that has one.
    fn any_leading_mgr(&self, target: u64) -> Option<(usize, usize)> {
        let n = self.dcs.len() as u64;
        (0..n).find_map(|i| self.leading_mgr(target % n + i))
    }

    fn leader(&self) -> Option<usize> {
        (0..self.coords.len()).find(|&c| self.coords[c].core.is_some() && self.coords[c].alive)
    }

    pub(super) fn apply_fault(&mut self, i: usize) {
        let f = self.faults[i].clone();
        let heal_at = self.now + (f.duration_s * S as f64) as u64;
        let applied = match f.kind {
            FaultKind::PodCrash => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.stop_pod(p);
                self.faults[i].target = p as u64;
            }),
            FaultKind::PodCrashLoop => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.faults[i].target = p as u64;
                self.crash_loop_step(i, true);
            }),
            FaultKind::PodPause => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.pods[p].state = PodState::Paused;
                self.pods[p].paused_until = heal_at;
                if self.sc.clocks_stop_while_suspended {
                    self.pods[p].clock.stop(self.now, heal_at);
                }
                self.faults[i].target = p as u64;
            }),
            FaultKind::PodDrain => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                let slot = &mut self.pods[p];
                slot.state = PodState::Draining;
                slot.routable = false;
                slot.counters.rejected += slot.queue.len() as u64;
                slot.queue.clear();
                self.faults[i].target = p as u64;
            }),
            FaultKind::PodJoin => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                let first = self.pods.len();
                for _ in 0..f.amount as usize {
                    let p = self.add_pod_slot(d);
                    self.start_pod(p);
                }
                self.faults[i].target = first as u64;
                Some(())
            }
            FaultKind::PartitionDcCoordinator => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                self.net.cut_dcs[d] = true;
                self.standby_watch_behind(d);
                self.faults[i].target = d as u64;
                Some(())
            }
            FaultKind::PartitionPodDc => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.net.cut_pods[p] = true;
                self.faults[i].target = p as u64;
            }),
            FaultKind::CoordinatorCrash => self.leader().map(|c| {
                // One crash in four takes a single-replica ledger bucket down with it: the
                // record is gone, or (every other time) its tail is, leaving the last record an
                // earlier term wrote; the fence (another stream) stays.
                if (f.target >> 8).is_multiple_of(4) && self.kv.record.is_some() {
                    let rolled_back = (f.target >> 10) % 2 == 1 && self.kv.earlier_term_record.is_some();
                    self.kv.record = if rolled_back { self.kv.earlier_term_record.clone() } else { None };
                    self.kv.record_rev += 1;
                    // The kept history goes with the tail (what remains is the rolled-back value).
                    self.kv.history.clear();
                    if let Some(r) = self.kv.record.clone() {
                        self.kv.history.push_back((self.kv.record_rev, r));
                    }
                    if rolled_back {
                        self.metrics.records_rolled_back += 1;
                    } else {
                        self.metrics.records_lost += 1;
                    }
                }
                self.coords[c].alive = false;
                self.coords[c].core = None;
                self.coords[c].incarnation += 1;
                self.faults[i].target = c as u64;
            }),
            FaultKind::CoordinatorPause => self.leader().map(|c| {
                // Odd targets freeze right after the next leader-key renewal is sent.
                if f.target % 2 == 1 {
                    self.coords[c].pause_after_write_ns = Some(heal_at - self.now);
                } else {
                    self.pause_coordinator(c, heal_at);
                }
                self.faults[i].target = c as u64;
            }),
            FaultKind::DcManagerCrash => self.any_leading_mgr(f.target).map(|(d, r)| {
                self.crash_mgr(d, r);
                self.faults[i].target = (d * 16 + r) as u64;
            }),
            FaultKind::DcManagerPause => self.any_leading_mgr(f.target).map(|(d, r)| {
                // Odd targets freeze right after the next leader-key renewal is sent.
                if (f.target / 7) % 2 == 1 {
                    self.dcs[d].mgrs[r].pause_after_write_ns = Some(heal_at - self.now);
                } else {
                    self.pause_mgr(d, r, heal_at);
                }
                self.faults[i].target = (d * 16 + r) as u64;
            }),
            FaultKind::WatchLag => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                self.lag_standby_watch(d, heal_at).map(|t| self.faults[i].target = t)
            }
            FaultKind::DcManagerReconnect => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                self.net.dc_reconnect_at[d] = heal_at;
                self.faults[i].target = d as u64;
                Some(())
            }
            FaultKind::SlowLeaderReplies => {
                self.net.faults.slow_leader_replies_ms = f.amount as u64;
                Some(())
            }
            FaultKind::LedgerWritesUnanswered => {
                self.net.faults.unanswered_ledger_writes_ms = f.amount as u64;
                Some(())
            }
            FaultKind::ConfigChange => {
                let l = &mut self.live;
                l.changes += 1;
                let shrink = l.changes % 2 == 1;
                let scale = |base: u64| if shrink { (base as f64 * f.amount) as u64 } else { base };
                l.dc_ttl_ms = scale(self.sc.dc_ttl_ms);
                // Every other rollout lowers dc_ttl_ms alone: nothing ties the pod leases' TTL
                // to it, and a pod lease cut from the floor alone then outlives DC leases.
                let dc_only = (f.target >> 1) % 2 == 1;
                l.pod_ttl_ms = if dc_only { self.sc.pod_ttl_ms } else { scale(self.sc.pod_ttl_ms) };
                l.pod_ttl_ms_max = l.pod_ttl_ms_max.max(l.pod_ttl_ms);
                let e = self.sc.emergency_per_dc;
                l.emergency_per_dc =
                    if shrink { Quota::new(scale(e.rate_milli_per_s), scale(e.burst_milli)) } else { e };
                // The leader restarts last (standbys already run the new settings): the
                // coordinators' for even targets (dc_ttl_ms), each DC's managers' for odd ones
                // (pod_ttl_ms and E). Each DC's standbys restart with the new settings first (a
                // process takes its settings when it starts: what its term records say), then its
                // leader: the new term's own pod TTL is the new one, the old term's leases run on.
                if f.target.is_multiple_of(2) {
                    if let Some(c) = self.leader() {
                        self.restart_coordinator(c);
                    }
                } else {
                    for d in 0..self.dcs.len() {
                        let leading = self.leading_mgr(d as u64);
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
                Some(())
            }
            FaultKind::LimitChange => {
                self.change_limit(f.target, Some(f.amount));
                Some(())
            }
            FaultKind::MessageLoss => {
                self.net.faults.loss = f.amount;
                Some(())
            }
            FaultKind::MessageDuplication => {
                self.net.faults.duplicate = f.amount;
                Some(())
            }
            FaultKind::MessageDelay => {
                self.net.faults.extra_delay_ms = f.amount as u64;
                Some(())
            }
        };
        if applied.is_some() {
            self.metrics.fault_injected(f.kind);
            self.push(heal_at, Ev::Heal(i));
        }
    }

    /// One step of a crash loop: the pod dies after a short life, or comes back soon after.
    /// The loop ends (with the pod up) when the fault heals.
    pub(super) fn crash_loop_step(&mut self, i: usize, crash: bool) {
        let f = &self.faults[i];
        let (p, heal_at) = (f.target as usize, ((f.at_s + f.duration_s) * S as f64) as u64);
        if self.now >= heal_at {
            return;
        }
        if crash && self.pods[p].state == PodState::Up {
            self.stop_pod(p);
            let down_ns = self.rng.range_u64(20, 300) * MS;
            self.push(self.now + down_ns, Ev::CrashLoop(i, false));
        } else if !crash && self.pods[p].state == PodState::Down {
            self.start_pod(p);
            let life_ns = self.rng.range_u64(300, 1_500) * MS;
            self.push(self.now + life_ns, Ev::CrashLoop(i, true));
        }
    }

    /// New R, B or floors (the parts `target` names): scaled by `scale` from the scenario's, or
    /// back to the scenario's (`None`); with [`CHANGE_REMOVE`](super::live::CHANGE_REMOVE), the
    /// limit is removed (R, B and every floor zero: what a term runs a removed limit on) and
    /// defined again when the fault heals. Applied live by the leading term, or by restarting
    /// every coordinator process that holds a term ([`CHANGE_BY_RESTART`](super::live::CHANGE_BY_RESTART));
    /// standbys elected later read the new definition.
    fn change_limit(&mut self, target: u64, scale: Option<f64>) {
        if target & super::live::CHANGE_REMOVE != 0 {
            let removed = scale.is_some();
            let quota = if removed { Quota::ZERO } else { self.sc.quota };
            for (d, f) in self.live.floors.iter_mut().enumerate() {
                *f = if removed { Quota::ZERO } else { self.sc.dcs[d].floor };
            }
            return self.apply_limit_change(target, quota);
        }
        use super::live::{limit_change_parts, CHANGE_BURST, CHANGE_FLOORS, CHANGE_RATE};
        let (parts, giver) = limit_change_parts(target, self.dcs.len());
        let s = scale.unwrap_or(1.0);
        let scaled = |v: u64| (v as f64 * s) as u64;
        let base = self.sc.quota;
        let mut quota = self.live.quota;
        if parts & CHANGE_RATE != 0 {
            quota.rate_milli_per_s = scaled(base.rate_milli_per_s);
        }
        if parts & CHANGE_BURST != 0 {
            quota.burst_milli = scaled(base.burst_milli);
        }
        if parts & CHANGE_FLOORS != 0 {
            let taker = (giver + 1) % self.dcs.len();
            let (g, t) = (self.sc.dcs[giver].floor, self.sc.dcs[taker].floor);
            let kept = Quota::new(scaled(g.rate_milli_per_s), scaled(g.burst_milli));
            self.live.floors[giver] = kept;
            self.live.floors[taker] = t.saturating_add(g.saturating_sub(kept));
        }
        self.apply_limit_change(target, quota);
    }

    fn apply_limit_change(&mut self, target: u64, quota: Quota) {
        let in_force = self.live.limit_in_force(self.now);
        self.live.set_quota(quota, self.now, self.change_window_end());
        // Half the changes restart the coordinators (a new term with the new definition), half
        // are followed live by the term in place, as the service follows `lh_limits`.
        let restart = target & super::live::CHANGE_BY_RESTART != 0;
        for c in 0..self.coords.len() {
            if !self.coords[c].alive || self.coords[c].core.is_none() {
                continue;
            }
            if restart {
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
    pub(super) fn reconfigure_coordinator_late(&mut self, c: usize, in_force_before: Quota) {
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

    pub(super) fn stop_pod(&mut self, p: usize) {
        let slot = &mut self.pods[p];
        slot.state = PodState::Down;
        slot.routable = false;
        slot.core = None;
        slot.incarnation += 1;
        slot.counters.rejected += slot.queue.len() as u64;
        slot.queue.clear();
    }

    pub(super) fn heal_fault(&mut self, i: usize) {
        let f = self.faults[i].clone();
        let t = f.target as usize;
        match f.kind {
            FaultKind::PodCrash => self.start_pod(t),
            FaultKind::PodCrashLoop => {
                if self.pods[t].state == PodState::Down {
                    self.start_pod(t);
                }
            }
            FaultKind::PodPause => {
                if self.pods[t].state == PodState::Paused {
                    self.pods[t].state = PodState::Up;
                    self.drain_queue(t);
                }
            }
            FaultKind::PodDrain => {
                // The replacement pod of a rolling deploy (the drained one is gone either way).
                if self.pods[t].state != PodState::Up {
                    self.stop_pod(t);
                    self.start_pod(t);
                }
            }
            FaultKind::PodJoin => {
                // The extra pods drain again (scale-down).
                for p in t..(t + f.amount as usize).min(self.pods.len()) {
                    if self.pods[p].state == PodState::Up {
                        self.pods[p].state = PodState::Draining;
                        self.pods[p].routable = false;
                        self.pods[p].counters.rejected += self.pods[p].queue.len() as u64;
                        self.pods[p].queue.clear();
                    }
                }
            }
            FaultKind::PartitionDcCoordinator => self.net.cut_dcs[t] = false,
            FaultKind::PartitionPodDc => self.net.cut_pods[t] = false,
            FaultKind::CoordinatorCrash => self.restart_coordinator(t),
            FaultKind::CoordinatorPause => {}
            FaultKind::DcManagerCrash => self.restart_mgr(t / 16, t % 16),
            FaultKind::WatchLag => self.end_watch_lag(t / 16, t % 16),
            // Reconnected at heal time by construction (the buffer's delay ends then); the
            // ledger watches, opened again, replay the kept history.
            FaultKind::DcManagerReconnect => {
                for r in 0..self.dcs[t].mgrs.len() {
                    self.replay_records(t, r);
                }
            }
            FaultKind::DcManagerPause | FaultKind::ConfigChange => {}
            FaultKind::LimitChange => self.change_limit(f.target, None),
            FaultKind::SlowLeaderReplies => self.net.faults.slow_leader_replies_ms = 0,
            FaultKind::LedgerWritesUnanswered => self.net.faults.unanswered_ledger_writes_ms = 0,
            FaultKind::MessageLoss => self.net.faults.loss = 0.0,
            FaultKind::MessageDuplication => self.net.faults.duplicate = 0.0,
            FaultKind::MessageDelay => self.net.faults.extra_delay_ms = 0,
        }
    }
}
