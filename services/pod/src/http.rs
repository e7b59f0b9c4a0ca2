//! The agent's local HTTP API, for services in any language.
//!
//! Every per-limit request takes `limit=<id>` (default: the settings' `limit`; missing with no
//! default, or not an id, is a `400`). The first request for a limit starts serving it.
//!
//! * `POST /v1/acquire?limit=…&cost=1&priority=high|low&max_wait_ms=0` → `200` with a permit, or `429`
//!   with `Retry-After` (whole seconds) and an `application/problem+json` body; a cost above the
//!   current lease's burst is a `429` without `Retry-After` (it can never fit under this lease).
//!   Both carry the IETF `RateLimit-Policy` and `RateLimit` headers
//!   (draft-ietf-httpapi-ratelimit-headers).
//! * `POST /v1/upstream-error?limit=…[&status=429|5xx]`: count a failed upstream call. A 5xx (or no
//!   status) feeds the pod's health; a 429 is counted apart (`PodReport.upstream_429`: adaptive
//!   limits follow it). Any other status is a `400`.
//! * `GET /v1/status` (JSON: every limit served; `?limit=` one of them), `GET /metrics`
//!   (Prometheus, label `limit`), `GET /healthz` (the process answers), `GET /readyz` (200 when not
//!   draining and every kept limit (the default one, those of Envoy's configuration) holds a valid
//!   lease; else 503; JSON says why).
//!
//! Bad input is a `400` problem and changes nothing.

use crate::limiter::{AcquireError, Denial, Limiter, Priority, Totals};
use crate::pod::{LimitError, Pod};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_core::quota::Quota;
use leasehold_core::wire::LeaseVersion;
use leasehold_process::metrics;
use leasehold_process::problem::problem;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest wait a caller may ask for.
pub const MAX_WAIT_MS: u64 = 30_000;

#[derive(Deserialize)]
struct AcquireQuery {
    limit: Option<String>,
    cost: Option<String>,
    priority: Option<String>,
    max_wait_ms: Option<String>,
}

#[derive(Deserialize)]
struct UpstreamErrorQuery {
    limit: Option<String>,
    status: Option<String>,
}

/// The limiter a request names (or the default one), or the problem to answer.
fn limiter_for(pod: &Pod, limit: Option<&str>) -> Result<Limiter, Box<Response>> {
    let Some(limit) = limit.or(pod.default_limit()) else {
        let detail = "limit is required: this agent has no default limit".to_string();
        return Err(Box::new(problem(StatusCode::BAD_REQUEST, "missing parameter", detail)));
    };
    pod.limiter(limit).map_err(|e| {
        Box::new(match e {
            LimitError::BadName(d) => problem(StatusCode::BAD_REQUEST, "invalid parameter", d),
            LimitError::TooMany | LimitError::Draining => {
                problem(StatusCode::SERVICE_UNAVAILABLE, "limit not served", e.to_string())
            }
            LimitError::LentToEnvoy(_) | LimitError::AlreadyServed(_) => {
                problem(StatusCode::CONFLICT, "limit lent to Envoy", e.to_string())
            }
        })
    })
}

async fn upstream_error(State(pod): State<Pod>, Query(q): Query<UpstreamErrorQuery>) -> Response {
    // The status first: a bad one counts nothing and starts no limit.
    let code = match q.status.as_ref().map(|s| parse_u64("status", Some(s), 0, 599)) {
        None => None,
        Some(Ok(c)) if c == 429 || (500..=599).contains(&c) => Some(c as u16),
        Some(Ok(_)) => {
            let detail = format!("status must be 429 or a 5xx, got {}", q.status.unwrap_or_default());
            return problem(StatusCode::BAD_REQUEST, "invalid parameter", detail);
        }
        Some(Err(e)) => return problem(StatusCode::BAD_REQUEST, "invalid parameter", e.to_string()),
    };
    let limiter = match limiter_for(&pod, q.limit.as_deref()) {
        Ok(l) => l,
        Err(r) => return *r,
    };
    match code {
        Some(code) => limiter.record_upstream_status(code),
        None => {
            limiter.record_upstream_error();
            true
        }
    };
    StatusCode::NO_CONTENT.into_response()
}

