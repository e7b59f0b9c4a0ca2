//! `leasehold-lab bench keys --instances 3 --duration-s 30`: per-key limits under Zipf load through
//! the real HTTP API, first against `--instances` NATS-sharded owners (a nats-server of its own,
//! shard leases in KV, admissions in JetStream) with each request sent to the key's owner (as a
//! key-aware client or balancer does, from `GET /v1/shards`), then to any instance (which forwards
//! to the owner over NATS), then, in the same run, against the same number of instances deciding
//! in one central Redis (sorted set + Lua, envoy ratelimit's design). Each run also reports the
//! CPU each component spent per decision. The last line is JSON; `--kill-owner-at-s` SIGKILLs one
//! owner mid-run.

use super::cpu::{pid_named, CpuMeter, CpuPerDecision};
use super::keys_load::{drive, key_ranks, summary, LoadSpec, LoadSummary, Observation};
use crate::demo::procs::Procs;
use leasehold_nats_harness::{binaries, NatsServer};
use rand_distr::Zipf;
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// Load time of each of the two runs.
    #[arg(long, default_value_t = 30)]
    duration_s: u64,
    /// Distinct keys, drawn Zipf-distributed.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// The Zipf exponent: key of rank k drawn with probability ∝ 1 / k^s (at least 0).
    #[arg(long, default_value_t = 1.1)]
    zipf_s: f64,
    /// Concurrent clients (each sends its next request when the last is answered).
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// The limit every key has: `limit` per `window_ms` (exact sliding log).
    #[arg(long, default_value_t = 10)]
    limit: u64,
    #[arg(long, default_value_t = 1_000)]
    window_ms: u64,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Measure only the NATS-sharded owners.
    #[arg(long)]
    skip_redis: bool,
    /// SIGKILL one owner this many seconds into the sharded run.
    #[arg(long)]
    kill_owner_at_s: Option<u64>,
    /// The owners' `--durability` (`zero-loss` or `interval:<ms>`).
    #[arg(long, default_value = "interval:100")]
    durability: String,
    #[arg(long, default_value_t = 3_000)]
    shard_ttl_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Which sharded runs: `owner` (each request to its key's owner), `any` (to any instance,
    /// forwarded over NATS), or `both`.
    #[arg(long, default_value = "both", value_parser = ["owner", "any", "both"])]
    routing: String,
    /// Where the instances' logs go.
    #[arg(long, default_value = "out/bench-keys")]
    out_dir: PathBuf,
}

const SHARDS: u32 = 64;

pub(super) fn run(a: Args) -> Result<ExitCode, String> {
    if a.instances == 0 || a.instances > 16 || a.duration_s == 0 || a.keys == 0 || a.clients == 0 {
        return Err("--instances must be 1..=16; --duration-s, --keys and --clients positive".into());
    }
    if a.kill_owner_at_s.is_some_and(|k| k >= a.duration_s || a.instances < 2) {
        return Err("--kill-owner-at-s must be below --duration-s, with at least 2 instances".into());
    }
    let ranks = key_ranks(a.keys, a.zipf_s)?;
    leasehold::block_on(bench(a, ranks))
}

/// What a SIGKILLed owner cost (with `--kill-owner-at-s`).
#[derive(Serialize)]
struct OwnerKill {
    killed_owner_at_s: u64,
    recovery_ms: u64,
    shard_ttl_ms: u64,
    answered_again_within_ttl: bool,
    /// `interval` durability only: what a crash may lose, so at most this many over-admissions.
    #[serde(skip_serializing_if = "Option::is_none")]
    over_admission_bound: Option<usize>,
}

/// A NATS-sharded run.
#[derive(Serialize)]
struct ShardedRun {
    /// `to-owner` or `any-instance`.
    routing: &'static str,
    #[serde(flatten)]
    load: LoadSummary,
    #[serde(flatten)]
    kill: Option<OwnerKill>,
    cpu_us_per_decision: Vec<CpuPerDecision>,
}

/// The central-Redis run.
#[derive(Serialize)]
struct RedisRun {
    #[serde(flatten)]
    load: LoadSummary,
    cpu_us_per_decision: Vec<CpuPerDecision>,
}

/// The last stdout line: the first sharded run's numbers at the top level (to the owner, unless
/// `--routing any`), the other under `any_instance`, the settings, and the Redis baseline's
/// numbers under `redis` (null with `--skip-redis`).
#[derive(Serialize)]
struct BenchSummary {
    #[serde(flatten)]
    sharded: ShardedRun,
    #[serde(skip_serializing_if = "Option::is_none")]
    any_instance: Option<ShardedRun>,
    instances: usize,
    keys: usize,
    zipf_s: f64,
    clients: usize,
    limit: u64,
    window_ms: u64,
    durability: String,
    redis: Option<RedisRun>,
    #[serde(skip_serializing_if = "Option::is_none")]
    throughput_vs_redis: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    any_instance_throughput_vs_redis: Option<f64>,
}

/// The run's settings shared by both designs' loads.
struct Bench {
    a: Args,
    ranks: Zipf<f64>,
    tiers: String,
    run_id: String,
}

