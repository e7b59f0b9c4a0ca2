//! Named configurations: the bounded CI run, the deep run, and one negative control per
//! `KnownBugs` switch (each with the switch on; [`without_bugs`] gives the same model fixed).

use crate::config::{BugSwitches, DemandStep, FaultBudget, ModelConfig, MsgKind};

pub const NAMES: &[&str] = &[
    "ci",
    "deep",
    "best-effort",
    "live-lower",
    "older-lease",
    "emergency-quiet",
    "pod-incarnation",
    "term-from-reply",
    "ttl-lowering",
];

/// The negative controls: (preset name, the hole it brings back, by its docs/FINDINGS.md entry).
pub const CONTROLS: &[(&str, &str)] = &[
    ("older-lease", "F1: a DC manager falls back to an older, larger DC lease"),
    ("emergency-quiet", "F2: a new best-effort term spends E before the quiet period"),
    ("pod-incarnation", "F3: a restarted pod applies its previous process's late lease"),
    ("term-from-reply", "F4: a leader times its term from a late reply and acts beside its successor"),
    ("ttl-lowering", "F48: a new DC-manager term waits only its own pod TTL, not its predecessor's longer one"),
];

pub fn by_name(name: &str) -> Option<ModelConfig> {
    Some(match name {
        "ci" => ci(),
        "deep" => deep(),
        "best-effort" => best_effort(),
        "live-lower" => live_lower(),
        "older-lease" => older_lease(),
        "emergency-quiet" => emergency_quiet(),
        "pod-incarnation" => pod_incarnation(),
        "term-from-reply" => term_from_reply(),
        "ttl-lowering" => ttl_lowering(),
        _ => return None,
    })
}

/// The same model with every bug switch off (the fixed cores).
pub fn without_bugs(cfg: ModelConfig) -> ModelConfig {
    ModelConfig { bugs: BugSwitches::default(), ..cfg }
}

/// 2 DCs × 2 pods, coordinator + standby, DC manager + standby per DC, warm start after 3 s;
/// one fault of any kind (loss, duplicate, reorder, pod crash or pause, manager crash, a rolling
/// restart of a DC's managers that lowers `pod_ttl_ms`, coordinator crash or pause,
/// configuration change, demand move, a leader's write answered late or timing out) on top of in-order delivery with up to 2 messages carried over a tick.
pub fn ci() -> ModelConfig {
    ModelConfig {
        warmup_ticks: 6,
        horizon_ticks: 20,
        faults: FaultBudget {
            total: 1,
            losses: 1,
            duplicates: 1,
            delays: 1,
            pod_crashes: 1,
            pod_pauses: 1,
            manager_crashes: 1,
            coordinator_crashes: 1,
            coordinator_pauses: 1,
            config_changes: 1,
            limit_lowerings: 1,
            demand_shifts: 1,
            manager_rollouts: 1,
            slow_leader_replies: 1,
            leader_timeouts: 1,
        },
        ..ModelConfig::default()
    }
}

/// A limit lowered live (R 100 → 60/s in the leading term, as `lh_limits` changes it) together
/// with a second fault: a coordinator or manager crash, a lost or reordered message. Pods must
/// never spend above the old R, and above the new one from one DC-lease lifetime after the
/// change. 2 DCs × 1 pod.
pub fn live_lower() -> ModelConfig {
    ModelConfig {
        pods_per_dc: 1,
        warmup_ticks: 6,
        horizon_ticks: 20,
        faults: FaultBudget {
            total: 2,
            limit_lowerings: 1,
            coordinator_crashes: 1,
            manager_crashes: 1,
            losses: 1,
            delays: 1,
            ..FaultBudget::default()
        },
        ..ModelConfig::default()
    }
}

/// `ci` with three drift choices per clock group and a longer horizon (a second fault per run
/// is `--config` away, but keeps BFS at depth ~13 within 10^6 states).
pub fn deep() -> ModelConfig {
    ModelConfig { drift_ppm_choices: vec![-5_000, 0, 5_000], horizon_ticks: 24, ..ci() }
}

/// `ci` in best-effort mode: each DC may use an emergency allowance E after its DC lease expires.
pub fn best_effort() -> ModelConfig {
    ModelConfig { emergency_milli: Some((5_000, 1_000)), ..ci() }
}

/// FINDINGS F1. One coordinator process (no standby), one pod per DC, 1 s ticks, in-order delivery.
/// The explorer may restart the leader with `dc_ttl_ms` 10 s → 6 s, move demand from DC 0 to
/// DC 1 and crash the leader: DC 0's newest (smaller, 6 s) lease then expires before the older,
/// larger 10 s one it replaced, whose share DC 1 already holds.
pub fn older_lease() -> ModelConfig {
    ModelConfig {
        pods_per_dc: 1,
        coordinators: 1,
        offered_per_report: vec![90, 30],
        demand_schedule: vec![DemandStep { from_tick: 8, offered_per_report: vec![0, 100] }],
        tick_ms: 1_000,
        coordinator_every_ticks: 1,
        pod_ttl_ms: 3_000,
        pod_renew_ms: 1_000,
        dc_ttl_ms: 20_000,
        changed_dc_ttl_ms: 4_000,
        report_timeout_ms: 2_500,
        leader_ttl_ticks: 3,
        manager_leader_ttl_ticks: 2,
        drift_ppm_choices: vec![0],
        warmup_ticks: 6,
        horizon_ticks: 20,
        max_carry_over: 0,
        faulty_messages: vec![MsgKind::DcReport],
        faults: FaultBudget {
            total: 4,
            coordinator_crashes: 1,
            config_changes: 1,
            losses: 2,
            ..FaultBudget::default()
        },
        bugs: BugSwitches { dc_falls_back_to_older_lease: true, ..BugSwitches::default() },
        ..ModelConfig::default()
    }
}

