//! The chaos run's verdict: the summary (the last stdout line) judged from the upstream's
//! counters and the per-second counts, and the run's record (`run.json`: summary, fault log,
//! schedule and per-second counts by DC).

use super::adversary::Sent;
use super::failover::{manager_failovers, ManagerFailover};
use super::judge::{judge, lag_excused, ByDc};
use super::schedule::Fault;
use super::{ChaosArgs, WARMUP_S};
use crate::demo::load::Bins;
use crate::demo::observe::UpstreamStats;
use crate::demo::{BURST, DCS, HARD_CALLS, LEADER_TTL_MS};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One line of the fault log: a fault applied or healed at `t_s`, and what it did.
#[derive(Serialize)]
pub struct LogEntry {
    pub t_s: f64,
    #[serde(flatten)]
    pub step: Step,
    pub what: String,
}

/// Printed as `"fault": kind` or `"heal": kind`.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Fault(&'static str),
    Heal(&'static str),
}

/// A scheduled fault and how long after healing utilization came back (None: not within its
/// quiet stretch).
#[derive(Serialize)]
pub struct Recovery {
    pub kind: &'static str,
    pub at_s: f64,
    pub heal_at_s: f64,
    /// After every NATS node restarted: when JetStream led the leader and ledger buckets'
    /// streams again. Recovery is measured from here (no client can write before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_back_at_s: Option<f64>,
    pub recovery_s: Option<f64>,
}

#[derive(Serialize)]
pub struct Summary {
    pub seed: u64,
    pub duration_s: u64,
    pub faults_injected: BTreeMap<&'static str, u64>,
    pub upstream_rejections: u64,
    pub upstream_calls: u64,
    pub max_window: u64,
    pub max_window_ratio: f64,
    pub utilization_outside_faults: f64,
    pub seconds_outside_faults: usize,
    pub recovery_s_max: f64,
    pub recovered_from_every_fault: bool,
    /// Three DC-lease TTLs, plus one leader TTL: after an outage of every NATS server a leader
    /// must land a renewal (or a standby watch the key for a full TTL) before it acts.
    pub recovery_bound_s: f64,
    pub dc_ttl_ms: u64,
    pub offered: f64,
    pub admitted: f64,
    pub load_errors: u64,
    pub processes_crashed: Vec<String>,
    pub adversary: Vec<Sent>,
    pub recoveries: Vec<Recovery>,
    /// What each DC-manager leader kill cost its DC ([`ManagerFailover`]).
    pub manager_failovers: Vec<ManagerFailover>,
    pub mode: &'static str,
    pub bound_1s_window: u64,
    pub safe: bool,
}

/// What the run did, for the judge.
pub struct Ran<'a> {
    pub schedule: &'a [Fault],
    /// Per scheduled fault: when JetStream led the buckets' streams again after it, if measured.
    pub store_back_at_s: Vec<Option<f64>>,
    pub injected: BTreeMap<&'static str, u64>,
    pub bins: &'a Bins,
    /// Per second, per DC, the most agents not ready.
    pub not_ready: &'a [Vec<u32>],
    pub upstream: &'a UpstreamStats,
    pub crashed: Vec<String>,
    pub adversary: Vec<Sent>,
}

