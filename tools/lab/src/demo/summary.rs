//! The demo's verdict: one JSON line, a chart per limit, and the exit code.

use super::limits::{DemoLimit, LIMITS};
use super::load::Bins;
use super::observe::{correlation, UpstreamStats};
use super::{lowering, upgrade};
use super::{DemoArgs, DCS, DC_TTL_MS, HARD_WINDOW_MS, PODS_PER_DC};
use leasehold_sim::metrics::Series;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Share correlation above which allocation is said to follow demand.
const FOLLOWS_MIN_CORRELATION: f64 = 0.8;

/// What happened to the processes.
pub(super) struct Outcome {
    /// Children that exited without being killed by the demo.
    pub crashed: Vec<String>,
    pub failover_s: Option<f64>,
    pub new_leader: Option<String>,
    /// Agents whose SIGTERM drain was acknowledged by their DC manager.
    pub drains_acknowledged: usize,
    /// The rolling upgrade (`--upgrade-at-s`), if asked for.
    pub upgrade: Option<upgrade::Report>,
}

/// The demo's one JSON line.
#[derive(Serialize)]
struct Summary {
    duration_s: u64,
    pods: usize,
    /// Every limit, served by the same agents and DC managers.
    limits: Vec<LimitSummary>,
    /// The live `leasehold limits put` that lowered the partner API's R (absent with
    /// `--lower-at-s 0`).
    lowering: Option<lowering::Report>,
    /// The rolling upgrade: every process replaced under load (absent without `--upgrade-at-s`).
    upgrade: Option<upgrade::Report>,
    /// Over every upstream: calls refused (must be 0) and the largest window ratio.
    upstream_rejections: u64,
    max_window_ratio: f64,
    leader_killed_at_s: Option<u64>,
    failover_s: Option<f64>,
    new_leader: Option<String>,
    processes_crashed: Vec<String>,
    drains_acknowledged: usize,
    seconds: f64,
}

/// One limit's part of the summary.
#[derive(Serialize)]
struct LimitSummary {
    limit: &'static str,
    hard_limit: HardLimit,
    leased: Leased,
    offered: u64,
    admitted: u64,
    limiter_denials: u64,
    client_errors: u64,
    upstream_calls: u64,
    upstream_rejections: u64,
    max_window: u64,
    max_window_ratio: f64,
    utilization: f64,
    dc_share_correlation: Option<f64>,
    dc_share_follows_demand: bool,
    chart: String,
}

/// The upstream's limit: `calls` in any sliding window of `window_ms` (`calls_at_end` once the
/// partner lowered it).
#[derive(Serialize)]
struct HardLimit {
    calls: u64,
    calls_at_end: u64,
    window_ms: u64,
}

#[derive(Serialize)]
struct Leased {
    rate_per_s: u64,
    rate_at_end_per_s: u64,
    burst: u64,
}

