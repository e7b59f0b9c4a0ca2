//! NATS request/reply: `lh.keys.check.<shard>` with a [`KeyCheck`] (`"read": true` reads
//! instead of recording). Only the shard's owner subscribes, so the request reaches the key's
//! state directly. The reply is a [`KeyAnswer`], or a [`KeyRefusal`] with status 400, 429 or 503.
//! `shard = keys::shard_of(key, shards)` (FNV-1a), so a client in any language can address it.

use crate::limiter::{answer, CheckError, KeyAnswer, KeyCheck, KeyLimiter};
use crate::owned::{Owned, OwnedError};
use futures::StreamExt;
use leasehold_core::wire::{encode, WireError, SCHEMA_VERSION};
use leasehold_per_key::wire::{decode_keys_message, KeyRefusal};
use leasehold_per_key::{shard_of, KeyError};

/// How long a stopped shard's task waits for the end of what was buffered.
const DRAIN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Largest request accepted (a key is at most 256 bytes).
const MAX_REQUEST_BYTES: usize = 4_096;

/// Answer one shard's requests until `stop`: then unsubscribe and answer what is already
/// buffered (with 503, the shard's gate being closed, so forwarders retry the new owner at once).
pub async fn serve_shard(
    client: async_nats::Client,
    mut sub: async_nats::Subscriber,
    shard: u32,
    owned: Owned,
    limiter: KeyLimiter,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut stopping = false;
    loop {
        let next = if stopping {
            // Unsubscribed: what was buffered arrives, then the end (bounded, should it never come).
            tokio::time::timeout(DRAIN_PATIENCE, sub.next()).await.unwrap_or(None)
        } else {
            tokio::select! {
                next = sub.next() => next,
                _ = &mut stop => {
                    stopping = true;
                    let _ = sub.unsubscribe().await;
                    continue;
                }
            }
        };
        let Some(msg) = next else { return };
        let Some(reply) = msg.reply else { continue };
        let req = decode_keys_message::<KeyCheck>(&msg.payload, MAX_REQUEST_BYTES).map_err(|e| match e {
            WireError::Invalid { field: "key", .. } => CheckError::Input(KeyError::BadKey),
            // The wire error says what was wrong ("malformed JSON: …", "unsupported schema version …").
            e => CheckError::Input(KeyError::Malformed(format!("request: {e}"))),
        });
        let decided = req.and_then(|r| decide(shard, &owned, &limiter, r));
        let client = client.clone();
        match decided {
            Ok(Decided::Now(a)) => send(&client, reply, Ok(a)).await,
            Ok(Decided::Later(pending, key, tier)) if pending.is_final() => {
                send(&client, reply, Ok(answer(&key, tier, pending.verdict(), None))).await
            }
            Ok(Decided::Later(pending, key, tier)) => {
                // Zero-loss: the answer waits for storage; other requests do not.
                tokio::spawn(async move {
                    let a = pending.wait().await.map(|v| answer(&key, tier, v, None)).map_err(CheckError::from);
                    send(&client, reply, a).await;
                });
            }
            Err(e) => send(&client, reply, Err(e)).await,
        }
    }
}

enum Decided {
    Now(KeyAnswer),
    Later(crate::owned::Pending, String, String),
}

fn decide(shard: u32, owned: &Owned, limiter: &KeyLimiter, req: KeyCheck) -> Result<Decided, CheckError> {
    let (tier, spec) = limiter.resolve(&req.key, req.tier.as_deref())?;
    if shard_of(&req.key, owned.shards()) != shard {
        return Err(CheckError::Input(KeyError::Malformed(format!("key {:?} is not in shard {shard}", req.key))));
    }
    if req.read {
        let (count, v) = owned.try_peek(shard, &req.key, &spec)?.ok_or(OwnedError::NotOwner(shard))?;
        return Ok(Decided::Now(answer(&req.key, tier, v, Some(count))));
    }
    if req.cost == 0 || req.cost > spec.max_cost() {
        return Err(KeyError::BadCost { got: req.cost, max: spec.max_cost() }.into());
    }
    let pending = owned.try_check(shard, &req, &spec)?.ok_or(OwnedError::NotOwner(shard))?;
    Ok(Decided::Later(pending, req.key, tier))
}

async fn send(client: &async_nats::Client, reply: async_nats::Subject, a: Result<KeyAnswer, CheckError>) {
    let body = match a {
        Ok(a) => encode(&a),
        Err(e) => {
            let status = match e {
                CheckError::Input(_) => 400,
                CheckError::Overloaded(_) => 429,
                CheckError::Unavailable(_) => 503,
            };
            encode(&KeyRefusal { v: SCHEMA_VERSION, error: e.to_string(), status })
        }
    };
    let _ = client.publish(reply, body.into()).await;
}
