//! `leasehold keys` settings: defaults → TOML file (`--config`) → environment
//! (`LEASEHOLD_KEYS_*`) → flags, validated before anything starts (a bad one: exit 2).

use crate::access::{AdminToken, Trust};
use crate::persist::Durability;
use leasehold_per_key::Tiers;
use leasehold_process::SettingsError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const ENV_PREFIX: &str = "LEASEHOLD_KEYS_";

/// The largest clock skew a test may give an instance: a day.
const MAX_CLOCK_OFFSET_MS: u64 = 86_400_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeysSettings {
    /// The HTTP API's address.
    pub listen: String,
    /// Join the cluster on this NATS server: own shards through KV leases, store admissions in
    /// JetStream, answer `lh.keys.check.<shard>`. Without it, one standalone instance.
    pub nats_url: Option<String>,
    /// A `.creds` file (NATS user JWT and seed, `leasehold auth`) to connect with; none: the URL's
    /// user and password, if any.
    #[serde(default)]
    pub nats_creds_file: Option<std::path::PathBuf>,
    /// Tiers, overrides and assignments as JSON; default: one tier "free", 20 per minute. In a
    /// cluster, the tiers stored in KV win.
    pub tiers_file: Option<PathBuf>,
    /// Keys tracked at most; new keys beyond are shed with 429.
    pub max_keys: usize,
    /// Requests decided or forwarded at once; more are shed with 429.
    pub max_in_flight: usize,
    /// Shards (every instance of a cluster must agree).
    pub shards: u32,
    /// Lease TTL of a shard: how long a crashed owner's keys stay unanswered, at most.
    pub shard_ttl_ms: u64,
    /// `zero-loss` or `interval:<ms>` ([`Durability`]).
    pub durability: String,
    /// How long admissions are kept: the longest window a tier may have.
    pub retention_ms: u64,
    /// JetStream replicas of the buckets and the admission stream (3 on a production cluster).
    pub replicas: usize,
    /// This instance's name in the cluster (default: a random one).
    pub instance_id: Option<String>,
    /// A key above this many requests per second on its owner is reported hot.
    pub hot_key_rps: u64,
    /// After SIGTERM: how long `/healthz` answers 503 "draining" while requests are still
    /// answered, before the listener closes (at least a load balancer's time to notice).
    pub drain_ms: u64,
    /// Callers may name their tier (`?tier=`, `"tier"`): only if every caller is trusted.
    pub caller_tier: bool,
    /// Take the tier from this request header, which a trusted gateway sets (and strips from
    /// the client's request).
    pub tier_header: Option<String>,
    /// The admin endpoints' bearer token (`GET`/`PUT /v1/tiers`, `GET /v1/hot`); without one
    /// they are refused. From the file or `LEASEHOLD_KEYS_ADMIN_TOKEN`, never a flag (it would
    /// show in the process list).
    pub admin_token: Option<AdminToken>,
    /// Skews this instance's clock by so many ms, ahead or (negative) behind (tests and chaos
    /// runs only): its windows and the admissions it stores read that clock.
    pub clock_offset_ms: i64,
}

impl Default for KeysSettings {
    fn default() -> Self {
        KeysSettings {
            listen: "127.0.0.1:8090".into(),
            nats_url: None,
            nats_creds_file: None,
            tiers_file: None,
            max_keys: 1_000_000,
            max_in_flight: 4_096,
            shards: 64,
            shard_ttl_ms: 3_000,
            durability: "interval:100".into(),
            retention_ms: 3_600_000,
            replicas: 1,
            instance_id: None,
            hot_key_rps: 500,
            drain_ms: 2_000,
            caller_tier: false,
            tier_header: None,
            admin_token: None,
            clock_offset_ms: 0,
        }
    }
}

impl KeysSettings {
    /// The settings and their defaults, for `--help`.
    pub fn help() -> String {
        leasehold_process::settings_help::<KeysSettings>(ENV_PREFIX)
    }

    /// Load (see the module docs) and validate; `flags` leaves out the flags not given.
    pub fn load(file: Option<&Path>, flags: &impl Serialize) -> Result<Self, SettingsError> {
        leasehold_process::load_settings_with_flags(file, ENV_PREFIX, &["admin_token"], flags, Self::validate)
    }

