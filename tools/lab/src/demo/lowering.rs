//! The live lowering of the partner API's limit, mid-load: `leasehold limits put` writes the lower
//! R (a process, against the demo's NATS), the demo watches the ledger for the coordinator to take
//! it, and the partner's upstream enforces its lower hard limit as soon as the reconfiguration
//! guarantee covers every window it judges ([`Lowering::upstream_delay_ms`]). What the load saw
//! around it is measured from the per-second counters afterwards.

use super::limits::{put_with_cli, Lowering, PutRun};
use super::load::Bins;
use super::observe::{self, UpstreamStats};
use async_nats::jetstream::kv::Store;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Seconds of admissions averaged to say the admitted rate fits the new R.
const MEAN_S: usize = 3;
/// The pods' leases are watched for one lease lifetime after the put and this much more.
const PODS_WATCH_EXTRA_MS: u64 = 2_000;

/// Where the lowering runs: the demo's NATS, ledger, the partner's upstream and the files.
pub struct Context {
    pub nats_url: String,
    pub ledger: Store,
    pub http: reqwest::Client,
    pub upstream: String,
    /// Every agent's address.
    pub agents: Vec<String>,
    pub out_dir: PathBuf,
    pub log_dir: PathBuf,
    /// When the load started and when it ends.
    pub start: Instant,
    pub end: Instant,
}

/// What the live part did (times in seconds since the load started).
#[derive(Debug, Default)]
pub struct Ran {
    pub put_at_s: Option<f64>,
    pub put: Option<PutRun>,
    pub applied_seen_at_s: Option<f64>,
    /// Σ of the pods' lease rates just before the put, and when it first fitted the new R.
    pub pods_leased_before_per_s: Option<f64>,
    pub pods_leased_at_new_rate_at_s: Option<f64>,
    /// The upstream's 429 count just before the put.
    pub rejected_at_put: Option<u64>,
    pub upstream_lowered_at_s: Option<f64>,
    pub error: Option<String>,
}

/// At `at_s` into the load: put the lower R, wait for the ledger to show it, then lower the
/// upstream's hard limit [`Lowering::upstream_delay_ms`] later (skipped if the load ends first).
pub async fn run(plan: Lowering, at_s: u64, cx: Context) -> Ran {
    let mut ran = Ran::default();
    tokio::time::sleep_until((cx.start + Duration::from_secs(at_s)).into()).await;
    let since = |t: Instant| t.duration_since(cx.start).as_secs_f64();
    ran.rejected_at_put = observe::upstream_stats(&cx.http, &cx.upstream).await.map(|s| s.rejected);
    ran.pods_leased_before_per_s = observe::pods_leased_per_s(&cx.http, &cx.agents, plan.limit.name).await;
    ran.put_at_s = Some(since(Instant::now()));
    let name = format!("{}-lowered.toml", plan.limit.name);
    let put = match put_with_cli(&cx.out_dir, &cx.log_dir, &name, &plan.definition_toml(), &cx.nats_url).await {
        Ok(p) => p,
        Err(e) => {
            ran.error = Some(e);
            return ran;
        }
    };
    let put_done = Instant::now();
    eprintln!(
        "demo: t={:.1}s leasehold limits put {} (R {}/s → {}/s): exit {:?} after {} ms: {}",
        since(put_done),
        cx.out_dir.join(&name).display(),
        plan.rate_before_per_s,
        plan.rate_after_per_s,
        put.exit_code,
        put.took_ms,
        put.printed.join(" | ")
    );
    let failed = put.exit_code != Some(0);
    ran.put = Some(put);
    if failed {
        ran.error = Some("leasehold limits put failed; the partner's limit was left as it was".into());
        return ran;
    }
    // The pods' leases are watched while the partner waits to lower its limit.
    let pods_until = (put_done + Duration::from_millis(plan.lease_lifetime_ms + PODS_WATCH_EXTRA_MS)).min(cx.end);
    let pods = pods_at_rate(&cx.http, &cx.agents, plan.limit.name, plan.rate_after_per_s as f64, pods_until);
    let (pods_at, ()) = tokio::join!(pods, lower_upstream(&plan, &cx, put_done, &mut ran));
    ran.pods_leased_at_new_rate_at_s = pods_at.map(since);
    ran
}

