//! `leasehold-lab dev`: a local one-DC stack to integrate a service against, until Ctrl-C.
//!
//! Its own nats-server (a free loopback port, or `--nats-port`), a coordinator holding the limit
//! [`LIMIT`] at [`RATE_PER_S`]/s with a burst of [`BURST`], a DC manager of the DC [`DC`], one agent
//! (HTTP, `--agent-listen`) serving that limit from the start, and a per-key limiter
//! (`leasehold keys`, `--keys-listen`) joined to the same NATS server with its default tier. Prints
//! the addresses once the agent holds a lease and the per-key limiter owns its shards, then
//! runs until SIGINT or SIGTERM and stops its children (the agent returns its lease first). A
//! child that exits on its own stops the stack, with the path of its log. docs/INTEGRATING.md
//! uses it.

use crate::demo::procs::Procs;
use clap::Args;
use leasehold_nats_harness::{binaries, NatsServer};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The limit the stack serves, its refill rate and its burst.
pub const LIMIT: &str = "partner-api";
pub const RATE_PER_S: u64 = 100;
pub const BURST: u64 = 20;
/// The one data center.
pub const DC: &str = "local";
/// How long the stack may take to be ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

#[derive(Args)]
pub struct DevArgs {
    /// The nats-server's loopback port; 0: a free one (printed).
    #[arg(long, default_value_t = 0)]
    nats_port: u16,
    /// The agent's HTTP address.
    #[arg(long, default_value = "127.0.0.1:9090")]
    agent_listen: String,
    /// The per-key limiter's HTTP address.
    #[arg(long, default_value = "127.0.0.1:8090")]
    keys_listen: String,
    /// Where to write the services' settings and logs.
    #[arg(long, default_value = "out/dev")]
    out_dir: PathBuf,
}

pub fn run(a: DevArgs) -> Result<ExitCode, String> {
    // Taken addresses are refused before anything starts, with what to do about them.
    if a.nats_port != 0 {
        port_free(&format!("127.0.0.1:{}", a.nats_port), "--nats-port")?;
    }
    port_free(&a.agent_listen, "--agent-listen")?;
    port_free(&a.keys_listen, "--keys-listen")?;
    leasehold::block_on(dev(a))
}

/// Refuses `addr` when something already listens there (or it is not an address to bind).
fn port_free(addr: &str, flag: &str) -> Result<(), String> {
    std::net::TcpListener::bind(addr).map(drop).map_err(|e| {
        format!("{addr} is not free ({e}): stop what listens there (an earlier dev stack?) or pass {flag} ADDR")
    })
}

/// The coordinator's settings: the one limit, its one DC with a floor of a tenth of R.
fn coordinator_toml() -> String {
    format!(
        "id = \"coord-a\"\nleader_ttl_ms = 3000\nreplicas = 1\nhttp_listen = \"127.0.0.1:0\"\n\n\
         [[limits]]\nlimit = \"{LIMIT}\"\nquota = {{ rate_milli_per_s = {}, burst_milli = {} }}\n\
         dc_ttl_ms = 10000\nrenew_interval_ms = 1000\n\
         expiry = {{ max_drift = 0.01, grace_ms = 100, egress_spread_ms = 100 }}\n\n\
         [[limits.dcs]]\nname = \"{DC}\"\nfloor = {{ rate_milli_per_s = {}, burst_milli = 1000 }}\n",
        RATE_PER_S * 1_000,
        BURST * 1_000,
        RATE_PER_S * 100,
    )
}

