//! NATS request/reply: `lh.keys.check.<shard>` with a JSON [`CheckRequest`] (`"read": true` reads
//! instead of recording). Only the shard's owner subscribes, so the request reaches the key's
//! state directly. The reply is an [`Answer`], or `{"error": …, "status": 400|429|503}`.
//! `shard = keys::shard_of(key, shards)` (FNV-1a), so a client in any language can address it.

use crate::limiter::{answer, Answer, CheckError, CheckRequest, KeyLimiter};
use crate::owned::{Owned, OwnedError};
use futures::StreamExt;
use leasehold_shared::keys::{shard_of, KeyError};
use serde_json::json;

pub const SUBJECT_PREFIX: &str = "lh.keys.check";

/// Largest request accepted (a key is at most 256 bytes).
const MAX_REQUEST_BYTES: usize = 4_096;

/// Answer one shard's requests until the subscription ends (the shard was given up).
pub async fn serve_shard(
    client: async_nats::Client,
    mut sub: async_nats::Subscriber,
    shard: u32,
    owned: Owned,
    limiter: KeyLimiter,
) {
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply else { continue };
        let req = if msg.payload.len() > MAX_REQUEST_BYTES {
            Err(CheckError::Input(KeyError::Malformed(format!("request is above {MAX_REQUEST_BYTES} bytes"))))
        } else {
            serde_json::from_slice::<CheckRequest>(&msg.payload)
                .map_err(|e| CheckError::Input(KeyError::Malformed(format!("malformed request: {e}"))))
        };
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
    Now(Answer),
    Later(crate::owned::Pending, String, String),
}

fn decide(shard: u32, owned: &Owned, limiter: &KeyLimiter, req: CheckRequest) -> Result<Decided, CheckError> {
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

async fn send(client: &async_nats::Client, reply: async_nats::Subject, a: Result<Answer, CheckError>) {
    let body = match a {
        Ok(a) => serde_json::to_vec(&a).unwrap_or_default(),
        Err(e) => {
            let status = match e {
                CheckError::Input(_) => 400,
                CheckError::Overloaded(_) => 429,
                CheckError::Unavailable(_) => 503,
            };
            json!({ "error": e.to_string(), "status": status }).to_string().into_bytes()
        }
    };
    let _ = client.publish(reply, body.into()).await;
}

/// The owner's reply, as the forwarding instance's answer or error.
pub fn decode_reply(payload: &[u8]) -> Result<Answer, CheckError> {
    if let Ok(a) = serde_json::from_slice::<Answer>(payload) {
        return Ok(a);
    }
    let v: serde_json::Value = serde_json::from_slice(payload)
        .map_err(|e| CheckError::Unavailable(format!("unreadable reply from the owner: {e}")))?;
    let error = v["error"].as_str().unwrap_or("the owner refused").to_string();
    Err(match v["status"].as_u64() {
        Some(400) => CheckError::Input(KeyError::Malformed(error)),
        Some(429) => CheckError::Overloaded(error),
        _ => CheckError::Unavailable(error),
    })
}
