//! What is modelled: topology, timing, demand, fault budgets, and the bug switches under test.
//!
//! Everything is in virtual ticks of `tick_ms` real milliseconds, so the state space stays finite.

use serde::{Deserialize, Serialize};

/// The `KnownBugs` switches of `leasehold_core::bugs` this model can turn on (the negative
/// controls). All off checks the cores as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BugSwitches {
    /// FINDINGS F1: a DC manager falls back to an older, larger DC lease when its newest expires.
    pub dc_falls_back_to_older_lease: bool,
    /// FINDINGS F2: a new best-effort DC-manager term spends E before the quiet period ends.
    pub emergency_before_quiet_period: bool,
    /// FINDINGS F3: a pod applies leases addressed to an earlier process with its id.
    pub pod_ignores_incarnation: bool,
    /// FINDINGS F4: a leader times its term from when its write's reply arrived, not from the send.
    pub leader_fresh_from_reply: bool,
    /// FINDINGS F48: a new DC-manager term waits out only its own pod-lease bounds, not the longer
    /// ones its predecessor's term record carried.
    pub term_ignores_predecessor_bounds: bool,
}

impl BugSwitches {
    pub fn any(&self) -> bool {
        self.dc_falls_back_to_older_lease
            || self.emergency_before_quiet_period
            || self.pod_ignores_incarnation
            || self.leader_fresh_from_reply
            || self.term_ignores_predecessor_bounds
    }

    pub fn known_bugs(&self) -> leasehold_core::bugs::KnownBugs {
        leasehold_core::bugs::KnownBugs {
            dc_falls_back_to_older_lease: self.dc_falls_back_to_older_lease,
            emergency_before_quiet_period: self.emergency_before_quiet_period,
            pod_ignores_incarnation: self.pod_ignores_incarnation,
            leader_fresh_from_reply: self.leader_fresh_from_reply,
            term_ignores_predecessor_bounds: self.term_ignores_predecessor_bounds,
            ..Default::default()
        }
    }
}

/// From tick `from_tick` on (inclusive), each pod of DC `d` offers `offered_per_report[d]`
/// requests per report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandStep {
    pub from_tick: u32,
    pub offered_per_report: Vec<u64>,
}

/// The kinds of in-flight message, for narrowing which ones network faults may strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MsgKind {
    PodReport,
    PodLease,
    DcReport,
    Record,
}

