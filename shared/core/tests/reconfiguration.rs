//! Reconfiguration never creates quota: a new coordinator term with a lower R or B, or with
//! floor moved between DCs, driven through the real cores. Lowering shrinks capacity at once,
//! grants wait until the old, larger leases are released or expired, and a floor a DC may still
//! spend keeps counting until the DC confirms it no longer does.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReport, LeaseVersion, PodLease, PodReport};
use std::collections::BTreeMap;

use crate::support;
use support::config_with_bugs as config;
use support::{Held, MS, S};

/// `floor`: the floor the DC's pods may spend under and the version of the newest floor taken.
fn report(dc: &str, seq: u64, ack: Option<LeaseVersion>, floor: Option<(Quota, LeaseVersion)>) -> DcReport {
    support::dc_report(dc, seq, ack, floor)
}

/// A first leader with `before`, both DCs asking for everything; the record it leaves behind.
fn first_term(before: LimitConfig) -> leasehold_core::wire::LedgerRecord {
    let mut a = CoordinatorCore::new(before, "coord-a", 1);
    a.on_dc_report(&report("bkk", 1, None, None), 0);
    a.on_dc_report(&report("eu", 1, None, None), 0);
    assert_eq!(a.tick(0).len(), 2);
    a.record()
}

/// 80% of BKK's floor moves to Europe while BKK is cut off: BKK keeps spending its old floor
/// (50) for 30 s, Europe asks for everything. Returns the most Europe's floor and lease plus
/// BKK's old floor ever reached, and the coordinator.
fn floor_moves_from_a_cut_off_dc(bugs: KnownBugs) -> (Quota, CoordinatorCore) {
    let q = Quota::per_s(1_000, 20);
    let rec = first_term(config(q, 50, 50, bugs));
    let t0 = 100 * S;
    let mut b = CoordinatorCore::resume(config(q, 10, 90, bugs), "coord-b", 2, Stored::Record(&rec), t0);
    let mut held = Held::default();
    let mut worst = Quota::ZERO;
    let (mut t, mut seq) = (t0, 1);
    while t < t0 + 30 * S {
        seq += 1;
        let floor = b.floor_named("eu");
        held.absorb(b.on_dc_report(&report("eu", seq, held.version("eu"), floor), t), t);
        held.absorb(b.tick(t), t);
        let eu = held.0.get("eu").map_or(Quota::ZERO, |(l, _)| l.quota);
        worst = worst.max(eu.saturating_add(b.record().floors["eu"]).saturating_add(Quota::per_s(50, 0)));
        t += 250 * MS;
    }
    (worst, b)
}

#[test]
fn a_floor_moved_away_from_a_cut_off_dc_keeps_counting_until_that_dc_confirms() {
    let (worst, mut b) = floor_moves_from_a_cut_off_dc(KnownBugs::default());
    assert!(worst.fits_in(&Quota::per_s(1_000, 20)), "Europe and BKK's old floor reached {worst}");
    let t = 130 * S;
    assert_eq!(b.floor_reserved("bkk", t), Quota::per_s(50, 0), "BKK never confirmed the lower floor");
    let rec = b.record();
    assert_eq!((rec.floors["bkk"], rec.floors_reserved["bkk"]), (Quota::per_s(10, 0), Quota::per_s(50, 0)));
    // BKK comes back: first still on its old floor, then on the new one.
    let (_, lowered) = b.floor_named("bkk").expect("named");
    b.on_dc_report(&report("bkk", 90, None, Some((Quota::per_s(50, 0), LeaseVersion::new(1, 0)))), t);
    assert_eq!(b.floor_reserved("bkk", t + S), Quota::per_s(50, 0));
    b.on_dc_report(&report("bkk", 91, None, Some((Quota::per_s(10, 0), lowered))), t + S);
    assert_eq!(b.floor_reserved("bkk", t + S), Quota::per_s(50, 0), "in-flight calls: the egress hold");
    assert_eq!(b.floor_reserved("bkk", t + 2 * S), Quota::per_s(10, 0));
    assert_eq!(b.ledger().check(t + 2 * S), Ok(()));
}

