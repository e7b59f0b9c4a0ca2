//! RLQS, sans I/O: one pod lease lent to Envoy instances as `TokenBucket` quota assignments, so
//! Envoy enforces a share of a Leasehold limit itself with no hop per request.
//!
//! Envoy is not our pod, so the rules follow what Envoy's `rate_limit_quota` filter does with an
//! assignment (read from its source; docs/ENVOY.md cites it): the TTL starts when Envoy processes
//! the message and counts whole seconds; the same bucket sent again keeps its level; a first
//! bucket, or one after a lapse, starts full; a changed bucket starts at the old fill ratio
//! while workers may still drain the old one; a closed stream revokes nothing. The issuer never
//! learns whether a message arrived, so a replaced object counts until its own TTL runs out.
//!
//! The pool keeps every bucket object that may still exist in some Envoy (`live`), each until
//! `sent + delivery margin + TTL/(1 − drift)`, and a reserve `G`:
//! * Σ rate of live objects + G's refill = at most R (G drains while a replaced object and its
//!   successor both flow, and was charged for that in advance); Σ burst of live objects + G =
//!   at most B;
//! * every new object (a first bucket, a change, a renewal that may arrive late) takes its
//!   full `max_tokens` from G when it is sent;
//! * a renewal of the same bucket that surely arrives before it expires is free (Envoy keeps the
//!   object and its level);
//! * no object outlives the lease it was cut from, unless the pool's objects all fit the newer one.
//!
//! Hence Envoy's admissions in any window T are at most R·T + B, the pod's own bucket's bound
//! (with a changing lease: the largest R and B in force, as the DC manager counts a pod's claim).

use super::rlqs_live::{Live, LiveSet};
pub use super::rlqs_timing::RlqsTiming;
use leasehold_core::quota::Quota;
use std::collections::BTreeMap;

const NS_PER_S: u64 = 1_000_000_000;
const MILLI: u64 = 1_000;

/// The `TokenBucket` Envoy is told to enforce: `tokens_per_fill` per 1 s `fill_interval` (kept
/// fixed: Envoy compares only its nanoseconds), holding at most `max_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EnvoyTokenBucket {
    pub max_tokens: u32,
    pub tokens_per_fill: u32,
}

impl EnvoyTokenBucket {
    fn quota(&self) -> Quota {
        Quota::per_s(self.tokens_per_fill as u64, self.max_tokens as u64)
    }
}

/// One Envoy bucket: the stream it was reported on (each stream is a distinct Envoy: a
/// reconnecting or hot-restarted one cannot be told apart) and its `bucket_id`, canonical.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketRef {
    pub stream: u64,
    pub bucket: String,
}

/// What to send for one bucket now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignment {
    TokenBucket {
        bucket: EnvoyTokenBucket,
        ttl_s: u32,
    },
    /// Nothing for this bucket: Envoy denies (a blanket `DENY_ALL`).
    DenyAll {
        ttl_s: u32,
    },
}

#[derive(Clone, Debug, Default)]
struct Tracked {
    /// Requests per second Envoy reported for the bucket (allowed and denied).
    demand_per_s: f64,
    last_report_ns: Option<u64>,
    current: Option<Current>,
    last_sent_ns: Option<u64>,
    last_change_ns: Option<u64>,
    /// Its objects' group in the live set (the id of its first object).
    group: Option<u64>,
    /// Requests reported since `last_report_ns`, not yet turned into a rate.
    pending_requests: u64,
}

#[derive(Clone, Copy, Debug)]
struct Current {
    bucket: EnvoyTokenBucket,
    live_id: u64,
    /// A renewal must arrive by then to find the object still there.
    safe_until_ns: u64,
}

