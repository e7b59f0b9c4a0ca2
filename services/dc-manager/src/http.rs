//! `/metrics` (Prometheus text) and `/v1/status` (JSON) for one DC manager.

use crate::manager::Status;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::json;
use tokio::sync::watch;

#[derive(Clone)]
struct View {
    status: watch::Receiver<Status>,
    limit: String,
    dc: String,
}

async fn metrics(State(v): State<View>) -> impl IntoResponse {
    let s = v.status.borrow().clone();
    let labels = format!("limit=\"{}\",dc=\"{}\"", v.limit, v.dc);
    let mut out = String::new();
    let mut line = |name: &str, kind: &str, help: &str, value: f64| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}\n"));
    };
    line("leasehold_dc_leading", "gauge", "1 when this replica leads its DC.", s.leading as u8 as f64);
    line("leasehold_dc_allocated_rate_per_s", "gauge", "Floor + DC lease the pods share.", s.budget_rate_per_s);
    line(
        "leasehold_dc_used_rate_per_s",
        "gauge",
        "Admissions reported by pods over the last second.",
        s.used_rate_per_s,
    );
    line("leasehold_dc_lease_rate_per_s", "gauge", "Rate of the DC lease in force.", s.dc_lease_rate_per_s);
    line(
        "leasehold_dc_seconds_since_lease",
        "gauge",
        "Time since the last DC lease was applied (-1: none yet).",
        s.seconds_since_dc_lease.unwrap_or(-1.0),
    );
    line(
        "leasehold_dc_pods_eligible",
        "gauge",
        "Healthy, non-draining pods sharing the budget.",
        s.pods_eligible as f64,
    );
    line("leasehold_dc_pod_leases_issued_total", "counter", "Pod leases issued.", s.pod_leases_issued as f64);
    line(
        "leasehold_dc_lease_refusals_total",
        "counter",
        "DC leases refused (stale, expired).",
        s.dc_leases_refused as f64,
    );
    line("leasehold_dc_messages_malformed_total", "counter", "Undecodable messages.", s.messages_malformed as f64);
    line("leasehold_dc_reports_stale_total", "counter", "Stale or foreign pod reports.", s.reports_stale as f64);
    line("leasehold_dc_publish_failures_total", "counter", "Publishes that timed out.", s.publish_failures as f64);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

async fn status_json(State(v): State<View>) -> impl IntoResponse {
    let s = v.status.borrow().clone();
    axum::Json(json!({
        "limit": v.limit, "dc": v.dc, "leading": s.leading, "epoch": s.epoch, "instance": s.instance,
        "pods_known": s.pods_known, "pods_eligible": s.pods_eligible,
        "budget_rate_per_s": s.budget_rate_per_s, "dc_lease_rate_per_s": s.dc_lease_rate_per_s,
        "used_rate_per_s": s.used_rate_per_s, "pod_leases_issued": s.pod_leases_issued,
        "messages_malformed": s.messages_malformed, "takeovers": s.takeovers,
    }))
}

pub fn router(status: watch::Receiver<Status>, limit: String, dc: String) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status_json))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(View { status, limit, dc })
}