pub(super) fn summarize(
    a: &DemoArgs,
    bins: &[Bins],
    alloc: &[Vec<Option<Vec<f64>>>],
    ups: &[UpstreamStats],
    lowering: Option<lowering::Report>,
    o: Outcome,
    started: Instant,
) -> Result<ExitCode, String> {
    let Outcome { crashed, failover_s, new_leader, drains_acknowledged, upgrade } = o;
    let secs = a.duration_s as usize;
    let mut limits = Vec::new();
    for (l, limit) in LIMITS.iter().enumerate() {
        let lowered = lowering.as_ref().filter(|r| r.limit() == limit.name && r.ok());
        let rates = rates_per_s(limit, lowered, secs);
        limits.push(limit_summary(&a.out_dir, limit, &bins[l], &alloc[l], &ups[l], &rates)?);
    }
    let failover_ok = a.kill_leader_at_s.is_none() || failover_s.is_some_and(|f| f * 1_000.0 <= DC_TTL_MS as f64);
    let upstream_rejections = ups.iter().map(|u| u.rejected).sum();
    let max_window_ratio = ups.iter().map(|u| u.max_window_ratio).fold(0.0, f64::max);
    let lowering_ok = lowering.as_ref().is_none_or(lowering::Report::ok);
    let upgrade_ok = upgrade.as_ref().is_none_or(|u| u.completed);
    let ok = upstream_rejections == 0
        && max_window_ratio <= 1.0
        && failover_ok
        && crashed.is_empty()
        && lowering_ok
        && upgrade_ok;
    let summary = Summary {
        duration_s: a.duration_s,
        pods: DCS.len() * PODS_PER_DC,
        limits,
        lowering,
        upgrade,
        upstream_rejections,
        max_window_ratio,
        leader_killed_at_s: a.kill_leader_at_s,
        failover_s: failover_s.map(|f| (f * 10.0).round() / 10.0),
        new_leader,
        processes_crashed: crashed,
        drains_acknowledged,
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The leased R of each second: the lowered one from the second after the put started.
fn rates_per_s(limit: &DemoLimit, lowered: Option<&lowering::Report>, secs: usize) -> Vec<f64> {
    let from = lowered.and_then(lowering::Report::put_at_s).map_or(secs, |t| t.ceil() as usize);
    let after = lowered.map_or(limit.rate_per_s(), lowering::Report::rate_after_per_s);
    (0..secs).map(|s| if s < from { limit.rate_per_s() } else { after } as f64).collect()
}

/// The numbers of one limit, and its chart.
fn limit_summary(
    out: &Path,
    limit: &DemoLimit,
    b: &Bins,
    alloc: &[Option<Vec<f64>>],
    up: &UpstreamStats,
    rates: &[f64],
) -> Result<LimitSummary, String> {
    let secs = rates.len();
    let corr = share_correlation(b, alloc, secs);
    let chart = out.join(match limit.name {
        super::LIMIT => "follow-the-sun.svg".to_string(),
        other => format!("follow-the-sun-{other}.svg"),
    });
    let svg = leasehold_sim::chart::svg(
        &format!("leasehold-lab demo: {} allocation follows demand (real processes)", limit.name),
        &DCS.map(String::from),
        &series(b, alloc, secs),
        limit.rate_per_s() as f64,
    );
    std::fs::write(&chart, svg).map_err(|e| format!("cannot write {}: {e}", chart.display()))?;
    Ok(LimitSummary {
        limit: limit.name,
        hard_limit: HardLimit { calls: limit.hard_calls, calls_at_end: up.limit, window_ms: HARD_WINDOW_MS },
        leased: Leased {
            rate_per_s: limit.rate_per_s(),
            rate_at_end_per_s: rates.last().map_or(limit.rate_per_s(), |r| *r as u64),
            burst: limit.burst,
        },
        offered: b.offered.iter().flatten().sum(),
        admitted: b.admitted.iter().flatten().sum(),
        limiter_denials: b.denied.iter().flatten().sum(),
        client_errors: b.errors,
        upstream_calls: up.total,
        upstream_rejections: up.rejected,
        max_window: up.max_window,
        max_window_ratio: up.max_window_ratio,
        utilization: (utilization(b, rates) * 10_000.0).round() / 10_000.0,
        dc_share_correlation: corr.map(|c| (c * 1_000.0).round() / 1_000.0),
        dc_share_follows_demand: corr.is_some_and(|c| c >= FOLLOWS_MIN_CORRELATION),
        chart: chart.display().to_string(),
    })
}

/// Admitted over what the leased rate could have admitted (`min(offered, R)` each second, with
/// each second's R).
fn utilization(b: &Bins, rates: &[f64]) -> f64 {
    let (mut served, mut servable) = (0.0, 0.0);
    for (s, rate) in rates.iter().enumerate() {
        let offered: u64 = b.offered[s].iter().sum();
        let admitted: u64 = b.admitted[s].iter().sum();
        served += admitted as f64;
        servable += (offered as f64).min(*rate);
    }
    if servable > 0.0 {
        served / servable
    } else {
        0.0
    }
}

/// BKK's share of demand vs its share of the allocation, second by second.
fn share_correlation(b: &Bins, alloc: &[Option<Vec<f64>>], secs: usize) -> Option<f64> {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for (s, al) in alloc.iter().enumerate().take(secs) {
        let offered: u64 = b.offered[s].iter().sum();
        if let (Some(al), true) = (al, offered > 0) {
            let total: f64 = al.iter().sum();
            if total > 0.0 {
                x.push(b.offered[s][0] as f64 / offered as f64);
                y.push(al[0] / total);
            }
        }
    }
    correlation(&x, &y)
}

/// The chart's series per DC; a second without a ledger reading keeps the last allocation.
fn series(b: &Bins, alloc: &[Option<Vec<f64>>], secs: usize) -> Series {
    let mut series = Series { demand: Vec::new(), allocation: Vec::new(), admitted: Vec::new() };
    let mut last = vec![0.0; DCS.len()];
    for d in 0..DCS.len() {
        series.demand.push((0..secs).map(|s| b.offered[s][d] as f64).collect());
        series.admitted.push((0..secs).map(|s| b.admitted[s][d] as f64).collect());
        series.allocation.push(
            (0..secs)
                .map(|s| {
                    if let Some(v) = &alloc[s] {
                        last[d] = v[d];
                    }
                    last[d]
                })
                .collect(),
        );
    }
    series
}
