//! The seeded fault schedule: which fault, when, on whom, and when it heals. Pure: the same seed
//! (and the same duration, TTL and kinds) gives the same schedule, so a failing seed replays.
//!
//! Faults do not overlap: each is followed by a quiet stretch of three DC-lease TTLs (recovery is
//! measured there) and a few seconds more (the fault-free level is measured there).

use leasehold_core::rng::SeededRng;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the coordinator leader; restarted as a standby when the fault heals.
    KillCoordinatorLeader,
    /// SIGKILL a DC's manager leader; its standby takes over.
    KillDcManagerLeader,
    /// SIGSTOP a pod for longer than its lease TTL, then SIGCONT.
    PausePod,
    /// SIGKILL a pod; start it again (a new holder) when the fault heals.
    CrashPod,
    /// SIGTERM a pod (it returns its lease); start it again when the fault heals.
    DrainPod,
    /// Four new pods join one DC at once; they drain when the fault heals.
    BurstJoin,
    /// Cut one DC off the NATS cluster (its link goes through a proxy the harness controls).
    PartitionDc,
    /// SIGKILL the NATS node leading the ledger's stream (R3); restart it when the fault heals.
    KillStreamLeaderNode,
    /// SIGKILL every NATS node, then start them all again.
    RestartAllNats,
    /// A client replays old leases, publishes malformed and oversized messages, reports huge
    /// demand in another pod's name, and returns that pod's leases under ever new incarnations.
    Adversary,
}

impl FaultKind {
    pub const ALL: [FaultKind; 10] = [
        FaultKind::KillCoordinatorLeader,
        FaultKind::KillDcManagerLeader,
        FaultKind::PausePod,
        FaultKind::CrashPod,
        FaultKind::DrainPod,
        FaultKind::BurstJoin,
        FaultKind::PartitionDc,
        FaultKind::KillStreamLeaderNode,
        FaultKind::RestartAllNats,
        FaultKind::Adversary,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillCoordinatorLeader => "kill_coordinator_leader",
            FaultKind::KillDcManagerLeader => "kill_dc_manager_leader",
            FaultKind::PausePod => "pause_pod",
            FaultKind::CrashPod => "crash_pod",
            FaultKind::DrainPod => "drain_pod",
            FaultKind::BurstJoin => "burst_join",
            FaultKind::PartitionDc => "partition_dc",
            FaultKind::KillStreamLeaderNode => "kill_stream_leader_node",
            FaultKind::RestartAllNats => "restart_all_nats",
            FaultKind::Adversary => "adversary",
        }
    }

    /// How long the fault lasts before it is healed (seconds), given the pod lease TTL.
    fn length_s(self, pod_ttl_s: f64, rng: &mut SeededRng) -> f64 {
        let jitter = rng.next_f64();
        match self {
            FaultKind::PausePod => pod_ttl_s + 1.0 + jitter,
            FaultKind::PartitionDc => 6.0 + 2.0 * jitter,
            FaultKind::Adversary => 8.0 + 2.0 * jitter,
            FaultKind::BurstJoin => 6.0 + 2.0 * jitter,
            FaultKind::RestartAllNats => 1.0 + jitter,
            _ => 2.0 + 2.0 * jitter,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub at_s: f64,
    pub heal_at_s: f64,
    /// The DC (index) it hits, where it hits one.
    pub dc: usize,
    /// The pod (index within the DC) it hits, where it hits one.
    pub pod: usize,
}

pub struct Plan {
    pub duration_s: f64,
    pub warmup_s: f64,
    pub dc_ttl_s: f64,
    pub pod_ttl_s: f64,
    pub dcs: usize,
    pub pods_per_dc: usize,
}

/// Quiet time after a fault heals: three DC-lease TTLs for recovery, then a fault-free stretch.
pub fn quiet_after_s(dc_ttl_s: f64) -> f64 {
    3.0 * dc_ttl_s + 4.0
}

/// Faults in a seeded order (each kind once before any repeats), as many as fit.
pub fn schedule(seed: u64, plan: &Plan, kinds: &[FaultKind]) -> Vec<Fault> {
    let mut rng = SeededRng::new(seed);
    let mut faults = Vec::new();
    let mut t = plan.warmup_s;
    let mut order: Vec<FaultKind> = Vec::new();
    loop {
        if order.is_empty() {
            order = kinds.to_vec();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.range_u64(0, i as u64) as usize);
            }
            order.reverse();
        }
        let Some(kind) = order.pop() else { return faults };
        let length = kind.length_s(plan.pod_ttl_s, &mut rng);
        if t + length + quiet_after_s(plan.dc_ttl_s) > plan.duration_s {
            return faults;
        }
        let dc = rng.range_u64(0, plan.dcs.max(1) as u64 - 1) as usize;
        let pod = rng.range_u64(0, plan.pods_per_dc.max(1) as u64 - 1) as usize;
        faults.push(Fault { kind, at_s: t, heal_at_s: t + length, dc, pod });
        t += length + quiet_after_s(plan.dc_ttl_s);
    }
}
