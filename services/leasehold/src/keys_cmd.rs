//! `leasehold keys`: run one per-key limiter instance (standalone, clustered on NATS, or, in the
//! lab only, in front of a central Redis for the baseline). Settings like every service's:
//! defaults, then `--config FILE` (TOML), then `LEASEHOLD_KEYS_*`, then these flags
//! ([`leasehold_keys::settings`]); a bad one is one line on stderr and exit 2.

use leasehold_keys::settings::KeysSettings;
use leasehold_keys::{Mode, ServeOptions};
use leasehold_per_key::Tiers;
use leasehold_process::ConfigArgs;
use serde::Serialize;
use std::process::ExitCode;

/// Each flag, when given, wins over the file and the environment (the setting of the same name;
/// `--tiers` is `tiers_file`). The admin token has no flag: set it in the file or the environment.
#[derive(clap::Args, Serialize)]
pub struct KeysArgs {
    #[command(flatten)]
    #[serde(skip)]
    config: ConfigArgs,
    /// HTTP address (default 127.0.0.1:8090).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<String>,
    /// Join the cluster on this NATS server: own shards through KV leases, store admissions in
    /// JetStream, answer `lh.keys.check.<shard>`. Without it, one standalone instance.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    nats_url: Option<String>,
    /// Connect as the user of this `.creds` file (`leasehold auth`).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    nats_creds_file: Option<std::path::PathBuf>,
    /// Decide every request in this central Redis instead (the baseline of `bench keys`; only
    /// in `leasehold-lab`).
    #[cfg(feature = "redis-baseline")]
    #[arg(long, conflicts_with = "nats_url")]
    #[serde(skip)]
    redis_url: Option<String>,
    /// Tiers, overrides and assignments as JSON (`{"default_tier": …, "tiers": {…}}`); default: one
    /// tier "free", 20 per minute (the per-user limiter's example). In a cluster, the tiers stored
    /// in KV win.
    #[arg(long)]
    #[serde(rename = "tiers_file", skip_serializing_if = "Option::is_none")]
    tiers: Option<std::path::PathBuf>,
    /// Keys tracked at most; new keys beyond are shed with 429 (default 1000000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_keys: Option<usize>,
    /// Requests decided or forwarded at once; more are shed with 429 (default 4096).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    max_in_flight: Option<usize>,
    /// Shards; every instance of a cluster must agree (default 64).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    shards: Option<u32>,
    /// Lease TTL of a shard: how long a crashed owner's keys stay unanswered, at most (default 3000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    shard_ttl_ms: Option<u64>,
    /// `zero-loss` (an allowed answer waits until JetStream stored it) or `interval:<ms>`
    /// (stored in batches; a crash may lose that much). Default interval:100.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    durability: Option<String>,
    /// How long admissions are kept: the longest window a tier may have (default 3600000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    retention_ms: Option<u64>,
    /// JetStream replicas of the buckets and the admission stream (3 on a production cluster;
    /// default 1).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<usize>,
    /// This instance's name in the cluster (default: a random one).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    instance_id: Option<String>,
    /// A key above this many requests per second on its owner is reported hot (default 500).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    hot_key_rps: Option<u64>,
    /// After SIGTERM: how long `/healthz` answers 503 "draining" while requests are still
    /// answered, before the listener closes (at least your load balancer's time to notice;
    /// default 2000).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    drain_ms: Option<u64>,
    /// Let callers name their tier (`?tier=`, `"tier"`): only if every caller is trusted. By
    /// default the tiers document decides and a request naming a tier is refused.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    caller_tier: bool,
    /// Take the tier from this header, set by a trusted gateway that strips it from client
    /// requests (e.g. x-leasehold-tier).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    tier_header: Option<String>,
    /// Skews this instance's clock by so many ms, ahead or (negative) behind: tests and chaos
    /// runs only (default 0).
    #[arg(long, allow_negative_numbers = true, hide = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    clock_offset_ms: Option<i64>,
}

pub fn run(a: KeysArgs) -> ExitCode {
    leasehold_process::main("leasehold keys", || load(a), serve)
}

struct Loaded {
    settings: KeysSettings,
    tiers: Tiers,
    #[cfg(feature = "redis-baseline")]
    redis_url: Option<String>,
}

/// Load and check the settings and read the tiers before anything starts.
fn load(a: KeysArgs) -> Result<Loaded, leasehold_process::SettingsError> {
    let settings = KeysSettings::load(a.config.file(), &a)?;
    let tiers = settings.tiers()?;
    Ok(Loaded {
        settings,
        tiers,
        #[cfg(feature = "redis-baseline")]
        redis_url: a.redis_url,
    })
}

#[cfg(feature = "redis-baseline")]
fn standalone_or_redis(l: &Loaded) -> Mode {
    l.redis_url.clone().map_or(Mode::Standalone, |url| Mode::Redis { url })
}

#[cfg(not(feature = "redis-baseline"))]
fn standalone_or_redis(_: &Loaded) -> Mode {
    Mode::Standalone
}

async fn serve(l: Loaded) -> Result<(), crate::CommandError> {
    let s = &l.settings;
    let mode = match &s.nats_url {
        Some(url) => Mode::Cluster {
            nats: leasehold_nats::connect::connect_with_creds(url, s.nats_creds_file.as_deref(), "leasehold-keys")
                .await?,
            shards: s.shards,
            shard_ttl_ms: s.shard_ttl_ms,
            durability: s.durability()?,
            retention_ms: s.retention_ms,
            replicas: s.replicas,
            instance_id: s.instance_id.clone().unwrap_or_else(leasehold_keys::cluster::random_instance_id),
        },
        None => standalone_or_redis(&l),
    };
    let options = ServeOptions {
        listen: s.listen.clone(),
        tiers: l.tiers.clone(),
        max_keys: s.max_keys,
        max_in_flight: s.max_in_flight,
        hot_key_rps: s.hot_key_rps,
        drain_ms: s.drain_ms,
        trust: s.trust(),
        mode,
        clock_offset_ms: s.clock_offset_ms,
    };
    Ok(leasehold_keys::serve(options).await?)
}
