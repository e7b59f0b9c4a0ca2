//! `leasehold-lab demo`: the whole system as separate OS processes on this machine.
//!
//! A nats-server (started on a free port with a temporary store, or `--nats-url`), two
//! coordinator replicas, a DC manager each for BKK and EUROPE, 4 pod agents per DC, the strict
//! mock upstream, and the diurnal load of the simulator compressed into `--duration-s`. Prints a
//! live table to stderr and one JSON summary line to stdout; writes the follow-the-sun chart.

pub mod load;
pub mod observe;
pub mod procs;
mod summary;

use async_nats::jetstream::kv::Store;
use clap::Args;
use leasehold_nats::connect::{connect_until, jetstream};
use leasehold_nats_harness::{binaries, NatsServer};
use load::Bins;
use procs::Procs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const LIMIT: &str = "partner-api";
pub const DCS: [&str; 2] = ["bkk", "europe"];
pub const PODS_PER_DC: usize = 4;
/// The partner API's hard limit: calls in any sliding window of `HARD_WINDOW_MS`.
pub const HARD_CALLS: u64 = 1_000;
const HARD_WINDOW_MS: u64 = 1_000;
/// Permit-to-upstream delay spread allowed for on a busy 2-core machine (R·(W+J) + B ≤ L).
const JITTER_BUDGET_MS: u64 = 100;
pub const BURST: u64 = 20;
const DC_TTL_MS: u64 = 10_000;

#[derive(Args)]
pub struct DemoArgs {
    /// Length of the compressed day, in seconds.
    #[arg(long, default_value_t = 120)]
    duration_s: u64,
    /// Use this NATS server instead of starting one (it must have JetStream).
    #[arg(long)]
    nats_url: Option<String>,
    /// SIGKILL the coordinator leader this many seconds into the load.
    #[arg(long)]
    kill_leader_at_s: Option<u64>,
    /// Where to write the chart, logs and configs.
    #[arg(long, default_value = "out/demo")]
    out_dir: PathBuf,
    /// Seconds between rows of the live table.
    #[arg(long, default_value_t = 5)]
    table_every_s: u64,
}

/// The leased rate: any true window W sees at most `R·(W·(1 + δ) + J) + B` calls, with pods'
/// clocks up to δ = `max_drift` fast (1%, as configured below) and J the jitter budget.
/// Leadership TTL of the coordinators and DC managers the demo and the chaos harness start.
pub const LEADER_TTL_MS: u64 = 3_000;

pub fn rate_per_s() -> u64 {
    const MAX_DRIFT_PPM: u64 = 10_000;
    let window_on_fast_clocks_ms = HARD_WINDOW_MS + HARD_WINDOW_MS * MAX_DRIFT_PPM / 1_000_000;
    (HARD_CALLS - BURST) * 1_000 / (window_on_fast_clocks_ms + JITTER_BUDGET_MS)
}

/// The coordinators' settings: the demo's limit, DC leases of `dc_ttl_ms`, buckets of `replicas`.
pub fn coordinator_toml(dc_ttl_ms: u64, replicas: usize) -> String {
    let mut s = format!(
        "leader_ttl_ms = {LEADER_TTL_MS}\nreplicas = {replicas}\n\n[[limits]]\nlimit = \"{LIMIT}\"\n\
         quota = {{ rate_milli_per_s = {}, burst_milli = {} }}\ndc_ttl_ms = {dc_ttl_ms}\nrenew_interval_ms = 1000\n\
         expiry = {{ max_drift = 0.01, grace_ms = 100, egress_spread_ms = {JITTER_BUDGET_MS} }}\n",
        rate_per_s() * 1_000,
        BURST * 1_000
    );
    for dc in DCS {
        s.push_str(&format!(
            "\n[[limits.dcs]]\nname = \"{dc}\"\nfloor = {{ rate_milli_per_s = 50000, burst_milli = 0 }}\n"
        ));
    }
    s
}

