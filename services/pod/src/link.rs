//! The pod's one link to its DC manager (protocol v2): every limit's messages travel in batches
//! on the pod's own subjects, so a pod's messages don't multiply with the limits it serves.
//!
//! * The link owns the report period: every tick it wakes each limit's loop, collects their
//!   reports (until every holder answered, or half a period) and publishes one [`PodReports`].
//!   A report later than that waits for the next batch (a heartbeat a period late is still
//!   far inside the manager's timeout). A new holder's first report does not wait for a tick:
//!   it goes at once, with whatever is waiting.
//! * Returns are sent as soon as they are handed over, together with any handed over with them.
//! * One subscription each for leases and acks: the batch's items go to their limits' loops.
//!
//! A batch never names a limit twice: a second report of a limit already waiting sends the
//! waiting batch first.

use futures::StreamExt;
use leasehold_core::subjects::{self, PodChannel};
use leasehold_core::wire::{
    decode, encode_batches, LeaseReturn, PodLease, PodLeases, PodReport, ReturnAck, ReturnAcks,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

/// What a limit's loop hands the link.
pub(crate) enum ToLink {
    /// Where the limit's leases and acks go (once per limit, kept across holders).
    Register {
        limit: String,
        from_link: mpsc::UnboundedSender<FromLink>,
    },
    /// The limit's holder reports on every tick from now (true) or no longer (false).
    Holding {
        limit: String,
        holding: bool,
    },
    /// A report; `at_once`: a new holder's first (sent now, not with the tick's batch).
    Report {
        report: PodReport,
        at_once: bool,
    },
    /// The limit's holder has nothing new this tick (`QuietReports`): it answered, with no report.
    Quiet {
        limit: String,
    },
    Return(LeaseReturn),
}

/// What the link hands a limit's loop.
pub(crate) enum FromLink {
    Lease(PodLease),
    Ack(ReturnAck),
    /// A report of this limit was published (true) or could not be (false).
    Published(bool),
    /// A batch addressed to the pod could not be read (every limit hears of it).
    Malformed,
}

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) struct Link {
    pub client: async_nats::Client,
    pub dc: String,
    pub pod: String,
    pub report_interval: Duration,
    /// Ticks for the loops: each change asks every holder for its report.
    pub ticks: watch::Sender<u64>,
}

/// The reports collected after a tick: sent when every holder answered or at `deadline`.
struct Collecting {
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    expected: usize,
    /// The limits that answered this tick (a loop answering twice counts once).
    received: BTreeSet<String>,
}

