//! The steady state: every message and KV write counted for the measuring time, the CPU each
//! service used, the gaps between a pod's lease messages.

use super::{Args, PeriodsMs, Running};
use futures::StreamExt;
use leasehold_sim::percentiles::Percentiles;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The kind of message a subject carries.
pub(super) fn kind(subject: &str) -> &'static str {
    if subject.starts_with("$KV.lh_ledger.") {
        "kv_ledger_write"
    } else if subject.starts_with("$KV.lh_leaders.dc.") {
        "kv_dc_leader_write"
    } else if subject.starts_with("$KV.lh_leaders.") {
        "kv_coordinator_leader_write"
    } else if subject.starts_with("lh.dc.") {
        "dc_report"
    } else if subject.starts_with("lh.pod.") && subject.ends_with(".report") {
        "pod_report"
    } else if subject.starts_with("lh.pod.") && subject.ends_with(".lease") {
        "pod_lease"
    } else {
        "other"
    }
}

/// What the monitor saw in the measuring time.
pub(super) struct Counted {
    secs: f64,
    counts: BTreeMap<&'static str, u64>,
    items: BTreeMap<&'static str, u64>,
    bytes: u64,
    lease_gap_us: Percentiles,
    passes: Passes,
    cpu_s_per_s: CpuSPerS,
    malformed: u64,
    /// The same gaps, seen by the monitor's connection (not the pods').
    monitor_gap_us: Percentiles,
}

/// CPU seconds per second used by each service's threads (its NATS client included).
#[derive(Clone, Serialize)]
pub(super) struct CpuSPerS {
    coordinator: Option<f64>,
    /// Each DC's manager.
    dc_managers: Vec<Option<f64>>,
    /// The bench's simulated pods (not a Leasehold service).
    bench_pods: Option<f64>,
    /// The nats-server the bench started (none with `--nats-url`): every message once in and
    /// out to its receiver, and out again to the bench's monitor, which subscribes to them all.
    nats_server: Option<f64>,
    /// The rest of the bench's process: mostly the monitor, counting every message's items.
    bench_monitor_and_rest: Option<f64>,
}

/// CPU seconds used so far: the coordinator, each DC manager, the pods, the nats-server and the
/// bench's whole process.
struct CpuNow {
    coordinator: Option<f64>,
    managers: Vec<Option<f64>>,
    pods: Option<f64>,
    nats_server: Option<f64>,
    process: Option<f64>,
}

fn cpu_now(r: &Running) -> CpuNow {
    CpuNow {
        coordinator: r.coordinator.0.cpu_seconds(),
        managers: r.managers.iter().map(|m| m.1.cpu_seconds()).collect(),
        pods: r.pods_rt.cpu_seconds(),
        nats_server: r.nats_server_pid().and_then(crate::bench::cpu::cpu_seconds),
        process: crate::bench::cpu::cpu_seconds(std::process::id()),
    }
}

impl CpuNow {
    /// The process's CPU that none of its measured runtimes used.
    fn rest(&self) -> Option<f64> {
        let measured = self.coordinator? + self.pods? + self.managers.iter().copied().sum::<Option<f64>>()?;
        Some(self.process? - measured)
    }
}

/// The DC managers' splits so far, in all.
#[derive(Clone, Copy, Default)]
struct Passes {
    full: u64,
    full_dc_lease: u64,
    full_join: u64,
    growth: u64,
    /// Pod report batches the managers dropped unread (their inbound queue full).
    reports_shed: u64,
    /// DC leases the managers took, and the sum of their ages then (since their DC reports).
    dc_leases: u64,
    dc_lease_age_ms: u64,
}

impl Passes {
    /// What happened between `before` and these counts.
    fn since(self, before: Passes) -> Passes {
        Passes {
            full: self.full.saturating_sub(before.full),
            full_dc_lease: self.full_dc_lease.saturating_sub(before.full_dc_lease),
            full_join: self.full_join.saturating_sub(before.full_join),
            growth: self.growth.saturating_sub(before.growth),
            reports_shed: self.reports_shed.saturating_sub(before.reports_shed),
            dc_leases: self.dc_leases.saturating_sub(before.dc_leases),
            dc_lease_age_ms: self.dc_lease_age_ms.saturating_sub(before.dc_lease_age_ms),
        }
    }
}

