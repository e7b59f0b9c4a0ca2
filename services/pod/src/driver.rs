//! The pod's control loop: report demand (the heartbeat), apply leases, drain on shutdown.
//! Every decision is [`PodCore`]'s; this file only moves messages and reads the clock.

use crate::limiter::Limiter;
use futures::StreamExt;
use leasehold_shared::pod::{AppliedLease, PodCore};
use leasehold_shared::subjects::{self, PodChannel};
use leasehold_shared::wire::{decode, encode, PodLease, ReturnAck};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// What the pod knows about its lease, for the agent's status page, headers and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodStatus {
    pub pod: String,
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
    pub drained: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot subscribe to {subject}: {reason}")]
    Subscribe { subject: String, reason: String },
    #[error("bad subject: {0}")]
    Subject(String),
}

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

async fn publish(client: &async_nats::Client, subject: String, payload: Vec<u8>) -> bool {
    // While disconnected, publishes buffer and may block: never let that stall the loop.
    matches!(tokio::time::timeout(PUBLISH_TIMEOUT, client.publish(subject, payload.into())).await, Ok(Ok(())))
}

pub(crate) struct Driver {
    pub client: async_nats::Client,
    pub core: PodCore,
    pub limiter: Limiter,
    pub report_interval: Duration,
    pub drain_timeout: Duration,
    pub status: watch::Sender<PodStatus>,
}

impl Driver {
    fn subject(&self, ch: PodChannel) -> Result<String, DriverError> {
        let c = self.core.config();
        subjects::pod(&c.limit, &c.dc, &c.pod, ch).map_err(|e| DriverError::Subject(e.to_string()))
    }

    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<bool, DriverError> {
        let lease_subject = self.subject(PodChannel::Lease)?;
        let ack_subject = self.subject(PodChannel::Ack)?;
        let report_subject = self.subject(PodChannel::Report)?;
        let return_subject = self.subject(PodChannel::Return)?;
        let sub = |s: String| {
            let client = self.client.clone();
            async move {
                client
                    .subscribe(s.clone())
                    .await
                    .map_err(|e| DriverError::Subscribe { subject: s, reason: e.to_string() })
            }
        };
        let mut leases = sub(lease_subject).await?;
        let mut acks = sub(ack_subject).await?;
        let mut tick = tokio::time::interval(self.report_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The last reports sent: (seq, when, on the pod's clock in ns).
        let mut sent: VecDeque<(u64, u64)> = VecDeque::with_capacity(64);
        info!(pod = %self.core.config().pod, "pod started");
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tick.tick() => {
                    let c = self.limiter.take_interval();
                    let report = self.core.report(self.limiter.now_ns(), c, true);
                    if sent.len() == 64 {
                        sent.pop_front();
                    }
                    sent.push_back((report.seq, self.limiter.now_ns()));
                    let ok = publish(&self.client, report_subject.clone(), encode(&report)).await;
                    self.status.send_modify(|s| if ok { s.reports_sent += 1 } else { s.publish_failures += 1 });
                }
                Some(msg) = leases.next() => self.on_lease(&msg.payload, &sent),
            }
        }
        // Graceful drain: stop spending now, return the lease, wait for the acknowledgement.
        let drain = async {
            loop {
                let ret = self.core.drain();
                self.limiter.shared.wake.notify_one();
                publish(&self.client, return_subject.clone(), encode(&ret)).await;
                let ack = tokio::time::timeout(Duration::from_millis(250), acks.next()).await;
                if let Ok(Some(msg)) = ack {
                    if decode::<ReturnAck>(&msg.payload).is_ok_and(|a| self.core.on_return_ack(&a)) {
                        return;
                    }
                }
            }
        };
        if tokio::time::timeout(self.drain_timeout, drain).await.is_ok() {
            info!(pod = %self.core.config().pod, "lease returned and acknowledged");
            self.status.send_modify(|s| {
                s.drained = true;
                s.lease = None;
            });
            return Ok(true);
        }
        warn!(pod = %self.core.config().pod, "drain not acknowledged in time; the lease will expire instead");
        Ok(false)
    }

    fn on_lease(&mut self, payload: &[u8], sent: &VecDeque<(u64, u64)>) {
        let lease = match decode::<PodLease>(payload) {
            Ok(l) => l,
            Err(e) => {
                debug!(cause = %e, "malformed lease message");
                return self.status.send_modify(|s| s.messages_malformed += 1);
            }
        };
        let now = self.limiter.now_ns();
        match self.core.on_lease(&lease, now) {
            Ok(()) => {
                self.limiter.shared.wake.notify_one();
                let applied = self.core.applied(now).cloned();
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
