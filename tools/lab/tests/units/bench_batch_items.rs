//! Tests of `batch_items` in `tools/lab/src/bench/mod.rs`: the control-plane bench counts a
//! batch's items without parsing it.

use leasehold_core::quota::Quota;
use leasehold_core::wire::{self, LeaseVersion, PodLease, PodLeases, PodReport, PodReports};
use leasehold_lab::bench::batch_items;

fn report(limit: &str) -> PodReport {
    PodReport {
        v: wire::SCHEMA_VERSION,
        limit: limit.into(),
        dc: "bkk".into(),
        pod: "bkk-pod-1".into(),
        incarnation: 7,
        seq: 3,
        interval_ms: 250,
        offered: 5,
        admitted: 5,
        rejected: 0,
        queued: 0,
        errors: 0,
        upstream_429: 0,
        healthy: true,
        draining: false,
        weight: 1.0,
        lease_in_use: Some(LeaseVersion::new(1, 2)),
        periods: 1,
        held: None,
    }
}

fn lease(limit: &str, limit_removed: bool) -> PodLease {
    PodLease {
        v: wire::SCHEMA_VERSION,
        limit: limit.into(),
        dc: "bkk".into(),
        pod: "bkk-pod-1".into(),
        incarnation: 7,
        issuer: "bkk-mgr-1".into(),
        version: LeaseVersion::new(1, 9),
        lease_id: "bkk-mgr-1-1-9".into(),
        quota: Quota { rate_milli_per_s: 1000, burst_milli: 1000 },
        ttl_ms: 5000,
        basis_seq: 3,
        limit_removed,
        continues: None,
    }
}

#[test]
fn counts_the_items_of_report_and_lease_batches_and_nothing_else() {
    let reports: Vec<PodReport> = (0..37).map(|i| report(&format!("limit-{i}"))).collect();
    let body = wire::encode(&PodReports::new("bkk", "bkk-pod-1", reports));
    assert_eq!(batch_items(&body), 37);
    // `limit_removed` is a second key with "limit" in it: it must not count twice.
    let leases = vec![lease("a", true), lease("b", false), lease("limit", true)];
    let body = wire::encode(&PodLeases::new("bkk", "bkk-pod-1", leases));
    assert_eq!(batch_items(&body), 3);
    assert_eq!(batch_items(&wire::encode(&PodReports::new("bkk", "bkk-pod-1", vec![]))), 0);
    assert_eq!(batch_items(b"not json at all"), 0);
}
