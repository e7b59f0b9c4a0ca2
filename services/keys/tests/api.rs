//! The per-key limiter over real HTTP and a real nats-server: exact counts, 429 with Retry-After
//! and the RateLimit headers, reads that record nothing, bad input that changes nothing, tier
//! changes without restart (one standalone instance; `cluster.rs` covers NATS).

use leasehold_keys::access::{AdminToken, Trust};
use leasehold_keys::{KeyAnswer, KeyLimiter};
use leasehold_per_key::{LimitSpec, Tiers};
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

const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The API as deployed by default: trusting callers with nothing.
async fn serve(limiter: KeyLimiter) -> String {
    serve_with(limiter, Trust::default()).await
}

/// Callers may name their tier; the admin token is [`ADMIN_TOKEN`].
fn trusting() -> Trust {
    Trust { caller_tier: true, tier_header: None, admin_token: Some(admin_token()) }
}

fn admin_token() -> AdminToken {
    AdminToken::new(ADMIN_TOKEN.into()).unwrap()
}

async fn serve_with(limiter: KeyLimiter, trust: Trust) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = leasehold_keys::http::router_with(limiter, trust, Default::default());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_counts_exactly_and_answers_429_with_headers() {
    let base = serve_with(KeyLimiter::standalone(tiers(3), 1_000).unwrap(), trusting()).await;
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
    let base = serve_with(KeyLimiter::standalone(tiers(3), 1_000).unwrap(), trusting()).await;
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
    let base = serve_with(KeyLimiter::standalone(tiers(1), 1_000).unwrap(), trusting()).await;
    let http = reqwest::Client::new();
    let put = |doc: &Tiers| http.put(format!("{base}/v1/tiers")).bearer_auth(ADMIN_TOKEN).json(doc).send();
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429);
    let mut bad = tiers(2);
    bad.tiers.insert("broken".into(), LimitSpec::sliding(0, 1_000));
    let r = put(&bad).await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["detail"], "invalid limit: broken: limit (0) and window_ms (1000) must be positive");
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429, "a refused change applied");
    assert_eq!(put(&tiers(2)).await.unwrap().status(), 204);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200, "the raised limit applies");
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429);
}

/// Every error is an `application/problem+json` 400, 404 or 405, and a misspelt query parameter is
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
        (reqwest::Method::DELETE, format!("{base}/v1/tiers"), 405),
        (reqwest::Method::GET, format!("{base}/v1/check"), 405),
    ];
    for (method, url, status) in cases {
        let r = http.request(method.clone(), &url).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {url}");
        assert_eq!(r.headers()["content-type"], "application/problem+json", "{method} {url}");
        if status == 405 {
            assert!(r.headers().contains_key("allow"), "{method} {url}: no Allow header");
        }
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["status"], status, "{method} {url}: {body}");
    }
    // Nothing was recorded by any of them.
    let a: KeyAnswer = http.get(format!("{base}/v1/keys/u")).send().await.unwrap().json().await.unwrap();
    assert_eq!(a.count, Some(0));
}

/// By default the operator decides a key's tier (assignments, overrides, the default tier): a
/// caller naming one is refused, so `?tier=pro` can't buy a key the pro limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_cannot_pick_a_more_generous_tier_by_default() {
    let base = serve(KeyLimiter::standalone(tiers(3), 1_000).unwrap()).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let naming_a_tier = [
        http.post(format!("{base}/v1/keys/u?tier=pro")),
        http.post(format!("{base}/v1/check")).json(&serde_json::json!({"key": "u", "tier": "pro"})),
        http.get(format!("{base}/v1/keys/u?tier=pro")),
    ];
    for req in naming_a_tier {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 400);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["detail"].as_str().unwrap().contains("caller_tier = true"), "{body}");
    }
    // The key has the free limit (3), whatever the caller asks for.
    for _ in 0..3 {
        assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200);
    }
    assert_eq!(http.post(format!("{base}/v1/keys/u?tier=pro")).send().await.unwrap().status(), 400);
    let r = http.post(format!("{base}/v1/keys/u")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["ratelimit-policy"], "\"free\";q=3;w=60");
}

