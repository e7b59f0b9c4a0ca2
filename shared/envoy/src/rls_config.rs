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
//! `requests_per_unit`, `unlimited`, `name`, `replaces`; `shadow_mode`, `quota_mode`,
//! `share_threshold`; `detailed_metric`, `value_to_metric` and `metadata`, which touch metrics
//! and response metadata only, accepted); any other key is an error, as there (`rls_yaml.rs`).
//! A request's descriptor is matched the way ratelimit's `GetLimit` does: entry by entry, on
//! ratelimit's composite key `key_value`: the same composite first, then each composite holding
//! `*` in file order (a `*` anywhere matches any run of characters), then the bare `key`; the
//! limit applies when the last entry lands on a node that has one.
//!
//! **Which limit answers.** A node whose whole path has fixed values, or values with `*` marked
//! `share_threshold` (one counter for every value they match), is one global limit: the
//! Leasehold limit whose id is the descriptor's full key, each level's `key_value` joined by `/`
//! after the domain (`edge/generic_key_partner-api`), with every character other than `A–Z a–z
//! 0–9 _ -` written `=HH` (its UTF-8 bytes in hex); an id longer than 128 bytes is cut and ends
//! with `~` and a digest (`rls_id.rs`). Its R and B are the limit's definition
//! in `lh_limits`; `requests_per_unit`/`unit` are what Envoy is told (`current_limit`). A limit
//! under a bare `key` or a `*` value without `share_threshold` counts each value apart (per user,
//! per address): that is the per-key limiter's (`leasehold keys`). Its **tier** is named like a
//! global limit's id (`edge/remote_address`), and each value's key is the tier, then the
//! request's values (a shared level's pattern in place of its value), each written as in an id,
//! joined by `/` (`edge/remote_address/10=2E0=2E0=2E1`). `requests_per_unit: 0` needs no limit:
//! every request is over it, as in ratelimit.

use crate::rls_id::{bounded_id, id_segment, WildcardPattern};
use crate::rls_yaml::{YamlDescriptor, YamlRateLimit};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub use crate::rls_error::{RlsConfigError, RlsRule};
pub use crate::rls_unit::Unit;

/// What a matched descriptor is limited by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredLimit {
    /// The global Leasehold limit it draws from (`None` when `unlimited`, per value, or
    /// `requests_per_unit: 0`).
    pub limit: Option<String>,
    /// Per value: the per-key limiter's tier (`None` when `unlimited`, global, or
    /// `requests_per_unit: 0`).
    pub tier: Option<String>,
    /// ratelimit's full key: `domain.key_value.key_value`.
    pub full_key: String,
    /// `rate_limit.name` (what `replaces` refers to).
    pub name: Option<String>,
    /// `requests_per_unit` per `unit`, told to Envoy; `None` when `unlimited`.
    pub per_unit: Option<(u32, Unit)>,
    /// Decided and counted, but never answered `OVER_LIMIT`.
    pub shadow_mode: bool,
    /// Over its limit, it denies the request only when every `quota_mode` descriptor of the
    /// request is over ([`overall_over_limit`]).
    pub quota_mode: bool,
    /// Names of limits this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// Per level of its path: the pattern counted in place of the request's value
    /// (`share_threshold`), or `None` (the value itself).
    shared_values: Vec<Option<String>>,
}

/// One entry of a request's descriptor.
#[derive(Clone, Copy, Debug)]
pub struct DescriptorEntry<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// How files are read together.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Two files of one domain are merged (ratelimit's `MERGE_DOMAIN_CONFIG`); without it, refused.
    pub merge_domains: bool,
}

#[derive(Default, Debug)]
struct Node {
    /// Children by ratelimit's composite key: `key_value`, or `key` when it has no value.
    children: HashMap<String, Node>,
    /// The composite keys holding `*`, in file order.
    wildcards: Vec<(String, WildcardPattern)>,
    limit: Option<Arc<ConfiguredLimit>>,
}

impl Node {
    fn has_children(&self) -> bool {
        !self.children.is_empty()
    }

