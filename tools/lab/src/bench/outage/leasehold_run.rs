//! `bench outage` against Leasehold: two DCs of two agents each, then the whole control plane
//! (nats-server, coordinator, DC managers) SIGKILLed under load.
#![allow(clippy::disallowed_methods)] // a bench measures real time (clippy.toml)

use super::{load, Args, Run};
use crate::demo::observe::wait_for_lease_of;
use crate::demo::procs::Procs;
use leasehold_nats_harness::{binaries, NatsServer};
use std::time::{Duration, Instant};

const LIMIT: &str = "outage";
const DCS: [&str; 2] = ["bkk", "europe"];
const PODS_PER_DC: usize = 2;

/// The coordinator's settings: the limit, each DC's floor a third of R and B (whole tokens).
fn coordinator_toml(a: &Args) -> String {
    let (rate, burst) = (a.rate_per_s * 1_000, a.burst * 1_000);
    let mut s = format!(
        "replicas = 1\n\n[[limits]]\nlimit = \"{LIMIT}\"\n\
         quota = {{ rate_milli_per_s = {rate}, burst_milli = {burst} }}\nrenew_interval_ms = 1000\n"
    );
    for dc in DCS {
        let floor = |milli: u64| milli / 3 / 1_000 * 1_000;
        s.push_str(&format!(
            "\n[[limits.dcs]]\nname = \"{dc}\"\nfloor = {{ rate_milli_per_s = {}, burst_milli = {} }}\n",
            floor(rate),
            floor(burst)
        ));
    }
    s
}

fn write(path: &std::path::Path, text: &str) -> Result<String, String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path.display().to_string())
}

pub(super) async fn run(a: &Args) -> Result<Run, String> {
    let out = a.out_dir.join("leasehold");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let bin = binaries().map_err(|e| format!("{e} (bench outage starts its own nats-server)"))?;
    let mut server = NatsServer::start(&bin[0]).map_err(|e| e.to_string())?;
    let url = server.url();
    let mut procs = Procs::new(&out.join("logs"))?;
    let coordinator = write(&out.join("coordinator.toml"), &coordinator_toml(a))?;
    let env = [("LEASEHOLD_COORDINATOR_NATS_URL", url.clone())];
    procs.spawn("coordinator", &["coordinator", "--config", &coordinator], &env, false).await?;
    let mut agents = Vec::new();
    for dc in DCS {
        let manager = format!("limit = \"{LIMIT}\"\ndc = \"{dc}\"\nid = \"{dc}-mgr\"\nreplicas = 1\n");
        let manager = write(&out.join(format!("{dc}-mgr.toml")), &manager)?;
        let env = [("LEASEHOLD_DC_MANAGER_NATS_URL", url.clone())];
        procs.spawn(&format!("{dc}-mgr"), &["dc-manager", "--config", &manager], &env, false).await?;
        for p in 1..=PODS_PER_DC {
            let name = format!("{dc}-pod{p}");
            let env = [
                ("LEASEHOLD_AGENT_NATS_URL", url.clone()),
                ("LEASEHOLD_AGENT_DC", dc.to_string()),
                ("LEASEHOLD_AGENT_POD_ID", name.clone()),
                ("LEASEHOLD_AGENT_LIMIT", LIMIT.to_string()),
                ("LEASEHOLD_AGENT_HTTP_LISTEN", "127.0.0.1:0".to_string()),
            ];
            agents.push(procs.spawn(&name, &["agent"], &env, true).await?.expect("an address"));
        }
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(a.clients)
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    for addr in &agents {
        if !wait_for_lease_of(&http, addr, Some(LIMIT), deadline).await {
            let exited = procs.exited();
            return Err(format!(
                "agent {addr} got no lease within 60 s (exited: {exited:?}); logs in {}",
                out.join("logs").display()
            ));
        }
    }
    eprintln!(
        "bench outage: Leasehold up ({} agents); {} s healthy, then the control plane killed",
        agents.len(),
        a.healthy_s
    );

    let (start, total) = (Instant::now(), a.healthy() + a.outage());
    let urls: Vec<String> =
        agents.iter().map(|a| format!("http://{a}/v1/acquire?limit={LIMIT}&max_wait_ms=0")).collect();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ask = {
        let (http, urls) = (http.clone(), std::sync::Arc::new(urls));
        move || {
            let (http, urls, next) = (http.clone(), urls.clone(), next.clone());
            async move {
                let url = &urls[next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % urls.len()];
                http.post(url).send().await.is_ok_and(|r| r.status().is_success())
            }
        }
    };
    let load = tokio::spawn(load::drive(a.clients, Duration::from_millis(a.pace_ms), start, total, ask));

    tokio::time::sleep_until((start + a.healthy()).into()).await;
    let outage_at = start.elapsed();
    server.kill();
    for name in ["coordinator", "bkk-mgr", "europe-mgr"] {
        procs.kill(name).await;
    }
    eprintln!("bench outage: nats-server, coordinator and DC managers killed at {:.1} s", outage_at.as_secs_f64());
    tokio::time::sleep_until((start + a.healthy() + a.outage() / 2).into()).await;
    let (mut not_ready, mut stale) = (0, 0);
    for addr in &agents {
        let ready = http.get(format!("http://{addr}/readyz")).send().await.is_ok_and(|r| r.status().is_success());
        not_ready += usize::from(!ready);
        stale += usize::from(seconds_since_renewal(&http, addr).await.is_some_and(|s| s > STALE_AFTER_S));
    }
    let admissions = load.await.map_err(|e| format!("the load stopped: {e}"))?;
    procs.stop(Duration::from_secs(2), |_| true).await;
    let seen = super::Degraded { not_ready, stale, agents: agents.len() };
    Ok(Run { admissions, outage_at, total, degraded: Some(seen) })
}

/// The shipped alert `LeaseholdLeaseRenewalLate` fires above this (deploy/prometheus).
const STALE_AFTER_S: f64 = 3.0;

/// The agent's `leasehold_pod_seconds_since_renewal` for the limit, from its `/metrics`.
async fn seconds_since_renewal(http: &reqwest::Client, addr: &str) -> Option<f64> {
    let text = http.get(format!("http://{addr}/metrics")).send().await.ok()?.text().await.ok()?;
    text.lines()
        .filter(|l| l.starts_with("leasehold_pod_seconds_since_renewal{") && l.contains(&format!("limit=\"{LIMIT}\"")))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}