pub fn summarize(a: &ChaosArgs, ran: Ran) -> Summary {
    let Ran { schedule, store_back_at_s, mut injected, bins: b, not_ready, upstream: up, crashed, adversary } = ran;
    let dc_ttl_s = a.dc_ttl_ms as f64 / 1_000.0;
    let secs = a.duration_s as usize;
    let offered: Vec<f64> = (0..secs).map(|s| b.offered[s].iter().sum::<u64>() as f64).collect();
    let admitted: Vec<f64> = (0..secs).map(|s| b.admitted[s].iter().sum::<u64>() as f64).collect();
    let rate = crate::demo::rate_per_s() as f64;
    // A fault lasts until JetStream can be written again where that was measured.
    let judged: Vec<Fault> = schedule
        .iter()
        .zip(store_back_at_s.iter().chain(std::iter::repeat(&None)))
        .map(|(f, back)| Fault { heal_at_s: back.map_or(f.heal_at_s, |b| b.max(f.heal_at_s)), ..f.clone() })
        .collect();
    let by_dc = ByDc { offered: &b.offered[..secs], admitted: &b.admitted[..secs], denied: &b.denied[..secs] };
    let excused = lag_excused(&by_dc, dc_ttl_s);
    let renew_s = leasehold_core::dc_manager::DcManagerConfig::new("", "", "").renew_interval_ms as f64 / 1_000.0;
    let manager_failovers = manager_failovers(schedule, &by_dc, not_ready, renew_s);
    let j = judge(&offered, &admitted, &excused, rate, &judged, dc_ttl_s, WARMUP_S);
    injected.insert("clock_skew", 2);
    let recoveries: Vec<Recovery> = schedule
        .iter()
        .zip(&j.recovery_s)
        .zip(store_back_at_s.iter().chain(std::iter::repeat(&None)))
        .map(|((f, &r), &back)| Recovery {
            kind: f.kind.name(),
            at_s: f.at_s,
            heal_at_s: f.heal_at_s,
            store_back_at_s: back,
            recovery_s: r,
        })
        .collect();
    let recovery_s_max = j.recovery_s.iter().flatten().fold(0.0f64, |m, &r| m.max(r));
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    // Strict: the upstream's hard limit. Best-effort: the documented bound for a 1 s window with
    // the demo's 100 ms permit-to-call jitter, (R + ΣE)·1.1 s + B (the upstream may then reject
    // calls, as the operator accepted).
    let emergency_total = a.emergency_per_dc * DCS.len() as u64;
    let bound_1s = (crate::demo::rate_per_s() + emergency_total) * 11 / 10 + BURST;
    let safe =
        if emergency_total == 0 { up.rejected == 0 && up.max_window_ratio <= 1.0 } else { up.max_window <= bound_1s };
    Summary {
        seed: a.seed,
        duration_s: a.duration_s,
        faults_injected: injected,
        upstream_rejections: up.rejected,
        upstream_calls: up.total,
        max_window: up.max_window,
        max_window_ratio: up.max_window_ratio,
        utilization_outside_faults: round(j.utilization_outside_faults),
        seconds_outside_faults: j.seconds_outside_faults,
        recovery_s_max: round(recovery_s_max),
        recovered_from_every_fault: j.recovery_s.iter().all(Option::is_some),
        recovery_bound_s: 3.0 * dc_ttl_s + LEADER_TTL_MS as f64 / 1_000.0,
        dc_ttl_ms: a.dc_ttl_ms,
        offered: offered.iter().sum(),
        admitted: admitted.iter().sum(),
        load_errors: b.errors,
        processes_crashed: crashed,
        adversary,
        recoveries,
        manager_failovers,
        mode: if emergency_total == 0 { "strict" } else { "best-effort" },
        bound_1s_window: if emergency_total == 0 { HARD_CALLS } else { bound_1s },
        safe,
    }
}

#[derive(Serialize)]
struct PerSecondByDc<'a> {
    offered: &'a [Vec<u64>],
    admitted: &'a [Vec<u64>],
    denied: &'a [Vec<u64>],
}

#[derive(Serialize)]
struct Record<'a> {
    summary: &'a Summary,
    log: &'a [LogEntry],
    schedule: &'a [Fault],
    per_second_by_dc: PerSecondByDc<'a>,
}

/// Write `run.json` (best effort: the summary line is the verdict).
pub fn write_record(out_dir: &Path, summary: &Summary, log: &[LogEntry], schedule: &[Fault], b: &Bins) {
    let record = out_dir.join("run.json");
    let per_second_by_dc = PerSecondByDc { offered: &b.offered, admitted: &b.admitted, denied: &b.denied };
    let body = Record { summary, log, schedule, per_second_by_dc };
    let _ = std::fs::write(&record, serde_json::to_string_pretty(&body).unwrap_or_default());
    eprintln!("chaos: the fault log is in {}", record.display());
}
