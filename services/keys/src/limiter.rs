//! The per-key limiter behind the HTTP and NATS APIs: validate, resolve the tier, then decide
//! where the key's state lives: here if this instance owns the key's shard, else at the owner
//! (NATS request on `lh.keys.check.<shard>`), or in the central Redis of the baseline.
//!
//! Load is bounded: at most `max_in_flight` requests at once (more are shed with 429, never
//! queued), and a key the owner just denied is denied here until its retry time without asking
//! again, so a hot key costs its owner one request per retry period per instance.

use crate::owned::{Owned, OwnedError};
#[cfg(feature = "redis-baseline")]
use crate::redis_backend::RedisBackend;
use leasehold_per_key::table::Verdict;
use leasehold_per_key::{shard_of, spec::check_key, KeyError, LimitSpec, Tiers};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;
use tokio::sync::Semaphore;

use leasehold_per_key::wire::{decode_keys_message, KeyRefusal};
pub use leasehold_per_key::wire::{KeyAnswer, KeyCheck};

/// Why a request got no allow/deny answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckError {
    /// Bad input: 400, nothing changed.
    #[error(transparent)]
    Input(#[from] KeyError),
    /// Shed (429 with Retry-After): too many keys or requests at once.
    #[error("{0}")]
    Overloaded(String),
    /// No owner could answer now (503 with Retry-After): a shard moving, storage unavailable.
    #[error("{0}")]
    Unavailable(String),
}

impl From<OwnedError> for CheckError {
    fn from(e: OwnedError) -> Self {
        match e {
            OwnedError::Input(k) => CheckError::Input(k),
            OwnedError::Full(n) => CheckError::Overloaded(format!("this owner tracks {n} keys; shedding new keys")),
            OwnedError::NotOwner(s) => CheckError::Unavailable(format!("shard {s} is moving to a new owner; retry")),
            OwnedError::NotStored => CheckError::Unavailable("the admission could not be stored; retry".into()),
        }
    }
}

#[derive(Clone)]
pub enum Backend {
    /// Shards owned here (all of them when standalone), others asked over NATS.
    Owned { owned: Owned, nats: Option<async_nats::Client> },
    /// The baseline: every decision in one central Redis.
    #[cfg(feature = "redis-baseline")]
    Redis(RedisBackend),
}

#[derive(Clone)]
pub struct KeyLimiter {
    backend: Backend,
    tiers: Arc<RwLock<Tiers>>,
    in_flight: Arc<Semaphore>,
    /// (key, tier) pairs denied by their owner, until when (ms since the epoch): a denial
    /// under one tier says nothing about another's limit.
    denied_until: Arc<Mutex<HashMap<(String, String), u64>>>,
    /// Longest window accepted (the admission stream keeps no more).
    max_window_ms: u64,
    /// Where the cluster's tiers live (`lh_keys_config`, key `tiers`), once connected.
    tiers_store: Arc<OnceLock<TiersStore>>,
    /// The last hot-key report: (key, requests in the last second).
    hot: Arc<Mutex<Vec<(String, u64)>>>,
    /// Which instance answers each shard (`GET /v1/shards`).
    routes: crate::routes::Routes,
}

const DENY_CACHE_KEYS: usize = 100_000;
const FORWARD_TIMEOUT: Duration = Duration::from_millis(1_000);

impl KeyLimiter {
    pub fn new(backend: Backend, tiers: Tiers, max_in_flight: usize, max_window_ms: u64) -> Result<Self, KeyError> {
        let limiter = KeyLimiter {
            backend,
            tiers: Arc::default(),
            in_flight: Arc::new(Semaphore::new(max_in_flight.max(1))),
            denied_until: Arc::default(),
            max_window_ms,
            tiers_store: Arc::default(),
            hot: Arc::default(),
            routes: Default::default(),
        };
        limiter.set_tiers(tiers)?;
        Ok(limiter)
    }

