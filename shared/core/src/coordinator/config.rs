use crate::aimd::AdaptiveConfig;
use crate::allocator::AllocMode;
use crate::bugs::KnownBugs;
use crate::dc_manager::{FailRule, PodRules};
use crate::expiry::ExpiryPolicy;
use crate::quota::Quota;
use crate::InvalidSetting;
use serde::{Deserialize, Serialize};

/// One data center of a limit, as the coordinator runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcSpec {
    /// The DC's name.
    pub name: String,
    /// Reserved out of the global budget for this DC at all times (its partition fallback).
    #[serde(default)]
    pub floor: Quota,
    /// The DC's weight in the split (default 1).
    #[serde(default = "one")]
    pub weight: f64,
}

fn one() -> f64 {
    1.0
}

/// One global limit owned by the coordinator. In a config file only `limit`, `quota` and `dcs`
/// are required; the rest default to the values of [`LimitConfig::new`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitConfig {
    /// The limit's name.
    pub limit: String,
    /// R and B: the global refill rate and burst.
    pub quota: Quota,
    /// The data centers that share the limit.
    pub dcs: Vec<DcSpec>,
    /// Lifetime of a DC lease, in milliseconds (default 10,000).
    #[serde(default = "defaults::dc_ttl_ms")]
    pub dc_ttl_ms: u64,
    /// How often the coordinator ticks, in milliseconds (default 1,000; the leader ticks at its
    /// limits' shortest).
    #[serde(default = "defaults::renew_interval_ms")]
    pub renew_interval_ms: u64,
    /// A DC silent for longer gets no renewal (its lease then expires).
    #[serde(default = "defaults::report_timeout_ms")]
    pub report_timeout_ms: u64,
    /// How the limit is split among the DCs (default water-fill).
    #[serde(default)]
    pub alloc_mode: AllocMode,
    /// Fraction of the allocatable budget held back from every DC (0 by default: the ledger,
    /// not a reserve, keeps handoffs safe).
    #[serde(default)]
    pub reserve: f64,
    /// Minimum change of a DC's share, as a fraction of the capacity, that triggers a re-split.
    #[serde(default = "defaults::hysteresis")]
    pub hysteresis: f64,
    /// Minimum time between two re-splits, in milliseconds (default 1,000).
    #[serde(default = "defaults::min_realloc_interval_ms")]
    pub min_realloc_interval_ms: u64,
    /// Each DC's burst share is at least this many milli-tokens per healthy pod (so a pod can
    /// always take a cost-1 request), when the budget allows.
    #[serde(default = "defaults::min_burst_per_pod_milli")]
    pub min_burst_per_pod_milli: u64,
    /// The coordinator's clock margins for DC leases.
    #[serde(default)]
    pub expiry: ExpiryPolicy,
    /// Follow upstream 429s with an effective R below `quota`'s (see [`crate::aimd`]).
    /// Missing: R is the configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveConfig>,
    /// How DC managers split and fail over this limit's pod leases (carried in the ledger
    /// record). Missing: each DC manager's own settings.
    #[serde(default, skip_serializing_if = "PodRules::is_empty")]
    pub pods: PodRules,
    /// Negative controls only (see [`KnownBugs`]).
    #[serde(skip)]
    pub bugs: KnownBugs,
}

mod defaults {
    pub(super) fn dc_ttl_ms() -> u64 {
        10_000
    }
    pub(super) fn renew_interval_ms() -> u64 {
        1_000
    }
    pub(super) fn report_timeout_ms() -> u64 {
        3_000
    }
    pub(super) fn hysteresis() -> f64 {
        0.02
    }
    pub(super) fn min_realloc_interval_ms() -> u64 {
        1_000
    }
    pub(super) fn min_burst_per_pod_milli() -> u64 {
        1_000
    }
}

impl LimitConfig {
    /// Limit `limit` of `quota` over `dcs` (name and floor each), every other setting its default.
    pub fn new(limit: &str, quota: Quota, dcs: &[(&str, Quota)]) -> Self {
        LimitConfig {
            limit: limit.into(),
            quota,
            dcs: dcs.iter().map(|(n, f)| DcSpec { name: (*n).into(), floor: *f, weight: 1.0 }).collect(),
            dc_ttl_ms: defaults::dc_ttl_ms(),
            renew_interval_ms: defaults::renew_interval_ms(),
            report_timeout_ms: defaults::report_timeout_ms(),
            alloc_mode: AllocMode::WaterFill,
            reserve: 0.0,
            hysteresis: defaults::hysteresis(),
            min_realloc_interval_ms: defaults::min_realloc_interval_ms(),
            min_burst_per_pod_milli: defaults::min_burst_per_pod_milli(),
            expiry: ExpiryPolicy::default(),
            adaptive: None,
            pods: PodRules::default(),
            bugs: KnownBugs::default(),
        }
    }

    /// The sum of the DCs' floors.
    pub fn floors(&self) -> Quota {
        self.dcs.iter().fold(Quota::ZERO, |s, d| s.saturating_add(d.floor))
    }

    /// Checks every rule of the configuration.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.expiry.validate()?;
        let invalid = |rule| Err(InvalidSetting::of_limit(&self.limit, rule));
        if let Some(a) = &self.adaptive {
            if let Err(rule) = a.validate() {
                return invalid(rule);
            }
        }
        if self.quota.rate_milli_per_s == 0 {
            return invalid(InvalidSetting::RateNotPositive);
        }
        if self.dcs.is_empty() {
            return invalid(InvalidSetting::NoDcs);
        }
        if !self.floors().fits_in(&self.quota) {
            return invalid(InvalidSetting::FloorsExceedLimit { floors: self.floors(), quota: self.quota });
        }
        if self.renew_interval_ms == 0 || self.dc_ttl_ms <= self.renew_interval_ms {
            return invalid(InvalidSetting::DcTtlNotAboveRenew {
                dc_ttl_ms: self.dc_ttl_ms,
                renew_interval_ms: self.renew_interval_ms,
            });
        }
        let mut names: Vec<&str> = self.dcs.iter().map(|d| d.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return invalid(InvalidSetting::DcListedTwice);
        }
        if let Some(FailRule::BestEffort { emergency }) = &self.pods.fail_mode {
            if let Some(dc) = emergency.keys().find(|dc| names.binary_search(&dc.as_str()).is_err()) {
                return invalid(InvalidSetting::EmergencyDcNotListed { dc: dc.clone() });
            }
        }
        Ok(())
    }
}
