//! `leasehold-lab demo`: the whole system as separate OS processes on this machine.
//!
//! A nats-server (started on a free port with a temporary store, or `--nats-url`), two
//! coordinator replicas, a DC manager each for BKK and EUROPE serving every limit, 4 pod agents
//! per DC serving every limit, and two limits ([`limits::LIMITS`]): the partner API (seeded from
//! the coordinators' TOML) and a search API (written with `leasehold limits put`), each with its
//! own strict mock upstream and its share of the diurnal load, compressed into `--duration-s`.
//! Mid-load (`--lower-at-s`) `leasehold limits put` lowers the partner API's R and, once the
//! reconfiguration guarantee covers it, the partner's upstream lowers its hard limit
//! ([`lowering`]). Prints a live table to stderr and one JSON summary line to stdout; writes a
//! follow-the-sun chart per limit.

pub mod limits;
pub mod load;
pub mod lowering;
pub mod observe;
pub mod procs;
mod summary;
mod upgrade;
mod watch;

use async_nats::jetstream::kv::Store;
use clap::Args;
use leasehold_nats::connect::{connect_until, jetstream};
use leasehold_nats_harness::{binaries, NatsServer};
use limits::{Lowering, LIMITS, SEARCH};
use load::LoadSpec;
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
pub const DC_TTL_MS: u64 = 10_000;
/// `--lower-at-s` when not given: this share of the duration. The put then comes while demand
/// (about 850/s) is well above the new R, and the partner's lower hard limit, one lease lifetime
/// and a window later (about 10% of a 120 s day), judges the busy hours until demand falls below
/// the new R at about 55% of the day.
const LOWER_AT_PERCENT: u64 = 30;

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
    /// Lower the partner API's R with `leasehold limits put` this many seconds into the load (its
    /// upstream lowers its hard limit once that is safe). Default: 30% of the duration; 0: never.
    #[arg(long)]
    lower_at_s: Option<u64>,
    /// Serve the live web view (`leasehold dashboard`) here; port 0: any free port (the URL is
    /// printed); `off`: none.
    #[arg(long, default_value = "127.0.0.1:0")]
    dashboard_listen: String,
    /// Replace every process, one at a time and under load, this many seconds into the load, in
    /// the order of docs/OPERATIONS.md §12 (agents, DC managers, coordinators; standbys first). Each DC
    /// then runs two DC managers. Lowering R (`--lower-at-s`) is off unless asked for.
    #[arg(long)]
    upgrade_at_s: Option<u64>,
    /// The new build the upgrade starts (default: this binary).
    #[arg(long)]
    upgrade_binary: Option<PathBuf>,
}

impl DemoArgs {
    /// When the partner API's R is lowered, if at all.
    fn lower_at_s(&self) -> Option<u64> {
        match self.lower_at_s {
            Some(0) => None,
            Some(s) => Some(s),
            None if self.upgrade_at_s.is_some() => None,
            None => Some(self.duration_s * LOWER_AT_PERCENT / 100),
        }
    }
}

/// Leadership TTL of the coordinators and DC managers the demo and the chaos harness start.
pub const LEADER_TTL_MS: u64 = 3_000;

/// The partner API's leased R: [`limits::rate_for`] its hard limit.
pub fn rate_per_s() -> u64 {
    limits::PARTNER.rate_per_s()
}

/// The coordinators' settings: the demo's limit, DC leases of `dc_ttl_ms`, buckets of `replicas`.
/// Each DC's floor holds a token for each of its pods, so all of them serve when it is all that
/// is left.
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
            "\n[[limits.dcs]]\nname = \"{dc}\"\nfloor = {{ rate_milli_per_s = 50000, burst_milli = {} }}\n",
            PODS_PER_DC * 1_000
        ));
    }
    s
}

