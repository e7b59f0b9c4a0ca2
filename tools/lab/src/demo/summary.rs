//! The demo's verdict: one JSON line, the chart, and the exit code.

use super::load::Bins;
use super::observe::{correlation, UpstreamStats};
use super::{DemoArgs, DCS, DC_TTL_MS, PODS_PER_DC};
use leasehold_sim::metrics::Series;
use serde::Serialize;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Share correlation above which allocation is said to follow demand.
const FOLLOWS_MIN_CORRELATION: f64 = 0.8;

/// What happened to the processes.
pub struct Outcome {
    /// Children that exited without being killed by the demo.
    pub crashed: Vec<String>,
    pub failover_s: Option<f64>,
    pub new_leader: Option<String>,
    /// Agents whose SIGTERM drain was acknowledged by their DC manager.
    pub drains_acknowledged: usize,
}

/// The demo's one JSON line.
#[derive(Serialize)]
struct Summary {
    duration_s: u64,
    pods: usize,
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
    leader_killed_at_s: Option<u64>,
    failover_s: Option<f64>,
    new_leader: Option<String>,
    processes_crashed: Vec<String>,
    drains_acknowledged: usize,
    chart: String,
    seconds: f64,
}

/// The partner API's limit: `calls` in any sliding window of `window_ms`.
#[derive(Serialize)]
struct HardLimit {
    calls: u64,
    window_ms: u64,
}

#[derive(Serialize)]
struct Leased {
    rate_per_s: f64,
    burst: u64,
}

pub fn summarize(
    a: &DemoArgs,
    out: &Path,
    b: &Bins,
    alloc: &[Option<Vec<f64>>],
    up: &UpstreamStats,
    o: Outcome,
    started: Instant,
) -> Result<ExitCode, String> {
    let Outcome { crashed, failover_s, new_leader, drains_acknowledged } = o;
    let secs = a.duration_s as usize;
    let rate = super::rate_per_s() as f64;
    let corr = share_correlation(b, alloc, secs);
    let chart = out.join("follow-the-sun.svg");
    let svg = leasehold_sim::chart::svg(
        "leasehold-lab demo: allocation follows demand (real processes)",
        &DCS.map(String::from),
        &series(b, alloc, secs),
        rate,
    );
    std::fs::write(&chart, svg).map_err(|e| format!("cannot write {}: {e}", chart.display()))?;
    let failover_ok = a.kill_leader_at_s.is_none() || failover_s.is_some_and(|f| f * 1_000.0 <= DC_TTL_MS as f64);
    let ok = up.rejected == 0 && up.max_window_ratio <= 1.0 && failover_ok && crashed.is_empty();
    let summary = Summary {
        duration_s: a.duration_s,
        pods: DCS.len() * PODS_PER_DC,
        hard_limit: HardLimit { calls: super::HARD_CALLS, window_ms: super::HARD_WINDOW_MS },
        leased: Leased { rate_per_s: rate, burst: super::BURST },
        offered: b.offered.iter().flatten().sum(),
        admitted: b.admitted.iter().flatten().sum(),
        limiter_denials: b.denied.iter().flatten().sum(),
        client_errors: b.errors,
        upstream_calls: up.total,
        upstream_rejections: up.rejected,
        max_window: up.max_window,
        max_window_ratio: up.max_window_ratio,
        utilization: (utilization(b, secs, rate) * 10_000.0).round() / 10_000.0,
        dc_share_correlation: corr.map(|c| (c * 1_000.0).round() / 1_000.0),
        dc_share_follows_demand: corr.is_some_and(|c| c >= FOLLOWS_MIN_CORRELATION),
        leader_killed_at_s: a.kill_leader_at_s,
        failover_s: failover_s.map(|f| (f * 10.0).round() / 10.0),
        new_leader,
        processes_crashed: crashed,
        drains_acknowledged,
        chart: chart.display().to_string(),
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    };
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Admitted over what the leased rate could have admitted (`min(offered, R)` each second).
fn utilization(b: &Bins, secs: usize, rate: f64) -> f64 {
    let (mut served, mut servable) = (0.0, 0.0);
    for s in 0..secs {
        let offered: u64 = b.offered[s].iter().sum();
        let admitted: u64 = b.admitted[s].iter().sum();
        served += admitted as f64;
        servable += (offered as f64).min(rate);
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