#[test]
fn negative_control_a_floor_change_at_once_spends_the_moved_floor_twice() {
    let (worst, _) = floor_moves_from_a_cut_off_dc(KnownBugs { floor_change_at_once: true, ..KnownBugs::default() });
    assert!(!worst.fits_in(&Quota::per_s(1_000, 20)), "the old rule went unnoticed: {worst}");
}

#[test]
fn a_raised_floor_is_named_only_once_the_leases_that_used_its_room_are_released() {
    let q = Quota::per_s(1_000, 20);
    let rec = first_term(config(q, 50, 50, KnownBugs::default()));
    let t0 = 100 * S;
    let mut b =
        CoordinatorCore::resume(config(q, 50, 90, KnownBugs::default()), "coord-b", 2, Stored::Record(&rec), t0);
    assert_eq!(b.record().floors["eu"], Quota::per_s(50, 0), "no room yet: the old leases fill it");
    let mut held = Held::default();
    let (mut t, mut seq) = (t0, 1);
    while b.record().floors["eu"] != Quota::per_s(90, 0) && t < t0 + 20 * S {
        seq += 1;
        for dc in ["bkk", "eu"] {
            let floor = b.floor_named(dc);
            held.absorb(b.on_dc_report(&report(dc, seq, held.version(dc), floor), t), t);
        }
        held.absorb(b.tick(t), t);
        let floors = Quota::per_s(50, 0).saturating_add(b.record().floors["eu"]);
        let books = b.ledger().outstanding(t);
        assert!(books.fits_in(&q), "{books} on the books at {} ms", (t - t0) / MS);
        let spendable = held.spendable(t).saturating_add(floors);
        assert!(spendable.fits_in(&q), "the DCs may spend {spendable} at {} ms", (t - t0) / MS);
        t += 250 * MS;
    }
    assert_eq!(b.record().floors["eu"], Quota::per_s(90, 0), "the raise is granted once there is room");
}

/// R goes down from 1,000 to 600. Both DCs renew at 300, then Europe is cut off 2 s later and
/// BKK (whose pods are slow to shrink, so it never confirms) is offered everything. Returns the
/// most the DCs' newest leases sum to once one DC-lease lifetime has passed since the change,
/// and whether the books were within their capacity (and inherited ceiling) at every step.
fn a_lower_limit_after_its_window(bugs: KnownBugs) -> (Quota, bool) {
    let rec = first_term(config(Quota::per_s(1_000, 20), 0, 0, bugs));
    let t0 = 100 * S;
    let after = config(Quota::per_s(600, 20), 0, 0, bugs);
    let window_end = after.expiry.issuer_live_until_ns(t0, after.dc_ttl_ms);
    let mut b = CoordinatorCore::resume(after, "coord-b", 2, Stored::Record(&rec), t0);
    assert_eq!(b.ledger().check(t0), Ok(()), "the old leases exist: counting them is no breach");
    let mut held = Held::default();
    let (mut worst, mut books_ok) = (Quota::ZERO, true);
    let (mut t, mut seq) = (t0, 1);
    while t < t0 + 25 * S {
        seq += 1;
        held.absorb(b.on_dc_report(&report("bkk", seq, None, None), t), t);
        if t < t0 + 2 * S {
            held.absorb(b.on_dc_report(&report("eu", seq, held.version("eu"), None), t), t);
        }
        held.absorb(b.tick(t), t);
        books_ok &= b.ledger().check(t).is_ok();
        if t >= window_end {
            worst = worst.max(held.spendable(t));
        }
        t += 250 * MS;
    }
    (worst, books_ok)
}

#[test]
fn a_lower_limit_holds_one_dc_lease_lifetime_after_the_change() {
    let (worst, books_ok) = a_lower_limit_after_its_window(KnownBugs::default());
    assert!(worst.fits_in(&Quota::per_s(600, 20)), "{worst} after the window");
    assert!(worst.rate_milli_per_s > 0);
    assert!(books_ok);
}

#[test]
fn negative_control_renewing_at_an_inherited_claim_carries_the_old_limit_past_its_window() {
    let bugs = KnownBugs { renewal_reuses_inherited_claim: true, ..KnownBugs::default() };
    let (worst, books_ok) = a_lower_limit_after_its_window(bugs);
    assert!(!worst.fits_in(&Quota::per_s(600, 20)), "the old rule went unnoticed: {worst}");
    assert!(!books_ok, "the ledger's own check must see it too");
}

