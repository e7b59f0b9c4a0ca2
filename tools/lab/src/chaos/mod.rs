//! `leasehold-lab chaos --duration-s 300 --seed N`: the real binaries on a production-shaped NATS
//! topology ([`topology`]), the demo's diurnal load, and a seeded schedule of faults
//! ([`schedule`], [`faults`]). The strict upstream's own counters are the judge of safety; the
//! per-second counts ([`judge`]) give utilization outside faults and each fault's recovery.
//! The last stdout line is one JSON object; the exit code is non-zero if the limit was exceeded.

pub mod adversary;
pub mod failover;
mod inject;
pub mod judge;
pub mod report;
pub mod schedule;
mod topology;

use crate::demo::load::{start_diurnal, Load};
use crate::demo::procs::Procs;
use crate::demo::{observe, DCS, HARD_CALLS, PODS_PER_DC};
use inject::{agent_env, World};
use leasehold_nats::connect::{connect_until, jetstream};
use leasehold_nats_harness::binaries;
use report::{LogEntry, Step};
use schedule::{Fault, FaultKind, Plan};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ChaosArgs {
    #[arg(long, default_value_t = 300)]
    duration_s: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only these fault kinds (comma-separated); default: all of them.
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<FaultKind>,
    /// DC-lease TTL: recovery is judged against three of these (at least twice the
    /// coordinators' 3 s leader TTL).
    #[arg(long, default_value_t = 6_000)]
    dc_ttl_ms: u64,
    /// Best-effort mode: each DC manager may issue this many requests/s beyond its floor once its
    /// DC lease expired without renewal (0: strict). The bound is then R·T + B + ΣE·T.
    #[arg(long, default_value_t = 0)]
    emergency_per_dc: u64,
    /// Where configs, logs and the run's record go.
    #[arg(long, default_value = "out/chaos")]
    out_dir: PathBuf,
}

const WARMUP_S: f64 = 12.0;
/// Skewed clocks for the whole run: (process, offset ms, drift ppm).
const SKEWED_POD: (&str, u64, i64) = ("bkk-pod4", 3_000, 5_000);
const SKEWED_MANAGER: (&str, u64, i64) = ("europe-mgr-b", 2_000, -5_000);

pub fn run(a: ChaosArgs) -> Result<ExitCode, String> {
    if !(60..=86_400).contains(&a.duration_s) {
        return Err(format!("--duration-s must be within 60..=86400, got {}", a.duration_s));
    }
    if !(6_000..=60_000).contains(&a.dc_ttl_ms) {
        return Err(format!("--dc-ttl-ms must be within 6000..=60000, got {}", a.dc_ttl_ms));
    }
    leasehold::block_on(chaos(a))
}

fn write(path: &std::path::Path, text: &str) -> Result<String, String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

