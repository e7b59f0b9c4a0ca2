//! The pods' report batches, queued for the manager's loop up to a bound in bytes.
//!
//! async-nats queues up to 65,536 messages per subscription for a reader that falls behind. A
//! DC manager saturated at 1,000 limits × 100 pods reads report batches of tens of kilobytes
//! seconds after they were sent, and that queue grows to gigabytes. A report drives no safety
//! rule and a pod reports every period, so a batch past the bound is dropped (counted as shed)
//! instead: what the manager reads stays a bounded time old and its memory stays bounded. A
//! task of its own drains the subscription as messages arrive, so the bound holds however far
//! behind the manager's loop is.

use async_nats::{Message, Subscriber};
use futures::StreamExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A subscription's messages, queued up to `max_bytes` of payload (one message is always
/// queued, whatever its size, when none is).
pub struct BoundedInbound {
    queue: mpsc::UnboundedReceiver<Message>,
    queued_bytes: Arc<AtomicUsize>,
    shed: Arc<AtomicU64>,
}

impl BoundedInbound {
    /// Drains `subscription` on a task of the current runtime from now on.
    pub fn new(mut subscription: Subscriber, max_bytes: usize) -> Self {
        let (tx, queue) = mpsc::unbounded_channel();
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let shed = Arc::new(AtomicU64::new(0));
        let (bytes, dropped) = (queued_bytes.clone(), shed.clone());
        tokio::spawn(async move {
            while let Some(msg) = subscription.next().await {
                let len = msg.payload.len();
                let queued = bytes.load(Ordering::Acquire);
                if queued > 0 && queued.saturating_add(len) > max_bytes {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                bytes.fetch_add(len, Ordering::AcqRel);
                if tx.send(msg).is_err() {
                    break; // the manager is gone
                }
            }
        });
        BoundedInbound { queue, queued_bytes, shed }
    }

    /// The oldest message queued; `None` once the subscription has ended and the queue is empty.
    pub async fn next(&mut self) -> Option<Message> {
        let msg = self.queue.recv().await?;
        self.queued_bytes.fetch_sub(msg.payload.len(), Ordering::AcqRel);
        Some(msg)
    }

    /// Messages dropped so far because the queue held `max_bytes`.
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
}
