//! NATS request/reply: `lh.keys.check.<shard>` with a JSON [`CheckRequest`]; the reply is an
//! [`Answer`], or `{"error": …, "status": 400|429}`. `shard = keys::shard_of(key, shards)`, so a
//! client can address the owner of a key directly (today one instance owns every shard).

use crate::limiter::{CheckRequest, KeyLimiter};
use futures::StreamExt;
use leasehold_shared::keys::table::TableError;
use serde_json::json;

pub const SUBJECT_PREFIX: &str = "lh.keys.check";

/// Serve requests until the subscription ends.
pub async fn serve(client: async_nats::Client, limiter: KeyLimiter) -> Result<(), String> {
    let subject = format!("{SUBJECT_PREFIX}.*");
    let mut sub = client.subscribe(subject.clone()).await.map_err(|e| format!("cannot subscribe to {subject}: {e}"))?;
    while let Some(msg) = sub.next().await {
        let Some(reply) = msg.reply else { continue };
        let answer = match serde_json::from_slice::<CheckRequest>(&msg.payload) {
            Ok(req) => match limiter.check(&req) {
                Ok(a) => serde_json::to_value(a).unwrap_or_default(),
                Err(TableError::Full(n)) => json!({ "error": format!("tracking {n} keys; shedding"), "status": 429 }),
                Err(TableError::Input(e)) => json!({ "error": e.to_string(), "status": 400 }),
            },
            Err(e) => json!({ "error": format!("malformed request: {e}"), "status": 400 }),
        };
        let _ = client.publish(reply, answer.to_string().into()).await;
    }
    Ok(())
}
