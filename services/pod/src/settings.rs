//! Agent settings: defaults → TOML file → environment (`LEASEHOLD_AGENT_*`), validated.

use leasehold_core::dc_manager::DEFAULT_HEARTBEAT_TIMEOUT_MS;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodSettings {
    pub nats_url: String,
    /// A `.creds` file (NATS user JWT and seed, `leasehold auth`) to connect with; none: the URL's
    /// user and password, if any.
    #[serde(default)]
    pub nats_creds_file: Option<std::path::PathBuf>,
    /// The default limit: served from the start and never given back when idle; requests that
    /// name no limit use it. None: every limit is named by the request and served on first use.
    pub limit: Option<String>,
    pub dc: String,
    /// This process's holder id. Default: the name of its credential (`nats_creds_file`, which
    /// allows only that pod's subjects), else `<dc>-<random>`; a restarted pod is a new holder.
    pub pod_id: Option<String>,
    /// Share of the DC lease relative to other pods (weighted split).
    pub weight: f64,
    /// Demand report / heartbeat period.
    pub report_interval_ms: u64,
    /// The longest a limit with nothing new goes without a report (`shared/core/src/quiet_reports.rs`):
    /// a steady limit reports about this often, a new lease, no lease, errors, health or moved
    /// demand at once. 0: every period. At most 1,000: keep it below the DC manager's
    /// `heartbeat_timeout_ms` (1,500 ms) less a report period, or a quiet pod loses its share.
    pub max_quiet_report_ms: u64,
    /// Requests that may wait for a permit at once; more are denied at once.
    pub queue_capacity: usize,
    /// How long a graceful drain waits for the DC manager's acknowledgement.
    pub drain_timeout_ms: u64,
    /// A limit other than the default one, unused for this long, is given back (returned like a
    /// drain) and its loop stops until the next request. 0: never.
    pub idle_release_ms: u64,
    /// Skews this pod's clock (tests and chaos runs only).
    pub clock_offset_ms: u64,
    /// Makes this clock run fast (+) or slow (−) by so many parts per million (chaos runs only;
    /// safety assumes it stays within `max_drift`).
    pub clock_drift_ppm: i64,
    /// Agent HTTP endpoint (`leasehold-agent` only).
    pub http_listen: String,
    /// Where the agent serves Envoy's rate limit service (RLS v3, gRPC), such as
    /// `127.0.0.1:8081`; none: not served. Needs `envoy_rls_config`.
    #[serde(default)]
    pub envoy_rls_listen: Option<String>,
    /// envoyproxy/ratelimit's YAML configuration: one file, or a directory of `.yaml` files.
    #[serde(default)]
    pub envoy_rls_config: Option<std::path::PathBuf>,
    /// Two files of one domain in `envoy_rls_config` are merged (ratelimit's
    /// `MERGE_DOMAIN_CONFIG`); without it, the agent refuses them.
    #[serde(default)]
    pub envoy_rls_merge_domains: bool,
    /// The per-key limiter (`leasehold keys`, an instance or a balancer: `http://keys:8090`)
    /// that answers the configuration's per-value limits; needed when it has any.
    #[serde(default)]
    pub envoy_keys_url: Option<String>,
    /// The header the keys instances take a trusted gateway's tier from (their `tier_header`).
    pub envoy_keys_tier_header: String,
    /// How long a per-value descriptor waits for the per-key limiter before it is denied.
    pub envoy_keys_timeout_ms: u64,
    /// Where the agent serves Envoy's RLQS (`StreamRateLimitQuotas`, gRPC), such as
    /// `127.0.0.1:8082`; none: not served. Needs `envoy_rlqs_limits`.
    #[serde(default)]
    pub envoy_rlqs_listen: Option<String>,
    /// The limits whose leases are lent to Envoy over RLQS: nothing else in this agent takes
    /// from them (not `limit`, not the RLS configuration, not `/v1/acquire`).
    #[serde(default)]
    pub envoy_rlqs_limits: Vec<String>,
    /// The `bucket_id` entry (in Envoy's `bucket_matchers`) whose value names the limit.
    pub envoy_rlqs_bucket_key: String,
    /// How assignments are timed and sized (docs/ENVOY.md, "RLQS").
    #[serde(default)]
    pub envoy_rlqs: leasehold_envoy::RlqsTiming,
}

