//! Sizing a lease for an upstream's hard limit: the one rule every shipped and documented
//! example follows (docs/OPERATIONS.md §2, docs/ARCHITECTURE.md).
//!
//! Buckets refill on each pod's own clock, which may run fast by δ = `max_drift`, and calls
//! permitted together may reach the upstream up to J (the jitter range) apart. So:
//! * an upstream that allows **N calls in any sliding window W** sees at most
//!   `R·(W·(1 + δ) + J) + B` calls in a window: lease `R = ⌊(N − B) / (W·(1 + δ) + J)⌋` whole
//!   calls per second with a small B;
//! * an upstream **token bucket** (rate R, burst B) is drained by a sustained `R·(1 + δ)`: lease
//!   `R / (1 + δ)` (to the milli-call) and a burst of `B − ⌈R·J⌉ − 1`.

use crate::quota::{Quota, MILLI};

/// The most calls any true window of `window_ms` may see under `quota`.
pub fn most_calls_in_window(quota: Quota, window_ms: u64, max_drift: f64, jitter_ms: u64) -> f64 {
    quota.rate_per_s() * permit_span_s(window_ms, max_drift, jitter_ms) + quota.burst()
}

/// The largest whole rate (calls per second) that keeps an upstream allowing `calls` in any
/// `window_ms` within its limit with a burst of `burst` calls.
pub fn sliding_window_rate_per_s(calls: u64, window_ms: u64, burst: u64, max_drift: f64, jitter_ms: u64) -> u64 {
    let span_s = permit_span_s(window_ms, max_drift, jitter_ms);
    (calls.saturating_sub(burst) as f64 / span_s).floor() as u64
}

/// The lease for an upstream token bucket of `rate_per_s` and `burst`.
pub fn token_bucket_quota(rate_per_s: u64, burst: u64, max_drift: f64, jitter_ms: u64) -> Quota {
    let rate_milli = (rate_per_s as f64 * MILLI as f64 / (1.0 + max_drift)).floor();
    let slack = (rate_milli / MILLI as f64 * jitter_ms as f64 / 1_000.0).ceil() + 1.0;
    Quota::new(rate_milli as u64, ((burst as f64 - slack).max(0.0) * MILLI as f64) as u64)
}

/// W·(1 + δ) + J, in seconds: how long the calls of one true window may have been permitted over.
fn permit_span_s(window_ms: u64, max_drift: f64, jitter_ms: u64) -> f64 {
    (window_ms as f64 * (1.0 + max_drift) + jitter_ms as f64) / 1_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partner_api_at_1000_calls_a_second_leases_966() {
        assert_eq!(sliding_window_rate_per_s(1_000, 1_000, 20, 0.01, 4), 966);
        let at = |r: u64| most_calls_in_window(Quota::per_s(r, 20), 1_000, 0.01, 4);
        assert!(at(966) <= 1_000.0 && at(967) > 1_000.0, "{} {}", at(966), at(967));
        assert!(at(976) > 1_005.0, "976/s lets a window see {}", at(976));
    }

    #[test]
    fn the_tenant_at_30000_a_minute_with_a_burst_of_6000_leases_495_and_5997() {
        let q = token_bucket_quota(500, 6_000, 0.01, 4);
        assert_eq!((q.rate_milli_per_s / MILLI, q.burst_milli / MILLI), (495, 5_997));
    }
}