/// A query parameter that is not an integer in `0..=max`: the 400 problem's detail.
#[derive(Debug, thiserror::Error)]
#[error("{name} must be an integer in 0..={max}, got {given:?}")]
struct BadParameter {
    name: &'static str,
    max: u64,
    given: String,
}

/// A query parameter as an integer in `0..=max`.
fn parse_u64(name: &'static str, v: Option<&String>, default: u64, max: u64) -> Result<u64, BadParameter> {
    let Some(v) = v else { return Ok(default) };
    match v.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(BadParameter { name, max, given: v.clone() }),
    }
}

fn ratelimit_headers(limiter: &Limiter, cost: u32) -> HeaderMap {
    let now = limiter.now_ns();
    let view = limiter.bucket().view(now);
    let live = view.expires_at_ns > now;
    let quota_per_s = if live { view.quota.rate_milli_per_s / 1_000 } else { 0 };
    let remaining = if live { view.balance_milli / 1_000 } else { 0 };
    let reset_s = limiter.bucket().retry_after(cost, now).ok().flatten().map_or(0, |ns| ns.div_ceil(1_000_000_000));
    let mut h = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("\"lease\";q={quota_per_s};w=1")) {
        h.insert("ratelimit-policy", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"lease\";r={remaining};t={reset_s}")) {
        h.insert("ratelimit", v);
    }
    h
}

#[derive(Serialize)]
struct Granted {
    granted: bool,
}

async fn acquire(State(pod): State<Pod>, Query(q): Query<AcquireQuery>) -> Response {
    let cost = match parse_u64("cost", q.cost.as_ref(), 1, u32::MAX as u64) {
        Ok(c) => c as u32,
        Err(e) => return problem(StatusCode::BAD_REQUEST, "invalid parameter", e.to_string()),
    };
    let max_wait_ms = match parse_u64("max_wait_ms", q.max_wait_ms.as_ref(), 0, MAX_WAIT_MS) {
        Ok(w) => w,
        Err(e) => return problem(StatusCode::BAD_REQUEST, "invalid parameter", e.to_string()),
    };
    let priority = match q.priority.as_deref() {
        None | Some("high") => Priority::High,
        Some("low") => Priority::Low,
        Some(other) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "invalid parameter",
                format!("priority must be high or low, got {other:?}"),
            )
        }
    };
    let limiter = match limiter_for(&pod, q.limit.as_deref()) {
        Ok(l) => l,
        Err(r) => return *r,
    };
    let verdict = limiter.acquire(cost, priority, Duration::from_millis(max_wait_ms)).await;
    let headers = ratelimit_headers(&limiter, cost);
    match verdict {
        Ok(Ok(())) => (StatusCode::OK, headers, Json(Granted { granted: true })).into_response(),
        Ok(Err(denial)) => {
            let retry_ms = denial.retry_after().map(|d| d.as_millis() as u64);
            let detail = match denial {
                Denial::Empty { .. } => "this pod's share of the limit is used up for now",
                Denial::NoLease => "no valid lease (starting up, or cut off from its DC manager): failing safe",
                Denial::QueueFull => "too many requests are already waiting",
                Denial::Timeout { .. } => "no permit within max_wait_ms",
            };
            let mut r = problem(StatusCode::TOO_MANY_REQUESTS, "rate limited", detail.into());
            r.headers_mut().extend(headers);
            // Retry-After is whole seconds (RFC 9110); at least 1 so clients do not spin.
            let secs = retry_ms.map_or(1, |ms| ms.div_ceil(1_000).max(1));
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
            r
        }
        Err(AcquireError::ZeroCost) => {
            problem(StatusCode::BAD_REQUEST, "invalid parameter", "cost must be at least 1".into())
        }
        Err(e @ AcquireError::LimitRemoved(_)) => problem(StatusCode::NOT_FOUND, "limit removed", e.to_string()),
        Err(AcquireError::Bucket(e)) => {
            let mut r = problem(StatusCode::TOO_MANY_REQUESTS, "rate limited", e.to_string());
            r.headers_mut().extend(headers);
            r
        }
    }
}

