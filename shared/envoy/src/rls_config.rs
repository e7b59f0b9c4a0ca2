//! envoyproxy/ratelimit's YAML configuration, read as that service reads it, so a user moves
//! Envoy's `ratelimit` filter to Leasehold without rewriting it:
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: generic_key
//!     value: partner-api
//!     rate_limit: { unit: second, requests_per_unit: 1000 }
//!   - key: header_match
//!     value: health
//!     rate_limit: { unlimited: true }
//! ```
//!
//! The keys are ratelimit's (`domain`, `descriptors`, `key`, `value`, `rate_limit` with `unit`,
//! `requests_per_unit`, `unlimited`, `name`, `replaces`; `shadow_mode`, `detailed_metric`); any
//! other key is an error, as there. A request's descriptor is matched the way ratelimit's
//! `GetLimit` does: entry by entry, `key` + `value` first, then a value ending in `*` as a prefix,
//! then the bare `key`; the limit applies when the last entry lands on a node that has one.
//!
//! **Which limit answers.** A node whose whole path has fixed values (no bare `key`, no `*`) is
//! one global limit: the Leasehold limit whose id is the descriptor's full key, each level's
//! `key_value` joined by `/` after the domain (`edge/generic_key_partner-api`), with every
//! character other than `A–Z a–z 0–9 _ -` written `=HH` (its UTF-8 bytes in hex). Its R and B are
//! the limit's definition in `lh_limits`; `requests_per_unit`/`unit` are what Envoy is told
//! (`current_limit`). A limit under a bare `key` or a `*` value counts each value apart (per
//! user, per address): that is the per-key limiter's (`leasehold keys`). Its **tier** is named
//! like a global limit's id (`edge/remote_address`), and each value's key is the tier, then the
//! request's values, each written as in an id, joined by `/` (`edge/remote_address/10=2E0=2E0=2E1`).

use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use crate::rls_error::{RlsConfigError, RlsRule};

/// A limit's time unit, as `RateLimitResponse.RateLimit.Unit` numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit's length, as ratelimit counts it (a month is 30 days, a year 365).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The proto's number (`envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`).
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }
}

/// What a matched descriptor is limited by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredLimit {
    /// The global Leasehold limit it draws from (`None` when `unlimited` or per value).
    pub limit: Option<String>,
    /// Per value: the per-key limiter's tier (`None` when `unlimited` or global).
    pub tier: Option<String>,
    /// ratelimit's full key: `domain.key_value.key_value`.
    pub full_key: String,
    /// `rate_limit.name` (what `replaces` refers to).
    pub name: Option<String>,
    /// `requests_per_unit` per `unit`, told to Envoy; `None` when `unlimited`.
    pub per_unit: Option<(u32, Unit)>,
    /// Decided and counted, but never answered `OVER_LIMIT`.
    pub shadow_mode: bool,
    /// Names of limits this one replaces when both match one request.
    pub replaces: Vec<String>,
}

/// One entry of a request's descriptor.
#[derive(Clone, Copy, Debug)]
pub struct DescriptorEntry<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

#[derive(Default, Debug)]
struct Node {
    /// Children by key, then by fixed value.
    fixed: HashMap<String, HashMap<String, Node>>,
    /// Children by key whose value ends in `*`: (prefix, node), in file order.
    prefixed: HashMap<String, Vec<(String, Node)>>,
    /// Children by key with no value (every value).
    any: HashMap<String, Node>,
    limit: Option<Arc<ConfiguredLimit>>,
}

impl Node {
    fn has_children(&self) -> bool {
        !(self.fixed.is_empty() && self.prefixed.is_empty() && self.any.is_empty())
    }

    fn child(&self, e: DescriptorEntry<'_>) -> Option<&Node> {
        if let Some(n) = self.fixed.get(e.key).and_then(|by_value| by_value.get(e.value)) {
            return Some(n);
        }
        let by_prefix = self.prefixed.get(e.key).into_iter().flatten();
        if let Some((_, n)) = by_prefix.into_iter().find(|(prefix, _)| e.value.starts_with(prefix.as_str())) {
            return Some(n);
        }
        self.any.get(e.key)
    }
}