    /// One instance owning every shard, no NATS, no persistence.
    pub fn standalone(tiers: Tiers, max_keys: usize) -> Result<Self, KeyError> {
        Self::new(Backend::Owned { owned: Owned::standalone(max_keys), nats: None }, tiers, 10_000, u64::MAX)
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Replace every tier, override and assignment; validated first, so a bad set changes nothing.
    pub fn set_tiers(&self, tiers: Tiers) -> Result<(), KeyError> {
        check_tiers(&tiers, self.max_window_ms)?;
        *self.tiers.write().unwrap_or_else(|p| p.into_inner()) = tiers;
        self.denied_until.lock().unwrap_or_else(|p| p.into_inner()).clear();
        Ok(())
    }

    /// Change the tiers everywhere. In a cluster the document is stored first and every
    /// instance, this one too, applies it from the store's watch: this returns once it is applied
    /// here. Nothing changes anywhere if it is invalid, too large to store, or not stored.
    pub async fn update_tiers(&self, tiers: Tiers) -> Result<(), TiersError> {
        check_tiers(&tiers, self.max_window_ms)?;
        let Some(store) = self.tiers_store.get() else {
            return Ok(self.set_tiers(tiers)?);
        };
        let body = serde_json::to_vec(&tiers).map_err(|e| TiersError::NotStored(e.to_string()))?;
        if body.len() > store.max_bytes {
            return Err(TiersError::TooLarge { len: body.len(), max: store.max_bytes });
        }
        let mut applied = store.applied.subscribe();
        let revision = store
            .kv
            .put(leasehold_core::subjects::KEYS_TIERS_KEY, body.into())
            .await
            .map_err(|e| TiersError::NotStored(e.to_string()))?;
        let outcome = tokio::time::timeout(TIERS_APPLY_PATIENCE, applied.wait_for(|(r, _)| *r >= revision)).await;
        match outcome.as_ref().map(|r| r.as_ref().map(|seen| (seen.0, seen.1.clone()))) {
            Ok(Ok((r, None))) if r == revision => Ok(()),
            Ok(Ok((r, Some(e)))) if r == revision => Err(TiersError::NotApplied(e)),
            // A newer document was stored meanwhile (it wins everywhere), or the watch is behind.
            Ok(Ok(_)) => Ok(()),
            _ => Err(TiersError::NotApplied(format!("stored as revision {revision}, not applied here yet"))),
        }
    }

    /// Where the cluster's tiers live: `max_bytes` is the largest document it takes.
    pub fn attach_tiers_store(&self, kv: async_nats::jetstream::kv::Store, max_bytes: usize) {
        let (applied, _) = tokio::sync::watch::channel((0, None));
        let _ = self.tiers_store.set(TiersStore { kv, max_bytes, applied });
    }

    /// The store's document at `revision` was applied here (`Ok`) or refused here (`Err`).
    pub fn note_tiers_applied(&self, revision: u64, result: Result<(), TiersRefused>) {
        if let Some(store) = self.tiers_store.get() {
            store.applied.send_replace((revision, result.err().map(|e| e.to_string())));
        }
    }

    /// Which instance answers each shard (kept by the cluster driver, or all here when standalone).
    pub fn routes(&self) -> &crate::routes::Routes {
        &self.routes
    }

    /// Publish a hot-key report (see `serve`).
    pub fn set_hot(&self, hot: Vec<(String, u64)>) {
        *self.hot.lock().unwrap_or_else(|p| p.into_inner()) = hot;
    }

    pub fn hot(&self) -> Vec<(String, u64)> {
        self.hot.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn keys_tracked(&self) -> usize {
        match &self.backend {
            Backend::Owned { owned, .. } => owned.keys_tracked(),
            #[cfg(feature = "redis-baseline")]
            Backend::Redis(_) => 0,
        }
    }

    pub fn shards_served(&self) -> usize {
        match &self.backend {
            Backend::Owned { owned, .. } => (0..owned.shards()).filter(|&s| owned.is_serving(s)).count(),
            #[cfg(feature = "redis-baseline")]
            Backend::Redis(_) => 0,
        }
    }

    pub fn tiers(&self) -> Tiers {
        self.tiers.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The tier name and limit for a key (caller's tier, assignment, override or default).
    pub fn resolve(&self, key: &str, tier: Option<&str>) -> Result<(String, LimitSpec), KeyError> {
        check_key(key)?;
        self.tiers.read().unwrap_or_else(|p| p.into_inner()).resolve_named(key, tier)
    }

    /// Record a request: allowed or denied, wherever the key's state lives.
    pub async fn check(&self, req: &KeyCheck) -> Result<KeyAnswer, CheckError> {
        let (tier, spec) = self.resolve(&req.key, req.tier.as_deref())?;
        if req.cost == 0 || req.cost > spec.max_cost() {
            return Err(KeyError::BadCost { got: req.cost, max: spec.max_cost() }.into());
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(CheckError::Overloaded("too many requests in flight here; shedding".into()));
        };
        match &self.backend {
            #[cfg(feature = "redis-baseline")]
            Backend::Redis(r) => {
                let v = r.check(&req.key, &spec, req.cost).await.map_err(|e| CheckError::Unavailable(e.to_string()))?;
                Ok(answer(&req.key, tier, v, None))
            }
            Backend::Owned { owned, nats } => {
                let shard = shard_of(&req.key, owned.shards());
                if let Some(pending) = owned.try_check(shard, req, &spec)? {
                    return Ok(answer(&req.key, tier, pending.wait().await?, None));
                }
                let Some(client) = nats else { return Err(OwnedError::NotOwner(shard).into()) };
                if let Some(a) = self.cached_denial(&req.key, &tier, &spec, owned.now_epoch_ms()) {
                    return Ok(a);
                }
                let a = forward(client, shard, req, owned.clock()).await?;
                if !a.allowed && req.cost == 1 {
                    self.remember_denial(&a, owned.now_epoch_ms());
                }
                Ok(a)
            }
        }
    }

    /// A key's current count and remaining, recording nothing (asked of its owner).
    pub async fn peek(&self, key: &str, tier: Option<&str>) -> Result<KeyAnswer, CheckError> {
        let (name, spec) = self.resolve(key, tier)?;
        match &self.backend {
            #[cfg(feature = "redis-baseline")]
            Backend::Redis(r) => {
                let (count, v) = r.peek(key, &spec).await.map_err(|e| CheckError::Unavailable(e.to_string()))?;
                Ok(answer(key, name, v, Some(count)))
            }
            Backend::Owned { owned, nats } => {
                let shard = shard_of(key, owned.shards());
                if let Some((count, v)) = owned.try_peek(shard, key, &spec)? {
                    return Ok(answer(key, name, v, Some(count)));
                }
                let Some(client) = nats else { return Err(OwnedError::NotOwner(shard).into()) };
                let req = KeyCheck { read: true, ..KeyCheck::new(key, 1, tier.map(String::from)) };
                forward(client, shard, &req, owned.clock()).await
            }
        }
    }

    fn cached_denial(&self, key: &str, tier: &str, spec: &LimitSpec, now_ms: u64) -> Option<KeyAnswer> {
        let cache = self.denied_until.lock().unwrap_or_else(|p| p.into_inner());
        let until = *cache.get(&(key.to_string(), tier.to_string()))?;
        (until > now_ms).then(|| KeyAnswer {
            v: leasehold_core::wire::SCHEMA_VERSION,
            allowed: false,
            key: key.into(),
            tier: tier.into(),
            limit: spec.limit,
            window_ms: spec.window_ms,
            remaining: 0,
            reset_ms: until - now_ms,
            retry_after_ms: Some(until - now_ms),
            count: None,
        })
    }

    /// A cost-1 denial holds for any cost until its retry time: answer it here until then.
    fn remember_denial(&self, a: &KeyAnswer, now_ms: u64) {
        let Some(wait) = a.retry_after_ms.filter(|&w| w > 0) else { return };
        let mut cache = self.denied_until.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= DENY_CACHE_KEYS {
            cache.retain(|_, until| *until > now_ms);
            if cache.len() >= DENY_CACHE_KEYS {
                return;
            }
        }
        cache.insert((a.key.clone(), a.tier.clone()), now_ms + wait);
    }
}

/// The cluster's tiers document in KV, and the last revision this instance applied (with the
/// reason, if it refused it).
struct TiersStore {
    kv: async_nats::jetstream::kv::Store,
    max_bytes: usize,
    applied: tokio::sync::watch::Sender<(u64, Option<String>)>,
}

/// How long `PUT /v1/tiers` waits for the stored document to come back through the watch.
const TIERS_APPLY_PATIENCE: Duration = Duration::from_secs(5);

/// Why this instance refused a stored tiers document.
#[derive(Debug, thiserror::Error)]
pub enum TiersRefused {
    #[error(transparent)]
    Unreadable(#[from] serde_json::Error),
    #[error(transparent)]
    Invalid(#[from] KeyError),
}

/// Why a tiers change was not made.
#[derive(Debug, thiserror::Error)]
pub enum TiersError {
    /// 400: nothing changed.
    #[error(transparent)]
    Invalid(#[from] KeyError),
    /// 413: nothing changed.
    #[error("the tiers document is {len} bytes; the store takes at most {max}")]
    TooLarge { len: usize, max: usize },
    /// 503: nothing changed.
    #[error("the tiers could not be stored for the cluster: {0}")]
    NotStored(String),
    /// 503: stored (every instance that can apply it will), but not applied here.
    #[error("stored, but not applied on this instance: {0}")]
    NotApplied(String),
}

/// Valid tiers whose longest window fits in the `retention_ms` of admissions kept.
pub fn check_tiers(tiers: &Tiers, retention_ms: u64) -> Result<(), KeyError> {
    tiers.validate()?;
    if tiers.max_window_ms() > retention_ms {
        return Err(KeyError::BadSpec(format!(
            "a window of {} ms is longer than the {retention_ms} ms of admissions kept (--retention-ms)",
            tiers.max_window_ms(),
        )));
    }
    Ok(())
}

/// Ask the shard's owner. While a shard moves (no subscriber yet, or the old owner already
/// stopped), ask again after 5, 10, 20 … (at most 200) ms for up to [`HANDOVER_PATIENCE`], so a planned
/// hand-over (release, claim, replay, subscribe: tens of milliseconds) is not visible.
async fn forward(
    client: &async_nats::Client,
    shard: u32,
    req: &KeyCheck,
    clock: leasehold_process::clock::LeaseClock,
) -> Result<KeyAnswer, CheckError> {
    let started_ns = clock.now_ns();
    let mut pause = Duration::from_millis(5);
    loop {
        match forward_once(client, shard, req).await {
            Err(CheckError::Unavailable(_))
                if Duration::from_nanos(clock.now_ns().saturating_sub(started_ns)) + pause < HANDOVER_PATIENCE =>
            {
                tokio::time::sleep(pause).await;
                // Doubling: a move is seen within a few tries, and an owner whose storage refuses
                // fast (each try counted there, not given: waste) is asked about a dozen times.
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// How long a forwarded request waits for a moving shard's new owner.
const HANDOVER_PATIENCE: Duration = Duration::from_millis(1_500);

async fn forward_once(client: &async_nats::Client, shard: u32, req: &KeyCheck) -> Result<KeyAnswer, CheckError> {
    let body = leasehold_core::wire::encode(req);
    let subject = leasehold_core::subjects::keys_check(shard);
    let reply = tokio::time::timeout(FORWARD_TIMEOUT, client.request(subject, body.into()))
        .await
        .map_err(|_| CheckError::Unavailable(format!("the owner of shard {shard} did not answer in time")))?
        .map_err(|_| CheckError::Unavailable(format!("shard {shard} has no owner right now; retry")))?;
    decode_reply(&reply.payload)
}
/// The owner's reply, as the forwarding instance's answer or error.
pub fn decode_reply(payload: &[u8]) -> Result<KeyAnswer, CheckError> {
    if let Ok(a) = decode_keys_message::<KeyAnswer>(payload, MAX_REPLY_BYTES) {
        return Ok(a);
    }
    let refusal = decode_keys_message::<KeyRefusal>(payload, MAX_REPLY_BYTES)
        .map_err(|e| CheckError::Unavailable(format!("unreadable reply from the owner: {e}")))?;
    Err(match refusal.status {
        400 => CheckError::Input(KeyError::Malformed(refusal.error)),
        429 => CheckError::Overloaded(refusal.error),
        _ => CheckError::Unavailable(refusal.error),
    })
}

/// Largest reply accepted from an owner.
const MAX_REPLY_BYTES: usize = 8_192;

pub fn answer(key: &str, tier: String, v: Verdict, count: Option<u64>) -> KeyAnswer {
    KeyAnswer {
        v: leasehold_core::wire::SCHEMA_VERSION,
        allowed: v.allowed,
        key: key.to_string(),
        tier,
        limit: v.limit,
        window_ms: v.window_ms,
        remaining: v.remaining,
        reset_ms: v.reset_ms,
        retry_after_ms: (!v.allowed).then_some(v.retry_after_ms),
        count,
    }
}