/// `GET /v1/status`: the pod and every limit it serves.
#[derive(Serialize)]
struct StatusBody {
    pod: String,
    default_limit: Option<String>,
    limits: BTreeMap<String, LimitBody>,
}

/// One limit's part of `GET /v1/status` (alone with `?limit=`).
#[derive(Serialize)]
struct LimitBody {
    pod: String,
    limit: String,
    /// Holding (or asking for) a lease; false once given back while idle, or drained.
    serving: bool,
    /// The lease in force (none when expired).
    lease: Option<LeaseBody>,
    totals: Totals,
    queued: usize,
    leases_applied: u64,
    leases_refused: u64,
    messages_malformed: u64,
    renewal_latency_ms: Option<f64>,
    idle_releases: u64,
    drained: bool,
}

#[derive(Serialize)]
struct LeaseBody {
    version: LeaseVersion,
    quota: Quota,
    expires_in_ms: u64,
    issuer: String,
}

fn limit_body(l: &Limiter) -> LimitBody {
    let s = l.status().borrow().clone();
    let now = l.now_ns();
    LimitBody {
        pod: s.pod,
        limit: s.limit,
        serving: s.serving,
        lease: s.lease.filter(|l| l.expires_at_ns > now).map(|l| LeaseBody {
            version: l.version,
            quota: l.quota,
            expires_in_ms: (l.expires_at_ns - now) / 1_000_000,
            issuer: l.issuer,
        }),
        totals: l.totals(),
        queued: l.queued(),
        leases_applied: s.leases_applied,
        leases_refused: s.leases_refused,
        messages_malformed: s.messages_malformed,
        renewal_latency_ms: s.renewal_latency_ms,
        idle_releases: s.idle_releases,
        drained: s.drained,
    }
}

#[derive(Deserialize)]
struct StatusQuery {
    limit: Option<String>,
}

/// Reading the status never starts serving a limit: an unknown one is a `404`.
async fn status_json(State(pod): State<Pod>, Query(q): Query<StatusQuery>) -> Response {
    if let Some(limit) = q.limit {
        return match pod.served(&limit) {
            Some(l) => Json(limit_body(&l)).into_response(),
            None => problem(StatusCode::NOT_FOUND, "limit not served", format!("this pod serves no limit {limit:?}")),
        };
    }
    let limits = pod.limiters().iter().map(|l| (l.limit().to_string(), limit_body(l))).collect();
    Json(StatusBody { pod: pod.id.clone(), default_limit: pod.default_limit().map(String::from), limits })
        .into_response()
}

