//! # Leasehold per-key limits (service)
//!
//! The per-user limiter, the product's other half: allow or reject each request against the
//! caller's own limit (per user, per tenant tier), over HTTP ([`http`]) and NATS request/reply
//! ([`nats`]). The decisions are [`leasehold_per_key`]' (exact sliding-window log or GCRA);
//! this crate reads the clock and moves requests.
//!
//! * [`access`]: who decides a key's tier, and who may use the admin endpoints.
//! * [`limiter`]: validation, tiers, and where a key is decided (here, its owner, or Redis).
//! * [`owned`]: the keys of the shards this instance owns, behind the ownership gate.
//! * [`cluster`]: shard ownership through fenced KV leases (claim, renew, rebalance, hand over).
//! * [`persist`]: admissions appended to JetStream, replayed by a new owner.
//! * [`routes`]: which instance owns each shard, for clients that route by key.
//! * [`settings`]: `leasehold keys`' settings (defaults, TOML, environment, flags).
//! * [`tiers_sync`]: the cluster's tiers in KV, applied live everywhere.
//! * `redis_backend` (feature `redis-baseline`, the lab's only): the central-Redis baseline
//!   (sorted set + Lua) that `bench keys` measures against.

pub mod access;
pub mod cluster;
pub mod http;
pub mod limiter;
pub mod nats;
pub mod owned;
pub mod persist;
#[cfg(feature = "redis-baseline")]
pub mod redis_backend;
pub mod routes;
pub mod settings;
pub mod tiers_sync;

pub use limiter::{CheckError, KeyAnswer, KeyCheck, KeyLimiter};

use leasehold_per_key::Tiers;
use leasehold_process::clock::LeaseClock;
use std::future::IntoFuture;
use std::time::Duration;

/// How decisions are distributed.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // built once at start, never moved on a hot path
pub enum Mode {
    /// This instance owns every key; nothing is stored.
    Standalone,
    /// Shards owned through KV leases on this NATS, admissions stored in JetStream.
    Cluster {
        nats: async_nats::Client,
        shards: u32,
        shard_ttl_ms: u64,
        durability: persist::Durability,
        /// Admissions kept this long: the longest window a tier may have.
        retention_ms: u64,
        replicas: usize,
        instance_id: String,
    },
    /// Every decision in one central Redis (the baseline).
    #[cfg(feature = "redis-baseline")]
    Redis { url: String },
}

#[derive(Clone)]
pub struct ServeOptions {
    pub listen: String,
    pub tiers: Tiers,
    pub max_keys: usize,
    pub max_in_flight: usize,
    /// A key above this many requests per second on its owner is reported hot.
    pub hot_key_rps: u64,
    /// After SIGTERM: how long `/healthz` says "draining" while every request is still answered
    /// (forwarded to the shards' new owners), before the listener closes. At least a load
    /// balancer's time to take the instance out of rotation.
    pub drain_ms: u64,
    /// Who picks a key's tier, and the admin token.
    pub trust: access::Trust,
    pub mode: Mode,
    /// Skews this instance's clock, ahead or (negative) behind (tests and chaos runs only).
    pub clock_offset_ms: i64,
}

/// Serve HTTP (and, in cluster mode, the owned shards on NATS) until SIGINT/SIGTERM, then hand
/// the shards over. Prints `listening on <addr>` once bound.
pub async fn serve(o: ServeOptions) -> Result<(), ServeError> {
    serve_until(o, leasehold_process::stop_on_signal()).await
}

