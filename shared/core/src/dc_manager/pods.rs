//! The DC manager's view of its pods: demand, heartbeats, health.

use crate::ewma::Ewma;
use crate::expiry::NS_PER_MS;
use crate::quota::MILLI;
use crate::sorted_map::{PlaceHint, SortedMap};
use crate::wire::{HeldLease, LeaseVersion, PodReport};

use super::config::DcManagerConfig;
use super::succession::Continuation;
use super::HolderKey;

/// A pod not heard from this long is forgotten ([`Pods::forget_silent`]).
const FORGET_SILENT_AFTER_NS: u64 = super::config::FORGET_SILENT_AFTER_MS * NS_PER_MS;

/// How the driver reads its pods' reports, noted at its ticks: how much of a pod's silence may
/// be the manager's own doing rather than the pod's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportReading {
    /// The latest time it dropped a report batch unread ([`Pods::note_reports_dropped`]).
    pub dropped_at_ns: Option<u64>,
    /// The time up to which it has read: every batch that arrived before then has been read or
    /// dropped ([`Pods::note_reports_read_through`]).
    pub read_through_ns: Option<u64>,
}

impl ReportReading {
    /// The time up to which a pod's silence counts at `now_ns`: what the driver has read, but
    /// never earlier than `max_back_ns` before `now_ns` (a stale noting only keeps pods longer).
    fn silence_until_ns(&self, now_ns: u64, max_back_ns: u64) -> u64 {
        self.read_through_ns.map_or(now_ns, |t| now_ns.min(t.max(now_ns.saturating_sub(max_back_ns))))
    }
}

/// What the manager knows of one pod holder.
#[derive(Clone, Debug)]
pub struct PodView {
    /// The pod process's incarnation.
    pub incarnation: u64,
    /// Smoothed offered demand, in milli-requests per second.
    pub demand: Ewma,
    /// When its last accepted report arrived, on the manager's clock in nanoseconds.
    pub last_seen_ns: u64,
    /// The `seq` of its last accepted report (0 before the first).
    pub last_seq: u64,
    /// `healthy` of its last report.
    pub healthy: bool,
    /// `draining` of its last report.
    pub draining: bool,
    /// `weight` of its last report.
    pub weight: f64,
    /// Upstream errors per admission in its last report (0 under 10 admissions).
    pub error_ratio: f64,
    /// This core has issued the holder a lease since it first (or, after forgetting it, last)
    /// heard from it: a report without a lease in use is no longer a join (the lease may still
    /// be on its way, or the report older than it); the next renewal leases the holder again
    /// if it is eligible then.
    pub sent_a_lease: bool,
    /// The lease version the holder last reported in use that the ledger took: a report naming
    /// it again confirms nothing new (its older leases already end), so the ledger is not asked.
    pub confirmed: Option<LeaseVersion>,
    /// Where the ledger last found the holder (`Ledger::confirm_in_use_at`).
    pub ledger_place: PlaceHint,
    /// The lease in use and what it holds, as its last accepted report said (`held`; only a pod
    /// that honours continuations says it).
    pub held: Option<(LeaseVersion, HeldLease)>,
    /// A continuation this term sent it, not yet confirmed (`succession.rs`).
    pub continuation: Option<Continuation>,
}

impl PodView {
    /// Whether it gets a share in a split at `now_ns`: fresh heartbeat, healthy, not draining,
    /// errors within `max_error_ratio`. A heartbeat is fresh within `heartbeat_timeout_ms`, or
    /// within `heartbeat_timeout_after_drops_ms` (if longer) when the manager dropped a report
    /// batch unread after it last heard from the pod. Silence counts only up to what the manager
    /// has read (`read_through_ns`, at most `heartbeat_timeout_after_drops_ms` back): a report
    /// the pod sent after that may be queued unread.
    pub fn eligible(&self, cfg: &DcManagerConfig, now_ns: u64, reading: ReportReading) -> bool {
        let timeout_ms = match reading.dropped_at_ns {
            Some(at) if at > self.last_seen_ns => cfg.heartbeat_timeout_after_drops_ms.max(cfg.heartbeat_timeout_ms),
            _ => cfg.heartbeat_timeout_ms,
        };
        let until_ns = reading.silence_until_ns(now_ns, cfg.heartbeat_timeout_after_drops_ms.saturating_mul(NS_PER_MS));
        until_ns.saturating_sub(self.last_seen_ns) <= timeout_ms.saturating_mul(NS_PER_MS)
            && self.healthy
            && !self.draining
            && self.error_ratio <= cfg.max_error_ratio
    }