/// One limit's numbers at a scrape.
struct Series {
    labels: [(&'static str, String); 2],
    totals: Totals,
    lease_rate_per_s: f64,
    seconds_since_renewal: f64,
    renewal_latency_ms: f64,
    leases_refused: u64,
    queued: f64,
}

fn series(l: &Limiter) -> Series {
    let s = l.status().borrow().clone();
    let now = l.now_ns();
    let view = l.bucket().view(now);
    Series {
        labels: [("pod", s.pod), ("limit", s.limit)],
        totals: l.totals(),
        lease_rate_per_s: if view.expires_at_ns > now { view.quota.rate_per_s() } else { 0.0 },
        seconds_since_renewal: s.last_renewal_ns.map_or(-1.0, |r| now.saturating_sub(r) as f64 / 1e9),
        renewal_latency_ms: s.renewal_latency_ms.unwrap_or(-1.0),
        leases_refused: s.leases_refused,
        queued: l.queued() as f64,
    }
}

/// The pod's series, one per limit served (labels `pod`, `limit`), read from every limiter and
/// its status at every scrape.
fn registry(pod: Pod) -> Registry {
    metrics::registry(move |m| {
        let all: Vec<Series> = pod.limiters().iter().map(series).collect();
        let rows = |f: fn(&Series) -> u64| all.iter().map(move |s| (s.labels.clone(), f(s))).collect::<Vec<_>>();
        let gauges = |f: fn(&Series) -> f64| all.iter().map(move |s| (s.labels.clone(), f(s))).collect::<Vec<_>>();
        m.counters("leasehold_pod_requests_total", "Permit requests.", rows(|s| s.totals.offered))?;
        m.counters("leasehold_pod_admitted_total", "Permits granted.", rows(|s| s.totals.admitted))?;
        m.counters(
            "leasehold_pod_rejected_total",
            "Permit requests denied by the bucket.",
            rows(|s| s.totals.rejected),
        )?;
        m.gauges(
            "leasehold_pod_lease_rate_per_s",
            "Rate of the lease in force (0 when none).",
            gauges(|s| s.lease_rate_per_s),
        )?;
        m.gauges(
            "leasehold_pod_seconds_since_renewal",
            "Time since the last lease was applied (-1: never).",
            gauges(|s| s.seconds_since_renewal),
        )?;
        m.gauges(
            "leasehold_pod_renewal_latency_ms",
            "Report-to-lease latency of the last renewal.",
            gauges(|s| s.renewal_latency_ms),
        )?;
        m.counters(
            "leasehold_pod_leases_refused_total",
            "Stale, foreign or expired leases refused.",
            rows(|s| s.leases_refused),
        )?;
        m.counters(
            "leasehold_pod_upstream_errors_total",
            "Upstream calls reported failed (a 5xx or no answer).",
            rows(|s| s.totals.upstream_errors),
        )?;
        m.counters(
            "leasehold_pod_upstream_429_total",
            "Upstream calls reported answered 429: the partner's limit is below what was leased.",
            rows(|s| s.totals.upstream_429),
        )?;
        m.gauges("leasehold_pod_queued", "Requests waiting for a permit.", gauges(|s| s.queued))
    })
}

pub fn router(pod: Pod) -> Router {
    router_with(pod, Vec::new())
}

/// [`router`], with more series on `/metrics` (the agent's Envoy services').
pub fn router_with(pod: Pod, more_metrics: Vec<Box<dyn prometheus_client::collector::Collector>>) -> Router {
    let mut registry = registry(pod.clone());
    for more in more_metrics {
        registry.register_collector(more);
    }
    Router::new()
        .route("/v1/acquire", post(acquire))
        .route("/v1/upstream-error", post(upstream_error))
        .route("/v1/status", get(status_json))
        .route("/metrics", metrics::endpoint(registry))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(pod)
}

/// Ready while not draining and every kept limit (the default one, and those kept for Envoy's
/// configuration) has been leased since the agent started ([`leasehold_core::readiness::agent`]).
async fn ready(State(pod): State<Pod>) -> Response {
    use leasehold_core::readiness::Leased;
    let now = pod.now_ns();
    let kept: Vec<(String, Leased)> = pod
        .kept_limits()
        .into_iter()
        .map(|l| {
            // A lease applied since the start (`leases_applied`), even one of rate 0 (the bucket
            // keeps those as none): the control plane reached this agent.
            let leased = if l.bucket().view(now).expires_at_ns > now {
                Leased::Now
            } else if l.status().borrow().leases_applied > 0 {
                Leased::Lapsed
            } else {
                Leased::Never
            };
            (l.limit().to_string(), leased)
        })
        .collect();
    let kept: Vec<(&str, Leased)> = kept.iter().map(|(l, leased)| (l.as_str(), *leased)).collect();
    let served = pod.limiters().len();
    leasehold_process::health::answer(leasehold_core::readiness::agent(pod.draining(), &kept, served))
}
