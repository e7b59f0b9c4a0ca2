//! What each DC-manager leader kill cost its DC, from outside: the calls the DC admitted below
//! its share in the 20 s after the kill (its share: the mean it admitted in the 3 s before, and
//! never more than it was offered in a second), in renew periods of that share; and how many of
//! its agents answered `/readyz` with anything but 200 meanwhile (polled twice a second). The
//! share is taken just before the kill because the demo's demand moves: a mean over 10 s missed
//! a whole dip while the DC's demand was rising and counted a rising share's lag as loss.

use super::judge::ByDc;
use super::schedule::{Fault, FaultKind};
use crate::demo::DCS;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Seconds after a kill judged, and seconds before it that give the share.
const AFTER_S: usize = 20;
const BEFORE_S: usize = 3;

/// One DC-manager leader kill.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ManagerFailover {
    pub dc: &'static str,
    pub at_s: f64,
    /// Mean admitted per second in the 3 s before the kill.
    pub share_per_s: f64,
    /// Admitted below the share (or below what was offered, if less) in the 20 s after.
    pub lost_calls: f64,
    pub lost_renew_periods: f64,
    /// The most agents of the DC not ready in one second of those 20 s.
    pub agents_not_ready_max: u32,
}

/// Every kill of a DC manager leader in `schedule` and what it cost its DC. `not_ready`: per
/// second, per DC, the most agents seen not ready.
pub fn manager_failovers(
    schedule: &[Fault],
    by_dc: &ByDc<'_>,
    not_ready: &[Vec<u32>],
    renew_s: f64,
) -> Vec<ManagerFailover> {
    let n = by_dc.offered.len().min(by_dc.admitted.len());
    schedule
        .iter()
        .filter(|f| f.kind == FaultKind::KillDcManagerLeader)
        .filter_map(|f| {
            let (d, at) = (f.dc, f.at_s.floor() as usize);
            let before = at.saturating_sub(BEFORE_S)..at.min(n);
            if before.is_empty() {
                return None;
            }
            let share = before.clone().map(|s| by_dc.admitted[s][d] as f64).sum::<f64>() / before.len() as f64;
            let after = at..(at + AFTER_S).min(n);
            let lost: f64 = after
                .clone()
                .map(|s| (share.min(by_dc.offered[s][d] as f64) - by_dc.admitted[s][d] as f64).max(0.0))
                .sum();
            let agents_not_ready_max =
                after.filter_map(|s| not_ready.get(s).and_then(|dcs| dcs.get(d))).copied().max().unwrap_or(0);
            Some(ManagerFailover {
                dc: DCS[d],
                at_s: f.at_s,
                share_per_s: (share * 10.0).round() / 10.0,
                lost_calls: lost.round(),
                lost_renew_periods: (lost / (share * renew_s).max(1.0) * 100.0).round() / 100.0,
                agents_not_ready_max,
            })
        })
        .collect()
}

/// Per second, per DC: the most agents seen not ready.
pub type NotReady = Arc<Mutex<Vec<Vec<u32>>>>;

/// Poll every agent's `/readyz` twice a second until `duration` has passed since `start`: per
/// second, per DC, the most agents that answered anything but 200 (or nothing).
pub fn watch_readiness(
    http: reqwest::Client,
    lists: Vec<Arc<Mutex<Vec<String>>>>,
    start: Instant,
    duration: Duration,
) -> (tokio::task::JoinHandle<()>, NotReady) {
    let seconds = duration.as_secs() as usize + 2;
    let seen = Arc::new(Mutex::new(vec![vec![0u32; lists.len()]; seconds]));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        while start.elapsed() < duration {
            tick.tick().await;
            let sec = start.elapsed().as_secs() as usize;
            for (d, list) in lists.iter().enumerate() {
                let addrs = list.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let mut down = 0;
                for addr in addrs {
                    let ready = http.get(format!("http://{addr}/readyz")).send().await;
                    down += u32::from(!ready.is_ok_and(|r| r.status().is_success()));
                }
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(cell) = seen.get_mut(sec).and_then(|dcs| dcs.get_mut(d)) {
                    *cell = (*cell).max(down);
                }
            }
        }
    });
    (task, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_costs_what_the_dc_admitted_below_its_share_and_below_its_demand() {
        // BKK admits 100/s; killed at 12 s: 0 for 2 s, 50 for 1 s, then 100 again. Its demand
        // dips to 60 at 16 s: 40 below the share then is no loss.
        let seconds = 40;
        let mut admitted = vec![vec![100u64, 80]; seconds];
        let mut offered = vec![vec![150u64, 80]; seconds];
        (admitted[12][0], admitted[13][0], admitted[14][0]) = (0, 0, 50);
        (offered[16][0], admitted[16][0]) = (60, 60);
        let denied = vec![vec![0u64, 0]; seconds];
        let by_dc = ByDc { offered: &offered, admitted: &admitted, denied: &denied };
        let kill = Fault { kind: FaultKind::KillDcManagerLeader, at_s: 12.3, heal_at_s: 20.0, dc: 0, pod: 0 };
        let mut not_ready = vec![vec![0u32, 0]; seconds];
        not_ready[13][0] = 1;
        let f = manager_failovers(&[kill], &by_dc, &not_ready, 1.0);
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].dc, f[0].share_per_s, f[0].lost_calls), ("bkk", 100.0, 250.0));
        assert_eq!((f[0].lost_renew_periods, f[0].agents_not_ready_max), (2.5, 1));
    }
}
