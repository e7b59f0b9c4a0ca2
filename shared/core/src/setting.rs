//! [`InvalidSetting`]: a configuration that breaks one of its rules, naming the setting, the
//! value given and the rule, in the words operators read.

use crate::limits::{format_amount, format_rate};
use crate::quota::Quota;
use crate::wire::WireError;
use thiserror::Error;

/// One broken rule of a configuration (an expiry policy, a DC manager's or a coordinator's
/// configuration, an adaptive limit, a limit definition).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum InvalidSetting {
    // The expiry policy.
    #[error("max_drift must be in [0, 0.5), got {0}")]
    MaxDrift(f64),

    // A DC manager's configuration.
    #[error(
        "pod_ttl_ms ({pod_ttl_ms}) must be at most {max_ms} (a successor that cannot read its predecessor's term record waits that long)"
    )]
    PodTtlAboveMax { pod_ttl_ms: u64, max_ms: u64 },
    #[error("pod_ttl_ms ({pod_ttl_ms}) must exceed renew_interval_ms ({renew_interval_ms}) > 0")]
    PodTtlNotAboveRenew { pod_ttl_ms: u64, renew_interval_ms: u64 },
    #[error("event_pass_gap_ms ({event_pass_gap_ms}) must be at most renew_interval_ms ({renew_interval_ms})")]
    EventPassGapAboveRenew { event_pass_gap_ms: u64, renew_interval_ms: u64 },
    #[error(
        "heartbeat_timeout_after_drops_ms ({timeout_ms}) must be at most {max_ms} (a pod silent that long is forgotten)"
    )]
    HeartbeatAfterDropsAboveMax { timeout_ms: u64, max_ms: u64 },
    #[error("ewma_alpha must be in (0, 1], got {0}")]
    EwmaAlpha(f64),

    // An adaptive limit.
    #[error("adaptive.{name}: {value} not in (0, 1]")]
    AdaptiveFraction { name: &'static str, value: f64 },
    #[error("adaptive: decrease_factor and max_step_down must be below 1")]
    AdaptiveDecreaseNotBelowOne,

    // A coordinator's configuration of one limit.
    /// A rule of limit `limit`'s configuration.
    #[error("limit {limit}: {rule}")]
    Limit {
        limit: String,
        #[source]
        rule: Box<InvalidSetting>,
    },
    #[error("rate must be positive")]
    RateNotPositive,
    #[error("no data centers configured")]
    NoDcs,
    #[error("DC floors {floors} exceed the limit {quota}")]
    FloorsExceedLimit { floors: Quota, quota: Quota },
    #[error("dc_ttl_ms must exceed renew_interval_ms > 0")]
    DcTtlNotAboveRenew { dc_ttl_ms: u64, renew_interval_ms: u64 },
    #[error("a DC is listed twice")]
    DcListedTwice,
    #[error("an emergency allowance names DC {dc}, which is not listed")]
    EmergencyDcNotListed { dc: String },

    // A limit definition as people write it.
    #[error("bad name {name:?}: {source}")]
    BadName {
        name: String,
        #[source]
        source: WireError,
    },
    #[error("bad DC name {name:?}: {source}")]
    BadDcName {
        name: String,
        #[source]
        source: WireError,
    },
    #[error("schema version {found} is not supported (this build reads {reads})")]
    SchemaVersion { found: u32, reads: u32 },
    #[error("give either rate and burst or quota, not both")]
    RateAndQuota,
    #[error("rate is missing (such as rate = \"976/s\")")]
    RateMissing,
    #[error("burst is missing (such as burst = 20)")]
    BurstMissing,
    #[error("DC {dc}: weight must be a positive number, got {weight}")]
    DcWeight { dc: String, weight: f64 },
    #[error("reserve must be in [0, 1), got {0}")]
    Reserve(f64),
    #[error("hysteresis must be in [0, 1], got {0}")]
    Hysteresis(f64),
    #[error("DC {dc}: floor_burst goes with a rate floor such as \"50/s\"")]
    FloorBurstWithoutRate { dc: String },
    #[error(
        "DC {dc}: a floor of {} with burst {} can never admit a call: each pod serving on it needs a whole token (give floor_burst = 1 or more, one per pod that should serve on the floor)",
        format_rate(.floor.rate_milli_per_s),
        format_amount(.floor.burst_milli)
    )]
    FloorCannotAdmit { dc: String, floor: Quota },
    #[error(
        "the DCs' floors ({} burst {}) exceed the limit ({} burst {})",
        format_rate(.floors.rate_milli_per_s),
        format_amount(.floors.burst_milli),
        format_rate(.quota.rate_milli_per_s),
        format_amount(.quota.burst_milli)
    )]
    DefFloorsExceedLimit { floors: Quota, quota: Quota },
    #[error("DC {dc}: emergency_burst goes with an emergency rate")]
    EmergencyBurstWithoutRate { dc: String },
    #[error("DC {dc}: an emergency allowance goes with fail_mode = \"best-effort\"")]
    EmergencyWithoutBestEffort { dc: String },
    #[error(
        "fail_mode = \"best-effort\" needs an emergency allowance (such as emergency = \"20/s\") on at least one DC"
    )]
    BestEffortWithoutEmergency,
}

impl InvalidSetting {
    /// `rule` as a rule of limit `limit`'s configuration.
    pub fn of_limit(limit: &str, rule: InvalidSetting) -> Self {
        InvalidSetting::Limit { limit: limit.to_string(), rule: Box::new(rule) }
    }

    /// The rule broken, without the limit it belongs to.
    pub fn rule(&self) -> &InvalidSetting {
        match self {
            InvalidSetting::Limit { rule, .. } => rule,
            other => other,
        }
    }
}