/// Wait for the ledger to show the new R, then lower the upstream's hard limit
/// [`Lowering::upstream_delay_ms`] later (not if the load ends first).
async fn lower_upstream(plan: &Lowering, cx: &Context, put_done: Instant, ran: &mut Ran) {
    let since = |t: Instant| t.duration_since(cx.start).as_secs_f64();
    let delay = Duration::from_millis(plan.upstream_delay_ms());
    // The guarantee runs from when the coordinator applied the change: without seeing that, the
    // upstream is not lowered at all (a guessed time could be too early).
    let latest = cx.end.checked_sub(delay).unwrap_or(put_done);
    let rate = plan.rate_after_per_s as f64;
    let Some(applied) = applied_at(&cx.ledger, plan.limit.name, rate, latest).await else {
        if latest > put_done {
            ran.error = Some(format!(
                "the ledger record of {} never showed {}/s (not applied, or not readable): the upstream stayed at {}",
                plan.limit.name, plan.rate_after_per_s, plan.limit.hard_calls
            ));
        }
        eprintln!(
            "demo: the partner's upstream stays at {}: the change was not seen applied in time",
            plan.limit.hard_calls
        );
        return;
    };
    ran.applied_seen_at_s = Some(since(applied));
    let lower_at = applied + delay;
    if lower_at >= cx.end {
        eprintln!(
            "demo: the load ends before the partner could lower its limit; its upstream stays at {}",
            plan.limit.hard_calls
        );
        return;
    }
    tokio::time::sleep_until(lower_at.into()).await;
    let url = format!("http://{}/admin/limit?calls={}", cx.upstream, plan.hard_calls_after);
    match cx.http.post(url).send().await {
        Ok(r) if r.status().is_success() => {
            ran.upstream_lowered_at_s = Some(since(Instant::now()));
            eprintln!(
                "demo: t={:.1}s the partner's upstream enforces {} calls per 1 s window (was {})",
                since(Instant::now()),
                plan.hard_calls_after,
                plan.limit.hard_calls
            );
        }
        Ok(r) => ran.error = Some(format!("the upstream refused the new limit: {}", r.status())),
        Err(e) => ran.error = Some(format!("the upstream did not take the new limit: {e}")),
    }
}

