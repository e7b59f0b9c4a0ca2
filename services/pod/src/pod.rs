//! One pod process serving any number of limits: a [`Limiter`] and a control loop per limit,
//! made on first use. The default limit (the settings' `limit`) is served from the start and
//! kept; any other is given back after `idle_release_ms` unused and served again, as a new
//! holder, at its next request.

use crate::driver::{self, DriverError, PodStatus};
use crate::limiter::Limiter;
use crate::link::{Link, ToLink};
use crate::settings::PodSettings;
use leasehold_core::bucket::TokenBucket;
use leasehold_core::pod::PodConfig;
use leasehold_process::clock::LeaseClock;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Most limits one pod serves at once (a bound on loops and memory, whatever callers ask for).
pub const MAX_LIMITS: usize = 1_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error("{0}")]
    BadName(String),
    #[error("this pod already serves {MAX_LIMITS} limits")]
    TooMany,
    #[error("the pod is draining")]
    Draining,
    /// The agent lends the limit's lease to Envoy (RLQS): taking from it here would spend it twice.
    #[error("the limit {0:?} is lent to Envoy by this agent (envoy_rlqs_limits): it is not taken here")]
    LentToEnvoy(String),
    #[error("the limit {0:?} is already taken from by this agent: it cannot also be lent to Envoy")]
    AlreadyServed(String),
}

struct Served {
    limiter: Limiter,
    /// Never given back while idle (the default limit, and those [`Pod::keep`] serves).
    kept: bool,
    /// Lent to Envoy ([`Pod::lend`]): nothing else in this process takes from it.
    lent: bool,
    task: JoinHandle<Result<bool, DriverError>>,
}

struct Inner {
    settings: PodSettings,
    /// The pod's one link to its DC manager: every limit's messages, batched.
    to_link: mpsc::UnboundedSender<ToLink>,
    ticks: watch::Receiver<u64>,
    link: JoinHandle<()>,
    clock: LeaseClock,
    limits: Mutex<BTreeMap<String, Served>>,
    /// The drain signal: every loop returns its lease.
    shutdown: watch::Sender<bool>,
    /// Crashed: no new limits, and no loop may return anything (never the drain signal, which
    /// a loop could act on before it is aborted).
    crashed: std::sync::atomic::AtomicBool,
    /// The runtime the pod started on: every limit's loops run there, whichever thread asks for
    /// the limit first (the agent answers Envoy on threads of their own).
    runtime: tokio::runtime::Handle,
}

/// A running pod: its limiters, their status, and the handle to drain it. Cheap to clone; every
/// clone is the same pod.
#[derive(Clone)]
pub struct Pod {
    pub id: String,
    inner: Arc<Inner>,
}

impl Pod {
    /// Start the pod on the current runtime, and the default limit's loop if one is configured.
    pub fn start(client: async_nats::Client, settings: &PodSettings) -> Pod {
        let id = settings.pod_id();
        // The pod's one clock (skewed as configured): every core, bucket and loop reads it.
        let clock = LeaseClock::start_skewed(settings.clock_offset_ms as i64, settings.clock_drift_ppm);
        let settings = PodSettings { pod_id: Some(id.clone()), ..settings.clone() };
        let (to_link, link_rx) = mpsc::unbounded_channel();
        let (ticks_tx, ticks) = watch::channel(0);
        let link = Link {
            client,
            dc: settings.dc.clone(),
            pod: id.clone(),
            report_interval: Duration::from_millis(settings.report_interval_ms),
            ticks: ticks_tx,
        };
        let link = tokio::spawn(link.run(link_rx));
        let inner = Inner {
            to_link,
            ticks,
            link,
            settings,
            clock,
            limits: Mutex::new(BTreeMap::new()),
            shutdown: watch::channel(false).0,
            crashed: std::sync::atomic::AtomicBool::new(false),
            runtime: tokio::runtime::Handle::current(),
        };
        let pod = Pod { id, inner: Arc::new(inner) };
        if let Some(limit) = pod.default_limit() {
            if let Err(e) = pod.limiter(limit) {
                // Settings are validated at load; a caller that skipped it gets a pod without it.
                tracing::error!(cause = %e, "the default limit cannot be served");
            }
        }
        pod
    }

    /// The limit requests use when they name none.
    pub fn default_limit(&self) -> Option<&str> {
        self.inner.settings.limit.as_deref()
    }

    /// The limiter of `limit`, its loop started (and a report sent at once) on first use.
    pub fn limiter(&self, limit: &str) -> Result<Limiter, LimitError> {
        self.serve(limit, false, false)
    }

    /// Like [`limiter`](Self::limiter), but the limit is kept: never given back while idle, and
    /// `/readyz` waits for its lease. A limit already served as it was stays as it is.
    pub fn keep(&self, limit: &str) -> Result<Limiter, LimitError> {
        self.serve(limit, true, false)
    }

    /// The limit is kept and its lease lent out whole (to Envoy, over RLQS): its limiter only
    /// holds the lease and carries the demand; [`limiter`](Self::limiter) and
    /// [`keep`](Self::keep) refuse it from then on, and a limit already served is refused here.
    pub fn lend(&self, limit: &str) -> Result<Limiter, LimitError> {
        self.serve(limit, true, true)
    }

