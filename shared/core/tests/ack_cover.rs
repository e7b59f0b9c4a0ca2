//! A DC manager acks a DC lease (and reports a lowered floor in use) only once the pod leases
//! that may outlive that DC lease on the coordinator's books fit the floor alone, and during its
//! quiet period a new term counts no floor as cover at all: nesting holds in time across acks
//! (docs/FINDINGS.md#f19, docs/FINDINGS.md#f21). Each test drives the real cores through the path
//! that broke the limit and asserts the safe outcome.
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew) unless a test says so.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport, LeaseVersion};

use crate::support;
use support::world::{log_dc_leases, print_run, sample_bkk_and, sample_held, Dc};
use support::{config, config_with_dc_ttl, floor_burst, manager, manager_with_bugs, secs, Newest, MS, S};

// -------------------------------------------------------------------------------------------
// Shared pieces
// -------------------------------------------------------------------------------------------

/// Limit `api` of `quota` without floors, with DC leases of `dc_ttl_ms`.
fn config_with_ttl(quota: Quota, dc_ttl_ms: u64) -> LimitConfig {
    config_with_dc_ttl(quota, 0, 0, dc_ttl_ms)
}

/// A hand-written report of Europe's manager (asks for `demand_per_s`, acks `ack`).
fn eu_report_asking(seq: u64, ack: Option<LeaseVersion>, demand_per_s: u64) -> DcReport {
    support::dc_report_asking("eu", seq, ack, None, demand_per_s)
}

/// BKK: a real DC manager that has read `floor` and two real pods `p1`, `p2` offering `offered`
/// per 250 ms report (each may be cut off from the manager).
fn bkk(floor: Quota, version: LeaseVersion, offered: [u64; 2], bugs: KnownBugs) -> Dc {
    let mut bkk = Dc::with_pods("bkk", manager_with_bugs("bkk", "bkk-mgr", 1, 0, bugs), &["p1", "p2"]);
    assert_eq!(bkk.mgr.config().pod_ttl_ms, 5_000, "the default pod lease TTL");
    bkk.mgr.on_floor(floor, version, 0);
    bkk.offered = offered.to_vec();
    bkk
}

/// The coordinator's answer `out` at `t` reaches Europe, and BKK while `bkk_linked`.
fn reach(out: &[DcLease], eu: &mut Newest, bkk: &mut Dc, bkk_linked: bool, t: u64) {
    eu.absorb("eu", out, t);
    if bkk_linked {
        bkk.on_dc_leases(out, t);
    }
}

/// A term of BKK's manager started at `now` and the pods that talk to it, each offering 250 per
/// report (each may be cut off from it).
fn term(instance: &str, epoch: u64, now: u64, pods: &[&str]) -> Dc {
    let mut term = Dc::with_pods("bkk", manager("bkk", instance, epoch, now), pods);
    term.offer(250);
    term
}

// -------------------------------------------------------------------------------------------
// A DC lease acked although pod leases cut under the older one outlive it
// -------------------------------------------------------------------------------------------

/// A rolling restart lowers `dc_ttl_ms` from 10 s to 3 s (as the simulator's `rolling-restart`
/// path does; pods keep the default 5 s TTL). At the takeover BKK's manager has just renewed
/// pod `p1` under term A's 10 s DC lease (250/s until 6 s); term B's 3 s lease arrives and `p1`
/// is cut off from its manager, so it never gets its share of the new one and keeps spending
/// the old one. BKK's pods' outstanding leases (250 + 250) fit the new DC lease (500), so the
/// manager acks it and term B stops counting A's lease. `p1` was BKK's only busy pod: once it
/// misses its heartbeats BKK's demand falls, B shrinks BKK's lease, and the last 3 s lease that
/// covered `p1` leaves B's books (at 5.28 s) while `p1` may still spend until 6 s. B gives
/// Europe the room: Σ = Europe + BKK's pods > 1,000/s.
///
/// The rule at fault: the manager acks the newest DC lease whose amount covers its pods
/// (`DcManagerCore::report`), without asking whether the pod leases end before that DC lease
/// ends on the coordinator's books (a pod lease cut under a longer, older DC lease may outlive
/// it).
#[test]
fn a_dc_lease_is_acked_only_once_the_pod_leases_cut_under_older_ones_end_before_it() {
    let (worst, q) = ack_after_a_takeover_that_shortens_the_dc_ttl(KnownBugs::default());
    assert!(worst.fits_in(&q), "BKK's pods and Europe held {worst} > {q}");
}

