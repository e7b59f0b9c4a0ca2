//! The cluster's tiers live in KV (`lh_keys_config`, key `tiers`), so one `PUT /v1/tiers` on any
//! instance (or `nats kv put lh_keys_config tiers …`) changes every instance's limits, without a
//! restart. An invalid document is logged and ignored: the limits in force stay.

use crate::limiter::{KeyLimiter, TiersRefused};
use async_nats::jetstream::kv::{Entry, Operation};
use leasehold_nats::kv::{ensure_bucket, BucketSpec, KvError};
use leasehold_nats::watch::keep_watching;
use leasehold_per_key::Tiers;

use leasehold_core::subjects::{KEYS_CONFIG_BUCKET as CONFIG_BUCKET, KEYS_TIERS_KEY as TIERS_KEY};

/// Adopt the stored tiers (or store ours if there are none) and follow every change.
pub async fn start(
    js: &async_nats::jetstream::Context,
    limiter: &KeyLimiter,
    replicas: usize,
) -> Result<(), StartError> {
    let spec = BucketSpec { replicas, ..BucketSpec::new(CONFIG_BUCKET) };
    let store = ensure_bucket(js, &spec).await?;
    // The payload limit, less room for the KV message's headers.
    let max_bytes = js.client().server_info().max_payload.saturating_sub(4_096);
    limiter.attach_tiers_store(store.clone(), max_bytes);
    match leasehold_nats::kv::read(&store, TIERS_KEY).await? {
        Some((revision, body)) => apply(limiter, &body, revision),
        None => {
            let body = serde_json::to_vec(&limiter.tiers())?;
            let _ = store.create(TIERS_KEY, body.into()).await;
        }
    }
    let limiter = limiter.clone();
    let (tx, mut changes) = tokio::sync::mpsc::channel(16);
    let puts = |e: Entry| (e.operation == Operation::Put).then_some((e.value, e.revision));
    // From the newest value each time it opens (a put while it was reopening is not missed;
    // `apply` ignores tiers equal to those in force).
    tokio::spawn(keep_watching(js.client(), store, TIERS_KEY.into(), tx, puts));
    tokio::spawn(async move {
        while let Some((body, revision)) = changes.recv().await {
            apply(&limiter, &body, revision);
        }
    });
    Ok(())
}

/// Why the cluster's tiers could not be followed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

fn apply(limiter: &KeyLimiter, body: &[u8], revision: u64) {
    let result = serde_json::from_slice::<Tiers>(body).map_err(TiersRefused::from).and_then(|t| {
        if t == limiter.tiers() {
            return Ok(());
        }
        Ok(limiter.set_tiers(t)?)
    });
    if let Err(e) = &result {
        tracing::warn!(cause = %e, revision, "ignoring invalid tiers in {CONFIG_BUCKET}/{TIERS_KEY}");
    }
    limiter.note_tiers_applied(revision, result);
}
