//! `/metrics` (Prometheus text), `/v1/status` (JSON), `/healthz` (the process answers) and
//! `/readyz` (it leads with a valid DC lease for every limit, or follows with a fresh view:
//! [`leasehold_core::readiness`]) for one DC manager.

use crate::manager::{LimitStatus, Status};
use axum::extract::State;
use axum::routing::get;
use axum::Json;
use axum::Router;
use leasehold_core::dc_manager::{FailMode, SplitMode};
use leasehold_core::readiness;
use leasehold_process::clock::LeaseClock;
use leasehold_process::health;
use leasehold_process::metrics;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio::sync::watch;

#[derive(Clone)]
struct View {
    status: watch::Receiver<Status>,
    /// The limit this process serves, or `*` for every limit.
    limit: String,
    dc: String,
}

/// The manager's series, labelled with limit and DC, read from its status at every scrape: one
/// series per limit served for what each limit has, and the process's own (leadership, malformed
/// input, publish failures) under the limit it serves, `*` when it serves every limit.
fn registry(status: watch::Receiver<Status>, limit: String, dc: String) -> Registry {
    metrics::registry(move |m| {
        let s = status.borrow().clone();
        let process = [("limit", limit.as_str()), ("dc", dc.as_str())];
        let per_limit = |f: fn(&LimitStatus) -> f64| {
            s.limits.iter().map(|(l, v)| ([("limit", l.clone()), ("dc", dc.clone())], f(v))).collect::<Vec<_>>()
        };
        let per_limit_count = |f: fn(&LimitStatus) -> u64| {
            s.limits.iter().map(|(l, v)| ([("limit", l.clone()), ("dc", dc.clone())], f(v))).collect::<Vec<_>>()
        };
        m.gauge("leasehold_dc_leading", "1 when this replica leads its DC.", process, s.leading as u8 as f64)?;
        m.gauge(
            "leasehold_dc_ledger_read",
            "1 when this replica leads and has read the ledger in its term.",
            process,
            (s.leading && s.ledger_read) as u8 as f64,
        )?;
        m.gauges(
            "leasehold_dc_allocated_rate_per_s",
            "Floor + DC lease the pods share.",
            per_limit(|l| l.budget_rate_per_s),
        )?;
        m.gauges(
            "leasehold_dc_used_rate_per_s",
            "Admissions reported by pods over the last second.",
            per_limit(|l| l.used_rate_per_s),
        )?;
        m.gauges(
            "leasehold_dc_lease_rate_per_s",
            "Rate of the DC lease in force.",
            per_limit(|l| l.dc_lease_rate_per_s),
        )?;
        m.gauges(
            "leasehold_dc_seconds_since_lease",
            "Time since the last DC lease was applied (-1: none yet).",
            per_limit(|l| l.seconds_since_dc_lease.unwrap_or(-1.0)),
        )?;
        m.gauges(
            "leasehold_dc_pods_eligible",
            "Pods sharing the budget (fresh heartbeat, healthy, not draining).",
            per_limit(|l| l.pods_eligible as f64),
        )?;
        m.gauges(
            "leasehold_dc_pods_without_token",
            "Eligible pods holding no whole token of burst: they deny every call.",
            per_limit(|l| l.pods_without_token as f64),
        )?;
        m.counters(
            "leasehold_dc_pod_leases_issued_total",
            "Pod leases issued.",
            per_limit_count(|l| l.pod_leases_issued),
        )?;
        m.counter(
            "leasehold_dc_lease_refusals_total",
            "DC leases refused (stale, expired).",
            process,
            s.dc_leases_refused,
        )?;
        m.counters(
            "leasehold_dc_leases_accepted_total",
            "DC leases taken.",
            per_limit_count(|l| l.dc_leases_accepted),
        )?;
        m.counters(
            "leasehold_dc_lease_age_seconds_total",
            "Sum of the taken DC leases' ages when taken: since the DC report each answers was sent. Over leasehold_dc_leases_accepted_total: the mean; a lease counts from its report, so a late one leaves the pods less time.",
            per_limit(|l| l.dc_lease_age_ms_total as f64 / 1_000.0),
        )?;
        m.counter("leasehold_dc_messages_malformed_total", "Undecodable messages.", process, s.messages_malformed)?;
        m.counter(
            "leasehold_dc_report_batches_shed_total",
            "Pod report batches dropped unread: past inbound_reports_max_bytes, or older than inbound_reports_max_age_ms.",
            process,
            s.report_batches_shed,
        )?;
        m.gauge(
            "leasehold_dc_report_read_lag_seconds",
            "How far behind the clock the latest tick counted pods' silence: to the arrival of the oldest report batch queued unread when the loop last looked, or to when it looked.",
            process,
            s.report_read_lag_ms as f64 / 1_000.0,
        )?;
        m.counter(
            "leasehold_dc_report_batches_read_by_serde_total",
            "Valid pod report batches the manager's own reader left to serde_json (an extra field, an escaped string): more CPU per item.",
            process,
            s.report_batches_read_by_serde,
        )?;
        m.counters(
            "leasehold_dc_reports_stale_total",
            "Stale or foreign pod reports.",
            per_limit_count(|l| l.reports_stale),
        )?;
        m.counter("leasehold_dc_publish_failures_total", "Publishes that timed out.", process, s.publish_failures)
    })
}

