//! # Strict mock upstream
//!
//! Stands in for a partner API (1,000 QPS by default): a hard limit of `limit` calls in any sliding
//! `window_ms`. Every call is counted; a call that would exceed the limit gets **429** and is a
//! violation of Leasehold's promise. It is the independent judge of the demo and chaos runs. The
//! rule is the simulator's [`SlidingWindow`] (one judge for virtual and real time), fed by this
//! process's monotonic clock.
//!
//! The partner may change its limit while it runs (`POST /admin/limit?calls=N`, from the next call
//! on): the demo lowers it after a live `leasehold limits put`. Calls already in the window keep
//! counting against the new limit, as a real partner's would.
//!
//! HTTP: `POST /call` (200 or 429), `GET /stats` (JSON [`Stats`]), `POST /admin/limit?calls=N`
//! (200 with the [`Stats`] after the change; 400 for a missing or zero `calls`), `GET /metrics`
//! (Prometheus).
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
pub use leasehold_judge::Counters;
use leasehold_judge::SlidingWindow;
use leasehold_process::metrics::{self, NO_LABELS};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum UpstreamError {
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: String, reason: String },
    #[error("invalid setting: {0}")]
    Invalid(String),
    #[error("server failed: {0}")]
    Serve(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    /// The limit in force now.
    pub limit: u64,
    pub window_ms: u64,
    #[serde(flatten)]
    pub counters: Counters,
    /// The largest `calls in the window ÷ the limit in force`, over every admitted arrival. At most
    /// 1.0: a call that would exceed the limit is refused (429) and not counted. How close the
    /// callers came; the 429 count is the violation.
    pub max_window_ratio: f64,
    /// Times the limit was changed (`POST /admin/limit`).
    pub limit_changes: u64,
    /// When the limit last changed, in ms since this process started.
    pub limit_changed_at_ms: Option<u64>,
    /// The largest window ending at a call admitted after the last change (`max_window` without
    /// a change).
    pub max_window_since_change: u64,
}

/// The judge's state under one lock: the window and what it has seen.
#[derive(Debug)]
struct Book {
    window: SlidingWindow,
    max_window_ratio: f64,
    limit_changes: u64,
    limit_changed_at_ms: Option<u64>,
    max_window_since_change: u64,
}

#[derive(Clone)]
struct Judge {
    origin: Instant,
    book: Arc<Mutex<Book>>,
}

impl Judge {
    fn new(limit: u64, window_ms: u64) -> Self {
        let book = Book {
            window: SlidingWindow::new(limit, window_ms),
            max_window_ratio: 0.0,
            limit_changes: 0,
            limit_changed_at_ms: None,
            max_window_since_change: 0,
        };
        Judge { origin: Instant::now(), book: Arc::new(Mutex::new(book)) }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stats(&self) -> Stats {
        let b = self.book();
        Stats {
            limit: b.window.limit(),
            window_ms: b.window.window_ms(),
            counters: b.window.counters(),
            max_window_ratio: b.max_window_ratio,
            limit_changes: b.limit_changes,
            limit_changed_at_ms: b.limit_changed_at_ms,
            max_window_since_change: b.max_window_since_change,
        }
    }

    /// Judge one call now. True when admitted.
    fn call(&self) -> bool {
        let now_ns = self.origin.elapsed().as_nanos() as u64;
        let mut b = self.book();
        let ok = b.window.call(now_ns);
        if ok {
            let in_window = b.window.in_window();
            b.max_window_ratio = b.max_window_ratio.max(in_window as f64 / b.window.limit() as f64);
            b.max_window_since_change = b.max_window_since_change.max(in_window);
        }
        ok
    }

    /// From the next call on, at most `calls` per window.
    fn set_limit(&self, calls: u64) {
        let at_ms = self.origin.elapsed().as_millis() as u64;
        let mut b = self.book();
        b.window.set_limit(calls);
        b.limit_changes += 1;
        b.limit_changed_at_ms = Some(at_ms);
        b.max_window_since_change = 0;
        tracing::info!(calls, at_ms, "limit changed");
    }
}

async fn call(State(j): State<Judge>) -> impl IntoResponse {
    if j.call() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::TOO_MANY_REQUESTS, "hard limit exceeded\n")
    }
}

#[derive(Deserialize)]
struct LimitQuery {
    calls: u64,
}

/// `POST /admin/limit?calls=N`: the partner changes its limit (a missing or bad `calls` is a 400
/// from the query extractor).
async fn set_limit(State(j): State<Judge>, Query(q): Query<LimitQuery>) -> Result<Json<Stats>, (StatusCode, String)> {
    if q.calls == 0 {
        return Err((StatusCode::BAD_REQUEST, "calls must be at least 1\n".into()));
    }
    j.set_limit(q.calls);
    Ok(Json(j.stats()))
}

async fn stats(State(j): State<Judge>) -> Json<Stats> {
    Json(j.stats())
}

/// The judge's series, read from its window at every scrape.
fn registry(j: Judge) -> Registry {
    metrics::registry(move |m| {
        let s = j.stats();
        m.counter("leasehold_upstream_calls_total", "Calls received.", NO_LABELS, s.counters.total)?;
        m.counter(
            "leasehold_upstream_rejected_total",
            "Calls over the hard limit (429).",
            NO_LABELS,
            s.counters.rejected,
        )?;
        m.gauge("leasehold_upstream_max_window", "Most calls seen in any window.", NO_LABELS, s.counters.max_window)?;
        m.gauge("leasehold_upstream_limit", "The hard limit per window.", NO_LABELS, s.limit)
    })
}

pub fn router(limit: u64, window_ms: u64) -> Router {
    let judge = Judge::new(limit, window_ms);
    Router::new()
        .route("/call", post(call))
        .route("/stats", get(stats))
        .route("/admin/limit", post(set_limit))
        .route("/metrics", metrics::endpoint(registry(judge.clone())))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(judge)
}

/// Serve until the process ends. Prints `listening on <addr>` once bound (port 0 picks one).
pub async fn serve(listen: &str, limit: u64, window_ms: u64) -> Result<(), UpstreamError> {
    if limit == 0 || window_ms == 0 {
        return Err(UpstreamError::Invalid("limit and window_ms must be positive".into()));
    }
    let addr: SocketAddr =
        listen.parse().map_err(|e| UpstreamError::Bind { addr: listen.into(), reason: format!("{e}") })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| UpstreamError::Bind { addr: listen.into(), reason: e.to_string() })?;
    let local = listener.local_addr().map_err(|e| UpstreamError::Serve(e.to_string()))?;
    println!("listening on {local}");
    tracing::info!(%local, limit, window_ms, "mock upstream up");
    serve_on(listener, limit, window_ms).await
}

/// Serve on a listener already bound (so a caller that bound port 0 knows the port first).
pub async fn serve_on(listener: tokio::net::TcpListener, limit: u64, window_ms: u64) -> Result<(), UpstreamError> {
    axum::serve(listener, router(limit, window_ms)).await.map_err(|e| UpstreamError::Serve(e.to_string()))
}