fn passes(r: &Running) -> Passes {
    r.managers.iter().fold(Passes::default(), |p, m| {
        let s = m.2.status.borrow();
        let t = &s.totals;
        Passes {
            full: p.full + t.passes_full,
            full_dc_lease: p.full_dc_lease + t.passes_full_dc_lease,
            full_join: p.full_join + t.passes_full_join,
            growth: p.growth + t.passes_growth,
            reports_shed: p.reports_shed + s.report_batches_shed,
            dc_leases: p.dc_leases + t.dc_leases_accepted,
            dc_lease_age_ms: p.dc_lease_age_ms + t.dc_lease_age_ms_total,
        }
    })
}

/// Count every message on `lh.>` and every KV write on `$KV.>` for `duration`.
pub(super) async fn count(r: &Running, duration: Duration) -> Result<Counted, String> {
    let monitor = &r.monitor;
    let mut all = monitor.subscribe("lh.>").await.map_err(|e| e.to_string())?;
    let mut kv = monitor.subscribe("$KV.>").await.map_err(|e| e.to_string())?;
    monitor.flush().await.map_err(|e| e.to_string())?;
    r.fleet.start_measuring();
    let start = Instant::now();
    let cpu_before = cpu_now(r);
    let passes_before = passes(r);
    let end = start + duration;
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut items_seen: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut bytes: u64 = 0;
    let mut last_lease: std::collections::HashMap<String, Instant> = Default::default();
    let mut monitor_gap_us = Percentiles::new();
    let mut progress = Progress::new(r, start);
    loop {
        let msg = tokio::select! {
            m = all.next() => m,
            m = kv.next() => m,
            _ = tokio::time::sleep_until(progress.next_at.into()) => {
                progress.print(r);
                continue;
            }
            _ = tokio::time::sleep_until(end.into()) => None,
        };
        let Some(msg) = msg else { break };
        let k = kind(msg.subject.as_str());
        *counts.entry(k).or_default() += 1;
        if !k.starts_with("kv_") {
            *items_seen.entry(k).or_default() += crate::bench::batch_items(&msg.payload);
        }
        bytes += msg.payload.len() as u64;
        if k == "pod_lease" {
            let now = Instant::now();
            if let Some(prev) = last_lease.insert(msg.subject.to_string(), now) {
                monitor_gap_us.record(now.duration_since(prev).as_micros() as u64);
            }
        }
    }

    let secs = start.elapsed().as_secs_f64();
    let cpu_after = cpu_now(r);
    let passes_after = passes(r);
    let per_s = |a: Option<f64>, b: Option<f64>| Some(round((b? - a?) / secs));
    Ok(Counted {
        secs,
        counts,
        items: items_seen,
        bytes,
        lease_gap_us: r.fleet.lease_gap_us(),
        passes: passes_after.since(passes_before),
        malformed: r.fleet.malformed(),
        monitor_gap_us,
        cpu_s_per_s: CpuSPerS {
            coordinator: per_s(cpu_before.coordinator, cpu_after.coordinator),
            dc_managers: cpu_before.managers.iter().zip(&cpu_after.managers).map(|(a, b)| per_s(*a, *b)).collect(),
            bench_pods: per_s(cpu_before.pods, cpu_after.pods),
            nats_server: per_s(cpu_before.nats_server, cpu_after.nats_server),
            bench_monitor_and_rest: per_s(cpu_before.rest(), cpu_after.rest()),
        },
    })
}

/// Wait `duration`, printing [`Progress`].
pub(super) async fn settle(r: &Running, duration: Duration) {
    let end = Instant::now() + duration;
    let mut progress = Progress::new(r, Instant::now());
    while progress.next_at <= end {
        tokio::time::sleep_until(progress.next_at.into()).await;
        progress.print(r);
    }
    tokio::time::sleep_until(end.into()).await;
}

/// One line on stderr every few seconds of the measuring time: what the managers did in it
/// (splits, growth passes, batches shed) and their CPU, so a run that falls behind shows when.
struct Progress {
    next_at: Instant,
    since: Instant,
    passes: Passes,
    cpu_s: CpuNow,
}

impl Progress {
    const EVERY: Duration = Duration::from_secs(5);

