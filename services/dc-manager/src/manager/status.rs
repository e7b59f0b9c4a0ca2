//! What a DC manager replica is doing, for tests, metrics, `/v1/status` and `inspect`: the
//! process as a whole, and each limit it serves.

use super::Manager;
use leasehold_core::dc_manager::{DcCounters, FailMode, SplitMode};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub leading: bool,
    /// Its term and view of the leader key, for `/readyz`.
    pub replica: leasehold_core::readiness::ReplicaView,
    pub epoch: u64,
    pub instance: String,
    pub takeovers: u64,
    /// Whether this term has read every ledger group directly (until then it uses no floor).
    pub ledger_read: bool,
    /// Terms that began without reading the ledger (the link to the hub cut).
    pub terms_without_ledger: u64,
    /// Limits whose watched floor a term that could not read the ledger used because the DC's
    /// floor confirmations vouched for it.
    pub floors_vouched: u64,
    pub step_downs: u64,
    pub dc_leases_applied: u64,
    pub dc_leases_refused: u64,
    pub messages_malformed: u64,
    /// Pod report batches dropped unread: past `inbound_reports_max_bytes` on arrival, or older
    /// than `inbound_reports_max_age_ms` when read (the manager reads reports slower than its
    /// pods send them).
    pub report_batches_shed: u64,
    /// How far behind the clock the cores counted pods' silence at the latest tick: up to the
    /// arrival of the oldest report batch queued unread when the loop last looked (or when it
    /// looked, if none was).
    pub report_read_lag_ms: u64,
    /// Valid pod report batches read by serde_json rather than the manager's own reader (an
    /// extra field, an escaped string, a number written otherwise: `shared/core/src/wire/fast/report_json.rs`).
    pub report_batches_read_by_serde: u64,
    pub publish_failures: u64,
    /// Every limit this term serves.
    pub limits: BTreeMap<String, LimitStatus>,
    /// Sums over the limits (the one limit's values when it serves one; `seconds_since_dc_lease`:
    /// the longest any limit has gone without a DC lease).
    pub totals: LimitStatus,
}

/// One limit's part of a DC manager's term.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitStatus {
    pub pods_eligible: u32,
    /// Eligible pods holding no whole token of burst (they deny every call).
    pub pods_without_token: u32,
    pub pods_known: u32,
    pub pod_leases_issued: u64,
    pub passes_full: u64,
    /// Of `passes_full`, those a DC lease ran and those a joining pod ran.
    pub passes_full_dc_lease: u64,
    pub passes_full_join: u64,
    pub passes_growth: u64,
    pub reports_stale: u64,
    pub returns: u64,
    /// DC leases taken, and the sum of their ages then (since the DC report each answers).
    pub dc_leases_accepted: u64,
    pub dc_lease_age_ms_total: u64,
    pub budget_rate_per_s: f64,
    pub dc_lease_rate_per_s: f64,
    pub used_rate_per_s: f64,
    pub seconds_since_dc_lease: Option<f64>,
    /// When the DC lease in force ends (this manager's clock); none while it runs on the floor.
    pub dc_lease_until_ns: Option<u64>,
    /// In force for this limit: its definition's, else this process's settings.
    pub split: SplitMode,
    pub fail_mode: FailMode,
}

/// How often the tick refreshes every limit's status in full: the pod counts cost a pass over
/// the limit's pods, so with a thousand limits a refresh at every event (or every tick) was most
/// of the manager's work. Counters are refreshed on every tick, and a limit the term begins
/// serving shows at the next tick.
const STATUS_REFRESH_NS: u64 = 1_000_000_000;

impl Manager {
    /// On the tick: [`Manager::refresh_status`] once a second, or at once when the term serves
    /// a limit the status does not show yet; else only the counters (O(limits)).
    pub(crate) fn refresh_status_when_due(&mut self) {
        let now = self.now_ns();
        let served = self.term.as_ref().map_or(0, |t| t.limits.len());
        let due = self.status_refreshed_ns.is_none_or(|t| now.saturating_sub(t) >= STATUS_REFRESH_NS);
        if due || served != self.status.limits.len() {
            return self.refresh_status();
        }
        let Some(term) = self.term.as_ref() else { return };
        for (limit, lt) in &term.limits {
            if let Some(l) = self.status.limits.get_mut(limit) {
                l.set_counters(lt.core.counters());
            }
        }
        self.status.totals = sum(&self.status.limits);
    }

