//! DC manager settings: defaults → TOML file → environment (`LEASEHOLD_DC_MANAGER_*`), validated.

use leasehold_core::dc_manager::DcManagerConfig;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub nats_url: String,
    /// A `.creds` file (NATS user JWT and seed, `leasehold auth`) to connect with; none: the URL's
    /// user and password, if any.
    #[serde(default)]
    pub nats_creds_file: Option<std::path::PathBuf>,
    /// This replica's id. Default: `<dc>-mgr-<random>`. Each leadership term is a new holder
    /// (`<id>-e<epoch>`), so a replica that leads again never reuses an old lease's identity.
    pub id: Option<String>,
    /// Leadership without renewal lasts this long: a standby claims after seeing the leader key
    /// unchanged this long on its own clock (see `leasehold_core::leadership`).
    pub leader_ttl_ms: u64,
    /// Period of DC reports to the coordinator (pod leases are renewed every `renew_interval_ms`).
    pub report_interval_ms: u64,
    /// Serve Prometheus metrics and status here (e.g. `127.0.0.1:9100`); none by default.
    pub http_listen: Option<String>,
    /// Skews this manager's clock (tests and chaos runs only).
    pub clock_offset_ms: u64,
    /// Makes this clock run fast (+) or slow (−) by so many parts per million (chaos runs only;
    /// safety assumes it stays within `max_drift`).
    pub clock_drift_ppm: i64,
    /// Replicas of the leader bucket (`lh_leaders`, in the DC's own JetStream) if this replica
    /// creates it.
    pub replicas: usize,
    /// The JetStream domain of the coordinators' cluster, which holds the ledger (`lh_ledger`),
    /// when this DC runs its own NATS cluster joined to theirs by a leaf-node link (the
    /// production topology: `nats/prod`). None: the ledger is in the server's own JetStream.
    pub ledger_domain: Option<String>,
    /// Pod report batches queued for the manager's loop, in bytes (payload plus 256 per
    /// message), at most; past it a batch is dropped and counted (`report_batches_shed`): a
    /// manager reading reports slower than its pods send them keeps its memory bounded. At
    /// least 1 MiB (one batch of NATS's largest default payload).
    pub inbound_reports_max_bytes: usize,
    /// A queued report batch older than this when the manager's loop comes to it is dropped
    /// (and counted) unread: what a slow manager reads stays this recent. Positive.
    pub inbound_reports_max_age_ms: u64,
    /// The sans-I/O core's settings, for every limit served (`instance` and `epoch` are set at
    /// each takeover, `limit` per limit). `limit` names the one limit to serve; without it (or
    /// with `"*"`) the process serves every limit whose ledger record names its DC.
    #[serde(flatten)]
    pub manager: DcManagerConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_creds_file: None,
            id: None,
            leader_ttl_ms: 3_000,
            report_interval_ms: 250,
            http_listen: None,
            clock_offset_ms: 0,
            clock_drift_ppm: 0,
            replicas: 1,
            ledger_domain: None,
            inbound_reports_max_bytes: 64 << 20,
            inbound_reports_max_age_ms: 1_000,
            manager: DcManagerConfig { pod_ttl_ms: DEFAULT_POD_TTL_MS, ..DcManagerConfig::new("", "", "") },
        }
    }
}

/// The DC manager's default `pod_ttl_ms`: long enough that its pods' leases outlive a takeover
/// at the default leader TTL and intervals ([`Settings::takeover_outlasts_pod_leases`]).
pub const DEFAULT_POD_TTL_MS: u64 = 7_000;

pub use leasehold_process::SettingsError as ConfigError;

/// The environment variables' prefix: `LEASEHOLD_DC_MANAGER_DC` sets `dc`.
pub const ENV_PREFIX: &str = "LEASEHOLD_DC_MANAGER_";

pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
    leasehold_process::load_settings(file, ENV_PREFIX, Settings::validate)
}

/// The settings and their defaults, for `--help`.
pub fn settings_help() -> String {
    leasehold_process::settings_help::<Settings>(ENV_PREFIX)
}

impl Settings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        leasehold_process::check_creds_file(self.nats_creds_file.as_deref())?;
        let m = &self.manager;
        let limit = (!self.serves_every_limit()).then_some(m.limit.as_str());
        leasehold_process::check_dc_service(limit, &m.dc, ("id", self.id.as_deref()), self.clock_drift_ppm)?;
        self.manager.validate()?;
        if self.report_interval_ms == 0 || self.report_interval_ms > self.manager.renew_interval_ms {
            return bad(format!(
                "report_interval_ms ({}) must be positive and at most renew_interval_ms ({})",
                self.report_interval_ms, self.manager.renew_interval_ms
            ));
        }
        if let Some(domain) = self.ledger_domain.as_deref() {
            if domain.is_empty() || !domain.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return bad(format!(
                    "ledger_domain {domain:?} must be a JetStream domain name (letters, digits, '-', '_')"
                ));
            }
        }
        if self.inbound_reports_max_bytes < 1 << 20 {
            return bad(format!(
                "inbound_reports_max_bytes ({}) must be at least 1048576 (one report batch of NATS's default largest payload)",
                self.inbound_reports_max_bytes
            ));
        }
        if self.inbound_reports_max_age_ms == 0 {
            return bad("inbound_reports_max_age_ms must be positive".into());
        }
        if self.leader_ttl_ms < 4 * self.report_interval_ms {
            return bad(format!("leader_ttl_ms ({}) must be at least 4 report intervals", self.leader_ttl_ms));
        }
        Ok(())
    }

    /// Why a takeover may cost more than a renew period, if it may: a standby claims up to 1.25
    /// leader TTLs after the leader's last renewal (it sees the key change up to a quarter TTL
    /// late), and continues a pod's lease only while it still runs
    /// (`leasehold_core::dc_manager::succession`). A pod's lease in use may be up to two renew
    /// intervals and a report interval old, so unless `pod_ttl_ms` covers all of that, pods run
    /// out before the new term can continue their leases and admit nothing until the old
    /// term's leases have all ended. (Waste, never excess: a warning, not a refusal.) The DC
    /// lease must leave room too: pod leases end before it does.
    pub fn takeover_outlasts_pod_leases(&self) -> Result<(), String> {
        let m = &self.manager;
        let needed_ms = self.leader_ttl_ms * 5 / 4 + 2 * m.renew_interval_ms + self.report_interval_ms;
        if m.pod_ttl_ms >= needed_ms {
            return Ok(());
        }
        Err(format!(
            "pod_ttl_ms ({}) is below 1.25 x leader_ttl_ms + 2 x renew_interval_ms + report_interval_ms \
             ({needed_ms}): pods' leases may run out before a standby can continue them, and a \
             manager failover then leaves the DC without quota for up to pod_ttl_ms",
            m.pod_ttl_ms
        ))
    }

    /// No `limit` in the settings (or `"*"`): this process serves every limit of its DC.
    pub fn serves_every_limit(&self) -> bool {
        matches!(self.manager.limit.as_str(), "" | "*")
    }

    /// Whether this process serves `limit`.
    pub fn serves(&self, limit: &str) -> bool {
        self.serves_every_limit() || self.manager.limit == limit
    }

    pub fn id(&self) -> String {
        self.id.clone().unwrap_or_else(|| {
            let u = uuid::Uuid::new_v4().simple().to_string();
            format!("{}-mgr-{}", self.manager.dc, &u[..8])
        })
    }
}
