//! # Strict mock upstream
//!
//! Stands in for the partner API at 1,000 QPS: a hard limit of `limit` calls in any sliding
//! `window_ms`. Every call is counted; a call that would exceed the limit gets **429** and is a
//! violation of Leasehold's promise. It is the independent judge of the demo and chaos runs. The
//! rule is the simulator's [`SlidingWindow`] (one judge for virtual and real time), fed by this
//! process's monotonic clock.
//!
//! HTTP: `POST /call` (200 or 429), `GET /stats` (JSON [`Stats`]), `GET /metrics` (Prometheus).
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_process::metrics::{self, NO_LABELS};
pub use leasehold_sim::sliding_window::Counters;
use leasehold_sim::sliding_window::SlidingWindow;
use prometheus_client::registry::Registry;
use serde::Serialize;
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
    pub limit: u64,
    pub window_ms: u64,
    #[serde(flatten)]
    pub counters: Counters,
    /// `max_window / limit`: above 1.0 only if calls were rejected.
    pub max_window_ratio: f64,
}

#[derive(Clone)]
struct Judge {
    origin: Instant,
    window: Arc<Mutex<SlidingWindow>>,
}

impl Judge {
    fn stats(&self) -> Stats {
        let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let counters = w.counters();
        Stats {
            limit: w.limit(),
            window_ms: w.window_ms(),
            counters,
            max_window_ratio: counters.max_window as f64 / w.limit().max(1) as f64,
        }
    }
}

async fn call(State(j): State<Judge>) -> impl IntoResponse {
    let now_ns = j.origin.elapsed().as_nanos() as u64;
    let ok = j.window.lock().unwrap_or_else(|p| p.into_inner()).call(now_ns);
    if ok {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::TOO_MANY_REQUESTS, "hard limit exceeded\n")
    }
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
    let judge = Judge { origin: Instant::now(), window: Arc::new(Mutex::new(SlidingWindow::new(limit, window_ms))) };
    Router::new()
        .route("/call", post(call))
        .route("/stats", get(stats))
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
    axum::serve(listener, router(limit, window_ms)).await.map_err(|e| UpstreamError::Serve(e.to_string()))
}