    pub fn validate(&self) -> Result<(), SettingsError> {
        let bad = |m: String| Err(SettingsError::Invalid(m));
        leasehold_process::check_creds_file(self.nats_creds_file.as_deref())?;
        if !(1..=4_096).contains(&self.shards) {
            return bad(format!("shards must be within 1..=4096, got {}", self.shards));
        }
        let max_ttl = leasehold_per_key::shards::MAX_SHARD_TTL_MS;
        if !(100..=max_ttl).contains(&self.shard_ttl_ms) {
            return bad(format!("shard_ttl_ms must be within 100..={max_ttl}, got {}", self.shard_ttl_ms));
        }
        self.durability().map_err(|e| SettingsError::Refused(Box::new(e)))?;
        if self.drain_ms > 600_000 {
            return bad(format!("drain_ms must be at most 600000, got {}", self.drain_ms));
        }
        if self.max_keys == 0 || self.max_in_flight == 0 || self.retention_ms == 0 {
            return bad("max_keys, max_in_flight and retention_ms must be at least 1".into());
        }
        if !(1..=5).contains(&self.replicas) {
            return bad(format!("replicas must be within 1..=5 (JetStream's), got {}", self.replicas));
        }
        if let Some(id) = &self.instance_id {
            leasehold_core::wire::check_id("instance_id", id).map_err(|e| SettingsError::Invalid(e.to_string()))?;
        }
        if let Some(h) = &self.tier_header {
            if axum::http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return bad(format!("tier_header must be a header name such as x-leasehold-tier, got {h:?}"));
            }
        }
        if self.clock_offset_ms.unsigned_abs() > MAX_CLOCK_OFFSET_MS {
            return bad(format!("clock_offset_ms must be within ±{MAX_CLOCK_OFFSET_MS}, got {}", self.clock_offset_ms));
        }
        if let Some(t) = &self.admin_token {
            t.check().map_err(|e| SettingsError::Refused(Box::new(e)))?;
        }
        Ok(())
    }

    pub fn durability(&self) -> Result<Durability, crate::persist::BadDurability> {
        self.durability.parse()
    }

    /// The tiers to start with: the tiers file's, or one tier "free" of 20 per minute. Valid,
    /// and in a cluster no window longer than the admissions kept (`retention_ms`).
    pub fn tiers(&self) -> Result<Tiers, SettingsError> {
        let invalid = |m: String| SettingsError::Invalid(m);
        let tiers = match &self.tiers_file {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|e| invalid(format!("cannot read {}: {e}", p.display())))?;
                serde_json::from_str(&text).map_err(|e| invalid(format!("{}: {e}", p.display())))?
            }
            None => Tiers::default(),
        };
        let retention_ms = if self.nats_url.is_some() { self.retention_ms } else { u64::MAX };
        crate::limiter::check_tiers(&tiers, retention_ms).map_err(|e| invalid(e.to_string()))?;
        Ok(tiers)
    }

    /// What the HTTP API trusts callers with.
    pub fn trust(&self) -> Trust {
        Trust {
            caller_tier: self.caller_tier,
            tier_header: self.tier_header.as_ref().and_then(|h| axum::http::HeaderName::from_bytes(h.as_bytes()).ok()),
            admin_token: self.admin_token.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_loads_with_its_tiers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut s: KeysSettings =
            leasehold_process::load_settings(Some(&root.join("deploy/keys.toml")), "UNSET_", |s: &KeysSettings| {
                s.validate()
            })
            .unwrap();
        assert_eq!(
            (s.replicas, s.caller_tier, s.tier_header.as_deref(), s.admin_token.is_none()),
            (3, false, None, true)
        );
        s.tiers_file = s.tiers_file.map(|f| root.join(f));
        let tiers = s.tiers().unwrap();
        assert_eq!(tiers.resolve_named("alice", None).unwrap().0, "pro");
    }

    #[test]
    fn bad_settings_are_refused_with_the_setting_named() {
        type Spoil = fn(&mut KeysSettings);
        let cases: [(Spoil, &str); 8] = [
            (|s| s.shards = 0, "shards"),
            (|s| s.shard_ttl_ms = 10, "shard_ttl_ms"),
            (|s| s.drain_ms = 600_001, "drain_ms"),
            (|s| s.durability = "often".into(), "durability"),
            (|s| s.replicas = 0, "replicas"),
            (|s| s.instance_id = Some("a b".into()), "instance_id"),
            (|s| s.tier_header = Some("x tier".into()), "tier_header"),
            (|s| s.clock_offset_ms = -86_400_001, "clock_offset_ms"),
        ];
        for (spoil, needle) in cases {
            let mut s = KeysSettings::default();
            spoil(&mut s);
            let err = s.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let with_token = |t: &str| KeysSettings {
            admin_token: Some(serde_json::from_value(t.into()).unwrap()),
            ..KeysSettings::default()
        };
        assert!(with_token("short").validate().unwrap_err().to_string().contains("admin_token"));
        assert!(with_token("long-enough-admin-token").validate().is_ok());
    }
}