    fn new(r: &Running, start: Instant) -> Self {
        Progress { next_at: start + Self::EVERY, since: start, passes: passes(r), cpu_s: cpu_now(r) }
    }

    fn print(&mut self, r: &Running) {
        let (now, p, cpu) = (Instant::now(), passes(r), cpu_now(r));
        let secs = now.duration_since(self.since).as_secs_f64().max(1e-3);
        let done = p.since(self.passes);
        let per_s = |n: u64| n as f64 / secs;
        let cores =
            |a: Option<f64>, b: Option<f64>| a.zip(b).map_or("?".into(), |(a, b)| format!("{:.2}", (b - a) / secs));
        let managers: Vec<String> = self.cpu_s.managers.iter().zip(&cpu.managers).map(|(a, b)| cores(*a, *b)).collect();
        let lags_ms: Vec<String> =
            r.managers.iter().map(|m| m.2.status.borrow().report_read_lag_ms.to_string()).collect();
        eprintln!(
            "bench: last {secs:.0} s: full splits {:.0}/s ({:.0} by DC leases, aged {:.0} ms on average), growth passes {:.0}/s, report batches shed {:.0}/s, read lag now {} ms; cores: managers {}, coordinator {}",
            per_s(done.full),
            per_s(done.full_dc_lease),
            done.dc_lease_age_ms as f64 / done.dc_leases.max(1) as f64,
            per_s(done.growth),
            per_s(done.reports_shed),
            lags_ms.join(" + "),
            managers.join(" + "),
            cores(self.cpu_s.coordinator, cpu.coordinator),
        );
        *self = Progress { next_at: now + Self::EVERY, since: now, passes: p, cpu_s: cpu };
    }
}

pub(super) use crate::bench::round_3 as round;

/// The bench's one JSON line.
#[derive(Serialize)]
pub(super) struct Summary {
    pods_per_dc: usize,
    dcs: usize,
    limits: usize,
    /// Waited before measuring, once every pod held a lease (`--settle-s`).
    settle_s: u64,
    duration_s: f64,
    periods_ms: PeriodsMs,
    msgs_per_s: BTreeMap<&'static str, f64>,
    /// Items (one per limit) inside those messages, per second.
    items_per_s: BTreeMap<&'static str, f64>,
    bytes_per_s: f64,
    per_pod: PerPod,
    per_dc: PerDc,
    per_limit: PerLimit,
    kv_writes_per_s: KvWritesPerS,
    cpu_s_per_s: CpuSPerS,
    /// Time between two lease messages to one pod.
    lease_gap_ms: LeaseGapMs,
    pub(super) lease_gap_p99_within_1_1_renew_periods: bool,
    /// The gap's p99 as the monitor's connection sees it (the bench's pods share one reader).
    monitor_lease_gap_p99_ms: f64,
    /// Splits per second, over every DC manager and limit.
    dc_passes_per_s: DcPassesPerS,
    pub(super) join_storm: Option<super::storm::JoinStorm>,
    /// Lease batches the pods could not read (0 unless the protocol broke).
    lease_batches_malformed: u64,
}

#[derive(Serialize)]
struct PerPod {
    /// Report messages a pod sends per second (one per period, whatever the limits).
    reports_per_s: f64,
    /// Lease messages a pod receives per second.
    leases_per_s: f64,
    /// Per-limit reports and leases inside them, per second.
    report_items_per_s: f64,
    lease_items_per_s: f64,
    bytes_per_s: f64,
}

#[derive(Serialize)]
struct PerDc {
    dc_reports_per_s: f64,
    dc_report_items_per_s: f64,
    kv_leader_writes_per_s: f64,
    /// Every message on `lh.>` of the DC's pods and manager.
    msgs_per_s: f64,
}

#[derive(Serialize)]
struct PerLimit {
    /// Report and lease items per second, over every pod, for one limit.
    pod_items_per_s: f64,
    ledger_writes_per_s: f64,
}

#[derive(Serialize)]
struct KvWritesPerS {
    ledger: f64,
    coordinator_leader: f64,
    dc_leader: f64,
}

#[derive(Serialize)]
struct LeaseGapMs {
    p50: f64,
    p99: f64,
    max: f64,
}