    /// Every limit's status, from its core now.
    pub(crate) fn refresh_status(&mut self) {
        let now = self.now_ns();
        self.status_refreshed_ns = Some(now);
        const HORIZON_NS: u64 = 1_000_000_000;
        let Some(term) = self.term.as_mut() else { return };
        for lt in term.limits.values_mut() {
            lt.admitted_window.retain(|(t, _)| now.saturating_sub(*t) < HORIZON_NS);
        }
        let mut limits = BTreeMap::new();
        for (limit, lt) in &term.limits {
            let c = lt.core.counters();
            let used: u64 = lt.admitted_window.iter().map(|(_, a)| a).sum();
            let mut l = LimitStatus {
                pods_eligible: lt.core.pods_eligible(now),
                pods_without_token: lt.core.pods_without_token(now),
                pods_known: lt.core.pods().count() as u32,
                budget_rate_per_s: lt.core.budget(now).0.rate_per_s(),
                dc_lease_rate_per_s: lt.core.current_lease(now).map_or(0.0, |l| l.quota.rate_per_s()),
                dc_lease_until_ns: lt.core.current_lease(now).map(|l| l.expires_at_ns),
                used_rate_per_s: used as f64,
                seconds_since_dc_lease: lt.last_dc_lease_at_ns.map(|t| self.clock.seconds_since(t)),
                split: lt.core.config().split,
                fail_mode: lt.core.config().fail_mode,
                ..Default::default()
            };
            l.set_counters(c);
            limits.insert(limit.clone(), l);
        }
        let s = &mut self.status;
        s.instance = term.instance.clone();
        s.totals = sum(&limits);
        s.limits = limits;
    }
}

impl LimitStatus {
    fn set_counters(&mut self, c: &DcCounters) {
        self.pod_leases_issued = c.pod_leases_issued;
        self.passes_full = c.passes_full;
        self.passes_full_dc_lease = c.passes_full_dc_lease;
        self.passes_full_join = c.passes_full_join;
        self.passes_growth = c.passes_growth;
        self.reports_stale = c.reports_stale + c.reports_foreign;
        self.returns = c.returns;
        self.dc_leases_accepted = c.dc_leases_accepted;
        self.dc_lease_age_ms_total = c.dc_lease_age_ms_total;
    }
}

/// Sums over `limits` (`seconds_since_dc_lease`: the longest any has gone without a DC lease).
fn sum(limits: &BTreeMap<String, LimitStatus>) -> LimitStatus {
    limits.values().fold(LimitStatus::default(), |t, l| LimitStatus {
        pods_eligible: t.pods_eligible + l.pods_eligible,
        pods_without_token: t.pods_without_token + l.pods_without_token,
        pods_known: t.pods_known + l.pods_known,
        pod_leases_issued: t.pod_leases_issued + l.pod_leases_issued,
        passes_full: t.passes_full + l.passes_full,
        passes_full_dc_lease: t.passes_full_dc_lease + l.passes_full_dc_lease,
        passes_full_join: t.passes_full_join + l.passes_full_join,
        passes_growth: t.passes_growth + l.passes_growth,
        reports_stale: t.reports_stale + l.reports_stale,
        returns: t.returns + l.returns,
        dc_leases_accepted: t.dc_leases_accepted + l.dc_leases_accepted,
        dc_lease_age_ms_total: t.dc_lease_age_ms_total + l.dc_lease_age_ms_total,
        budget_rate_per_s: t.budget_rate_per_s + l.budget_rate_per_s,
        dc_lease_rate_per_s: t.dc_lease_rate_per_s + l.dc_lease_rate_per_s,
        used_rate_per_s: t.used_rate_per_s + l.used_rate_per_s,
        seconds_since_dc_lease: t.seconds_since_dc_lease.into_iter().chain(l.seconds_since_dc_lease).reduce(f64::max),
        ..Default::default()
    })
}