/// The issuer's books for one limit: the pod's lease, G, and every object lent out.
#[derive(Clone, Debug)]
pub struct RlqsPool {
    timing: RlqsTiming,
    bugs: leasehold_core::bugs::KnownBugs,
    /// The newest lease (what shares are cut from).
    lease: Option<(Quota, u64)>,
    /// Every lease applied that has not expired: the DC manager counts each until it expires
    /// (a lending pod never confirms a newer one), so the pod's claim is their largest.
    counted: Vec<(Quota, u64)>,
    reserve_milli: u64,
    reserve_at_ns: u64,
    live: LiveSet,
    next_id: u64,
    buckets: BTreeMap<BucketRef, Tracked>,
}

impl RlqsPool {
    pub fn new(timing: RlqsTiming, bugs: leasehold_core::bugs::KnownBugs, now_ns: u64) -> Self {
        RlqsPool {
            timing,
            bugs,
            lease: None,
            counted: Vec::new(),
            reserve_milli: 0,
            reserve_at_ns: now_ns,
            live: LiveSet::default(),
            next_id: 0,
            buckets: BTreeMap::new(),
        }
    }

    /// The pod's lease for the limit now (a renewal, a new size, or none).
    pub fn set_lease(&mut self, lease: Option<(Quota, u64)>, now_ns: u64) {
        self.advance(now_ns);
        if self.claim(now_ns) == Quota::ZERO {
            // A lease after none (or after a lapse) starts empty, as the pod's bucket does.
            self.reserve_milli = 0;
        }
        let largest = self.lease.map(|(q, _)| q).filter(|_| self.bugs.rlqs_keeps_largest_lease());
        self.lease = lease.filter(|&(_, expires)| expires > now_ns).map(|(q, e)| (largest.map_or(q, |m| m.max(q)), e));
        if let Some(l) = self.lease.filter(|l| !self.counted.contains(l)) {
            self.counted.push(l);
        }
        self.reserve_milli = self.reserve_milli.min(self.reserve_cap());
    }

    /// What the DC manager counts for this pod at `t`: the largest of its unexpired leases.
    fn claim(&self, t: u64) -> Quota {
        self.counted.iter().filter(|(_, e)| *e > t).fold(Quota::ZERO, |m, (q, _)| m.max(*q))
    }

    /// The first instant in (`from`, `until`] at which the flow or the claim may change.
    fn next_event(&self, set: &LiveSet, from: u64, until: u64) -> Option<u64> {
        let expiries = self.counted.iter().map(|(_, e)| *e).filter(|&e| e > from && e <= until);
        set.next_event(from, until).into_iter().chain(expiries).min()
    }

    /// `set` never holds more than the claim, from `from` until `to`: each bucket's largest
    /// object, rate and burst (the rate a replaced one adds while it settles is G's to pay), and
    /// every object that may hold tokens, replaced ones included, within the claim's burst (a
    /// larger lease may expire while a change settles).
    fn fits(&self, set: &LiveSet, from: u64, to: u64) -> bool {
        let mut t = from;
        loop {
            let claim = self.claim(t);
            if !set.lasting(t).fits_in(&claim) || set.at(t).burst_milli > claim.burst_milli {
                return false;
            }
            match self.next_event(set, t, to) {
                Some(next) if next < to => t = next,
                _ => return true,
            }
        }
    }

    /// Envoy reported usage of `bucket` (also how a new bucket first shows up).
    pub fn report(&mut self, bucket: BucketRef, allowed: u64, denied: u64, now_ns: u64) {
        let t = self.buckets.entry(bucket).or_default();
        t.pending_requests = t.pending_requests.saturating_add(allowed.saturating_add(denied));
        let since = *t.last_report_ns.get_or_insert(now_ns);
        let elapsed_ns = now_ns.saturating_sub(since);
        // Envoy's first report of a bucket comes at once, the others every few seconds.
        if elapsed_ns >= NS_PER_S / 2 {
            t.demand_per_s = t.pending_requests as f64 * NS_PER_S as f64 / elapsed_ns as f64;
            t.pending_requests = 0;
            t.last_report_ns = Some(now_ns);
        }
    }

