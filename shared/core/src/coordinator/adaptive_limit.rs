//! An adaptive limit on the coordinator's books (see [`crate::aimd`]): the DC reports'
//! upstream calls and 429s are summed per renew period, the [`Aimd`] turns them into an
//! effective R, and a changed one is taken through the same path as a limit changed live
//! ([`CoordinatorCore::take_capacity`]): a decrease shrinks the books at once (every DC lease
//! out is inherited and counts until it ends), an increase applies at once. Only R adapts; B is
//! the configured one. The record carries the effective R so the next leader resumes from it.

use super::{CoordinatorCore, LimitConfig};
use crate::aimd::{Aimd, UpstreamSample};
use crate::expiry::NS_PER_S;
use crate::quota::Quota;
use crate::wire::DcReport;
use std::collections::BTreeMap;

/// One DC's upstream counts since the last period.
#[derive(Clone, Debug, Default)]
struct DcUpstream {
    calls: u64,
    upstream_429: u64,
    /// Time the counted reports cover: the gaps between their arrivals (coordinator clock).
    covered_ns: u64,
    /// The same for the reports that carried 429s (the upstream was saturated then).
    saturated_accepted: u64,
    saturated_ns: u64,
}

impl DcUpstream {
    /// Accepted calls per second while saturated, or over the whole period if never; a DC
    /// heard only once in the period: over `period_ns`.
    fn accepted_per_s(&self, period_ns: u64) -> f64 {
        let (accepted, span_ns) = if self.saturated_ns > 0 {
            (self.saturated_accepted, self.saturated_ns)
        } else {
            (
                self.calls.saturating_sub(self.upstream_429),
                if self.covered_ns > 0 { self.covered_ns } else { period_ns },
            )
        };
        if span_ns == 0 {
            return 0.0;
        }
        accepted as f64 * NS_PER_S as f64 / span_ns as f64
    }
}

#[derive(Clone, Debug)]
pub(super) struct Adaptive {
    aimd: Aimd,
    per_dc: BTreeMap<String, DcUpstream>,
    period_start_ns: Option<u64>,
}

impl Adaptive {
    /// The state for `cfg` (none unless it opts in), resuming from `effective_milli` if given.
    pub(super) fn for_config(cfg: &LimitConfig, effective_milli: Option<u64>) -> Option<Self> {
        let a = cfg.adaptive.clone()?;
        let (r, floors) = (cfg.quota.rate_milli_per_s, cfg.floors().rate_milli_per_s);
        let aimd = match effective_milli {
            Some(e) => Aimd::resume(a, r, floors, e),
            None => Aimd::new(a, r, floors),
        };
        Some(Adaptive { aimd, per_dc: BTreeMap::new(), period_start_ns: None })
    }

    /// This state carried over to a changed definition `cfg` (none if it no longer opts in).
    pub(super) fn reconfigured(this: Option<&Self>, cfg: &LimitConfig) -> Option<Self> {
        let a = cfg.adaptive.clone()?;
        let Some(this) = this else { return Adaptive::for_config(cfg, None) };
        let mut next = this.clone();
        next.aimd.reconfigure(a, cfg.quota.rate_milli_per_s, cfg.floors().rate_milli_per_s);
        Some(next)
    }

    /// The books' capacity for configured `quota`: the effective R with the configured B.
    pub(super) fn capacity(&self, quota: Quota) -> Quota {
        Quota::new(self.aimd.effective_milli().min(quota.rate_milli_per_s), quota.burst_milli)
    }

    /// Sum the period's counts into one sample: each DC's accepted rate (see
    /// [`DcUpstream::accepted_per_s`]) summed.
    fn take_sample(&mut self, now_ns: u64) -> UpstreamSample {
        let period_ns = self.period_start_ns.map_or(0, |t| now_ns.saturating_sub(t));
        self.period_start_ns = Some(now_ns);
        let mut s = UpstreamSample::default();
        for d in std::mem::take(&mut self.per_dc).into_values() {
            s.calls = s.calls.saturating_add(d.calls);
            s.upstream_429 = s.upstream_429.saturating_add(d.upstream_429);
            s.accepted_per_s += d.accepted_per_s(period_ns);
        }
        s
    }
}

impl CoordinatorCore {
    /// R and B the books run with now: the configured ones, or an adaptive limit's effective R
    /// with the configured B. For status and metrics.
    pub fn effective_quota(&self) -> Quota {
        self.adaptive.as_ref().map_or(self.cfg.quota, |a| a.capacity(self.cfg.quota))
    }

    /// Count an accepted DC report's upstream calls and 429s; `previous_ns` is when the DC's
    /// previous report arrived.
    pub(super) fn note_upstream(&mut self, r: &DcReport, previous_ns: Option<u64>, now_ns: u64) {
        let timeout_ns = self.cfg.report_timeout_ms.saturating_mul(1_000_000);
        let Some(a) = self.adaptive.as_mut() else { return };
        let d = a.per_dc.entry(r.dc.clone()).or_default();
        let r429 = r.upstream_429.min(r.upstream_calls);
        d.calls = d.calls.saturating_add(r.upstream_calls);
        d.upstream_429 = d.upstream_429.saturating_add(r429);
        if let Some(gap) = previous_ns.map(|p| now_ns.saturating_sub(p)).filter(|g| *g <= timeout_ns) {
            d.covered_ns = d.covered_ns.saturating_add(gap);
            if r429 > 0 {
                d.saturated_accepted = d.saturated_accepted.saturating_add(r.upstream_calls - r429);
                d.saturated_ns = d.saturated_ns.saturating_add(gap);
            }
        }
    }

    /// One renew period of an adaptive limit: a changed effective R is taken at once. True if
    /// the books' capacity changed.
    pub(super) fn adapt(&mut self, now_ns: u64) -> bool {
        let quota = self.cfg.quota;
        let Some(a) = self.adaptive.as_mut() else { return false };
        let before = a.capacity(quota);
        let sample = a.take_sample(now_ns);
        a.aimd.on_period(sample);
        let after = a.capacity(quota);
        if after == before {
            return false;
        }
        self.take_capacity(after, now_ns);
        true
    }

    /// The effective R for the durable record, when it is below the configured one.
    pub(super) fn adaptive_record(&self) -> Option<u64> {
        let rate = self.adaptive.as_ref()?.capacity(self.cfg.quota).rate_milli_per_s;
        (rate < self.cfg.quota.rate_milli_per_s).then_some(rate)
    }
}
