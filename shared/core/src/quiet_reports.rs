//! Quiet reports: a limit with nothing new to say leaves its report out of a pod's batch for up
//! to `max_quiet_ms` ([`QuietReports::new`]; 1 s by default), so a pod serving many limits sends
//! about one item per limit per renew period instead of one per report period.
//!
//! Reports drive no safety rule: a lease expires at the send time of the report it answers plus
//! its TTL on the pod's clock, and the DC manager counts every lease until it has expired or the
//! pod confirmed a newer one. A report left out only ages the basis of the next lease (a shorter
//! lease) and delays what the manager learns. So a limit reports at once whenever what it would
//! say matters: its first report, a newly applied lease to confirm (`lease_in_use`: the manager
//! stops counting the older ones), no lease in force (it needs one), a change of health, a drain,
//! a lease in force with less than two quiet stretches left (it went unrenewed: a new manager term
//! continues it only if it hears in time what the pod holds), demand that moved (the rate
//! offered since the last report against the last report's, beyond
//! [`DEMAND_MOVED_RATIO`] and [`DEMAND_MOVED_SLACK_PER_S`]), the report before failed to publish
//! ([`QuietReports::resend_next`]), and every period while upstream errors or 429s were seen in
//! the last [`ERRORS_KEEP_REPORTING_MS`] (adaptive limits read each DC report's calls and 429s as
//! covering its own period: calls bunched into a late report would skew that rate). Otherwise it
//! reports once its silence would pass `max_quiet_ms` by the next tick: bounded in time, not in
//! ticks, so merged or late ticks never stretch it. The default, 1,000 ms, stays within the DC
//! manager's `heartbeat_timeout_ms` (1,500 ms) with a report period to spare. Counters of the
//! periods left out add up into the next report, whose `interval_ms` covers them all and whose
//! `periods` says how many ticks it stands for: the DC manager counts it as that many demand
//! samples and its calls as made over that many periods.

use crate::expiry::NS_PER_MS;
use crate::pod::{IntervalCounters, PodCore};
use crate::wire::{LeaseVersion, PodReport};

/// Default for [`QuietReports::new`]: the longest a quiet limit goes without a report.
pub const DEFAULT_MAX_QUIET_MS: u64 = 1_000;
/// After upstream errors or 429s, a limit reports every period for this long.
pub const ERRORS_KEEP_REPORTING_MS: u64 = 10_000;
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
    max_quiet_ms: u64,
    report_interval_ms: u64,
    /// Counters of the periods left out since the last report.
    pending: IntervalCounters,
    last: Option<LastSent>,
    /// The last report failed to publish: the next tick reports.
    resend: bool,
    /// Pod time until which the limit reports every period (upstream errors or 429s seen).
    loud_until_ns: u64,
    /// Ticks since the last report, this one included: the next report's `periods`.
    periods: u32,
}

impl QuietReports {
    /// A limit reporting every `report_interval_ms` (its pod's period) that stays quiet at most
    /// `max_quiet_ms` (0: it reports every period).
    pub fn new(max_quiet_ms: u64, report_interval_ms: u64) -> Self {
        QuietReports {
            max_quiet_ms,
            report_interval_ms: report_interval_ms.max(1),
            pending: IntervalCounters::default(),
            last: None,
            resend: false,
            loud_until_ns: 0,
            periods: 0,
        }
    }

    /// The last report could not be published (NATS may drop a message): report at the next
    /// tick rather than after a quiet stretch.
    pub fn resend_next(&mut self) {
        self.resend = true;
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
        self.periods = self.periods.saturating_add(1).min(crate::wire::MAX_REPORT_PERIODS);
        if c.errors > 0 || c.upstream_429 > 0 {
            self.loud_until_ns = now_ns.saturating_add(ERRORS_KEEP_REPORTING_MS * NS_PER_MS);
        }
        if !self.due(core, now_ns, healthy) {
            return None;
        }
        let mut report = core.report(now_ns, std::mem::take(&mut self.pending), healthy);
        report.periods = std::mem::take(&mut self.periods).max(1);
        self.resend = false;
        self.last = Some(LastSent {
            lease_in_use: report.lease_in_use,
            healthy,
            offered_per_s: report.offered as f64 * 1_000.0 / report.interval_ms as f64,
        });
        Some(report)
    }

    fn due(&self, core: &PodCore, now_ns: u64, healthy: bool) -> bool {
        let Some(last) = &self.last else { return true };
        let elapsed_ms = (now_ns.saturating_sub(core.counting_since_ns()) / NS_PER_MS).max(1);
        // Silent until the next tick too would pass the bound (half a period of tick jitter).
        let silence_ends = elapsed_ms + self.report_interval_ms / 2 >= self.max_quiet_ms;
        // A lease running low has gone unrenewed (a manager failing over): a new term continues
        // it only if it hears what it holds in time (`PodReport::held`).
        let low_ns = 2 * self.max_quiet_ms * NS_PER_MS;
        if silence_ends
            || self.resend
            || now_ns < self.loud_until_ns
            || core.is_draining()
            || core.applied(now_ns).is_none_or(|a| a.expires_at_ns.saturating_sub(now_ns) < low_ns)
            || core.lease_in_use() != last.lease_in_use
            || healthy != last.healthy
        {
            return true;
        }
        demand_moved(last.offered_per_s, self.pending.offered as f64 * 1_000.0 / elapsed_ms as f64)
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