impl Bench {
    /// The load against `bases`, its keys named `{design}-{run id}-{key}`.
    fn load(&self, design: &str, bases: Vec<String>, to_owner: bool) -> LoadSpec {
        LoadSpec {
            to_owner,
            bases,
            key_prefix: format!("{design}-{}-", self.run_id),
            key_ranks: self.ranks,
            clients: self.a.clients,
            duration: Duration::from_secs(self.a.duration_s),
            seed: self.a.seed,
        }
    }
}

async fn bench(a: Args, ranks: Zipf<f64>) -> Result<ExitCode, String> {
    std::fs::create_dir_all(&a.out_dir).map_err(|e| format!("cannot create {}: {e}", a.out_dir.display()))?;
    let tiers = a.out_dir.join("tiers.json");
    let doc = json!({ "default_tier": "bench", "tiers": { "bench": { "limit": a.limit, "window_ms": a.window_ms } } });
    std::fs::write(&tiers, doc.to_string()).map_err(|e| format!("cannot write {}: {e}", tiers.display()))?;
    let tiers = tiers.to_string_lossy().to_string();
    let run_id = format!("{:x}", std::process::id() as u64 ^ (a.seed << 20));
    let b = Bench { a, ranks, tiers, run_id };
    let mut sharded = Vec::new();
    for to_owner in [true, false].into_iter().filter(|&o| b.a.routing == "both" || o == (b.a.routing == "owner")) {
        let run = sharded_run(&b, to_owner).await?;
        eprintln!("bench keys: sharded {}", to_json(&run)?);
        sharded.push(run);
    }
    let redis = if b.a.skip_redis { None } else { Some(redis_run(&b).await?) };
    let mut sharded = sharded.into_iter();
    let first = sharded.next().ok_or("no sharded run")?;
    let summary = report(b.a, first, sharded.next(), redis);
    println!("{}", to_json(&summary)?);
    let ok = [Some(&summary.sharded), summary.any_instance.as_ref()]
        .into_iter()
        .flatten()
        .all(|r| r.load.over_admissions == 0)
        && summary.redis.as_ref().is_none_or(|r| r.load.over_admissions == 0);
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn to_json(v: &impl Serialize) -> Result<String, String> {
    serde_json::to_string(v).map_err(|e| e.to_string())
}

/// Start a nats-server and the NATS-sharded owners, drive the load (SIGKILLing owner k0 if asked)
/// and judge what the clients saw.
async fn sharded_run(b: &Bench, to_owner: bool) -> Result<ShardedRun, String> {
    let a = &b.a;
    let binary = binaries().map_err(|e| e.to_string())?.remove(0);
    let server = NatsServer::start(&binary).map_err(|e| e.to_string())?;
    let mut procs = Procs::new(&a.out_dir.join("sharded"))?;
    let mut bases = Vec::new();
    for i in 0..a.instances {
        let id = format!("k{i}");
        let url = server.url();
        let args = [
            "keys",
            "--listen",
            "127.0.0.1:0",
            "--nats-url",
            &url,
            "--tiers",
            &b.tiers,
            "--instance-id",
            &id,
            "--durability",
            &a.durability,
            "--shard-ttl-ms",
            &a.shard_ttl_ms.to_string(),
        ];
        let addr = procs.spawn(&format!("keys-{i}"), &args, &[], true).await?.unwrap_or_default();
        bases.push(format!("http://{addr}"));
    }
    let settled = wait_for_shards(&bases, Duration::from_secs(30)).await?;
    eprintln!("bench keys: {} owners serve all {SHARDS} shards after {settled:.1} s", a.instances);
    let load = b.load(if to_owner { "o" } else { "s" }, bases, to_owner);
    let client = vec![std::process::id()];
    let meter = CpuMeter::start(vec![
        ("client", client),
        ("instances", procs.pids()),
        ("nats_server", server.pid().into_iter().collect()),
    ]);
    let start = Instant::now();
    let killer = async {
        let at = a.kill_owner_at_s?;
        tokio::time::sleep_until((start + Duration::from_secs(at)).into()).await;
        procs.kill("keys-0").await;
        eprintln!("bench keys: SIGKILLed owner k0 at {at} s");
        Some((at, start.elapsed().as_micros() as u64))
    };
    let what = if to_owner { "sharded, to the owner" } else { "sharded, any instance" };
    let (obs, killed, _) = tokio::join!(drive(&load, start), killer, progress(start, load.duration, what));
    let answered = obs.iter().filter(|o| o.status == 200 || o.status == 429).count();
    let cpu_us_per_decision = meter.per_decision(answered);
    procs.stop(Duration::from_secs(5), |_| true).await;
    drop(server);
    let kill = killed.map(|(at_s, at_us)| {
        let recovery = recovery_ms(&obs, 0, at_us);
        OwnerKill {
            killed_owner_at_s: at_s,
            recovery_ms: recovery,
            shard_ttl_ms: a.shard_ttl_ms,
            answered_again_within_ttl: recovery <= a.shard_ttl_ms,
            over_admission_bound: a
                .durability
                .strip_prefix("interval:")
                .and_then(|m| m.parse::<u64>().ok())
                .map(|ms| loss_bound(&obs, at_us, ms)),
        }
    });
    let routing = if to_owner { "to-owner" } else { "any-instance" };
    Ok(ShardedRun { routing, load: summary(&obs, load.duration, a.limit, a.window_ms), kill, cpu_us_per_decision })
}

/// The baseline: as many instances deciding in one central Redis, under the same load.
async fn redis_run(b: &Bench) -> Result<RedisRun, String> {
    let a = &b.a;
    let mut procs = Procs::new(&a.out_dir.join("redis"))?;
    let mut bases = Vec::new();
    for i in 0..a.instances {
        let args = ["keys", "--listen", "127.0.0.1:0", "--redis-url", &a.redis_url, "--tiers", &b.tiers];
        let addr = procs.spawn(&format!("redis-keys-{i}"), &args, &[], true).await.map_err(|e| {
            format!("{e} (is Redis running at {}? --skip-redis measures without the baseline)", a.redis_url)
        })?;
        bases.push(format!("http://{}", addr.unwrap_or_default()));
    }
    let load = b.load("r", bases, false);
    let meter = CpuMeter::start(vec![
        ("client", vec![std::process::id()]),
        ("instances", procs.pids()),
        ("redis", pid_named("redis-server").into_iter().collect()),
    ]);
    let start = Instant::now();
    let (obs, _) = tokio::join!(drive(&load, start), progress(start, load.duration, "redis"));
    let answered = obs.iter().filter(|o| o.status == 200 || o.status == 429).count();
    let cpu_us_per_decision = meter.per_decision(answered);
    procs.stop(Duration::from_secs(5), |_| true).await;
    let run = RedisRun { load: summary(&obs, load.duration, a.limit, a.window_ms), cpu_us_per_decision };
    eprintln!("bench keys: redis {}", to_json(&run)?);
    Ok(run)
}

fn report(a: Args, sharded: ShardedRun, any_instance: Option<ShardedRun>, redis: Option<RedisRun>) -> BenchSummary {
    let vs_redis = |run: &ShardedRun| {
        redis.as_ref().map(|r| {
            let ratio = run.load.decisions_per_s / r.load.decisions_per_s.max(1e-9);
            (ratio * 1000.0).round() / 1000.0
        })
    };
    let throughput_vs_redis = vs_redis(&sharded);
    let any_instance_throughput_vs_redis = any_instance.as_ref().and_then(vs_redis);
    BenchSummary {
        sharded,
        any_instance,
        instances: a.instances,
        keys: a.keys,
        zipf_s: a.zipf_s,
        clients: a.clients,
        limit: a.limit,
        window_ms: a.window_ms,
        durability: a.durability,
        redis,
        throughput_vs_redis,
        any_instance_throughput_vs_redis,
    }
}

/// Poll every instance's `/metrics` until their served shards add up to all of them, evenly.
async fn wait_for_shards(bases: &[String], limit: Duration) -> Result<f64, String> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(1)).build().map_err(|e| e.to_string())?;
    let start = Instant::now();
    loop {
        let mut each = Vec::new();
        for b in bases {
            if let Ok(r) = http.get(format!("{b}/metrics")).send().await {
                let text = r.text().await.unwrap_or_default();
                each.push(
                    text.lines()
                        .find_map(|l| l.strip_prefix("leasehold_keys_shards_served "))
                        .and_then(|v| v.trim().parse::<u32>().ok())
                        .unwrap_or(0),
                );
            }
        }
        let served: u32 = each.iter().sum();
        let n = bases.len() as u32;
        if served == SHARDS && each.iter().all(|&c| c >= SHARDS / n && c <= SHARDS.div_ceil(n)) {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > limit {
            return Err(format!("only {served} of {SHARDS} shards served after {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn progress(start: Instant, duration: Duration, what: &str) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    while start.elapsed() + Duration::from_millis(100) < duration {
        tick.tick().await;
        eprintln!("bench keys: {what} {:.0} / {} s", start.elapsed().as_secs_f64(), duration.as_secs());
    }
}

/// What a crash can lose in `interval` mode: the admissions since the owner's last stored flush,
/// so at most every admission (of any owner) answered in the last interval plus 100 ms for the
/// publish before the kill. Each lost admission lets at most one more in: over-admissions ≤ this.
pub(super) fn loss_bound(obs: &[Observation], killed_at_us: u64, interval_ms: u64) -> usize {
    let from = killed_at_us.saturating_sub((interval_ms + 100) * 1_000);
    obs.iter().filter(|o| o.status == 200 && o.sent_us <= killed_at_us && o.received_us >= from).count()
}

/// From the kill on: when the last request that reached a live instance went unanswered.
pub(super) fn recovery_ms(obs: &[Observation], killed: u8, killed_at_us: u64) -> u64 {
    obs.iter()
        .filter(|o| o.instance != killed && o.sent_us >= killed_at_us && (o.status == 503 || o.status == 0))
        .map(|o| (o.received_us - killed_at_us) / 1_000)
        .max()
        .unwrap_or(0)
}