/// The DC manager's settings: every limit of the one DC.
fn dc_manager_toml() -> String {
    format!(
        "limit = \"*\"\ndc = \"{DC}\"\nid = \"{DC}-mgr-a\"\nreplicas = 1\nhttp_listen = \"127.0.0.1:0\"\n\
         expiry = {{ max_drift = 0.01, grace_ms = 100, egress_spread_ms = 100 }}\n"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> Result<String, String> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

async fn dev(a: DevArgs) -> Result<ExitCode, String> {
    std::fs::create_dir_all(&a.out_dir).map_err(|e| format!("cannot create {}: {e}", a.out_dir.display()))?;
    let bin = binaries().map_err(|e| e.to_string())?;
    let server = NatsServer::start_on_port(&bin[0], a.nats_port).map_err(|e| e.to_string())?;
    let nats_url = server.url();
    let log_dir = a.out_dir.join("logs");
    let mut procs = Procs::new(&log_dir)?;
    let started = start(&a, &mut procs, &nats_url, &log_dir).await;
    let code = match started {
        Ok(()) => {
            println!("dev: Ctrl-C stops the stack");
            run_until_stopped(&mut procs, &log_dir).await
        }
        Err(e) => Err(e),
    };
    // The agent first, so the DC manager is still there to acknowledge its returned lease.
    procs.stop(Duration::from_secs(6), |n| n == "agent").await;
    procs.stop(Duration::from_secs(5), |_| true).await;
    drop(server);
    code
}

/// Start every service and wait until the stack answers; print what to integrate against.
async fn start(a: &DevArgs, procs: &mut Procs, nats_url: &str, log_dir: &Path) -> Result<(), String> {
    let coordinator = write(&a.out_dir, "coordinator.toml", &coordinator_toml())?;
    let dc_manager = write(&a.out_dir, "dc-manager.toml", &dc_manager_toml())?;
    let coordinator_http = procs
        .spawn(
            "coordinator",
            &["coordinator", "--config", &coordinator],
            &[("LEASEHOLD_COORDINATOR_NATS_URL", nats_url.into())],
            true,
        )
        .await?
        .unwrap_or_default();
    let dc_manager_http = procs
        .spawn(
            "dc-manager",
            &["dc-manager", "--config", &dc_manager],
            &[("LEASEHOLD_DC_MANAGER_NATS_URL", nats_url.into())],
            true,
        )
        .await?
        .unwrap_or_default();
    let agent_env = [
        ("LEASEHOLD_AGENT_NATS_URL", nats_url.to_string()),
        ("LEASEHOLD_AGENT_DC", DC.to_string()),
        ("LEASEHOLD_AGENT_POD_ID", format!("{DC}-agent-1")),
        ("LEASEHOLD_AGENT_LIMIT", LIMIT.to_string()),
        ("LEASEHOLD_AGENT_HTTP_LISTEN", a.agent_listen.clone()),
    ];
    let agent = procs.spawn("agent", &["agent"], &agent_env, true).await?.unwrap_or_default();
    let keys_args = ["keys", "--listen", &a.keys_listen, "--nats-url", nats_url];
    let keys = procs.spawn("keys", &keys_args, &[], true).await?.unwrap_or_default();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + READY_WITHIN;
    let agent_leased = leased(&http, &agent, deadline).await;
    for (name, addr, up) in [("agent", &agent, agent_leased), ("keys", &keys, ready(&http, &keys, deadline).await)] {
        if !up {
            let log = log_dir.join(format!("{name}.log"));
            return Err(format!("{name} at {addr} was not ready within {READY_WITHIN:?}; see {}", log.display()));
        }
    }
    println!("dev: ready; logs in {}", log_dir.display());
    println!("dev: NATS         {nats_url}  (export LEASEHOLD_NATS_URL={nats_url})");
    println!("dev: agent        http://{agent}  (limit {LIMIT}: {RATE_PER_S}/s, burst {BURST}, DC {DC})");
    println!("dev: keys         http://{keys}  (tier free: 20 per minute per key)");
    println!("dev: coordinator  http://{coordinator_http}/v1/status");
    println!("dev: dc-manager   http://{dc_manager_http}/v1/status");
    Ok(())
}

/// Polls the agent at `addr` until its lease of [`LIMIT`] grants at some rate (true), or
/// `deadline` passes (false); then lets the bucket fill (a new lease's starts empty), at most 1 s.
/// `/readyz` is not enough: a first lease of rate 0 makes the agent ready and grants nothing.
async fn leased(http: &reqwest::Client, addr: &str, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        let r = http.get(format!("http://{addr}/v1/status?limit={LIMIT}")).send().await;
        let status: Option<serde_json::Value> = match r {
            Ok(r) if r.status().is_success() => r.json().await.ok(),
            _ => None,
        };
        let rate_milli = status.as_ref().and_then(|s| s["lease"]["quota"]["rate_milli_per_s"].as_u64()).unwrap_or(0);
        let burst_milli = status.as_ref().and_then(|s| s["lease"]["quota"]["burst_milli"].as_u64()).unwrap_or(0);
        if rate_milli >= 1_000 {
            let fill_ms = (burst_milli * 1_000 / rate_milli).min(1_000);
            tokio::time::sleep(Duration::from_millis(fill_ms)).await;
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Polls `http://addr/readyz` until it answers 200 (true) or `deadline` passes (false).
async fn ready(http: &reqwest::Client, addr: &str, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        let r = http.get(format!("http://{addr}/readyz")).send().await;
        if r.is_ok_and(|r| r.status().is_success()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Until SIGINT or SIGTERM (success), or a child exits on its own (an error naming its log).
async fn run_until_stopped(procs: &mut Procs, log_dir: &Path) -> Result<ExitCode, String> {
    let stop = leasehold_process::shutdown_signal();
    tokio::pin!(stop);
    let mut every = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = &mut stop => {
                println!("dev: stopping");
                return Ok(ExitCode::SUCCESS);
            }
            _ = every.tick() => {
                if let Some(name) = procs.exited().first() {
                    let log = log_dir.join(format!("{name}.log"));
                    return Err(format!("{name} exited; see {}", log.display()));
                }
            }
        }
    }
}
