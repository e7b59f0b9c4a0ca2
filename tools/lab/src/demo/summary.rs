//! The demo's verdict: one JSON line, the chart, and the exit code.

use super::load::Bins;
use super::observe::{correlation, UpstreamStats};
use super::{DemoArgs, DCS, DC_TTL_MS, PODS_PER_DC};
use leasehold_sim::metrics::Series;
use serde_json::json;
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
    let (mut served, mut servable) = (0.0, 0.0);
    for s in 0..secs {
        let offered: u64 = b.offered[s].iter().sum();
        let admitted: u64 = b.admitted[s].iter().sum();
        served += admitted as f64;
        servable += (offered as f64).min(rate);
    }
    let utilization = if servable > 0.0 { served / servable } else { 0.0 };
    // BKK's share of demand vs its share of the allocation, second by second.
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
    let corr = correlation(&x, &y);
    let follows = corr.is_some_and(|c| c >= FOLLOWS_MIN_CORRELATION);
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
    let names: Vec<String> = DCS.iter().map(|s| s.to_string()).collect();
    let chart = out.join("follow-the-sun.svg");
    let svg = leasehold_sim::chart::svg(
        "leasehold-lab demo: allocation follows demand (real processes)",
        &names,
        &series,
        rate,
    );
    std::fs::write(&chart, svg).map_err(|e| format!("cannot write {}: {e}", chart.display()))?;
    let denied: u64 = b.denied.iter().flatten().sum();
    let offered: u64 = b.offered.iter().flatten().sum();
    let admitted: u64 = b.admitted.iter().flatten().sum();
    let failover_ok = a.kill_leader_at_s.is_none() || failover_s.is_some_and(|f| f * 1_000.0 <= DC_TTL_MS as f64);
    let summary = json!({
        "duration_s": a.duration_s,
        "pods": DCS.len() * PODS_PER_DC,
        "hard_limit": { "calls": super::HARD_CALLS, "window_ms": super::HARD_WINDOW_MS },
        "leased": { "rate_per_s": rate, "burst": super::BURST },
        "offered": offered,
        "admitted": admitted,
        "limiter_denials": denied,
        "client_errors": b.errors,
        "upstream_calls": up.total,
        "upstream_rejections": up.rejected,
        "max_window": up.max_window,
        "max_window_ratio": up.max_window_ratio,
        "utilization": (utilization * 10_000.0).round() / 10_000.0,
        "dc_share_correlation": corr.map(|c| (c * 1_000.0).round() / 1_000.0),
        "dc_share_follows_demand": follows,
        "leader_killed_at_s": a.kill_leader_at_s,
        "failover_s": failover_s.map(|f| (f * 10.0).round() / 10.0),
        "new_leader": new_leader,
        "processes_crashed": crashed,
        "drains_acknowledged": drains_acknowledged,
        "chart": chart.display().to_string(),
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    });
    println!("{summary}");
    let ok = up.rejected == 0 && up.max_window_ratio <= 1.0 && failover_ok && crashed.is_empty();
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
