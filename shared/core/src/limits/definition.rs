//! [`LimitDef`]: one limit's definition as people write it (in a TOML file, on the command line,
//! as the JSON stored in KV), and its conversion to the exact [`LimitConfig`] the coordinator runs.

use super::floor;
pub use super::floor::Floor;
use super::pod_rules::{self, FailModeName};
use super::rate::{Rate, Tokens};
use crate::aimd::AdaptiveConfig;
use crate::allocator::AllocMode;
use crate::coordinator::{DcSpec, LimitConfig};
use crate::dc_manager::{FailRule, PodRules, SplitMode};
use crate::expiry::ExpiryPolicy;
use crate::quota::Quota;
use crate::wire::check_id;
use crate::InvalidSetting;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// The schema version this build reads and writes.
pub const LIMIT_DEF_VERSION: u32 = 1;

/// Why a limit definition was refused.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum LimitDefError {
    /// The text is not a definition (syntax, a misspelt field, a value of the wrong form).
    #[error("{0}")]
    Parse(String),
    /// A definition that reads but cannot run.
    #[error("limit {limit}: {rule}")]
    Invalid {
        /// The limit's name.
        limit: String,
        /// The rule broken.
        #[source]
        rule: InvalidSetting,
    },
}

/// One limit, as stored in the `lh_limits` bucket (JSON) and accepted in TOML files.
///
/// Either `rate` and `burst` (the human form) or `quota` (the exact legacy form,
/// `{ rate_milli_per_s, burst_milli }`) must be given; the tuning fields default to those of
/// [`LimitConfig::new`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitDef {
    /// Schema version: 1.
    #[serde(default = "defaults::v")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// R: the global refill rate (such as `"976/s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// B: the global burst, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<Tokens>,
    /// Legacy exact form of `rate` and `burst`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "floor::exact_quota")]
    pub quota: Option<Quota>,
    /// The data centers that share the limit.
    pub dcs: Vec<DcDef>,
    /// Lifetime of a DC lease, in milliseconds (default 10,000).
    #[serde(default = "defaults::dc_ttl_ms")]
    pub dc_ttl_ms: u64,
    /// How often the coordinator ticks, in milliseconds (default 1,000).
    #[serde(default = "defaults::renew_interval_ms")]
    pub renew_interval_ms: u64,
    /// A DC silent for longer, in milliseconds, gets no renewal (default 3,000).
    #[serde(default = "defaults::report_timeout_ms")]
    pub report_timeout_ms: u64,
    /// How the coordinator splits the limit among the DCs (default water-fill).
    #[serde(default)]
    pub alloc_mode: AllocMode,
    /// Fraction of the allocatable budget held back from every DC (default 0).
    #[serde(default)]
    pub reserve: f64,
    /// Minimum change of a DC's share, as a fraction of the capacity, that triggers a re-split.
    #[serde(default = "defaults::hysteresis")]
    pub hysteresis: f64,
    /// Minimum time between two re-splits, in milliseconds (default 1,000).
    #[serde(default = "defaults::min_realloc_interval_ms")]
    pub min_realloc_interval_ms: u64,
    /// Each DC's burst share is at least this many milli-tokens per healthy pod, when B allows.
    #[serde(default = "defaults::min_burst_per_pod_milli")]
    pub min_burst_per_pod_milli: u64,
    /// The coordinator's clock margins for DC leases.
    #[serde(default, deserialize_with = "strict_expiry")]
    pub expiry: ExpiryPolicy,
    /// Opt in to following upstream 429s (`adaptive = {}` for the defaults; fractions, see
    /// [`AdaptiveConfig`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveConfig>,
    /// How each DC manager divides its DC lease among its pods: `equal`, `weighted` or `demand`.
    /// Missing: each DC manager's own `split` setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitMode>,
    /// What a DC's pods may use once its DC lease ended unrenewed: `strict` (the floor only) or
    /// `best-effort` (the floor and the DC's `emergency` allowance, outside the limit). Missing:
    /// each DC manager's own `fail_mode` setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_mode: Option<FailModeName>,
}