    /// A holder first heard from in `r`.
    fn new(r: &PodReport, cfg: &DcManagerConfig, now_ns: u64) -> Self {
        PodView {
            incarnation: r.incarnation,
            demand: Ewma::new(cfg.ewma_alpha),
            last_seen_ns: now_ns,
            last_seq: 0,
            healthy: true,
            draining: false,
            weight: r.weight,
            error_ratio: 0.0,
            sent_a_lease: false,
            confirmed: None,
            ledger_place: PlaceHint::default(),
            held: None,
            continuation: None,
        }
    }

    /// What its share of a split depends on besides demand: eligibility and weight.
    fn share_inputs(&self, cfg: &DcManagerConfig, now_ns: u64, reading: ReportReading) -> (bool, u64) {
        (self.eligible(cfg, now_ns, reading), self.weight.to_bits())
    }
}

/// What became of a pod report.
#[derive(Debug, PartialEq, Eq)]
pub enum ReportOutcome {
    /// `share_changed`: what the holder's share of a split depends on besides demand (whether
    /// it is eligible, its weight) changed with this report, or the holder is new.
    Accepted {
        /// Whether the holder's share inputs changed, or the holder is new.
        share_changed: bool,
        /// [`PodView::sent_a_lease`] of the holder.
        sent_a_lease: bool,
        /// The lease the report says is in use, unless the holder confirmed it before
        /// ([`PodView::confirmed`], now set to it): the ledger must hear of it.
        to_confirm: Option<LeaseVersion>,
    },
    /// Not newer than the holder's last accepted report: ignored.
    Stale,
    /// A new holder, and the manager already tracks `max_pods`: refused.
    TooManyPods,
    /// The holder has no view and its lease was returned for good (the ledger closed it).
    Closed,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Pods {
    /// In key order (splits go through them so), found by hash.
    pub views: SortedMap<HolderKey, PodView>,
    /// Upstream calls and 429s in the reports accepted since the last DC report (see
    /// [`Pods::take_upstream`]).
    upstream_calls: u64,
    upstream_429: u64,
    /// How the driver reads the reports (its drops, how far it has read), as last noted.
    pub(super) reading: ReportReading,
    /// No view is silent long enough to be forgotten before this (a lower bound: a view's
    /// `last_seen_ns` only moves forward, a new view lowers it, and each sweep makes it exact),
    /// so [`Pods::forget_silent`], called at every tick, sweeps only when one may be.
    forget_due_ns: u64,
}

impl Pods {
    /// `r`, from the holder whose key ([`holder_key`]) is `holder`.
    #[cfg(test)]
    pub(super) fn observe(
        &mut self,
        holder: &HolderKey,
        r: &PodReport,
        cfg: &DcManagerConfig,
        now_ns: u64,
    ) -> ReportOutcome {
        self.observe_unless_closed(holder, &mut PlaceHint::default(), r, cfg, now_ns, || false)
    }

