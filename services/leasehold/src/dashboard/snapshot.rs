//! What `GET /api/state` returns and `/api/events` sends once a period: the whole picture the
//! page draws, as JSON. Rates in tokens per second, ages in seconds, times in milliseconds on
//! the view's clock (`now_ms`). Documented in docs/PROTOCOL.md, "The live view".

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    pub now_ms: u64,
    pub coordinator_leader: Option<String>,
    /// The ledger fence's epoch: the highest coordinator term that may have written records.
    pub fence_epoch: Option<u64>,
    /// DC → the DC manager replica leading it.
    pub dc_leaders: BTreeMap<String, String>,
    /// Every limit heard of; `limits` holds the first `--limits-shown` by name.
    pub limits_total: usize,
    pub limits: Vec<LimitCard>,
    /// DC → pods heard in the last 30 s; `pods` holds the `--pods-shown` stalest of each DC.
    pub pods_total: BTreeMap<String, usize>,
    pub pods: BTreeMap<String, Vec<PodRow>>,
    /// Takeovers, fence raises and records changing writer, newest first.
    pub events: Vec<Event>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LimitCard {
    pub name: String,
    /// The capacity the ledger's writer runs on (an adaptive limit's effective R); `None`
    /// before a record names it.
    pub rate_per_s: Option<f64>,
    pub burst: Option<f64>,
    /// Σ the record counts: each holder's largest DC lease plus every DC's reserved floor.
    pub outstanding_rate_per_s: Option<f64>,
    pub outstanding_burst: Option<f64>,
    pub epoch: Option<u64>,
    pub writer: Option<String>,
    pub dcs: Vec<DcRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DcRow {
    pub dc: String,
    pub leader: Option<String>,
    /// The DC manager's EWMA-smoothed demand, from its last report.
    pub demand_per_s: f64,
    /// The DC's newest DC lease plus its floor.
    pub allocated_per_s: f64,
    pub floor_per_s: f64,
    /// Σ admitted per second in the pods' fresh reports.
    pub used_per_s: f64,
    pub pods_healthy: Option<u32>,
    pub holder: Option<String>,
    pub lease_version: Option<String>,
    pub lease_ttl_ms: Option<u64>,
    pub since_report_s: Option<f64>,
    /// One sample a period, oldest first.
    pub history: Vec<Sample>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PodRow {
    pub id: String,
    pub since_heard_s: f64,
    pub limits: Vec<PodLimitRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PodLimitRow {
    pub limit: String,
    pub rate_per_s: Option<f64>,
    pub burst: Option<f64>,
    pub version: Option<String>,
    pub ttl_ms: Option<u64>,
    /// Seconds since its last lease message: a renewal every renew period when healthy.
    pub since_renewal_s: Option<f64>,
    pub admitted_per_s: f64,
    pub offered_per_s: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Event {
    pub at_ms: u64,
    pub text: String,
}

/// One sample of a DC's numbers for a limit (tokens per second).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Sample {
    pub at_ms: u64,
    pub demand_per_s: f64,
    pub allocated_per_s: f64,
    pub used_per_s: f64,
}