/// FINDINGS F2. Best-effort mode with floors that nearly fill R (45 + 45 of 100) and E above the
/// floor, so the documented bound R + Σ E has little slack; one coordinator process. Once the
/// leader crashes both DCs run on floor + E; then DC 0's manager crashes and its standby takes
/// over after 1 s, while the old term's 3 s pod leases are still live. The pods are legacy ones
/// (no `held`): pods the new term continues are counted in its books, so with continuations it
/// takes a further fault (a pod it cannot reach) to show the hole.
pub fn emergency_quiet() -> ModelConfig {
    ModelConfig {
        rate_milli_per_s: 100_000,
        burst_milli: 20_000,
        floor_rate_milli_per_s: 45_000,
        floor_burst_milli: 9_000,
        emergency_milli: Some((80_000, 16_000)),
        coordinators: 1,
        offered_per_report: vec![30, 30],
        pod_ttl_ms: 3_000,
        dc_ttl_ms: 3_000,
        changed_dc_ttl_ms: 3_000,
        drift_ppm_choices: vec![0],
        warmup_ticks: 6,
        horizon_ticks: 24,
        max_carry_over: 0,
        faults: FaultBudget { total: 2, coordinator_crashes: 1, manager_crashes: 1, ..FaultBudget::default() },
        bugs: BugSwitches { emergency_before_quiet_period: true, ..BugSwitches::default() },
        legacy_pods: true,
        ..ModelConfig::default()
    }
}

/// FINDINGS F3. A cold start (pods' sequence numbers are still small), faults on pod 0 only: a
/// reorder, a long pause (4 s) and a crash. A lease that answered the first process's report 1
/// is held while the pod is frozen; the pod then restarts under the same id and sends its own
/// report 1, and the late lease arrives: its countdown now starts seconds after it was issued.
pub fn pod_incarnation() -> ModelConfig {
    ModelConfig {
        offered_per_report: vec![60, 60],
        drift_ppm_choices: vec![0],
        pause_ticks: 8,
        warmup_ticks: 0,
        horizon_ticks: 16,
        max_carry_over: 0,
        faulty_pods: vec![0],
        faults: FaultBudget { total: 3, delays: 1, pod_pauses: 1, pod_crashes: 1, ..FaultBudget::default() },
        bugs: BugSwitches { pod_ignores_incarnation: true, ..BugSwitches::default() },
        ..ModelConfig::default()
    }
}

/// FINDINGS F4. 2 DCs × 1 pod, in-order delivery, faults only on leader-key writes: one answer
/// `slow_leader_reply_ticks` (1.5 s) late and one write that times out, landed or not. A DC
/// manager whose renewal is answered late has stopped acting when the standby, having seen the
/// key unchanged for the TTL (1 s), claims; timing its term from the late answer, it acts again
/// beside the new term.
pub fn term_from_reply() -> ModelConfig {
    ModelConfig {
        pods_per_dc: 1,
        warmup_ticks: 6,
        horizon_ticks: 20,
        max_carry_over: 0,
        faults: FaultBudget { total: 2, slow_leader_replies: 1, leader_timeouts: 1, ..FaultBudget::default() },
        bugs: BugSwitches { leader_fresh_from_reply: true, ..BugSwitches::default() },
        ..ModelConfig::default()
    }
}

/// FINDINGS F48. Strict mode, floors that nearly fill R (45 + 45 of 100), one coordinator process:
/// once it crashes both DCs run on their floors, DC 0's term A cutting 6 s pod leases from it.
/// Pod 0 freezes holding its lease (its reports stop), and a rolling restart lowers DC 0's
/// `pod_ttl_ms` to 1.5 s: the standby restarts with it, the leader goes down, and the standby's
/// term B, having heard only from pod 1, gives it the whole floor. B must wait out A's 6 s
/// leases (its term record), not its own 1.5 s, or DC 0 spends its floor twice.
pub fn ttl_lowering() -> ModelConfig {
    ModelConfig {
        floor_rate_milli_per_s: 45_000,
        floor_burst_milli: 9_000,
        coordinators: 1,
        offered_per_report: vec![60, 60],
        pod_ttl_ms: 6_000,
        changed_pod_ttl_ms: 1_500,
        dc_ttl_ms: 3_000,
        changed_dc_ttl_ms: 3_000,
        drift_ppm_choices: vec![0],
        pause_ticks: 10,
        warmup_ticks: 6,
        horizon_ticks: 24,
        max_carry_over: 0,
        faulty_pods: vec![0],
        faults: FaultBudget {
            total: 3,
            coordinator_crashes: 1,
            pod_pauses: 1,
            manager_rollouts: 1,
            ..FaultBudget::default()
        },
        bugs: BugSwitches { term_ignores_predecessor_bounds: true, ..BugSwitches::default() },
        ..ModelConfig::default()
    }
}
