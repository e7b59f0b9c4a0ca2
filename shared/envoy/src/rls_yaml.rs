//! ratelimit's YAML as written, read in its two passes (`ConfigFileContentToYaml`): first every
//! key is checked against the keys ratelimit knows (`validateYamlKeys`, anything goes under
//! `metadata`), then the file is read into its typed shape.
//!
//! One difference, on purpose: a key ratelimit knows but in a place where it means nothing
//! (`unit` beside `key`, say) is ignored there by ratelimit and refused here, since a misplaced
//! `requests_per_unit` would leave a descriptor silently unlimited.

use crate::rls_error::RlsRule;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// Every key ratelimit's configuration may hold, at any depth (its `validKeys`).
const KNOWN_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// A file read both ways, or the rule it breaks.
pub(crate) fn read(text: &str) -> Result<YamlRoot, RlsRule> {
    let loading = |e| RlsRule::NotRatelimitConfig(Box::new(e));
    if text.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return Ok(YamlRoot::default()); // an empty document: refused for its empty domain
    }
    let shape: Shape = serde_saphyr::from_str(text).map_err(loading)?;
    match &shape {
        Shape::Map(_) => check_keys(&shape)?,
        Shape::Null => return Ok(YamlRoot::default()),
        other => return Err(RlsRule::NotAMap(other.to_string())),
    }
    serde_saphyr::from_str(text).map_err(loading)
}

/// `validateYamlKeys`: string keys ratelimit knows, lists of maps, nothing checked under
/// `metadata`.
fn check_keys(shape: &Shape) -> Result<(), RlsRule> {
    let Shape::Map(entries) = shape else { return Ok(()) };
    for (key, value) in entries {
        let Key::Text(key) = key else { return Err(RlsRule::KeyNotText(key.to_string())) };
        if !KNOWN_KEYS.contains(&key.as_str()) {
            return Err(RlsRule::UnknownKey(key.clone()));
        }
        if key == "metadata" {
            continue;
        }
        match value {
            Shape::List(items) => {
                for item in items {
                    if !matches!(item, Shape::Map(_)) {
                        return Err(RlsRule::ListOfNonMaps(item.to_string()));
                    }
                    check_keys(item)?;
                }
            }
            Shape::Map(_) => check_keys(value)?,
            Shape::Scalar(_) | Shape::Null => {}
        }
    }
    Ok(())
}

/// A YAML node, as much of it as the key check needs.
enum Shape {
    Map(Vec<(Key, Shape)>),
    List(Vec<Shape>),
    Scalar(String),
    Null,
}

/// A map's key: text, or anything else (written as YAML wrote it, for the error).
enum Key {
    Text(String),
    Other(String),
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Map(_) => f.write_str("a map"),
            Shape::List(_) => f.write_str("a list"),
            Shape::Scalar(s) => f.write_str(s),
            Shape::Null => f.write_str("null"),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Text(s) | Key::Other(s) => f.write_str(s),
        }
    }
}

struct ShapeVisitor;

macro_rules! scalar {
    ($name:ident, $t:ty) => {
        fn $name<E: de::Error>(self, v: $t) -> Result<Shape, E> {
            Ok(Shape::Scalar(v.to_string()))
        }
    };
}

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }
    scalar!(visit_bool, bool);
    scalar!(visit_i64, i64);
    scalar!(visit_u64, u64);
    scalar!(visit_f64, f64);
    scalar!(visit_str, &str);
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Shape, E> {
        Ok(Shape::Scalar(v.to_string()))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Shape, E> {
        Ok(Shape::Scalar(v.to_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Shape>()? {
            items.push(item);
        }
        Ok(Shape::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<Key, Shape>()? {
            entries.push((k, v));
        }
        Ok(Shape::Map(entries))
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        Ok(match d.deserialize_any(ShapeVisitor)? {
            Shape::Scalar(s) if !looks_like_non_text(&s) => Key::Text(s),
            other => Key::Other(other.to_string()),
        })
    }
}

/// Whether a scalar key would be a number or a boolean to ratelimit's YAML reader (which then
/// refuses it as a key that is not a string).
fn looks_like_non_text(s: &str) -> bool {
    (s.parse::<f64>().is_ok() && s.bytes().any(|b| b.is_ascii_digit())) || matches!(s, "true" | "false")
}

/// A field that may be written with no value (`name:`): its default then, as ratelimit reads it.
fn or_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A file: its domain and descriptors.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct YamlRoot {
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) domain: String,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) descriptors: Vec<YamlDescriptor>,
}

/// One descriptor of a file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct YamlDescriptor {
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) key: String,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) value: String,
    pub(crate) rate_limit: Option<YamlRateLimit>,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) descriptors: Vec<YamlDescriptor>,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) shadow_mode: bool,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) quota_mode: bool,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) share_threshold: bool,
    /// Metrics per value in ratelimit; accepted, no effect here.
    #[serde(default, rename = "detailed_metric", deserialize_with = "or_default")]
    _detailed_metric: bool,
    /// Metric names with the request's value in ratelimit; accepted, no effect here.
    #[serde(default, rename = "value_to_metric", deserialize_with = "or_default")]
    _value_to_metric: bool,
    /// Returned to Envoy as dynamic metadata by ratelimit when so set; no effect on limiting:
    /// accepted, whatever it holds.
    #[serde(default, rename = "metadata")]
    _metadata: Option<IgnoredAny>,
}

/// A descriptor's `rate_limit`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct YamlRateLimit {
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) requests_per_unit: u32,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) unit: String,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) unlimited: bool,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) name: String,
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) replaces: Vec<YamlReplaces>,
}

/// One entry of `replaces`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct YamlReplaces {
    #[serde(default, deserialize_with = "or_default")]
    pub(crate) name: String,
}
