//! Clock-skew-safe lease expiry.
//!
//! **Assumption.** Every process has a monotonic clock with an arbitrary *offset* and a bounded
//! *rate* error: over any interval, the durations measured by two directly connected processes
//! (pod ↔ DC manager, DC manager ↔ coordinator) differ by at most a factor `1 + max_drift`.
//! No absolute timestamp is ever compared across processes; only durations travel on the wire.
//!
//! * The **holder** starts its countdown when it *sent* the request the lease answers (its own
//!   clock), so its local expiry is `sent_at + ttl`. The lease was issued after that send.
//! * The **issuer** counts the lease as live until `issued_at + ttl·(1 + max_drift) + grace`
//!   (its own clock). Because the holder's countdown started earlier and its clock may run at most
//!   `max_drift` slower, the holder has stopped using the lease by then.
//! * A **nested** lease (pod cut from a DC lease) must end, in the holder's terms, before the
//!   parent ends in the issuer's terms: see [`ExpiryPolicy::nested_ttl_ms`].

use serde::{Deserialize, Serialize};

/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// How long issuers and holders count a lease, with margins for clock drift, processing and
/// latency.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExpiryPolicy {
    /// Bound on the relative clock-rate difference between an issuer and its holder (0.01 = 1%).
    pub max_drift: f64,
    /// Extra margin the issuer adds for processing and rounding, in milliseconds.
    pub grace_ms: u64,
    /// Largest difference in latency from holders to the upstream (plus its jitter range), in ms.
    /// A released or expired lease keeps counting this much longer, because calls it admitted may
    /// still be on their way while a holder with a shorter path already spends the freed share.
    #[serde(default)]
    pub egress_spread_ms: u64,
}

impl Default for ExpiryPolicy {
    fn default() -> Self {
        ExpiryPolicy { max_drift: 0.01, grace_ms: 100, egress_spread_ms: 0 }
    }
}

impl ExpiryPolicy {
    /// Issuer-side instant (issuer clock, ns) until which a lease issued at `issued_at_ns`
    /// with `ttl_ms` must still be counted as possibly in use.
    pub fn issuer_live_until_ns(&self, issued_at_ns: u64, ttl_ms: u64) -> u64 {
        let stretched_ns = (ttl_ms as f64 * (1.0 + self.max_drift) * NS_PER_MS as f64).ceil() as u64;
        issued_at_ns.saturating_add(stretched_ns).saturating_add((self.grace_ms + self.egress_spread_ms) * NS_PER_MS)
    }

    /// Issuer-side instant until which a lease the holder just gave up (confirmed superseded or
    /// returned at `now_ns`) must still be counted: calls it admitted may still be in flight.
    pub fn released_until_ns(&self, now_ns: u64) -> u64 {
        now_ns.saturating_add(self.egress_spread_ms * NS_PER_MS)
    }

    /// Longest TTL (ms) an issuer may give a child lease at `now_ns` (issuer clock) so that the
    /// child ends before the issuer's own parent lease ends at `parent_expiry_ns` (issuer clock).
    /// Returns 0 when no child lease may be issued.
    pub fn nested_ttl_ms(&self, now_ns: u64, parent_expiry_ns: u64, wanted_ttl_ms: u64) -> u64 {
        let left_ns = parent_expiry_ns.saturating_sub(now_ns).saturating_sub(self.grace_ms * NS_PER_MS);
        let fit_ms = (left_ns as f64 / (1.0 + self.max_drift) / NS_PER_MS as f64).floor() as u64;
        fit_ms.min(wanted_ttl_ms)
    }

    /// Checks that `max_drift` is in [0, 0.5).
    pub fn validate(&self) -> Result<(), crate::InvalidSetting> {
        if !(0.0..0.5).contains(&self.max_drift) || !self.max_drift.is_finite() {
            return Err(crate::InvalidSetting::MaxDrift(self.max_drift));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuer_outlives_a_slow_holder_that_started_earlier() {
        let p = ExpiryPolicy { max_drift: 0.01, grace_ms: 0, egress_spread_ms: 0 };
        // Holder sent at real 0, issuer issued at real 50 ms; holder clock 1% slow.
        let holder_real_end_ms = 5_000.0 / 0.99; // slow clock: 5 s local takes longer in real time
        let issuer_until_ms = 50.0 + p.issuer_live_until_ns(0, 5_000) as f64 / NS_PER_MS as f64;
        assert!(issuer_until_ms >= holder_real_end_ms - 0.1, "{issuer_until_ms} < {holder_real_end_ms}");
    }

    #[test]
    fn nested_ttl_never_reaches_past_parent() {
        let p = ExpiryPolicy::default();
        let now = 1_000 * NS_PER_MS;
        let parent = now + 3_000 * NS_PER_MS;
        let ttl = p.nested_ttl_ms(now, parent, 5_000);
        assert!(ttl < 3_000);
        assert!(now + (ttl as f64 * 1.01) as u64 * NS_PER_MS + p.grace_ms * NS_PER_MS <= parent);
        assert_eq!(p.nested_ttl_ms(now, now, 5_000), 0);
    }
}

/// A process's clock as a chaos run or a test skews it: `elapsed_ns` since the process started,
/// running fast or slow by `drift_ppm` (parts per million, clamped to ±10%), plus `offset_ns`.
/// With both zero it is `elapsed_ns`. Safety assumes |drift| stays within the configured
/// `max_drift` (1% by default); the offset is arbitrary.
#[inline]
pub fn skewed_ns(elapsed_ns: u64, offset_ns: u64, drift_ppm: i64) -> u64 {
    if drift_ppm == 0 {
        // Every production clock: no 128-bit division on the request path.
        return elapsed_ns.saturating_add(offset_ns);
    }
    let drift = drift_ppm.clamp(-100_000, 100_000) as i128;
    let scaled = elapsed_ns as i128 + elapsed_ns as i128 * drift / 1_000_000;
    (scaled.max(0) as u64).saturating_add(offset_ns)
}

#[cfg(test)]
mod skew_tests {
    use super::skewed_ns;

    #[test]
    fn drift_scales_elapsed_time_and_offset_shifts_it() {
        assert_eq!(skewed_ns(1_000_000_000, 0, 0), 1_000_000_000);
        assert_eq!(skewed_ns(1_000_000_000, 0, 5_000), 1_005_000_000);
        assert_eq!(skewed_ns(1_000_000_000, 3_000_000_000, -5_000), 3_995_000_000);
        assert_eq!(skewed_ns(1_000, 0, -2_000_000), 900, "clamped to -10%");
    }
}
