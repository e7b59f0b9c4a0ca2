//! The driver: initial states, timers on each tick, message delivery, leadership through the KV.
//! Every decision is the cores'; this module only moves inputs and outputs (through `model`).

use crate::config::ModelConfig;
use crate::model;
use crate::state::{Clock, CoordNode, Kv, ManagerNode, Msg, PodNode, Shadow, State, NS_PER_MS};
use leasehold_shared::dc_manager::DcOutput;
use leasehold_shared::wire::DcLease;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

const NS_PER_S: u64 = 1_000 * NS_PER_MS;

/// The drift each clock group starts with, as indexes into `drift_ppm_choices`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitChoice {
    pub drift_index: Vec<usize>,
}

/// Every combination of drifts, one initial state each.
pub fn initial_choices(cfg: &ModelConfig) -> Vec<InitChoice> {
    let groups = cfg.clock_groups();
    let n = cfg.drift_ppm_choices.len();
    let mut out = vec![InitChoice { drift_index: Vec::new() }];
    for _ in 0..groups {
        out = out
            .into_iter()
            .flat_map(|c| {
                (0..n).map(move |i| {
                    let mut d = c.drift_index.clone();
                    d.push(i);
                    InitChoice { drift_index: d }
                })
            })
            .collect();
    }
    out
}

/// The state an initial choice starts from: the cold start, then `warmup_ticks` ticks of
/// fault-free, in-order running. Fails when the choice does not fit the configuration.
pub fn initial_state(cfg: &ModelConfig, init: &InitChoice) -> Result<State, String> {
    let mut s = cold_state(cfg, init)?;
    while s.tick < cfg.warmup_ticks {
        s.tick(cfg);
        while let Some(i) = s.fifo_head() {
            s.deliver(cfg, i);
        }
    }
    Ok(s)
}

fn cold_state(cfg: &ModelConfig, init: &InitChoice) -> Result<State, String> {
    if init.drift_index.len() != cfg.clock_groups()
        || init.drift_index.iter().any(|&i| i >= cfg.drift_ppm_choices.len())
    {
        return Err(format!("init needs {} drift indexes below {}", cfg.clock_groups(), cfg.drift_ppm_choices.len()));
    }
    let drift = |group: usize| cfg.drift_ppm_choices[init.drift_index[group]];
    let coords = (0..cfg.coordinators)
        .map(|c| CoordNode {
            id: format!("coord{c}"),
            alive: true,
            paused_until: None,
            write_on_wake: false,
            core: None,
            record_rev: 0,
            clock: Clock { offset_ns: (c as u64 + 1) * 7 * NS_PER_S, drift_ppm: drift(0) },
        })
        .collect();
    let mut managers = Vec::new();
    let mut pods = Vec::new();
    for dc in 0..cfg.dcs {
        for slot in 0..2 {
            managers.push(ManagerNode {
                dc,
                slot,
                alive: true,
                core: None,
                clock: Clock { offset_ns: (100 + (dc * 2 + slot) as u64 * 3) * NS_PER_S, drift_ppm: drift(1) },
                term_started_ns: 0,
                shadow: Shadow::default(),
            });
        }
        for _ in 0..cfg.pods_per_dc {
            let p = pods.len();
            let clock = Clock { offset_ns: (200 + p as u64 * 11) * NS_PER_S, drift_ppm: drift(2) };
            pods.push(PodNode {
                dc,
                restarts: 0,
                core: Arc::new(model::new_pod(cfg, dc, p, model::pod_incarnation(p, 0), clock.local(0))),
                clock,
                paused_until: None,
                shadow: Shadow::default(),
            });
        }
    }
    let kv = Kv { dc_leader: vec![None; cfg.dcs], dc_rev: vec![0; cfg.dcs], ..Kv::default() };
    Ok(State {
        tick: 0,
        pods,
        managers,
        coords,
        kv,
        net: Vec::new(),
        budget: cfg.faults,
        config_changed: false,
        demand_shifted: false,
    })
}

impl State {
    pub fn dc_ttl_ms(&self, cfg: &ModelConfig) -> u64 {
        if self.config_changed {
            cfg.changed_dc_ttl_ms
        } else {
            cfg.dc_ttl_ms
        }
    }

    pub fn push(&mut self, cfg: &ModelConfig, m: Msg) {
        if self.net.len() < cfg.max_in_flight {
            self.net.push(m);
        }
    }

