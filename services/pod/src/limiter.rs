//! The request path for one limit: a local token bucket (the pod's sub-lease) plus a bounded
//! wait queue with priority classes. No network hop: the lease arrives in the background (see
//! [`crate::driver`]). Every request counts as use of the limit: it restarts a loop given back
//! when idle.

mod queue;

use crate::striped::RequestCounts;
use leasehold_core::bucket::{BucketError, Decision, DenyReason, TokenBucket};
use leasehold_core::pod::IntervalCounters;
use queue::{WaitQueue, Waiter};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::{oneshot, watch, Notify};

/// Served strictly in this order when permits are scarce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    Low,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    /// The bucket is empty; a permit is expected after `retry_after`.
    Empty { retry_after: Duration },
    /// No valid lease (not yet received, or expired without renewal): fail safe.
    NoLease,
    /// The wait queue is full.
    QueueFull,
    /// The deadline passed while waiting.
    Timeout { retry_after: Option<Duration> },
}

impl Denial {
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Denial::Empty { retry_after } => Some(*retry_after),
            Denial::Timeout { retry_after } => *retry_after,
            Denial::NoLease | Denial::QueueFull => None,
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum AcquireError {
    #[error("cost must be at least 1")]
    ZeroCost,
    #[error(transparent)]
    Bucket(#[from] BucketError),
    /// The DC manager's newest lease says the limit was removed (`leasehold limits rm`).
    #[error("the limit {0:?} was removed: nothing is admitted for it (leasehold limits put defines it again)")]
    LimitRemoved(String),
}

#[derive(Default)]
struct Interval {
    errors: AtomicU64,
    upstream_429: AtomicU64,
}

/// Totals since start, for metrics.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Totals {
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub upstream_errors: u64,
    /// Upstream calls answered 429 (counted apart from `upstream_errors`).
    pub upstream_429: u64,
}

pub(crate) struct Shared {
    /// The limit this limiter serves (empty for a standalone limiter).
    limit: String,
    /// The limit's bucket, for the life of the limiter: each start of the limit's loop is a new
    /// holder, which revokes it first (no lease, no balance, as a new bucket). A plain `Arc`:
    /// the request path reads it with no shared write and no indirection to load.
    bucket: Arc<TokenBucket>,
    /// The pod's one clock (skewed as configured).
    pub clock: leasehold_process::clock::LeaseClock,
    interval: Interval,
    totals: Mutex<Totals>,
    pub queue: Mutex<WaitQueue>,
    pub wake: Notify,
    /// Requests offered, admitted and rejected so far, counted per thread (the request path's only writes
    /// besides the bucket's): reports take differences.
    counts: RequestCounts,
    /// Upstream answers reported so far: use too (they keep the limit from going idle), but not
    /// demand.
    upstream_reports: AtomicU64,
    /// False once the loop decided to give the lease back: a request then wakes `wanted`.
    serving: AtomicBool,
    pub wanted: Notify,
    /// The lease in force says the limit was removed: denials become [`AcquireError::LimitRemoved`].
    removed: AtomicBool,
    status: watch::Receiver<crate::PodStatus>,
}

/// Cheap to clone; every clone is the same pod.
#[derive(Clone)]
pub struct Limiter {
    pub(crate) shared: Arc<Shared>,
}

impl Limiter {
    /// A limiter over `bucket` alone (no loop: tests and embedders that apply leases themselves).
    /// A bucket made `TokenBucket::with_slices(SLICE_SLOTS)` (as the pod makes them) lets each
    /// thread spend a slice of the lease of its own; one made `TokenBucket::new()` does not.
    pub fn new(bucket: Arc<TokenBucket>, queue_capacity: usize, clock: leasehold_process::clock::LeaseClock) -> Self {
        Self::for_limit(String::new(), bucket, queue_capacity, clock, watch::channel(Default::default()).1)
    }

    pub(crate) fn for_limit(
        limit: String,
        bucket: Arc<TokenBucket>,
        queue_capacity: usize,
        clock: leasehold_process::clock::LeaseClock,
        status: watch::Receiver<crate::PodStatus>,
    ) -> Self {
        Limiter {
            shared: Arc::new(Shared {
                limit,
                bucket,
                clock,
                interval: Interval::default(),
                totals: Mutex::new(Totals::default()),
                queue: Mutex::new(WaitQueue::new(queue_capacity)),
                wake: Notify::new(),
                counts: RequestCounts::default(),
                upstream_reports: AtomicU64::new(0),
                serving: AtomicBool::new(true),
                wanted: Notify::new(),
                removed: AtomicBool::new(false),
                status,
            }),
        }
    }

    /// The limit this limiter serves.
    pub fn limit(&self) -> &str {
        &self.shared.limit
    }