impl Link {
    /// Run until every sender of `rx` is gone (the pod is dropped) — or forever, when aborted.
    pub(crate) async fn run(self, mut rx: mpsc::UnboundedReceiver<ToLink>) {
        let subject = |ch| subjects::pod(&self.dc, &self.pod, ch).expect("validated at start");
        let mut leases = self.subscribe(subject(PodChannel::Lease)).await;
        let mut acks = self.subscribe(subject(PodChannel::Ack)).await;
        let (report_subject, return_subject) = (subject(PodChannel::Report), subject(PodChannel::Return));
        let mut routes: BTreeMap<String, mpsc::UnboundedSender<FromLink>> = BTreeMap::new();
        let mut holding: BTreeSet<String> = BTreeSet::new();
        let mut reports: BTreeMap<String, PodReport> = BTreeMap::new();
        let mut returns: BTreeMap<String, LeaseReturn> = BTreeMap::new();
        let mut collecting: Option<Collecting> = None;
        let mut tick = tokio::time::interval(self.report_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // a new holder reports at once; ticks are for the ones already held
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    self.ticks.send_modify(|n| *n += 1);
                    let deadline = Box::pin(tokio::time::sleep(self.report_interval / 2));
                    collecting = Some(Collecting { deadline, expected: holding.len(), received: BTreeSet::new() });
                }
                msg = rx.recv() => {
                    let Some(first) = msg else { return };
                    // Take everything handed over with it, so simultaneous messages share a batch.
                    let mut next = Some(first);
                    let mut now_due = false;
                    while let Some(m) = next {
                        match m {
                            ToLink::Register { limit, from_link } => { routes.insert(limit, from_link); }
                            ToLink::Holding { limit, holding: true } => { holding.insert(limit); }
                            ToLink::Holding { limit, holding: false } => { holding.remove(&limit); }
                            ToLink::Report { report: r, at_once } => {
                                if reports.contains_key(&r.limit) {
                                    self.send_reports(&report_subject, &mut reports, &routes).await;
                                }
                                match collecting.as_mut() {
                                    Some(c) if !at_once => {
                                        c.received.insert(r.limit.clone());
                                    }
                                    _ => {}
                                }
                                now_due |= at_once;
                                reports.insert(r.limit.clone(), r);
                            }
                            ToLink::Quiet { limit } => {
                                if let Some(c) = collecting.as_mut() {
                                    c.received.insert(limit);
                                }
                            }
                            ToLink::Return(r) => {
                                if returns.contains_key(&r.limit) {
                                    self.send_returns(&return_subject, &mut returns).await;
                                }
                                returns.insert(r.limit.clone(), r);
                            }
                        }
                        next = rx.try_recv().ok();
                    }
                    self.send_returns(&return_subject, &mut returns).await;
                    if now_due {
                        self.send_reports(&report_subject, &mut reports, &routes).await;
                    }
                }
                Some(msg) = leases.next() => match decode::<PodLeases>(&msg.payload) {
                    Ok(b) if b.dc == self.dc && b.pod == self.pod => {
                        for l in b.leases {
                            if let Some(route) = routes.get(l.limit.as_str()) {
                                let _ = route.send(FromLink::Lease(l));
                            }
                        }
                    }
                    other => self.malformed(&routes, "leases", other.err()),
                },
                Some(msg) = acks.next() => match decode::<ReturnAcks>(&msg.payload) {
                    Ok(b) if b.dc == self.dc && b.pod == self.pod => {
                        for a in b.acks {
                            if let Some(route) = routes.get(&a.limit) {
                                let _ = route.send(FromLink::Ack(a));
                            }
                        }
                    }
                    other => self.malformed(&routes, "acks", other.err()),
                },
                _ = until_deadline(&mut collecting) => {
                    collecting = None;
                    self.send_reports(&report_subject, &mut reports, &routes).await;
                }
            }
            // After a tick, the batch goes when every holder answered.
            if collecting.as_ref().is_some_and(|c| c.received.len() >= c.expected) {
                collecting = None;
                self.send_reports(&report_subject, &mut reports, &routes).await;
            }
        }
    }

    async fn subscribe(&self, subject: String) -> async_nats::Subscriber {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.client.subscribe(subject.clone()).await {
                Ok(s) => return s,
                Err(e) => warn!(%subject, cause = %e, "cannot subscribe yet; retrying"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    async fn publish(&self, subject: &str, payload: Vec<u8>) -> bool {
        // While disconnected, publishes buffer and may block: never let that stall the link.
        let sent = self.client.publish(subject.to_string(), payload.into());
        matches!(tokio::time::timeout(PUBLISH_TIMEOUT, sent).await, Ok(Ok(())))
    }

    async fn send_reports(
        &self,
        subject: &str,
        reports: &mut BTreeMap<String, PodReport>,
        routes: &BTreeMap<String, mpsc::UnboundedSender<FromLink>>,
    ) {
        let all: Vec<PodReport> = std::mem::take(reports).into_values().collect();
        for (payload, indices) in encode_batches(&all, self.client.server_info().max_payload) {
            let ok = self.publish(subject, payload).await;
            for i in indices {
                if let Some(route) = routes.get(&all[i].limit) {
                    let _ = route.send(FromLink::Published(ok));
                }
            }
        }
    }

    async fn send_returns(&self, subject: &str, returns: &mut BTreeMap<String, LeaseReturn>) {
        let all: Vec<LeaseReturn> = std::mem::take(returns).into_values().collect();
        for (payload, _) in encode_batches(&all, self.client.server_info().max_payload) {
            // A lost return is sent again by its loop until acknowledged.
            self.publish(subject, payload).await;
        }
    }

    fn malformed<E: std::fmt::Display>(
        &self,
        routes: &BTreeMap<String, mpsc::UnboundedSender<FromLink>>,
        what: &str,
        cause: Option<E>,
    ) {
        let cause = cause.map_or_else(|| "addressed to another pod".to_string(), |e| e.to_string());
        debug!(pod = %self.pod, %cause, "unreadable {what} batch");
        for route in routes.values() {
            let _ = route.send(FromLink::Malformed);
        }
    }
}

/// Until the collection's deadline (forever when nothing is being collected).
async fn until_deadline(collecting: &mut Option<Collecting>) {
    match collecting {
        Some(c) => c.deadline.as_mut().await,
        None => std::future::pending().await,
    }
}