/// Every domain's descriptor tree.
#[derive(Default, Debug)]
pub struct RlsConfig {
    domains: BTreeMap<String, Node>,
    /// Every global limit named (its id), with what Envoy is told of it and its full key.
    limits: BTreeMap<String, (u32, Unit)>,
    full_keys: BTreeMap<String, String>,
    /// Every per-value limit's tier, with what Envoy is told of it.
    tiers: BTreeMap<String, (u32, Unit)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    /// Metrics per value in ratelimit; accepted, no effect here.
    #[serde(default, rename = "detailed_metric")]
    _detailed_metric: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Vec<YamlReplaces>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    #[serde(default)]
    name: String,
}

/// One segment of a limit id: `A–Z a–z 0–9 _ -` as they are, any other byte as `=HH`.
fn id_segment(out: &mut String, text: &str) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
}

/// Where a node sits while loading: its full key, its limit id so far, and whether every level
/// above had a fixed value.
struct Path {
    full_key: String,
    limit_id: String,
    /// Some level above (or this one) has no value or a prefix: each value is counted apart.
    per_value: bool,
}

impl ConfiguredLimit {
    /// A per-value limit's key in the per-key limiter for one request's descriptor: the tier,
    /// then each entry's value (written as in an id), joined by `/`. `None` for other limits.
    pub fn key_for(&self, entries: &[DescriptorEntry<'_>]) -> Option<String> {
        let mut key = self.tier.clone()?;
        for e in entries {
            key.push('/');
            id_segment(&mut key, e.value);
        }
        Some(key)
    }
}

impl RlsConfig {
    /// Reads every file (name, text) as one configuration: each file is one domain, and a domain
    /// given twice is an error (ratelimit's default, without merging).
    pub fn parse<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<RlsConfig, RlsConfigError> {
        let mut config = RlsConfig::default();
        for (file, text) in files {
            let bad = |rule: RlsRule| RlsConfigError { file: file.to_string(), rule };
            let root: YamlRoot =
                serde_saphyr::from_str(text).map_err(|e| bad(RlsRule::NotRatelimitConfig(Box::new(e))))?;
            if root.domain.is_empty() {
                return Err(bad(RlsRule::EmptyDomain));
            }
            if config.domains.contains_key(&root.domain) {
                return Err(bad(RlsRule::DuplicateDomain(root.domain)));
            }
            let mut node = Node::default();
            let mut limit_id = String::new();
            id_segment(&mut limit_id, &root.domain);
            let path = Path { full_key: root.domain.clone(), limit_id, per_value: false };
            config.load(&mut node, &path, root.descriptors).map_err(bad)?;
            config.domains.insert(root.domain, node);
        }
        Ok(config)
    }

    fn load(&mut self, parent: &mut Node, path: &Path, descriptors: Vec<YamlDescriptor>) -> Result<(), RlsRule> {
        for d in descriptors {
            if d.key.is_empty() {
                return Err(RlsRule::EmptyKey { at: path.full_key.clone() });
            }
            let composite = if d.value.is_empty() { d.key.clone() } else { format!("{}_{}", d.key, d.value) };
            let full_key = format!("{}.{composite}", path.full_key);
            let mut limit_id = format!("{}/", path.limit_id);
            id_segment(&mut limit_id, &composite);
            let per_value = path.per_value || d.value.is_empty() || d.value.ends_with('*');
            let here = Path { full_key, limit_id, per_value };
            let mut node = Node { limit: self.limit_of(&here, d.rate_limit, d.shadow_mode)?, ..Node::default() };
            self.load(&mut node, &here, d.descriptors)?;
            let duplicate = || Err(RlsRule::DuplicateKey { key: here.full_key.clone() });
            match d.value.strip_suffix('*') {
                _ if d.value.is_empty() => {
                    if parent.any.contains_key(&d.key) {
                        return duplicate();
                    }
                    parent.any.insert(d.key, node);
                }
                Some(prefix) => {
                    let siblings = parent.prefixed.entry(d.key).or_default();
                    if siblings.iter().any(|(p, _)| p == prefix) {
                        return duplicate();
                    }
                    siblings.push((prefix.to_string(), node));
                }
                None => {
                    let by_value = parent.fixed.entry(d.key).or_default();
                    if by_value.contains_key(&d.value) {
                        return duplicate();
                    }
                    by_value.insert(d.value, node);
                }
            }
        }
        Ok(())
    }

