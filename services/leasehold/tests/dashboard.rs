//! `leasehold dashboard` against a real nats-server and real services: its snapshot shows the
//! leader, the limit's Σ against R, the DC's allocation and the pod's lease; a coordinator
//! takeover shows as an event with the fence raised; the page and the event stream are served.
//! (The page itself is driven in a real browser by scripts/check-live-view.)
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::support::one_dc;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::quota::Quota;
use leasehold_nats::connect::connect_until;
use leasehold_nats_harness::{binaries, NatsServer};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Poll `/api/state` (bounded) until `f` holds; that state.
async fn state_until(
    http: &reqwest::Client,
    base: &str,
    within: Duration,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    let mut last = Value::Null;
    // A snapshot is made once a second whatever happens, so ask at that cadence.
    let mut cadence = tokio::time::interval(Duration::from_millis(250));
    loop {
        cadence.tick().await;
        if let Ok(r) = http.get(format!("{base}/api/state")).send().await {
            if let Ok(v) = r.json::<Value>().await {
                if f(&v) {
                    return v;
                }
                last = v;
            }
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}; last state {last}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_shows_leaders_leases_and_pods_and_a_takeover() {
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let client = || connect_until(&url, "t", Instant::now() + Duration::from_secs(10));
    let mut limit = LimitConfig::new("api", Quota::per_s(100, 10), &[("bkk", Quota::per_s(10, 2))]);
    limit.renew_interval_ms = 200;
    limit.dc_ttl_ms = 2_000;
    let coordinator = |id: &str| leasehold_coordinator::settings::Settings {
        nats_url: url.clone(),
        id: Some(id.into()),
        leader_ttl_ms: 1_000,
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
        ..Default::default()
    };
    let a = leasehold_coordinator::spawn(client().await.unwrap(), coordinator("coord-a"));
    let b = leasehold_coordinator::spawn(client().await.unwrap(), coordinator("coord-b"));
    let _m =
        leasehold_dc_manager::spawn(client().await.unwrap(), one_dc::dc_manager(&url, 1_000, &one_dc::free_addr()));
    let _pod = leasehold_pod::Pod::start(client().await.unwrap(), &one_dc::pod());

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["dashboard", "--listen", "127.0.0.1:0", "--nats-url", &url])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the leasehold binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.expect("it prints its address");
    let line = line.unwrap().expect("a line");
    let base = line.strip_prefix("dashboard listening on ").expect("the address line").to_string();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();

    let page = http.get(&base).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("<title>Leasehold: live leases</title>") && page.contains("api/events"));

    let ten = Duration::from_secs(10);
    let seen = state_until(&http, &base, ten, "the DC's lease and the pod's renewals", |s| {
        let bkk = &s["limits"][0]["dcs"][0];
        let pod = &s["pods"]["bkk"][0]["limits"][0];
        bkk["dc"] == "bkk"
            && bkk["allocated_per_s"].as_f64() > Some(10.0)
            && bkk["leader"].is_string()
            && pod["since_renewal_s"].as_f64().is_some_and(|t| t < 1.0)
            && s["coordinator_leader"].is_string()
    })
    .await;
    let card = &seen["limits"][0];
    assert_eq!((card["name"].as_str(), card["rate_per_s"].as_f64()), (Some("api"), Some(100.0)));
    assert!(card["outstanding_rate_per_s"].as_f64().unwrap() <= 100.0, "Σ within R: {card}");
    assert_eq!(seen["pods_total"]["bkk"], 1);
    let epoch = card["epoch"].as_u64().unwrap();
    let leader = seen["coordinator_leader"].as_str().unwrap().to_string();

    // The leader crashes: the standby takes over through the leader key and raises the fence.
    let (gone, next) = if leader == "coord-a" { (a, "coord-b") } else { (b, "coord-a") };
    gone.crash();
    let after = state_until(&http, &base, ten, "the takeover", |s| {
        s["coordinator_leader"] == next && s["limits"][0]["epoch"].as_u64() > Some(epoch)
    })
    .await;
    let events: Vec<&str> = after["events"].as_array().unwrap().iter().map(|e| e["text"].as_str().unwrap()).collect();
    let takeover = format!("coordinator takeover: {next} leads (was {leader})");
    assert!(events.contains(&takeover.as_str()), "{events:?}");
    assert!(events.iter().any(|e| e.starts_with("ledger fence raised to epoch")), "{events:?}");
    assert!(events.iter().any(|e| e.starts_with(&format!("limit api: ledger written by {next}"))), "{events:?}");

    // The event stream sends snapshots as they are made.
    let mut sse = http.get(format!("{base}/api/events")).send().await.unwrap();
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let chunk = tokio::time::timeout(Duration::from_secs(5), sse.chunk()).await.expect("a snapshot within 5 s");
    let chunk = String::from_utf8(chunk.unwrap().unwrap().to_vec()).unwrap();
    assert!(chunk.starts_with("event: snapshot\ndata: {"), "{chunk}");
}

#[test]
fn bad_settings_are_one_line_and_exit_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["dashboard", "--history-s", "0"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim(), "leasehold: --history-s must be within 1..=3600, got 0");
}