/// When the pods' leases of `limit` first summed to at most `rate_per_s` (polled every 100 ms),
/// or None by `until`.
async fn pods_at_rate(
    http: &reqwest::Client,
    agents: &[String],
    limit: &str,
    rate_per_s: f64,
    until: Instant,
) -> Option<Instant> {
    while Instant::now() < until {
        if observe::pods_leased_per_s(http, agents, limit).await.is_some_and(|r| r <= rate_per_s) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// When the ledger record of `limit` first showed a capacity of at most `rate_per_s` (polled
/// every 50 ms; the leader writes it after applying the change), or None by `until`.
async fn applied_at(ledger: &Store, limit: &str, rate_per_s: f64, until: Instant) -> Option<Instant> {
    while Instant::now() < until {
        if observe::capacity_per_s(ledger, limit).await.is_some_and(|r| r <= rate_per_s) {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// The lowering in the summary: what ran, and what the load and the upstream saw around it.
#[derive(Debug, Serialize)]
pub struct Report {
    pub limit: &'static str,
    pub rate_before_per_s: u64,
    pub rate_after_per_s: u64,
    /// Seconds since the load started.
    pub put_at_s: Option<f64>,
    pub put_took_ms: Option<u64>,
    pub put_exit_code: Option<i32>,
    /// What `leasehold limits put` printed.
    pub put_printed: Vec<String>,
    /// When the ledger record first showed the new capacity (polled every 50 ms).
    pub applied_seen_at_s: Option<f64>,
    /// Σ of the rates of the pods' leases just before the put, and when it first fitted the new
    /// R (every agent's status, polled every 100 ms).
    pub pods_leased_before_per_s: Option<f64>,
    pub pods_leased_at_new_rate_at_s: Option<f64>,
    /// The first whole second after the put from which [`MEAN_S`] seconds of admissions fit the
    /// new R by the window formula (R·(3 s·1.01 + J) + B).
    pub admitted_at_new_rate_at_s: Option<usize>,
    /// That second minus the put's start: per-second counters, so the least it can say is the
    /// time to the next whole second.
    pub admissions_dropped_after_s: Option<f64>,
    /// Mean admitted per second in the 5 s before the put and the 10 s from that second.
    pub admitted_before_per_s: Option<f64>,
    pub admitted_after_per_s: Option<f64>,
    pub upstream_limit_before: u64,
    pub upstream_limit_after: u64,
    /// After the change was seen applied, the upstream waited one DC-lease lifetime of the old
    /// definition plus W·(1+δ) + J before enforcing its lower limit.
    pub upstream_delay_ms: u64,
    pub upstream_lowered_at_s: Option<f64>,
    /// The partner upstream's 429s from just before the put to the end (must be 0).
    pub upstream_rejections_since_put: Option<u64>,
    /// The largest 1 s window at a call the upstream admitted after it lowered its limit.
    pub max_window_since_upstream_lowered: Option<u64>,
    pub error: Option<String>,
}

impl Report {
    pub fn new(plan: &Lowering, ran: Ran, bins: &Bins, up: &UpstreamStats, secs: usize) -> Report {
        let admitted: Vec<u64> = bins.admitted.iter().take(secs).map(|per_dc| per_dc.iter().sum()).collect();
        let put_s = ran.put_at_s.map(|t| t.ceil() as usize);
        let bound = window_bound(plan.rate_after_per_s as f64, plan.limit.burst as f64);
        let at_rate = put_s.filter(|_| ran.put.is_some()).and_then(|from| first_span_within(&admitted, from, bound));
        let mean = |from: usize, to: usize| {
            let to = to.min(admitted.len());
            (from < to).then(|| admitted[from..to].iter().sum::<u64>() as f64 / (to - from) as f64)
        };
        let (put_exit_code, put_took_ms, put_printed) = match ran.put {
            Some(p) => (p.exit_code, Some(p.took_ms), p.printed),
            None => (None, None, Vec::new()),
        };
        Report {
            limit: plan.limit.name,
            rate_before_per_s: plan.rate_before_per_s,
            rate_after_per_s: plan.rate_after_per_s,
            put_at_s: ran.put_at_s.map(tenths),
            put_took_ms,
            put_exit_code,
            put_printed,
            applied_seen_at_s: ran.applied_seen_at_s.map(tenths),
            pods_leased_before_per_s: ran.pods_leased_before_per_s.map(tenths),
            pods_leased_at_new_rate_at_s: ran.pods_leased_at_new_rate_at_s.map(tenths),
            admitted_at_new_rate_at_s: at_rate,
            admissions_dropped_after_s: at_rate.zip(ran.put_at_s).map(|(s, p)| tenths(s as f64 - p)),
            admitted_before_per_s: put_s.and_then(|p| mean(p.saturating_sub(6), p.saturating_sub(1))).map(tenths),
            admitted_after_per_s: at_rate.and_then(|s| mean(s, s + 10)).map(tenths),
            upstream_limit_before: plan.limit.hard_calls,
            upstream_limit_after: plan.hard_calls_after,
            upstream_delay_ms: plan.upstream_delay_ms(),
            upstream_lowered_at_s: ran.upstream_lowered_at_s.map(tenths),
            upstream_rejections_since_put: ran.rejected_at_put.map(|r| up.rejected.saturating_sub(r)),
            max_window_since_upstream_lowered: ran.upstream_lowered_at_s.map(|_| up.max_window_since_change),
            error: ran.error,
        }
    }

    /// The put ran and succeeded, and nothing failed on the way.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.put_exit_code == Some(0)
    }

    pub fn limit(&self) -> &'static str {
        self.limit
    }

    pub fn put_at_s(&self) -> Option<f64> {
        self.put_at_s
    }

    pub fn rate_after_per_s(&self) -> u64 {
        self.rate_after_per_s
    }
}

/// Most calls [`MEAN_S`] seconds may admit under `rate_per_s` and `burst`, per second: the
/// demo's window formula with W = 3 s, R·(W·1.01 + 100 ms) + B, divided by W.
pub fn window_bound(rate_per_s: f64, burst: f64) -> f64 {
    let w = MEAN_S as f64;
    (rate_per_s * (w * 1.01 + super::JITTER_BUDGET_MS as f64 / 1_000.0) + burst) / w
}

/// The first second `s ≥ from` whose [`MEAN_S`] seconds `s..s+MEAN_S` admitted at most `bound`
/// per second on average.
pub fn first_span_within(admitted_per_s: &[u64], from: usize, bound: f64) -> Option<usize> {
    (from..admitted_per_s.len().saturating_sub(MEAN_S - 1)).find(|&s| {
        let sum: u64 = admitted_per_s[s..s + MEAN_S].iter().sum();
        sum as f64 / MEAN_S as f64 <= bound
    })
}

fn tenths(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
