//! A lease answering one process's report never applies in another process with the same pod
//! id: every process draws its own incarnation, and leases name it (docs/FINDINGS.md#f3).

use leasehold_core::bugs::KnownBugs;
use leasehold_core::lease_intake::LeaseRejection;
use leasehold_core::pod::{IntervalCounters, PodConfig, PodCore};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{LeaseVersion, PodLease};

use crate::support::MS;

/// A pod restarted under the same id (FINDINGS F3), its wall clock stepped back. Its sequence
/// numbers repeat the old process's, so a late lease that answered the old process's report N would
/// be timed from the new process's send of N. The incarnation tells them apart.
#[test]
fn a_pod_restarted_under_the_same_id_never_applies_a_lease_that_answered_its_previous_life() {
    assert_eq!(late_lease_after_restart(KnownBugs::default()), Err(LeaseRejection::NotMine));
}

#[test]
fn negative_control_a_pod_without_incarnations_applies_its_previous_lifes_lease() {
    let bugs = KnownBugs { pod_ignores_incarnation: true, ..KnownBugs::default() };
    assert_eq!(late_lease_after_restart(bugs), Ok(()));
}

fn late_lease_after_restart(bugs: KnownBugs) -> Result<(), LeaseRejection> {
    let cfg = |incarnation| PodConfig {
        limit: "api".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation,
        weight: 1.0,
        bugs,
    };
    let mut old = PodCore::new(cfg(0x01d), 0);
    let first = old.report(0, IntervalCounters::default(), true);
    // The old process dies; its DC manager answers its report late.
    let late = PodLease {
        v: 1,
        limit: "api".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation: first.incarnation,
        issuer: "m".into(),
        version: LeaseVersion::new(1, 1),
        lease_id: "x".into(),
        quota: Quota::per_s(900, 9),
        ttl_ms: 1_000,
        basis_seq: first.seq,
        limit_removed: false,
        continues: None,
    };
    let mut new = PodCore::new(cfg(0x9e3), 800 * MS);
    let again = new.report(900 * MS, IntervalCounters::default(), true);
    assert_eq!(again.seq, first.seq, "sequence numbers start again in every process");
    new.on_lease(&late, 950 * MS)
}
