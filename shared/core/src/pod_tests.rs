//! The pod core's rules: reports, leases, continuations.

use super::*;
const MS: u64 = NS_PER_MS;

fn lease(version: LeaseVersion, basis_seq: u64) -> PodLease {
    PodLease {
        v: 1,
        limit: "l".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation: 7,
        issuer: "m".into(),
        version,
        lease_id: "x".into(),
        quota: Quota::per_s(100, 10),
        ttl_ms: 5_000,
        basis_seq,
        limit_removed: false,
        continues: None,
    }
}

fn pod() -> PodCore {
    PodCore::new(
        PodConfig {
            limit: "l".into(),
            dc: "bkk".into(),
            pod: "p1".into(),
            incarnation: 7,
            weight: 1.0,
            bugs: Default::default(),
        },
        0,
    )
}

#[test]
fn the_first_report_covers_the_time_since_the_pod_started_counting() {
    let mut p = pod();
    // 50 offered in the 250 ms since start: 200/s, not 50 per millisecond.
    let c = IntervalCounters { offered: 50, ..Default::default() };
    assert_eq!(p.report(250 * MS, c, true).interval_ms, 250);
    assert_eq!(p.report(500 * MS, c, true).interval_ms, 250);
}

#[test]
fn a_pod_that_never_confirms_reports_no_lease_in_use() {
    let (mut confirming, mut lending) = (pod(), pod());
    lending.never_confirm();
    for p in [&mut confirming, &mut lending] {
        let r = p.report(0, IntervalCounters::default(), true);
        p.on_lease(&lease(LeaseVersion::new(1, 1), r.seq), MS).unwrap();
    }
    let c = IntervalCounters::default();
    assert_eq!(confirming.report(250 * MS, c, true).lease_in_use, Some(LeaseVersion::new(1, 1)));
    assert_eq!(lending.report(250 * MS, c, true).lease_in_use, None);
}

#[test]
fn countdown_starts_at_the_report_send_time() {
    let mut p = pod();
    let r = p.report(1_000 * MS, IntervalCounters::default(), true);
    p.on_lease(&lease(LeaseVersion::new(1, 1), r.seq), 3_000 * MS).unwrap();
    assert_eq!(p.applied(3_000 * MS).unwrap().expires_at_ns, 6_000 * MS);
    assert!(p.applied(6_000 * MS).is_none());
}

#[test]
fn stale_unknown_and_expired_leases_are_refused() {
    let mut p = pod();
    let r = p.report(0, IntervalCounters::default(), true);
    p.on_lease(&lease(LeaseVersion::new(1, 5), r.seq), MS).unwrap();
    assert!(matches!(p.on_lease(&lease(LeaseVersion::new(1, 4), r.seq), MS), Err(LeaseRejection::NotNewer { .. })));
    assert!(matches!(p.on_lease(&lease(LeaseVersion::new(1, 6), 77), MS), Err(LeaseRejection::UnknownBasis(77))));
    assert_eq!(p.on_lease(&lease(LeaseVersion::new(1, 7), r.seq), 5_000 * MS), Err(LeaseRejection::AlreadyExpired));
    let mut other = lease(LeaseVersion::new(1, 8), r.seq);
    other.pod = "p2".into();
    assert_eq!(p.on_lease(&other, MS), Err(LeaseRejection::NotMine));
}

#[test]
fn drain_revokes_and_ignores_later_leases() {
    let mut p = pod();
    let r = p.report(0, IntervalCounters::default(), true);
    p.on_lease(&lease(LeaseVersion::new(1, 1), r.seq), MS).unwrap();
    let ret = p.drain();
    assert_eq!(ret.last_version, Some(LeaseVersion::new(1, 1)));
    assert!(!p.bucket().try_acquire(1, 2_000 * MS).unwrap().is_granted());
    assert_eq!(p.on_lease(&lease(LeaseVersion::new(1, 2), r.seq), MS), Err(LeaseRejection::Draining));
    assert!(p.on_return_ack(&ReturnAck {
        v: 1,
        limit: "l".into(),
        dc: "bkk".into(),
        holder: "p1".into(),
        incarnation: 7
    }));
}

#[test]
fn a_continuation_applies_only_to_the_lease_in_use_and_never_beyond_it() {
    let mut p = pod();
    let r = p.report(0, IntervalCounters::default(), true);
    p.on_lease(&lease(LeaseVersion::new(1, 5), r.seq), MS).unwrap();
    let c = IntervalCounters::default();
    let r2 = p.report(1_000 * MS, c, true);
    let held = r2.held.expect("a confirming pod says what it holds");
    assert_eq!((held.quota, held.left_ms), (Quota::per_s(100, 10), 4_000));
    // A new term continues 1:5 with more quota and a longer TTL: capped at what 1:5 grants.
    let mut next = lease(LeaseVersion::new(2, 1), r2.seq);
    next.continues = Some(LeaseVersion::new(1, 5));
    next.quota = Quota::per_s(300, 30);
    p.on_lease(&next, 1_100 * MS).unwrap();
    let a = p.applied(1_100 * MS).unwrap();
    assert_eq!((a.quota, a.expires_at_ns), (Quota::per_s(100, 10), 5_000 * MS));
    // An older term's lease is refused from now on (the epoch fence).
    assert!(matches!(
        p.on_lease(&lease(LeaseVersion::new(1, 6), r2.seq), 1_200 * MS),
        Err(LeaseRejection::StaleEpoch { .. })
    ));
    // A continuation of a lease no longer in use is refused.
    let mut stale = lease(LeaseVersion::new(3, 1), r2.seq);
    stale.continues = Some(LeaseVersion::new(1, 5));
    assert_eq!(p.on_lease(&stale, 1_300 * MS), Err(LeaseRejection::NotContinued(LeaseVersion::new(1, 5))));
    // A lending pod (never confirms) says nothing and refuses continuations.
    let mut lending = pod();
    lending.never_confirm();
    let r = lending.report(0, c, true);
    lending.on_lease(&lease(LeaseVersion::new(1, 5), r.seq), MS).unwrap();
    let r = lending.report(MS, c, true);
    assert_eq!(r.held, None);
    let mut cont = lease(LeaseVersion::new(2, 1), r.seq);
    cont.continues = Some(LeaseVersion::new(1, 5));
    assert!(lending.on_lease(&cont, 2 * MS).is_err());
}

/// A continuation that finds the lease it continues run out is refused, though it would
/// grant nothing: a term stops counting a lease once it ran out and may lend its share to
/// another pod, so only a lease still running when the new term's continuation reaches the
/// pod (after the old term stopped granting) was counted at every grant the old term made.
/// Confirming an empty continuation would free that share twice.
#[test]
fn a_continuation_of_a_lease_that_ran_out_is_refused() {
    let mut p = pod();
    let r = p.report(0, IntervalCounters::default(), true);
    p.on_lease(&lease(LeaseVersion::new(1, 5), r.seq), MS).unwrap();
    let r2 = p.report(4_000 * MS, IntervalCounters::default(), true);
    assert_eq!(r2.held.map(|h| h.left_ms), Some(1_000));
    let mut next = lease(LeaseVersion::new(2, 1), r2.seq);
    next.continues = Some(LeaseVersion::new(1, 5));
    assert_eq!(p.on_lease(&next, 5_000 * MS), Err(LeaseRejection::NotContinued(LeaseVersion::new(1, 5))));
    assert_eq!(p.lease_in_use(), Some(LeaseVersion::new(1, 5)), "the old term is not fenced by it");
    assert_eq!(p.report(5_000 * MS, IntervalCounters::default(), true).held, None);
}