/// One data center of a limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcDef {
    /// The DC's name.
    pub name: String,
    /// Reserved for this DC at all times: a rate (`"50/s"`), or the legacy exact
    /// `{ rate_milli_per_s, burst_milli }`.
    #[serde(default)]
    pub floor: Floor,
    /// Burst tokens reserved with the floor (only with a rate `floor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_burst: Option<Tokens>,
    /// The DC's weight in the split (default 1).
    #[serde(default = "defaults::weight")]
    pub weight: f64,
    /// With `fail_mode = "best-effort"`: what this DC's pods may use, beyond the floor and
    /// outside the limit, once its DC lease ended unrenewed (a rate such as `"20/s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency: Option<Rate>,
    /// Burst tokens of the emergency allowance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emergency_burst: Option<Tokens>,
}

/// The file formats [`LimitDef::parse_file_text`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefFormat {
    /// TOML (`.toml`).
    Toml,
    /// JSON (`.json`).
    Json,
}

impl DefFormat {
    /// By the file's extension: `.toml` or `.json`.
    pub fn from_path(path: &std::path::Path) -> Option<DefFormat> {
        match path.extension()?.to_str()? {
            "toml" => Some(DefFormat::Toml),
            "json" => Some(DefFormat::Json),
            _ => None,
        }
    }
}

impl LimitDef {
    /// The exact configuration, validated as the coordinator validates it.
    pub fn to_config(&self) -> Result<LimitConfig, LimitDefError> {
        let invalid = |rule: InvalidSetting| LimitDefError::Invalid { limit: self.limit.clone(), rule };
        check_id("limit", &self.limit)
            .map_err(|source| invalid(InvalidSetting::BadName { name: self.limit.clone(), source }))?;
        if self.v != LIMIT_DEF_VERSION {
            return Err(invalid(InvalidSetting::SchemaVersion { found: self.v, reads: LIMIT_DEF_VERSION }));
        }
        let quota = match (&self.rate, &self.burst, &self.quota) {
            (Some(rate), Some(burst), None) => Quota::new(rate.milli_per_s(), burst.milli),
            (None, None, Some(quota)) => *quota,
            (_, _, Some(_)) => return Err(invalid(InvalidSetting::RateAndQuota)),
            (None, _, None) => return Err(invalid(InvalidSetting::RateMissing)),
            (Some(_), None, None) => return Err(invalid(InvalidSetting::BurstMissing)),
        };
        let mut dcs = Vec::with_capacity(self.dcs.len());
        for dc in &self.dcs {
            check_id("dc", &dc.name)
                .map_err(|source| invalid(InvalidSetting::BadDcName { name: dc.name.clone(), source }))?;
            let floor = floor::exact(&dc.name, &dc.floor, dc.floor_burst, quota).map_err(invalid)?;
            if !dc.weight.is_finite() || dc.weight <= 0.0 {
                return Err(invalid(InvalidSetting::DcWeight { dc: dc.name.clone(), weight: dc.weight }));
            }
            dcs.push(DcSpec { name: dc.name.clone(), floor, weight: dc.weight });
        }
        if !(0.0..1.0).contains(&self.reserve) {
            return Err(invalid(InvalidSetting::Reserve(self.reserve)));
        }
        if !(0.0..=1.0).contains(&self.hysteresis) {
            return Err(invalid(InvalidSetting::Hysteresis(self.hysteresis)));
        }
        let mut config = LimitConfig::new(&self.limit, quota, &[]);
        config.dcs = dcs;
        config.dc_ttl_ms = self.dc_ttl_ms;
        config.renew_interval_ms = self.renew_interval_ms;
        config.report_timeout_ms = self.report_timeout_ms;
        config.alloc_mode = self.alloc_mode;
        config.reserve = self.reserve;
        config.hysteresis = self.hysteresis;
        config.min_realloc_interval_ms = self.min_realloc_interval_ms;
        config.min_burst_per_pod_milli = self.min_burst_per_pod_milli;
        config.expiry = self.expiry;
        config.adaptive = self.adaptive.clone();
        config.pods = pod_rules_of(self).map_err(invalid)?;
        if let Some(rule) = floor::unusable(&config) {
            return Err(invalid(rule));
        }
        // Said in human units (validate says it in exact ones); a zero rate is validate's to report.
        let floors = config.floors();
        if quota.rate_milli_per_s > 0 && !floors.fits_in(&quota) {
            return Err(invalid(InvalidSetting::DefFloorsExceedLimit { floors, quota }));
        }
        config.validate().map_err(|e| match e {
            InvalidSetting::Limit { limit, rule } if limit == self.limit => invalid(*rule),
            e => invalid(e),
        })?;
        Ok(config)
    }

