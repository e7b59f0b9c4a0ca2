//! The strict upstream: counts every call it receives and rejects (429) any call that would break
//! the hard limit. Its counters are the judge of every run. A sliding-window limit is judged by
//! [`SlidingWindow`], the same judge the mock upstream serves over HTTP.

use crate::sliding_window::SlidingWindow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HardLimit {
    /// At most `calls` in any sliding window of `window_ms` (the partner API at 1,000 QPS).
    SlidingWindow { calls: u64, window_ms: u64 },
    /// Admissions in any window T at most `rate_per_s · T + burst` (the tenant with rate and burst:
    /// R and B).
    TokenBucket { rate_per_s: u64, burst: u64 },
}

impl HardLimit {
    /// Calls allowed in one second: the denominator of `max_window_ratio`.
    pub fn per_second(&self) -> u64 {
        match *self {
            HardLimit::SlidingWindow { calls, window_ms } => calls * 1_000 / window_ms,
            HardLimit::TokenBucket { rate_per_s, burst } => rate_per_s + burst,
        }
    }

    /// The sustainable rate: the cap in the utilization denominator.
    pub fn sustained_per_s(&self) -> u64 {
        match *self {
            HardLimit::SlidingWindow { calls, window_ms } => calls * 1_000 / window_ms,
            HardLimit::TokenBucket { rate_per_s, .. } => rate_per_s,
        }
    }
}

/// How calls are judged, with the judge's state.
enum Rule {
    SlidingWindow(SlidingWindow),
    /// GCRA; `tat_units`: theoretical arrival time in ns·rate units.
    TokenBucket {
        rate_per_s: u64,
        burst: u64,
        tat_units: u128,
    },
}

pub struct Upstream {
    limit: HardLimit,
    rule: Rule,
    /// Calls still travelling (arrival time, calling pod, return latency), released in time order.
    in_flight: BinaryHeap<Reverse<(u64, usize, u64)>>,
    /// The partner's hidden limit, if the scenario has one: it answers 429s to the pods.
    pub partner: Option<crate::partner::Partner>,
    /// Every call in the last second (for the max-window ratio).
    last_second: VecDeque<u64>,
    pub calls: u64,
    pub rejected: u64,
    pub max_1s_calls: u64,
    pub first_rejection_ns: Option<u64>,
}

const NS: u128 = 1_000_000_000;

impl Upstream {
    pub fn new(limit: HardLimit) -> Self {
        let rule = match limit {
            HardLimit::SlidingWindow { calls, window_ms } => Rule::SlidingWindow(SlidingWindow::new(calls, window_ms)),
            HardLimit::TokenBucket { rate_per_s, burst } => Rule::TokenBucket { rate_per_s, burst, tat_units: 0 },
        };
        Upstream {
            limit,
            rule,
            in_flight: BinaryHeap::new(),
            partner: None,
            last_second: VecDeque::new(),
            calls: 0,
            rejected: 0,
            max_1s_calls: 0,
            first_rejection_ns: None,
        }
    }

    pub fn limit(&self) -> HardLimit {
        self.limit
    }

    /// A call leaves pod `pod`; it reaches the upstream at `arrival_ns`, and its answer reaches
    /// the pod `return_ns` later.
    #[inline]
    pub fn send(&mut self, arrival_ns: u64, pod: usize, return_ns: u64) {
        self.in_flight.push(Reverse((arrival_ns, pod, return_ns)));
    }

    /// Judge every call that has arrived by `now_ns` (no call can arrive earlier later on).
    pub fn advance(&mut self, now_ns: u64) {
        while let Some(&Reverse((t, pod, return_ns))) = self.in_flight.peek() {
            if t > now_ns {
                break;
            }
            self.in_flight.pop();
            self.judge(t);
            if let Some(p) = self.partner.as_mut() {
                p.judge(t, pod, return_ns);
            }
        }
    }

    fn judge(&mut self, t: u64) {
        self.calls += 1;
        while self.last_second.front().is_some_and(|&s| s + 1_000_000_000 <= t) {
            self.last_second.pop_front();
        }
        self.last_second.push_back(t);
        self.max_1s_calls = self.max_1s_calls.max(self.last_second.len() as u64);
        let ok = match &mut self.rule {
            Rule::SlidingWindow(window) => window.call(t),
            Rule::TokenBucket { rate_per_s, burst, tat_units } => {
                let r = *rate_per_s as u128;
                let now_units = t as u128 * r;
                let tau = *burst as u128 * NS;
                let new_tat = (*tat_units).max(now_units) + NS;
                // GCRA, starting full: the first `burst` calls at t=0 conform.
                if new_tat - now_units <= tau {
                    *tat_units = new_tat;
                    true
                } else {
                    false
                }
            }
        };
        if !ok {
            self.rejected += 1;
            self.first_rejection_ns.get_or_insert(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window_rejects_the_call_over_the_limit() {
        let mut u = Upstream::new(HardLimit::SlidingWindow { calls: 3, window_ms: 1_000 });
        for t in [0, 100, 200, 300] {
            u.send(t * 1_000_000, 0, 0);
        }
        u.send(1_000_000_000, 0, 0); // the first call left the window
        u.advance(u64::MAX);
        assert_eq!((u.calls, u.rejected), (5, 1));
        assert_eq!(u.max_1s_calls, 4);
    }

    #[test]
    fn token_bucket_allows_burst_then_rate() {
        let mut u = Upstream::new(HardLimit::TokenBucket { rate_per_s: 10, burst: 5 });
        for _ in 0..5 {
            u.send(0, 0, 0);
        }
        u.send(0, 0, 0); // sixth at t=0: over the burst
        u.send(100_000_000, 0, 0); // one token refilled after 100 ms
        u.send(100_000_001, 0, 0);
        u.advance(u64::MAX);
        assert_eq!(u.rejected, 2, "the 6th call and the one after the refilled token");
    }
}
