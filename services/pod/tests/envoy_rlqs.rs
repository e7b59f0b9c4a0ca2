//! The agent lending its lease to a real Envoy over RLQS (`StreamRateLimitQuotas`): Envoy
//! enforces token buckets itself, the strict upstream judges, and the shipped
//! `deploy/envoy/rlqs-bootstrap.yaml` runs on free ports.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::agent_process::AgentProcess;
use crate::envoy_rls::{control_plane_with, WITHIN};
use leasehold_nats_harness::envoy::{envoy_binary, Envoy};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::path::Path;
use std::time::{Duration, Instant};

const LIMIT: &str = "partner-api";

/// The shipped RLQS bootstrap on the ports given (Envoy's ingress, the upstream, the agent's
/// RLQS); the admin interface on a free port.
fn bootstrap(ingress: u16, upstream: u16, rlqs: u16) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/envoy/rlqs-bootstrap.yaml");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace("port_value: 10000", &format!("port_value: {ingress}"))
        .replace("port_value: 8080", &format!("port_value: {upstream}"))
        .replace("port_value: 8082", &format!("port_value: {rlqs}"))
        .replace("port_value: 9901", "port_value: 0")
}

#[derive(Debug, Default)]
struct Load {
    ok: u64,
    limited: u64,
    other: Vec<u16>,
    retry_after: Option<String>,
}

/// About 100 calls/s through Envoy for `secs`.
async fn load(http: &reqwest::Client, call: &str, secs: u64) -> Load {
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut l = Load::default();
    while started.elapsed() < Duration::from_secs(secs) {
        tick.tick().await;
        let r = http.post(call).send().await.expect("envoy answers");
        match r.status().as_u16() {
            200 => l.ok += 1,
            429 => {
                l.limited += 1;
                let ra = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
                l.retry_after = l.retry_after.or(ra);
            }
            s => l.other.push(s),
        }
    }
    l
}

async fn upstream_stats(http: &reqwest::Client, port: u16) -> serde_json::Value {
    http.get(format!("http://127.0.0.1:{port}/stats")).send().await.unwrap().json().await.unwrap()
}