    /// The human form of an exact configuration (rates per second).
    pub fn from_config(config: &LimitConfig) -> LimitDef {
        LimitDef {
            v: LIMIT_DEF_VERSION,
            limit: config.limit.clone(),
            rate: Some(Rate::from_milli_per_s(config.quota.rate_milli_per_s)),
            burst: Some(Tokens { milli: config.quota.burst_milli }),
            quota: None,
            dcs: config
                .dcs
                .iter()
                .map(|dc| {
                    let emergency = pod_rules::emergency_of(config, &dc.name);
                    DcDef {
                        name: dc.name.clone(),
                        floor: Floor::Rate(Rate::from_milli_per_s(dc.floor.rate_milli_per_s)),
                        floor_burst: (dc.floor.burst_milli > 0).then_some(Tokens { milli: dc.floor.burst_milli }),
                        weight: dc.weight,
                        emergency: emergency.map(|q| Rate::from_milli_per_s(q.rate_milli_per_s)),
                        emergency_burst: emergency
                            .filter(|q| q.burst_milli > 0)
                            .map(|q| Tokens { milli: q.burst_milli }),
                    }
                })
                .collect(),
            dc_ttl_ms: config.dc_ttl_ms,
            renew_interval_ms: config.renew_interval_ms,
            report_timeout_ms: config.report_timeout_ms,
            alloc_mode: config.alloc_mode,
            reserve: config.reserve,
            hysteresis: config.hysteresis,
            min_realloc_interval_ms: config.min_realloc_interval_ms,
            min_burst_per_pod_milli: config.min_burst_per_pod_milli,
            expiry: config.expiry,
            adaptive: config.adaptive.clone(),
            split: config.pods.split,
            fail_mode: pod_rules::fail_mode_name(config),
        }
    }

    /// A definition with the default tuning: the starting point of one built from flags.
    pub fn new(limit: &str, rate: Rate, burst: Tokens) -> LimitDef {
        let mut def = LimitDef::from_config(&LimitConfig::new(limit, Quota::ZERO, &[]));
        def.rate = Some(rate);
        def.burst = Some(burst);
        def
    }

    /// The stored JSON document (not validated: see [`LimitDef::to_config`]).
    pub fn from_json(bytes: &[u8]) -> Result<LimitDef, LimitDefError> {
        serde_json::from_slice(bytes).map_err(|e| LimitDefError::Parse(e.to_string()))
    }

    /// The definition as the JSON stored in the `lh_limits` bucket.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a LimitDef always serializes")
    }

    /// A file holding one limit (its fields at the top level) or many (`[[limits]]` in TOML; a
    /// JSON array or `{"limits": [...]}`). A TOML file with `[[limits]]` may hold other settings
    /// (a coordinator's configuration): only `limits` is read. Not validated: see
    /// [`LimitDef::to_config`]; names must be unique.
    pub fn parse_file_text(text: &str, format: DefFormat) -> Result<Vec<LimitDef>, LimitDefError> {
        let defs = match format {
            DefFormat::Toml => {
                let table: toml::Table = toml::from_str(text).map_err(|e| toml_error(text, e))?;
                // Read from the text again (not from `table`), so an error says where it is.
                if table.contains_key("limits") {
                    toml::from_str::<LimitsFile>(text).map(|f| f.limits)
                } else {
                    toml::from_str::<LimitDef>(text).map(|d| vec![d])
                }
                .map_err(|e| toml_error(text, e))?
            }
            DefFormat::Json => {
                let value: serde_json::Value = serde_json::from_str(text).map_err(json_error)?;
                let list = match value {
                    serde_json::Value::Object(mut o) if o.contains_key("limits") && o.len() == 1 => {
                        o.remove("limits").unwrap_or_default()
                    }
                    one @ serde_json::Value::Object(_) => serde_json::Value::Array(vec![one]),
                    other => other,
                };
                serde_json::from_value(list).map_err(json_error)?
            }
        };
        let mut names: Vec<&str> = defs.iter().map(|d| d.limit.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(LimitDefError::Parse(format!("limit {} is defined twice", w[0])));
        }
        Ok(defs)
    }
}

