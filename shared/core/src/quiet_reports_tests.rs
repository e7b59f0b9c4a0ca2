use super::*;
use crate::pod::PodConfig;
use crate::quota::Quota;
use crate::wire::{PodLease, SCHEMA_VERSION};

const MS: u64 = NS_PER_MS;
const PERIOD: u64 = 250 * MS;

fn pod() -> PodCore {
    let cfg = PodConfig {
        limit: "l".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation: 7,
        weight: 1.0,
        bugs: Default::default(),
    };
    PodCore::new(cfg, 0)
}

fn lease(seq: u64, basis_seq: u64) -> PodLease {
    PodLease {
        v: SCHEMA_VERSION,
        limit: "l".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation: 7,
        issuer: "m".into(),
        version: LeaseVersion::new(1, seq),
        lease_id: format!("m-1-{seq}").into(),
        quota: Quota { rate_milli_per_s: 10_000, burst_milli: 1_000 },
        ttl_ms: 5_000,
        basis_seq,
        limit_removed: false,
        continues: None,
    }
}

fn offered(n: u64) -> IntervalCounters {
    IntervalCounters { offered: n, admitted: n, ..Default::default() }
}

/// Which of `periods` ticks (offering `n` each) sent a report, as tick numbers from 1.
fn sent_ticks(q: &mut QuietReports, p: &mut PodCore, from: u64, periods: u64, n: u64) -> Vec<u64> {
    (from..from + periods).filter(|t| q.tick(p, t * PERIOD, offered(n), true).is_some()).collect()
}

fn quiet() -> QuietReports {
    QuietReports::new(DEFAULT_MAX_QUIET_MS, 250)
}

/// A pod holding a lease that lasts (so only the quiet rules decide), after its first report.
fn leased_pod(q: &mut QuietReports) -> PodCore {
    let mut p = pod();
    let first = q.tick(&mut p, 0, offered(5), true).unwrap();
    let mut l = lease(1, first.seq);
    l.ttl_ms = 600_000;
    p.on_lease(&l, MS).unwrap();
    p
}

#[test]
fn a_steady_limit_reports_every_fourth_period_with_the_counters_of_the_periods_left_out() {
    let mut q = quiet();
    let mut p = leased_pod(&mut q);
    assert_eq!(sent_ticks(&mut q, &mut p, 1, 1, 5), vec![1], "the new lease is confirmed at once");
    assert_eq!(sent_ticks(&mut q, &mut p, 2, 12, 5), vec![5, 9, 13]);
    // The report at tick 17 carries the 4 periods since tick 13: 20 offered in 1,000 ms.
    assert!(q.tick(&mut p, 14 * PERIOD, offered(5), true).is_none());
    assert!(q.tick(&mut p, 15 * PERIOD, offered(5), true).is_none());
    assert!(q.tick(&mut p, 16 * PERIOD, IntervalCounters { queued: 9, ..offered(5) }, true).is_none());
    let r = q.tick(&mut p, 17 * PERIOD, IntervalCounters { queued: 2, ..offered(5) }, true).unwrap();
    assert_eq!((r.offered, r.admitted, r.interval_ms, r.queued, r.periods), (20, 20, 1_000, 2, 4));
}

/// Found by review: ticks the driver merged (or a pause) must not stretch the silence. It is
/// bounded in time: with ticks every 500 ms a steady limit still reports every second.
#[test]
fn silence_is_bounded_in_time_not_in_ticks() {
    let mut q = QuietReports::new(DEFAULT_MAX_QUIET_MS, 500);
    let mut p = leased_pod(&mut q);
    let at = |t: u64| t * 500 * MS;
    assert!(q.tick(&mut p, at(1), offered(10), true).is_some(), "confirms the lease");
    assert!(q.tick(&mut p, at(2), offered(10), true).is_none());
    assert!(q.tick(&mut p, at(3), offered(10), true).is_some(), "1 s since the last report");
    // One tick 2 s late (merged ticks): it reports, whatever the tick count.
    assert!(q.tick(&mut p, at(7), offered(40), true).is_some());
}

/// Found by review: a pod whose lease ran out needs a new one: it reports every period.
#[test]
fn a_limit_without_a_lease_in_force_reports_every_period() {
    let (mut q, mut p) = (quiet(), pod());
    let first = q.tick(&mut p, PERIOD, offered(5), true).unwrap();
    p.on_lease(&lease(1, first.seq), PERIOD + MS).unwrap(); // 5 s from its basis
    assert!(q.tick(&mut p, 2 * PERIOD, offered(5), true).is_some(), "confirms");
    assert!(q.tick(&mut p, 3 * PERIOD, offered(5), true).is_none());
    let expired = PERIOD + 5_000 * MS;
    assert!(q.tick(&mut p, expired, offered(5), true).is_some(), "the lease ran out");
    assert!(q.tick(&mut p, expired + PERIOD, offered(5), true).is_some(), "and still none");
}

/// Found by review: NATS may drop a message; a report that failed to publish goes again at the
/// next tick rather than a second later.
#[test]
fn a_report_that_failed_to_publish_goes_again_at_the_next_tick() {
    let mut q = quiet();
    let mut p = leased_pod(&mut q);
    q.tick(&mut p, PERIOD, offered(5), true).unwrap();
    q.resend_next();
    assert!(q.tick(&mut p, 2 * PERIOD, offered(5), true).is_some());
    assert!(q.tick(&mut p, 3 * PERIOD, offered(5), true).is_none(), "once sent, quiet again");
}

