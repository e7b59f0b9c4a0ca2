//! Watches of a KV bucket that come back promptly after NATS does.
//!
//! A watch is an ordered consumer. When the connection drops, the client library re-creates
//! that consumer by itself, but waits 0.5, 1, 1.5 and 2 s between failed tries and then 10 s:
//! after every NATS server restarted, JetStream takes several seconds to answer again, so a
//! watch could stay blind for 10 s more, longer than a DC lease lives. [`watch_once`] ends a
//! watch as soon as the client has connected again, and its callers open a new one every
//! [`REOPEN_EVERY`] until one opens.

use async_nats::jetstream::kv::{Entry, Store};
use futures::StreamExt;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a caller waits before opening a watch again after one ended or failed to open.
pub const REOPEN_EVERY: Duration = Duration::from_millis(250);
/// How often a watch checks whether the client connected again.
const RECONNECT_CHECK: Duration = Duration::from_millis(100);

/// One watch of `key` (a key or a wildcard) on `store`, from every key's newest value on (so an
/// update made while no watch was open is not missed: each opening delivers the newest values
/// again, and consumers skip what they have seen): each entry goes to `tx` through `map` (`None`
/// skips it) until the watch ends, fails to open, or `client` connects again after it opened.
/// False once `tx`'s receiver is gone (stop watching); true otherwise (open another).
///
/// Only the client's own reconnects are seen: behind a leaf node whose link to the hub was cut,
/// the client stays connected and the watch comes back as the client library re-creates it.
pub async fn watch_once<T>(
    client: &async_nats::Client,
    store: &Store,
    key: &str,
    tx: &mpsc::Sender<T>,
    mut map: impl FnMut(Entry) -> Option<T>,
) -> bool {
    let connects = || client.statistics().connects.load(Ordering::Relaxed);
    let opened_at = connects();
    let Ok(mut watch) = store.watch_with_history(key).await else { return !tx.is_closed() };
    let mut check = tokio::time::interval(RECONNECT_CHECK);
    loop {
        tokio::select! {
            entry = watch.next() => match entry {
                Some(Ok(entry)) => {
                    if let Some(item) = map(entry) {
                        if tx.send(item).await.is_err() {
                            return false;
                        }
                    }
                }
                _ => return !tx.is_closed(),
            },
            _ = check.tick() => {
                if connects() != opened_at || tx.is_closed() {
                    return !tx.is_closed();
                }
            }
        }
    }
}

/// Keep watching `key` on `store` (see [`watch_once`]) for as long as `tx`'s receiver lives.
pub async fn keep_watching<T>(
    client: async_nats::Client,
    store: Store,
    key: String,
    tx: mpsc::Sender<T>,
    mut map: impl FnMut(Entry) -> Option<T>,
) {
    while watch_once(&client, &store, &key, &tx, &mut map).await {
        tokio::time::sleep(REOPEN_EVERY).await;
    }
}