    /// ratelimit's `GetLimit` step: the composite `key_value`, then the first wildcard that
    /// matches it, then the bare key.
    fn child(&self, e: DescriptorEntry<'_>) -> Option<&Node> {
        let composite = format!("{}_{}", e.key, e.value);
        if let Some(n) = self.children.get(&composite) {
            return Some(n);
        }
        if let Some((key, _)) = self.wildcards.iter().find(|(_, pattern)| pattern.matches(&composite)) {
            return self.children.get(key);
        }
        self.children.get(e.key)
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

/// Where a node sits while loading: its full key, its limit id so far (unbounded), whether a
/// level counts each value apart, and the shared patterns of the levels so far.
struct Path {
    full_key: String,
    limit_id: String,
    /// Some level above (or this one) has no value, or a `*` without `share_threshold`.
    per_value: bool,
    shared_values: Vec<Option<String>>,
}

impl ConfiguredLimit {
    /// A per-value limit's key in the per-key limiter for one request's descriptor: the tier,
    /// then each entry's value (a `share_threshold` level's pattern instead), written as in an
    /// id, joined by `/`. `None` for other limits.
    pub fn key_for(&self, entries: &[DescriptorEntry<'_>]) -> Option<String> {
        let mut key = self.tier.clone()?;
        for (i, e) in entries.iter().enumerate() {
            key.push('/');
            let shared = self.shared_values.get(i).and_then(Option::as_deref);
            id_segment(&mut key, shared.unwrap_or(e.value));
        }
        Some(key)
    }

    /// `requests_per_unit: 0`: every request is over it (ratelimit's meaning); no lease needed.
    pub fn denies_every_request(&self) -> bool {
        matches!(self.per_unit, Some((0, _)))
    }
}

/// ratelimit's overall code from its descriptors' (over the limit, in `quota_mode`): over when
/// any descriptor not in `quota_mode` is over, or when there are `quota_mode` descriptors and
/// every one of them is over. Unlimited and unmatched descriptors are `(false, false)`.
pub fn overall_over_limit(descriptors: impl IntoIterator<Item = (bool, bool)>) -> bool {
    let (mut quota, mut quota_over) = (0usize, 0usize);
    for (over, quota_mode) in descriptors {
        match (over, quota_mode) {
            (true, false) => return true,
            (over, true) => {
                quota += 1;
                quota_over += usize::from(over);
            }
            (false, false) => {}
        }
    }
    quota > 0 && quota == quota_over
}

impl RlsConfig {
    /// Reads every file (name, text) as one configuration: each file is one domain, and a domain
    /// given twice is an error (ratelimit's default, without merging).
    pub fn parse<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<RlsConfig, RlsConfigError> {
        RlsConfig::load(files, LoadOptions::default())
    }

    /// Reads every file (name, text) as one configuration, merging the files of one domain when
    /// `options` say so (a composite key given twice at one level is still an error).
    pub fn load<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
        options: LoadOptions,
    ) -> Result<RlsConfig, RlsConfigError> {
        let mut config = RlsConfig::default();
        for (file, text) in files {
            let bad = |rule: RlsRule| RlsConfigError { file: file.to_string(), rule };
            let root = crate::rls_yaml::read(text).map_err(bad)?;
            if root.domain.is_empty() {
                return Err(bad(RlsRule::EmptyDomain));
            }
            if config.domains.contains_key(&root.domain) && !options.merge_domains {
                return Err(bad(RlsRule::DuplicateDomain(root.domain)));
            }
            let mut node = config.domains.remove(&root.domain).unwrap_or_default();
            let mut limit_id = String::new();
            id_segment(&mut limit_id, &root.domain);
            let path = Path { full_key: root.domain.clone(), limit_id, per_value: false, shared_values: Vec::new() };
            config.load_level(&mut node, &path, root.descriptors).map_err(bad)?;
            config.domains.insert(root.domain, node);
        }
        Ok(config)
    }

    fn load_level(&mut self, parent: &mut Node, path: &Path, descriptors: Vec<YamlDescriptor>) -> Result<(), RlsRule> {
        for d in descriptors {
            if d.key.is_empty() {
                return Err(RlsRule::EmptyKey { at: path.full_key.clone() });
            }
            let composite = if d.value.is_empty() { d.key.clone() } else { format!("{}_{}", d.key, d.value) };
            let full_key = format!("{}.{composite}", path.full_key);
            if parent.children.contains_key(&composite) {
                return Err(RlsRule::DuplicateKey { key: full_key });
            }
            let wildcard = composite.contains('*');
            if d.share_threshold && !wildcard {
                return Err(RlsRule::ShareThresholdWithoutWildcard { composite });
            }
            if d.share_threshold && !d.value.contains('*') {
                // ratelimit would count it per request key; nothing here counts by key.
                return Err(RlsRule::ShareThresholdOnKey { key: full_key });
            }
            let shared = d.share_threshold.then(|| d.value.clone());
            let mut limit_id = format!("{}/", path.limit_id);
            id_segment(&mut limit_id, &composite);
            let per_value = path.per_value || d.value.is_empty() || (wildcard && shared.is_none());
            let mut shared_values = path.shared_values.clone();
            shared_values.push(shared);
            let here = Path { full_key, limit_id, per_value, shared_values };
            let limit = self.limit_of(&here, d.rate_limit, d.shadow_mode, d.quota_mode)?;
            let mut node = Node { limit, ..Node::default() };
            self.load_level(&mut node, &here, d.descriptors)?;
            if wildcard {
                parent.wildcards.push((composite.clone(), WildcardPattern::new(&composite)));
            }
            parent.children.insert(composite, node);
        }
        Ok(())
    }

    fn limit_of(
        &mut self,
        at: &Path,
        rate_limit: Option<YamlRateLimit>,
        shadow_mode: bool,
        quota_mode: bool,
    ) -> Result<Option<Arc<ConfiguredLimit>>, RlsRule> {
        let Some(r) = rate_limit else { return Ok(None) };
        let key = &at.full_key;
        // As ratelimit: `unlimited` with a unit it knows is an error; with one it does not know,
        // the unit is ignored.
        let unit = match (r.unlimited, Unit::parse(&r.unit)) {
            (true, None) => None,
            (true, Some(_)) => return Err(RlsRule::UnitWhenUnlimited { key: key.clone() }),
            (false, Some(unit)) => Some(unit),
            (false, None) => return Err(RlsRule::InvalidUnit { key: key.clone(), unit: r.unit }),
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
        let counted = per_unit.filter(|(n, _)| *n > 0);
        let id = bounded_id(at.limit_id.clone());
        if counted.is_some() {
            if let Some(other) = self.full_keys.insert(id.clone(), key.clone()) {
                // Two long ids whose digests agree: refused rather than counted as one.
                return Err(RlsRule::SameLimitId { key: key.clone(), other, id });
            }
        }
        let (limit, tier) = match (counted, at.per_value) {
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
        let shared_values = at.shared_values.clone();
        let configured = ConfiguredLimit {
            limit,
            tier,
            full_key: key.clone(),
            name,
            per_unit,
            shadow_mode,
            quota_mode,
            replaces,
            shared_values,
        };
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

#[cfg(test)]
#[path = "rls_features_tests.rs"]
mod features_tests;
