//! The bounded wait queue: one FIFO per priority class, served highest class first.

use super::{Denial, Priority};
use leasehold_core::bucket::{Decision, DenyReason, TokenBucket};
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
    pub(crate) fn new(capacity: usize) -> Self {
        WaitQueue { capacity, high: VecDeque::new(), low: VecDeque::new() }
    }

    pub(crate) fn len(&self) -> usize {
        self.high.len() + self.low.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue a waiter, or hand it back when the queue is full.
    pub(crate) fn push(&mut self, priority: Priority, w: Waiter) -> Result<(), Waiter> {
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
    pub(crate) fn serve(&mut self, bucket: &TokenBucket, now_ns: u64) -> Option<u64> {
        for q in [&mut self.high, &mut self.low] {
            q.retain_mut(|w| {
                if w.deadline_ns > now_ns && !w.reply.is_closed() {
                    return true;
                }
                let retry = bucket.retry_after(w.cost, now_ns).ok().flatten().map(Duration::from_nanos);
                let _ = std::mem::replace(&mut w.reply, oneshot::channel().0)
                    .send(Err(Denial::Timeout { retry_after: retry }));
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

#[cfg(test)]
mod tests {
    use crate::limiter::{Denial, Limiter, Priority};
    use leasehold_core::bucket::TokenBucket;
    use leasehold_core::quota::Quota;
    use std::sync::Arc;
    use std::time::Duration;

    /// A limiter whose bucket holds `burst` tokens refilling at `rate`/s for an hour.
    fn limiter(rate: u64, burst: u64, capacity: usize) -> Limiter {
        let bucket = Arc::new(TokenBucket::new());
        let l = Limiter::new(bucket.clone(), capacity, leasehold_process::clock::LeaseClock::start());
        let now = l.now_ns();
        bucket.apply_lease(Quota::per_s(rate, burst), now + 3_600_000_000_000, now).unwrap();
        tokio::spawn(l.clone().dispatch());
        l
    }

    async fn drain_tokens(l: &Limiter) {
        while l.try_acquire(1).unwrap().is_ok() {}
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn high_priority_waiters_are_served_before_earlier_low_ones() {
        let l = limiter(20, 1, 16);
        drain_tokens(&l).await;
        let low = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(1, Priority::Low, Duration::from_secs(5)).await }
        });
        // The low waiter is queued before the high one arrives.
        while l.queued() == 0 {
            tokio::task::yield_now().await;
        }
        let high = l.acquire(1, Priority::High, Duration::from_secs(5)).await.unwrap();
        assert_eq!(high, Ok(()));
        assert!(!low.is_finished(), "the low-priority waiter went first");
        assert_eq!(low.await.unwrap().unwrap(), Ok(()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_and_a_passed_deadline_are_denials() {
        let l = limiter(1, 1, 1);
        drain_tokens(&l).await;
        let _ = l.take_interval();
        let waiting = tokio::spawn({
            let l = l.clone();
            async move { l.acquire(1, Priority::Low, Duration::from_millis(300)).await }
        });
        while l.queued() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(l.acquire(1, Priority::High, Duration::from_secs(1)).await.unwrap(), Err(Denial::QueueFull));
        match waiting.await.unwrap().unwrap() {
            Err(Denial::Timeout { retry_after: Some(_) }) => {}
            other => panic!("expected a timeout with a retry hint, got {other:?}"),
        }
        assert_eq!(l.take_interval().rejected, 2, "both denials counted");
    }

    #[tokio::test]
    async fn zero_cost_is_an_error_and_no_lease_denies() {
        let l = Limiter::new(Arc::new(TokenBucket::new()), 4, leasehold_process::clock::LeaseClock::start());
        assert!(l.try_acquire(0).is_err());
        assert_eq!(l.try_acquire(1).unwrap(), Err(Denial::NoLease));
        let fallback = l.acquire_or_else(1, Priority::High, Duration::ZERO, |_| "cached").await.unwrap();
        assert_eq!(fallback, Err("cached"));
    }
}
