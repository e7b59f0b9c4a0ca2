//! A DC manager spends only under its newest DC lease: when that lease ends, the DC falls to its
//! floor, never back to an older, larger lease it replaced and reported superseded, in whatever
//! order the leases end (docs/FINDINGS.md#f1). Each test drives the real DC manager with
//! scripted pods through the path that broke the limit.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::dc_manager::FailMode;
use leasehold_core::quota::Quota;
use leasehold_core::wire::LeaseVersion;

use crate::support;
use support::scripted::{bkk_with_scripted_pods as dc, Drive, PODS};
use support::{MS, S};

/// A newer DC lease that expires before an older, larger one (FINDINGS F1). The manager must fall
/// to its floor when the newest lease expires, never back to the lease it replaced (and acked).
#[test]
fn a_dc_manager_never_falls_back_to_a_lease_it_replaced_when_the_newer_one_expires_first() {
    let (after_expiry, floor, fell_back) = newer_lease_expires_first(KnownBugs::default());
    assert!(
        after_expiry.fits_in(&floor),
        "after the newest DC lease expired the pods were given {after_expiry}, above the floor {floor}"
    );
    assert!(!fell_back, "the replaced lease came back into use");
}

#[test]
fn negative_control_the_old_fallback_rule_hands_out_the_replaced_lease() {
    let bugs = KnownBugs { dc_falls_back_to_older_lease: true, ..KnownBugs::default() };
    let (after_expiry, floor, fell_back) = newer_lease_expires_first(bugs);
    assert!(fell_back && !after_expiry.fits_in(&floor), "{after_expiry} within {floor}");
}

/// Returns the largest Σ of pod leases issued after the newest DC lease expired, the floor, and
/// whether the manager spends under a lease again after that.
fn newer_lease_expires_first(bugs: KnownBugs) -> (Quota, Quota, bool) {
    let floor = Quota::per_s(10, 2);
    let mut dc = dc(FailMode::Strict, floor, "bkk-mgr", 0, bugs);
    let s1 = dc.report_seq(0);
    // Leader 1: 900/s for 10 s.
    dc.dc_lease(Quota::per_s(900, 18), 10_000, LeaseVersion::new(1, 1), s1, 0).expect("lease applies");
    dc.run(&PODS, 0, S, 0);
    // Leader 2 (a rolling restart to dc_ttl_ms = 6 s): 100/s for 6 s. The manager acks it once
    // its pods are inside 100/s, and the coordinator gives the other 800/s to Europe.
    let s2 = dc.report_seq(S);
    dc.dc_lease(Quota::per_s(100, 2), 6_000, LeaseVersion::new(2, 1), s2, S + 50 * MS).expect("lease applies");
    dc.run(&PODS, S, 6 * S, 0);
    // Leader 2 crashes: no renewal. Its lease ends at 7 s, leader 1's at 10 s.
    let after_expiry = dc.run(&PODS, 6 * S, 10 * S, 7 * S + 1);
    (after_expiry, floor, dc.core.current_lease(8 * S).is_some())
}

/// F1's second path: the basis of a newer lease is an older report (a new leader whose first
/// heard report is a delayed one), so the newer lease ends first.
#[test]
fn a_newer_lease_answering_an_older_report_still_supersedes_every_older_lease() {
    let floor = Quota::per_s(10, 2);
    let mut dc = dc(FailMode::Strict, floor, "bkk-mgr", 0, KnownBugs::default());
    let s1 = dc.report_seq(0);
    let s2 = dc.report_seq(S);
    dc.dc_lease(Quota::per_s(900, 18), 10_000, LeaseVersion::new(1, 1), s2, S + 50 * MS).expect("lease applies");
    dc.run(&PODS, S, 2 * S, 0);
    dc.dc_lease(Quota::per_s(100, 2), 10_000, LeaseVersion::new(2, 1), s1, 2 * S).expect("lease applies");
    dc.run(&PODS, 2 * S, 10 * S, 0);
    // The newer lease ended at 10 s (from report 1), the older one would last until 11 s.
    let after = dc.run(&PODS, 10 * S, 11 * S, 10 * S + 1);
    assert!(after.fits_in(&floor), "pods were given {after} from a superseded lease");
}
