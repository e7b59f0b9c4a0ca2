//! The chaos harness's adversary against a real nats-server: it hears the pod protocol's
//! subjects as they are now, so it replays, corrupts and forges (it once listened on subjects
//! nobody used any more and sent nothing, and no run noticed).
#![allow(clippy::disallowed_methods)] // the fake pod's traffic runs for a measured while

use leasehold_core::subjects::{pod, PodChannel};
use leasehold_core::wire::{PodReport, PodReports};
use leasehold_lab::chaos::adversary;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};

fn report() -> PodReports {
    let r: PodReport = serde_json::from_value(serde_json::json!({
        "v": 1, "limit": "api", "dc": "europe", "pod": "europe-pod1", "incarnation": 1, "seq": 1,
        "interval_ms": 500, "offered": 10, "admitted": 10, "rejected": 0, "queued": 0, "errors": 0,
        "healthy": true, "draining": false, "weight": 1.0, "lease_in_use": null
    }))
    .expect("a pod report");
    PodReports::new("europe", "europe-pod1", vec![r])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adversary_replays_corrupts_and_forges_on_the_pod_subjects() {
    let server = NatsServer::start(&binaries().unwrap().remove(0)).unwrap();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let attack = tokio::spawn(adversary::run(server.url(), "api".into(), "europe".into(), stop));
    // A pod's traffic for 3 s: a report and a lease every 100 ms (leases are replayed once 2 s old).
    let client = wait::client(&server.url(), "pod").await;
    let report_subject = pod("europe", "europe-pod1", PodChannel::Report).unwrap();
    let lease_subject = pod("europe", "europe-pod1", PodChannel::Lease).unwrap();
    let body = serde_json::to_vec(&report()).unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < until {
        tick.tick().await;
        client.publish(report_subject.clone(), body.clone().into()).await.unwrap();
        client.publish(lease_subject.clone(), "{\"v\":2,\"leases\":[]}".into()).await.unwrap();
    }
    stop_tx.send(true).unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(10), attack).await.expect("stops").unwrap();
    println!("{sent:?}");
    assert!(sent.replayed_leases > 0, "{sent:?}");
    assert!(sent.malformed > 0 && sent.oversized > 0, "{sent:?}");
    assert!(sent.forged_reports > 0 && sent.forged_returns > 0, "{sent:?}");
}
