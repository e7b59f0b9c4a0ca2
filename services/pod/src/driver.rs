//! One limit's control loop: report demand (the heartbeat), apply leases, give the lease back when
//! the limit is idle or the pod drains. Every decision is [`PodCore`]'s; this file only moves
//! messages and reads the clock. Messages go through the pod's [`Link`](crate::link::Link), which
//! batches every limit's into one message per period (protocol v2).
//!
//! Each start of the loop is a new holder: a fresh random incarnation and `seq` from 1. The DC
//! manager treats (pod, incarnation) as the holder of a limit's leases and ignores a returned
//! holder's reports as stale for about 20 s, so a loop restarted after an idle release must not
//! reuse the incarnation it returned; a lease answering the old holder's report is refused.

use crate::limiter::Limiter;
use crate::link::{FromLink, ToLink};
use leasehold_core::pod::{AppliedLease, PodConfig, PodCore};
use leasehold_core::quiet_reports::QuietReports;
use leasehold_core::wire::PodLease;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

/// How often, just after a limit was given back when idle, its loop looks for a use it was not
/// woken for (a request racing the release): such a request's limit starts again at most this
/// much later. The race exists only at the release, so the looks stop after [`USE_POLLS`].
const USE_POLL: Duration = Duration::from_millis(50);
const USE_POLLS: u32 = 20;

/// What the pod knows about one limit's lease, for the agent's status page, headers and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodStatus {
    pub pod: String,
    pub limit: String,
    /// The holder serving the limit now (a new one at every start of its loop; 0 before the first).
    pub incarnation: u64,
    /// The loop holds (or is asking for) a lease; false once given back (idle or drained).
    pub serving: bool,
    pub lease: Option<AppliedLease>,
    pub leases_applied: u64,
    pub leases_refused: u64,
    pub messages_malformed: u64,
    pub reports_sent: u64,
    pub publish_failures: u64,
    /// Milliseconds from a report to the lease answering it (last seen).
    pub renewal_latency_ms: Option<f64>,
    /// Pod clock when the last lease was applied.
    pub last_renewal_ns: Option<u64>,
    /// Times the lease was given back because the limit was idle.
    pub idle_releases: u64,
    pub drained: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("the pod's link to its DC manager has stopped")]
    LinkGone,
}

/// Why a holder's loop ended (its lease was given back either way).
enum Ended {
    /// The pod drains: acknowledged or not.
    Drained(bool),
    /// Unused for `idle_release`: the request count when the loop stopped admitting.
    Idle(u64),
}

pub(crate) struct Driver {
    pub to_link: mpsc::UnboundedSender<ToLink>,
    /// This limit's leases, acks and publish results from the link.
    pub from_link: mpsc::UnboundedReceiver<FromLink>,
    /// The link's report ticks.
    pub ticks: watch::Receiver<u64>,
    /// The limit's holder config; the incarnation is drawn anew at every start.
    pub config: PodConfig,
    pub limiter: Limiter,
    pub drain_timeout: Duration,
    /// See [`crate::settings::PodSettings::max_quiet_report_ms`].
    pub max_quiet_report_ms: u64,
    pub report_interval_ms: u64,
    /// The lease is lent out (to Envoy, over RLQS): never returned nor confirmed (reports carry
    /// no `lease_in_use`), since pieces of it may be in use until they expire; the DC manager
    /// counts every lease until it expires.
    pub lent: bool,
    /// None: never given back when idle (the default limit, or `idle_release_ms = 0`).
    pub idle_release: Option<Duration>,
    pub status: watch::Sender<PodStatus>,
}

impl Driver {
    fn send(&self, msg: ToLink) -> Result<(), DriverError> {
        self.to_link.send(msg).map_err(|_| DriverError::LinkGone)
    }

