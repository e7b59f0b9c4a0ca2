//! Floors never expire: a DC cut off from the coordinator keeps spending the last floor it read,
//! so a floor lowered or moved away from it keeps counting until that DC confirms the new one
//! (docs/FINDINGS.md#f12), and a limit lowered below such a floor may be exceeded by that floor's
//! excess alone, never above the old limit (the documented exception: docs/FINDINGS.md#f17).

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{CoordinatorCore, Stored};
use leasehold_core::quota::Quota;
use leasehold_core::wire::LeaseVersion;

use crate::support;
use support::dc_report as report;
use support::{config, config_with_bugs, dc_report, first_term, secs, Held, Newest, MS, S};

/// 80% of BKK's floor moves to Europe while BKK is cut off: BKK keeps spending its old floor
/// (50) for 30 s, Europe asks for everything. Returns the most Europe's floor and lease plus
/// BKK's old floor ever reached, and the coordinator.
fn floor_moves_from_a_cut_off_dc(bugs: KnownBugs) -> (Quota, CoordinatorCore) {
    let q = Quota::per_s(1_000, 20);
    let rec = first_term(config_with_bugs(q, 50, 50, bugs));
    let t0 = 100 * S;
    let mut b = CoordinatorCore::resume(config_with_bugs(q, 10, 90, bugs), "coord-b", 2, Stored::Record(&rec), t0);
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

// -------------------------------------------------------------------------------------------
// R lowered below the floors a cut-off DC still uses (FINDINGS F17).
// -------------------------------------------------------------------------------------------

/// R goes down from 1,000 to 500 and the floors from 400 + 400 to 200 + 200 (a valid
/// configuration). Europe is cut off from the new coordinator term, so it keeps the last floor
/// it read (400): floors never expire, that is what lets a cut-off DC run on its own. So the
/// promise "from one DC-lease lifetime after the change none sees Σ above the new limit" holds
/// only with an exception, stated in ARCHITECTURE.md: until a DC confirms its lowered floor, Σ
/// may exceed the new limit by that floor's excess (here 200/s), never the old limit, and the
/// coordinator grants no DC lease meanwhile. Once Europe confirms, the new limit holds.
#[test]
fn a_lower_limit_is_exceeded_after_its_window_only_by_floors_a_cut_off_dc_has_not_confirmed() {
    let old_r = Quota::per_s(1_000, 20);
    let mut a = CoordinatorCore::new(config(old_r, 400, 400), "coord-a", 1);
    a.on_dc_report(&dc_report("bkk", 1, None, None), 0);
    a.on_dc_report(&dc_report("eu", 1, None, None), 0);
    let mut bkk = Newest::default();
    bkk.absorb("bkk", &a.tick(0), 0);
    let rec = a.record();
    let eu_old_floor = rec.floors["eu"];
    let t0 = 20 * S;
    let after = config(Quota::per_s(500, 20), 200, 200);
    let window_end = after.expiry.issuer_live_until_ns(t0, after.dc_ttl_ms);
    let new_r = after.quota;
    let unconfirmed_excess = Quota::per_s(200, 0);
    let mut c = CoordinatorCore::resume(after, "coord-c", 2, Stored::Record(&rec), t0);
    let (reconnect, end) = (t0 + 60 * S, t0 + 70 * S);
    let (mut cut_off_worst, mut reconnected_worst) = (Quota::ZERO, Quota::ZERO);
    let (mut t, mut seq, mut eu_floor) = (t0, 1, eu_old_floor);
    while t < end {
        seq += 1;
        // BKK reports the floor it uses: the new one once it has read it (at once here).
        let out = c.on_dc_report(&dc_report("bkk", seq, bkk.version(), c.floor_named("bkk")), t);
        bkk.absorb("bkk", &out, t);
        if t >= reconnect {
            // Europe is back: it reads the record and reports the lowered floor it now uses.
            let named = c.floor_named("eu");
            eu_floor = named.expect("named").0;
            c.on_dc_report(&dc_report("eu", seq, None, named), t);
        }
        if t.is_multiple_of(S) {
            bkk.absorb("bkk", &c.tick(t), t);
        }
        let bkk_floor = c.floor_named("bkk").expect("named").0;
        let total = eu_floor.saturating_add(bkk_floor).saturating_add(bkk.spendable(t));
        assert!(total.fits_in(&old_r), "{total} > the old limit at {:.2}s", secs(t));
        assert!(total.fits_in(&c.ledger().outstanding(t)), "the books count less than is spendable");
        if t >= window_end && t < reconnect {
            cut_off_worst = cut_off_worst.max(total);
        }
        if t >= reconnect + 2 * S {
            reconnected_worst = reconnected_worst.max(total);
        }
        t += 250 * MS;
    }
    println!("cut off: most {cut_off_worst}; reconnected: most {reconnected_worst}; new limit {new_r}");
    assert!(
        cut_off_worst.fits_in(&new_r.saturating_add(unconfirmed_excess)),
        "{cut_off_worst} > the new limit plus Europe's unconfirmed excess"
    );
    assert!(reconnected_worst.fits_in(&new_r), "{reconnected_worst} > the new limit once Europe confirmed");
}