/// A file with `[[limits]]` and, perhaps, a service's other settings.
#[derive(Deserialize)]
struct LimitsFile {
    limits: Vec<LimitDef>,
}

/// One line: the toml crate's message without its source excerpt, and the line it is on.
fn toml_error(text: &str, e: toml::de::Error) -> LimitDefError {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let line = text.get(..span.start).map_or(0, |before| before.matches('\n').count()) + 1;
            LimitDefError::Parse(format!("line {line}: {message}"))
        }
        None => LimitDefError::Parse(message),
    }
}

fn json_error(e: serde_json::Error) -> LimitDefError {
    LimitDefError::Parse(e.to_string())
}

mod defaults {
    use crate::coordinator::LimitConfig;
    use crate::quota::Quota;

    fn base() -> LimitConfig {
        LimitConfig::new("", Quota::ZERO, &[])
    }
    pub(super) fn v() -> u32 {
        super::LIMIT_DEF_VERSION
    }
    pub(super) fn weight() -> f64 {
        1.0
    }
    pub(super) fn dc_ttl_ms() -> u64 {
        base().dc_ttl_ms
    }
    pub(super) fn renew_interval_ms() -> u64 {
        base().renew_interval_ms
    }
    pub(super) fn report_timeout_ms() -> u64 {
        base().report_timeout_ms
    }
    pub(super) fn hysteresis() -> f64 {
        base().hysteresis
    }
    pub(super) fn min_realloc_interval_ms() -> u64 {
        base().min_realloc_interval_ms
    }
    pub(super) fn min_burst_per_pod_milli() -> u64 {
        base().min_burst_per_pod_milli
    }
}

/// The exact rules of `def` (validated: an `emergency` goes with `best-effort`).
fn pod_rules_of(def: &LimitDef) -> Result<PodRules, InvalidSetting> {
    let mut emergency = BTreeMap::new();
    for dc in &def.dcs {
        let allowance = match (&dc.emergency, dc.emergency_burst) {
            (None, None) => continue,
            (None, Some(_)) => return Err(InvalidSetting::EmergencyBurstWithoutRate { dc: dc.name.clone() }),
            (Some(rate), burst) => Quota::new(rate.milli_per_s(), burst.unwrap_or_default().milli),
        };
        if def.fail_mode != Some(FailModeName::BestEffort) {
            return Err(InvalidSetting::EmergencyWithoutBestEffort { dc: dc.name.clone() });
        }
        emergency.insert(dc.name.clone(), allowance);
    }
    if def.fail_mode == Some(FailModeName::BestEffort) && emergency.is_empty() {
        return Err(InvalidSetting::BestEffortWithoutEmergency);
    }
    let fail_mode = def.fail_mode.map(|mode| match mode {
        FailModeName::Strict => FailRule::Strict,
        FailModeName::BestEffort => FailRule::BestEffort { emergency },
    });
    Ok(PodRules { split: def.split, fail_mode })
}

/// [`ExpiryPolicy`] with misspelt fields refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictExpiry {
    #[serde(default = "default_max_drift")]
    max_drift: f64,
    #[serde(default = "default_grace_ms")]
    grace_ms: u64,
    #[serde(default)]
    egress_spread_ms: u64,
}

fn default_max_drift() -> f64 {
    ExpiryPolicy::default().max_drift
}

fn default_grace_ms() -> u64 {
    ExpiryPolicy::default().grace_ms
}

fn strict_expiry<'de, D: Deserializer<'de>>(d: D) -> Result<ExpiryPolicy, D::Error> {
    let e = StrictExpiry::deserialize(d)?;
    Ok(ExpiryPolicy { max_drift: e.max_drift, grace_ms: e.grace_ms, egress_spread_ms: e.egress_spread_ms })
}
