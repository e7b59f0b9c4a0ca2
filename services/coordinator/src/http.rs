//! `/metrics` (Prometheus text) and `/v1/status` (JSON) for one coordinator replica.

use crate::leader::Status;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use serde_json::json;
use tokio::sync::watch;

async fn metrics(State(status): State<watch::Receiver<Status>>) -> impl IntoResponse {
    let s = status.borrow().clone();
    let mut out = String::new();
    let mut series = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, v) in rows {
            out.push_str(&format!("{name}{labels} {v}\n"));
        }
    };
    series(
        "leasehold_coordinator_leading",
        "gauge",
        "1 when this replica leads.",
        vec![(String::new(), s.leading as u8 as f64)],
    );
    series(
        "leasehold_coordinator_epoch",
        "gauge",
        "Epoch of the current or last term.",
        vec![(String::new(), s.epoch as f64)],
    );
    let counters = [
        ("leasehold_coordinator_takeovers_total", "Terms started.", s.takeovers),
        (
            "leasehold_coordinator_ledger_writes_total",
            "Ledger records written (DC lease renewals included).",
            s.records_written,
        ),
        ("leasehold_coordinator_step_downs_total", "Terms ended by a failed or fenced write or renewal.", s.step_downs),
        ("leasehold_coordinator_reports_malformed_total", "Undecodable DC reports.", s.reports_malformed),
        ("leasehold_coordinator_reports_ignored_total", "DC reports for limits not led here.", s.reports_ignored),
    ];
    for (name, help, v) in counters {
        series(name, "counter", help, vec![(String::new(), v as f64)]);
    }
    let per_limit = |f: &dyn Fn(&crate::leader::LimitBooks) -> f64| {
        s.limits.iter().map(|(l, b)| (format!("{{limit=\"{l}\"}}"), f(b))).collect::<Vec<_>>()
    };
    series(
        "leasehold_ledger_outstanding_rate_per_s",
        "gauge",
        "Σ rate of every DC lease still counted.",
        per_limit(&|b| b.outstanding.rate_per_s()),
    );
    series(
        "leasehold_ledger_limit_rate_per_s",
        "gauge",
        "The limit's rate R.",
        per_limit(&|b| b.capacity.rate_per_s()),
    );
    series(
        "leasehold_ledger_outstanding_burst",
        "gauge",
        "Σ burst of every DC lease still counted.",
        per_limit(&|b| b.outstanding.burst()),
    );
    series("leasehold_ledger_limit_burst", "gauge", "The limit's burst B.", per_limit(&|b| b.capacity.burst()));
    series("leasehold_ledger_dc_leases", "gauge", "DC leases on the books.", per_limit(&|b| b.dc_leases as f64));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

async fn status_json(State(status): State<watch::Receiver<Status>>) -> impl IntoResponse {
    let s = status.borrow().clone();
    let limits: serde_json::Map<String, serde_json::Value> = s
        .limits
        .iter()
        .map(|(l, b)| {
            (l.clone(), json!({ "limit": b.capacity, "outstanding": b.outstanding, "dc_leases": b.dc_leases }))
        })
        .collect();
    axum::Json(json!({
        "leading": s.leading, "epoch": s.epoch, "takeovers": s.takeovers, "records_written": s.records_written,
        "step_downs": s.step_downs, "reports_malformed": s.reports_malformed, "limits": limits,
    }))
}

pub fn router(status: watch::Receiver<Status>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/status", get(status_json))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(status)
}
