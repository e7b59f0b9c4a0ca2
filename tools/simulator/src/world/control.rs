//! The control plane: pod reports, DC manager ticks, coordinator leadership through the KV
//! register, and message delivery. All decisions are made by the shared cores.

use super::leaders::Who;
use super::{Ev, Msg, PodSlot, PodState, Policy, World, MS};
use crate::net::Link;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::{DcManagerConfig, DcOutput, PodLeaseBounds, TermRecords};
use leasehold_core::expiry::ExpiryPolicy;
use leasehold_core::lease_intake::LeaseRejection;
use leasehold_core::pod::{IntervalCounters, PodConfig, PodCore};
use leasehold_core::quiet_reports::QuietReports;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, LedgerRecord};
use std::rc::Rc;

impl World {
    pub(super) fn expiry(&self) -> ExpiryPolicy {
        if let Some(e) = self.sc.expiry_override {
            return e;
        }
        ExpiryPolicy { max_drift: 0.01, grace_ms: 100, egress_spread_ms: self.sc.egress_spread_ms() }
    }

    /// The configuration of a term of DC `d`'s manager replica `r`, with epoch `term` (each term
    /// is a new DC-lease holder).
    pub(super) fn dc_config(&self, d: usize, r: usize, term: u64) -> DcManagerConfig {
        let instance = format!("{}-mgr{r}-e{term}", self.sc.dcs[d].name);
        let mut c = DcManagerConfig::new("partner-api", &self.sc.dcs[d].name, &instance);
        c.epoch = term;
        c.pod_ttl_ms = self.live.pod_ttl_ms;
        c.renew_interval_ms = self.sc.renew_ms;
        c.heartbeat_timeout_ms = self.sc.pod_report_ms * 6;
        c.expiry = self.expiry();
        c.bugs = self.sc.bugs;
        if !self.sc.emergency_per_dc.is_zero() {
            c.fail_mode = leasehold_core::dc_manager::FailMode::BestEffort { emergency: self.live.emergency_per_dc };
        }
        c
    }

    /// The term records of DC `d`'s manager replica `r`, a process started with the settings in
    /// force now.
    pub(super) fn term_records(&self, d: usize, r: usize) -> TermRecords {
        let own = PodLeaseBounds::of(&self.dc_config(d, r, 0));
        TermRecords::new(own, self.sc.leader_ttl_ms, &self.sc.bugs)
    }

    pub(super) fn limit_config(&self) -> LimitConfig {
        let dcs: Vec<(&str, Quota)> =
            self.sc.dcs.iter().zip(&self.live.floors).map(|(d, f)| (d.name.as_str(), *f)).collect();
        let mut c = LimitConfig::new("partner-api", self.live.quota, &dcs);
        c.dc_ttl_ms = self.live.dc_ttl_ms;
        c.renew_interval_ms = self.sc.renew_ms;
        c.expiry = self.expiry();
        c.adaptive = self.sc.adaptive.clone();
        c.bugs = self.sc.bugs;
        c
    }

    pub(super) fn add_pod_slot(&mut self, d: usize) -> usize {
        let clock = self.clock();
        self.pods.push(PodSlot {
            dc: d,
            clock,
            state: PodState::Down,
            core: None,
            quiet: QuietReports::new(0, 250),
            incarnation: 0,
            routable: false,
            queue: Default::default(),
            retry_at: None,
            counters: IntervalCounters::default(),
            paused_until: 0,
            static_bucket: None,
        });
        self.net.cut_pods.push(false);
        self.pods.len() - 1
    }