/// A DC manager replica's settings (`id` names it; replicas of the buckets it may create).
pub fn dc_manager_toml(dc: &str, id: &str, replicas: usize) -> String {
    format!(
        "limit = \"{LIMIT}\"\ndc = \"{dc}\"\nid = \"{id}\"\nreplicas = {replicas}\n\
         expiry = {{ max_drift = 0.01, grace_ms = 100, egress_spread_ms = {JITTER_BUDGET_MS} }}\n"
    )
}

pub fn run(a: DemoArgs) -> Result<ExitCode, String> {
    if !(10..=86_400).contains(&a.duration_s) {
        return Err(format!("--duration-s must be within 10..=86400, got {}", a.duration_s));
    }
    if a.table_every_s == 0 {
        return Err("--table-every-s must be at least 1".into());
    }
    leasehold::block_on(demo(a))
}

/// The system as separate processes, every pod holding a lease.
struct Running {
    _server: Option<NatsServer>,
    procs: Procs,
    upstream: String,
    /// Per DC: the agents' addresses.
    agents: Vec<Vec<String>>,
    http: reqwest::Client,
    ledger: Store,
    leaders: Store,
}

/// What the demo watched while the load ran.
struct Watched {
    /// Per second: each DC's allocation (floor + newest DC lease), when the ledger was readable.
    alloc: Vec<Option<Vec<f64>>>,
    failover_s: Option<f64>,
    new_leader: Option<String>,
}

async fn demo(a: DemoArgs) -> Result<ExitCode, String> {
    let started = Instant::now();
    let mut running = start(&a).await?;
    eprintln!(
        "demo: all {} pods hold leases after {:.1} s; load starts",
        running.agents.concat().len(),
        started.elapsed().as_secs_f64()
    );
    let duration = Duration::from_secs(a.duration_s);
    let lists = running.agents.iter().map(|list| Arc::new(Mutex::new(list.clone()))).collect();
    let (load, drivers) = load::start_diurnal(running.http.clone(), running.upstream.clone(), duration, lists);
    let watched = watch(&a, &mut running, &load).await;
    for d in drivers {
        let _ = d.await;
    }
    let up = observe::settle(&running.http, &running.upstream).await.ok_or("the upstream stopped answering")?;
    let procs = &mut running.procs;
    let crashed = procs.exited();
    // Agents first, so their DC managers are still there to acknowledge the returned leases.
    procs.stop(Duration::from_secs(8), |n| n.contains("-pod")).await;
    let drains_acknowledged = procs.printed("drained (acknowledged: true)");
    procs.stop(Duration::from_secs(5), |_| true).await;
    let b = load.bins.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let Watched { alloc, failover_s, new_leader } = watched;
    let outcome = summary::Outcome { crashed, failover_s, new_leader, drains_acknowledged };
    summary::summarize(&a, &a.out_dir, &b, &alloc, &up, outcome, started)
}

