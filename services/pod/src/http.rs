//! The agent's local HTTP API, for services in any language.
//!
//! * `POST /v1/acquire?cost=1&priority=high|low&max_wait_ms=0` → `200` with a permit, or `429`
//!   with `Retry-After` (whole seconds) and an `application/problem+json` body; a cost above the
//!   current lease's burst is a `429` without `Retry-After` (it can never fit under this lease).
//!   Both carry the IETF `RateLimit-Policy` and `RateLimit` headers
//!   (draft-ietf-httpapi-ratelimit-headers).
//! * `POST /v1/upstream-error[?status=429|5xx]`: count a failed upstream call. A 5xx (or no
//!   status) feeds the pod's health; a 429 is counted apart (`PodReport.upstream_429`: adaptive
//!   limits follow it). Any other status is a `400`.
//! * `GET /v1/status` (JSON), `GET /metrics` (Prometheus), `GET /healthz`.
//!
//! Bad input is a `400` problem and changes nothing.

use crate::driver::PodStatus;
use crate::limiter::{AcquireError, Denial, Limiter, Priority, Totals};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_process::metrics;
use leasehold_process::problem::problem;
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::LeaseVersion;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::watch;

/// Longest wait a caller may ask for.
pub const MAX_WAIT_MS: u64 = 30_000;

#[derive(Clone)]
struct Agent {
    limiter: Limiter,
    status: watch::Receiver<PodStatus>,
}

#[derive(Deserialize)]
struct AcquireQuery {
    cost: Option<String>,
    priority: Option<String>,
    max_wait_ms: Option<String>,
}

#[derive(Deserialize)]
struct UpstreamErrorQuery {
    status: Option<String>,
}

async fn upstream_error(State(a): State<Agent>, Query(q): Query<UpstreamErrorQuery>) -> Response {
    let Some(status) = q.status else {
        a.limiter.record_upstream_error();
        return StatusCode::NO_CONTENT.into_response();
    };
    let counted = match parse_u64("status", Some(&status), 0, 599) {
        Ok(code) => a.limiter.record_upstream_status(code as u16),
        Err(d) => return problem(StatusCode::BAD_REQUEST, "invalid parameter", d),
    };
    if !counted {
        let detail = format!("status must be 429 or a 5xx, got {status}");
        return problem(StatusCode::BAD_REQUEST, "invalid parameter", detail);
    }
    StatusCode::NO_CONTENT.into_response()
}

/// A query parameter as an integer in `0..=max`, or the 400 problem's detail.
fn parse_u64(name: &str, v: Option<&String>, default: u64, max: u64) -> Result<u64, String> {
    let Some(v) = v else { return Ok(default) };
    match v.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!("{name} must be an integer in 0..={max}, got {v:?}")),
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

async fn acquire(State(a): State<Agent>, Query(q): Query<AcquireQuery>) -> Response {
    let cost = match parse_u64("cost", q.cost.as_ref(), 1, u32::MAX as u64) {
        Ok(c) => c as u32,
        Err(d) => return problem(StatusCode::BAD_REQUEST, "invalid parameter", d),
    };
    let max_wait_ms = match parse_u64("max_wait_ms", q.max_wait_ms.as_ref(), 0, MAX_WAIT_MS) {
        Ok(w) => w,
        Err(d) => return problem(StatusCode::BAD_REQUEST, "invalid parameter", d),
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
    let verdict = a.limiter.acquire(cost, priority, Duration::from_millis(max_wait_ms)).await;
    let headers = ratelimit_headers(&a.limiter, cost);
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
        Err(AcquireError::Bucket(e)) => {
            let mut r = problem(StatusCode::TOO_MANY_REQUESTS, "rate limited", e.to_string());
            r.headers_mut().extend(headers);
            r
        }
    }
}

/// `GET /v1/status`.
#[derive(Serialize)]
struct StatusBody {
    pod: String,
    /// The lease in force (none when expired).
    lease: Option<LeaseBody>,
    totals: Totals,
    queued: usize,
    leases_applied: u64,
    leases_refused: u64,
    messages_malformed: u64,
    renewal_latency_ms: Option<f64>,
    drained: bool,
}

#[derive(Serialize)]
struct LeaseBody {
    version: LeaseVersion,
    quota: Quota,
    expires_in_ms: u64,
    issuer: String,
}

async fn status_json(State(a): State<Agent>) -> Json<StatusBody> {
    let s = a.status.borrow().clone();
    let now = a.limiter.now_ns();
    Json(StatusBody {
        pod: s.pod,
        lease: s.lease.filter(|l| l.expires_at_ns > now).map(|l| LeaseBody {
            version: l.version,
            quota: l.quota,
            expires_in_ms: (l.expires_at_ns - now) / 1_000_000,
            issuer: l.issuer,
        }),
        totals: a.limiter.totals(),
        queued: a.limiter.queued(),
        leases_applied: s.leases_applied,
        leases_refused: s.leases_refused,
        messages_malformed: s.messages_malformed,
        renewal_latency_ms: s.renewal_latency_ms,
        drained: s.drained,
    })
}

/// The pod's series, labelled with its id, read from its limiter and status at every scrape.
fn registry(a: Agent) -> Registry {
    metrics::registry(move |m| {
        let s = a.status.borrow().clone();
        let t = a.limiter.totals();
        let now = a.limiter.now_ns();
        let view = a.limiter.bucket().view(now);
        let lease_rate = if view.expires_at_ns > now { view.quota.rate_per_s() } else { 0.0 };
        let since = s.last_renewal_ns.map_or(-1.0, |r| now.saturating_sub(r) as f64 / 1e9);
        let labels = [("pod", s.pod.as_str())];
        m.counter("leasehold_pod_requests_total", "Permit requests.", labels, t.offered)?;
        m.counter("leasehold_pod_admitted_total", "Permits granted.", labels, t.admitted)?;
        m.counter("leasehold_pod_rejected_total", "Permit requests denied by the bucket.", labels, t.rejected)?;
        m.gauge("leasehold_pod_lease_rate_per_s", "Rate of the lease in force (0 when none).", labels, lease_rate)?;
        m.gauge(
            "leasehold_pod_seconds_since_renewal",
            "Time since the last lease was applied (-1: never).",
            labels,
            since,
        )?;
        m.gauge(
            "leasehold_pod_renewal_latency_ms",
            "Report-to-lease latency of the last renewal.",
            labels,
            s.renewal_latency_ms.unwrap_or(-1.0),
        )?;
        m.counter(
            "leasehold_pod_leases_refused_total",
            "Stale, foreign or expired leases refused.",
            labels,
            s.leases_refused,
        )?;
        m.gauge("leasehold_pod_queued", "Requests waiting for a permit.", labels, a.limiter.queued() as f64)
    })
}

pub fn router(limiter: Limiter, status: watch::Receiver<PodStatus>) -> Router {
    let agent = Agent { limiter, status };
    Router::new()
        .route("/v1/acquire", post(acquire))
        .route("/v1/upstream-error", post(upstream_error))
        .route("/v1/status", get(status_json))
        .route("/metrics", metrics::endpoint(registry(agent.clone())))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(agent)
}
