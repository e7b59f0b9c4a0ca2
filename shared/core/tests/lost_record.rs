//! A leader that finds the ledger record lost (`Stored::Lost`: the fence shows a record was
//! written) waits one DC-lease lifetime before it issues, and names and counts floors only as far
//! as the lost record's live leases allow. Holes the fifth and sixth outside reviews found, each
//! driven through the real sans-I/O cores and asserting the safe outcome (so each test fails
//! while the hole is open).
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew).

use leasehold_core::coordinator::{CoordinatorCore, Stored};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{LedgerFence, LedgerRecord};

use crate::support;
use support::world::{deliver, print_run, sample, sample_bkk_and, Dc};
use support::{config, secs, MS, S};

/// The floor `rec` names for `dc` and its version, for a test's log.
fn named_floor(rec: &LedgerRecord, dc: &str) -> Option<(String, String)> {
    rec.floor_of(dc).map(|(f, v)| (f.to_string(), v.to_string()))
}

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
                named_floor(&coord.record(), "eu"),
                named_floor(&coord.record(), "bkk"),
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

// -------------------------------------------------------------------------------------------
// 2. After a lost record's wait, a floor is raised up to the fence's historical maximum because
//    that maximum (reserved at e0v0) counts as the floor holder's own claim
// -------------------------------------------------------------------------------------------

/// R = 1,000/s. Term 1 runs with floors BKK 800, Europe 200 (the fence records them). Term 2
/// moves the floor: BKK 200, Europe 800; BKK confirms, Europe's raise goes through, Europe's pods
/// spend 800 from the floor. Term 2's record is lost at 12 s and Europe is cut off from the
/// coordinator from then on (it keeps its last floor, 800, as floors never expire). Term 3 takes
/// over with term 1's configuration (BKK 800, Europe 200). It reserves the fence's `floors_max`
/// at e0v0 for each DC (BKK 800, Europe 800: already 1,600 against 1,000) and names zero. Once
/// the wait is over, `settle_floors` raises BKK's floor to 800: `Ledger::grantable` lets a holder
/// go up to its *current claim* whatever the headroom, and BKK's claim is the e0v0 entry (800), a
/// historical maximum BKK was not using. BKK's pods split 800 while Europe's still spend 800.
#[test]
fn a_floor_raised_after_a_lost_records_wait_never_counts_the_fences_historical_maximum_as_its_own_room() {
    let q = Quota::per_s(1_000, 20);
    let mut log = Vec::new();
    let c1 = CoordinatorCore::new(config(q, 800, 200), "coord1", 1);
    let fence1 = LedgerFence::raised(None, 1, 10_000);
    let fence1 = fence1.covering(&c1.record()).unwrap_or(fence1);
    let mut coord = CoordinatorCore::resume(config(q, 200, 800), "coord2", 2, Stored::Record(&c1.record()), 0);
    let mut fence = LedgerFence::raised(Some(&fence1), 2, 10_000);
    let mut bkk = Dc::new("bkk", "bkk-mgr-a", 1, 0);
    let mut eu = Dc::new("eu", "eu-mgr-a", 1, 0);
    bkk.on_record(&coord, 0);
    eu.on_record(&coord, 0);
    let loss = 12 * S;
    let end = 30 * S;
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == loss {
            log.push(format!(
                "{:6.3}s record of term 2 lost (names bkk {:?}, eu {:?}); fence floors_max {:?}; pods hold bkk {} eu {}",
                secs(t),
                named_floor(&coord.record(), "bkk"),
                named_floor(&coord.record(), "eu"),
                fence.floors_of("api"),
                bkk.pods_hold(t),
                eu.pods_hold(t),
            ));
            coord = CoordinatorCore::resume(config(q, 800, 200), "coord3", 3, Stored::Lost(&fence), t);
            log.push(format!(
                "{:6.3}s term 3 (floors bkk 800, eu 200) issues from {:.3}s; europe cut off from now on",
                secs(t),
                secs(coord.issues_from_ns())
            ));
        }
        let cut = t >= loss;
        let mut reports = bkk.step(t);
        let eu_reports = eu.step(t);
        if !cut {
            reports.extend(eu_reports);
        }
        deliver(&mut coord, reports, &mut [&mut bkk], t);
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            bkk.on_dc_leases(&out, t);
            if !cut {
                eu.on_dc_leases(&out, t);
            }
            bkk.on_record(&coord, t);
            if !cut {
                eu.on_record(&coord, t);
                if let Some(f) = fence.covering(&coord.record()) {
                    fence = f;
                }
            }
            log.push(format!(
                "{:6.3}s record names bkk {:?} eu {:?}; reserved bkk {} eu {}",
                secs(t),
                named_floor(&coord.record(), "bkk"),
                named_floor(&coord.record(), "eu"),
                coord.floor_reserved("bkk", t),
                coord.floor_reserved("eu", t),
            ));
        }
        sample(&bkk, &eu, t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}