#[derive(Serialize)]
struct DcPassesPerS {
    full: f64,
    /// Of `full`, those a DC lease ran and those a joining pod ran (the rest: renewal ticks,
    /// floors).
    full_by_dc_lease: f64,
    full_by_join: f64,
    growth: f64,
    /// Pod report batches the managers dropped unread per second (`report_batches_shed`: a
    /// manager reading slower than its pods send).
    reports_shed: f64,
    /// The mean age of the DC leases the managers took, when they took them: since the DC report
    /// each answers (a lease counts from then; a late one is cut short and re-split).
    dc_lease_age_ms_mean: Option<f64>,
}

/// Rates per second (rounded to 0.001).
pub(super) fn summarize(a: &Args, periods_ms: PeriodsMs, c: &Counted) -> Summary {
    let rate = |k: &str| c.counts.get(k).copied().unwrap_or(0) as f64 / c.secs;
    let item_rate = |k: &str| c.items.get(k).copied().unwrap_or(0) as f64 / c.secs;
    let pods = (a.pods * a.dcs) as f64;
    let dcs = a.dcs as f64;
    let gap_ms = |us: Option<u64>| us.map_or(0.0, |us| us as f64 / 1_000.0);
    let gap_p99 = gap_ms(c.lease_gap_us.at(0.99));
    let pod_msgs = ["pod_report", "pod_lease", "dc_report"].iter().map(|k| rate(k)).sum::<f64>();
    Summary {
        pods_per_dc: a.pods,
        dcs: a.dcs,
        limits: a.limits,
        settle_s: a.settle_s,
        duration_s: round(c.secs),
        msgs_per_s: c.counts.keys().map(|&k| (k, round(rate(k)))).collect(),
        items_per_s: c.items.iter().filter(|(_, &n)| n > 0).map(|(&k, _)| (k, round(item_rate(k)))).collect(),
        bytes_per_s: round(c.bytes as f64 / c.secs),
        per_pod: PerPod {
            reports_per_s: round(rate("pod_report") / pods),
            leases_per_s: round(rate("pod_lease") / pods),
            report_items_per_s: round(item_rate("pod_report") / pods),
            lease_items_per_s: round(item_rate("pod_lease") / pods),
            bytes_per_s: round(c.bytes as f64 / c.secs / pods),
        },
        per_dc: PerDc {
            dc_reports_per_s: round(rate("dc_report") / dcs),
            dc_report_items_per_s: round(item_rate("dc_report") / dcs),
            kv_leader_writes_per_s: round(rate("kv_dc_leader_write") / dcs),
            msgs_per_s: round(pod_msgs / dcs),
        },
        per_limit: PerLimit {
            pod_items_per_s: round((item_rate("pod_report") + item_rate("pod_lease")) / a.limits as f64),
            ledger_writes_per_s: round(rate("kv_ledger_write") / a.limits as f64),
        },
        kv_writes_per_s: KvWritesPerS {
            ledger: round(rate("kv_ledger_write")),
            coordinator_leader: round(rate("kv_coordinator_leader_write")),
            dc_leader: round(rate("kv_dc_leader_write")),
        },
        cpu_s_per_s: c.cpu_s_per_s.clone(),
        lease_gap_ms: LeaseGapMs {
            p50: round(gap_ms(c.lease_gap_us.at(0.5))),
            p99: round(gap_p99),
            max: round(gap_ms(c.lease_gap_us.max())),
        },
        monitor_lease_gap_p99_ms: round(gap_ms(c.monitor_gap_us.at(0.99))),
        lease_gap_p99_within_1_1_renew_periods: c.lease_gap_us.count() > 0
            && gap_p99 <= periods_ms.pod_renew as f64 * 1.1,
        dc_passes_per_s: DcPassesPerS {
            full: round(c.passes.full as f64 / c.secs),
            full_by_dc_lease: round(c.passes.full_dc_lease as f64 / c.secs),
            full_by_join: round(c.passes.full_join as f64 / c.secs),
            growth: round(c.passes.growth as f64 / c.secs),
            reports_shed: round(c.passes.reports_shed as f64 / c.secs),
            dc_lease_age_ms_mean: (c.passes.dc_leases > 0)
                .then(|| round(c.passes.dc_lease_age_ms as f64 / c.passes.dc_leases as f64)),
        },
        join_storm: None,
        lease_batches_malformed: c.malformed,
        periods_ms,
    }
}