/// The agent's settings lending `LIMIT` over RLQS on `port` (0: one the kernel picks).
fn rlqs_settings(port: u16) -> String {
    format!("envoy_rlqs_listen = \"127.0.0.1:{port}\"\nenvoy_rlqs_limits = [\"{LIMIT}\"]\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_enforces_token_buckets_lent_from_the_lease_and_denies_once_they_expire() {
    let envoy_bin = envoy_binary().expect("an Envoy is needed");
    let nats = NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap();
    let url = nats.url();
    // Pod leases must outlast an assignment (its TTL and the delivery margin): 5 s here.
    let (_c, _m) = control_plane_with(&url, &[(LIMIT, 20, 10)], 10_000).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut agent = AgentProcess::start_with(&url, "bkk", &rlqs_settings(0)).await;
    let rlqs_port = agent.envoy_port();
    agent.wait_until_ready(&http, LIMIT).await;
    // The judge: at most R·1 s + B = 30 calls in any second; a call above is a 429 it counts.
    let upstream_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_port = upstream_listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(upstream_listener, leasehold_mock_upstream::router(30, 1_000)).await });
    let (mut envoy, ingress) =
        Envoy::start_on_free_port(&envoy_bin, |ingress| bootstrap(ingress, upstream_port, rlqs_port), WITHIN)
            .await
            .expect("envoy starts");
    let call = format!("http://127.0.0.1:{ingress}/call");

    // The first request creates Envoy's bucket and reports it; until the agent assigns a token
    // bucket, Envoy denies (no_assignment_behavior: DENY_ALL).
    let metrics_url = format!("{}/metrics", agent.http());
    wait::poll(WITHIN, Duration::from_millis(20), "Envoy admitting on an assignment", async || {
        match http.post(&call).send().await.map_err(|e| e.to_string())?.status().as_u16() {
            200 => Ok(()),
            s => {
                let m = http.get(&metrics_url).send().await.unwrap().text().await.unwrap();
                let rlqs: Vec<&str> = m.lines().filter(|l| l.starts_with("leasehold_agent_rlqs")).collect();
                let st = http.get(metrics_url.replace("/metrics", "/v1/status")).send().await.unwrap().text().await;
                Err(format!("status {s}; agent: {rlqs:?}; {st:?}"))
            }
        }
    })
    .await;
    // About 100 calls/s for 4 s, five times the limit.
    let l = load(&http, &call, 4).await;
    let stats = upstream_stats(&http, upstream_port).await;
    println!("RLQS, through Envoy in 4 s: {} admitted, {} answered 429; the upstream: {stats}", l.ok, l.limited);
    assert!(l.other.is_empty(), "statuses other than 200 and 429: {:?}; envoy: {:?}", l.other, envoy.log_tail());
    assert_eq!(stats["rejected"], 0, "the upstream refused a call: the limit was exceeded");
    // R·T + B = 90 at most (and the judge holds every second to 30); the agent lends 80% of
    // its lease's rate, at least the floor's 5/s.
    assert!((10..=90).contains(&l.ok), "{} admitted in 4 s at 20/s with a burst of 10", l.ok);
    assert!(l.limited > 2 * l.ok, "offered five times the limit, only {} of the calls were limited", l.limited);
    assert_eq!(l.retry_after.as_deref(), Some("1"), "Envoy's 429 carries the configured Retry-After");
    let sent = agent.metric(&http, "leasehold_agent_rlqs_token_buckets_sent_total").await;
    assert!(sent >= 4, "the agent renewed its assignment ({sent} token buckets sent)");
    // Envoy's usage reports (every 5 s) are the limit's demand (~100/s): the pod reports them.
    let status_url = format!("{}/v1/status?limit={LIMIT}", agent.http());
    wait::poll(WITHIN, Duration::from_millis(100), "Envoy's reported requests counted as demand", async || {
        let status: serde_json::Value = http.get(&status_url).send().await.unwrap().json().await.unwrap();
        let offered = status["totals"]["offered"].as_u64().unwrap_or(0);
        if offered > l.ok + l.limited / 2 {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await;
    // Nothing else in the agent takes from a lent lease.
    let taken = http.post(format!("{}/v1/acquire?limit={LIMIT}", agent.http())).send().await.unwrap();
    assert_eq!(taken.status(), 409, "the agent's own API refuses a lent limit");

    // The agent gone: Envoy keeps its bucket until the assignment's TTL (2 s), then denies all.
    drop(agent);
    let gone = Instant::now();
    let mut after_ttl = Load::default();
    let mut before_ttl = 0;
    // Paced at about 100 calls/s (a schedule, not a wait for anything).
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while gone.elapsed() < Duration::from_secs(4) {
        tick.tick().await;
        let r = http.post(&call).send().await.unwrap().status().as_u16();
        if gone.elapsed() > Duration::from_millis(2_600) {
            match r {
                200 => after_ttl.ok += 1,
                429 => after_ttl.limited += 1,
                s => after_ttl.other.push(s),
            }
        } else if r == 200 {
            before_ttl += 1;
        }
    }
    println!("agent gone: {before_ttl} admitted within the TTL, then {after_ttl:?}");
    assert_eq!(after_ttl.ok, 0, "Envoy admitted after its assignment expired");
    assert!(after_ttl.limited > 0 && after_ttl.other.is_empty(), "{after_ttl:?}");
    assert!(before_ttl <= 16 * 3 + 10, "{before_ttl} admitted on the last assignment");
    assert_eq!(upstream_stats(&http, upstream_port).await["rejected"], 0);

    // A new agent (a new stream, a new holder) and a restarted Envoy: admitting again.
    let mut agent = AgentProcess::start_with(&url, "bkk", &rlqs_settings(0)).await;
    agent.wait_until_ready(&http, LIMIT).await;
    envoy.kill();
    let rlqs_port = agent.envoy_port();
    let (envoy, ingress) =
        Envoy::start_on_free_port(&envoy_bin, |ingress| bootstrap(ingress, upstream_port, rlqs_port), WITHIN)
            .await
            .unwrap();
    let call = format!("http://127.0.0.1:{ingress}/call");
    wait::poll(WITHIN, Duration::from_millis(20), "a restarted Envoy admitting", async || {
        match http.post(&call).send().await.map_err(|e| e.to_string())?.status().as_u16() {
            200 => Ok(()),
            s => Err(format!("status {s}")),
        }
    })
    .await;
    assert_eq!(upstream_stats(&http, upstream_port).await["rejected"], 0, "{:?}", envoy.log_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_in_two_dcs_share_one_limit_lent_over_rlqs_and_a_restarted_envoy_is_served_again() {
    let envoy_bin = envoy_binary().expect("an Envoy is needed");
    let nats = NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap();
    let url = nats.url();
    // Pod leases of 5 s: they must outlast an assignment.
    let (_control_plane, upstream_port) = crate::envoy_two_dcs::two_dcs(&url, LIMIT, 10_000, 5_000).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let (mut agents, mut envoys, mut ingresses) = (Vec::new(), Vec::new(), Vec::new());
    for dc in ["bkk", "europe"] {
        let mut agent = AgentProcess::start_with(&url, dc, &rlqs_settings(0)).await;
        let rlqs_port = agent.envoy_port();
        agent.wait_until_ready(&http, LIMIT).await;
        let (envoy, ingress) =
            Envoy::start_on_free_port(&envoy_bin, |ingress| bootstrap(ingress, upstream_port, rlqs_port), WITHIN)
                .await
                .unwrap();
        envoys.push((envoy, rlqs_port));
        agents.push(agent);
        ingresses.push(ingress);
    }

    // BKK asks for 100/s, Europe for 10/s, for 6 s at once.
    let six_s = Duration::from_secs(6);
    let paced = |ingress: u16, every_ms: u64| {
        let load = crate::envoy_two_dcs::load(http.clone(), ingress, Duration::from_millis(every_ms), six_s);
        tokio::spawn(async move {
            let (ok, limited, other) = load.await;
            Load { ok, limited, other, retry_after: None }
        })
    };
    let (bkk, europe) = (paced(ingresses[0], 10), paced(ingresses[1], 100));
    let (bkk, europe) = (bkk.await.unwrap(), europe.await.unwrap());
    let stats = upstream_stats(&http, upstream_port).await;
    println!("RLQS in 6 s: BKK {bkk:?}; Europe {europe:?}; upstream {stats}");
    assert!(bkk.other.is_empty() && europe.other.is_empty(), "other statuses: {bkk:?} {europe:?}");
    assert_eq!(stats["rejected"], 0, "the two DCs together exceeded the limit");
    assert_eq!(stats["admitted"], bkk.ok + europe.ok);
    // BKK gets more than its floor could give (80% of 5/s lent: at most 24 and a burst in 6 s),
    // while Europe is served too.
    assert!(bkk.ok > 40, "BKK admitted only {} in 6 s: the limit did not follow its demand", bkk.ok);
    assert!(europe.ok > 0 && bkk.limited > 0, "Europe {europe:?}, BKK {bkk:?}");

    // BKK's Envoy restarted (a new stream, its buckets gone): served again, still within the limit.
    let (mut envoy, rlqs_port) = envoys.remove(0);
    envoy.kill();
    let (_envoy, ingress) =
        Envoy::start_on_free_port(&envoy_bin, |ingress| bootstrap(ingress, upstream_port, rlqs_port), WITHIN)
            .await
            .unwrap();
    let call = format!("http://127.0.0.1:{ingress}/call");
    wait::poll(WITHIN, Duration::from_millis(20), "BKK's restarted Envoy served again", async || {
        match http.post(&call).send().await.map_err(|e| e.to_string())?.status().as_u16() {
            200 => Ok(()),
            s => Err(format!("status {s}")),
        }
    })
    .await;
    assert_eq!(upstream_stats(&http, upstream_port).await["rejected"], 0);
}