    /// What the limit's loop knows about its lease (a watch: `changed()` wakes on every change).
    pub fn status(&self) -> watch::Receiver<crate::PodStatus> {
        self.shared.status.clone()
    }

    /// Count a request offered; if the loop gave the lease back, ask it to start again. The
    /// count is this thread's own (no fence): a request that races the loop's release may miss
    /// `serving` turning false, and the loop then sees its count at its next look, at most
    /// [`crate::driver`]'s use poll later.
    fn offered(&self) {
        self.shared.counts.offered();
        self.wake_if_released();
    }

    /// An upstream answer reported: use of the limit, not demand.
    fn upstream_reported(&self) {
        self.shared.upstream_reports.fetch_add(1, SeqCst);
        self.wake_if_released();
    }

    fn wake_if_released(&self) {
        if !self.shared.serving.load(Relaxed) {
            self.shared.wanted.notify_one();
        }
    }

    /// Uses so far (requests and upstream reports): the loop sees use as a change of this.
    pub(crate) fn uses(&self) -> u64 {
        self.shared.counts.offered_total().wrapping_add(self.shared.upstream_reports.load(SeqCst))
    }

    /// What the lease in force says: the limit was removed, or (again) not.
    pub(crate) fn set_removed(&self, removed: bool) {
        self.shared.removed.store(removed, SeqCst);
    }

    /// The loop gives the lease back (false) or holds one again (true).
    pub(crate) fn set_serving(&self, serving: bool) {
        self.shared.serving.store(serving, SeqCst);
    }

    /// The loop started a new holder (on the same bucket, revoked): waiters look again.
    pub(crate) fn new_holder(&self) {
        self.shared.wake.notify_one();
    }

    /// This pod's clock, in the bucket's and the lease's time base.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.shared.clock.now_ns()
    }

    /// The limit's bucket (every holder of the limit's loop uses it in turn).
    pub fn bucket(&self) -> Arc<TokenBucket> {
        self.shared.bucket.clone()
    }

    /// Take a permit now or be told when to retry. Never waits, never touches the network.
    /// Inlined into the caller: the slice path is small, the rest is out of line.
    #[inline(always)]
    pub fn try_acquire(&self, cost: u32) -> Result<Result<(), Denial>, AcquireError> {
        let now_ns = self.now_ns();
        // The thread's slice of the lease first: no shared write, one counter of its own.
        if let Some(slot) = crate::striped::thread_slot() {
            if cost != 0 && self.shared.bucket.try_spend_slice(slot, cost, now_ns) {
                self.shared.counts.granted_now_in(slot);
                return Ok(Ok(()));
            }
        }
        self.try_acquire_from_bucket(cost, now_ns)
    }

    /// `try_acquire` when the thread's slice did not grant: the bucket itself decides. Out of
    /// line, so the slice path keeps few registers to save.
    #[inline(never)]
    fn try_acquire_from_bucket(&self, cost: u32, now_ns: u64) -> Result<Result<(), Denial>, AcquireError> {
        if cost == 0 {
            return Err(AcquireError::ZeroCost);
        }
        let verdict = self.decide_at(cost, now_ns);
        // Counted after the decision, so the granted path writes one counter. It need not wake
        // the loop: a grant means the bucket holds a lease (one given back is revoked first).
        match &verdict {
            Ok(Ok(())) => self.shared.counts.granted_now(),
            Ok(denied) => {
                self.offered();
                self.count(denied);
            }
            Err(_) => self.offered(),
        }
        verdict
    }

    #[inline]
    fn decide(&self, cost: u32) -> Result<Result<(), Denial>, AcquireError> {
        self.decide_at(cost, self.now_ns())
    }

    #[inline]
    fn decide_at(&self, cost: u32, now_ns: u64) -> Result<Result<(), Denial>, AcquireError> {
        let decision = match self.shared.bucket.try_acquire(cost, now_ns) {
            Ok(Decision::Granted) => return Ok(Ok(())),
            Ok(denied) => Ok(denied),
            Err(e) => Err(AcquireError::from(e)),
        };
        // Only a denial looks further: the granted path stays one bucket operation.
        if self.shared.removed.load(Relaxed) {
            return Err(AcquireError::LimitRemoved(self.shared.limit.clone()));
        }
        Ok(match decision? {
            Decision::Granted => Ok(()),
            Decision::Denied { reason: DenyReason::Empty, retry_after_ns } => {
                Err(Denial::Empty { retry_after: Duration::from_nanos(retry_after_ns.unwrap_or(0)) })
            }
            Decision::Denied { .. } => Err(Denial::NoLease),
        })
    }

    pub(crate) fn count(&self, verdict: &Result<(), Denial>) {
        match verdict {
            Ok(()) => self.shared.counts.admitted(),
            Err(_) => self.shared.counts.rejected(),
        }
    }