// -------------------------------------------------------------------------------------------
// 3. A leader that resumes from a record written during a lost record's wait does not wait:
//    the wait is not on record, so a crash during it ends it
// -------------------------------------------------------------------------------------------

/// R = 1,000/s, floors BKK 200, Europe 200. Term 1 gives BKK (busy) a 600 DC lease; Europe is
/// idle. At 12 s term 1's record is lost and BKK is cut off from the coordinator (its manager
/// keeps spending its DC lease until it ends, ~22 s, as it may). Term 2 finds the record lost and
/// rightly waits until ~22.35 s; it writes its record at once (no leases, floors named zero,
/// reserved 200 each). Term 2 crashes at 14 s. Term 3 resumes from *term 2's record*
/// (`Stored::Record`), so it does not wait: it names the floors again at once and, Europe now
/// being busy, gives Europe a 600 DC lease while BKK's pods still spend term 1's 600.
#[test]
fn a_leader_resuming_from_a_record_written_during_a_lost_records_wait_still_waits_it_out() {
    let q = Quota::per_s(1_000, 20);
    let cfg = || config(q, 200, 200);
    let mut log = Vec::new();
    let mut coord = CoordinatorCore::new(cfg(), "coord1", 1);
    let mut fence = LedgerFence::raised(None, 1, 10_000);
    if let Some(f) = fence.covering(&coord.record()) {
        fence = f;
    }
    let mut bkk = Dc::new("bkk", "bkk-mgr-a", 1, 0);
    let mut eu = Dc::new("eu", "eu-mgr-a", 1, 0);
    eu.offer(0);
    bkk.on_record(&coord, 0);
    eu.on_record(&coord, 0);
    let (loss, crash, end) = (12 * S, 14 * S, 26 * S);
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == loss {
            log.push(format!(
                "{:6.3}s term 1's record lost; bkk cut off; bkk's DC lease {:?}; pods hold bkk {} eu {}",
                secs(t),
                bkk.mgr.current_lease(t).map(|l| (l.version.to_string(), l.quota.to_string(), secs(l.expires_at_ns))),
                bkk.pods_hold(t),
                eu.pods_hold(t),
            ));
            coord = CoordinatorCore::resume(cfg(), "coord2", 2, Stored::Lost(&fence), t);
            log.push(format!("{:6.3}s term 2 (record lost) issues from {:.3}s", secs(t), secs(coord.issues_from_ns())));
            eu.offer(2_000);
        }
        if t == crash {
            let rec2 = coord.record();
            log.push(format!(
                "{:6.3}s term 2 crashes; its record names bkk {:?} eu {:?}, {} leases",
                secs(t),
                named_floor(&rec2, "bkk"),
                named_floor(&rec2, "eu"),
                rec2.leases.len()
            ));
            coord = CoordinatorCore::resume(cfg(), "coord3", 3, Stored::Record(&rec2), t);
            log.push(format!(
                "{:6.3}s term 3 resumes from it; issues from {:.3}s",
                secs(t),
                secs(coord.issues_from_ns())
            ));
        }
        let cut = t >= loss;
        let mut reports = eu.step(t);
        let bkk_reports = bkk.step(t);
        if !cut {
            reports.extend(bkk_reports);
        }
        if cut {
            deliver(&mut coord, reports, &mut [&mut eu], t);
        } else {
            deliver(&mut coord, reports, &mut [&mut eu, &mut bkk], t);
        }
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            for l in &out {
                log.push(format!("{:6.3}s {} gets DC lease {} {}", secs(t), l.dc, l.version, l.quota));
            }
            eu.on_dc_leases(&out, t);
            eu.on_record(&coord, t);
            if !cut {
                bkk.on_dc_leases(&out, t);
                bkk.on_record(&coord, t);
            }
            if let Some(f) = fence.covering(&coord.record()) {
                fence = f;
            }
        }
        sample(&bkk, &eu, t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}