impl Default for PodSettings {
    fn default() -> Self {
        PodSettings {
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_creds_file: None,
            limit: None,
            dc: String::new(),
            pod_id: None,
            weight: 1.0,
            report_interval_ms: 250,
            max_quiet_report_ms: leasehold_core::quiet_reports::DEFAULT_MAX_QUIET_MS,
            queue_capacity: 1_024,
            drain_timeout_ms: 5_000,
            idle_release_ms: 60_000,
            clock_offset_ms: 0,
            clock_drift_ppm: 0,
            http_listen: "127.0.0.1:9090".into(),
            envoy_rls_listen: None,
            envoy_rls_config: None,
            envoy_rls_merge_domains: false,
            envoy_keys_url: None,
            envoy_keys_tier_header: "x-leasehold-tier".into(),
            envoy_keys_timeout_ms: 200,
            envoy_rlqs_listen: None,
            envoy_rlqs_limits: Vec::new(),
            envoy_rlqs_bucket_key: "limit".into(),
            envoy_rlqs: Default::default(),
        }
    }
}

pub use leasehold_process::SettingsError;

/// Most `max_quiet_report_ms`: within the DC manager's default `heartbeat_timeout_ms` (1,500 ms)
/// with a default report period to spare.
pub const MAX_QUIET_REPORT_MS: u64 = 1_000;

/// The per-key limiter's longest window (`leasehold keys`: 31 days).
#[cfg(feature = "envoy")]
const MAX_KEYS_WINDOW_S: u64 = 31 * 86_400;

/// The Envoy rate limit service as the settings ask for it: where it listens, the ratelimit
/// configuration, and the per-key limiter's client (for per-value limits).
#[cfg(feature = "envoy")]
pub type EnvoyRls = (String, leasehold_envoy::RlsConfig, Option<crate::envoy::KeysClient>);

/// The environment variables' prefix: `LEASEHOLD_AGENT_DC` sets `dc`.
pub const ENV_PREFIX: &str = "LEASEHOLD_AGENT_";

impl PodSettings {
    /// The settings and their defaults, for `--help`.
    pub fn help() -> String {
        leasehold_process::settings_help::<PodSettings>(ENV_PREFIX)
    }

    pub fn load(file: Option<&Path>) -> Result<Self, SettingsError> {
        let mut settings = leasehold_process::load_settings(file, ENV_PREFIX, PodSettings::validate)?;
        if settings.pod_id.is_none() {
            settings.pod_id = settings.credential()?.map(|c| c.name);
        }
        Ok(settings)
    }

    /// Whose the credential is: a pod's credential allows only its own pod id's subjects, in
    /// its own DC.
    fn credential(&self) -> Result<Option<leasehold_nats::auth::CredsUser>, SettingsError> {
        let Some(path) = &self.nats_creds_file else { return Ok(None) };
        let whose = leasehold_nats::auth::read_creds_file(path);
        whose.map(Some).map_err(|e| SettingsError::Invalid(format!("nats_creds_file: {e}")))
    }

