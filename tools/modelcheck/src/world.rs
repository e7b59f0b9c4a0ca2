//! The driver: initial states, timers on each tick, message delivery, the ledger record in the
//! KV. Every decision is the cores'; this module only moves inputs and outputs (through `model`,
//! and `leaders` for leadership).

use crate::config::ModelConfig;
use crate::leaders::{Elector, LeaderKey, Replica};
use crate::model;
use crate::state::{Clock, CoordNode, Kv, ManagerNode, Msg, PodNode, Shadow, State, NS_PER_MS};
use leasehold_core::dc_manager::DcOutput;
use leasehold_core::wire::DcLease;
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
    // Every replica has watched its leader key stay absent for one TTL before tick 0.
    let elector = |id: &str, ttl_ticks: u32, records, clock: Clock| {
        let ttl_ms = ttl_ticks as u64 * cfg.tick_ms;
        Elector::new(id, ttl_ms, records, cfg, clock.local(0).saturating_sub(ttl_ms * NS_PER_MS), clock.local(0))
    };
    let coords = (0..cfg.coordinators)
        .map(|c| {
            let id = format!("coord{c}");
            let clock = Clock { offset_ns: (c as u64 + 1) * 7 * NS_PER_S, drift_ppm: drift(0) };
            CoordNode {
                elector: elector(&id, cfg.leader_ttl_ticks, None, clock),
                id,
                alive: true,
                paused_until: None,
                write_on_wake: false,
                core: None,
                record_rev: 0,
                clock,
            }
        })
        .collect();
    let mut managers = Vec::new();
    let mut pods = Vec::new();
    for dc in 0..cfg.dcs {
        for slot in 0..2 {
            let clock = Clock { offset_ns: (100 + (dc * 2 + slot) as u64 * 3) * NS_PER_S, drift_ppm: drift(1) };
            managers.push(ManagerNode {
                dc,
                slot,
                alive: true,
                core: None,
                clock,
                term_started_ns: 0,
                shadow: Shadow::default(),
                elector: elector(
                    &model::manager_replica(dc, slot),
                    cfg.manager_leader_ttl_ticks,
                    Some(model::term_records(cfg, dc, cfg.pod_ttl_ms)),
                    clock,
                ),
                rolled: false,
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
    let kv = Kv { dc_keys: vec![LeaderKey::default(); cfg.dcs], ..Kv::default() };
    Ok(State {
        tick: 0,
        pods,
        managers,
        coords,
        kv,
        net: Vec::new(),
        budget: cfg.faults,
        config_changed: false,
        limit_lowered_at_ns: None,
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
            let mut report = model::pod_report(Arc::make_mut(&mut pod.core), &mut pod.shadow, now, offered);
            if cfg.legacy_pods {
                report.held = None;
            }
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
        self.deliver_held_answers(cfg);
    }

    fn manager_timer(&mut self, cfg: &ModelConfig, m: usize) {
        if !self.managers[m].alive {
            return;
        }
        self.run_election(cfg, Replica::Manager(m));
        if !self.acts(cfg, Replica::Manager(m)) {
            return;
        }
        let now = self.local_ns(cfg, Replica::Manager(m));
        let node = &mut self.managers[m];
        let Some(core) = node.core.as_mut().map(Arc::make_mut) else { return };
        let out = model::manager_tick(core, &mut node.shadow, now);
        self.route(cfg, out);
    }

    fn coordinator_timer(&mut self, cfg: &ModelConfig, c: usize) {
        if !self.runs(Replica::Coordinator(c)) {
            return;
        }
        let had_core = self.coords[c].core.is_some();
        self.run_election(cfg, Replica::Coordinator(c));
        // A term that began now wrote its first record already.
        if !had_core || !self.acts(cfg, Replica::Coordinator(c)) {
            return;
        }
        let now = self.local_ns(cfg, Replica::Coordinator(c));
        let Some(core) = self.coords[c].core.as_mut().map(Arc::make_mut) else { return };
        let leases = model::coordinator_tick(core, now);
        self.write_record(cfg, c, leases.is_empty());
    }

    /// Compare-and-set the ledger record; on success every DC's watch gets it. A conflict ends
    /// the writer's term (it resigns; the key is left to the followers' observation).
    pub fn write_record(&mut self, cfg: &ModelConfig, c: usize, quiet: bool) {
        if self.coords[c].record_rev != self.kv.record_rev {
            self.coords[c].core = None;
            self.coords[c].elector.election.resign("the ledger was written by another");
            return;
        }
        let Some(core) = self.coords[c].core.as_ref() else { return };
        let record = Arc::new(model::coordinator_record(core));
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

    pub fn route(&mut self, cfg: &ModelConfig, out: Vec<DcOutput>) {
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
                for m in self.acting_managers(cfg, dc) {
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
                    if !self.acts(cfg, Replica::Coordinator(c)) {
                        continue;
                    }
                    let node = &mut self.coords[c];
                    let now = node.clock.local(real);
                    let Some(core) = node.core.as_mut().map(Arc::make_mut) else { continue };
                    let leases: Vec<DcLease> = model::coordinator_on_report(core, &report, now);
                    if !leases.is_empty() {
                        self.write_record(cfg, c, false);
                    }
                }
            }
            Msg::Record { dc, record } => {
                for m in self.acting_managers(cfg, dc) {
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

    /// DC `dc`'s managers that act now (one, while leadership holds); each decides for itself.
    pub fn acting_managers(&self, cfg: &ModelConfig, dc: usize) -> Vec<usize> {
        (dc * 2..dc * 2 + 2).filter(|&m| self.acts(cfg, Replica::Manager(m))).collect()
    }
}