    /// Start (or restart) the pod in slot `p` as a new instance.
    pub(super) fn start_pod(&mut self, p: usize) {
        let d = self.pods[p].dc;
        let slot = &mut self.pods[p];
        slot.incarnation += 1;
        slot.state = PodState::Up;
        slot.queue.clear();
        slot.retry_at = None;
        slot.counters = IntervalCounters::default();
        // A restart keeps the pod's id (as a StatefulSet would); only the incarnation is new.
        let instance = format!("{}-pod{}", self.sc.dcs[d].name, p);
        let incarnation = self.rng.next_u64();
        match self.policy {
            Policy::Leasehold => {
                slot.core = Some(PodCore::new(
                    PodConfig {
                        limit: "partner-api".into(),
                        dc: self.sc.dcs[d].name.clone(),
                        pod: instance.clone(),
                        incarnation,
                        weight: 1.0,
                        bugs: self.sc.bugs,
                    },
                    slot.clock.local(self.now),
                ));
                slot.quiet = QuietReports::new(self.sc.pod_quiet_ms, self.sc.pod_report_ms);
                slot.routable = false; // joins the load balancer once it holds a lease
                self.pod_by_instance.insert(instance, p);
                let inc = slot.incarnation;
                let first = self.now + self.rng.range_u64(0, self.sc.pod_report_ms) * MS;
                self.push(first, Ev::PodTick(p, inc));
            }
            Policy::StaticPerPod => {
                let n: u64 = self.sc.dcs.iter().map(|d| d.pods as u64).sum();
                let q = self.sc.quota;
                let b = leasehold_core::bucket::TokenBucket::new();
                let local = slot.clock.local(self.now);
                b.apply_lease(Quota::new(q.rate_milli_per_s / n, q.burst_milli / n), local + 36_000 * super::S, local)
                    .expect("static lease fits");
                slot.static_bucket = Some(b);
                slot.routable = true;
            }
            Policy::StaticSplit | Policy::Uncoordinated => slot.routable = true,
        }
    }

    pub(super) fn on_pod_tick(&mut self, p: usize, inc: u64) {
        let slot = &mut self.pods[p];
        if slot.incarnation != inc || slot.state == PodState::Down {
            return;
        }
        let next = self.now + slot.clock.real_span(self.sc.pod_report_ms * MS);
        if slot.state == PodState::Paused {
            // Frozen: the timer fires when the pause ends.
            let at = slot.paused_until.max(self.now + 1);
            self.push(at, Ev::PodTick(p, inc));
            return;
        }
        self.push(next, Ev::PodTick(p, inc));
        let slot = &mut self.pods[p];
        let local = slot.clock.local(self.now);
        let core = slot.core.as_mut().expect("leasehold pod has a core");
        if slot.state == PodState::Draining {
            let ret = core.drain();
            self.send(Link::PodDc(p), || Msg::LeaseReturn(p, ret.clone()));
            return;
        }
        let mut c = std::mem::take(&mut slot.counters);
        c.queued = slot.queue.len() as u64;
        if let Some(partner) = self.upstream.partner.as_mut() {
            // Calls are judged as they arrive (`advance`); the answers reach the pod later.
            c.upstream_429 = partner.take_429s(p, self.now);
        }
        let Some(report) = slot.quiet.tick(core, local, c, true) else { return };
        self.send(Link::PodDc(p), || Msg::PodReport(p, report.clone()));
    }

    pub(super) fn on_dc_tick(&mut self, d: usize, r: usize, inc: u64) {
        let m = &self.dcs[d].mgrs[r];
        if m.incarnation != inc || !m.alive {
            return;
        }
        if m.paused_until > self.now {
            let at = m.paused_until;
            self.push(at, Ev::DcTick(d, r, inc));
            return;
        }
        let next = self.now + m.clock.real_span(self.sc.dc_report_ms * MS);
        self.push(next, Ev::DcTick(d, r, inc));
        let held = std::mem::take(&mut self.dcs[d].mgrs[r].send_on_wake);
        self.route_dc(d, held);
        self.poll_election(Who::Mgr(d, r));
        if !self.dcs[d].acts(r, self.now) {
            return;
        }
        self.retry_term_read(d, r);
        self.persist_floor_confirmation(d, r);
        let m = &mut self.dcs[d].mgrs[r];
        let out = m.core.as_mut().expect("acting").tick(m.clock.local(self.now));
        self.route_dc(d, out);
    }