/// Start a nats-server (unless `--nats-url`), the upstream, two coordinators, a DC manager and
/// the agents of each DC; wait until every pod holds a lease.
async fn start(a: &DemoArgs) -> Result<Running, String> {
    let out = &a.out_dir;
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let (server, nats_url) = match &a.nats_url {
        Some(url) => (None, url.clone()),
        None => {
            let bin = binaries().map_err(|e| format!("{e} (install nats-server, or pass --nats-url)"))?;
            let s = NatsServer::start(&bin[0]).map_err(|e| e.to_string())?;
            eprintln!("demo: started nats-server {} on {}", s.version, s.url());
            let url = s.url();
            (Some(s), url)
        }
    };
    let mut procs = Procs::new(&out.join("logs"))?;
    let coord_cfg = out.join("coordinator.toml");
    std::fs::write(&coord_cfg, coordinator_toml(DC_TTL_MS, 1))
        .map_err(|e| format!("cannot write {}: {e}", coord_cfg.display()))?;
    let coord_cfg = coord_cfg.display().to_string();
    let upstream = procs
        .spawn("upstream", &["upstream", "--listen", "127.0.0.1:0", "--limit", &HARD_CALLS.to_string()], &[], true)
        .await?
        .expect("address");
    for id in ["coord-a", "coord-b"] {
        let env = [("LEASEHOLD_COORDINATOR_NATS_URL", nats_url.clone()), ("LEASEHOLD_COORDINATOR_ID", id.to_string())];
        procs.spawn(id, &["coordinator", "--config", &coord_cfg], &env, false).await?;
    }
    let mut agents: Vec<Vec<String>> = vec![Vec::new(); DCS.len()];
    for (d, dc) in DCS.iter().enumerate() {
        let cfg = out.join(format!("dc-manager-{dc}.toml"));
        std::fs::write(&cfg, dc_manager_toml(dc, &format!("{dc}-mgr-a"), 1))
            .map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
        let env = [("LEASEHOLD_DC_MANAGER_NATS_URL", nats_url.clone())];
        procs
            .spawn(&format!("{dc}-mgr-a"), &["dc-manager", "--config", &cfg.display().to_string()], &env, false)
            .await?;
        for p in 1..=PODS_PER_DC {
            let name = format!("{dc}-pod{p}");
            let env = [
                ("LEASEHOLD_AGENT_NATS_URL", nats_url.clone()),
                ("LEASEHOLD_AGENT_LIMIT", LIMIT.to_string()),
                ("LEASEHOLD_AGENT_DC", dc.to_string()),
                ("LEASEHOLD_AGENT_POD_ID", name.clone()),
                ("LEASEHOLD_AGENT_HTTP_LISTEN", "127.0.0.1:0".to_string()),
            ];
            agents[d].push(procs.spawn(&name, &["agent"], &env, true).await?.expect("address"));
        }
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    eprintln!("demo: {} processes up; waiting for every pod to hold a lease", 4 + DCS.len() + agents.concat().len());
    let wait_until = Instant::now() + Duration::from_secs(60);
    for addr in agents.concat() {
        if !observe::wait_for_lease(&http, &addr, wait_until).await {
            return Err(format!("pod at {addr} got no lease within 60 s; logs in {}", out.join("logs").display()));
        }
    }
    let nats = connect_until(&nats_url, "leasehold-demo", Instant::now() + Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream(nats);
    let ledger = js.get_key_value(leasehold_shared::subjects::LEDGER_BUCKET).await.map_err(|e| e.to_string())?;
    let leaders = js.get_key_value(leasehold_shared::subjects::LEADER_BUCKET).await.map_err(|e| e.to_string())?;
    Ok(Running { _server: server, procs, upstream, agents, http, ledger, leaders })
}

/// Every second while the load runs: read the allocations and the leader, SIGKILL the leader when
/// asked and time the failover, and print a table row every `--table-every-s`.
async fn watch(a: &DemoArgs, running: &mut Running, load: &load::Load) -> Watched {
    let mut w = Watched { alloc: vec![None; a.duration_s as usize + 2], failover_s: None, new_leader: None };
    let mut killed: Option<(String, Instant)> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    eprintln!("{:>5} | {:^26} | {:^26} | upstream", "t", "bkk demand/alloc/admitted", "europe demand/alloc/admitted");
    while load.start.elapsed() < load.duration {
        tick.tick().await;
        let sec = load.start.elapsed().as_secs() as usize;
        if let Some((per_dc, _)) = observe::allocations(&running.ledger, LIMIT, &DCS).await {
            let last = w.alloc.len() - 1;
            w.alloc[sec.min(last)] = Some(per_dc);
        }
        let leader = observe::leader(&running.leaders).await;
        if let (Some(at), None) = (a.kill_leader_at_s, &killed) {
            if sec as u64 >= at {
                if let Some(l) = leader.clone() {
                    running.procs.kill(&l).await;
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
            let up = observe::upstream_stats(&running.http, &running.upstream).await;
            print_row(sec, &load.bins, &w.alloc, a.table_every_s as usize, up);
        }
    }
    w
}

fn print_row(
    sec: usize,
    bins: &Mutex<Bins>,
    alloc: &[Option<Vec<f64>>],
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
    let up = up.map_or("?".into(), |u| {
        format!("max 1 s window {} ({:.3}), 429s {}", u.max_window, u.max_window_ratio, u.rejected)
    });
    eprintln!("{sec:>4}s | {} | {} | {up}", cols[0], cols[1]);
}