    /// The limiters of the kept limits (the default one, and those [`keep`](Self::keep) serves).
    pub fn kept_limits(&self) -> Vec<Limiter> {
        let limits = self.inner.limits.lock().unwrap_or_else(|p| p.into_inner());
        limits.values().filter(|s| s.kept).map(|s| s.limiter.clone()).collect()
    }

    fn serve(&self, limit: &str, keep: bool, lend: bool) -> Result<Limiter, LimitError> {
        let mut limits = self.inner.limits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = limits.get(limit) {
            return match (s.lent, lend) {
                (false, true) => Err(LimitError::AlreadyServed(limit.into())),
                (true, false) => Err(LimitError::LentToEnvoy(limit.into())),
                _ => Ok(s.limiter.clone()),
            };
        }
        leasehold_core::wire::check_id("limit", limit).map_err(|e| LimitError::BadName(e.to_string()))?;
        // Subscribed before the check: a drain signalled after it still wakes this limit's loop
        // (subscribed later, a drain signalled in between was never seen, and the drain waited
        // for the loop forever).
        let shutdown = self.inner.shutdown.subscribe();
        if *shutdown.borrow() || self.inner.crashed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(LimitError::Draining);
        }
        if limits.len() >= MAX_LIMITS {
            return Err(LimitError::TooMany);
        }
        let s = &self.inner.settings;
        let (status_tx, status) =
            watch::channel(PodStatus { pod: self.id.clone(), limit: limit.to_string(), ..Default::default() });
        let limiter = Limiter::for_limit(
            limit.into(),
            Arc::new(TokenBucket::with_slices(crate::SLICE_SLOTS)),
            s.queue_capacity,
            self.inner.clock,
            status,
        );
        self.inner.runtime.spawn(limiter.clone().dispatch());
        let kept = keep || self.default_limit() == Some(limit);
        let pinned = kept || s.idle_release_ms == 0;
        let (from_tx, from_link) = mpsc::unbounded_channel();
        let registered = self.inner.to_link.send(ToLink::Register { limit: limit.to_string(), from_link: from_tx });
        if registered.is_err() {
            return Err(LimitError::Draining); // the link is gone: the pod crashed
        }
        let d = driver::Driver {
            to_link: self.inner.to_link.clone(),
            from_link,
            ticks: self.inner.ticks.clone(),
            config: PodConfig {
                limit: limit.into(),
                dc: s.dc.clone(),
                pod: self.id.clone(),
                incarnation: 0, // drawn at every start of the loop
                weight: s.weight,
                bugs: Default::default(),
            },
            limiter: limiter.clone(),
            drain_timeout: Duration::from_millis(s.drain_timeout_ms),
            max_quiet_report_ms: s.max_quiet_report_ms,
            report_interval_ms: s.report_interval_ms,
            lent: lend,
            idle_release: (!pinned).then(|| Duration::from_millis(s.idle_release_ms)),
            status: status_tx,
        };
        let task = self.inner.runtime.spawn(d.run(shutdown));
        limits.insert(limit.to_string(), Served { limiter: limiter.clone(), kept, lent: lend, task });
        Ok(limiter)
    }

    /// The default limit's limiter, if one is configured.
    pub fn default_limiter(&self) -> Option<Limiter> {
        self.default_limit().and_then(|l| self.limiter(l).ok())
    }

    /// The limiter of a limit already served (none: never asked for), without starting one.
    pub fn served(&self, limit: &str) -> Option<Limiter> {
        self.inner.limits.lock().unwrap_or_else(|p| p.into_inner()).get(limit).map(|s| s.limiter.clone())
    }

    /// Every limit asked for so far (also those given back while idle), by name.
    pub fn limiters(&self) -> Vec<Limiter> {
        self.inner.limits.lock().unwrap_or_else(|p| p.into_inner()).values().map(|s| s.limiter.clone()).collect()
    }

    /// Draining (or crashed): it admits nothing new and gives its leases back.
    pub fn draining(&self) -> bool {
        *self.inner.shutdown.borrow() || self.inner.crashed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// This pod's clock, in its buckets' and leases' time base.
    pub fn now_ns(&self) -> u64 {
        self.inner.clock.now_ns()
    }

    /// Graceful drain: stop admitting, return every limit's lease, wait for the DC manager's
    /// acks. True when every return was acknowledged (false: those leases simply expire).
    pub async fn drain(&self) -> Result<bool, DriverError> {
        let _ = self.inner.shutdown.send(true);
        let tasks: Vec<_> = {
            let mut limits = self.inner.limits.lock().unwrap_or_else(|p| p.into_inner());
            limits.values_mut().map(|s| std::mem::replace(&mut s.task, tokio::spawn(async { Ok(true) }))).collect()
        };
        let mut all_acked = true;
        for t in tasks {
            all_acked &= t.await.unwrap_or(Ok(false))?;
        }
        Ok(all_acked)
    }

    /// Vanish as a crash would: no return, the leases run out at the DC manager.
    pub fn crash(&self) {
        // Not the drain signal: a loop woken by it could return its lease before it is aborted
        // (a crash that returned its lease let a test see the share reclaimed early).
        self.inner.crashed.store(true, std::sync::atomic::Ordering::SeqCst); // no new limits
        self.inner.link.abort(); // nothing handed over is sent any more
        for s in self.inner.limits.lock().unwrap_or_else(|p| p.into_inner()).values() {
            s.task.abort();
            s.limiter.bucket().revoke();
        }
    }
}
