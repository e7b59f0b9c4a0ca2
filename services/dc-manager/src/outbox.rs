//! What the cores said, gathered per destination and sent as batches (protocol v2): one
//! [`DcReports`] for all the limits and one [`ReturnAcks`] per pod after each event, and each
//! pod's leases, for every limit, in one [`PodLeases`] paced by [`LeasePacing`] (once per renew
//! interval; a holder's first lease at once). A batch is split only to fit the server's
//! `max_payload`, or when a pod has two holders of one limit (a restarted process whose
//! predecessor is still counted): a batch never names a limit twice.

use leasehold_core::dc_manager::{DcOutput, LeasePacing};
use leasehold_core::subjects::{self, PodChannel};
use leasehold_core::wire::{encode_batches, DcReport, ReturnAck};
use std::collections::BTreeMap;
use std::time::Duration;

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) struct Outbox {
    leases: LeasePacing,
    acks: BTreeMap<String, BTreeMap<(String, u64), ReturnAck>>,
    /// Each core's report of the tick (one per limit: reports come only from a core's tick, and
    /// the loop flushes after every tick). A list, where a map by name cost a string copy and
    /// ten comparisons per limit per tick.
    reports: Vec<DcReport>,
}

impl Outbox {
    pub(crate) fn new(renew_interval_ms: u64, tick_interval_ms: u64) -> Self {
        Outbox {
            leases: LeasePacing::new(renew_interval_ms, tick_interval_ms),
            acks: BTreeMap::new(),
            reports: Vec::new(),
        }
    }

    /// A pod's report period: none of its leases waits longer than 16 of them.
    pub(crate) fn note_report_interval(&mut self, pod: &str, interval_ms: u64) {
        self.leases.note_report_interval(pod, interval_ms);
    }

    /// Drop the leases not sent yet (the term that issued them ended).
    pub(crate) fn drop_leases(&mut self) {
        self.leases.clear();
    }

    pub(crate) fn push(&mut self, out: Vec<DcOutput>) {
        for o in out {
            match o {
                DcOutput::PodLease(l) => self.leases.push(l),
                DcOutput::ReturnAck(a) => {
                    self.acks.entry(a.holder.clone()).or_default().insert((a.limit.clone(), a.incarnation), a);
                }
                DcOutput::Report(r) => self.reports.push(r),
            }
        }
    }

    /// Send the reports and acks gathered, and the leases due (`on_tick`: this is the manager's
    /// tick). Returns the messages that could not be published.
    pub(crate) async fn flush(&mut self, client: &async_nats::Client, dc: &str, now_ns: u64, on_tick: bool) -> u64 {
        let max_bytes = client.server_info().max_payload;
        let mut messages: Vec<(String, Vec<u8>)> = Vec::new();
        for (pod, leases) in self.leases.take_due(now_ns, on_tick) {
            let Ok(subject) = subjects::pod(dc, &pod, PodChannel::Lease) else { continue };
            let all = encode_batches(&leases, max_bytes);
            messages.extend(all.into_iter().map(|(payload, _)| (subject.clone(), payload)));
        }
        for (pod, acks) in std::mem::take(&mut self.acks) {
            let Ok(subject) = subjects::pod(dc, &pod, PodChannel::Ack) else { continue };
            let all: Vec<ReturnAck> = acks.into_values().collect();
            let all = encode_batches(&all, max_bytes);
            messages.extend(all.into_iter().map(|(payload, _)| (subject.clone(), payload)));
        }
        let reports = std::mem::take(&mut self.reports);
        if let Ok(subject) = subjects::dc_report(dc) {
            let all = encode_batches(&reports, max_bytes);
            messages.extend(all.into_iter().map(|(payload, _)| (subject.clone(), payload)));
        }
        let mut failures = 0;
        for (subject, payload) in messages {
            // While disconnected publishes buffer and may block: never stall the loop on them.
            let sent = tokio::time::timeout(PUBLISH_TIMEOUT, client.publish(subject, payload.into())).await;
            if !matches!(sent, Ok(Ok(()))) {
                failures += 1;
            }
        }
        failures
    }
}