    /// Advance one tick and fire every due timer, in a fixed order.
    pub fn tick(&mut self, cfg: &ModelConfig) {
        self.tick += 1;
        let t = self.tick;
        for p in 0..self.pods.len() {
            if self.pods[p].paused_until.is_some_and(|u| u <= t) {
                self.pods[p].paused_until = None;
            }
        }
        for c in 0..self.coords.len() {
            if self.coords[c].paused_until.is_some_and(|u| u <= t) {
                self.coords[c].paused_until = None;
                if std::mem::take(&mut self.coords[c].write_on_wake) && self.coords[c].core.is_some() {
                    let now = self.coords[c].clock.local(self.real_ns(cfg.tick_ms));
                    model::coordinator_tick(self.coords[c].core.as_mut().map(Arc::make_mut).expect("checked"), now);
                    self.write_record(cfg, c, false);
                }
            }
        }
        for p in 0..self.pods.len() {
            let real = self.real_ns(cfg.tick_ms);
            let pod = &mut self.pods[p];
            if pod.paused_until.is_some() {
                continue;
            }
            let now = pod.clock.local(real);
            let offered = cfg.offered_per_report(pod.dc, t, self.demand_shifted);
            let report = model::pod_report(Arc::make_mut(&mut pod.core), &mut pod.shadow, now, offered);
            let dc = pod.dc;
            self.push(cfg, Msg::PodReport { dc, report: Arc::new(report) });
        }
        for m in 0..self.managers.len() {
            self.manager_timer(cfg, m);
        }
        if t.is_multiple_of(cfg.coordinator_every_ticks) {
            for c in 0..self.coords.len() {
                self.coordinator_timer(cfg, c);
            }
        }
    }

    fn manager_timer(&mut self, cfg: &ModelConfig, m: usize) {
        let t = self.tick;
        let (dc, slot) = (self.managers[m].dc, self.managers[m].slot);
        if !self.managers[m].alive {
            return;
        }
        let ttl = cfg.manager_leader_ttl_ticks;
        if self.managers[m].core.is_some() {
            match self.kv.dc_leader[dc] {
                Some((holder, _)) if holder == slot => self.kv.dc_leader[dc] = Some((slot, t + ttl)),
                _ => {
                    self.managers[m].core = None;
                    return;
                }
            }
        } else {
            let vacant = self.kv.dc_leader[dc].is_none_or(|(_, exp)| exp <= t);
            if !vacant {
                return;
            }
            self.kv.dc_rev[dc] += 1;
            let epoch = self.kv.dc_rev[dc];
            self.kv.dc_leader[dc] = Some((slot, t + ttl));
            let record = self.kv.record.clone();
            let node = &mut self.managers[m];
            let now = node.clock.local(self.tick as u64 * cfg.tick_ms * NS_PER_MS);
            node.shadow = Shadow::default();
            let (core, out) = model::new_manager(cfg, dc, epoch, record.as_deref(), &mut node.shadow, now);
            node.core = Some(Arc::new(core));
            node.term_started_ns = now;
            self.route(cfg, out);
        }
        let real = self.real_ns(cfg.tick_ms);
        let node = &mut self.managers[m];
        let now = node.clock.local(real);
        let out = model::manager_tick(node.core.as_mut().map(Arc::make_mut).expect("leading"), &mut node.shadow, now);
        self.route(cfg, out);
    }

    fn coordinator_timer(&mut self, cfg: &ModelConfig, c: usize) {
        let t = self.tick;
        let node = &self.coords[c];
        if !node.alive || node.paused_until.is_some() {
            return;
        }
        let now = node.clock.local(self.real_ns(cfg.tick_ms));
        let ttl = cfg.leader_ttl_ticks;
        if node.core.is_some() {
            match self.kv.coord_leader {
                Some((holder, _)) if holder == c => self.kv.coord_leader = Some((c, t + ttl)),
                _ => {
                    self.coords[c].core = None;
                    return;
                }
            }
            let leases = model::coordinator_tick(self.coords[c].core.as_mut().map(Arc::make_mut).expect("leader"), now);
            self.write_record(cfg, c, leases.is_empty());
            return;
        }
        if self.kv.coord_leader.is_none_or(|(_, exp)| exp <= t) {
            self.kv.coord_leader = Some((c, t + ttl));
            self.take_over(cfg, c, now);
        }
    }

