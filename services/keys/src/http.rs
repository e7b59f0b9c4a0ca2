//! HTTP API of the per-key limiter.
//!
//! * `POST /v1/keys/{key}?cost=1` records a request: `200` with the answer, or `429`
//!   with `Retry-After` and an `application/problem+json` body carrying the same fields.
//! * `POST /v1/check` does the same from a JSON body `{"key": …, "cost": 1}`.
//! * `GET /v1/keys/{key}` reads the key's count and remaining, recording nothing.
//! * `GET`/`PUT /v1/tiers` reads or replaces the tiers and overrides (validated; effective at once).
//! * `GET /v1/shards`: each shard's owner (`host:port`), for clients that send a key to its owner.
//! * `GET /v1/hot`: the last hot-key report (keys above `--hot-key-rps` on this owner).
//! * `GET /metrics`, `GET /healthz` (`503` once the instance is stopping: see [`Draining`]),
//!   `GET /readyz` (`503` also while a shard has no owner).
//!
//! Who picks a key's tier (`?tier=`, `"tier"`, a gateway's header) and who may use the admin
//! endpoints (`/v1/tiers`, `/v1/hot`) is [`Trust`]'s decision ([`crate::access`]).
//!
//! Every answer carries `RateLimit-Policy: "<tier>";q=<N>;w=<W s>` and
//! `RateLimit: "<tier>";r=<remaining>;t=<reset s>`. Bad input is a `400` problem and changes
//! nothing; a full key table sheds with `429` instead of waiting.

use crate::access::Trust;
use crate::limiter::{CheckError, KeyAnswer, KeyCheck, KeyLimiter, TiersError};
use crate::routes::ShardRoutes;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_per_key::Tiers;
use leasehold_process::metrics::{self, NO_LABELS};
use leasehold_process::problem::{problem, Problem};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The handlers' state, shared: each request clones one pointer, not the limiter's parts.
type App = Arc<AppState>;

struct AppState {
    limiter: KeyLimiter,
    answers: Answers,
    draining: Draining,
    trust: Trust,
}

/// Turned on when the instance is stopping: `/healthz` answers 503 and every answer carries
/// `Connection: close`, so balancers and keep-alive clients move away before the listener closes.
#[derive(Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_on(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

async fn health(State(app): State<App>) -> Response {
    if app.draining.is_on() {
        return problem(StatusCode::SERVICE_UNAVAILABLE, "draining", "this instance is stopping".into());
    }
    "ok\n".into_response()
}

/// `/readyz`: `200` while this instance is not stopping and every shard has an answering owner
/// (this one, or a peer it forwards to); else `503` and why, as every service's `/readyz` does.
async fn ready(State(app): State<App>) -> Response {
    let routes = app.limiter.routes().get();
    let unowned = routes.owners.iter().filter(|o| o.is_none()).count();
    let reason = if app.draining.is_on() {
        Some("this instance is stopping".to_string())
    } else if routes.owners.is_empty() {
        Some("no shard routes yet: the instance has not joined its cluster".to_string())
    } else if unowned > 0 {
        Some(format!("{unowned} of {} shards have no owner yet", routes.owners.len()))
    } else {
        None
    };
    let (status, ready, reason) = match reason {
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, false, why),
        None => (StatusCode::OK, true, format!("every one of {} shards has an owner", routes.owners.len())),
    };
    (status, Json(serde_json::json!({ "ready": ready, "role": "keys", "reason": reason }))).into_response()
}

/// While draining, close each connection after its answer.
async fn close_when_draining(State(app): State<App>, req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    if app.draining.is_on() {
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The value of the trusted gateway's tier header ([`Trust::tier_header`]), if one is set and
/// the request has it.
struct GatewayTier(Vec<HeaderValue>);

impl FromRequestParts<App> for GatewayTier {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        let values = app.trust.tier_header.as_ref().map(|h| parts.headers.get_all(h).iter().cloned().collect());
        Ok(GatewayTier(values.unwrap_or_default()))
    }
}

/// Answers given, by kind (`leasehold_keys_<kind>_total`).
#[derive(Clone, Default)]
struct Answers {
    allowed: Counter,
    denied: Counter,
    shed: Counter,
    unavailable: Counter,
}

/// The answer counters, and the table's gauges read from the limiter at every scrape.
fn registry(answers: &Answers, limiter: KeyLimiter) -> Registry {
    let mut r = Registry::default();
    // The registry adds the `_total` suffix and a full stop to the help.
    r.register("leasehold_keys_allowed", "Requests allowed", answers.allowed.clone());
    r.register("leasehold_keys_denied", "Requests denied (over their limit)", answers.denied.clone());
    r.register("leasehold_keys_shed", "Requests shed (key table full)", answers.shed.clone());
    r.register(
        "leasehold_keys_unavailable",
        "Requests not answered (shard moving or not stored)",
        answers.unavailable.clone(),
    );
    r.register_collector(metrics::collector(move |m| {
        m.gauge("leasehold_keys_tracked", "Keys in this instance's table.", NO_LABELS, limiter.keys_tracked() as u64)?;
        m.gauge(
            "leasehold_keys_shards_served",
            "Shards this instance owns.",
            NO_LABELS,
            limiter.shards_served() as u64,
        )?;
        m.gauge("leasehold_keys_hot_keys", "Keys in the last hot-key report.", NO_LABELS, limiter.hot().len() as u64)
    }));
    r
}

/// `POST /v1/keys/{key}`'s parameters: strict, so a misspelt one is a 400, not a default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordQuery {
    cost: Option<String>,
    tier: Option<String>,
}

