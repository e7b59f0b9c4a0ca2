//! The moves the explorer may take from a state: time, the network, and bounded faults.

use crate::config::ModelConfig;
use crate::leaders::{Elector, Replica, WriteFault};
use crate::model;
use crate::state::{Shadow, State};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "action", content = "arg")]
pub enum Action {
    /// Advance time one tick; every node's due timers fire.
    Tick,
    /// Deliver in-flight message `i`, the oldest deliverable one.
    Deliver(usize),
    /// Move in-flight message `i` behind all others (it is reordered, and may be delayed past
    /// the next tick).
    Delay(usize),
    Drop(usize),
    Duplicate(usize),
    /// Pod `p` crashes and restarts at once as a new process under the same pod id (sequence
    /// numbers start again, a new random incarnation).
    CrashPod(usize),
    PausePod(usize),
    /// DC `d`'s leading manager crashes; its standby takes over once the leader key expires.
    CrashManager(usize),
    /// A rolling restart of DC `d`'s managers that lowers `pod_ttl_ms`: the standby restarts
    /// (a new process, `changed_pod_ttl_ms`), then the leader goes down; the restarted standby
    /// takes over once it has seen the leader key unchanged for the leader TTL.
    RollManagers(usize),
    /// The coordinator leader crashes; the standby takes over once the leader key expires.
    CrashCoordinator,
    /// The coordinator leader freezes between deciding and writing (GC pause).
    PauseCoordinator,
    /// The coordinator leader restarts with the changed `dc_ttl_ms` (new epoch).
    ChangeConfig,
    /// The leading coordinator term lowers R to `lowered_rate_milli_per_s` in place (same
    /// epoch, `CoordinatorCore::reconfigure`) and writes its record.
    LowerLimitLive,
    /// Demand moves: from now on every DC offers `shifted_offered_per_report`.
    ShiftDemand,
    /// The next leader-key write of this leader (its renewal) meets the fault.
    FailLeaderWrite(Replica, WriteFault),
}

/// Why an action cannot be taken in a state (for replays of hand-written traces).
#[derive(Debug, PartialEq, Eq)]
pub struct NotEnabled(pub Action);

impl std::fmt::Display for NotEnabled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "action {:?} is not enabled in this state", self.0)
    }
}

impl std::error::Error for NotEnabled {}

/// Every action enabled in `s`, in a fixed order.
pub fn enabled(cfg: &ModelConfig, s: &State) -> Vec<Action> {
    let mut out = Vec::new();
    let b = &s.budget;
    let waiting = s.net.iter().filter(|m| s.deliverable(m)).count();
    let quiet = waiting <= cfg.max_carry_over;
    if s.tick < cfg.horizon_ticks && quiet {
        out.push(Action::Tick);
    }
    let head = s.fifo_head();
    let any_fault = b.total > 0;
    for i in 0..s.net.len() {
        let deliverable = s.deliverable(&s.net[i]);
        if deliverable && Some(i) == head {
            out.push(Action::Deliver(i));
        }
        if !cfg.message_may_fail(s.net[i].kind()) {
            continue;
        }
        if any_fault && b.delays > 0 && i + 1 < s.net.len() {
            out.push(Action::Delay(i));
        }
        if any_fault && b.losses > 0 {
            out.push(Action::Drop(i));
        }
        if any_fault && b.duplicates > 0 && s.net.len() < cfg.max_in_flight {
            out.push(Action::Duplicate(i));
        }
    }
    // Node faults strike between ticks, once the system has started: a crash in the middle of a
    // tick's message exchange is a crash at its boundary plus the loss of undelivered messages.
    if s.tick == 0 || !any_fault || !quiet {
        return out;
    }
    if b.demand_shifts > 0 && !s.demand_shifted {
        out.push(Action::ShiftDemand);
    }
    for p in (0..s.pods.len()).filter(|&p| cfg.pod_may_fail(p)) {
        if b.pod_crashes > 0 {
            out.push(Action::CrashPod(p));
        }
        if b.pod_pauses > 0 && s.pods[p].paused_until.is_none() {
            out.push(Action::PausePod(p));
        }
    }
    for dc in 0..cfg.dcs {
        if b.manager_crashes > 0 && (dc * 2..dc * 2 + 2).any(|m| s.managers[m].alive && s.managers[m].core.is_some()) {
            out.push(Action::CrashManager(dc));
        }
    }
    for dc in 0..cfg.dcs {
        if b.manager_rollouts > 0 && s.rollout_standby(dc).is_some() {
            out.push(Action::RollManagers(dc));
        }
    }
    if let Some(c) = s.coordinator_leader() {
        if b.coordinator_crashes > 0 {
            out.push(Action::CrashCoordinator);
        }
        if b.coordinator_pauses > 0 && s.coords[c].paused_until.is_none() {
            out.push(Action::PauseCoordinator);
        }
        if b.config_changes > 0 && s.coords[c].paused_until.is_none() {
            out.push(Action::ChangeConfig);
        }
        if b.limit_lowerings > 0 && s.coords[c].paused_until.is_none() && s.limit_lowered_at_ns.is_none() {
            out.push(Action::LowerLimitLive);
        }
    }
    let leaders = (0..s.coords.len()).map(Replica::Coordinator).chain((0..s.managers.len()).map(Replica::Manager));
    for who in leaders {
        let e = s.elector(who);
        if !s.runs(who) || e.election.term().is_none() || e.armed.is_some() {
            continue;
        }
        if b.slow_leader_replies > 0 {
            out.push(Action::FailLeaderWrite(who, WriteFault::SlowReply));
        }
        if b.leader_timeouts > 0 {
            out.push(Action::FailLeaderWrite(who, WriteFault::ReplyLost));
            out.push(Action::FailLeaderWrite(who, WriteFault::RequestLost));
        }
    }
    out
}

