//! How an RLQS issuer times and sizes its assignments ([`super::rlqs_pool`]).

const NS_PER_S: u64 = 1_000_000_000;

/// How an issuer times and sizes its assignments. Defaults suit a loopback sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RlqsTiming {
    /// Longest `assignment_time_to_live` sent, whole seconds (Envoy reads only the seconds).
    pub ttl_s: u32,
    /// Bound on delivery (network, Envoy's main thread) plus the time until every worker
    /// thread uses what the main thread applied, and Envoy's timer lateness.
    pub delivery_margin_ms: u64,
    /// How often an unchanged assignment is sent again (each send restarts Envoy's TTL).
    pub renew_every_ms: u64,
    /// Bound on how much faster or slower Envoy's clock may run than the agent's. Must be at
    /// least the lent limits' `max_drift` ([`least_drift_percent`]): the limits assume any two
    /// connected processes, Envoy and its agent among them, may drift that much.
    pub clock_drift_percent: u32,
    /// Share of the lease's rate never lent (G refills from it, so new and changed buckets
    /// can be paid for). Half the burst is kept back for the same reason.
    pub reserve_percent: u32,
    /// Least time between two changes of one Envoy bucket.
    pub min_change_ms: u64,
    /// A bucket changes only when its share moved by more than this.
    pub change_threshold_percent: u32,
}

/// The least `clock_drift_percent` that covers a limit's `max_drift` (a fraction: 0.01 = 1%).
pub fn least_drift_percent(max_drift: f64) -> u32 {
    (max_drift * 100.0 - 1e-9).ceil().max(0.0) as u32
}

impl Default for RlqsTiming {
    fn default() -> Self {
        RlqsTiming {
            ttl_s: 2,
            delivery_margin_ms: 500,
            renew_every_ms: 250,
            clock_drift_percent: 1,
            reserve_percent: 20,
            min_change_ms: 1_000,
            change_threshold_percent: 10,
        }
    }
}

/// A [`RlqsTiming`] setting that breaks its rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RlqsTimingError {
    #[error("ttl_s must be 1..=3600 whole seconds (got {0})")]
    TtlS(u32),
    #[error("delivery_margin_ms and renew_every_ms must be at least 1")]
    ZeroPeriod,
    #[error(
        "renew_every_ms + delivery_margin_ms ({renewal_ms} ms) must stay below a 1 s assignment's earliest expiry ({earliest_expiry_ms} ms)"
    )]
    RenewalTooLate { renewal_ms: u64, earliest_expiry_ms: u64 },
    #[error("clock_drift_percent must be at most 10 (got {0})")]
    DriftAboveTen(u32),
    #[error(
        "clock_drift_percent ({percent}%) is below the limits' max_drift ({least}%, the default): Envoy's clock may drift that much from the agent's"
    )]
    DriftBelowLimits { percent: u32, least: u32 },
    #[error("reserve_percent must be 1..=90 (got {0})")]
    ReservePercent(u32),
}

impl RlqsTiming {
    pub fn validate(&self) -> Result<(), RlqsTimingError> {
        if !(1..=3_600).contains(&self.ttl_s) {
            return Err(RlqsTimingError::TtlS(self.ttl_s));
        }
        if self.delivery_margin_ms == 0 || self.renew_every_ms == 0 {
            return Err(RlqsTimingError::ZeroPeriod);
        }
        // A renewal must surely arrive before the previous assignment can expire.
        let earliest_expiry_ms = 1_000 * (100 - self.clock_drift_percent.min(99) as u64) / 100;
        if self.renew_every_ms + self.delivery_margin_ms >= earliest_expiry_ms {
            let renewal_ms = self.renew_every_ms + self.delivery_margin_ms;
            return Err(RlqsTimingError::RenewalTooLate { renewal_ms, earliest_expiry_ms });
        }
        if self.clock_drift_percent > 10 {
            return Err(RlqsTimingError::DriftAboveTen(self.clock_drift_percent));
        }
        // The agent cannot read the lent limits' `max_drift` (pod leases do not carry it, pod
        // credentials cannot read `lh_limits`), so it refuses what is below the default one.
        let least = least_drift_percent(leasehold_core::expiry::ExpiryPolicy::default().max_drift);
        if self.clock_drift_percent < least {
            return Err(RlqsTimingError::DriftBelowLimits { percent: self.clock_drift_percent, least });
        }
        if !(1..=90).contains(&self.reserve_percent) {
            return Err(RlqsTimingError::ReservePercent(self.reserve_percent));
        }
        Ok(())
    }

    pub(super) fn margin_ns(&self) -> u64 {
        self.delivery_margin_ms * 1_000_000
    }

    /// The latest an object lasts in real time after `ttl_s` on a clock up to `drift` slower.
    pub(super) fn longest_ttl_ns(&self, ttl_s: u32) -> u64 {
        (ttl_s as u64 * NS_PER_S * 100).div_ceil(100 - self.clock_drift_percent as u64)
    }

    /// The earliest it can expire, on a clock up to `drift` faster.
    pub(super) fn shortest_ttl_ns(&self, ttl_s: u32) -> u64 {
        ttl_s as u64 * NS_PER_S * 100 / (100 + self.clock_drift_percent as u64)
    }

    /// The longest TTL whose object surely ends by `limit_ns` when sent at `now_ns`.
    pub(super) fn ttl_within(&self, now_ns: u64, limit_ns: u64) -> u32 {
        let room = limit_ns.saturating_sub(now_ns.saturating_add(self.margin_ns()));
        let whole = (room as u128 * (100 - self.clock_drift_percent as u128) / 100 / NS_PER_S as u128) as u64;
        whole.min(self.ttl_s as u64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool counts Envoy's objects by `clock_drift_percent`, and the limits' leases assume any
    /// two connected processes (Envoy and its agent among them) drift by up to `max_drift`: an
    /// agent assuming less than the limits do (0% against the default 1%) lends objects that may
    /// outlive the lease they were cut from.
    #[test]
    fn an_assumed_drift_below_the_limits_default_max_drift_is_refused() {
        let zero = RlqsTiming { clock_drift_percent: 0, ..Default::default() };
        let e = zero.validate().expect_err("0% drift accepted").to_string();
        assert!(e.contains("clock_drift_percent (0%)") && e.contains("max_drift (1%"), "{e}");
        assert_eq!(RlqsTiming::default().validate(), Ok(()));
        assert_eq!(RlqsTiming { clock_drift_percent: 5, ..Default::default() }.validate(), Ok(()));
    }
}