#[test]
fn negative_control_acking_by_amount_alone_lets_older_pod_leases_outlive_the_acked_lease() {
    let (worst, q) =
        ack_after_a_takeover_that_shortens_the_dc_ttl(KnownBugs { ack_by_amount_only: true, ..KnownBugs::default() });
    assert!(!worst.fits_in(&q), "the old rule went unnoticed: {worst}");
}

/// The most BKK's pods and Europe held together, and the limit.
fn ack_after_a_takeover_that_shortens_the_dc_ttl(bugs: KnownBugs) -> (Quota, Quota) {
    let q = Quota::per_s(1_000, 20);
    let mut coord = CoordinatorCore::new(config_with_ttl(q, 10_000), "coord-a", 1);
    let mut bkk = bkk(Quota::ZERO, LeaseVersion::new(1, 1), [500, 0], bugs);
    let mut eu = Newest::default();
    let mut log = Vec::new();
    let (mut eu_seq, mut worst, mut t) = (0u64, Quota::ZERO, 0u64);
    let (takeover, end) = (S, 8 * S);
    while t < end {
        if t == takeover {
            let after = config_with_ttl(q, 3_000);
            coord = CoordinatorCore::resume(after, "coord-b", 2, Stored::Record(&coord.record()), t);
            log.push(format!("{:6.3}s term B (dc_ttl_ms 3,000) takes over", secs(t)));
        }
        for r in bkk.step(t) {
            log.push(format!("{:6.3}s bkk reports lease_in_use {:?}", secs(t), r.lease_in_use.map(|v| v.to_string())));
            let out = coord.on_dc_report(&r, t);
            reach(&out, &mut eu, &mut bkk, true, t);
        }
        eu_seq += 1;
        let out = coord.on_dc_report(&eu_report_asking(eu_seq, eu.version(), 2_000), t);
        reach(&out, &mut eu, &mut bkk, true, t);
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            log_dc_leases(&out, t, &mut log);
            if t == takeover {
                // p1 is cut off from its manager as term B's lease arrives: it keeps the lease
                // it was just given under term A's.
                bkk.pod_cut[0] = true;
                log.push(format!(
                    "{:6.3}s p1 (holding {} until {:.3}s) is cut off from its manager",
                    secs(t),
                    bkk.pods[0].applied(t).map(|a| a.quota.to_string()).unwrap_or_default(),
                    secs(bkk.pods[0].applied(t).map_or(0, |a| a.expires_at_ns))
                ));
            }
            reach(&out, &mut eu, &mut bkk, true, t);
        }
        sample_bkk_and(&bkk, "europe's lease", |now| eu.spendable(now), t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    (worst, q)
}

// -------------------------------------------------------------------------------------------
// A lowered floor confirmed while pod leases cut from the old floor outlive the DC lease
// that covered them
// -------------------------------------------------------------------------------------------

/// BKK's floor is 400 and BKK is cut off from the coordinator: its manager splits the floor
/// alone, 200 + 200, in pod leases of the full 5 s TTL (no DC lease to nest them in). Term B
/// lowers BKK's floor to 200 and runs with `dc_ttl_ms` 2,000. BKK reconnects and gets a DC
/// lease (Europe asks for little, so it is large); as it arrives both pods are cut off from the
/// manager and keep their floor-only leases. The pods' 400 fit the new floor plus that DC lease,
/// so the manager reports `floor_in_use` 200 with the newest floor version, and B stops
/// reserving 400. With its pods silent BKK's demand falls, B shrinks its lease, and the last DC
/// lease that covered the pods leaves B's books 2.27 s after it was issued, while the pods may
/// spend 400 until 5 s after their last report. Europe then asks for more and gets all but 200.
///
/// The rule at fault: `DcManagerCore::floor_in_use` (`dc_manager/floors.rs`) lets "the DC
/// leases the coordinator still counts" cover pod leases that may outlive those DC leases.
#[test]
fn a_lowered_floor_is_confirmed_only_once_pod_leases_cut_from_the_old_floor_cannot_outlive_what_covers_them() {
    let (worst, q) = floor_confirmed_while_floor_leases_outlive_the_dc_lease(KnownBugs::default());
    assert!(worst.fits_in(&q), "BKK's pods and Europe held {worst} > {q}");
}

#[test]
fn negative_control_confirming_a_floor_by_amount_alone_lets_floor_leases_outlive_their_cover() {
    let bugs = KnownBugs { ack_by_amount_only: true, ..KnownBugs::default() };
    let (worst, q) = floor_confirmed_while_floor_leases_outlive_the_dc_lease(bugs);
    assert!(!worst.fits_in(&q), "the old rule went unnoticed: {worst}");
}

/// The most BKK's pods and Europe held together, and the limit.
fn floor_confirmed_while_floor_leases_outlive_the_dc_lease(bugs: KnownBugs) -> (Quota, Quota) {
    let q = Quota::per_s(1_000, 20);
    // BKK's floors hold a token for each of its two pods (a lease without one admits nothing).
    let a = CoordinatorCore::new(floor_burst(config_with_dc_ttl(q, 400, 0, 10_000), "bkk", 2), "coord-a", 1);
    let (floor, version) = a.record().floor_of("bkk").expect("named");
    let mut bkk = bkk(floor, version, [500, 500], bugs);
    let mut coord = a;
    let mut eu = Newest::default();
    let mut log = Vec::new();
    let (mut eu_seq, mut worst, mut t) = (0u64, Quota::ZERO, 0u64);
    let (takeover, end) = (6 * S, 14 * S);
    while t < end {
        if t == takeover {
            let after = floor_burst(config_with_dc_ttl(q, 200, 0, 2_000), "bkk", 2);
            coord = CoordinatorCore::resume(after, "coord-b", 2, Stored::Record(&coord.record()), t);
            log.push(format!("{:6.3}s term B (BKK floor 200, dc_ttl_ms 2,000) takes over; BKK reconnects", secs(t)));
        }
        let bkk_linked = t >= takeover;
        let reports = bkk.step(t);
        if t == takeover {
            // The manager has just renewed its pods from the floor alone (5 s, no DC lease to
            // nest in); they are cut off from it before term B's first DC lease arrives.
            bkk.pod_cut = vec![true, true];
            log.push(format!(
                "{:6.3}s both pods (holding {} until {:.3}s, cut from the floor alone) are cut off from their manager",
                secs(t),
                bkk.pods_hold(t),
                secs(bkk.pods[0].applied(t).map_or(0, |a| a.expires_at_ns))
            ));
        }
        for r in reports.into_iter().filter(|_| bkk_linked) {
            log.push(format!(
                "{:6.3}s bkk reports lease_in_use {:?} floor_in_use {:?} floor_version {:?}; B reserves {} for its floor",
                secs(t),
                r.lease_in_use.map(|v| v.to_string()),
                r.floor_in_use.map(|f| f.to_string()),
                r.floor_version.map(|v| v.to_string()),
                coord.floor_reserved("bkk", t)
            ));
            let out = coord.on_dc_report(&r, t);
            reach(&out, &mut eu, &mut bkk, true, t);
        }
        eu_seq += 1;
        // Europe asks for little until BKK's lease has shrunk, then for everything.
        let eu_demand = if t < 9 * S { 100 } else { 2_000 };
        let out = coord.on_dc_report(&eu_report_asking(eu_seq, eu.version(), eu_demand), t);
        reach(&out, &mut eu, &mut bkk, bkk_linked, t);
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            log_dc_leases(&out, t, &mut log);
            reach(&out, &mut eu, &mut bkk, bkk_linked, t);
        }
        sample_bkk_and(&bkk, "europe's lease", |now| eu.spendable(now), t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    (worst, q)
}

// -------------------------------------------------------------------------------------------
// A new DC-manager term acks a smaller DC lease by counting on the floor during its quiet
// period, while the previous term's pods still spend that floor
// -------------------------------------------------------------------------------------------

/// BKK's floor is 400. BKK's link to the coordinator is down until 7 s, so term A of its
/// manager splits the floor alone between pods `p1` and `p2` (200 + 200, 5 s leases, the last
/// renewed at 6 s: until 11 s). At 7 s A crashes, the link heals and term B takes over; `p1`
/// and `p2` have lost their link to BKK's managers (a pod↔DC partition) and keep spending A's
/// floor leases. During its quiet period (until ~12.3 s) B uses no floor, only its DC lease,
/// which it splits between `p3` and `p4`: 500 at 8.5 s (250 each until 13.5 s). At 9 s Europe
/// asks for more: the coordinator shrinks BKK's lease to 300; as it reaches B, `p3` and `p4` are
/// cut off from B and keep their 500. B's report at 9.25 s acks the 300 lease, because 500 fits
/// "floor (400) + 300" and no pod lease outlives it; the coordinator stops counting the 500 lease
/// and at 9.5 s grows Europe to 300. The floor that "covers" `p3` and `p4` is the one `p1` and
/// `p2` spend: 400 + 500 + 300 = 1,200/s against 1,000/s from 9.5 s to 11 s.
///
/// The rule at fault: `DcManagerCore::report` (the `covers` closure, dc_manager/mod.rs) counts
/// the floor as cover for this term's pods even before `floor_usable_from_ns`, when pods of an
/// earlier term may still spend all of it.
#[test]
fn a_new_term_never_counts_the_floor_as_cover_for_an_ack_during_its_quiet_period() {
    let q = Quota::per_s(1_000, 20);
    let mut coord = CoordinatorCore::new(config(q, 400, 0), "coord", 1);
    let (floor, fv) = coord.record().floor_of("bkk").expect("named");
    let mut a = term("bkk-mgr-a", 1, 0, &["p1", "p2"]);
    a.mgr.on_floor(floor, fv, 0);
    let crash = 7 * S;
    let mut b: Option<Dc> = None;
    let mut eu = Newest::default();
    let mut log = Vec::new();
    let (mut eu_seq, mut worst, mut t) = (0u64, Quota::ZERO, 0u64);
    let end = 14 * S;
    while t < end {
        if t < crash {
            // Term A never hears from the coordinator (its DC link is down): floor only.
            a.step(t);
        }
        if t == crash {
            a.pod_cut = vec![true, true];
            log.push(format!(
                "{:6.3}s term A crashes; p1, p2 (holding {} from the floor, until {:.3}s) lose their link to BKK's managers",
                secs(t),
                a.pods_hold(t),
                secs(a.pods[0].applied(t).map_or(0, |l| l.expires_at_ns))
            ));
            let mut term_b = term("bkk-mgr-b", 2, t, &["p3", "p4"]);
            term_b.mgr.on_floor(floor, fv, t);
            b = Some(term_b);
        }
        if let Some(b) = b.as_mut() {
            for r in b.step(t) {
                log.push(format!(
                    "{:6.3}s term B reports lease_in_use {:?} floor_in_use {:?}; coordinator reserves {} for BKK's floor",
                    secs(t),
                    r.lease_in_use.map(|v| v.to_string()),
                    r.floor_in_use.map(|f| f.to_string()),
                    coord.floor_reserved("bkk", t)
                ));
                let out = coord.on_dc_report(&r, t);
                for l in &out {
                    log.push(format!("{:6.3}s   -> {} gets DC lease {} {}", secs(t), l.dc, l.version, l.quota));
                }
                b.on_dc_leases(&out, t);
                eu.absorb("eu", &out, t);
            }
        }
        eu_seq += 1;
        let eu_demand = if t < 9 * S { 100 } else { 2_000 };
        let out = coord.on_dc_report(&eu_report_asking(eu_seq, eu.version(), eu_demand), t);
        for l in &out {
            log.push(format!("{:6.3}s   europe's report -> {} gets DC lease {} {}", secs(t), l.dc, l.version, l.quota));
        }
        eu.absorb("eu", &out, t);
        if let Some(b) = b.as_mut() {
            b.on_dc_leases(&out, t);
        }
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            log_dc_leases(&out, t, &mut log);
            if let Some(b) = b.as_mut() {
                let shrinks = out.iter().any(|l| l.dc == "bkk" && t >= 9 * S);
                if shrinks && !b.pod_cut[0] {
                    // p3 and p4 are cut off from B as the smaller lease arrives.
                    b.pod_cut = vec![true, true];
                    log.push(format!(
                        "{:6.3}s p3, p4 (holding {} until {:.3}s) are cut off from term B",
                        secs(t),
                        b.pods_hold(t),
                        secs(b.pods[0].applied(t).map_or(0, |l| l.expires_at_ns))
                    ));
                }
                b.on_dc_leases(&out, t);
            }
            eu.absorb("eu", &out, t);
        }
        sample_held(t, 250 * MS, q, &mut worst, &mut log, |now| {
            let (term_a, term_b) = (a.pods_hold(now), b.as_ref().map_or(Quota::ZERO, |b| b.pods_hold(now)));
            let europe = eu.spendable(now);
            let parts = format!("p1+p2 (term A) hold {term_a}, p3+p4 (term B) hold {term_b}, europe's lease {europe}");
            (term_a.saturating_add(term_b).saturating_add(europe), parts)
        });
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    assert!(worst.fits_in(&q), "BKK's pods and Europe held {worst} > {q}");
}