    /// The stream closed: its buckets get nothing more, and what it holds counts until it ends.
    pub fn close_stream(&mut self, stream: u64) {
        self.buckets.retain(|b, _| b.stream != stream);
    }

    /// Requests per second the Envoys want of the limit (their demand, for the pod's reports).
    pub fn demand_per_s(&self) -> f64 {
        self.buckets.values().map(|t| t.demand_per_s).sum()
    }

    /// The lease in force lasts long enough to lend from: an assignment of at least 1 s, sent
    /// now, ends before it does. A pod lease shorter than the TTL and the delivery margin
    /// (the DC manager's `pod_ttl_ms`) lends nothing: Envoy denies.
    pub fn lendable(&self, now_ns: u64) -> bool {
        self.lease.is_some_and(|(_, expires_ns)| self.timing.ttl_within(now_ns, expires_ns) >= 1)
    }

    /// `bucket` is tracked (reported on a stream still open).
    pub fn tracks(&self, bucket: &BucketRef) -> bool {
        self.buckets.contains_key(bucket)
    }

    /// Buckets tracked (on open streams).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// What is lent out now: Σ of the live objects, and the reserve G (milli-tokens).
    pub fn outstanding(&mut self, now_ns: u64) -> (Quota, u64) {
        self.advance(now_ns);
        (self.live.at(now_ns), self.reserve_milli)
    }

    /// Decide what to send now. Call it every few tens of milliseconds.
    pub fn tick(&mut self, now_ns: u64) -> Vec<(BucketRef, Assignment)> {
        self.advance(now_ns);
        let Some((quota, expires_ns)) = self.lease else { return Vec::new() };
        let targets = self.targets(quota);
        let keys: Vec<BucketRef> = self.buckets.keys().cloned().collect();
        let mut out = Vec::new();
        for (key, target) in keys.into_iter().zip(targets) {
            if let Some(a) = self.decide(&key, target, expires_ns, now_ns) {
                out.push((key, a));
            }
        }
        out
    }

    /// Each bucket's share by demand: (1 − reserve) of the rate, half the burst.
    fn targets(&self, quota: Quota) -> Vec<Option<EnvoyTokenBucket>> {
        let n = self.buckets.len();
        let rate_tokens = quota.rate_milli_per_s * (100 - self.timing.reserve_percent as u64) / 100 / MILLI;
        let burst_tokens = quota.burst_milli / 2 / MILLI;
        let total: f64 = self.buckets.values().map(|t| t.demand_per_s).sum();
        self.buckets
            .values()
            .map(|t| {
                let w = if total > 0.0 { t.demand_per_s / total } else { 1.0 / n as f64 };
                let floor_one = |tokens: u64| {
                    let share = (tokens as f64 * w).floor() as u64;
                    if tokens >= n as u64 {
                        share.max(1)
                    } else {
                        share
                    }
                };
                let (rate, burst) = (floor_one(rate_tokens), floor_one(burst_tokens).max(1));
                (rate > 0).then(|| EnvoyTokenBucket {
                    max_tokens: burst.min(u32::MAX as u64) as u32,
                    tokens_per_fill: rate.min(u32::MAX as u64) as u32,
                })
            })
            .collect()
    }