/// Start the topology and every service; returns the world once every pod holds a lease.
async fn start_world(a: &ChaosArgs) -> Result<World, String> {
    std::fs::create_dir_all(&a.out_dir).map_err(|e| format!("cannot create {}: {e}", a.out_dir.display()))?;
    let binary = binaries().map_err(|e| format!("{e} (install nats-server)"))?.remove(0);
    let mut topology = topology::Topology::start(&binary, DCS.len()).await?;
    eprintln!("chaos: a 3-node NATS cluster (JetStream R3) and a link proxy for each of {} up", DCS.join(", "));
    let hub = connect_until(&topology.hub_urls(), "chaos-observer", Instant::now() + Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream(hub.clone());
    // Clustered JetStream needs a meta leader before anything can create an R3 stream. The
    // leader bucket is created as the services create it (terms live in the values, no max_age).
    let leaders_spec = leasehold_nats::kv::BucketSpec {
        history: 1,
        replicas: 3,
        ..leasehold_nats::kv::BucketSpec::new(leasehold_core::subjects::LEADER_BUCKET)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let leaders = loop {
        match leasehold_nats::kv::ensure_bucket(&js, &leaders_spec).await {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => {
                return Err(format!("the hub's JetStream is not ready: {e} ({})", topology.diagnosis()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    };
    let mut procs = Procs::new(&a.out_dir.join("logs"))?;
    let coord = write(&a.out_dir.join("coordinator.toml"), &crate::demo::coordinator_toml(a.dc_ttl_ms, 3))?;
    procs
        .spawn("upstream", &["upstream", "--listen", "127.0.0.1:0", "--limit", &HARD_CALLS.to_string()], &[], true)
        .await?;
    for id in ["coord-a", "coord-b"] {
        let env = [("LEASEHOLD_COORDINATOR_NATS_URL", topology.hub_urls()), ("LEASEHOLD_COORDINATOR_ID", id.into())];
        procs.spawn(id, &["coordinator", "--config", &coord], &env, false).await?;
    }
    let mut agents = Vec::new();
    for (d, dc) in DCS.iter().enumerate() {
        for m in ["a", "b"] {
            let id = format!("{dc}-mgr-{m}");
            let mut toml = crate::demo::dc_manager_toml(dc, &id, 3, crate::demo::LIMIT);
            if a.emergency_per_dc > 0 {
                toml.push_str(&format!(
                    "fail_mode = {{ mode = \"best-effort\", emergency = {{ rate_milli_per_s = {}, burst_milli = 0 }} }}\n",
                    a.emergency_per_dc * 1_000
                ));
            }
            let cfg = write(&a.out_dir.join(format!("{id}.toml")), &toml)?;
            let mut env = vec![("LEASEHOLD_DC_MANAGER_NATS_URL", topology.dc_url(d))];
            if id == SKEWED_MANAGER.0 {
                env.push(("LEASEHOLD_DC_MANAGER_CLOCK_OFFSET_MS", SKEWED_MANAGER.1.to_string()));
                env.push(("LEASEHOLD_DC_MANAGER_CLOCK_DRIFT_PPM", SKEWED_MANAGER.2.to_string()));
            }
            procs.spawn(&id, &["dc-manager", "--config", &cfg], &env, false).await?;
        }
        let mut named = BTreeMap::new();
        for p in 1..=PODS_PER_DC {
            let name = format!("{dc}-pod{p}");
            let skew = (name == SKEWED_POD.0).then_some((SKEWED_POD.1, SKEWED_POD.2));
            let env = agent_env(&topology.dc_url(d), dc, &name, skew);
            let addr = procs.spawn(&name, &["agent"], &env, true).await?.unwrap_or_default();
            named.insert(name, addr);
        }
        agents.push(Arc::new(Mutex::new(named)));
    }
    let slots = DCS.iter().map(|dc| (1..=PODS_PER_DC).map(|p| format!("{dc}-pod{p}")).collect()).collect();
    let lists = agents
        .iter()
        .map(|m| Arc::new(Mutex::new(m.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect())))
        .collect();
    Ok(World {
        procs,
        topology,
        agents,
        lists,
        hub,
        leaders,
        joined: 0,
        slots,
        adversary: None,
        adversary_sent: Vec::new(),
        store_back: None,
    })
}

async fn chaos(a: ChaosArgs) -> Result<ExitCode, String> {
    let schedule = plan(&a);
    let (mut world, http, upstream) = start(&a).await?;
    eprintln!("chaos: every pod holds a lease; load starts");
    let duration = Duration::from_secs(a.duration_s);
    let (load, drivers) = start_diurnal(http.clone(), upstream.clone(), duration, world.lists.clone());
    let (readiness, not_ready) = failover::watch_readiness(http.clone(), world.lists.clone(), load.start, duration);
    let (log, injected, store_back_at_s) = drive(&mut world, &http, &upstream, &load, &schedule).await?;
    for d in drivers {
        let _ = d.await;
    }
    let _ = readiness.await;
    let not_ready = not_ready.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let up = observe::settle(&http, &upstream).await.ok_or("the upstream stopped answering")?;
    let crashed = world.procs.exited();
    world.procs.stop(Duration::from_secs(8), |n| n.contains("-pod") || n.contains("-join")).await;
    world.procs.stop(Duration::from_secs(5), |_| true).await;

    let bins = load.bins.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let adversary = std::mem::take(&mut world.adversary_sent);
    let ran = report::Ran {
        schedule: &schedule,
        store_back_at_s,
        injected,
        bins: &bins,
        not_ready: &not_ready,
        upstream: &up,
        crashed,
        adversary,
    };
    let summary = report::summarize(&a, ran);
    report::write_record(&a.out_dir, &summary, &log, &schedule, &bins);
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    Ok(if summary.safe { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The seeded fault schedule of the run.
fn plan(a: &ChaosArgs) -> Vec<Fault> {
    let kinds = if a.faults.is_empty() { FaultKind::ALL.to_vec() } else { a.faults.clone() };
    let pod_ttl_s = leasehold_core::dc_manager::DcManagerConfig::new("", "", "").pod_ttl_ms as f64 / 1_000.0;
    let plan = Plan {
        duration_s: a.duration_s as f64,
        warmup_s: WARMUP_S,
        dc_ttl_s: a.dc_ttl_ms as f64 / 1_000.0,
        pod_ttl_s,
        dcs: DCS.len(),
        pods_per_dc: PODS_PER_DC,
    };
    let faults = schedule::schedule(a.seed, &plan, &kinds);
    eprintln!("chaos: seed {} schedules {} faults in {} s", a.seed, faults.len(), a.duration_s);
    faults
}

/// Start the world and wait until every pod holds a lease; returns it with an HTTP client and the
/// upstream's address.
async fn start(a: &ChaosArgs) -> Result<(World, reqwest::Client, String), String> {
    let world = start_world(a).await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(90);
    for list in &world.lists {
        let addrs = list.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for addr in addrs {
            if !observe::wait_for_lease(&http, &addr, deadline).await {
                return Err(format!("pod at {addr} got no lease within 90 s; logs in {}", a.out_dir.display()));
            }
        }
    }
    let upstream = world.procs.address("upstream").ok_or("no upstream")?;
    Ok((world, http, upstream))
}

/// Apply and heal the scheduled faults one at a time while the load runs, with a progress row
/// every 10 s; returns the fault log, the count of faults applied per kind, and per scheduled
/// fault when JetStream led the buckets' streams again after it (only after `restart_all_nats`).
async fn drive(
    world: &mut World,
    http: &reqwest::Client,
    upstream: &str,
    load: &Load,
    schedule: &[Fault],
) -> Result<(Vec<LogEntry>, BTreeMap<&'static str, u64>, Vec<Option<f64>>), String> {
    let mut log = Vec::new();
    let mut store_back_at_s = vec![None; schedule.len()];
    let mut applied = 0;
    let mut pending = schedule.iter().cloned().peekable();
    let mut active: Option<(Fault, inject::Undo)> = None;
    let mut injected: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last_row = 0;
    while load.start.elapsed() < load.duration {
        tick.tick().await;
        let t = load.start.elapsed().as_secs_f64();
        if let Some((f, _)) = &active {
            if t >= f.heal_at_s {
                let (f, undo) = active.take().expect("active");
                let line = world.heal(undo).await?;
                eprintln!("chaos: t={t:6.1}s heal {}: {line}", f.kind.name());
                log.push(LogEntry { t_s: t, step: Step::Heal(f.kind.name()), what: line });
                if let Some(back) = world.store_back.take() {
                    store_back_at_s[applied - 1] = Some(back.duration_since(load.start).as_secs_f64());
                }
            }
        } else if pending.peek().is_some_and(|f| t >= f.at_s) {
            let f = pending.next().expect("peeked");
            let (undo, line) = world.apply(&f).await?;
            eprintln!("chaos: t={t:6.1}s fault {}: {line}", f.kind.name());
            log.push(LogEntry { t_s: t, step: Step::Fault(f.kind.name()), what: line });
            *injected.entry(f.kind.name()).or_default() += 1;
            applied += 1;
            active = Some((f, undo));
        }
        let sec = t as u64;
        if sec >= last_row + 10 {
            last_row = sec;
            progress_row(http, upstream, load, sec).await;
        }
    }
    if let Some((f, undo)) = active.take() {
        let line = world.heal(undo).await?;
        log.push(LogEntry { t_s: load.start.elapsed().as_secs_f64(), step: Step::Heal(f.kind.name()), what: line });
    }
    Ok((log, injected, store_back_at_s))
}

/// The last 10 s: offered and admitted per second, and the upstream's counters.
async fn progress_row(http: &reqwest::Client, upstream: &str, load: &Load, sec: u64) {
    let Some(u) = observe::upstream_stats(http, upstream).await else { return };
    let b = load.bins.lock().unwrap_or_else(|p| p.into_inner());
    let from = sec.saturating_sub(10) as usize;
    let adm: u64 = (from..sec as usize).map(|s| b.admitted[s].iter().sum::<u64>()).sum();
    let off: u64 = (from..sec as usize).map(|s| b.offered[s].iter().sum::<u64>()).sum();
    eprintln!(
        "chaos: t={sec:4}s offered {:5.0}/s admitted {:5.0}/s | upstream max 1 s window {} ({:.3}), 429s {}",
        off as f64 / 10.0,
        adm as f64 / 10.0,
        u.max_window,
        u.max_window_ratio,
        u.rejected
    );
}
