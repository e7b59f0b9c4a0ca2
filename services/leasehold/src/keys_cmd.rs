//! `leasehold keys`: run one per-key limiter instance (standalone, clustered on NATS, or, in the
//! lab only, in front of a central Redis for the baseline).

use leasehold_keys::persist::Durability;
use leasehold_keys::{Mode, ServeOptions};
use leasehold_shared::keys::Tiers;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct KeysArgs {
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
    /// Join the cluster on this NATS server: own shards through KV leases, store admissions in
    /// JetStream, answer `lh.keys.check.<shard>`. Without it, one standalone instance.
    #[arg(long)]
    nats_url: Option<String>,
    /// Decide every request in this central Redis instead (the baseline of `bench keys`; only
    /// in `leasehold-lab`).
    #[cfg(feature = "redis-baseline")]
    #[arg(long, conflicts_with = "nats_url")]
    redis_url: Option<String>,
    /// Tiers, overrides and assignments as JSON (`{"default_tier": …, "tiers": {…}}`); default: one
    /// tier "free", 20 per minute (the per-user limiter's example). In a cluster, the tiers stored
    /// in KV win.
    #[arg(long)]
    tiers: Option<std::path::PathBuf>,
    /// Keys tracked at most; new keys beyond are shed with 429.
    #[arg(long, default_value_t = 1_000_000)]
    max_keys: usize,
    /// Requests decided or forwarded at once; more are shed with 429.
    #[arg(long, default_value_t = 4_096)]
    max_in_flight: usize,
    /// Shards (every instance of a cluster must agree).
    #[arg(long, default_value_t = 64)]
    shards: u32,
    /// Lease TTL of a shard: how long a crashed owner's keys stay unanswered, at most.
    #[arg(long, default_value_t = 3_000)]
    shard_ttl_ms: u64,
    /// `zero-loss` (an allowed answer waits until JetStream stored it) or `interval:<ms>`
    /// (stored in batches; a crash may lose that much).
    #[arg(long, default_value = "interval:100")]
    durability: Durability,
    /// How long admissions are kept: the longest window a tier may have.
    #[arg(long, default_value_t = 3_600_000)]
    retention_ms: u64,
    /// JetStream replicas of the buckets and the admission stream (3 on a production cluster).
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// This instance's name in the cluster (default: a random one).
    #[arg(long)]
    instance_id: Option<String>,
    /// A key above this many requests per second on its owner is reported hot.
    #[arg(long, default_value_t = 500)]
    hot_key_rps: u64,
    /// After SIGTERM: how long `/healthz` answers 503 "draining" while requests are still
    /// answered, before the listener closes (at least your load balancer's time to notice).
    #[arg(long, default_value_t = 2_000)]
    drain_ms: u64,
}

pub fn run(a: KeysArgs) -> ExitCode {
    leasehold_process::main("leasehold keys", || validate(a), serve)
}

/// Check the arguments and read the tiers before anything starts.
fn validate(a: KeysArgs) -> Result<(KeysArgs, Tiers), String> {
    let tiers = match &a.tiers {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => Tiers::default(),
    };
    tiers.validate().map_err(|e| e.to_string())?;
    if a.shards == 0 || a.shards > 4_096 {
        return Err(format!("--shards must be 1..=4096, got {}", a.shards));
    }
    if !(100..=600_000).contains(&a.shard_ttl_ms) {
        return Err(format!("--shard-ttl-ms must be 100..=600000, got {}", a.shard_ttl_ms));
    }
    if a.drain_ms > 600_000 {
        return Err(format!("--drain-ms must be at most 600000, got {}", a.drain_ms));
    }
    Ok((a, tiers))
}

#[cfg(feature = "redis-baseline")]
fn standalone_or_redis(a: &KeysArgs) -> Mode {
    a.redis_url.clone().map_or(Mode::Standalone, |url| Mode::Redis { url })
}

#[cfg(not(feature = "redis-baseline"))]
fn standalone_or_redis(_: &KeysArgs) -> Mode {
    Mode::Standalone
}

async fn serve((a, tiers): (KeysArgs, Tiers)) -> Result<(), String> {
    let mode = match &a.nats_url {
        Some(url) => Mode::Cluster {
            nats: leasehold_nats::connect::connect(url, "leasehold-keys").await.map_err(|e| e.to_string())?,
            shards: a.shards,
            shard_ttl_ms: a.shard_ttl_ms,
            durability: a.durability,
            retention_ms: a.retention_ms,
            replicas: a.replicas,
            instance_id: a.instance_id.unwrap_or_else(leasehold_keys::cluster::random_instance_id),
        },
        None => standalone_or_redis(&a),
    };
    let options = ServeOptions {
        listen: a.listen,
        tiers,
        max_keys: a.max_keys,
        max_in_flight: a.max_in_flight,
        hot_key_rps: a.hot_key_rps,
        drain_ms: a.drain_ms,
        trust: leasehold_keys::access::Trust::default(),
        mode,
    };
    leasehold_keys::serve(options).await
}
