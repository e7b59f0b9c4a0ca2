//! Coordinator settings: defaults → TOML file → environment (`LEASEHOLD_COORDINATOR_*`),
//! validated before anything starts.

use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::{LimitDef, LimitDefError};
use leasehold_nats::limits_store::StoredDefError;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub nats_url: String,
    /// A `.creds` file (NATS user JWT and seed, `leasehold auth`) to connect with; none: the URL's
    /// user and password, if any.
    #[serde(default)]
    pub nats_creds_file: Option<std::path::PathBuf>,
    /// This replica's id (written into the ledger record it writes). Default: a random UUID.
    pub id: Option<String>,
    /// How long leadership lasts without renewal: a standby claims after seeing the leader key
    /// unchanged this long on its own clock (see `leasehold_core::leadership`).
    pub leader_ttl_ms: u64,
    /// Replicas of the ledger and leader buckets (3 in production clusters).
    pub replicas: usize,
    /// Serve `/metrics` (Prometheus) and `/v1/status` here, e.g. `127.0.0.1:9100`; none by default.
    #[serde(default)]
    pub http_listen: Option<String>,
    /// Seeds for the `lh_limits` bucket: each limit here whose key never held a definition is
    /// created at start. The bucket is the truth: the coordinator follows it live, a limit
    /// changed or removed there (`leasehold limits`) stays so, whatever this file says.
    #[serde(default)]
    pub limits: Vec<LimitDef>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_creds_file: None,
            id: None,
            leader_ttl_ms: 3_000,
            replicas: 1,
            http_listen: None,
            limits: Vec::new(),
        }
    }
}

pub use leasehold_process::SettingsError as ConfigError;

/// The environment variables' prefix: `LEASEHOLD_COORDINATOR_NATS_URL` sets `nats_url`.
pub const ENV_PREFIX: &str = "LEASEHOLD_COORDINATOR_";

/// Load and validate.
pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
    leasehold_process::load_settings(file, ENV_PREFIX, Settings::validate)
}

/// The settings and their defaults, for `--help`.
pub fn settings_help() -> String {
    leasehold_process::settings_help::<Settings>(ENV_PREFIX)
}

impl Settings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        leasehold_process::check_creds_file(self.nats_creds_file.as_deref())?;
        if self.replicas == 0 {
            return Err(ConfigError::Invalid("replicas must be at least 1".into()));
        }
        let mut names: Vec<&str> = self.limits.iter().map(|l| l.limit.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(ConfigError::Invalid("a limit is configured twice".into()));
        }
        for def in &self.limits {
            self.limit_config(def).map_err(|e| ConfigError::Refused(Box::new(e)))?;
        }
        Ok(())
    }

    /// `def` as this coordinator can run it: valid, and timed so that DCs ride through a
    /// failover of this coordinator. The one check of every definition, from the file or KV.
    pub fn limit_config(&self, def: &LimitDef) -> Result<LimitConfig, LimitConfigError> {
        let l = def.to_config()?;
        if self.leader_ttl_ms <= l.renew_interval_ms || self.leader_ttl_ms * 2 > l.dc_ttl_ms {
            return Err(LimitConfigError::LeaderTtl {
                limit: l.limit,
                leader_ttl_ms: self.leader_ttl_ms,
                renew_interval_ms: l.renew_interval_ms,
                dc_ttl_ms: l.dc_ttl_ms,
            });
        }
        Ok(l)
    }
}

/// Why this coordinator cannot run a definition.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LimitConfigError {
    /// The stored value is not a definition of its limit.
    #[error(transparent)]
    Stored(#[from] StoredDefError),
    /// The definition is not valid.
    #[error(transparent)]
    Definition(#[from] LimitDefError),
    #[error(
        "limit {limit}: leader_ttl_ms ({leader_ttl_ms}) must exceed renew_interval_ms ({renew_interval_ms}) and be at most half of dc_ttl_ms ({dc_ttl_ms}), so DCs ride through a failover"
    )]
    LeaderTtl { limit: String, leader_ttl_ms: u64, renew_interval_ms: u64, dc_ttl_ms: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("leasehold-coord-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn the_shipped_example_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/coordinator.toml");
        let s = load(Some(&path)).unwrap();
        let l = s.limit_config(&s.limits[0]).unwrap();
        assert_eq!(l.limit, "partner-api");
        assert_eq!(l.dcs.len(), 2);
        assert_eq!(l.expiry.egress_spread_ms, 144);
        assert_eq!(l.hysteresis, 0.02, "unset fields take their defaults");
    }

    #[test]
    fn bad_configurations_are_refused_with_a_reason() {
        let cases = [
            ("replicas", "replicas = 0\n", "replicas"),
            ("unit", "[[limits]]\nlimit = \"a\"\nrate = \"5/fortnight\"\nburst = 1\n[[limits.dcs]]\nname = \"x\"\n", "fortnight"),
            ("badtoml", "limits = [\n", "configuration"),
            (
                "floors",
                "[[limits]]\nlimit = \"a\"\nquota = { rate_milli_per_s = 1000, burst_milli = 0 }\n[[limits.dcs]]\nname = \"x\"\nfloor = { rate_milli_per_s = 5000, burst_milli = 0 }\n",
                "floors",
            ),
            (
                "ttl",
                "leader_ttl_ms = 9000\n[[limits]]\nlimit = \"a\"\nquota = { rate_milli_per_s = 1000, burst_milli = 0 }\n[[limits.dcs]]\nname = \"x\"\n",
                "leader_ttl_ms",
            ),
        ];
        for (name, text, needle) in cases {
            let err = load(Some(&write(name, text))).unwrap_err().to_string();
            assert!(err.contains(needle), "{name}: {err}");
        }
        assert!(load(Some(Path::new("/nonexistent.toml"))).unwrap_err().to_string().contains("not found"));
    }
}