    pub fn validate(&self) -> Result<(), SettingsError> {
        let bad = |m: String| Err(SettingsError::Invalid(m));
        let credential = self.credential()?;
        // The pod id: the setting, else the credential's name (checked like the setting).
        let pod_id = self.pod_id.as_deref().or(credential.as_ref().map(|c| c.name.as_str()));
        leasehold_process::check_dc_service(self.limit.as_deref(), &self.dc, ("pod_id", pod_id), self.clock_drift_ppm)?;
        if let Some(c) = &credential {
            if let Some(id) = self.pod_id.as_deref().filter(|id| *id != c.name) {
                // The server would drop every report and never deliver a lease.
                return bad(format!("pod_id is {id:?} but the credential (nats_creds_file) is pod {:?}'s", c.name));
            }
            if let Some(role) = c.role.as_deref().filter(|r| *r != format!("pod-{}", self.dc)) {
                return bad(format!("the credential (nats_creds_file) is role {role:?}'s, not pod-{}'s", self.dc));
            }
        }
        let max_weight = leasehold_core::wire::MAX_POD_WEIGHT;
        if !(self.weight.is_finite() && self.weight > 0.0 && self.weight <= max_weight) {
            // Above the wire's bound every report would be dropped as invalid: no lease, ever.
            return bad(format!("weight must be above 0 and at most {max_weight}, got {}", self.weight));
        }
        if !(10..=60_000).contains(&self.report_interval_ms) {
            return bad(format!("report_interval_ms must be within 10..=60000, got {}", self.report_interval_ms));
        }
        if self.max_quiet_report_ms > MAX_QUIET_REPORT_MS {
            return bad(format!(
                "max_quiet_report_ms must be within 0..={MAX_QUIET_REPORT_MS}, got {}",
                self.max_quiet_report_ms
            ));
        }
        // The longest silence is just under max_quiet + period/2; keep a period to spare within
        // the DC manager's default heartbeat timeout.
        let silence_ms = self.max_quiet_report_ms + self.report_interval_ms / 2 + self.report_interval_ms;
        if self.max_quiet_report_ms > 0 && silence_ms > DEFAULT_HEARTBEAT_TIMEOUT_MS {
            return bad(format!(
                "max_quiet_report_ms ({}) + 1.5 × report_interval_ms ({}) must stay within the DC \
                 manager's default heartbeat_timeout_ms ({DEFAULT_HEARTBEAT_TIMEOUT_MS}): lower one, or set \
                 max_quiet_report_ms = 0",
                self.max_quiet_report_ms, self.report_interval_ms
            ));
        }
        if self.idle_release_ms != 0 && self.idle_release_ms < 2 * self.report_interval_ms {
            // It is checked once a report interval; shorter would give a lease back unused.
            return bad(format!(
                "idle_release_ms must be 0 or at least 2 × report_interval_ms ({}), got {}",
                2 * self.report_interval_ms,
                self.idle_release_ms
            ));
        }
        if self.queue_capacity == 0 {
            return bad("queue_capacity must be at least 1".into());
        }
        self.envoy_rlqs()?;
        self.envoy_rls().map(|_| ())
    }