    fn limit_of(
        &mut self,
        at: &Path,
        rate_limit: Option<YamlRateLimit>,
        shadow_mode: bool,
    ) -> Result<Option<Arc<ConfiguredLimit>>, RlsRule> {
        let Some(r) = rate_limit else { return Ok(None) };
        let key = &at.full_key;
        let unit = match (r.unlimited, r.unit.as_str(), Unit::parse(&r.unit)) {
            (true, "", _) => None,
            (true, _, _) => return Err(RlsRule::UnitWhenUnlimited { key: key.clone() }),
            (false, _, Some(unit)) => Some(unit),
            (false, u, None) => return Err(RlsRule::InvalidUnit { key: key.clone(), unit: u.to_string() }),
        };
        let name = Some(r.name).filter(|n| !n.is_empty());
        let mut replaces = Vec::with_capacity(r.replaces.len());
        for rep in r.replaces {
            if rep.name.is_empty() {
                return Err(RlsRule::EmptyReplaces { key: key.clone() });
            }
            if Some(&rep.name) == name.as_ref() {
                return Err(RlsRule::ReplacesItself { key: key.clone() });
            }
            replaces.push(rep.name);
        }
        let per_unit = unit.map(|u| (r.requests_per_unit, u));
        let id = at.limit_id.clone();
        if per_unit.is_some() {
            if id.len() > leasehold_core::wire::MAX_ID_LEN {
                let (len, max) = (id.len(), leasehold_core::wire::MAX_ID_LEN);
                return Err(RlsRule::LimitIdTooLong { key: key.clone(), id, len, max });
            }
            if let Some(other) = self.full_keys.insert(id.clone(), key.clone()) {
                // `a_b` + `c` and `a` + `b_c` make one composite key, as in ratelimit.
                return Err(RlsRule::SameLimitId { key: key.clone(), other, id });
            }
        }
        let (limit, tier) = match (per_unit, at.per_value) {
            (None, _) => (None, None),
            (Some(per_unit), true) => {
                self.tiers.insert(id.clone(), per_unit);
                (None, Some(id))
            }
            (Some(per_unit), false) => {
                self.limits.insert(id.clone(), per_unit);
                (Some(id), None)
            }
        };
        let configured = ConfiguredLimit { limit, tier, full_key: key.clone(), name, per_unit, shadow_mode, replaces };
        Ok(Some(Arc::new(configured)))
    }

    /// The limit a request's descriptor falls under in `domain`, as ratelimit's `GetLimit`: none
    /// when the domain is unknown, an entry matches nothing, or the descriptor has more entries
    /// than the path to the limit.
    pub fn lookup(&self, domain: &str, entries: &[DescriptorEntry<'_>]) -> Option<&Arc<ConfiguredLimit>> {
        let mut node = self.domains.get(domain)?;
        let mut found = None;
        for (i, entry) in entries.iter().enumerate() {
            let Some(next) = node.child(*entry) else { break };
            if i + 1 == entries.len() {
                found = next.limit.as_ref();
            }
            if !next.has_children() {
                break;
            }
            node = next;
        }
        found
    }

    /// Every global limit the configuration names (its id in `lh_limits`), with the
    /// `requests_per_unit` and `unit` Envoy is told.
    pub fn limits(&self) -> &BTreeMap<String, (u32, Unit)> {
        &self.limits
    }

    /// Every per-value limit's tier in the per-key limiter (`leasehold keys`), with the
    /// `requests_per_unit` and `unit` Envoy is told (the tier's limit and window must say the same).
    pub fn tiers(&self) -> &BTreeMap<String, (u32, Unit)> {
        &self.tiers
    }

    /// The domains configured.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }
}

#[cfg(test)]
#[path = "rls_config_tests.rs"]
mod tests;