    fn decide(
        &mut self,
        key: &BucketRef,
        target: Option<EnvoyTokenBucket>,
        expires_ns: u64,
        now_ns: u64,
    ) -> Option<Assignment> {
        let timing = self.timing;
        let t = self.buckets.get(key)?.clone();
        let cur = t.current.filter(|c| self.live.contains_live(c.live_id, now_ns));
        let may_change = t.last_change_ns.is_none_or(|at| now_ns >= at + timing.min_change_ms * 1_000_000);
        let renew_due = t.last_sent_ns.is_none_or(|at| now_ns >= at + timing.renew_every_ms * 1_000_000);
        if let (Some(c), Some(want)) = (cur, target) {
            if may_change && moved(c.bucket, want, timing.change_threshold_percent) {
                let lag = now_ns + timing.margin_ns();
                if let Some(sent) = self.start(key, want, Some((c.live_id, lag)), expires_ns, now_ns) {
                    return Some(sent);
                }
                // Not affordable yet: the old object is renewed meanwhile (within its bound).
            }
        }
        match (cur, target) {
            (Some(c), None) if may_change => {
                if let Some(old) = self.live.get_mut(c.live_id) {
                    old.lagging_until_ns = Some(now_ns + timing.margin_ns());
                }
                self.note_sent(key, None, now_ns, true);
                Some(Assignment::DenyAll { ttl_s: timing.ttl_s })
            }
            (Some(c), _) if renew_due => {
                let arrives_ns = now_ns + timing.margin_ns();
                if arrives_ns > c.safe_until_ns && !self.bugs.rlqs_late_renewal_free() {
                    // It may find the object expired: Envoy would start a new, full bucket, while
                    // workers may still drain the old one until it surely ends.
                    let old_end = self.live.get_mut(c.live_id)?.end_ns;
                    return self.start(key, c.bucket, Some((c.live_id, old_end)), expires_ns, now_ns);
                }
                let ttl_s = self.renew(c.live_id, expires_ns, now_ns)?;
                let cur = Current { safe_until_ns: now_ns + timing.shortest_ttl_ns(ttl_s), ..c };
                self.note_sent(key, Some(cur), now_ns, false);
                Some(Assignment::TokenBucket { bucket: c.bucket, ttl_s })
            }
            (None, Some(want)) => self.start(key, want, None, expires_ns, now_ns),
            _ => None,
        }
    }

    /// Send a new object (first, changed, or after a possible lapse) if the pool can pay for it.
    /// `replacing`: the object it replaces, and until when that one may still flow beside it.
    fn start(
        &mut self,
        key: &BucketRef,
        want: EnvoyTokenBucket,
        replacing: Option<(u64, u64)>,
        expires_ns: u64,
        now_ns: u64,
    ) -> Option<Assignment> {
        let ttl_s = self.timing.ttl_within(now_ns, expires_ns);
        if ttl_s == 0 {
            return None;
        }
        let need = want.quota();
        let id = self.next_id + 1;
        let group = self.buckets.get(key)?.group.unwrap_or(id);
        let end_ns = now_ns + self.timing.margin_ns() + self.timing.longest_ttl_ns(ttl_s);
        let mut trial = self.live.clone();
        if let Some((old, until)) = replacing {
            let old = trial.get_mut(old)?;
            old.lagging_until_ns = Some(old.lagging_until_ns.map_or(until, |u| u.max(until)));
        }
        trial.items.push(Live { id, group, quota: need, end_ns, lagging_until_ns: None });
        if !self.fits(&trial, now_ns, end_ns) {
            return None;
        }
        // While a replaced object may still flow beside its successor, G pays in advance for
        // what that adds over the claim; and every new object starts full (or at the old fill
        // ratio while lagging workers still drain the old one): its tokens come out of G too.
        let settled_ns = trial.items.iter().filter_map(|l| l.lagging_until_ns).max().unwrap_or(now_ns);
        let rate = self.claim(settled_ns.saturating_sub(1).max(now_ns)).rate_milli_per_s;
        let burst_debit = if self.bugs.rlqs_new_bucket_unpaid() { 0 } else { need.burst_milli };
        let overlap = trial.over_rate_milli(&self.live, rate, now_ns);
        let debit = burst_debit.saturating_add(overlap);
        if debit > self.reserve_milli {
            return None;
        }
        self.live = trial;
        self.next_id = id;
        self.reserve_milli -= debit;
        self.reserve_milli = self.reserve_milli.min(self.reserve_cap());
        if let Some(t) = self.buckets.get_mut(key) {
            t.group = Some(group);
        }
        let cur = Current { bucket: want, live_id: id, safe_until_ns: now_ns + self.timing.shortest_ttl_ns(ttl_s) };
        self.note_sent(key, Some(cur), now_ns, true);
        Some(Assignment::TokenBucket { bucket: want, ttl_s })
    }