    pub(super) fn route_dc(&mut self, d: usize, out: Vec<DcOutput>) {
        // While the managers reconnect, the client buffers what they publish.
        let held = self.net.dc_reconnect_at[d].saturating_sub(self.now);
        for o in out {
            match o {
                DcOutput::PodLease(l) => {
                    if let Some(&p) = self.pod_by_instance.get(l.pod.as_str()) {
                        self.send_after(Link::PodDc(p), held, || Msg::PodLease(p, l.clone()));
                    }
                }
                DcOutput::ReturnAck(a) => {
                    if let Some(&p) = self.pod_by_instance.get(&a.holder) {
                        self.send_after(Link::PodDc(p), held, || Msg::ReturnAck(p, a.clone()));
                    }
                }
                DcOutput::Report(r) => self.send_after(Link::DcCoord(d), held, || Msg::DcReport(r.clone())),
            }
        }
    }

    /// Whether coordinator `c` believes its term may act now.
    pub(super) fn coord_acts(&self, c: usize) -> bool {
        let co = &self.coords[c];
        co.alive
            && co.paused_until <= self.now
            && co.core.is_some()
            && co.election.acting_epoch(co.clock.local(self.now)).is_some()
    }

    pub(super) fn on_coord_tick(&mut self, c: usize, inc: u64) {
        if self.coords[c].incarnation != inc || !self.coords[c].alive {
            return;
        }
        if self.coords[c].paused_until > self.now {
            let at = self.coords[c].paused_until;
            self.push(at, Ev::CoordTick(c, inc));
            return;
        }
        let next = self.now + self.coords[c].clock.real_span(self.sc.renew_ms * MS);
        self.push(next, Ev::CoordTick(c, inc));
        if std::mem::take(&mut self.coords[c].write_on_wake) && self.coords[c].core.is_some() {
            // It checked its leadership before the pause and writes now, unchecked.
            let local = self.coords[c].clock.local(self.now);
            self.coords[c].core.as_mut().expect("leader").tick(local);
            self.write_record(c, false);
        }
        if let Some(before) = self.coords[c].change_on_wake.take().filter(|_| self.coords[c].core.is_some()) {
            self.reconfigure_coordinator_late(c, before);
        }
        self.poll_election(Who::Coord(c));
        if !self.coord_acts(c) {
            return;
        }
        let local = self.coords[c].clock.local(self.now);
        let leases = self.coords[c].core.as_mut().expect("leader").tick(local);
        self.write_record(c, leases.is_empty());
    }

    /// Every replica of DC `d` hears the DC's messages; those whose term acts now handle them.
    fn for_each_acting_mgr(
        &mut self,
        d: usize,
        mut handle: impl FnMut(&mut leasehold_core::dc_manager::DcManagerCore, u64) -> Vec<DcOutput>,
    ) {
        if self.net.dc_reconnect_at[d] > self.now {
            return; // disconnected: published to it meanwhile is lost
        }
        for r in self.dcs[d].acting(self.now) {
            let m = &mut self.dcs[d].mgrs[r];
            let local = m.clock.local(self.now);
            let out = handle(m.core.as_mut().expect("acting"), local);
            self.route_dc(d, out);
        }
    }

    /// Replica `r` of DC `d` opens its ledger watch again: the kept history, oldest first.
    pub(super) fn replay_records(&mut self, d: usize, r: usize) {
        let history: Vec<(u64, Rc<LedgerRecord>)> = self.kv.history.iter().cloned().collect();
        self.metrics.record_replays += 1;
        for (rev, rec) in history {
            self.send(Link::DcCoord(d), || Msg::Record(d, Some(r), rec.clone(), rev));
        }
    }

