//! `/readyz` of every service against a real nats-server: the coordinator leads or follows with a
//! fresh view, the DC manager leads with a valid DC lease (not while its limit runs on the floor),
//! the agent holds a lease for its default limit and is not draining; and each says why.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::support::one_dc::{self, free_addr};
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::quota::Quota;
use leasehold_nats::connect::connect_until;
use leasehold_nats_harness::{binaries, NatsServer};
use std::time::{Duration, Instant};

const LEADER_TTL_MS: u64 = 1_000;

/// `/readyz` of `addr`: the status code and the JSON body (`None`: no answer).
async fn readyz(http: &reqwest::Client, addr: &str) -> Option<(u16, serde_json::Value)> {
    let r = http.get(format!("http://{addr}/readyz")).send().await.ok()?;
    let code = r.status().as_u16();
    Some((code, r.json().await.ok()?))
}

/// Poll `/readyz` of `addr` (bounded) until `f` holds for its answer; that answer.
async fn until(
    http: &reqwest::Client,
    addr: &str,
    within: Duration,
    what: &str,
    f: impl Fn(u16, &serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    let mut last = None;
    // Readiness also turns on time alone (a view grows stale), so no event announces every
    // change: ask at a steady cadence until the deadline.
    let mut cadence = tokio::time::interval(Duration::from_millis(50));
    loop {
        cadence.tick().await;
        if let Some((code, body)) = readyz(http, addr).await {
            if f(code, &body) {
                return body;
            }
            last = Some((code, body));
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}; last answer {last:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_says_when_it_is_ready_and_why_not() {
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let client = || connect_until(&url, "t", Instant::now() + Duration::from_secs(10));
    let (coord_a, coord_b, dc_addr) = (free_addr(), free_addr(), free_addr());
    let mut limit = LimitConfig::new("api", Quota::per_s(100, 10), &[("bkk", Quota::per_s(10, 2))]);
    limit.renew_interval_ms = 200;
    limit.dc_ttl_ms = 2_000;
    let coordinator = |id: &str, addr: &str| leasehold_coordinator::settings::Settings {
        nats_url: url.clone(),
        id: Some(id.into()),
        leader_ttl_ms: LEADER_TTL_MS,
        http_listen: Some(addr.into()),
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
        ..Default::default()
    };
    let a = leasehold_coordinator::spawn(client().await.unwrap(), coordinator("coord-a", &coord_a));
    let b = leasehold_coordinator::spawn(client().await.unwrap(), coordinator("coord-b", &coord_b));
    let _m = leasehold_dc_manager::spawn(client().await.unwrap(), one_dc::dc_manager(&url, LEADER_TTL_MS, &dc_addr));
    let pod = leasehold_pod::Pod::start(client().await.unwrap(), &one_dc::pod());
    let pod_l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pod_addr = pod_l.local_addr().unwrap().to_string();
    let pod_app = leasehold_pod::http::router(pod.clone());
    tokio::spawn(async move { axum::serve(pod_l, pod_app).await });
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();

    // Everyone ready: one coordinator leads, the other follows; the DC manager leads with a DC
    // lease; the agent holds a lease for its default limit.
    let ten = Duration::from_secs(10);
    let pod_ready = until(&http, &pod_addr, ten, "the agent holds a lease", |c, _| c == 200).await;
    assert_eq!(pod_ready["role"], "agent");
    assert!(pod_ready["reason"].as_str().unwrap().contains("api"), "{pod_ready}");
    let dc_ready = until(&http, &dc_addr, ten, "the DC manager leads with a DC lease", |c, _| c == 200).await;
    assert_eq!(dc_ready["role"], "leader", "{dc_ready}");
    let roles = [
        until(&http, &coord_a, ten, "a ready", |c, _| c == 200).await["role"].clone(),
        until(&http, &coord_b, ten, "b ready", |c, _| c == 200).await["role"].clone(),
    ];
    assert!(roles.contains(&"leader".into()) && roles.contains(&"standby".into()), "{roles:?}");

    // Both coordinators gone (their HTTP still answers from the last status, as a stuck process
    // would): each stops being ready once its view of the leader key is stale, and the DC
    // manager once its DC lease has ended (its pods run on the floor).
    a.crash();
    b.crash();
    let stale = Duration::from_millis(2 * LEADER_TTL_MS + 3_000);
    for addr in [&coord_a, &coord_b] {
        let body = until(&http, addr, stale, "a stopped coordinator is not ready", |c, _| c == 503).await;
        assert!(body["reason"].as_str().unwrap().contains("leader key"), "{body}");
    }
    let floor = until(&http, &dc_addr, Duration::from_secs(6), "the DC manager on its floor", |c, _| c == 503).await;
    assert!(floor["reason"].as_str().unwrap().contains("hold no valid DC lease"), "{floor}");

    // A draining agent is not ready at once, whatever its lease.
    let drain = tokio::spawn({
        let pod = pod.clone();
        async move { pod.drain().await }
    });
    let body = until(&http, &pod_addr, Duration::from_secs(5), "the agent drains", |c, _| c == 503).await;
    assert!(body["reason"].as_str().unwrap().contains("draining"), "{body}");
    let _ = drain.await;

    // NATS stopped: the DC manager can renew nothing; once its term may not act and its view of
    // the key is stale, it says so.
    assert!(server.pause(), "the nats-server pauses");
    let body =
        until(&http, &dc_addr, stale, "the DC manager without NATS", |c, b| c == 503 && b["role"] == "standby").await;
    assert!(body["reason"].as_str().unwrap().contains("leader key"), "{body}");
    server.resume();
}

/// The per-key limiter answers `/readyz` like every service: ready once each shard has an
/// owner in its cluster, not ready (and why) from SIGTERM while it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_instance_is_ready_once_its_shards_have_owners_and_not_while_it_drains() {
    use crate::support::keys_instances::{start_with, tiers_file, wait_exit};
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let http = reqwest::Client::new();
    let mut keys = start_with(&server.url(), "k1", &tiers_file(5), "interval:100", &["--drain-ms", "3000"]);
    let addr = keys.base.trim_start_matches("http://").to_string();
    let ready =
        until(&http, &addr, Duration::from_secs(10), "keys ready", |code, body| code == 200 && body["ready"] == true)
            .await;
    assert_eq!(ready["role"], "keys", "{ready}");
    assert!(ready["reason"].as_str().unwrap().contains("shards has an owner"), "{ready}");

    crate::support::keys_instances::sigterm(&keys);
    let draining = until(&http, &addr, Duration::from_secs(2), "keys not ready while draining", |code, body| {
        code == 503 && body["ready"] == false
    })
    .await;
    assert!(draining["reason"].as_str().unwrap().contains("stopping"), "{draining}");
    let exit = wait_exit(&mut keys.child, Duration::from_secs(10));
    assert!(exit.success(), "{exit:?}: {}", keys.log_tail(5));
}