/// Why the limiter could not start, or stopped other than as asked.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Listen(#[from] leasehold_process::ListenError),
    /// The listener's address, or the HTTP server, failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tiers(#[from] leasehold_per_key::KeyError),
    #[cfg(feature = "redis-baseline")]
    #[error(transparent)]
    Redis(#[from] redis_backend::RedisError),
    #[error(transparent)]
    Persist(#[from] persist::PersistError),
    #[error(transparent)]
    TiersSync(#[from] tiers_sync::StartError),
    #[error(transparent)]
    Cluster(#[from] leasehold_nats::kv::KvError),
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The cluster driver ended (`cause`: why, if it failed) though no stop was asked.
    #[error("left the cluster unexpectedly: {}", .cause.as_ref().map(|c| c.to_string()).unwrap_or_default())]
    LeftCluster { cause: Option<Box<ServeError>> },
}

/// [`serve`] until `stop` turns true.
pub async fn serve_until(o: ServeOptions, stop: tokio::sync::watch::Receiver<bool>) -> Result<(), ServeError> {
    let listener = leasehold_process::bind(&o.listen).await?;
    let addr = listener.local_addr()?;
    let mut cluster_task = None;
    let clock = LeaseClock::start_skewed(o.clock_offset_ms, 0);
    let limiter = match o.mode {
        Mode::Standalone => {
            let owned = owned::Owned::new(64, o.max_keys, None, true, clock);
            let backend = limiter::Backend::Owned { owned, nats: None };
            KeyLimiter::new(backend, o.tiers, o.max_in_flight, u64::MAX)?
        }
        #[cfg(feature = "redis-baseline")]
        Mode::Redis { url } => {
            let backend = limiter::Backend::Redis(redis_backend::RedisBackend::connect(&url).await?);
            KeyLimiter::new(backend, o.tiers, o.max_in_flight, u64::MAX)?
        }
        Mode::Cluster { nats, shards, shard_ttl_ms, durability, retention_ms, replicas, instance_id } => {
            // Refused before anything is created: the stream must not be set up for a window the
            // tiers would then exceed.
            limiter::check_tiers(&o.tiers, retention_ms)?;
            let js = leasehold_nats::connect::jetstream(nats.clone());
            let persister = persist::Persister::start(js.clone(), durability, retention_ms, replicas).await?;
            let owned = owned::Owned::new(shards, o.max_keys, Some(persister), false, clock);
            let backend = limiter::Backend::Owned { owned: owned.clone(), nats: Some(nats.clone()) };
            let limiter = KeyLimiter::new(backend, o.tiers, o.max_in_flight, retention_ms)?;
            tiers_sync::start(&js, &limiter, replicas).await?;
            let options = cluster::ClusterOptions { instance_id, shard_ttl_ms, replicas, http: addr.to_string() };
            let (l, s) = (limiter.clone(), stop.clone());
            cluster_task = Some(tokio::spawn(cluster::run(nats, owned, l, options, s)));
            limiter
        }
    };
    if cluster_task.is_none() {
        // Standalone (or the Redis baseline): every key is answered here.
        let shards = match limiter.backend() {
            limiter::Backend::Owned { owned, .. } => owned.shards(),
            #[cfg(feature = "redis-baseline")]
            limiter::Backend::Redis(_) => 1,
        };
        limiter.routes().set((0..shards).map(|_| Some(addr.to_string())).collect());
    }
    tokio::spawn(report_hot_keys(limiter.clone(), o.hot_key_rps));
    println!("listening on {addr}");
    let draining = http::Draining::default();
    let (close, mut closing) = tokio::sync::watch::channel(false);
    let http = axum::serve(listener, http::router_with(limiter, o.trust, draining.clone()))
        .with_graceful_shutdown(async move {
            let _ = closing.wait_for(|c| *c).await;
        })
        .into_future();
    let mut http = tokio::spawn(http);
    let mut stop = stop;
    let cluster_ended = async {
        match cluster_task.as_mut() {
            Some(task) => task.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        // A stop and the driver's end seen at once is a planned stop (drain, then exit cleanly).
        biased;
        _ = stop.wait_for(|s| *s) => {}
        ended = &mut http => return Ok(ended??),
        // The cluster driver never ends on its own: an instance that owns nothing must not go on
        // answering as if it were a member.
        ended = cluster_ended => {
            let cause = ended.map_err(ServeError::from).and_then(|r| Ok(r?)).err().map(Box::new);
            return Err(ServeError::LeftCluster { cause });
        }
    }
    // A planned exit: say so, hand the shards over while still answering (forwarding to their new
    // owners), and close the listener only when the drain time is up.
    draining.start();
    tracing::info!(drain_ms = o.drain_ms, "stopping: draining");
    let drained = tokio::time::sleep(Duration::from_millis(o.drain_ms));
    if let Some(task) = cluster_task {
        task.await??;
    }
    drained.await;
    let _ = close.send(true);
    Ok(http.await??)
}

/// Once a second: which keys took more than `hot_key_rps` requests here; sweep idle keys.
#[allow(irrefutable_let_patterns)] // without the Redis baseline, owned is the only backend
async fn report_hot_keys(limiter: KeyLimiter, hot_key_rps: u64) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if let limiter::Backend::Owned { owned, .. } = limiter.backend() {
            let hot = owned.take_hot(hot_key_rps.max(1));
            let before = limiter.hot();
            for (key, hits) in hot.iter().filter(|(k, _)| !before.iter().any(|(b, _)| b == k)) {
                tracing::warn!(key, requests_per_s = hits, "hot key (GET /v1/hot lists them)");
            }
            limiter.set_hot(hot);
            owned.sweep(limiter.tiers().max_window_ms());
        }
    }
}
