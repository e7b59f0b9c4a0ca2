//! A join storm: many pods join one DC at once. Each join waits for the DC manager's next
//! batched split (`event_pass_gap_ms`, or the next tick) instead of triggering one of its own,
//! so the storm costs O(pods) splits' work and lease messages, and every joiner holds a lease
//! within 2 renew periods.

use super::count::round;
use super::{add_pods, dc_name, pod_ids, Running};
use crate::bench::batch_items;
use futures::StreamExt;
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Serialize)]
pub(super) struct JoinStorm {
    pods_joining: usize,
    pods_already_there: usize,
    /// Joiners holding a lease of every limit when the storm ended.
    joined: usize,
    /// From a joiner's first report to its first lease of every limit.
    join_ms: JoinMs,
    pub(super) all_within_2_renew_periods: bool,
    /// From the joins to the last joiner holding its leases.
    window_ms: u64,
    /// Lease messages and the items in them to the DC's pods in the window (the joiners' first
    /// leases and everyone's paced renewals).
    lease_msgs: u64,
    lease_items: u64,
    /// Lease messages per pod of the DC per renew period of the window: about 1 when joins
    /// cost O(pods) messages (each joining pod re-splitting for everyone made it O(pods) each).
    lease_msgs_per_pod_per_renew_period: f64,
    /// Full splits the DC manager ran in the window, over every limit.
    full_splits: u64,
    dc_manager_cpu_s: Option<f64>,
}

#[derive(Serialize)]
struct JoinMs {
    p50: u64,
    p99: u64,
    max: u64,
}

pub(super) async fn join_storm(r: &mut Running, pods_there: usize, joining: usize) -> Result<JoinStorm, String> {
    let dc = dc_name(0);
    let renew_ms = r.periods_ms.pod_renew;
    let mut leases = r.monitor.subscribe(format!("lh.pod.{dc}.*.lease")).await.map_err(|e| e.to_string())?;
    r.monitor.flush().await.map_err(|e| e.to_string())?;
    let full_before = r.managers[0].2.status.borrow().totals.passes_full;
    let cpu_before = r.managers[0].1.cpu_seconds();
    let ids = pod_ids(&dc, pods_there, joining);
    let started = Instant::now();
    add_pods(&r.pods_rt, &mut r.fleet, &r.url, &dc, &ids).await?;
    let deadline = started + Duration::from_millis(10 * renew_ms);
    let (mut lease_msgs, mut lease_items) = (0u64, 0u64);
    let mut check = tokio::time::interval(Duration::from_millis(20));
    let joined = loop {
        tokio::select! {
            m = leases.next() => {
                let Some(m) = m else { return Err("the monitor's subscription ended".into()) };
                lease_msgs += 1;
                lease_items += batch_items(&m.payload);
            }
            _ = check.tick() => {
                let j = r.fleet.joined(&dc, &ids);
                if j.held == j.of || Instant::now() > deadline {
                    break j;
                }
            }
        }
    };
    let window = started.elapsed();
    let manager = &r.managers[0];
    let full_splits = manager.2.status.borrow().totals.passes_full - full_before;
    let dc_manager_cpu_s = manager.1.cpu_seconds().zip(cpu_before).map(|(a, b)| round(a - b));
    let ms = |q: f64| joined.latency_ms.at(q).unwrap_or(u64::MAX);
    let all_pods = (pods_there + joining) as f64;
    let periods = (window.as_secs_f64() * 1_000.0 / renew_ms as f64).max(1.0);
    Ok(JoinStorm {
        pods_joining: joining,
        pods_already_there: pods_there,
        joined: joined.held,
        join_ms: JoinMs { p50: ms(0.5), p99: ms(0.99), max: joined.latency_ms.max().unwrap_or(u64::MAX) },
        all_within_2_renew_periods: joined.held == joined.of
            && joined.latency_ms.max().is_some_and(|m| m <= 2 * renew_ms),
        window_ms: window.as_millis() as u64,
        lease_msgs,
        lease_items,
        lease_msgs_per_pod_per_renew_period: round(lease_msgs as f64 / all_pods / periods),
        full_splits,
        dc_manager_cpu_s,
    })
}