    fn note_sent(&mut self, key: &BucketRef, cur: Option<Current>, now_ns: u64, changed: bool) {
        if let Some(t) = self.buckets.get_mut(key) {
            t.current = cur;
            t.last_sent_ns = Some(now_ns);
            if changed {
                t.last_change_ns = Some(now_ns);
            }
        }
    }

    /// Extend `live_id`'s end by a renewal sent now, with the longest TTL (up to the newest
    /// lease's expiry) the claim holds until the new end; none: no renewal.
    fn renew(&mut self, live_id: u64, expires_ns: u64, now_ns: u64) -> Option<u32> {
        let old_end = self.live.get_mut(live_id)?.end_ns;
        let mut ttl_s = self.timing.ttl_within(now_ns, expires_ns);
        while ttl_s >= 1 {
            let end_ns = old_end.max(now_ns + self.timing.margin_ns() + self.timing.longest_ttl_ns(ttl_s));
            self.live.get_mut(live_id)?.end_ns = end_ns;
            if self.fits(&self.live, old_end, end_ns) {
                return Some(ttl_s);
            }
            ttl_s -= 1;
        }
        self.live.get_mut(live_id)?.end_ns = old_end;
        None
    }

    fn reserve_cap(&self) -> u64 {
        let held = self.live.at(self.reserve_at_ns).burst_milli;
        self.claim(self.reserve_at_ns).burst_milli.saturating_sub(held)
    }

    /// Refill G up to `now_ns`, one stretch at a time between the instants the flow or the
    /// claim changes (an end, a settled change, a lease's expiry); an end never refills G at once.
    fn advance(&mut self, now_ns: u64) {
        while let Some(at) = self.next_event(&self.live, self.reserve_at_ns, now_ns) {
            self.refill_to(at);
            self.live.items.retain(|l| l.end_ns > at);
            self.counted.retain(|(_, e)| *e > at);
        }
        self.refill_to(now_ns.max(self.reserve_at_ns));
    }

    fn refill_to(&mut self, at_ns: u64) {
        if at_ns > self.reserve_at_ns {
            // G fills at what the claim leaves; a replaced object and its successor may flow past
            // it for a moment, and G pays (it was charged in advance).
            let claim = self.claim(self.reserve_at_ns).rate_milli_per_s;
            let flowing = self.live.at(self.reserve_at_ns).rate_milli_per_s;
            let dt = (at_ns - self.reserve_at_ns) as u128;
            if flowing <= claim {
                let gained = ((claim - flowing) as u128 * dt / NS_PER_S as u128) as u64;
                self.reserve_milli = self.reserve_milli.saturating_add(gained);
            } else {
                let owed = (((flowing - claim) as u128 * dt).div_ceil(NS_PER_S as u128)) as u64;
                self.reserve_milli = self.reserve_milli.saturating_sub(owed);
            }
        }
        self.reserve_at_ns = self.reserve_at_ns.max(at_ns);
        if self.claim(self.reserve_at_ns) == Quota::ZERO {
            self.reserve_milli = 0;
        }
        self.reserve_milli = self.reserve_milli.min(self.reserve_cap());
    }
}

/// The share moved by more than `threshold_percent` (in rate or burst).
fn moved(have: EnvoyTokenBucket, want: EnvoyTokenBucket, threshold_percent: u32) -> bool {
    let off = |a: u32, b: u32| (a.abs_diff(b) as u64) * 100 > threshold_percent as u64 * a.max(1) as u64;
    off(have.tokens_per_fill, want.tokens_per_fill) || off(have.max_tokens, want.max_tokens)
}

#[cfg(test)]
#[path = "rlqs_pool_tests.rs"]
mod tests;
