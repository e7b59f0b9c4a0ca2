//! `bench outage`: what a limiter admits when its control plane is gone. The same closed-loop
//! load (`--clients` callers, each asking every `--pace-ms`) against a limit of `--rate-per-s`
//! with burst `--burst`, healthy for `--healthy-s`, then with everything but the deciders
//! killed for `--outage-s`:
//!
//! * **Leasehold**: a nats-server of its own, one coordinator, a DC manager and two agents in
//!   each of two DCs; the outage SIGKILLs the nats-server, the coordinator and both DC managers.
//!   The agents decide from the leases they hold until those expire, then deny.
//! * **The central Redis design** (a fixed-window counter, `INCR` + `EXPIRE` per call, as
//!   envoyproxy/ratelimit does) on a redis-server of its own, which the outage kills: once
//!   failing open (every call admitted while Redis is unreachable), once failing closed.
//!
//! Each admission is timed where the caller learns of it; the judge is the most admissions in
//! any window of 1 s, against the bound R·1 s + B. One JSON line on stdout.

mod leasehold_run;
mod load;
mod redis_run;

use load::Admissions;
use serde_json::json;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Concurrent callers.
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// Each caller asks once per this many ms.
    #[arg(long, default_value_t = 100)]
    pub pace_ms: u64,
    /// The limit's rate R, per second.
    #[arg(long, default_value_t = 3)]
    pub rate_per_s: u64,
    /// The limit's burst B.
    #[arg(long, default_value_t = 3)]
    pub burst: u64,
    /// Load before the outage, s (its second half is the healthy rate: the first lets the
    /// leases follow the demand).
    #[arg(long, default_value_t = 20)]
    pub healthy_s: u64,
    /// Load after the kill, s.
    #[arg(long, default_value_t = 15)]
    pub outage_s: u64,
    /// Where logs and settings go.
    #[arg(long, default_value = "out/bench-outage")]
    pub out_dir: std::path::PathBuf,
    /// Leave out the Redis design (no redis-server on this machine).
    #[arg(long)]
    pub skip_redis: bool,
}

impl Args {
    fn check(&self) -> Result<(), String> {
        if !(1..=1_000).contains(&self.clients) {
            return Err(format!("--clients must be within 1..=1000, got {}", self.clients));
        }
        if !(1..=10_000).contains(&self.pace_ms) {
            return Err(format!("--pace-ms must be within 1..=10000, got {}", self.pace_ms));
        }
        if self.rate_per_s == 0 || self.burst == 0 {
            return Err("--rate-per-s and --burst must be at least 1".into());
        }
        if !(4..=600).contains(&self.healthy_s) || !(2..=600).contains(&self.outage_s) {
            return Err("--healthy-s must be within 4..=600 and --outage-s within 2..=600".into());
        }
        Ok(())
    }

    fn healthy(&self) -> Duration {
        Duration::from_secs(self.healthy_s)
    }

    fn outage(&self) -> Duration {
        Duration::from_secs(self.outage_s)
    }
}

pub(super) fn run(a: Args) -> Result<ExitCode, String> {
    a.check()?;
    leasehold::block_on(async move {
        let bound = (a.rate_per_s + a.burst) as f64;
        let leasehold = leasehold_run::run(&a).await?;
        let mut result = json!({
            "bench": "outage",
            "clients": a.clients,
            "offered_per_s": a.clients as f64 * 1_000.0 / a.pace_ms as f64,
            "rate_per_s": a.rate_per_s,
            "burst": a.burst,
            "bound_per_1s_window": bound,
            "healthy_s": a.healthy_s,
            "outage_s": a.outage_s,
            "leasehold": leasehold.summary(bound),
        });
        if !a.skip_redis {
            for fail_open in [true, false] {
                let run = redis_run::run(&a, fail_open).await?;
                let name = if fail_open { "redis_fail_open" } else { "redis_fail_closed" };
                result[name] = run.summary(bound);
            }
        }
        println!("{result}");
        Ok(ExitCode::SUCCESS)
    })
}

/// One design's run: its admissions, when the outage began (since the load started), and what
/// it said of itself during the outage.
pub(super) struct Run {
    pub admissions: Admissions,
    pub outage_at: Duration,
    pub total: Duration,
    /// What the agents said of themselves at the outage's midpoint (Leasehold only).
    pub degraded: Option<Degraded>,
}

/// The agents at the outage's midpoint: how many answered `/readyz` 503, and how many showed a
/// lease unrenewed for longer than the shipped stale-lease alert allows (their metrics).
pub(super) struct Degraded {
    pub not_ready: usize,
    pub stale: usize,
    pub agents: usize,
}

impl Run {
    fn summary(&self, bound: f64) -> serde_json::Value {
        let a = &self.admissions;
        let healthy = a.rate_between(self.outage_at / 2, self.outage_at);
        let outage = a.rate_between(self.outage_at, self.total);
        let first_outage_s = a.rate_between(self.outage_at, self.outage_at + Duration::from_secs(1));
        let max = a.max_in_window(Duration::from_secs(1));
        let mut v = json!({
            "admitted": a.len(),
            "admitted_per_s_healthy": super::round_3(healthy),
            "admitted_per_s_outage": super::round_3(outage),
            "admitted_in_first_outage_s": super::round_3(first_outage_s),
            "admitted_per_s_by_second": a.per_second(self.total),
            "max_in_1s_window": max,
            "within_bound": max as f64 <= bound,
        });
        if let Some(d) = &self.degraded {
            v["agents_not_ready_during_outage"] = json!(format!("{} of {}", d.not_ready, d.agents));
            v["agents_stale_during_outage"] = json!(format!("{} of {}", d.stale, d.agents));
        }
        v
    }
}
