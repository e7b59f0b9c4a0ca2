//! The pods' report batches, queued for the manager's loop up to a bound in bytes and in age.
//!
//! async-nats queues up to 65,536 messages per subscription for a reader that falls behind: a
//! DC manager saturated at 1,000 limits × 100 pods held gigabytes of report batches and read
//! them seconds after they were sent. Reports drive no counting rule that a lost one could
//! break (a lost `lease_in_use` only keeps older leases counted longer), and a pod reports at
//! least once a second (quiet reports) with its state again. So a batch is dropped, and counted
//! as shed, when it would take the queue past `max_bytes` (payload plus a per-message
//! overhead), and when it has waited longer than `max_age_ns` by the time the loop reads it. A
//! task of its own drains the subscription as messages arrive, so both bounds hold however far
//! behind the loop is; it ends with the queue. The arrival of the oldest batch queued says how
//! far the loop has read (`read_through_ns`): a pod's silence counts only up to then.

use async_nats::{Message, Subscriber};
use futures::StreamExt;
use leasehold_process::clock::LeaseClock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// What a queued message costs besides its payload (its subject, the `Message`, the queue's slot).
const MESSAGE_OVERHEAD_BYTES: usize = 256;

/// A subscription's messages, queued up to `max_bytes` (one message is always queued, whatever
/// its size, when none is) and read only while younger than `max_age_ns`.
pub struct BoundedInbound {
    queue: mpsc::UnboundedReceiver<(u64, Message)>,
    /// The oldest message queued, taken off the queue to read its time of arrival
    /// ([`read_through_ns`](Self::read_through_ns)) and read next.
    peeked: Option<(u64, Message)>,
    queued_bytes: Arc<AtomicUsize>,
    /// Messages dropped so far (watched: a test waits for drops as events).
    shed: Arc<watch::Sender<u64>>,
    /// Messages queued so far (watched, as `shed`).
    queued: Arc<watch::Sender<u64>>,
    /// `clock`'s time of the latest drop (0: none yet).
    last_shed_ns: Arc<AtomicU64>,
    clock: LeaseClock,
    max_age_ns: u64,
    forwarder: tokio::task::AbortHandle,
}

fn cost(msg: &Message) -> usize {
    msg.payload.len() + msg.subject.len() + MESSAGE_OVERHEAD_BYTES
}

impl BoundedInbound {
    /// Drains `subscription` on a task of the current runtime from now on, stamping each message
    /// with `clock`'s time of arrival.
    pub fn new(mut subscription: Subscriber, max_bytes: usize, max_age_ns: u64, clock: LeaseClock) -> Self {
        let (tx, queue) = mpsc::unbounded_channel();
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let shed = Arc::new(watch::Sender::new(0));
        let last_shed_ns = Arc::new(AtomicU64::new(0));
        let queued = Arc::new(watch::Sender::new(0));
        let (bytes, dropped, dropped_at, kept) =
            (queued_bytes.clone(), shed.clone(), last_shed_ns.clone(), queued.clone());
        let forwarder = tokio::spawn(async move {
            while let Some(msg) = subscription.next().await {
                let len = cost(&msg);
                let queued = bytes.load(Ordering::Acquire);
                if queued > 0 && queued.saturating_add(len) > max_bytes {
                    dropped_at.fetch_max(clock.now_ns(), Ordering::AcqRel);
                    dropped.send_modify(|n| *n += 1);
                    continue;
                }
                bytes.fetch_add(len, Ordering::AcqRel);
                if tx.send((clock.now_ns(), msg)).is_err() {
                    break; // the queue is gone
                }
                kept.send_modify(|n| *n += 1);
            }
        })
        .abort_handle();
        BoundedInbound { queue, peeked: None, queued_bytes, shed, queued, last_shed_ns, clock, max_age_ns, forwarder }
    }

    /// The oldest message queued that is still young enough (older ones are shed on the way);
    /// `None` once the subscription has ended and the queue is empty.
    pub async fn next(&mut self) -> Option<Message> {
        loop {
            let (arrived_ns, msg) = match self.peeked.take() {
                Some(peeked) => peeked,
                None => self.queue.recv().await?,
            };
            self.queued_bytes.fetch_sub(cost(&msg), Ordering::AcqRel);
            let now_ns = self.clock.now_ns();
            if now_ns.saturating_sub(arrived_ns) <= self.max_age_ns {
                return Some(msg);
            }
            self.last_shed_ns.fetch_max(now_ns, Ordering::AcqRel);
            self.shed.send_modify(|n| *n += 1);
        }
    }

    /// The clock's time up to which the reader has read: every message that arrived before it
    /// has been read or shed. The arrival of the oldest message still queued, or now when none
    /// is. (A message still in the client's own buffer has not arrived in this sense: the
    /// subscription is drained as fast as the client delivers.)
    pub fn read_through_ns(&mut self) -> u64 {
        if self.peeked.is_none() {
            self.peeked = self.queue.try_recv().ok();
        }
        self.peeked.as_ref().map_or_else(|| self.clock.now_ns(), |(arrived_ns, _)| *arrived_ns)
    }

    /// Messages dropped so far: past `max_bytes` on arrival, or older than `max_age_ns` when read.
    pub fn shed(&self) -> u64 {
        *self.shed.borrow()
    }

    /// When the latest message was dropped (the clock's ns), if one was.
    pub fn last_shed_ns(&self) -> Option<u64> {
        Some(self.last_shed_ns.load(Ordering::Acquire)).filter(|&ns| ns > 0)
    }

    /// [`shed`](Self::shed), watched.
    pub fn shed_watch(&self) -> watch::Receiver<u64> {
        self.shed.subscribe()
    }

    /// Messages queued so far (read or not), watched.
    pub fn queued_watch(&self) -> watch::Receiver<u64> {
        self.queued.subscribe()
    }
}

impl Drop for BoundedInbound {
    /// The forwarder ends with the queue (it would otherwise keep the subscription, and the
    /// connection, open while it sheds).
    fn drop(&mut self) {
        self.forwarder.abort();
    }
}