    /// Wait up to `max_wait` for a permit. Waiters are served by priority, then in arrival
    /// order; a full queue or a passed deadline is a denial, never an unbounded wait.
    pub async fn acquire(
        &self,
        cost: u32,
        priority: Priority,
        max_wait: Duration,
    ) -> Result<Result<(), Denial>, AcquireError> {
        if cost == 0 {
            return Err(AcquireError::ZeroCost);
        }
        self.offered();
        let rx = {
            let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            // Jumping the queue would starve earlier waiters: only try directly when none wait.
            if q.is_empty() {
                let verdict = self.decide(cost)?;
                if verdict.is_ok() || max_wait.is_zero() {
                    drop(q);
                    self.count(&verdict);
                    return Ok(verdict);
                }
            }
            let (tx, rx) = oneshot::channel();
            let deadline_ns = self.now_ns().saturating_add(max_wait.as_nanos() as u64);
            if let Err(w) = q.push(priority, Waiter { cost, deadline_ns, reply: tx }) {
                drop(q);
                let _ = w.reply.send(Err(Denial::QueueFull));
                let v = Err(Denial::QueueFull);
                self.count(&v);
                return Ok(v);
            }
            rx
        };
        self.shared.wake.notify_one();
        // The dispatcher always answers; a dropped sender means it stopped (process ending).
        let verdict = rx.await.unwrap_or(Err(Denial::NoLease));
        self.count(&verdict);
        Ok(verdict)
    }

    /// `acquire`, and on denial call `fallback` (e.g. serve from cache) instead of failing.
    pub async fn acquire_or_else<T>(
        &self,
        cost: u32,
        priority: Priority,
        max_wait: Duration,
        fallback: impl FnOnce(Denial) -> T,
    ) -> Result<Result<(), T>, AcquireError> {
        Ok(self.acquire(cost, priority, max_wait).await?.map_err(fallback))
    }

    /// Requests decided elsewhere on this limit's lease (Envoy, lent the lease over RLQS): they
    /// are the limit's demand in the pod's reports, as if offered here.
    pub fn count_decided_elsewhere(&self, admitted: u64, rejected: u64) {
        self.shared.counts.decided_elsewhere(admitted, rejected);
        self.wake_if_released();
    }

    /// Tell the pod a call to the upstream failed: a high error ratio marks the pod unhealthy
    /// at its DC manager, which then stops giving it quota.
    pub fn record_upstream_error(&self) {
        self.upstream_reported();
        self.shared.interval.errors.fetch_add(1, Relaxed);
    }

    /// Tell the pod how the upstream answered a call: a 429 (Too Many Requests) is counted apart
    /// (`PodReport.upstream_429`: an adaptive limit lowers its effective R on them, and they do
    /// not make the pod unhealthy), a 5xx as [`record_upstream_error`](Self::record_upstream_error);
    /// anything else is a success and counts nothing. Returns whether the status was counted.
    pub fn record_upstream_status(&self, status: u16) -> bool {
        match status {
            429 => {
                self.upstream_reported();
                self.shared.interval.upstream_429.fetch_add(1, Relaxed);
                true
            }
            500..=599 => {
                self.record_upstream_error();
                true
            }
            _ => false,
        }
    }

    /// Requests waiting for a permit now.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Counters since the last call (one report interval), folded into the totals.
    pub fn take_interval(&self) -> IntervalCounters {
        let i = &self.shared.interval;
        let queued = self.queued() as u64;
        let mut t = self.shared.totals.lock().unwrap_or_else(|p| p.into_inner());
        // The totals hold every count taken so far: the interval's are the counts since.
        let c = IntervalCounters {
            offered: self.shared.counts.offered_total().saturating_sub(t.offered),
            admitted: self.shared.counts.admitted_total().saturating_sub(t.admitted),
            rejected: self.shared.counts.rejected_total().saturating_sub(t.rejected),
            queued,
            errors: i.errors.swap(0, Relaxed),
            upstream_429: i.upstream_429.swap(0, Relaxed),
        };
        t.offered += c.offered;
        t.admitted += c.admitted;
        t.rejected += c.rejected;
        t.upstream_errors += c.errors;
        t.upstream_429 += c.upstream_429;
        c
    }

    pub fn totals(&self) -> Totals {
        *self.shared.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serve waiters until the process ends. Spawned once per limit by [`crate::Pod`].
    pub(crate) async fn dispatch(self) {
        loop {
            let wake_at_ns = {
                let bucket = self.bucket();
                let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
                q.serve(&bucket, self.now_ns())
            };
            let now = self.now_ns();
            let sleep = wake_at_ns.map_or(Duration::from_secs(3600), |t| Duration::from_nanos(t.saturating_sub(now)));
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tokio::time::sleep(sleep.max(Duration::from_micros(200))) => {}
            }
        }
    }
}
