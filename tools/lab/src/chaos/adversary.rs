//! A hostile NATS client in one DC: it records real pod leases and replays them later, publishes
//! malformed and oversized messages on lease and report subjects, reports huge demand for a
//! pod that does not exist (copied from a real pod's report, under another name), and returns
//! leases for that pod under a new incarnation each time (which the DC manager must acknowledge
//! without keeping anything). Counts what it sent. (Publishing on a real pod's subjects is what the production accounts forbid; see
//! `docs/FAILURES.md`.)

use futures::StreamExt;
use leasehold_core::subjects::{pods_wildcard, PodChannel};
use leasehold_core::wire::{self, LeaseReturn, LeaseReturns, PodReports, SCHEMA_VERSION};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Sent {
    pub replayed_leases: u64,
    pub malformed: u64,
    pub oversized: u64,
    pub forged_reports: u64,
    pub forged_returns: u64,
}

/// Run until `stop` turns true; `limit` and `dc` name the subjects it attacks.
pub async fn run(url: String, limit: String, dc: String, mut stop: watch::Receiver<bool>) -> Sent {
    let mut sent = Sent::default();
    let Ok(client) = leasehold_nats::connect::connect(&url, "chaos-adversary").await else { return sent };
    let (Ok(lease_subjects), Ok(report_subjects)) =
        (pods_wildcard(&dc, PodChannel::Lease), pods_wildcard(&dc, PodChannel::Report))
    else {
        return sent;
    };
    let (Ok(mut leases), Ok(mut reports)) =
        (client.subscribe(lease_subjects).await, client.subscribe(report_subjects).await)
    else {
        return sent;
    };
    // Old leases by subject (kept from the first time seen), and the latest real report per pod.
    let mut old: BTreeMap<String, (Instant, bytes::Bytes)> = BTreeMap::new();
    let mut last_report: Option<PodReports> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let oversized = bytes::Bytes::from(vec![b'{'; 300_000]);
    let ghost = format!("{dc}-ghost");
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            Some(m) = leases.next() => {
                old.entry(m.subject.to_string()).or_insert((Instant::now(), m.payload));
            }
            Some(m) = reports.next() => {
                if let Ok(r) = serde_json::from_slice::<PodReports>(&m.payload) {
                    if r.reports.iter().any(|item| item.limit == limit) {
                        last_report = Some(r);
                    }
                }
            }
            _ = tick.tick() => {
                for (subject, (at, body)) in &old {
                    if at.elapsed() > Duration::from_secs(2) && client.publish(subject.clone(), body.clone()).await.is_ok() {
                        sent.replayed_leases += 1;
                    }
                }
                if let Some(subject) = old.keys().next().cloned() {
                    let report_subject = subject.replace(".lease", ".report");
                    for (s, body) in [(subject.clone(), "{\"v\":1,"), (report_subject.clone(), "not json at all")] {
                        if client.publish(s, body.into()).await.is_ok() {
                            sent.malformed += 1;
                        }
                    }
                    if client.publish(report_subject, oversized.clone()).await.is_ok() {
                        sent.oversized += 1;
                    }
                }
                // Its return under an incarnation never seen, every time.
                let ret = LeaseReturn {
                    v: SCHEMA_VERSION,
                    limit: limit.clone(),
                    dc: dc.clone(),
                    holder: ghost.clone(),
                    incarnation: sent.forged_returns + 1,
                    last_version: None,
                };
                if let Ok(subject) = leasehold_core::subjects::pod(&dc, &ghost, PodChannel::Return) {
                    let body = wire::encode(&LeaseReturns::new(&dc, &ghost, vec![ret]));
                    if client.publish(subject, body.into()).await.is_ok() {
                        sent.forged_returns += 1;
                    }
                }
                if let Some(mut batch) = last_report.clone() {
                    // A pod that is not there, a thousand times the demand.
                    batch.pod = ghost.clone();
                    for r in batch.reports.iter_mut() {
                        r.pod = batch.pod.clone();
                        r.lease_in_use = None;
                        r.offered = r.offered.max(1).saturating_mul(1_000);
                        r.queued = 1_000_000;
                    }
                    let subject = leasehold_core::subjects::pod(&dc, &batch.pod, PodChannel::Report);
                    if let (Ok(body), Ok(subject)) = (serde_json::to_vec(&batch), subject) {
                        if client.publish(subject, body.into()).await.is_ok() {
                            sent.forged_reports += 1;
                        }
                    }
                }
            }
        }
    }
    let _ = client.flush().await;
    sent
}