/// How many faults of each kind one run may contain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultBudget {
    /// Faults of all kinds together (reorders included).
    pub total: u8,
    pub losses: u8,
    pub duplicates: u8,
    /// Messages moved behind every other in-flight message (reordering and delay).
    pub delays: u8,
    pub pod_crashes: u8,
    pub pod_pauses: u8,
    pub manager_crashes: u8,
    pub coordinator_crashes: u8,
    pub coordinator_pauses: u8,
    pub config_changes: u8,
    /// The leading coordinator term lowers R to `lowered_rate_milli_per_s` in place (a limit
    /// changed live in `lh_limits`).
    pub limit_lowerings: u8,
    /// "Demand moves": from then on every DC offers `shifted_offered_per_report`.
    pub demand_shifts: u8,
    /// A rolling restart of one DC's managers that lowers `pod_ttl_ms` to `changed_pod_ttl_ms`:
    /// the standby restarts with the new setting, then the leading replica goes down.
    pub manager_rollouts: u8,
    /// A leader's leader-key write whose answer arrives `slow_leader_reply_ticks` late.
    pub slow_leader_replies: u8,
    /// A leader's leader-key write that times out (unknown outcome), landed or not.
    pub leader_timeouts: u8,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    /// R and B, in milli-units.
    pub rate_milli_per_s: u64,
    pub burst_milli: u64,
    pub dcs: usize,
    pub pods_per_dc: usize,
    /// Coordinator processes: a leader and (with 2) a standby.
    pub coordinators: usize,
    /// Reserved floor per DC (same for every DC), milli-units.
    pub floor_rate_milli_per_s: u64,
    pub floor_burst_milli: u64,
    /// Best-effort emergency allowance per DC (rate, burst); `None` = strict mode.
    pub emergency_milli: Option<(u64, u64)>,
    /// Requests offered per pod report, per DC (drives the coordinator's demand split).
    pub offered_per_report: Vec<u64>,
    /// Deterministic demand changes over time (sorted by tick; the last step reached applies).
    pub demand_schedule: Vec<DemandStep>,
    /// Demand after the explorer's "demand moves" action (fault budget `demand_shifts`).
    pub shifted_offered_per_report: Vec<u64>,
    pub tick_ms: u64,
    /// Pods report every tick; DC managers tick every tick; the coordinator every this many ticks.
    pub coordinator_every_ticks: u32,
    pub pod_ttl_ms: u64,
    /// `pod_ttl_ms` of a DC-manager process restarted by a rollout (fault `manager_rollouts`).
    pub changed_pod_ttl_ms: u64,
    pub pod_renew_ms: u64,
    pub dc_ttl_ms: u64,
    /// `dc_ttl_ms` after the one configuration change (the leader restarts with it).
    pub changed_dc_ttl_ms: u64,
    /// R after the one live lowering (fault budget `limit_lowerings`), milli-units.
    pub lowered_rate_milli_per_s: u64,
    pub coordinator_renew_ms: u64,
    pub report_timeout_ms: u64,
    /// Leadership TTL of the coordinators, in ticks (the `Leadership` core's `ttl_ms`).
    pub leader_ttl_ticks: u32,
    /// Leadership TTL of the DC managers, in ticks: a standby claims once it has seen the key
    /// unchanged this long.
    pub manager_leader_ttl_ticks: u32,
    /// The driver's own timeout on a leader-key write: after it the outcome is unknown.
    pub leader_timeout_ticks: u32,
    /// How late a slow leader-key write's answer arrives (fault `slow_leader_replies`).
    pub slow_leader_reply_ticks: u32,
    pub pause_ticks: u32,
    pub max_drift: f64,
    pub grace_ms: u64,
    /// Each clock group (coordinators, DC managers, pods) picks one drift from this set at init,
    /// in parts per million. Every node also has its own fixed clock offset.
    pub drift_ppm_choices: Vec<i64>,
    /// Every initial state is the state after this many ticks of fault-free, in-order running
    /// (a "warm" start: leases are out before the explorer branches).
    pub warmup_ticks: u32,
    /// Last tick of a run.
    pub horizon_ticks: u32,
    /// Time may advance only while at most this many messages are in flight (they are delayed).
    pub max_carry_over: usize,
    /// No new message is queued beyond this many in flight (the extra ones are lost).
    pub max_in_flight: usize,
    pub faults: FaultBudget,
    /// Pods that may crash or pause (empty: all). Narrows a negative control's search.
    pub faulty_pods: Vec<usize>,
    /// The pods are of the protocol before continuations: their reports do not say what they
    /// hold (`PodReport::held`), so a new manager term waits their leases out rather than
    /// continuing them.
    pub legacy_pods: bool,
    /// Kinds of message that may be lost, duplicated or reordered (empty: all).
    pub faulty_messages: Vec<MsgKind>,
    /// The DC managers' `event_pass_gap_ms`. 0 (the default here): every report that calls for
    /// a split splits at once, so the model explores a split after every report. Above 0: joins
    /// and growth wait for the gap or the next tick, as in production.
    pub event_pass_gap_ms: u64,
    pub bugs: BugSwitches,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            rate_milli_per_s: 100_000,
            burst_milli: 20_000,
            dcs: 2,
            pods_per_dc: 2,
            coordinators: 2,
            floor_rate_milli_per_s: 10_000,
            floor_burst_milli: 2_000,
            event_pass_gap_ms: 0,
            emergency_milli: None,
            offered_per_report: vec![30, 10],
            demand_schedule: Vec::new(),
            shifted_offered_per_report: vec![5, 40],
            tick_ms: 500,
            coordinator_every_ticks: 2,
            pod_ttl_ms: 2_000,
            changed_pod_ttl_ms: 1_500,
            pod_renew_ms: 1_000,
            dc_ttl_ms: 4_000,
            changed_dc_ttl_ms: 2_500,
            lowered_rate_milli_per_s: 60_000,
            coordinator_renew_ms: 1_000,
            report_timeout_ms: 1_500,
            leader_ttl_ticks: 4,
            manager_leader_ttl_ticks: 2,
            leader_timeout_ticks: 2,
            slow_leader_reply_ticks: 3,
            pause_ticks: 5,
            max_drift: 0.01,
            grace_ms: 50,
            drift_ppm_choices: vec![0, 5_000],
            warmup_ticks: 0,
            horizon_ticks: 12,
            max_carry_over: 2,
            max_in_flight: 16,
            faults: FaultBudget {
                total: 1,
                losses: 1,
                duplicates: 1,
                delays: 1,
                pod_crashes: 1,
                pod_pauses: 0,
                manager_crashes: 1,
                coordinator_crashes: 1,
                coordinator_pauses: 0,
                config_changes: 0,
                limit_lowerings: 0,
                demand_shifts: 0,
                manager_rollouts: 0,
                slow_leader_replies: 0,
                leader_timeouts: 0,
            },
            faulty_pods: Vec::new(),
            legacy_pods: false,
            faulty_messages: Vec::new(),
            bugs: BugSwitches::default(),
        }
    }
}