    /// Coordinator `c` leads from the KV record at a higher epoch (a takeover or a restart).
    pub fn take_over(&mut self, cfg: &ModelConfig, c: usize, now_ns: u64) {
        let epoch = self.kv.max_epoch + 1;
        let ttl = self.dc_ttl_ms(cfg);
        let record = self.kv.record.clone();
        let fence = (self.kv.max_epoch > 0).then_some(self.kv.max_epoch);
        let core = model::coordinator_resume(cfg, ttl, &self.coords[c].id, epoch, record.as_deref(), fence, now_ns);
        self.coords[c].core = Some(Arc::new(core));
        self.coords[c].record_rev = self.kv.record_rev;
        self.write_record(cfg, c, false);
    }

    /// Compare-and-set the ledger record; on success every DC's watch gets it.
    fn write_record(&mut self, cfg: &ModelConfig, c: usize, quiet: bool) {
        if self.coords[c].record_rev != self.kv.record_rev {
            self.coords[c].core = None;
            return;
        }
        let record = Arc::new(model::coordinator_record(self.coords[c].core.as_ref().expect("leader")));
        self.kv.max_epoch = self.kv.max_epoch.max(record.epoch);
        self.kv.record_rev += 1;
        self.coords[c].record_rev = self.kv.record_rev;
        self.kv.record = Some(record.clone());
        if !quiet {
            for dc in 0..cfg.dcs {
                self.push(cfg, Msg::Record { dc, record: record.clone() });
            }
        }
    }

    fn route(&mut self, cfg: &ModelConfig, out: Vec<DcOutput>) {
        for o in out {
            match o {
                DcOutput::PodLease(lease) => {
                    // Addressed by pod id: whichever process runs under it now receives it.
                    let target = (0..self.pods.len()).find(|&p| model::pod_name(self.pods[p].dc, p) == lease.pod);
                    if let Some(pod) = target {
                        self.push(cfg, Msg::PodLease { pod, lease: Arc::new(lease) });
                    }
                }
                DcOutput::Report(r) => self.push(cfg, Msg::DcReport(Arc::new(r))),
                DcOutput::ReturnAck(_) => {}
            }
        }
    }

    /// Deliver in-flight message `i` (the caller checked it is deliverable).
    pub fn deliver(&mut self, cfg: &ModelConfig, i: usize) {
        let msg = self.net.remove(i);
        let real = self.real_ns(cfg.tick_ms);
        match msg {
            Msg::PodReport { dc, report } => {
                for m in self.leading_managers(dc) {
                    let node = &mut self.managers[m];
                    let now = node.clock.local(real);
                    let out = model::manager_on_pod_report(
                        node.core.as_mut().map(Arc::make_mut).expect("leading"),
                        &mut node.shadow,
                        &report,
                        now,
                    );
                    self.route(cfg, out);
                }
            }
            Msg::PodLease { pod, lease } => {
                let node = &mut self.pods[pod];
                let now = node.clock.local(real);
                model::pod_on_lease(Arc::make_mut(&mut node.core), &mut node.shadow, &lease, now);
            }
            Msg::DcReport(report) => {
                for c in 0..self.coords.len() {
                    let node = &mut self.coords[c];
                    if !node.alive || node.paused_until.is_some() {
                        continue;
                    }
                    let now = node.clock.local(real);
                    let Some(core) = node.core.as_mut().map(Arc::make_mut) else { continue };
                    let leases: Vec<DcLease> = model::coordinator_on_report(core, &report, now);
                    if !leases.is_empty() {
                        self.write_record(cfg, c, false);
                    }
                }
            }
            Msg::Record { dc, record } => {
                for m in self.leading_managers(dc) {
                    let node = &mut self.managers[m];
                    let now = node.clock.local(real);
                    let out = model::manager_on_record(
                        node.core.as_mut().map(Arc::make_mut).expect("leading"),
                        &mut node.shadow,
                        &record,
                        now,
                    );
                    self.route(cfg, out);
                }
            }
        }
    }

    fn leading_managers(&self, dc: usize) -> Vec<usize> {
        (dc * 2..dc * 2 + 2).filter(|&m| self.managers[m].alive && self.managers[m].core.is_some()).collect()
    }
}
