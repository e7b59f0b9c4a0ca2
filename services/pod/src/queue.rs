//! The bounded wait queue: one FIFO per priority class, served highest class first.

use crate::limiter::{Denial, Priority};
use leasehold_shared::bucket::{Decision, DenyReason, TokenBucket};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::oneshot;

pub(crate) struct Waiter {
    pub cost: u32,
    pub deadline_ns: u64,
    pub reply: oneshot::Sender<Result<(), Denial>>,
}

pub(crate) struct WaitQueue {
    capacity: usize,
    high: VecDeque<Waiter>,
    low: VecDeque<Waiter>,
}

impl WaitQueue {
    pub fn new(capacity: usize) -> Self {
        WaitQueue { capacity, high: VecDeque::new(), low: VecDeque::new() }
    }

    pub fn len(&self) -> usize {
        self.high.len() + self.low.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue a waiter, or hand it back when the queue is full.
    pub fn push(&mut self, priority: Priority, w: Waiter) -> Result<(), Waiter> {
        if self.len() >= self.capacity {
            return Err(w);
        }
        match priority {
            Priority::High => self.high.push_back(w),
            Priority::Low => self.low.push_back(w),
        }
        Ok(())
    }

    /// Grant what the bucket allows, in order; time out late waiters. Returns when to look again.
    pub fn serve(&mut self, bucket: &TokenBucket, now_ns: u64) -> Option<u64> {
        for q in [&mut self.high, &mut self.low] {
            q.retain_mut(|w| {
                if w.deadline_ns > now_ns && !w.reply.is_closed() {
                    return true;
                }
                let retry = bucket.retry_after(w.cost, now_ns).ok().flatten().map(Duration::from_nanos);
                let _ = std::mem::replace(&mut w.reply, oneshot::channel().0).send(Err(Denial::Timeout { retry_after: retry }));
                false
            });
        }
        loop {
            let q = if !self.high.is_empty() { &mut self.high } else { &mut self.low };
            let head = q.front()?;
            match bucket.try_acquire(head.cost, now_ns) {
                Ok(Decision::Granted) => {
                    let w = q.pop_front().expect("head");
                    if w.reply.send(Ok(())).is_err() {
                        // The caller left after the grant: the token is spent, not exceeded.
                    }
                }
                Ok(Decision::Denied { reason: DenyReason::Empty, retry_after_ns }) => {
                    let next = now_ns.saturating_add(retry_after_ns.unwrap_or(1_000_000));
                    return Some(next.min(self.earliest_deadline()));
                }
                // No lease: wait for one (the driver wakes the queue) or for the first deadline.
                Ok(Decision::Denied { .. }) => return Some(self.earliest_deadline()),
                Err(_) => {
                    let w = q.pop_front().expect("head");
                    let _ = w.reply.send(Err(Denial::NoLease));
                }
            }
        }
    }

    fn earliest_deadline(&self) -> u64 {
        self.high.iter().chain(self.low.iter()).map(|w| w.deadline_ns).min().unwrap_or(u64::MAX)
    }
}