    /// Serve the limit until the pod drains: hold a lease while the limit is used, give it back
    /// when idle, start again (as a new holder) at the next request. True: every return acked.
    pub(crate) async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<bool, DriverError> {
        loop {
            // Random per start, never from a clock: see the module's comment.
            self.config.incarnation = uuid::Uuid::new_v4().as_u64_pair().0;
            let mut core = PodCore::with_bucket(self.config.clone(), self.limiter.now_ns(), self.limiter.bucket());
            if self.lent {
                // Envoy may spend what was cut from an older lease until it expires: the DC
                // manager must count every lease until then (docs/ENVOY.md, "RLQS").
                core.never_confirm();
            }
            self.limiter.new_holder();
            self.limiter.set_serving(true);
            let incarnation = self.config.incarnation;
            self.status.send_modify(|s| {
                s.incarnation = incarnation;
                s.serving = true;
            });
            match self.hold(core, &mut shutdown).await? {
                Ended::Drained(acked) => return Ok(acked),
                Ended::Idle(released_at) => {
                    self.status.send_modify(|s| s.idle_releases += 1);
                    if !self.wait_for_use(released_at, &mut shutdown).await {
                        return Ok(true); // drained while holding nothing: nothing to return
                    }
                }
            }
        }
    }

    /// Give the lease back: stop spending now, return it, wait for the acknowledgement (true)
    /// or the drain timeout (false).
    async fn give_back(&mut self, core: &mut PodCore) -> Result<bool, DriverError> {
        let drain_timeout = self.drain_timeout;
        let drain = async {
            loop {
                let ret = core.drain();
                self.limiter.shared.wake.notify_one();
                self.send(ToLink::Return(ret))?;
                // Send it again after 250 ms without its ack.
                let resend = tokio::time::sleep(Duration::from_millis(250));
                tokio::pin!(resend);
                loop {
                    let msg = tokio::select! {
                        _ = &mut resend => break,
                        msg = self.from_link.recv() => msg.ok_or(DriverError::LinkGone)?,
                    };
                    match msg {
                        FromLink::Ack(a) if core.on_return_ack(&a) => return Ok(()),
                        FromLink::Ack(_) | FromLink::Lease(_) => {}
                        other => self.count(other),
                    }
                }
            }
        };
        match tokio::time::timeout(drain_timeout, drain).await {
            Ok(r) => r.map(|()| true),
            Err(_) => Ok(false),
        }
    }

    /// Wait for a request after an idle release (true) or for the drain (false).
    async fn wait_for_use(&self, released_at: u64, shutdown: &mut watch::Receiver<bool>) -> bool {
        let mut polls_left = USE_POLLS;
        loop {
            // A request wakes `wanted` when it finds `serving` false. Its count is its thread's
            // own write, made without a fence, so one racing the release may both miss `serving`
            // turning false and be missed by `released_at`'s check: the looks below catch it.
            if *shutdown.borrow() {
                return false;
            }
            if self.limiter.uses() != released_at {
                return true;
            }
            tokio::select! {
                _ = shutdown.changed() => {}
                _ = self.limiter.shared.wanted.notified() => {}
                _ = tokio::time::sleep(USE_POLL), if polls_left > 0 => polls_left -= 1,
            }
        }
    }