    /// A ledger record reaches DC `d` (every replica, or only `only`): each live replica takes
    /// its removal and pod rules if its revision is newer than what it took (a frozen one's
    /// watch holds it until it wakes, before it acts), and each acting term applies the
    /// rules, then the record's floor and newest DC lease for it.
    fn on_record(&mut self, d: usize, only: Option<usize>, rec: &LedgerRecord, rev: u64) {
        if self.net.dc_reconnect_at[d] > self.now {
            return; // disconnected: the watch replays the history on reconnecting
        }
        let slot = &mut self.dcs[d];
        if rev > slot.newest_record_rev {
            slot.newest_record_rev = rev;
            slot.removed_since = if rec.limit_removed() { slot.removed_since.or(Some(self.now)) } else { None };
        }
        // Each replica's own watch: a lagging one delivers nothing (it catches up later).
        let targets: Vec<usize> =
            (0..slot.mgrs.len()).filter(|r| only.is_none_or(|o| o == *r) && self.watch_delivers(d, *r)).collect();
        for &r in &targets {
            self.take_record(d, r, rec, rev);
        }
        let mut rejected = 0;
        for r in self.dcs[d].acting(self.now).into_iter().filter(|r| targets.contains(r)) {
            let base = self.dc_config(d, r, 0);
            let m = &mut self.dcs[d].mgrs[r];
            let local = m.clock.local(self.now);
            let core = m.core.as_mut().expect("acting");
            m.record_rules.apply(core, &base);
            let mut out = match rec.floor_of(&base.dc) {
                Some((floor, version)) => core.on_floor(floor, version, local),
                None => Vec::new(),
            };
            let instance = &core.config().instance;
            let newest: Option<&DcLease> =
                rec.leases.iter().filter(|l| &l.holder == instance).max_by_key(|l| l.version);
            if let Some(l) = newest {
                match core.on_dc_lease(l, local) {
                    Ok(more) => out.extend(more),
                    // The watch re-delivers the whole record: an already-applied lease is normal.
                    Err(LeaseRejection::NotNewer { .. }) => {}
                    Err(_) => rejected += 1,
                }
            }
            self.route_dc(d, out);
        }
        self.metrics.lease_rejections += rejected;
    }

    pub(super) fn on_message(&mut self, m: Msg) {
        match m {
            Msg::PodReport(p, r) => {
                let d = self.pods[p].dc;
                if self.pods[p].state == PodState::Down {
                    return;
                }
                self.for_each_acting_mgr(d, |m, local| m.on_pod_report(&r, local));
            }
            Msg::LeaseReturn(p, r) => {
                let d = self.pods[p].dc;
                self.for_each_acting_mgr(d, |m, local| m.on_lease_return(&r, local));
            }
            Msg::PodLease(p, l) => {
                let slot = &mut self.pods[p];
                if slot.state != PodState::Up {
                    return; // frozen or gone: the message is lost with it
                }
                let local = slot.clock.local(self.now);
                let Some(core) = slot.core.as_mut() else { return };
                match core.on_lease(&l, local) {
                    Ok(()) => {
                        slot.routable = true;
                        self.kick_queue(p);
                    }
                    Err(_) => self.metrics.lease_rejections += 1,
                }
            }
            Msg::ReturnAck(p, a) => {
                let slot = &mut self.pods[p];
                if slot.state == PodState::Draining && slot.core.as_mut().is_some_and(|c| c.on_return_ack(&a)) {
                    slot.state = PodState::Down;
                    slot.core = None;
                    self.metrics.drains_acked += 1;
                }
            }
            Msg::DcReport(r) => {
                for c in 0..self.coords.len() {
                    if !self.coord_acts(c) {
                        continue;
                    }
                    let local = self.coords[c].clock.local(self.now);
                    let Some(core) = self.coords[c].core.as_mut() else { continue };
                    let leases = core.on_dc_report(&r, local);
                    if !leases.is_empty() {
                        self.write_record(c, false);
                    }
                }
            }
            Msg::Record(d, only, rec, rev) => self.on_record(d, only, &rec, rev),
        }
    }
}
