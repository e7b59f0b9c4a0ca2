use crate::allocator::AllocMode;
use crate::expiry::ExpiryPolicy;
use crate::quota::Quota;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcSpec {
    pub name: String,
    /// Reserved out of the global budget for this DC at all times (its partition fallback).
    #[serde(default)]
    pub floor: Quota,
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// One global limit owned by the coordinator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitConfig {
    pub limit: String,
    /// R and B: the global refill rate and burst.
    pub quota: Quota,
    pub dcs: Vec<DcSpec>,
    pub dc_ttl_ms: u64,
    pub renew_interval_ms: u64,
    /// A DC silent for longer gets no renewal (its lease then expires).
    pub report_timeout_ms: u64,
    pub alloc_mode: AllocMode,
    /// Fraction of the allocatable budget held back from every DC (0 by default: the ledger,
    /// not a reserve, keeps handoffs safe).
    pub reserve: f64,
    /// Minimum change of a DC's share, as a fraction of the capacity, that triggers a re-split.
    pub hysteresis: f64,
    pub min_realloc_interval_ms: u64,
    /// Each DC's burst share is at least this many milli-tokens per healthy pod (so a pod can
    /// always take a cost-1 request), when the budget allows.
    pub min_burst_per_pod_milli: u64,
    pub expiry: ExpiryPolicy,
}

impl LimitConfig {
    pub fn new(limit: &str, quota: Quota, dcs: &[(&str, Quota)]) -> Self {
        LimitConfig {
            limit: limit.into(),
            quota,
            dcs: dcs.iter().map(|(n, f)| DcSpec { name: (*n).into(), floor: *f, weight: 1.0 }).collect(),
            dc_ttl_ms: 10_000,
            renew_interval_ms: 1_000,
            report_timeout_ms: 3_000,
            alloc_mode: AllocMode::WaterFill,
            reserve: 0.0,
            hysteresis: 0.02,
            min_realloc_interval_ms: 1_000,
            min_burst_per_pod_milli: 1_000,
            expiry: ExpiryPolicy::default(),
        }
    }

    pub fn floors(&self) -> Quota {
        self.dcs.iter().fold(Quota::ZERO, |s, d| s.saturating_add(d.floor))
    }

    pub fn validate(&self) -> Result<(), String> {
        self.expiry.validate()?;
        if self.quota.rate_milli_per_s == 0 {
            return Err(format!("limit {}: rate must be positive", self.limit));
        }
        if self.dcs.is_empty() {
            return Err(format!("limit {}: no data centers configured", self.limit));
        }
        if !self.floors().fits_in(&self.quota) {
            return Err(format!("limit {}: DC floors {} exceed the limit {}", self.limit, self.floors(), self.quota));
        }
        if self.renew_interval_ms == 0 || self.dc_ttl_ms <= self.renew_interval_ms {
            return Err(format!("limit {}: dc_ttl_ms must exceed renew_interval_ms > 0", self.limit));
        }
        let mut names: Vec<&str> = self.dcs.iter().map(|d| d.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(format!("limit {}: a DC is listed twice", self.limit));
        }
        Ok(())
    }
}
