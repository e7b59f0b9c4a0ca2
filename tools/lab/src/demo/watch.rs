//! What the demo does every second while the load runs: read each limit's allocations and the
//! coordinator leader, SIGKILL the leader when asked and time the failover, and print a row of
//! the live table per limit every `--table-every-s`.

use super::limits::LIMITS;
use super::load::{Bins, Load};
use super::{observe, DemoArgs, Running, DCS};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the demo watched while the load ran.
pub(super) struct Watched {
    /// Per limit, per second: each DC's allocation (floor + newest DC lease), when the ledger was
    /// readable.
    pub alloc: Vec<Vec<Option<Vec<f64>>>>,
    pub failover_s: Option<f64>,
    pub new_leader: Option<String>,
}

/// Watch until the load's day ends. `loads` are the limits' loads, in [`LIMITS`] order.
pub(super) async fn watch(a: &DemoArgs, running: &mut Running, loads: &[Arc<Load>]) -> Watched {
    let seconds = a.duration_s as usize + 2;
    let mut w = Watched { alloc: vec![vec![None; seconds]; LIMITS.len()], failover_s: None, new_leader: None };
    let mut killed: Option<(String, Instant)> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let clock = &loads[0];
    eprintln!(
        "{:>5} | {:<11} | {:^26} | {:^26} | upstream",
        "t", "limit", "bkk demand/alloc/admitted", "europe demand/alloc/admitted"
    );
    while clock.start.elapsed() < clock.duration {
        tick.tick().await;
        let sec = clock.start.elapsed().as_secs() as usize;
        for (l, limit) in LIMITS.iter().enumerate() {
            if let Some((per_dc, _)) = observe::allocations(&running.ledger, limit.name, &DCS).await {
                w.alloc[l][sec.min(seconds - 1)] = Some(per_dc);
            }
        }
        let leader = observe::leader(&running.leaders).await;
        if let (Some(at), None) = (a.kill_leader_at_s, &killed) {
            if sec as u64 >= at {
                if let Some(l) = leader.clone() {
                    running.procs.lock().await.kill(&l).await;
                    eprintln!("demo: SIGKILL coordinator leader {l} at t={sec}s");
                    killed = Some((l, Instant::now()));
                }
            }
        }
        if let (Some((old, at)), None) = (&killed, w.failover_s) {
            if leader.as_ref().is_some_and(|l| l != old) {
                w.failover_s = Some(at.elapsed().as_secs_f64());
                w.new_leader = leader.clone();
                eprintln!(
                    "demo: {} leads after {:.1} s",
                    leader.as_deref().unwrap_or("?"),
                    w.failover_s.unwrap_or(0.0)
                );
            }
        }
        if sec > 0 && (sec as u64).is_multiple_of(a.table_every_s) {
            for (l, load) in loads.iter().enumerate() {
                let up = observe::upstream_stats(&running.http, &load.upstream).await;
                let label = if l == 0 { format!("{sec:>4}s") } else { String::new() };
                print_row(&label, LIMITS[l].name, &load.bins, &w.alloc[l], sec, a.table_every_s as usize, up);
            }
        }
    }
    w
}

fn print_row(
    label: &str,
    limit: &str,
    bins: &Mutex<Bins>,
    alloc: &[Option<Vec<f64>>],
    sec: usize,
    span: usize,
    up: Option<observe::UpstreamStats>,
) {
    let b = bins.lock().unwrap_or_else(|p| p.into_inner());
    let from = sec.saturating_sub(span);
    let mut cols = Vec::new();
    for d in 0..DCS.len() {
        let off: u64 = (from..sec).map(|s| b.offered[s][d]).sum();
        let adm: u64 = (from..sec).map(|s| b.admitted[s][d]).sum();
        let al = alloc[..=sec.min(alloc.len() - 1)].iter().rev().flatten().next().map_or(0.0, |v| v[d]);
        cols.push(format!("{:>6.0} {:>6.0} {:>6.0}    ", off as f64 / span as f64, al, adm as f64 / span as f64));
    }
    let up = up.map_or("?".into(), |u| match u.limit_changes {
        0 => format!("max 1 s window {} of {} ({:.3}), 429s {}", u.max_window, u.limit, u.max_window_ratio, u.rejected),
        _ => format!(
            "max 1 s window {} of {} since it lowered (before: {}; ratio {:.3}), 429s {}",
            u.max_window_since_change, u.limit, u.max_window, u.max_window_ratio, u.rejected
        ),
    });
    eprintln!("{label:>5} | {limit:<11} | {} | {} | {up}", cols[0], cols[1]);
}