// ---- the DC manager's side ----

fn manager(bugs: KnownBugs) -> DcManagerCore {
    let mut cfg = DcManagerConfig::new("api", "bkk", "bkk-mgr");
    cfg.bugs = bugs;
    cfg.pod_ttl_ms = 2_000;
    DcManagerCore::new(cfg, 0)
}

fn pod_report(pod: &str, seq: u64, ack: Option<LeaseVersion>) -> PodReport {
    support::scripted::pod_report(pod, 1, seq, (500, 50), true, ack)
}

fn floor_reported(out: &[DcOutput]) -> Option<Option<Quota>> {
    out.iter().find_map(|o| match o {
        DcOutput::Report(r) => Some(r.floor_in_use),
        _ => None,
    })
}

#[test]
fn a_delayed_record_never_brings_an_older_floor_back() {
    let run = |bugs| {
        let mut m = manager(bugs);
        m.on_floor(Quota::per_s(50, 0), LeaseVersion::new(2, 1), 0);
        m.on_floor(Quota::per_s(20, 0), LeaseVersion::new(3, 4), S);
        m.on_floor(Quota::per_s(50, 0), LeaseVersion::new(2, 1), 2 * S); // the first record, late
        m.budget(10 * S).0
    };
    assert_eq!(run(KnownBugs::default()), Quota::per_s(20, 0));
    assert_eq!(run(KnownBugs { dc_takes_any_floor: true, ..KnownBugs::default() }), Quota::per_s(50, 0));
}

#[test]
fn a_manager_reports_the_old_floor_until_its_pods_fit_the_new_one() {
    let mut m = manager(KnownBugs::default());
    m.on_floor(Quota::per_s(50, 2), LeaseVersion::new(2, 1), 0);
    assert_eq!(floor_reported(&m.tick(0)), Some(None), "quiet period: earlier terms' pods may use any floor");
    // After the quiet period two pods share the floor (no DC lease: BKK is cut off).
    let mut leases: BTreeMap<String, PodLease> = BTreeMap::new();
    let mut seq = 0;
    let mut step = |m: &mut DcManagerCore, leases: &mut BTreeMap<String, PodLease>, now: u64| {
        seq += 1;
        for pod in ["p1", "p2"] {
            let ack = leases.get(pod).map(|l| l.version);
            for o in m.on_pod_report(&pod_report(pod, seq, ack), now) {
                if let DcOutput::PodLease(l) = o {
                    leases.insert(l.pod.to_string(), l);
                }
            }
        }
    };
    let t = 5 * S;
    for i in 0..4 {
        step(&mut m, &mut leases, t + i * 250 * MS);
    }
    let spent = leases.values().fold(Quota::ZERO, |s, l| s.saturating_add(l.quota));
    assert_eq!(spent, Quota::per_s(50, 2));
    assert_eq!(floor_reported(&m.tick(t + S)), Some(Some(Quota::per_s(50, 2))));
    // The floor goes down to 20: the pods still hold 50 until they confirm their smaller leases.
    let mut out = m.on_floor(Quota::per_s(20, 2), LeaseVersion::new(3, 1), t + S);
    out.extend(m.tick(t + S + MS));
    assert_eq!(floor_reported(&out), Some(Some(Quota::per_s(50, 2))));
    for o in out {
        if let DcOutput::PodLease(l) = o {
            leases.insert(l.pod.to_string(), l);
        }
    }
    step(&mut m, &mut leases, t + 2 * S);
    assert_eq!(floor_reported(&m.tick(t + 3 * S)), Some(Some(Quota::per_s(20, 2))));
}