    /// [`Pods::observe`], refusing a holder without a view when `closed()` says its lease was
    /// returned for good. A holder with a view is never closed (closing it drops its view, and
    /// no view is made for a closed holder), so a known holder's report skips the question. The
    /// view is looked for first at `*view_place` ([`SortedMap::place_from`]), which is left at
    /// the view's place (until a view is added or removed).
    pub(super) fn observe_unless_closed(
        &mut self,
        holder: &HolderKey,
        view_place: &mut PlaceHint,
        r: &PodReport,
        cfg: &DcManagerConfig,
        now_ns: u64,
        closed: impl FnOnce() -> bool,
    ) -> ReportOutcome {
        // One lookup for a holder already known (every report but its first).
        let full = self.views.len() >= cfg.max_pods;
        let place = match self.views.place_from(view_place, holder) {
            Some(place) => place,
            None if closed() => return ReportOutcome::Closed,
            None if full => return ReportOutcome::TooManyPods,
            None => self.views.place_or_insert_with(holder, || holder.clone(), || PodView::new(r, cfg, now_ns)),
        };
        *view_place = PlaceHint(place); // (a view just made included)
        let Some(v) = self.views.get_index_mut(place) else { return ReportOutcome::Stale };
        // Seen now (a new view, even one whose first report is stale, or a report accepted
        // below): it may be forgotten a minute from now.
        self.forget_due_ns = self.forget_due_ns.min(now_ns.saturating_add(FORGET_SILENT_AFTER_NS));
        if r.seq <= v.last_seq {
            return ReportOutcome::Stale;
        }
        let reading = self.reading;
        let share_before = (v.last_seq > 0).then(|| v.share_inputs(cfg, now_ns, reading));
        let per_s = r.offered as f64 * 1_000.0 / r.interval_ms as f64;
        // A quiet limit's report stands for `periods` reports: as many samples of its average.
        v.demand.update_times(per_s * MILLI as f64, u64::from(r.periods));
        v.last_seen_ns = now_ns;
        v.last_seq = r.seq;
        v.healthy = r.healthy;
        v.draining = r.draining;
        v.weight = r.weight;
        v.error_ratio = if r.admitted >= 10 { r.errors as f64 / r.admitted as f64 } else { 0.0 };
        // The coordinator reads a DC report's calls as made in that report's period: a quiet
        // limit's report standing for several periods counts the calls of one, at its average
        // rate (its 429s, which a quiet pod reports at once, are recent; a second of calls
        // bunched into one DC report would skew the accepted rate an adaptive limit follows).
        let calls = r.admitted / u64::from(r.periods.max(1));
        self.upstream_calls = self.upstream_calls.saturating_add(calls);
        // A pod cannot see more 429s than it made calls (a bad report counts as many as calls).
        self.upstream_429 = self.upstream_429.saturating_add(r.upstream_429.min(calls));
        v.held = r.lease_in_use.zip(r.held);
        let to_confirm = r.lease_in_use.filter(|&in_use| v.confirmed != Some(in_use));
        v.confirmed = r.lease_in_use.or(v.confirmed);
        ReportOutcome::Accepted {
            share_changed: share_before != Some(v.share_inputs(cfg, now_ns, reading)),
            sent_a_lease: v.sent_a_lease,
            to_confirm,
        }
    }

    /// The driver dropped a report batch unread at `at_ns` (any pod's: the rule does not ask
    /// whose, see docs/PROTOCOL.md): pods last heard before then get
    /// `heartbeat_timeout_after_drops_ms`.
    pub(super) fn note_reports_dropped(&mut self, at_ns: u64) {
        self.reading.dropped_at_ns = self.reading.dropped_at_ns.max(Some(at_ns));
    }

    /// The driver has read (or dropped) every report batch that arrived before `at_ns`: the
    /// arrival of the oldest one it has queued unread, or the time it looked when none was. A
    /// pod's silence counts only up to then; the latest noting stands until the next.
    pub(super) fn note_reports_read_through(&mut self, at_ns: u64) {
        self.reading.read_through_ns = Some(at_ns);
    }

    /// Upstream calls and 429s counted since the last call (for `DcReport.upstream_calls` and
    /// `upstream_429`); the count starts again.
    pub(super) fn take_upstream(&mut self) -> (u64, u64) {
        (std::mem::take(&mut self.upstream_calls), std::mem::take(&mut self.upstream_429))
    }