    async fn hold(&mut self, mut core: PodCore, shutdown: &mut watch::Receiver<bool>) -> Result<Ended, DriverError> {
        let limit = self.config.limit.clone();
        self.send(ToLink::Holding { limit: limit.clone(), holding: true })?;
        // The last reports sent: (seq, when, on the pod's clock in ns).
        let mut sent: VecDeque<(u64, u64)> = VecDeque::with_capacity(64);
        let (mut seen_uses, mut used_at_ns) = (self.limiter.uses(), self.limiter.now_ns());
        self.ticks.mark_unchanged();
        // What reached the limit while it was not held belongs to earlier holders.
        while let Ok(msg) = self.from_link.try_recv() {
            self.count(msg);
        }
        // A new holder asks for its lease at once, not at the next tick.
        let (mut due, mut first) = (true, true);
        let mut quiet = QuietReports::new(self.max_quiet_report_ms, self.report_interval_ms);
        info!(pod = %self.config.pod, %limit, "limit served");
        let ended = loop {
            if std::mem::take(&mut due) {
                let now = self.limiter.now_ns();
                if self.limiter.uses() != seen_uses || self.limiter.queued() > 0 {
                    (seen_uses, used_at_ns) = (self.limiter.uses(), now);
                } else if self.idle_release.is_some_and(|d| now.saturating_sub(used_at_ns) >= d.as_nanos() as u64) {
                    // Stop admitting first, then look once more: a request that raced the
                    // decision either shows here or finds `serving` false and restarts us.
                    self.limiter.set_serving(false);
                    if self.limiter.uses() == seen_uses {
                        break Ended::Idle(seen_uses);
                    }
                    self.limiter.set_serving(true);
                    (seen_uses, used_at_ns) = (self.limiter.uses(), now);
                }
                let c = self.limiter.take_interval();
                match quiet.tick(&mut core, now, c, true) {
                    Some(report) => {
                        if sent.len() == 64 {
                            sent.pop_front();
                        }
                        sent.push_back((report.seq, now));
                        self.send(ToLink::Report { report, at_once: std::mem::take(&mut first) })?;
                    }
                    None => self.send(ToLink::Quiet { limit: limit.clone() })?,
                }
            }
            tokio::select! {
                _ = shutdown.changed() => break Ended::Drained(false),
                changed = self.ticks.changed() => {
                    changed.map_err(|_| DriverError::LinkGone)?;
                    due = true;
                }
                msg = self.from_link.recv() => match msg.ok_or(DriverError::LinkGone)? {
                    FromLink::Lease(l) => self.on_lease(&mut core, &l, &sent),
                    FromLink::Ack(_) => {} // an earlier holder's: this one returned nothing yet
                    other => {
                        if matches!(other, FromLink::Published(false)) {
                            quiet.resend_next();
                        }
                        self.count(other)
                    }
                },
            }
        };
        self.send(ToLink::Holding { limit, holding: false })?;
        let acked = if self.lent {
            core.drain();
            false
        } else {
            self.give_back(&mut core).await?
        };
        let drained = matches!(ended, Ended::Drained(_));
        self.status.send_modify(|s| {
            s.serving = false;
            s.lease = None;
            s.drained = drained && acked;
        });
        let (pod, limit) = (&self.config.pod, &self.config.limit);
        if self.lent {
            info!(%pod, %limit, "lent to Envoy: the lease is not returned, it expires");
        } else if acked {
            info!(%pod, %limit, idle = !drained, "lease returned and acknowledged");
        } else {
            warn!(%pod, %limit, "return not acknowledged in time; the lease will expire instead");
        }
        Ok(match ended {
            Ended::Drained(_) => Ended::Drained(acked),
            idle => idle,
        })
    }

    /// The link's word on a report or a batch.
    fn count(&self, msg: FromLink) {
        self.status.send_modify(|s| match msg {
            FromLink::Published(true) => s.reports_sent += 1,
            FromLink::Published(false) => s.publish_failures += 1,
            FromLink::Malformed => s.messages_malformed += 1,
            FromLink::Lease(_) | FromLink::Ack(_) => {}
        });
    }

    fn on_lease(&mut self, core: &mut PodCore, lease: &PodLease, sent: &VecDeque<(u64, u64)>) {
        let now = self.limiter.now_ns();
        match core.on_lease(lease, now) {
            Ok(()) => {
                self.limiter.set_removed(lease.limit_removed);
                self.limiter.shared.wake.notify_one();
                let applied = core.applied(now).cloned();
                debug!(
                    version = ?lease.version,
                    continues = ?lease.continues,
                    quota = ?applied.as_ref().map(|a| a.quota),
                    left_ms = applied.as_ref().map(|a| a.expires_at_ns.saturating_sub(now) / 1_000_000),
                    "lease applied"
                );
                let latency = sent
                    .iter()
                    .find(|(seq, _)| *seq == lease.basis_seq)
                    .map(|(_, t)| now.saturating_sub(*t) as f64 / 1e6);
                self.status.send_modify(|s| {
                    s.lease = applied;
                    s.leases_applied += 1;
                    s.renewal_latency_ms = latency.or(s.renewal_latency_ms);
                    s.last_renewal_ns = Some(now);
                });
            }
            Err(e) => {
                debug!(cause = %e, version = ?lease.version, "lease refused");
                self.status.send_modify(|s| s.leases_refused += 1);
            }
        }
    }
}