/// Storm seed 72 (after `LimitChange` joined the schedule), reduced: R drops (term 2 inherits
/// term 1's leases and renews Europe within the new R), then a plain takeover without any change
/// (term 3) while Europe is cut off. Term 3 must count Europe's term-2 lease as lasting, not
/// inherited: else it renews BKK at its inherited level beside it, and once term 1's leases are
/// gone the DCs hold more than the new R.
fn takeover_after_a_shrink(bugs: KnownBugs) -> Quota {
    let rec1 = first_term(config(Quota::per_s(1_000, 20), 50, 50, bugs));
    let after = || config(Quota::per_s(600, 20), 50, 50, bugs);
    let mut held = Held::default();
    held.absorb(rec1.leases.clone(), 0);
    let mut b = CoordinatorCore::resume(after(), "coord-b", 2, Stored::Record(&rec1), S);
    b.on_dc_report(&report("eu", 2, held.version("eu"), None), S);
    held.absorb(b.tick(S), S);
    let rec2 = b.record();
    let mut c = CoordinatorCore::resume(after(), "coord-c", 3, Stored::Record(&rec2), 2 * S);
    let mut worst = Quota::ZERO;
    for k in 0..30u64 {
        let now = 2 * S + k * S;
        // Europe is cut off from term 3: it keeps spending its term-2 lease and never reports.
        c.on_dc_report(&report("bkk", 3 + k, held.version("bkk"), None), now);
        held.absorb(c.tick(now).into_iter().filter(|l| l.dc == "bkk").collect(), now);
        // Once term 1's leases (granted at 0) have ended, the new R holds.
        for t in (0..4).map(|q| now + q * 250 * MS).filter(|&t| t > 10 * S) {
            worst = worst.max(held.spendable(t));
        }
    }
    worst
}

#[test]
fn a_plain_takeover_keeps_the_leases_granted_since_a_shrink_lasting() {
    let worst = takeover_after_a_shrink(KnownBugs::default());
    // Leases above the floors (50 + 50 of the 600 stay reserved).
    assert!(worst.fits_in(&Quota::per_s(500, 20)), "DC leases reached {worst} above the floors");
}

/// Storm seed 136, reduced: a new manager term reads floor 50 and is still in its quiet period
/// at its first reports (`floor_in_use: None`); once the quiet period is over a pod report makes
/// it cut a 50/s pod lease from the floor, and the lowered floor (20) arrives before its next
/// report. The pod still holds 50 until it confirms a smaller lease: the report must say 50, or
/// the coordinator stops reserving the old floor while the pod spends it.
#[test]
fn a_floor_used_between_two_reports_is_reported_after_it_is_lowered() {
    let mut m = manager(KnownBugs::default());
    m.on_floor(Quota::per_s(50, 2), LeaseVersion::new(2, 1), 0);
    assert_eq!(floor_reported(&m.tick(0)), Some(None), "quiet period");
    let t = 5 * S;
    let mut held = Quota::ZERO;
    for o in m.on_pod_report(&pod_report("p1", 1, None), t) {
        if let DcOutput::PodLease(l) = o {
            held = l.quota;
        }
    }
    assert_eq!(held, Quota::per_s(50, 2), "the pod's lease is cut from the whole floor");
    // No report went out since: the floor goes down to 20, then the next report.
    let mut out = m.on_floor(Quota::per_s(20, 2), LeaseVersion::new(3, 1), t + 10 * MS);
    out.extend(m.tick(t + 20 * MS));
    let reported = floor_reported(&out).flatten();
    eprintln!("pod holds {held}; manager reports floor_in_use {reported:?}");
    assert_eq!(reported, Some(Quota::per_s(50, 2)), "the pod may still spend the old floor");
    // What the coordinator would do with that report: the old floor must keep counting.
    let q = Quota::per_s(1_000, 20);
    let bkk_tokens = |c| support::floor_burst(c, "bkk", 2);
    let rec = first_term(bkk_tokens(config(q, 50, 50, KnownBugs::default())));
    let after = bkk_tokens(config(q, 20, 80, KnownBugs::default()));
    let mut c = CoordinatorCore::resume(after, "coord-b", 2, Stored::Record(&rec), t);
    c.on_dc_report(&report("bkk", 9, None, reported.map(|f| (f, LeaseVersion::new(3, 1)))), t + 30 * MS);
    let reserved = c.floor_reserved("bkk", t + S);
    eprintln!("coordinator reserves {reserved} for bkk's floor while the pod holds {held}");
    assert!(held.fits_in(&reserved), "pod holds {held}, the books reserve {reserved}");
}