    /// The [`Pods::eligible`] pods' keys and views, in key order, without copying a key.
    pub(super) fn eligible_views<'a>(
        &'a self,
        cfg: &'a DcManagerConfig,
        now_ns: u64,
    ) -> impl Iterator<Item = (&'a HolderKey, &'a PodView)> + 'a {
        self.views.iter().filter(move |(_, v)| v.eligible(cfg, now_ns, self.reading))
    }

    /// How many pods are eligible, and Σ their smoothed demand (milli-requests per second).
    pub(super) fn eligible_count_and_demand_milli(&self, cfg: &DcManagerConfig, now_ns: u64) -> (usize, u64) {
        self.eligible_views(cfg, now_ns).fold((0, 0), |(n, d), (_, v)| (n + 1, d + v.demand.value() as u64))
    }

    /// Drop pods not heard from for a long time (their leases are tracked by the ledger).
    pub(super) fn forget_silent(&mut self, now_ns: u64) {
        if now_ns < self.forget_due_ns {
            return;
        }
        let mut next_due_ns = u64::MAX;
        self.views.retain(|_, v| {
            let keep = now_ns.saturating_sub(v.last_seen_ns) < FORGET_SILENT_AFTER_NS;
            if keep {
                next_due_ns = next_due_ns.min(v.last_seen_ns.saturating_add(FORGET_SILENT_AFTER_NS));
            }
            keep
        });
        self.forget_due_ns = next_due_ns;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::dc_manager::holder_key;
    use crate::wire::SCHEMA_VERSION;

    /// Pod `p1` (incarnation 7)'s report on limit `l` in `bkk`, every call admitted.
    pub(in crate::dc_manager) fn report(
        seq: u64,
        interval_ms: u64,
        admitted: u64,
        upstream_429: u64,
        periods: u32,
    ) -> PodReport {
        PodReport {
            v: SCHEMA_VERSION,
            limit: "l".into(),
            dc: "bkk".into(),
            pod: "p1".into(),
            incarnation: 7,
            seq,
            interval_ms,
            offered: admitted,
            admitted,
            rejected: 0,
            queued: 0,
            errors: 0,
            upstream_429,
            healthy: true,
            draining: false,
            weight: 1.0,
            lease_in_use: None,
            periods,
            held: None,
        }
    }

    /// Found by a review of quiet reports (FINDINGS F67): calls were prorated by `interval_ms`, so
    /// a pod whose own period is 1 s had three quarters of its calls dropped. Only a report
    /// standing for several periods (a quiet limit's) counts the calls of one.
    #[test]
    fn a_report_counts_its_calls_over_the_periods_it_stands_for() {
        let cfg = DcManagerConfig::new("l", "bkk", "m");
        let mut pods = Pods::default();
        let key = holder_key("p1", 7);
        pods.observe(&key, &report(1, 1_000, 400, 50, 1), &cfg, 0);
        assert_eq!(pods.take_upstream(), (400, 50), "a 1 s pod reporting every period: all of it");
        pods.observe(&key, &report(2, 1_000, 400, 50, 4), &cfg, 0);
        assert_eq!(pods.take_upstream(), (100, 50), "a quiet report of 4 periods: one period's calls");
        pods.observe(&key, &report(3, 1_000, 40, 30, 4), &cfg, 0);
        assert_eq!(pods.take_upstream(), (10, 10), "429s at most the calls counted");
    }

    /// Found by `bench control-plane` (100 pods × 1,000 limits × 2 DCs): a manager dropping
    /// report batches took the pods it dropped them from for gone after 1.5 s, the DC's demand
    /// and pod count moved, the coordinator moved budget, and each move re-split every pod.
    #[test]
    fn a_pod_silent_since_the_manager_dropped_reports_keeps_its_share_longer() {
        const S: u64 = 1_000_000_000;
        let cfg = DcManagerConfig::new("l", "bkk", "m");
        assert_eq!((cfg.heartbeat_timeout_ms, cfg.heartbeat_timeout_after_drops_ms), (1_500, 15_000));
        let eligible = |pods: &Pods, now_ns| pods.eligible_count_and_demand_milli(&cfg, now_ns).0;
        let mut pods = Pods::default();
        let key = holder_key("p1", 7);
        pods.observe(&key, &report(1, 250, 0, 0, 1), &cfg, S);
        assert_eq!(eligible(&pods, S + 3 * S / 2), 1, "heard 1.5 s ago");
        assert_eq!(eligible(&pods, 3 * S), 0, "silent 2 s, the manager dropped nothing");
        pods.note_reports_dropped(S / 2);
        assert_eq!(eligible(&pods, 3 * S), 0, "a drop before the pod was last heard excuses nothing");
        pods.note_reports_dropped(S + 1);
        pods.note_reports_dropped(S / 2);
        assert_eq!(eligible(&pods, 3 * S), 1, "dropped a batch since: maybe the pod's");
        assert_eq!(eligible(&pods, 16 * S), 1, "up to heartbeat_timeout_after_drops_ms");
        assert_eq!(eligible(&pods, 16 * S + 1), 0, "and no longer");
        pods.observe(&key, &report(2, 250, 0, 0, 1), &cfg, 20 * S);
        assert_eq!(eligible(&pods, 22 * S), 0, "heard again after the drop: the usual timeout");
        let mut short = cfg.clone();
        short.heartbeat_timeout_after_drops_ms = 1_000;
        short.validate().unwrap();
        pods.note_reports_dropped(20 * S + 1);
        let short_eligible = |now_ns| pods.eligible_count_and_demand_milli(&short, now_ns).0;
        assert_eq!(short_eligible(21 * S + S / 2), 1, "a shorter setting: heartbeat_timeout_ms holds");
        assert_eq!(short_eligible(21 * S + S / 2 + 1), 0);
        let mut bad = cfg.clone();
        bad.heartbeat_timeout_after_drops_ms = 60_001;
        assert!(bad.validate().unwrap_err().to_string().contains("heartbeat_timeout_after_drops_ms"));
    }

    /// Found by `bench control-plane` (100 pods × 1,000 limits × 2 DCs), after the rule above: a
    /// manager reading its reports up to a second late, without dropping any, took a quiet limit's
    /// pods (one report a second) for gone after 1.5 s.
    #[test]
    fn a_pod_is_silent_only_up_to_what_the_manager_has_read() {
        const S: u64 = 1_000_000_000;
        let cfg = DcManagerConfig::new("l", "bkk", "m");
        let eligible = |pods: &Pods, now_ns| pods.eligible_count_and_demand_milli(&cfg, now_ns).0;
        let mut pods = Pods::default();
        pods.observe(&holder_key("p1", 7), &report(1, 1_000, 0, 0, 1), &cfg, S);
        assert_eq!(eligible(&pods, 3 * S), 0, "silent 2 s, nothing noted: the clock");
        pods.note_reports_read_through(5 * S / 2);
        assert_eq!(eligible(&pods, 3 * S), 1, "read only up to 2.5 s: silent 1.5 s of it");
        pods.note_reports_read_through(5 * S / 2 + 1);
        assert_eq!(eligible(&pods, 3 * S), 0, "and 1 ns more is past the timeout");
        pods.note_reports_read_through(4 * S);
        assert_eq!(eligible(&pods, 3 * S), 0, "a noting later than now counts as now");
        pods.note_reports_read_through(S);
        assert_eq!(eligible(&pods, 16 * S + 3 * S / 2), 1, "still read only up to 1 s: kept 15 s back");
        assert_eq!(eligible(&pods, 16 * S + 3 * S / 2 + 1), 0, "heartbeat_timeout_after_drops_ms back, no further");
        let mut off = cfg.clone();
        off.heartbeat_timeout_after_drops_ms = 0;
        assert_eq!(pods.eligible_count_and_demand_milli(&off, 3 * S).0, 0, "0 turns this excuse off too");
    }

    /// A version confirmed is asked of the ledger once; one it refused, again when named again.
    #[test]
    fn a_lease_in_use_goes_to_the_ledger_once_unless_it_refused_it() {
        let cfg = DcManagerConfig::new("l", "bkk", "m");
        let (mut pods, key) = (Pods::default(), holder_key("p1", 7));
        let to_confirm = |pods: &mut Pods, seq, in_use: Option<u64>| {
            let mut r = report(seq, 250, 0, 0, 1);
            r.lease_in_use = in_use.map(|s| LeaseVersion::new(1, s));
            match pods.observe(&key, &r, &cfg, 0) {
                ReportOutcome::Accepted { to_confirm, .. } => to_confirm.map(|v| v.seq),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(to_confirm(&mut pods, 1, None), None);
        assert_eq!(to_confirm(&mut pods, 2, Some(5)), Some(5));
        assert_eq!(to_confirm(&mut pods, 3, Some(5)), None, "confirmed before");
        assert_eq!(to_confirm(&mut pods, 4, None), None);
        assert_eq!(to_confirm(&mut pods, 5, Some(5)), None, "a report without one forgets nothing");
        assert_eq!(to_confirm(&mut pods, 6, Some(6)), Some(6));
        pods.views.get_mut(&key).unwrap().confirmed = None; // as the core does when the ledger refuses
        assert_eq!(to_confirm(&mut pods, 7, Some(6)), Some(6), "refused: asked again");
    }

    /// A quiet report standing for 4 periods moves the demand average as 4 reports do.
    #[test]
    fn a_quiet_report_moves_demand_as_the_reports_it_stands_for() {
        let cfg = DcManagerConfig::new("l", "bkk", "m");
        let (mut quiet, mut every) = (Pods::default(), Pods::default());
        let key = holder_key("p1", 7);
        quiet.observe(&key, &report(1, 250, 0, 0, 1), &cfg, 0);
        every.observe(&key, &report(1, 250, 0, 0, 1), &cfg, 0);
        quiet.observe(&key, &report(2, 1_000, 400, 0, 4), &cfg, 0);
        for seq in 2..6 {
            every.observe(&key, &report(seq, 250, 100, 0, 1), &cfg, 0);
        }
        let (q, e) = (quiet.views[&key].demand.value(), every.views[&key].demand.value());
        assert!((q - e).abs() < 1e-6, "{q} against {e}");
    }
}
