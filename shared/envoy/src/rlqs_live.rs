//! The token-bucket objects an RLQS issuer has sent that may still exist in some Envoy, and how
//! much they may flow (rate) and hold (burst) at each instant.
//!
//! One Envoy bucket's successive objects form a group. A message on a stream either arrives or
//! is lost with every later one (the stream is ordered), so once a change has settled at most
//! one object of the group exists: the last one delivered. Until then (the delivery margin, or an
//! object's own end when it may have expired unseen), the replaced object may still be drained
//! beside its successor. Hence a group counts its lagging objects in full plus the largest of
//! the others, each until its own end.

use leasehold_core::quota::Quota;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub(super) struct Live {
    pub id: u64,
    /// The Envoy bucket's group (the id of its first object).
    pub group: u64,
    pub quota: Quota,
    /// Counted until then: sent + delivery margin + TTL/(1 − drift), for every renewal.
    pub end_ns: u64,
    /// Replaced or revoked: it may flow beside its successor until then.
    pub lagging_until_ns: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct LiveSet {
    pub items: Vec<Live>,
}

impl LiveSet {
    /// What may flow and be held at `t`: per group, its lagging objects plus its largest other.
    pub(crate) fn at(&self, t: u64) -> Quota {
        self.per_group(t, true)
    }

    /// [`at`](Self::at) once every lag has settled: each group's largest object.
    pub(crate) fn lasting(&self, t: u64) -> Quota {
        self.per_group(t, false)
    }

    fn per_group(&self, t: u64, lags: bool) -> Quota {
        let mut groups: BTreeMap<u64, (Quota, Quota)> = BTreeMap::new();
        for l in self.items.iter().filter(|l| l.end_ns > t) {
            let (lagging, rest) = groups.entry(l.group).or_default();
            if lags && l.lagging_until_ns.is_some_and(|u| t < u) {
                *lagging = lagging.saturating_add(l.quota);
            } else {
                *rest = rest.max(l.quota);
            }
        }
        groups.values().fold(Quota::ZERO, |s, (lagging, rest)| s.saturating_add(*lagging).saturating_add(*rest))
    }

    /// The first instant after `from` and at most `until` at which [`at`](Self::at) may change.
    pub(crate) fn next_event(&self, from: u64, until: u64) -> Option<u64> {
        let ends = self.items.iter().map(|l| l.end_ns);
        let lags = self.items.iter().filter_map(|l| l.lagging_until_ns);
        ends.chain(lags).filter(|&e| e > from && e <= until).min()
    }

    /// Milli-tokens by which this set may flow faster than `rate`, beyond what `before` (the
    /// set without the latest change) already flows, from `now_ns` until every lag settles.
    pub(crate) fn over_rate_milli(&self, before: &LiveSet, rate: u64, now_ns: u64) -> u64 {
        let last = self.items.iter().filter_map(|l| l.lagging_until_ns).max().unwrap_or(now_ns);
        let (mut at, mut total) = (now_ns, 0u128);
        while at < last {
            let next = [self.next_event(at, last), before.next_event(at, last)].into_iter().flatten().min();
            let next = next.unwrap_or(last);
            let allowed = rate.max(before.at(at).rate_milli_per_s);
            let over = self.at(at).rate_milli_per_s.saturating_sub(allowed) as u128;
            total += over * (next - at) as u128;
            at = next;
        }
        total.div_ceil(1_000_000_000) as u64
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Live> {
        self.items.iter_mut().find(|l| l.id == id)
    }

    pub(crate) fn contains_live(&self, id: u64, now_ns: u64) -> bool {
        self.items.iter().any(|l| l.id == id && l.end_ns > now_ns)
    }
}
