//! Exact quota amounts.
//!
//! Rates and bursts are kept in integer *milli-units* so that ledger sums are exact:
//! `rate_milli_per_s = 225_000` is 225 requests/s, `burst_milli = 6_000_000` is 6,000 tokens.
//! Floating point never enters a `≤ limit` comparison.

use serde::{Deserialize, Serialize};

/// Milli-units per whole token (or per request/s).
pub const MILLI: u64 = 1_000;

/// A pair of leasable resources: a refill rate and a burst capacity (as the tenant with rate and
/// burst buys them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Quota {
    /// Refill rate in thousandths of a token per second.
    pub rate_milli_per_s: u64,
    /// Burst capacity in thousandths of a token.
    pub burst_milli: u64,
}

impl Quota {
    /// No rate, no burst.
    pub const ZERO: Quota = Quota { rate_milli_per_s: 0, burst_milli: 0 };

    /// A rate in milli-tokens per second and a burst in milli-tokens.
    pub const fn new(rate_milli_per_s: u64, burst_milli: u64) -> Self {
        Quota { rate_milli_per_s, burst_milli }
    }

    /// Whole requests per second and whole burst tokens.
    pub const fn per_s(rate_per_s: u64, burst: u64) -> Self {
        Quota::new(rate_per_s * MILLI, burst * MILLI)
    }

    /// The rate, in tokens per second.
    pub fn rate_per_s(&self) -> f64 {
        self.rate_milli_per_s as f64 / MILLI as f64
    }

    /// The burst, in tokens.
    pub fn burst(&self) -> f64 {
        self.burst_milli as f64 / MILLI as f64
    }

    /// Component-wise sum, saturating.
    pub fn saturating_add(self, o: Quota) -> Quota {
        Quota::new(
            self.rate_milli_per_s.saturating_add(o.rate_milli_per_s),
            self.burst_milli.saturating_add(o.burst_milli),
        )
    }

    /// Component-wise difference, saturating at zero.
    pub fn saturating_sub(self, o: Quota) -> Quota {
        Quota::new(
            self.rate_milli_per_s.saturating_sub(o.rate_milli_per_s),
            self.burst_milli.saturating_sub(o.burst_milli),
        )
    }

    /// Component-wise maximum.
    pub fn max(self, o: Quota) -> Quota {
        Quota::new(self.rate_milli_per_s.max(o.rate_milli_per_s), self.burst_milli.max(o.burst_milli))
    }

    /// Component-wise minimum.
    pub fn min(self, o: Quota) -> Quota {
        Quota::new(self.rate_milli_per_s.min(o.rate_milli_per_s), self.burst_milli.min(o.burst_milli))
    }

    /// True when both components are ≤ the other's.
    pub fn fits_in(&self, o: &Quota) -> bool {
        self.rate_milli_per_s <= o.rate_milli_per_s && self.burst_milli <= o.burst_milli
    }

    /// True when both components are zero.
    pub fn is_zero(&self) -> bool {
        self.rate_milli_per_s == 0 && self.burst_milli == 0
    }
}

impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.3}/s burst {:.3}", self.rate_per_s(), self.burst())
    }
}