/// `GET /v1/status`.
#[derive(Serialize)]
struct StatusBody {
    limit: String,
    dc: String,
    leading: bool,
    epoch: u64,
    instance: String,
    pods_known: u32,
    pods_eligible: u32,
    budget_rate_per_s: f64,
    dc_lease_rate_per_s: f64,
    used_rate_per_s: f64,
    pod_leases_issued: u64,
    messages_malformed: u64,
    report_batches_shed: u64,
    report_read_lag_ms: u64,
    /// The mean age of the DC leases taken in this term, when taken: since the DC report each
    /// answers (none taken yet: null).
    dc_lease_age_ms_mean: Option<u64>,
    takeovers: u64,
    /// Whether this term has read the ledger (until then it uses no floor).
    ledger_read: bool,
    /// Per limit served: budget, DC lease, use and pods.
    limits: std::collections::BTreeMap<String, LimitBody>,
}

#[derive(Serialize)]
struct LimitBody {
    pods_known: u32,
    pods_eligible: u32,
    pods_without_token: u32,
    budget_rate_per_s: f64,
    dc_lease_rate_per_s: f64,
    used_rate_per_s: f64,
    seconds_since_dc_lease: Option<f64>,
    /// The split and fail mode in force: the limit's definition's, else this process's.
    split: SplitMode,
    fail_mode: FailMode,
}

async fn status_json(State(v): State<View>) -> Json<StatusBody> {
    let s = v.status.borrow().clone();
    Json(StatusBody {
        limit: v.limit,
        dc: v.dc,
        leading: s.leading,
        epoch: s.epoch,
        instance: s.instance,
        pods_known: s.totals.pods_known,
        pods_eligible: s.totals.pods_eligible,
        budget_rate_per_s: s.totals.budget_rate_per_s,
        dc_lease_rate_per_s: s.totals.dc_lease_rate_per_s,
        used_rate_per_s: s.totals.used_rate_per_s,
        pod_leases_issued: s.totals.pod_leases_issued,
        messages_malformed: s.messages_malformed,
        report_batches_shed: s.report_batches_shed,
        report_read_lag_ms: s.report_read_lag_ms,
        dc_lease_age_ms_mean: (s.totals.dc_leases_accepted > 0)
            .then(|| s.totals.dc_lease_age_ms_total / s.totals.dc_leases_accepted),
        takeovers: s.takeovers,
        ledger_read: s.ledger_read,
        limits: s
            .limits
            .iter()
            .map(|(name, l)| {
                let body = LimitBody {
                    pods_known: l.pods_known,
                    pods_eligible: l.pods_eligible,
                    pods_without_token: l.pods_without_token,
                    budget_rate_per_s: l.budget_rate_per_s,
                    dc_lease_rate_per_s: l.dc_lease_rate_per_s,
                    used_rate_per_s: l.used_rate_per_s,
                    seconds_since_dc_lease: l.seconds_since_dc_lease,
                    split: l.split,
                    fail_mode: l.fail_mode,
                };
                (name.clone(), body)
            })
            .collect(),
    })
}

/// `clock` is the replica's (its status's times are readings of it); a standby whose view of
/// the leader key is older than `max_view_age_ms` is not ready.
pub(crate) fn router(
    status: watch::Receiver<Status>,
    limit: String,
    dc: String,
    clock: LeaseClock,
    max_view_age_ms: u64,
) -> Router {
    let view = status.clone();
    let ready = move || {
        let now = clock.now_ns();
        let answer = {
            let s = view.borrow();
            let without: Vec<String> = s
                .limits
                .iter()
                .filter(|(_, l)| l.dc_lease_until_ns.is_none_or(|until| now >= until))
                .map(|(name, _)| name.clone())
                .collect();
            health::answer(readiness::dc_manager(&s.replica, now, max_view_age_ms, s.limits.len(), &without))
        };
        async move { answer }
    };
    Router::new()
        .route("/metrics", metrics::endpoint(registry(status.clone(), limit.clone(), dc.clone())))
        .route("/v1/status", get(status_json))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(View { status, limit, dc })
}
