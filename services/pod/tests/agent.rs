//! The agent's HTTP API against a real nats-server, coordinator and DC manager: permits, 429 with
//! `Retry-After` and the IETF RateLimit headers, and 400s that change nothing.

use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::DcManagerConfig;
use leasehold_core::quota::Quota;
use leasehold_dc_manager::settings::Settings as DcSettings;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_pod::{Pod, PodSettings};
use std::time::Duration;

async fn client(url: &str) -> async_nats::Client {
    wait::client(url, "test").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_denials_and_bad_input_over_http() {
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let mut limit = LimitConfig::new("api", Quota::per_s(10, 5), &[("bkk", Quota::per_s(2, 0))]);
    limit.renew_interval_ms = 200;
    limit.dc_ttl_ms = 2_000;
    let _c = crate::many_limits::coordinator(&url, vec![leasehold_core::limits::LimitDef::from_config(&limit)]).await;
    let mut m = DcManagerConfig::new("api", "bkk", "");
    m.renew_interval_ms = 200;
    let dc = DcSettings {
        nats_url: url.clone(),
        leader_ttl_ms: 1_000,
        report_interval_ms: 100,
        manager: m,
        ..DcSettings::default()
    };
    let _m = leasehold_dc_manager::spawn(client(&url).await, dc);
    let settings =
        PodSettings { limit: Some("api".into()), dc: "bkk".into(), report_interval_ms: 100, ..PodSettings::default() };
    let pod = Pod::start(client(&url).await, &settings);
    let api = pod.limiter("api").unwrap();
    let mut st = api.status();
    // Wait for a lease with a rate (the first may be empty: floors are unusable at first).
    let has_lease = tokio::time::timeout(
        Duration::from_secs(15),
        st.wait_for(|s| s.lease.as_ref().is_some_and(|l| l.quota.rate_milli_per_s > 0)),
    )
    .await
    .map(|r| r.is_ok()); // never hold the watch's read guard: it would block the pod's driver
    assert_eq!(has_lease, Ok(true), "no lease within 15 s");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = leasehold_pod::http::router(pod.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let base = format!("http://{addr}/v1/acquire");

    // A permit (waiting up to 2 s for the first token of a fresh bucket).
    let ok = http.post(format!("{base}?max_wait_ms=2000")).send().await.unwrap();
    let status = ok.status();
    let headers = ok.headers().clone();
    assert_eq!(status, 200, "{:?} {headers:?} {:?}", ok.text().await, api.status().borrow());
    assert!(headers["ratelimit-policy"].to_str().unwrap().starts_with("\"lease\";q="));
    assert!(headers.contains_key("ratelimit"));

    // Bad input: 400 problem, nothing counted.
    let before = api.totals().offered + api.take_interval().offered;
    let bad_limits = ["limit=a.b", "limit=*", "limit=%3E", "limit=a%20b", "limit="];
    let bad = ["cost=abc", "cost=-1", "cost=0", "priority=urgent", "max_wait_ms=99999999", "cost=99999999999"];
    for q in bad.into_iter().chain(bad_limits) {
        let r = http.post(format!("{base}?{q}")).send().await.unwrap();
        assert_eq!(r.status(), 400, "{q}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{q}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{q}: {body}");
    }
    assert_eq!(api.totals().offered + api.take_interval().offered, before, "a bad request was counted");
    assert_eq!(pod.limiters().len(), 1, "a bad limit name was served");

    // Upstream answers: a 429 is counted apart from errors; a status that is no failure is a 400.
    let error_url = format!("http://{addr}/v1/upstream-error");
    let cases = [("?status=429", 204), ("?status=503", 204), ("", 204), ("?status=200", 400), ("?status=abc", 400)];
    for (q, want) in cases.into_iter().chain([("?limit=a.b&status=429", 400), ("?limit=a*", 400)]) {
        let r = http.post(format!("{error_url}{q}")).send().await.unwrap();
        assert_eq!(r.status(), want, "{q}");
    }
    api.take_interval(); // fold what the driver has not taken yet into the totals
    let totals = api.totals();
    assert_eq!((totals.upstream_429, totals.upstream_errors), (1, 2), "{totals:?}");

    // Spend the bucket: a 429 with Retry-After and the RateLimit headers.
    let mut denied = None;
    for _ in 0..100 {
        let r = http.post(&base).send().await.unwrap();
        if r.status() == 429 {
            denied = Some(r);
            break;
        }
    }
    let r = denied.expect("never denied after 100 requests at a 10/s limit");
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1);
    assert!(r.headers()["ratelimit"].to_str().unwrap().contains(";r=0"));
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}