/// A DC manager replica's settings (`id` names it; replicas of the buckets it may create;
/// `serves` the limit it serves, `"*"` for every limit of its DC).
pub fn dc_manager_toml(dc: &str, id: &str, replicas: usize, serves: &str) -> String {
    format!(
        "limit = \"{serves}\"\ndc = \"{dc}\"\nid = \"{id}\"\nreplicas = {replicas}\n\
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
    if a.lower_at_s().is_some_and(|at| at >= a.duration_s) {
        return Err(format!("--lower-at-s must be below --duration-s ({}), or 0 for never", a.duration_s));
    }
    if let Some(at) = a.upgrade_at_s {
        if at >= a.duration_s {
            return Err(format!("--upgrade-at-s must be below --duration-s ({})", a.duration_s));
        }
        if a.lower_at_s().is_some() {
            return Err("--upgrade-at-s and --lower-at-s are not run together (the lowering follows the agents the upgrade replaces)".into());
        }
    }
    if let Some(bin) = &a.upgrade_binary {
        if a.upgrade_at_s.is_none() {
            return Err("--upgrade-binary needs --upgrade-at-s".into());
        }
        if !bin.is_file() {
            return Err(format!("--upgrade-binary {}: no such file", bin.display()));
        }
    }
    leasehold::block_on(demo(a))
}

/// The system as separate processes, every pod holding a lease of every limit.
struct Running {
    _server: Option<NatsServer>,
    nats_url: String,
    /// Shared with the rolling upgrade, which replaces processes while the demo watches.
    procs: Arc<tokio::sync::Mutex<Procs>>,
    /// Per limit, in [`LIMITS`] order: its upstream's address.
    upstreams: Vec<String>,
    /// Per DC: the agents' addresses.
    agents: Vec<Vec<String>>,
    http: reqwest::Client,
    ledger: Store,
    leaders: Store,
}

async fn demo(a: DemoArgs) -> Result<ExitCode, String> {
    let started = Instant::now();
    let mut running = start(&a).await?;
    eprintln!(
        "demo: all {} pods hold leases of {} limits after {:.1} s; load starts",
        running.agents.concat().len(),
        LIMITS.len(),
        started.elapsed().as_secs_f64()
    );
    let duration = Duration::from_secs(a.duration_s);
    let lists: Vec<_> = running.agents.iter().map(|list| Arc::new(Mutex::new(list.clone()))).collect();
    let specs = LIMITS
        .iter()
        .zip(&running.upstreams)
        .map(|(l, up)| LoadSpec { limit: Some(l.name.into()), upstream: up.clone(), demand_share: l.demand_share })
        .collect();
    let (loads, drivers) = load::start_diurnal_loads(running.http.clone(), specs, duration, lists.clone());
    let plan = Lowering::partner();
    let lowering = a.lower_at_s().map(|at| {
        let cx = lowering::Context {
            nats_url: running.nats_url.clone(),
            ledger: running.ledger.clone(),
            http: running.http.clone(),
            upstream: running.upstreams[0].clone(),
            agents: running.agents.concat(),
            out_dir: a.out_dir.clone(),
            log_dir: a.out_dir.join("logs"),
            start: loads[0].start,
            end: loads[0].start + duration,
        };
        tokio::spawn(lowering::run(plan.clone(), at, cx))
    });
    let upgrade = a.upgrade_at_s.map(|at| {
        let cx = upgrade::Context {
            procs: running.procs.clone(),
            http: running.http.clone(),
            leaders: running.leaders.clone(),
            rotation: lists,
            binary: a.upgrade_binary.clone().unwrap_or_else(|| std::env::current_exe().unwrap_or_default()),
            start: loads[0].start,
        };
        tokio::spawn(upgrade::run(at, cx))
    });
    let watched = watch::watch(&a, &mut running, &loads).await;
    for d in drivers {
        let _ = d.await;
    }
    let upgraded = match upgrade {
        Some(task) => Some(task.await.unwrap_or_else(|e| upgrade::Report {
            error: Some(format!("the upgrade stopped: {e}")),
            ..upgrade::Report::default()
        })),
        None => None,
    };
    let lowered = match lowering {
        Some(task) => Some(task.await.unwrap_or_else(|e| lowering::Ran {
            error: Some(format!("the lowering stopped: {e}")),
            ..lowering::Ran::default()
        })),
        None => None,
    };
    let mut ups = Vec::new();
    for up in &running.upstreams {
        ups.push(
            observe::settle(&running.http, up)
                .await
                .ok_or_else(|| format!("the upstream at {up} stopped answering"))?,
        );
    }
    let mut procs = running.procs.lock().await;
    let crashed = procs.exited();
    // Agents first, so their DC managers are still there to acknowledge the returned leases.
    procs.stop(Duration::from_secs(8), |n| n.contains("-pod")).await;
    let drains_acknowledged = procs.printed("drained (acknowledged: true)");
    procs.stop(Duration::from_secs(5), |_| true).await;
    let bins: Vec<load::Bins> =
        loads.iter().map(|l| l.bins.lock().unwrap_or_else(|p| p.into_inner()).clone()).collect();
    let watch::Watched { alloc, failover_s, new_leader } = watched;
    let secs = a.duration_s as usize;
    let lowering = lowered.map(|ran| lowering::Report::new(&plan, ran, &bins[0], &ups[0], secs));
    let outcome = summary::Outcome { crashed, failover_s, new_leader, drains_acknowledged, upgrade: upgraded };
    summary::summarize(&a, &bins, &alloc, &ups, lowering, outcome, started)
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
    let mut upstreams = Vec::new();
    for l in LIMITS {
        let args = ["upstream", "--listen", "127.0.0.1:0", "--limit", &l.hard_calls.to_string()];
        upstreams.push(procs.spawn(&format!("upstream-{}", l.name), &args, &[], true).await?.expect("address"));
    }
    if a.dashboard_listen != "off" {
        let args = ["dashboard", "--listen", &a.dashboard_listen, "--nats-url", &nats_url, "--history-s", "180"];
        let url = procs.spawn("dashboard", &args, &[], true).await?.expect("address");
        eprintln!("demo: live view at {url} (open it in a browser)");
    }
    // HTTP on any free port (printed): /readyz, which the rolling upgrade waits for.
    for id in ["coord-a", "coord-b"] {
        let env = [
            ("LEASEHOLD_COORDINATOR_NATS_URL", nats_url.clone()),
            ("LEASEHOLD_COORDINATOR_ID", id.to_string()),
            ("LEASEHOLD_COORDINATOR_HTTP_LISTEN", "127.0.0.1:0".to_string()),
        ];
        procs.spawn(id, &["coordinator", "--config", &coord_cfg], &env, true).await?;
    }
    // The second limit is data: written to lh_limits with the CLI, then followed live.
    let file = format!("{}.toml", SEARCH.name);
    let def = limits::definition_toml(&SEARCH, SEARCH.rate_per_s());
    let put = limits::put_with_cli(out, &out.join("logs"), &file, &def, &nats_url).await?;
    if put.exit_code != Some(0) {
        return Err(format!("leasehold limits put {file} failed: {}", put.printed.join(" | ")));
    }
    eprintln!("demo: leasehold limits put {}: {}", out.join(&file).display(), put.printed.join(" | "));
    let mut agents: Vec<Vec<String>> = vec![Vec::new(); DCS.len()];
    for (d, dc) in DCS.iter().enumerate() {
        // A standby per DC when the upgrade will replace the leader.
        let replicas: &[&str] = if a.upgrade_at_s.is_some() { &["a", "b"] } else { &["a"] };
        for r in replicas {
            let id = format!("{dc}-mgr-{r}");
            let cfg = out.join(format!("{id}.toml"));
            std::fs::write(&cfg, dc_manager_toml(dc, &id, 1, "*"))
                .map_err(|e| format!("cannot write {}: {e}", cfg.display()))?;
            let env = [
                ("LEASEHOLD_DC_MANAGER_NATS_URL", nats_url.clone()),
                ("LEASEHOLD_DC_MANAGER_HTTP_LISTEN", "127.0.0.1:0".to_string()),
            ];
            procs.spawn(&id, &["dc-manager", "--config", &cfg.display().to_string()], &env, true).await?;
        }
        for p in 1..=PODS_PER_DC {
            let name = format!("{dc}-pod{p}");
            let env = [
                ("LEASEHOLD_AGENT_NATS_URL", nats_url.clone()),
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
    let n = procs.pids().len();
    eprintln!("demo: {n} processes up; waiting for every pod to hold a lease of every limit");
    let wait_until = Instant::now() + Duration::from_secs(60);
    // An agent serves a limit from its first request; no agent has a default limit.
    for addr in agents.concat() {
        for l in LIMITS {
            if !observe::start_serving(&http, &addr, l.name).await {
                return Err(format!("pod at {addr} did not answer a request for {}", l.name));
            }
        }
    }
    for addr in agents.concat() {
        for l in LIMITS {
            if !observe::wait_for_lease_of(&http, &addr, Some(l.name), wait_until).await {
                let logs = out.join("logs");
                return Err(format!(
                    "pod at {addr} got no lease of {} within 60 s; logs in {}",
                    l.name,
                    logs.display()
                ));
            }
        }
    }
    let nats = connect_until(&nats_url, "leasehold-demo", Instant::now() + Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    let js = jetstream(nats);
    let ledger = js.get_key_value(leasehold_core::subjects::LEDGER_BUCKET).await.map_err(|e| e.to_string())?;
    let leaders = js.get_key_value(leasehold_core::subjects::LEADER_BUCKET).await.map_err(|e| e.to_string())?;
    let procs = Arc::new(tokio::sync::Mutex::new(procs));
    Ok(Running { _server: server, nats_url, procs, upstreams, agents, http, ledger, leaders })
}
