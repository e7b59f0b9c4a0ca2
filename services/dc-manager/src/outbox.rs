//! What the cores said during one event, gathered per destination and sent as batches (protocol
//! v2): one [`PodLeases`] per pod, one [`ReturnAcks`] per pod and one [`DcReports`] for all the
//! limits, however many limits spoke. A batch is split only to fit the server's `max_payload`,
//! or when a pod has two holders of one limit (a restarted process whose predecessor is still
//! counted): a batch never names a limit twice.

use leasehold_shared::dc_manager::DcOutput;
use leasehold_shared::subjects::{self, PodChannel};
use leasehold_shared::wire::{batches, encode, DcReport, DcReports, PodLease, PodLeases, ReturnAck, ReturnAcks};
use std::collections::BTreeMap;
use std::time::Duration;

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Outbox {
    /// Per pod, per (limit, holder incarnation): the newest lease (a later one in the same event
    /// replaces it; the issuer counts both until the pod says it uses the newer).
    leases: BTreeMap<String, BTreeMap<(String, u64), PodLease>>,
    acks: BTreeMap<String, BTreeMap<(String, u64), ReturnAck>>,
    reports: BTreeMap<String, DcReport>,
}

impl Outbox {
    pub(crate) fn push(&mut self, out: Vec<DcOutput>) {
        for o in out {
            match o {
                DcOutput::PodLease(l) => {
                    let pod = self.leases.entry(l.pod.clone()).or_default();
                    let key = (l.limit.clone(), l.incarnation);
                    if pod.get(&key).is_none_or(|old| old.version <= l.version) {
                        pod.insert(key, l);
                    }
                }
                DcOutput::ReturnAck(a) => {
                    self.acks.entry(a.holder.clone()).or_default().insert((a.limit.clone(), a.incarnation), a);
                }
                DcOutput::Report(r) => {
                    self.reports.insert(r.limit.clone(), r);
                }
            }
        }
    }

    /// Send everything gathered. Returns the messages that could not be published.
    pub(crate) async fn flush(&mut self, client: &async_nats::Client, dc: &str) -> u64 {
        let max_bytes = client.server_info().max_payload;
        let mut messages: Vec<(String, Vec<u8>)> = Vec::new();
        for (pod, leases) in std::mem::take(&mut self.leases) {
            let Ok(subject) = subjects::pod(dc, &pod, PodChannel::Lease) else { continue };
            let all: Vec<PodLease> = leases.into_values().collect();
            let all = batches(&all, max_bytes);
            messages.extend(all.into_iter().map(|b| (subject.clone(), encode(&PodLeases::new(dc, &pod, b)))));
        }
        for (pod, acks) in std::mem::take(&mut self.acks) {
            let Ok(subject) = subjects::pod(dc, &pod, PodChannel::Ack) else { continue };
            let all: Vec<ReturnAck> = acks.into_values().collect();
            let all = batches(&all, max_bytes);
            messages.extend(all.into_iter().map(|b| (subject.clone(), encode(&ReturnAcks::new(dc, &pod, b)))));
        }
        let reports: Vec<DcReport> = std::mem::take(&mut self.reports).into_values().collect();
        if let Ok(subject) = subjects::dc_report(dc) {
            let all = batches(&reports, max_bytes);
            messages.extend(all.into_iter().map(|b| (subject.clone(), encode(&DcReports::new(dc, b)))));
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
