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
    /// Bound on how much faster or slower Envoy's clock may run than the agent's.
    pub clock_drift_percent: u32,
    /// Share of the lease's rate never lent (G refills from it, so new and changed buckets
    /// can be paid for). Half the burst is kept back for the same reason.
    pub reserve_percent: u32,
    /// Least time between two changes of one Envoy bucket.
    pub min_change_ms: u64,
    /// A bucket changes only when its share moved by more than this.
    pub change_threshold_percent: u32,
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

impl RlqsTiming {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=3_600).contains(&self.ttl_s) {
            return Err(format!("ttl_s must be 1..=3600 whole seconds (got {})", self.ttl_s));
        }
        if self.delivery_margin_ms == 0 || self.renew_every_ms == 0 {
            return Err("delivery_margin_ms and renew_every_ms must be at least 1".into());
        }
        // A renewal must surely arrive before the previous assignment can expire.
        let earliest_expiry_ms = 1_000 * (100 - self.clock_drift_percent.min(99) as u64) / 100;
        if self.renew_every_ms + self.delivery_margin_ms >= earliest_expiry_ms {
            return Err(format!(
                "renew_every_ms + delivery_margin_ms ({} ms) must stay below a 1 s assignment's earliest expiry ({earliest_expiry_ms} ms)",
                self.renew_every_ms + self.delivery_margin_ms
            ));
        }
        if self.clock_drift_percent > 10 {
            return Err(format!("clock_drift_percent must be at most 10 (got {})", self.clock_drift_percent));
        }
        if !(1..=90).contains(&self.reserve_percent) {
            return Err(format!("reserve_percent must be 1..=90 (got {})", self.reserve_percent));
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
