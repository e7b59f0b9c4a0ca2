//! Two Envoys in two DCs share one global limit through the agent beside each (real Envoy, real
//! `leasehold-agent` processes, a coordinator and a DC manager per DC on a real nats-server), the
//! strict upstream judging them together; then one DC's agent is killed and started again.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::agent_process::AgentProcess;
use crate::envoy_rls::{bootstrap, LIMIT, WITHIN};
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_nats_harness::envoy::{envoy_binary, Envoy};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};

/// Calls `POST /call` through Envoy on `ingress` every `every` for `for_how_long`: (200s, 429s,
/// other statuses).
pub(crate) async fn load(
    http: reqwest::Client,
    ingress: u16,
    every: Duration,
    for_how_long: Duration,
) -> (u64, u64, Vec<u16>) {
    let url = format!("http://127.0.0.1:{ingress}/call");
    let until = Instant::now() + for_how_long;
    let mut tick = tokio::time::interval(every);
    let (mut ok, mut limited, mut other) = (0, 0, Vec::new());
    while Instant::now() < until {
        tick.tick().await;
        match http.post(&url).send().await.map(|r| r.status().as_u16()) {
            Ok(200) => ok += 1,
            Ok(429) => limited += 1,
            Ok(s) => other.push(s),
            Err(_) => other.push(0),
        }
    }
    (ok, limited, other)
}

/// The services of a two-DC test, running while held.
pub(crate) type TwoDcs = (leasehold_coordinator::Handle, [leasehold_dc_manager::Handle; 2]);

/// `limit` with R = 40/s, B = 20 and each DC's floor 5/s (DC leases of `dc_ttl_ms`), a
/// coordinator, a DC manager for BKK and for Europe (pod leases of `pod_ttl_ms`), and the judge of
/// both DCs together on its port: at most R·1 s + B = 60 calls in any second.
pub(crate) async fn two_dcs(url: &str, limit: &str, dc_ttl_ms: u64, pod_ttl_ms: u64) -> (TwoDcs, u16) {
    let floors = [("bkk", Quota::per_s(5, 0)), ("europe", Quota::per_s(5, 0))];
    let mut limit = LimitConfig::new(limit, Quota::per_s(40, 20), &floors);
    limit.renew_interval_ms = 200;
    limit.dc_ttl_ms = dc_ttl_ms;
    let coordinator = crate::many_limits::coordinator(url, vec![LimitDef::from_config(&limit)]).await;
    let managers = [
        crate::many_limits::dc_manager_with(url, "bkk", pod_ttl_ms).await,
        crate::many_limits::dc_manager_with(url, "europe", pod_ttl_ms).await,
    ];
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    tokio::spawn(leasehold_mock_upstream::serve_on(upstream, 60, 1_000));
    ((coordinator, managers), upstream_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_in_two_dcs_share_one_limit_by_demand_and_a_restarted_agent_serves_again() {
    let envoy_bin = envoy_binary().expect("an Envoy is needed");
    let nats = NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap();
    let url = nats.url();
    let (_control_plane, upstream_port) = two_dcs(&url, LIMIT, 2_000, 1_000).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let (mut agents, mut envoys, mut ingresses) = (Vec::new(), Vec::new(), Vec::new());
    for dc in ["bkk", "europe"] {
        let mut agent = AgentProcess::start(&url, dc, 0).await;
        let rls_port = agent.envoy_port();
        agent.wait_until_ready(&http, LIMIT).await;
        let (envoy, ingress) =
            Envoy::start_on_free_port(&envoy_bin, |ingress| bootstrap(ingress, upstream_port, rls_port), WITHIN)
                .await
                .unwrap();
        envoys.push(envoy);
        agents.push((agent, rls_port));
        ingresses.push(ingress);
    }

    // BKK asks for 100/s, Europe for 10/s, for 4 s at once.
    let four_s = Duration::from_secs(4);
    let bkk = tokio::spawn(load(http.clone(), ingresses[0], Duration::from_millis(10), four_s));
    let europe = tokio::spawn(load(http.clone(), ingresses[1], Duration::from_millis(100), four_s));
    let ((bkk_ok, bkk_429, bkk_other), (eu_ok, eu_429, eu_other)) = (bkk.await.unwrap(), europe.await.unwrap());
    let stats: serde_json::Value =
        http.get(format!("http://127.0.0.1:{upstream_port}/stats")).send().await.unwrap().json().await.unwrap();
    println!(
        "in 4 s: BKK {bkk_ok} admitted, {bkk_429} limited; Europe {eu_ok} admitted, {eu_429} limited; upstream {stats}"
    );
    assert!(bkk_other.is_empty() && eu_other.is_empty(), "other statuses: {bkk_other:?} {eu_other:?}");
    assert_eq!(stats["rejected"], 0, "the two DCs together exceeded the limit");
    assert_eq!(stats["admitted"], bkk_ok + eu_ok);
    // The share follows demand: BKK gets more than its floor (5/s and a token: at most 21 in 4 s)
    // could give, while Europe is served too.
    assert!(bkk_ok > 40, "BKK admitted only {bkk_ok} in 4 s: the limit did not follow its demand");
    assert!(eu_ok > 0 && bkk_429 > 0, "Europe {eu_ok} admitted, BKK {bkk_429} limited");

    // BKK's agent killed: its Envoy denies (500); started again on the same port, it serves again.
    let (agent, rls_port) = agents.remove(0);
    drop(agent);
    let call = format!("http://127.0.0.1:{}/call", ingresses[0]);
    assert_eq!(http.post(&call).send().await.unwrap().status(), 500, "BKK's agent is gone");
    // The port Envoy knows: free since the agent was killed, it could be taken in the moment
    // before the new agent binds it (a start and a NATS connect), the one race left here.
    let mut agent = AgentProcess::start(&url, "bkk", rls_port).await;
    agent.wait_until_ready(&http, LIMIT).await;
    wait::poll(WITHIN, Duration::from_millis(100), "BKK's Envoy served again", async || {
        match http.post(&call).send().await.unwrap().status().as_u16() {
            200 => Ok(()),
            status => Err(format!("status {status}")),
        }
    })
    .await;
    let after: serde_json::Value =
        http.get(format!("http://127.0.0.1:{upstream_port}/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(after["rejected"], 0, "{after}");
}
