//! The per-key limiter over real HTTP and a real nats-server: exact counts, 429 with Retry-After
//! and the RateLimit headers, reads that record nothing, bad input that changes nothing, tier
//! changes without restart (one standalone instance; `cluster.rs` covers NATS).

use leasehold_keys::{KeyAnswer, KeyLimiter};
use leasehold_shared::keys::{LimitSpec, Tiers};
use std::collections::BTreeMap;
use std::time::Duration;

fn tiers(free_limit: u64) -> Tiers {
    Tiers {
        default_tier: "free".into(),
        tiers: BTreeMap::from([
            ("free".to_string(), LimitSpec::sliding(free_limit, 60_000)),
            ("pro".to_string(), LimitSpec::sliding(100, 60_000)),
        ]),
        overrides: BTreeMap::new(),
        assignments: BTreeMap::new(),
    }
}

async fn serve(limiter: KeyLimiter) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = leasehold_keys::http::router(limiter);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_counts_exactly_and_answers_429_with_headers() {
    let base = serve(KeyLimiter::standalone(tiers(3), 1_000).unwrap()).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    for expected_remaining in [2, 1, 0] {
        let r = http.post(format!("{base}/v1/keys/user-1")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["ratelimit-policy"], "\"free\";q=3;w=60");
        assert!(r.headers()["ratelimit"].to_str().unwrap().starts_with(&format!("\"free\";r={expected_remaining};t=")));
        let a: KeyAnswer = r.json().await.unwrap();
        assert!(a.allowed && a.remaining == expected_remaining);
    }
    let r = http.post(format!("{base}/v1/keys/user-1")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry), "retry-after {retry}");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["allowed"], false);
    assert!(body["retry_after_ms"].as_u64().unwrap() <= 60_000);
    // Another key and another tier are independent.
    assert_eq!(http.post(format!("{base}/v1/keys/user-2")).send().await.unwrap().status(), 200);
    let pro = http.post(format!("{base}/v1/keys/user-1?tier=pro")).send().await.unwrap();
    assert_eq!(pro.status(), 200, "user-1 as pro has its own limit");
    // A read records nothing.
    for _ in 0..3 {
        let a: KeyAnswer = http.get(format!("{base}/v1/keys/user-2")).send().await.unwrap().json().await.unwrap();
        assert_eq!((a.count, a.remaining), (Some(1), 2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_400_and_changes_nothing() {
    let base = serve(KeyLimiter::standalone(tiers(3), 1_000).unwrap()).await;
    let http = reqwest::Client::new();
    let long = "k".repeat(300);
    let cases: Vec<(reqwest::RequestBuilder, &str)> = vec![
        (http.post(format!("{base}/v1/keys/u?cost=abc")), "cost abc"),
        (http.post(format!("{base}/v1/keys/u?cost=-1")), "negative cost"),
        (http.post(format!("{base}/v1/keys/u?cost=0")), "zero cost"),
        (http.post(format!("{base}/v1/keys/u?cost=4")), "cost above the limit"),
        (http.post(format!("{base}/v1/keys/u?cost=99999999999999999999")), "huge cost"),
        (http.post(format!("{base}/v1/keys/u?tier=platinum")), "unknown tier"),
        (http.post(format!("{base}/v1/keys/{long}")), "oversized key"),
        (
            http.post(format!("{base}/v1/check")).header("content-type", "application/json").body("{\"key\":"),
            "malformed JSON",
        ),
        (
            http.post(format!("{base}/v1/check")).header("content-type", "application/json").body("{\"cost\":1}"),
            "missing key",
        ),
        (
            http.post(format!("{base}/v1/check"))
                .header("content-type", "application/json")
                .body("{\"key\":\"u\",\"cost\":-3}"),
            "negative cost in JSON",
        ),
    ];
    for (req, what) in cases {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 400, "{what}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{what}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{what}: {body}");
    }
    let a: KeyAnswer = http.get(format!("{base}/v1/keys/u")).send().await.unwrap().json().await.unwrap();
    assert_eq!(a.count, Some(0), "bad requests were counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_change_takes_effect_without_restart() {
    let base = serve(KeyLimiter::standalone(tiers(1), 1_000).unwrap()).await;
    let http = reqwest::Client::new();
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429);
    let mut bad = tiers(2);
    bad.tiers.insert("broken".into(), LimitSpec::sliding(0, 1_000));
    assert_eq!(http.put(format!("{base}/v1/tiers")).json(&bad).send().await.unwrap().status(), 400);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429, "a refused change applied");
    assert_eq!(http.put(format!("{base}/v1/tiers")).json(&tiers(2)).send().await.unwrap().status(), 204);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200, "the raised limit applies");
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429);
}

/// Every error is an `application/problem+json` 400 or 404, and a misspelt query parameter is
/// refused rather than silently ignored (`?cots=5&teir=pro` would otherwise record cost 1 under
/// the default tier).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misspelt_parameters_bad_paths_and_unknown_routes_are_problems() {
    let base = serve(KeyLimiter::standalone(tiers(3), 1_000).unwrap()).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let cases = [
        (reqwest::Method::POST, format!("{base}/v1/keys/u?cots=5&teir=pro"), 400),
        (reqwest::Method::GET, format!("{base}/v1/keys/u?teir=pro"), 400),
        (reqwest::Method::POST, format!("{base}/v1/keys/%FF"), 400),
        (reqwest::Method::POST, format!("{base}/v1/keys/"), 404),
        (reqwest::Method::GET, format!("{base}/v1/nothing-here"), 404),
    ];
    for (method, url, status) in cases {
        let r = http.request(method.clone(), &url).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {url}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{method} {url}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["status"], status, "{method} {url}: {body}");
    }
    // Nothing was recorded by any of them.
    let a: KeyAnswer = http.get(format!("{base}/v1/keys/u")).send().await.unwrap().json().await.unwrap();
    assert_eq!(a.count, Some(0));
}