/// Take `a` in `s`. Fails, changing nothing, when `a` is not enabled.
pub fn apply(cfg: &ModelConfig, s: &mut State, a: Action) -> Result<(), NotEnabled> {
    if !enabled(cfg, s).contains(&a) {
        return Err(NotEnabled(a));
    }
    apply_enabled(cfg, s, a);
    Ok(())
}

/// Take `a`, which must be in `enabled(cfg, s)`.
pub fn apply_enabled(cfg: &ModelConfig, s: &mut State, a: Action) {
    let t = s.tick;
    if !matches!(a, Action::Tick | Action::Deliver(_)) {
        s.budget.total -= 1;
    }
    match a {
        Action::Tick => s.tick(cfg),
        Action::Deliver(i) => s.deliver(cfg, i),
        Action::Delay(i) => {
            s.budget.delays -= 1;
            let m = s.net.remove(i);
            s.net.push(m);
        }
        Action::Drop(i) => {
            s.budget.losses -= 1;
            s.net.remove(i);
        }
        Action::Duplicate(i) => {
            s.budget.duplicates -= 1;
            let m = s.net[i].clone();
            s.net.push(m);
        }
        Action::CrashPod(p) => {
            s.budget.pod_crashes -= 1;
            let real = s.real_ns(cfg.tick_ms);
            let pod = &mut s.pods[p];
            pod.restarts += 1;
            let (incarnation, now) = (model::pod_incarnation(p, pod.restarts), pod.clock.local(real));
            pod.core = std::sync::Arc::new(model::new_pod(cfg, pod.dc, p, incarnation, now));
            pod.paused_until = None;
            pod.shadow = Shadow::default();
        }
        Action::PausePod(p) => {
            s.budget.pod_pauses -= 1;
            s.pods[p].paused_until = Some(t + cfg.pause_ticks);
        }
        Action::CrashManager(dc) => {
            s.budget.manager_crashes -= 1;
            for m in dc * 2..dc * 2 + 2 {
                if s.managers[m].core.is_some() {
                    s.managers[m].alive = false;
                    s.managers[m].core = None;
                }
            }
        }
        Action::RollManagers(dc) => {
            s.budget.manager_rollouts -= 1;
            let Some((leader, standby)) = s.rollout_standby(dc) else { return };
            let node = &mut s.managers[standby];
            let ttl_ms = cfg.manager_leader_ttl_ticks as u64 * cfg.tick_ms;
            let records = model::term_records(cfg, dc, cfg.changed_pod_ttl_ms);
            node.elector = Elector::fresh(&model::manager_replica(dc, node.slot), ttl_ms, Some(records), cfg);
            node.rolled = true;
            node.core = None;
            node.shadow = Shadow::default();
            s.managers[leader].alive = false;
            s.managers[leader].core = None;
        }
        Action::CrashCoordinator => {
            s.budget.coordinator_crashes -= 1;
            let Some(c) = s.coordinator_leader() else { return };
            s.coords[c].alive = false;
            s.coords[c].core = None;
        }
        Action::PauseCoordinator => {
            s.budget.coordinator_pauses -= 1;
            let Some(c) = s.coordinator_leader() else { return };
            s.coords[c].paused_until = Some(t + cfg.pause_ticks);
            s.coords[c].write_on_wake = true;
        }
        Action::ChangeConfig => {
            s.budget.config_changes -= 1;
            let Some(c) = s.coordinator_leader() else { return };
            s.config_changed = true;
            let now = s.coords[c].clock.local(s.real_ns(cfg.tick_ms));
            s.take_over(cfg, c, now, 0);
        }
        Action::LowerLimitLive => {
            s.budget.limit_lowerings -= 1;
            let Some(c) = s.coordinator_leader() else { return };
            let real = s.real_ns(cfg.tick_ms);
            s.limit_lowered_at_ns = Some(real);
            let now = s.coords[c].clock.local(real);
            let lowered = model::limit_config(cfg, s.dc_ttl_ms(cfg), cfg.lowered_rate_milli_per_s);
            if let Some(core) = s.coords[c].core.as_mut() {
                std::sync::Arc::make_mut(core).reconfigure(lowered, now).expect("the modelled limit");
            }
            s.write_record(cfg, c, false);
        }
        Action::ShiftDemand => {
            s.budget.demand_shifts -= 1;
            s.demand_shifted = true;
        }
        Action::FailLeaderWrite(who, fault) => {
            match fault {
                WriteFault::SlowReply => s.budget.slow_leader_replies -= 1,
                WriteFault::ReplyLost | WriteFault::RequestLost => s.budget.leader_timeouts -= 1,
            }
            match who {
                Replica::Coordinator(c) => s.coords[c].elector.armed = Some(fault),
                Replica::Manager(m) => s.managers[m].elector.armed = Some(fault),
            }
        }
    }
}