#[test]
fn zero_quiet_ms_reports_every_period() {
    let mut q = QuietReports::new(0, 250);
    let mut p = leased_pod(&mut q);
    assert_eq!(sent_ticks(&mut q, &mut p, 1, 6, 5), vec![1, 2, 3, 4, 5, 6]);
}

#[test]
fn a_new_lease_is_confirmed_at_the_next_period() {
    let (mut q, mut p) = (quiet(), pod());
    let first = q.tick(&mut p, PERIOD, offered(5), true).unwrap();
    p.on_lease(&lease(1, first.seq), PERIOD + MS).unwrap();
    let r = q.tick(&mut p, 2 * PERIOD, offered(5), true).expect("the new lease is confirmed at once");
    assert_eq!(r.lease_in_use, Some(LeaseVersion::new(1, 1)));
    assert!(q.tick(&mut p, 3 * PERIOD, offered(5), true).is_none(), "nothing new after the confirmation");
}

#[test]
fn errors_and_429s_report_every_period_for_a_while_and_health_and_a_drain_at_once() {
    let mut q = quiet();
    let mut p = leased_pod(&mut q);
    q.tick(&mut p, PERIOD, offered(5), true).unwrap();
    let errors = IntervalCounters { errors: 1, ..offered(5) };
    assert!(q.tick(&mut p, 2 * PERIOD, errors, true).is_some(), "upstream errors");
    assert!(q.tick(&mut p, 3 * PERIOD, offered(5), true).is_some(), "every period after errors");
    let t = 3 * PERIOD + ERRORS_KEEP_REPORTING_MS * MS;
    // 10 s of the same 20/s in one report (the ticks between were left out of this test).
    assert!(q.tick(&mut p, t, offered(200), true).is_some(), "the last report before going quiet");
    assert!(q.tick(&mut p, t + PERIOD, offered(5), true).is_none(), "quiet again");
    let throttled = IntervalCounters { upstream_429: 1, ..offered(5) };
    assert!(q.tick(&mut p, t + 2 * PERIOD, throttled, true).is_some(), "upstream 429s");
    assert!(q.tick(&mut p, t + 3 * PERIOD, offered(5), true).is_some(), "every period after 429s");
    let t = t + 3 * PERIOD + ERRORS_KEEP_REPORTING_MS * MS;
    assert!(q.tick(&mut p, t, offered(5), true).is_some());
    assert!(q.tick(&mut p, t + PERIOD, offered(5), false).is_some(), "unhealthy");
    assert!(q.tick(&mut p, t + 2 * PERIOD, offered(5), false).is_none(), "still unhealthy: nothing new");
    assert!(q.tick(&mut p, t + 3 * PERIOD, offered(5), true).is_some(), "healthy again");
    p.drain();
    assert!(q.tick(&mut p, t + 4 * PERIOD, offered(0), true).is_some(), "draining");
}

#[test]
fn demand_that_moves_reports_at_once_and_jitter_does_not() {
    let mut q = quiet();
    let mut p = leased_pod(&mut q);
    q.tick(&mut p, PERIOD, offered(50), true).unwrap(); // 200/s
    assert!(q.tick(&mut p, 2 * PERIOD, offered(55), true).is_none(), "220/s is within 1.25 × 200 + 4");
    // 55 + 100 in 500 ms: 310/s.
    assert!(q.tick(&mut p, 3 * PERIOD, offered(100), true).is_some(), "400/s in a period moves the rate");
    assert!(q.tick(&mut p, 4 * PERIOD, offered(0), true).is_some(), "and so does stopping");
    // A limit at rest wakes up: 0 → 8/s, more than the slack of 4/s.
    assert!(q.tick(&mut p, 5 * PERIOD, offered(0), true).is_none());
    assert!(q.tick(&mut p, 6 * PERIOD, offered(4), true).is_some());
}

#[test]
fn demand_moved_needs_both_the_ratio_and_the_slack() {
    assert!(!demand_moved(0.0, 4.0));
    assert!(demand_moved(0.0, 4.1));
    assert!(!demand_moved(1_000.0, 1_254.0));
    assert!(demand_moved(1_000.0, 1_254.1));
    assert!(demand_moved(1_254.1, 1_000.0), "symmetric");
}

/// A lease that went unrenewed (its manager failing over) is reported every period once it has
/// less than two quiet stretches left: a new term continues it only if it hears what the pod
/// holds before it ends.
#[test]
fn a_lease_running_low_is_reported_every_period() {
    let mut q = quiet();
    let mut p = pod();
    let first = q.tick(&mut p, 0, offered(5), true).unwrap();
    p.on_lease(&lease(1, first.seq), MS).unwrap(); // ends at 5 s
                                                   // Quiet while 2 s or more are left (up to 2.75 s): about one report a second.
    let quiet_ticks = sent_ticks(&mut q, &mut p, 2, 10, 5);
    assert!(quiet_ticks.len() <= 4 && quiet_ticks.windows(2).any(|w| w[1] - w[0] >= 4), "{quiet_ticks:?}");
    // Under 2 s left (after 3 s): every period.
    assert_eq!(sent_ticks(&mut q, &mut p, 13, 6, 5), vec![13, 14, 15, 16, 17, 18]);
}
