//! Quiet reports: a limit with nothing new to say leaves its report out of a pod's batch for up
//! to [`QuietReports::max_quiet_periods`] report periods in a row, so a pod serving many limits
//! sends about one item per limit per renew period instead of one per report period.
//!
//! Reports drive no safety rule: a lease expires at the send time of the report it answers plus
//! its TTL on the pod's clock, and the DC manager counts every lease until it has expired or the
//! pod confirmed a newer one. A report left out only ages the basis of the next lease (a shorter
//! lease) and delays what the manager learns. So a limit reports at once whenever what it would
//! say matters: its first report, a newly applied lease to confirm (`lease_in_use`: the manager
//! stops counting the older ones), a change of health, upstream errors or 429s, a drain, and
//! demand that moved (the rate offered since the last report against the last report's, beyond
//! [`DEMAND_MOVED_RATIO`] and [`DEMAND_MOVED_SLACK_PER_S`]). Otherwise it reports every
//! `max_quiet_periods + 1` periods, its heartbeat: the default, 3, makes one report per second at
//! the default 250 ms period, within the DC manager's `heartbeat_timeout_ms` (1,500 ms) with two
//! periods to spare. Counters of the periods left out add up into the next report, whose
//! `interval_ms` covers them all.

use crate::expiry::NS_PER_MS;
use crate::pod::{IntervalCounters, PodCore};
use crate::wire::{LeaseVersion, PodReport};

/// Default for [`QuietReports::new`]: report periods a quiet limit may leave out in a row.
pub const DEFAULT_MAX_QUIET_PERIODS: u32 = 3;
/// Demand moved when the larger of the two rates exceeds the smaller times this plus
/// [`DEMAND_MOVED_SLACK_PER_S`].
pub const DEMAND_MOVED_RATIO: f64 = 1.25;
/// Requests per second a rate may move without counting as moved (one request per default
/// report period): small counts jitter from period to period.
pub const DEMAND_MOVED_SLACK_PER_S: f64 = 4.0;

/// What the last report sent said, to judge whether the next has news.
#[derive(Clone, Debug, PartialEq)]
struct LastSent {
    lease_in_use: Option<LeaseVersion>,
    healthy: bool,
    offered_per_s: f64,
}

/// One limit's report decisions (a pod keeps one per limit, beside its [`PodCore`]).
#[derive(Clone, Debug)]
pub struct QuietReports {
    max_quiet_periods: u32,
    /// Counters of the periods left out since the last report.
    pending: IntervalCounters,
    /// Periods left out in a row.
    quiet: u32,
    last: Option<LastSent>,
}

impl QuietReports {
    /// `max_quiet_periods` 0: report every period.
    pub fn new(max_quiet_periods: u32) -> Self {
        QuietReports { max_quiet_periods, pending: IntervalCounters::default(), quiet: 0, last: None }
    }

    pub fn max_quiet_periods(&self) -> u32 {
        self.max_quiet_periods
    }

    /// Call every report period with the period's counters: the report to send now, or `None`
    /// when the limit has nothing new and may stay quiet (its counters wait for the next one).
    pub fn tick(&mut self, core: &mut PodCore, now_ns: u64, c: IntervalCounters, healthy: bool) -> Option<PodReport> {
        let p = &mut self.pending;
        p.offered = p.offered.saturating_add(c.offered);
        p.admitted = p.admitted.saturating_add(c.admitted);
        p.rejected = p.rejected.saturating_add(c.rejected);
        p.errors = p.errors.saturating_add(c.errors);
        p.upstream_429 = p.upstream_429.saturating_add(c.upstream_429);
        p.queued = c.queued; // a gauge: the latest
        if !self.due(core, now_ns, healthy) {
            self.quiet += 1;
            return None;
        }
        let report = core.report(now_ns, std::mem::take(&mut self.pending), healthy);
        self.quiet = 0;
        self.last = Some(LastSent {
            lease_in_use: report.lease_in_use,
            healthy,
            offered_per_s: report.offered as f64 * 1_000.0 / report.interval_ms as f64,
        });
        Some(report)
    }

    fn due(&self, core: &PodCore, now_ns: u64, healthy: bool) -> bool {
        let Some(last) = &self.last else { return true };
        let p = &self.pending;
        if self.quiet >= self.max_quiet_periods
            || core.is_draining()
            || core.lease_in_use() != last.lease_in_use
            || healthy != last.healthy
            || p.errors > 0
            || p.upstream_429 > 0
        {
            return true;
        }
        let elapsed_ms = (now_ns.saturating_sub(core.counting_since_ns()) / NS_PER_MS).max(1);
        demand_moved(last.offered_per_s, p.offered as f64 * 1_000.0 / elapsed_ms as f64)
    }
}

/// Whether an offered rate moved from `before` to `now` (requests per second) by more than
/// report-to-report jitter.
pub fn demand_moved(before: f64, now: f64) -> bool {
    let (low, high) = if before <= now { (before, now) } else { (now, before) };
    high > low * DEMAND_MOVED_RATIO + DEMAND_MOVED_SLACK_PER_S
}

#[cfg(test)]
#[path = "quiet_reports_tests.rs"]
mod tests;