/// `GET /v1/keys/{key}`'s parameters.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadQuery {
    tier: Option<String>,
}

/// A request's path, query or `cost` that cannot be read: the 400 problem's detail.
#[derive(Debug, thiserror::Error)]
enum BadRequest {
    #[error("{}", .0.body_text())]
    Path(#[source] PathRejection),
    #[error("{}", .0.body_text())]
    Query(#[source] QueryRejection),
    #[error("cost must be a positive integer, got {given:?}")]
    Cost {
        given: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// The key from the path and the query, or why either cannot be read.
fn key_and_query<Q>(
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<Q>, QueryRejection>,
) -> Result<(String, Q), BadRequest> {
    let Path(key) = path.map_err(BadRequest::Path)?;
    let Query(q) = query.map_err(BadRequest::Query)?;
    Ok((key, q))
}

fn bad_request(detail: String) -> Response {
    problem(StatusCode::BAD_REQUEST, "invalid request", detail)
}

fn headers(a: &KeyAnswer) -> HeaderMap {
    let mut h = HeaderMap::new();
    let window_s = a.window_ms.div_ceil(1_000);
    let reset_s = a.reset_ms.div_ceil(1_000);
    let tier = a.tier.replace(['"', '\\'], "");
    if let Ok(v) = HeaderValue::from_str(&format!("\"{tier}\";q={};w={window_s}", a.limit)) {
        h.insert("ratelimit-policy", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{tier}\";r={};t={reset_s}", a.remaining)) {
        h.insert("ratelimit", v);
    }
    h
}

fn respond(app: &App, result: Result<KeyAnswer, CheckError>) -> Response {
    match result {
        Ok(a) if a.allowed => {
            app.answers.allowed.inc();
            (StatusCode::OK, headers(&a), Json(a)).into_response()
        }
        Ok(a) => {
            app.answers.denied.inc();
            let secs = a.retry_after_ms.unwrap_or(1_000).div_ceil(1_000).max(1);
            let detail = format!("key {:?} is over its limit of {} per {} ms", a.key, a.limit, a.window_ms);
            let mut r = Problem::new(StatusCode::TOO_MANY_REQUESTS, "rate limited", detail, &a).respond();
            r.headers_mut().extend(headers(&a));
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            r
        }
        Err(CheckError::Overloaded(detail)) => {
            app.answers.shed.inc();
            let mut r = problem(StatusCode::TOO_MANY_REQUESTS, "overloaded", detail);
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
            r
        }
        Err(CheckError::Unavailable(detail)) => {
            app.answers.unavailable.inc();
            let mut r = problem(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail);
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
            r
        }
        Err(CheckError::Input(e)) => bad_request(e.to_string()),
    }
}

/// The `cost` parameter (default 1), or why it cannot be read.
fn parse_cost(v: Option<&String>) -> Result<u64, BadRequest> {
    match v {
        None => Ok(1),
        Some(s) => s.parse::<u64>().map_err(|source| BadRequest::Cost { given: s.clone(), source }),
    }
}

async fn record(
    State(app): State<App>,
    GatewayTier(gateway): GatewayTier,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<RecordQuery>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (key, q) = match key_and_query(path, query) {
        Ok(kq) => kq,
        Err(e) => return bad_request(e.to_string()),
    };
    if !body.is_ok_and(|b| b.is_empty()) {
        // Its fields would be ignored: `{"cost": 3}` recorded at cost 1.
        return bad_request(format!(
            "POST /v1/keys/{{key}} takes no body: cost is a query parameter (?cost=3); to send JSON, use \
             POST /v1/check with {{\"key\": {key:?}, \"cost\": …}}"
        ));
    }
    let cost = match parse_cost(q.cost.as_ref()) {
        Ok(c) => c,
        Err(e) => return bad_request(e.to_string()),
    };
    let tier = match app.trust.tier(&gateway, q.tier) {
        Ok(t) => t,
        Err(refused) => return refused.respond(),
    };
    let result = app.limiter.check(&KeyCheck::new(key, cost, tier)).await;
    respond(&app, result)
}

/// The body of `POST /v1/check`: strict, unlike the wire's [`KeyCheck`], so a misspelt field is
/// a 400 instead of a silent default.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    key: String,
    #[serde(default = "one")]
    cost: u64,
    #[serde(default)]
    tier: Option<String>,
}

fn one() -> u64 {
    1
}

async fn record_json(
    State(app): State<App>,
    GatewayTier(gateway): GatewayTier,
    body: Result<Json<CheckBody>, JsonRejection>,
) -> Response {
    match body {
        Ok(Json(b)) => {
            let tier = match app.trust.tier(&gateway, b.tier) {
                Ok(t) => t,
                Err(refused) => return refused.respond(),
            };
            let result = app.limiter.check(&KeyCheck::new(b.key, b.cost, tier)).await;
            respond(&app, result)
        }
        Err(e) => bad_request(e.body_text()),
    }
}

async fn read(
    State(app): State<App>,
    GatewayTier(gateway): GatewayTier,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Response {
    let (key, q) = match key_and_query(path, query) {
        Ok(kq) => kq,
        Err(e) => return bad_request(e.to_string()),
    };
    let tier = match app.trust.tier(&gateway, q.tier) {
        Ok(t) => t,
        Err(refused) => return refused.respond(),
    };
    match app.limiter.peek(&key, tier.as_deref()).await {
        Ok(a) => (StatusCode::OK, headers(&a), Json(a)).into_response(),
        other => respond(&app, other),
    }
}

/// The token is checked before the body is read: a caller without it can't make the instance
/// read and parse up to the body limit.
async fn put_tiers(State(app): State<App>, request: Request) -> Response {
    if let Err(refused) = app.trust.authorize_admin(request.headers()) {
        return refused.respond();
    }
    let body: Result<Json<Tiers>, JsonRejection> = Json::from_request(request, &()).await;
    match body {
        Ok(Json(t)) => match app.limiter.update_tiers(t).await {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(e @ TiersError::Invalid(_)) => bad_request(e.to_string()),
            Err(e @ TiersError::TooLarge { .. }) => {
                problem(StatusCode::PAYLOAD_TOO_LARGE, "tiers too large", e.to_string())
            }
            Err(e) => {
                let mut r = problem(StatusCode::SERVICE_UNAVAILABLE, "tiers not changed", e.to_string());
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
                r
            }
        },
        Err(e) => bad_request(e.body_text()),
    }
}

/// `GET /v1/hot`: keys and their rates per second.
#[derive(Serialize)]
struct HotKeys {
    hot_keys: Vec<(String, u64)>,
}

async fn get_tiers(State(app): State<App>, headers: HeaderMap) -> Response {
    match app.trust.authorize_admin(&headers) {
        Ok(()) => Json(app.limiter.tiers()).into_response(),
        Err(refused) => refused.respond(),
    }
}

async fn get_hot(State(app): State<App>, headers: HeaderMap) -> Response {
    match app.trust.authorize_admin(&headers) {
        Ok(()) => Json(HotKeys { hot_keys: app.limiter.hot() }).into_response(),
        Err(refused) => refused.respond(),
    }
}

/// The API trusting callers with nothing ([`Trust::default`]): the operator's tiers decide, and
/// the admin endpoints are off.
pub fn router(limiter: KeyLimiter) -> Router {
    router_with(limiter, Trust::default(), Draining::default())
}

/// The API, trusting callers with what `trust` says and answering as `draining` says.
pub fn router_with(limiter: KeyLimiter, trust: Trust, draining: Draining) -> Router {
    let answers = Answers::default();
    let registry = registry(&answers, limiter.clone());
    let app = Arc::new(AppState { limiter, answers, draining, trust });
    Router::new()
        .route("/v1/keys/{key}", post(record).get(read))
        .route("/v1/check", post(record_json))
        .route("/v1/tiers", get(get_tiers).put(put_tiers))
        .route(
            "/v1/shards",
            get(|State(a): State<App>| async move { Json(ShardRoutes::clone(&a.limiter.routes().get())) }),
        )
        .route("/v1/hot", get(get_hot))
        .route("/metrics", metrics::endpoint(registry))
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .fallback(|uri: axum::http::Uri| async move {
            problem(StatusCode::NOT_FOUND, "not found", format!("no such endpoint: {}", uri.path()))
        })
        // After every route: it applies to the routes registered before it.
        .method_not_allowed_fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            let detail = format!("{method} is not a method of {} (the Allow header lists them)", uri.path());
            problem(StatusCode::METHOD_NOT_ALLOWED, "method not allowed", detail)
        })
        .layer(axum::middleware::from_fn_with_state(app.clone(), close_when_draining))
        .with_state(app)
}