/// The tiers, the hot keys (they name keys) and changing the limits are the operator's: with no
/// admin token configured they are refused, never open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_are_refused_without_a_configured_token() {
    let base = serve(KeyLimiter::standalone(tiers(1), 1_000).unwrap()).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let admin = [
        http.put(format!("{base}/v1/tiers")).json(&tiers(5)),
        http.get(format!("{base}/v1/tiers")),
        http.get(format!("{base}/v1/hot")),
        http.put(format!("{base}/v1/tiers")).bearer_auth("anything").json(&tiers(5)),
    ];
    for req in admin {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 403);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = r.json().await.unwrap();
        assert!(body["detail"].as_str().unwrap().contains("admin_token"), "{body}");
    }
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429, "the limit was raised");
}

/// `POST /v1/keys/{key}` takes its parameters from the query: a body (`{"cost": 3}`) would be
/// ignored and the request recorded at cost 1, so it is refused and the JSON endpoint named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_on_the_query_endpoint_is_refused() {
    let base = serve(KeyLimiter::standalone(tiers(3), 1_000).unwrap()).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let r = http.post(format!("{base}/v1/keys/u")).json(&serde_json::json!({"cost": 3})).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("POST /v1/check"), "{body}");
    let a: KeyAnswer = http.get(format!("{base}/v1/keys/u")).send().await.unwrap().json().await.unwrap();
    assert_eq!(a.count, Some(0), "the request was recorded");
}

/// A gateway that authenticated the caller names its tier in the configured header; a tier the
/// caller names itself is still refused, and without the header the tiers document decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_comes_from_the_trusted_gateway_s_header() {
    let trust = Trust { tier_header: Some("x-leasehold-tier".parse().unwrap()), ..Trust::default() };
    let base = serve_with(KeyLimiter::standalone(tiers(3), 1_000).unwrap(), trust).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let as_pro = |url: String| http.post(url).header("x-leasehold-tier", "pro").send();
    let r = as_pro(format!("{base}/v1/keys/u")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], "\"pro\";q=100;w=60");
    let r = http
        .post(format!("{base}/v1/check"))
        .header("x-leasehold-tier", "pro")
        .json(&serde_json::json!({"key": "u"}))
        .send()
        .await
        .unwrap();
    let a: KeyAnswer = r.json().await.unwrap();
    assert_eq!((a.tier.as_str(), a.limit, a.remaining), ("pro", 100, 98));
    let a: KeyAnswer = http
        .get(format!("{base}/v1/keys/u"))
        .header("x-leasehold-tier", "pro")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((a.tier.as_str(), a.count), ("pro", Some(2)));
    // No header: the default tier. A tier in the request, with or without the header: refused.
    let r = http.post(format!("{base}/v1/keys/u")).send().await.unwrap();
    assert_eq!(r.headers()["ratelimit-policy"], "\"free\";q=3;w=60");
    let r = as_pro(format!("{base}/v1/keys/u?tier=pro")).await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("x-leasehold-tier header"), "{body}");
    // An unknown tier from the gateway is a 400 like any other.
    let r = http.post(format!("{base}/v1/keys/u")).header("x-leasehold-tier", "platinum").send().await.unwrap();
    assert_eq!(r.status(), 400);
    // A gateway that appends its header instead of replacing the client's: two values, refused
    // (taking the first would let the client's win).
    let r = http
        .post(format!("{base}/v1/keys/u"))
        .header("x-leasehold-tier", "pro")
        .header("x-leasehold-tier", "free")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("more than once"), "{body}");
}

