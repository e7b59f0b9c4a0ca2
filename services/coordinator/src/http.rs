//! `/metrics` (Prometheus text), `/v1/status` (JSON), `/healthz` (the process answers) and
//! `/readyz` (it leads, or follows with a fresh view: [`leasehold_core::readiness`]) for one
//! coordinator replica.

use crate::leader::{LimitBooks, Status};
use axum::extract::State;
use axum::routing::get;
use axum::Json;
use axum::Router;
use leasehold_core::quota::Quota;
use leasehold_core::readiness;
use leasehold_process::clock::LeaseClock;
use leasehold_process::health;
use leasehold_process::metrics::{self, NO_LABELS};
use prometheus_client::registry::Registry;
use serde::Serialize;
use std::collections::BTreeMap;
use tokio::sync::watch;

/// The replica's series, read from its status at every scrape.
fn registry(status: watch::Receiver<Status>) -> Registry {
    metrics::registry(move |m| {
        let s = status.borrow().clone();
        m.gauge("leasehold_coordinator_leading", "1 when this replica leads.", NO_LABELS, s.leading as u8 as f64)?;
        m.gauge("leasehold_coordinator_epoch", "Epoch of the current or last term.", NO_LABELS, s.epoch as f64)?;
        m.counter("leasehold_coordinator_takeovers_total", "Terms started.", NO_LABELS, s.takeovers)?;
        m.counter(
            "leasehold_coordinator_ledger_writes_total",
            "Ledger groups written to KV (each carries the records of several limits).",
            NO_LABELS,
            s.ledger_writes,
        )?;
        m.counter(
            "leasehold_coordinator_ledger_writes_unresolved_total",
            "Ledger group writes without an answer that a read could not settle (they may land later; the term goes on), or that met an earlier write of the term landing late.",
            NO_LABELS,
            s.ledger_writes_unresolved,
        )?;
        m.counter(
            "leasehold_coordinator_ledger_records_written_total",
            "Limits' ledger records written, in groups (DC lease renewals included).",
            NO_LABELS,
            s.records_written,
        )?;
        m.counter(
            "leasehold_coordinator_ledger_groups_oversized_total",
            "Ledger group writes skipped: larger than a KV value may be (their limits are not renewed).",
            NO_LABELS,
            s.groups_oversized,
        )?;
        m.gauge(
            "leasehold_coordinator_ledger_group_bytes_max",
            "Largest ledger group encoded (bytes); a group above the server's max_payload less 4 KiB is not written.",
            NO_LABELS,
            s.ledger_group_bytes_max as f64,
        )?;
        m.counter(
            "leasehold_coordinator_step_downs_total",
            "Terms ended by a failed or fenced write or renewal.",
            NO_LABELS,
            s.step_downs,
        )?;
        m.counter(
            "leasehold_coordinator_reports_malformed_total",
            "Undecodable DC reports.",
            NO_LABELS,
            s.reports_malformed,
        )?;
        m.counter(
            "leasehold_coordinator_reports_ignored_total",
            "DC reports for limits not led here.",
            NO_LABELS,
            s.reports_ignored,
        )?;
        let per_limit = |f: fn(&LimitBooks) -> f64| s.limits.iter().map(move |(l, b)| ([("limit", l.as_str())], f(b)));
        m.gauges(
            "leasehold_ledger_outstanding_rate_per_s",
            "Σ rate of every DC lease still counted.",
            per_limit(|b| b.outstanding.rate_per_s()),
        )?;
        m.gauges("leasehold_ledger_limit_rate_per_s", "The limit's rate R.", per_limit(|b| b.capacity.rate_per_s()))?;
        m.gauges(
            "leasehold_ledger_outstanding_burst",
            "Σ burst of every DC lease still counted.",
            per_limit(|b| b.outstanding.burst()),
        )?;
        m.gauges("leasehold_ledger_limit_burst", "The limit's burst B.", per_limit(|b| b.capacity.burst()))?;
        m.gauges("leasehold_ledger_dc_leases", "DC leases on the books.", per_limit(|b| b.dc_leases as f64))?;
        m.gauge(
            "leasehold_coordinator_limits_defined",
            "Limits with a definition in lh_limits.",
            NO_LABELS,
            s.definitions as f64,
        )?;
        m.counter(
            "leasehold_coordinator_definition_changes_total",
            "Definitions added, changed or removed in lh_limits and taken in.",
            NO_LABELS,
            s.definition_changes,
        )?;
        m.gauge(
            "leasehold_coordinator_definitions_refused",
            "Limits whose stored definition is refused (the one before stays in force).",
            NO_LABELS,
            s.definitions_refused.len() as f64,
        )
    })
}

/// `GET /v1/status`.
#[derive(Serialize)]
struct StatusBody {
    leading: bool,
    epoch: u64,
    takeovers: u64,
    records_written: u64,
    ledger_writes: u64,
    ledger_writes_unresolved: u64,
    groups_oversized: u64,
    ledger_group_bytes_max: u64,
    step_downs: u64,
    reports_malformed: u64,
    limits: BTreeMap<String, LimitBody>,
    /// Limits with a definition this replica runs (`lh_limits`).
    definitions: usize,
    /// Per limit, why its stored definition is refused (the one before stays in force).
    definitions_refused: BTreeMap<String, String>,
}

#[derive(Serialize)]
struct LimitBody {
    limit: Quota,
    outstanding: Quota,
    dc_leases: u32,
    /// Removed from `lh_limits`: nothing is granted, its leases run out.
    retired: bool,
}

impl From<&Status> for StatusBody {
    fn from(s: &Status) -> Self {
        StatusBody {
            leading: s.leading,
            epoch: s.epoch,
            takeovers: s.takeovers,
            records_written: s.records_written,
            ledger_writes: s.ledger_writes,
            ledger_writes_unresolved: s.ledger_writes_unresolved,
            groups_oversized: s.groups_oversized,
            ledger_group_bytes_max: s.ledger_group_bytes_max,
            step_downs: s.step_downs,
            reports_malformed: s.reports_malformed,
            limits: s
                .limits
                .iter()
                .map(|(l, b)| {
                    let body = LimitBody {
                        limit: b.capacity,
                        outstanding: b.outstanding,
                        dc_leases: b.dc_leases,
                        retired: b.retired,
                    };
                    (l.clone(), body)
                })
                .collect(),
            definitions: s.definitions,
            definitions_refused: s.definitions_refused.clone(),
        }
    }
}

async fn status_json(State(status): State<watch::Receiver<Status>>) -> Json<StatusBody> {
    Json(StatusBody::from(&*status.borrow()))
}

/// `clock` is the replica's (its status's times are readings of it); a standby whose view of
/// the leader key is older than `max_view_age_ms` is not ready.
pub(crate) fn router(status: watch::Receiver<Status>, clock: LeaseClock, max_view_age_ms: u64) -> Router {
    let view = status.clone();
    let ready = move || {
        let replica = view.borrow().replica;
        let answer = health::answer(readiness::coordinator(&replica, clock.now_ns(), max_view_age_ms));
        async move { answer }
    };
    Router::new()
        .route("/metrics", metrics::endpoint(registry(status.clone())))
        .route("/v1/status", get(status_json))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(status)
}