/// Why a configuration cannot be modelled.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid model configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl ModelConfig {
    /// Number of clock groups, each with one drift: coordinators, DC managers, pods.
    pub fn clock_groups(&self) -> usize {
        3
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError(m));
        if self.dcs == 0 || self.dcs > 4 || self.pods_per_dc == 0 || self.pods_per_dc > 4 {
            return bad(format!("need 1..=4 DCs and 1..=4 pods per DC, got {} and {}", self.dcs, self.pods_per_dc));
        }
        if !(1..=2).contains(&self.coordinators) {
            return bad(format!("need 1 or 2 coordinators, got {}", self.coordinators));
        }
        let demand_ok = |v: &Vec<u64>| v.len() == self.dcs;
        if !demand_ok(&self.offered_per_report)
            || !demand_ok(&self.shifted_offered_per_report)
            || !self.demand_schedule.iter().all(|s| demand_ok(&s.offered_per_report))
        {
            return bad(format!("every demand vector needs {} entries (one per DC)", self.dcs));
        }
        if self.faulty_pods.iter().any(|&p| p >= self.dcs * self.pods_per_dc) {
            return bad("faulty_pods names a pod that does not exist".into());
        }
        if self.warmup_ticks >= self.horizon_ticks {
            return bad(format!(
                "warmup_ticks {} must be below horizon_ticks {}",
                self.warmup_ticks, self.horizon_ticks
            ));
        }
        if self.tick_ms == 0
            || self.coordinator_every_ticks == 0
            || self.leader_ttl_ticks == 0
            || self.manager_leader_ttl_ticks == 0
            || self.leader_timeout_ticks == 0
            || self.slow_leader_reply_ticks == 0
        {
            return bad("tick_ms, coordinator_every_ticks, the leader TTLs, the leader timeout and the slow reply \
                 must be positive"
                .into());
        }
        if self.drift_ppm_choices.is_empty() {
            return bad("drift_ppm_choices must not be empty".into());
        }
        if self.floor_rate_milli_per_s * self.dcs as u64 > self.rate_milli_per_s {
            return bad("the DC floors exceed the limit".into());
        }
        if self.max_carry_over > self.max_in_flight {
            return bad("max_carry_over must not exceed max_in_flight".into());
        }
        crate::model::validate_core_configs(self).map_err(|e| ConfigError(e.to_string()))
    }

    /// Requests each pod of DC `dc` offers per report at `tick`.
    pub fn offered_per_report(&self, dc: usize, tick: u32, demand_shifted: bool) -> u64 {
        if demand_shifted {
            return self.shifted_offered_per_report[dc];
        }
        let step = self.demand_schedule.iter().filter(|s| s.from_tick <= tick).max_by_key(|s| s.from_tick);
        step.map_or(self.offered_per_report[dc], |s| s.offered_per_report[dc])
    }

    /// Whether network faults may strike a message of this kind.
    pub fn message_may_fail(&self, kind: MsgKind) -> bool {
        self.faulty_messages.is_empty() || self.faulty_messages.contains(&kind)
    }

    /// Whether pod `pod` may crash or pause.
    pub fn pod_may_fail(&self, pod: usize) -> bool {
        self.faulty_pods.is_empty() || self.faulty_pods.contains(&pod)
    }

    /// The bound the ground truth is checked against: R, B, plus Σ E in best-effort mode.
    pub fn allowed_milli(&self) -> (u64, u64) {
        self.allowed_milli_at(self.rate_milli_per_s)
    }

    /// [`allowed_milli`](Self::allowed_milli) with R = `rate_milli_per_s` (a lowered limit).
    pub fn allowed_milli_at(&self, rate_milli_per_s: u64) -> (u64, u64) {
        let (er, eb) = self.emergency_milli.unwrap_or((0, 0));
        (rate_milli_per_s + er * self.dcs as u64, self.burst_milli + eb * self.dcs as u64)
    }

    /// When a limit lowered at `at_ns` (real time) stops being in force: one DC-lease lifetime
    /// of the longest TTL any term may use, stretched (the window the guarantee names).
    pub fn lowering_window_end_ns(&self, at_ns: u64) -> u64 {
        let ttl_ms = self.dc_ttl_ms.max(self.changed_dc_ttl_ms);
        crate::model::expiry(self).issuer_live_until_ns(at_ns, ttl_ms)
    }
}
