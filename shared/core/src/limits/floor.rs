//! A DC's floor as a definition gives it: a rate (with `floor_burst` tokens, or a default), or
//! the legacy exact quota; and the rule that a floor with a rate must be able to admit a call.

use super::rate::{Rate, Tokens};
use crate::coordinator::LimitConfig;
use crate::quota::{Quota, MILLI};
use crate::InvalidSetting;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A DC's floor: a rate, or the legacy exact quota (which carries its own burst).
#[derive(Clone, Debug, PartialEq)]
pub enum Floor {
    /// A rate; its burst is `floor_burst`, or a default when not given.
    Rate(Rate),
    /// The legacy exact `{ rate_milli_per_s, burst_milli }`.
    Exact(Quota),
}

impl Default for Floor {
    fn default() -> Self {
        Floor::Rate(Rate::default())
    }
}

/// DC `dc`'s `floor` (and `floor_burst`) in exact units under the limit `limit` (its burst
/// defaulted when not given).
pub(super) fn exact(
    dc: &str,
    floor: &Floor,
    floor_burst: Option<Tokens>,
    limit: Quota,
) -> Result<Quota, InvalidSetting> {
    match (floor, floor_burst) {
        (Floor::Rate(rate), Some(burst)) => Ok(Quota::new(rate.milli_per_s(), burst.milli)),
        (Floor::Rate(rate), None) => Ok(with_default_burst(Quota::new(rate.milli_per_s(), 0), limit)),
        (Floor::Exact(floor), None) => Ok(with_default_burst(*floor, limit)),
        (Floor::Exact(_), Some(_)) => Err(InvalidSetting::FloorBurstWithoutRate { dc: dc.to_string() }),
    }
}

/// Why a floor of `config` can never admit a call, if one cannot: a rate with less than one
/// whole token of burst.
pub(super) fn unusable(config: &LimitConfig) -> Option<InvalidSetting> {
    let dc = config.dcs.iter().find(|d| d.floor.rate_milli_per_s > 0 && d.floor.burst_milli < MILLI)?;
    Some(InvalidSetting::FloorCannotAdmit { dc: dc.name.clone(), floor: dc.floor })
}

/// A floor's burst when none is given: a rate floor without one (or a legacy exact floor with
/// `burst_milli = 0`, which could never admit a call) reserves the floor's rate over
/// [`DEFAULT_FLOOR_BURST_MS`], at most the limit's burst in the floor's share of the rate, and
/// at least one whole token. Whole tokens: the DC manager hands out a floor's burst one token per
/// pod, so it serves as many pods as it has tokens.
fn with_default_burst(floor: Quota, limit: Quota) -> Quota {
    if floor.rate_milli_per_s == 0 || floor.burst_milli > 0 {
        return floor;
    }
    let over_span = floor.rate_milli_per_s.saturating_mul(DEFAULT_FLOOR_BURST_MS).div_ceil(1_000 * MILLI);
    let share = (limit.burst_milli as u128 * floor.rate_milli_per_s as u128
        / (limit.rate_milli_per_s.max(1) as u128 * MILLI as u128)) as u64;
    Quota::new(floor.rate_milli_per_s, over_span.min(share).max(1) * MILLI)
}

/// The span of a floor's rate its default burst holds ([`with_default_burst`]).
pub const DEFAULT_FLOOR_BURST_MS: u64 = 100;

impl Serialize for Floor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Floor::Rate(rate) => rate.serialize(s),
            Floor::Exact(quota) => quota.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Floor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FloorVisitor;
        impl<'de> Visitor<'de> for FloorVisitor {
            type Value = Floor;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a floor rate such as \"50/s\", or {{ rate_milli_per_s = …, burst_milli = … }}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Floor, E> {
                Rate::parse(v).map(Floor::Rate).map_err(E::custom)
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Floor, M::Error> {
                ExactQuota::deserialize(de::value::MapAccessDeserializer::new(map)).map(|q| Floor::Exact(q.into()))
            }
        }
        d.deserialize_any(FloorVisitor)
    }
}

/// The legacy `{ rate_milli_per_s, burst_milli }`, misspelt fields refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExactQuota {
    rate_milli_per_s: u64,
    burst_milli: u64,
}

impl From<ExactQuota> for Quota {
    fn from(q: ExactQuota) -> Quota {
        Quota::new(q.rate_milli_per_s, q.burst_milli)
    }
}

pub(super) fn exact_quota<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Quota>, D::Error> {
    ExactQuota::deserialize(d).map(|q| Some(q.into()))
}