    /// Where RLQS is served, when it is (its limits and timing are the settings').
    pub fn envoy_rlqs(&self) -> Result<Option<String>, SettingsError> {
        let bad = |m: String| Err(SettingsError::Invalid(m));
        let Some(listen) = &self.envoy_rlqs_listen else {
            if !self.envoy_rlqs_limits.is_empty() {
                return bad("envoy_rlqs_limits is set but envoy_rlqs_listen is not".into());
            }
            return Ok(None);
        };
        if cfg!(not(feature = "envoy")) {
            return bad("this agent was built without the envoy feature: envoy_rlqs_listen is not served".into());
        }
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return bad(format!(
                "envoy_rlqs_listen must be an address and port such as 127.0.0.1:8082, got {listen:?}"
            ));
        }
        if self.envoy_rlqs_limits.is_empty() {
            return bad("envoy_rlqs_listen needs envoy_rlqs_limits (the limits lent to Envoy)".into());
        }
        let mut seen = std::collections::HashSet::new();
        for limit in &self.envoy_rlqs_limits {
            leasehold_core::wire::check_id("limit", limit)
                .map_err(|e| SettingsError::Invalid(format!("envoy_rlqs_limits: {e}")))?;
            if !seen.insert(limit) {
                return bad(format!("envoy_rlqs_limits: {limit:?} is named twice"));
            }
            if self.limit.as_deref() == Some(limit.as_str()) {
                return bad(format!(
                    "envoy_rlqs_limits: {limit:?} is the default limit: a lent lease is not taken from here"
                ));
            }
        }
        if self.envoy_rlqs_limits.len() >= crate::MAX_LIMITS {
            return bad(format!("envoy_rlqs_limits: more limits than a pod serves ({})", crate::MAX_LIMITS));
        }
        if self.envoy_rlqs_bucket_key.is_empty() {
            return bad("envoy_rlqs_bucket_key must not be empty".into());
        }
        self.envoy_rlqs.validate().map_err(|e| SettingsError::Invalid(format!("envoy_rlqs: {e}")))?;
        Ok(Some(listen.clone()))
    }

    /// The Envoy rate limit service's address and configuration, and the per-key limiter's
    /// client (when set), when it is to be served.
    #[cfg(feature = "envoy")]
    pub fn envoy_rls(&self) -> Result<Option<EnvoyRls>, SettingsError> {
        let bad = |m: String| Err(SettingsError::Invalid(m));
        let (listen, path) = match (&self.envoy_rls_listen, &self.envoy_rls_config) {
            (None, None) => return Ok(None),
            (Some(listen), Some(path)) => (listen, path),
            (Some(_), None) => return bad("envoy_rls_listen needs envoy_rls_config (the ratelimit YAML)".into()),
            (None, Some(_)) => return bad("envoy_rls_config is set but envoy_rls_listen is not".into()),
        };
        if listen.parse::<std::net::SocketAddr>().is_err() {
            return bad(format!("envoy_rls_listen must be an address and port such as 127.0.0.1:8081, got {listen:?}"));
        }
        let config = crate::envoy::read_rls_config(path, self.envoy_rls_merge_domains)
            .map_err(|e| SettingsError::Invalid(format!("envoy_rls_config: {e}")))?;
        // The default limit is served too.
        let limits = config.limits().len() + usize::from(self.limit.is_some()) + self.envoy_rlqs_limits.len();
        if limits > crate::MAX_LIMITS {
            return bad(format!("envoy_rls_config: {limits} limits, more than a pod serves ({})", crate::MAX_LIMITS));
        }
        if let Some(both) = config.limits().keys().find(|l| self.envoy_rlqs_limits.contains(l)) {
            return bad(format!(
                "envoy_rls_config: {both:?} is lent to Envoy over RLQS (envoy_rlqs_limits): not also answered by RLS"
            ));
        }
        if !(1..=10_000).contains(&self.envoy_keys_timeout_ms) {
            return bad(format!("envoy_keys_timeout_ms must be within 1..=10000, got {}", self.envoy_keys_timeout_ms));
        }
        let timeout = std::time::Duration::from_millis(self.envoy_keys_timeout_ms);
        let keys = match (&self.envoy_keys_url, config.tiers().keys().next()) {
            (Some(url), _) => Some(
                crate::envoy::KeysClient::new(url, &self.envoy_keys_tier_header, timeout)
                    .map_err(|e| SettingsError::Refused(Box::new(e)))?,
            ),
            (None, Some(first)) => {
                return bad(format!(
                    "envoy_rls_config: {} limits per value ({first}, …) are asked of the per-key limiter: set envoy_keys_url",
                    config.tiers().len()
                ))
            }
            (None, None) => None,
        };
        let too_long = config.tiers().iter().find(|(_, (_, unit))| unit.seconds() > MAX_KEYS_WINDOW_S);
        if let Some((tier, (_, unit))) = too_long {
            return bad(format!(
                "envoy_rls_config: {tier} is per value, asked of the per-key limiter, whose windows are at most 31 days: not per {unit:?}"
            ));
        }
        Ok(Some((listen.clone(), config, keys)))
    }

    /// Without the `envoy` feature, asking for the Envoy rate limit service is a bad setting.
    #[cfg(not(feature = "envoy"))]
    pub fn envoy_rls(&self) -> Result<Option<(String, (), ())>, SettingsError> {
        match (&self.envoy_rls_listen, &self.envoy_rls_config) {
            (None, None) => Ok(None),
            _ => Err(SettingsError::Invalid(
                "this agent was built without the envoy feature: envoy_rls_listen and envoy_rls_config are not served"
                    .into(),
            )),
        }
    }

    pub fn pod_id(&self) -> String {
        self.pod_id.clone().unwrap_or_else(|| {
            let u = uuid::Uuid::new_v4().simple().to_string();
            format!("{}-{}", self.dc, &u[..12])
        })
    }
}

#[cfg(test)]
mod quiet_tests {
    use super::*;

    fn with(max_quiet_report_ms: u64, report_interval_ms: u64) -> PodSettings {
        PodSettings {
            dc: "bkk".into(),
            pod_id: Some("p1".into()),
            max_quiet_report_ms,
            report_interval_ms,
            ..Default::default()
        }
    }

    #[test]
    fn quiet_reports_must_stay_within_the_heartbeat_timeout() {
        assert!(with(1_000, 250).validate().is_ok(), "the defaults");
        assert!(with(0, 1_000).validate().is_ok(), "every period");
        assert!(with(1_001, 250).validate().is_err(), "above 1,000 ms");
        let err = with(1_000, 500).validate().unwrap_err().to_string();
        assert!(err.contains("heartbeat_timeout_ms"), "{err}");
        assert!(with(500, 500).validate().is_ok());
    }
}
