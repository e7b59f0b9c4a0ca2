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
    /// The expiry policy's `max_drift` (the value given) is outside [0, 0.5).
    #[error("max_drift must be in [0, 0.5), got {0}")]
    MaxDrift(f64),

    // A DC manager's configuration.
    #[error(
        "pod_ttl_ms ({pod_ttl_ms}) must be at most {max_ms} (a successor that cannot read its predecessor's term record waits that long)"
    )]
    /// `pod_ttl_ms` is above the largest allowed.
    PodTtlAboveMax {
        /// The pod lease lifetime given, in milliseconds.
        pod_ttl_ms: u64,
        /// The largest allowed, in milliseconds.
        max_ms: u64,
    },
    /// `pod_ttl_ms` does not exceed a positive `renew_interval_ms`.
    #[error("pod_ttl_ms ({pod_ttl_ms}) must exceed renew_interval_ms ({renew_interval_ms}) > 0")]
    PodTtlNotAboveRenew {
        /// The pod lease lifetime given, in milliseconds.
        pod_ttl_ms: u64,
        /// The renew interval given, in milliseconds.
        renew_interval_ms: u64,
    },
    /// `event_pass_gap_ms` is above `renew_interval_ms`.
    #[error("event_pass_gap_ms ({event_pass_gap_ms}) must be at most renew_interval_ms ({renew_interval_ms})")]
    EventPassGapAboveRenew {
        /// The event pass gap given, in milliseconds.
        event_pass_gap_ms: u64,
        /// The renew interval given, in milliseconds.
        renew_interval_ms: u64,
    },
    #[error(
        "heartbeat_timeout_after_drops_ms ({timeout_ms}) must be at most {max_ms} (a pod silent that long is forgotten)"
    )]
    /// `heartbeat_timeout_after_drops_ms` is above the largest allowed.
    HeartbeatAfterDropsAboveMax {
        /// The timeout given, in milliseconds.
        timeout_ms: u64,
        /// The largest allowed, in milliseconds.
        max_ms: u64,
    },
    /// `ewma_alpha` (the value given) is outside (0, 1].
    #[error("ewma_alpha must be in (0, 1], got {0}")]
    EwmaAlpha(f64),

    // An adaptive limit.
    /// A fraction of the adaptive settings is outside (0, 1].
    #[error("adaptive.{name}: {value} not in (0, 1]")]
    AdaptiveFraction {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// `decrease_factor` or `max_step_down` is not below 1.
    #[error("adaptive: decrease_factor and max_step_down must be below 1")]
    AdaptiveDecreaseNotBelowOne,

    // A coordinator's configuration of one limit.
    /// A rule of limit `limit`'s configuration.
    #[error("limit {limit}: {rule}")]
    Limit {
        /// The limit's name.
        limit: String,
        /// The rule broken.
        #[source]
        rule: Box<InvalidSetting>,
    },
    /// The rate is zero.
    #[error("rate must be positive")]
    RateNotPositive,
    /// No data center is configured.
    #[error("no data centers configured")]
    NoDcs,
    #[error("DC floors {floors} exceed the limit {quota}")]
    /// The DCs' floors together exceed the limit.
    FloorsExceedLimit {
        /// The sum of the DCs' floors.
        floors: Quota,
        /// The limit.
        quota: Quota,
    },
    #[error("dc_ttl_ms must exceed renew_interval_ms > 0")]
    /// `dc_ttl_ms` does not exceed a positive `renew_interval_ms`.
    DcTtlNotAboveRenew {
        /// The DC lease lifetime given, in milliseconds.
        dc_ttl_ms: u64,
        /// The renew interval given, in milliseconds.
        renew_interval_ms: u64,
    },
    /// A DC is listed twice.
    #[error("a DC is listed twice")]
    DcListedTwice,
    #[error("an emergency allowance names DC {dc}, which is not listed")]
    /// An emergency allowance names a DC that is not listed.
    EmergencyDcNotListed {
        /// The DC named.
        dc: String,
    },

    // A limit definition as people write it.
    #[error("bad name {name:?}: {source}")]
    /// The limit's name is not a valid name.
    BadName {
        /// The name given.
        name: String,
        /// Why it is not valid.
        #[source]
        source: WireError,
    },
    #[error("bad DC name {name:?}: {source}")]
    /// A DC's name is not a valid name.
    BadDcName {
        /// The name given.
        name: String,
        /// Why it is not valid.
        #[source]
        source: WireError,
    },
    #[error("schema version {found} is not supported (this build reads {reads})")]
    /// The definition's schema version is not the one this build reads.
    SchemaVersion {
        /// The version found.
        found: u32,
        /// The version this build reads.
        reads: u32,
    },
    /// Both rate-and-burst and quota are given.
    #[error("give either rate and burst or quota, not both")]
    RateAndQuota,
    /// The rate is missing.
    #[error("rate is missing (such as rate = \"976/s\")")]
    RateMissing,
    /// The burst is missing.
    #[error("burst is missing (such as burst = 20)")]
    BurstMissing,
    #[error("DC {dc}: weight must be a positive number, got {weight}")]
    /// A DC's weight is not a positive number.
    DcWeight {
        /// The DC.
        dc: String,
        /// The weight given.
        weight: f64,
    },
    /// `reserve` (the value given) is outside [0, 1).
    #[error("reserve must be in [0, 1), got {0}")]
    Reserve(f64),
    /// `hysteresis` (the value given) is outside [0, 1].
    #[error("hysteresis must be in [0, 1], got {0}")]
    Hysteresis(f64),
    #[error("DC {dc}: floor_burst goes with a rate floor such as \"50/s\"")]
    /// A DC has a `floor_burst` but no rate floor.
    FloorBurstWithoutRate {
        /// The DC.
        dc: String,
    },
    #[error(
        "DC {dc}: a floor of {} with burst {} can never admit a call: each pod serving on it needs a whole token (give floor_burst = 1 or more, one per pod that should serve on the floor)",
        format_rate(.floor.rate_milli_per_s),
        format_amount(.floor.burst_milli)
    )]
    /// A DC's floor has a burst below one whole token, so it can never admit a call.
    FloorCannotAdmit {
        /// The DC.
        dc: String,
        /// The floor given.
        floor: Quota,
    },
    #[error(
        "the DCs' floors ({} burst {}) exceed the limit ({} burst {})",
        format_rate(.floors.rate_milli_per_s),
        format_amount(.floors.burst_milli),
        format_rate(.quota.rate_milli_per_s),
        format_amount(.quota.burst_milli)
    )]
    /// The DCs' floors of a definition together exceed its limit.
    DefFloorsExceedLimit {
        /// The sum of the DCs' floors.
        floors: Quota,
        /// The limit.
        quota: Quota,
    },
    #[error("DC {dc}: emergency_burst goes with an emergency rate")]
    /// A DC has an `emergency_burst` but no emergency rate.
    EmergencyBurstWithoutRate {
        /// The DC.
        dc: String,
    },
    #[error("DC {dc}: an emergency allowance goes with fail_mode = \"best-effort\"")]
    /// A DC has an emergency allowance but the limit's fail mode is not best-effort.
    EmergencyWithoutBestEffort {
        /// The DC.
        dc: String,
    },
    /// The fail mode is best-effort but no DC has an emergency allowance.
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
