//! What a key's limit is, and what input is acceptable.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// Longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Largest `N` a sliding log may hold (its memory is 8·N bytes per key); larger limits use GCRA.
pub const MAX_LOG_LIMIT: u64 = 10_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Exact: at most `limit` admitted in any window of `window_ms` (the per-user limiter).
    #[default]
    SlidingLog,
    /// Smooth: `limit` per `window_ms` as a rate, with `burst` extra capacity.
    Gcra,
}

/// One limit. Unknown fields are refused (see [`Tiers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    #[serde(default)]
    pub algorithm: Algorithm,
    pub limit: u64,
    pub window_ms: u64,
    /// GCRA only: requests that may come at once on top of the rate (0 = strictly spaced).
    #[serde(default)]
    pub burst: u64,
}

impl LimitSpec {
    pub fn sliding(limit: u64, window_ms: u64) -> Self {
        LimitSpec { algorithm: Algorithm::SlidingLog, limit, window_ms, burst: 0 }
    }

    pub fn validate(&self) -> Result<(), KeyError> {
        let bad = |m: String| Err(KeyError::BadSpec(m));
        if self.limit == 0 || self.window_ms == 0 {
            return bad(format!("limit ({}) and window_ms ({}) must be positive", self.limit, self.window_ms));
        }
        if self.window_ms > 86_400_000 * 31 {
            return bad(format!("window_ms {} is above 31 days", self.window_ms));
        }
        if self.algorithm == Algorithm::SlidingLog && self.limit > MAX_LOG_LIMIT {
            return bad(format!(
                "a sliding log holds at most {MAX_LOG_LIMIT} entries per key; use gcra for limit {}",
                self.limit
            ));
        }
        if self.limit > 1_000_000_000 || self.burst > 1_000_000_000 {
            return bad("limit and burst must be at most 10^9".into());
        }
        Ok(())
    }

    /// Largest cost one request may have: more could never be admitted.
    pub fn max_cost(&self) -> u64 {
        match self.algorithm {
            Algorithm::SlidingLog => self.limit,
            Algorithm::Gcra => self.burst + 1,
        }
    }
}

/// Tiers by name, per-key overrides, and the tier of keys nobody classified.
///
/// Unknown fields are refused, here and in every [`LimitSpec`]: a misspelt `"overides"` would
/// otherwise be dropped without a word and leave the limits it meant to set unset. The cluster's
/// stored document (KV `lh_keys_config`/`tiers`) is read the same way, so a document with a field
/// this build does not know is refused (logged) and the limits in force stay: upgrade every
/// instance before writing a field a new build adds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tiers {
    pub default_tier: String,
    pub tiers: BTreeMap<String, LimitSpec>,
    #[serde(default)]
    pub overrides: BTreeMap<String, LimitSpec>,
    /// Keys whose tier the operator set (key → tier name); these win over the caller's tier.
    #[serde(default)]
    pub assignments: BTreeMap<String, String>,
}

impl Default for Tiers {
    fn default() -> Self {
        Tiers {
            default_tier: "free".into(),
            tiers: BTreeMap::from([("free".to_string(), LimitSpec::sliding(20, 60_000))]),
            overrides: BTreeMap::new(),
            assignments: BTreeMap::new(),
        }
    }
}

impl Tiers {
    pub fn validate(&self) -> Result<(), KeyError> {
        if !self.tiers.contains_key(&self.default_tier) {
            return Err(KeyError::BadSpec(format!("default_tier {:?} is not a tier", self.default_tier)));
        }
        for (name, spec) in self.tiers.iter().chain(&self.overrides) {
            // Say which limit, and "invalid limit" once.
            spec.validate().map_err(|e| match e {
                KeyError::BadSpec(why) => KeyError::BadSpec(format!("{name}: {why}")),
                other => other,
            })?;
        }
        if let Some((key, tier)) = self.assignments.iter().find(|(_, t)| !self.tiers.contains_key(*t)) {
            return Err(KeyError::BadSpec(format!("key {key:?} is assigned to unknown tier {tier:?}")));
        }
        Ok(())
    }

    /// The longest window of any limit (how long admissions must be kept).
    pub fn max_window_ms(&self) -> u64 {
        self.tiers.values().chain(self.overrides.values()).map(|s| s.window_ms).max().unwrap_or(0)
    }

    /// Like [`Tiers::resolve`], with the name shown to callers: `override`, the assigned tier,
    /// the caller's tier, or the default, in that order of precedence.
    pub fn resolve_named(&self, key: &str, tier: Option<&str>) -> Result<(String, LimitSpec), KeyError> {
        if let Some(spec) = self.overrides.get(key) {
            return Ok(("override".into(), *spec));
        }
        let name = self.assignments.get(key).map(String::as_str).or(tier).unwrap_or(&self.default_tier);
        let spec = self.tiers.get(name).copied().ok_or_else(|| KeyError::UnknownTier(name.to_string()))?;
        Ok((name.to_string(), spec))
    }

    /// The limit for `key`: its override, else its tier (given by the caller or looked up),
    /// else the default tier. An unknown tier name is an error, never a silent default.
    pub fn resolve(&self, key: &str, tier: Option<&str>) -> Result<LimitSpec, KeyError> {
        self.resolve_named(key, tier).map(|(_, spec)| spec)
    }
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("key must be 1 to {MAX_KEY_BYTES} bytes without control characters")]
    BadKey,
    #[error("cost must be between 1 and {max} for this key's limit, got {got}")]
    BadCost { got: u64, max: u64 },
    #[error("unknown tier {0:?}")]
    UnknownTier(String),
    #[error("invalid limit: {0}")]
    BadSpec(String),
    #[error("{0}")]
    Malformed(String),
}

pub fn check_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) {
        return Err(KeyError::BadKey);
    }
    Ok(())
}
