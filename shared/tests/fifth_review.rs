//! Holes a fifth outside review found, each driven through the real sans-I/O cores and
//! asserting the safe outcome (so each test fails while the hole is open).
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew).

use leasehold_shared::coordinator::{CoordinatorCore, Stored};
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::LedgerFence;

mod support;
use support::world::{print_run, sample_bkk_and, Dc};
use support::{config, secs, MS, S};

// -------------------------------------------------------------------------------------------
// 1. A leader that finds the ledger record lost names, during its wait, a floor the lost record
//    no longer named (the fence's historical maximum), while the lost record's DC leases live
// -------------------------------------------------------------------------------------------

/// R = 1,000/s. Term 1 of the coordinator runs with floors BKK 400, Europe 500 (the fence
/// records them). Term 2 moves Europe's floor to 0; Europe confirms, and BKK's DC lease grows to
/// 600 (BKK's pods hold 400 + 600 = 1,000). Term 2's record is lost at 12 s; term 3 takes over
/// with the configuration back at Europe 500. It finds no record below the fence, so it issues
/// nothing for a DC-lease lifetime (until ~22.3 s) and reserves the fence's `floors_max`. But
/// `settle_floors` during that wait wants `min(configured, reserved)` = min(500, 500) for
/// Europe, and the fence's entry is already named: the record names Europe's floor 500 at once.
/// A new Europe manager term (started with the takeover) takes it from the record and, after
/// its own quiet period (~17.3 s), splits 500 among its pods, while BKK's pods still spend the
/// lost record's 600 DC lease (until ~22 s) on top of BKK's 400 floor: 1,500/s against 1,000/s.
///
/// The rule at fault: `CoordinatorCore::settle_floors` (coordinator/floors.rs) treats the
/// fence's `floors_max` (the largest floor any record *ever* named) as a floor it may name during
/// the wait; the lost record named less, and its live DC leases used the difference.
#[test]
fn a_leader_without_a_record_names_no_floor_above_what_the_lost_record_named_during_its_wait() {
    let q = Quota::per_s(1_000, 20);
    let mut log = Vec::new();
    // Term 1: floors BKK 400, Europe 500; the fence covers its record.
    let c1 = CoordinatorCore::new(config(q, 400, 500), "coord1", 1);
    let rec1 = c1.record();
    let fence1 = LedgerFence::raised(None, 1, 10_000);
    let fence1 = fence1.covering(&rec1).unwrap_or(fence1);
    // Term 2: Europe's floor moves to 0.
    let mut coord = CoordinatorCore::resume(config(q, 400, 0), "coord2", 2, Stored::Record(&rec1), 0);
    let mut fence = LedgerFence::raised(Some(&fence1), 2, 10_000);
    if let Some(f) = fence.covering(&coord.record()) {
        fence = f;
    }
    log.push(format!("fence floors_max: {:?}", fence.floors_of("api")));
    let mut bkk = Dc::new("bkk", "bkk-mgr-a", 1, 0);
    bkk.on_record(&coord, 0);
    // Europe's manager of term 2's time: it takes the lowered floor and has no pods (demand 0).
    let mut eu_old = Dc::new("eu", "eu-mgr-a", 1, 0);
    eu_old.pods.clear();
    eu_old.on_record(&coord, 0);
    let loss = 12 * S;
    let end = 26 * S;
    let mut eu: Option<Dc> = None;
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == loss {
            log.push(format!(
                "{:6.3}s record of term 2 lost; reserved floors bkk {} eu {}; bkk's pods hold {}; bkk's DC lease {:?}",
                secs(t),
                coord.floor_reserved("bkk", t),
                coord.floor_reserved("eu", t),
                bkk.pods_hold(t),
                bkk.mgr.current_lease(t).map(|l| (l.quota.to_string(), secs(l.expires_at_ns)))
            ));
            coord = CoordinatorCore::resume(config(q, 400, 500), "coord3", 3, Stored::Lost(&fence), t);
            log.push(format!(
                "{:6.3}s term 3 issues from {:.3}s; its record names eu floor {:?}, bkk floor {:?}",
                secs(t),
                secs(coord.issues_from_ns()),
                coord.record().floor_of("eu").map(|(f, v)| (f.to_string(), v.to_string())),
                coord.record().floor_of("bkk").map(|(f, v)| (f.to_string(), v.to_string())),
            ));
            // Europe's manager fails over with the coordinator (a new term reads the record).
            let mut term = Dc::new("eu", "eu-mgr-b", 2, t);
            term.on_record(&coord, t);
            eu = Some(term);
        }
        let mut reports = bkk.step(t);
        if t < loss {
            reports.extend(eu_old.step(t));
        }
        if let Some(e) = eu.as_mut() {
            reports.extend(e.step(t));
        }
        for r in reports {
            let out = coord.on_dc_report(&r, t);
            bkk.on_dc_leases(&out, t);
            if let Some(e) = eu.as_mut() {
                e.on_dc_leases(&out, t);
            }
        }
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            for l in &out {
                log.push(format!(
                    "{:6.3}s {} gets DC lease {} {} (epoch {})",
                    secs(t),
                    l.dc,
                    l.version,
                    l.quota,
                    coord.epoch()
                ));
            }
            bkk.on_dc_leases(&out, t);
            if let Some(e) = eu.as_mut() {
                e.on_dc_leases(&out, t);
            }
            bkk.on_record(&coord, t);
            if let Some(e) = eu.as_mut() {
                e.on_record(&coord, t);
            }
        }
        let eu_holds = |now| eu.as_ref().map_or(Quota::ZERO, |e| e.pods_hold(now));
        sample_bkk_and(&bkk, "europe's pods hold", eu_holds, t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}