/// `caller_tier = true`: every caller is trusted to name its tier, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_caller_tier_on_callers_name_their_tier() {
    let trust = Trust { caller_tier: true, ..Trust::default() };
    let base = serve_with(KeyLimiter::standalone(tiers(3), 1_000).unwrap(), trust).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let r = http.post(format!("{base}/v1/keys/u?tier=pro")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], "\"pro\";q=100;w=60");
    let body = serde_json::json!({"key": "u", "tier": "pro"});
    let a: KeyAnswer = http.post(format!("{base}/v1/check")).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!((a.tier.as_str(), a.remaining), ("pro", 98));
    // The operator's assignment still wins over the caller's word.
    let mut assigned = tiers(3);
    assigned.assignments.insert("v".into(), "free".into());
    let trust = Trust { caller_tier: true, ..Trust::default() };
    let base = serve_with(KeyLimiter::standalone(assigned, 1_000).unwrap(), trust).await;
    let a: KeyAnswer = http.post(format!("{base}/v1/keys/v?tier=pro")).send().await.unwrap().json().await.unwrap();
    assert_eq!((a.tier.as_str(), a.limit), ("free", 3));
}

/// With a token configured, the admin endpoints answer only to `Authorization: Bearer <token>`:
/// `401` with a `WWW-Authenticate: Bearer` challenge otherwise, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_need_the_admin_token() {
    let trust = Trust { admin_token: Some(admin_token()), ..Trust::default() };
    let base = serve_with(KeyLimiter::standalone(tiers(1), 1_000).unwrap(), trust).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let wrong_length = format!("{ADMIN_TOKEN}x");
    let wrong_byte = ADMIN_TOKEN.replace('0', "1");
    let unauthenticated = [
        (http.put(format!("{base}/v1/tiers")).json(&tiers(5)), "Bearer"),
        (
            http.put(format!("{base}/v1/tiers")).bearer_auth(&wrong_length).json(&tiers(5)),
            "Bearer error=\"invalid_token\"",
        ),
        (
            http.put(format!("{base}/v1/tiers")).bearer_auth(&wrong_byte).json(&tiers(5)),
            "Bearer error=\"invalid_token\"",
        ),
        (http.put(format!("{base}/v1/tiers")).basic_auth("admin", Some(ADMIN_TOKEN)).json(&tiers(5)), "Bearer"),
        (http.get(format!("{base}/v1/tiers")), "Bearer"),
        (http.get(format!("{base}/v1/hot")).bearer_auth("nope"), "Bearer error=\"invalid_token\""),
    ];
    for (req, challenge) in unauthenticated {
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], challenge);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        assert!(!r.text().await.unwrap().contains(ADMIN_TOKEN), "the token was echoed");
    }
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429, "the limit was raised");
    // With the token: read, change, and the change applies.
    let r = http.get(format!("{base}/v1/tiers")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(r.json::<Tiers>().await.unwrap(), tiers(1));
    let r = http.get(format!("{base}/v1/hot")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(r.json::<serde_json::Value>().await.unwrap(), serde_json::json!({"hot_keys": []}));
    let r = http.put(format!("{base}/v1/tiers")).bearer_auth(ADMIN_TOKEN).json(&tiers(5)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200, "the raised limit applies");
}

/// A tiers document with a field this build does not know (a misspelling) is refused with the
/// field named, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiers_document_with_an_unknown_field_is_refused() {
    let base = serve_with(KeyLimiter::standalone(tiers(1), 1_000).unwrap(), trusting()).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut doc = serde_json::to_value(tiers(5)).unwrap();
    doc["overides"] = serde_json::json!({"u": {"limit": 9, "window_ms": 60_000}});
    let r = http.put(format!("{base}/v1/tiers")).bearer_auth(ADMIN_TOKEN).json(&doc).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["detail"].as_str().unwrap().contains("unknown field `overides`"), "{body}");
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 200);
    assert_eq!(http.post(format!("{base}/v1/keys/u")).send().await.unwrap().status(), 429, "the document applied");
}
