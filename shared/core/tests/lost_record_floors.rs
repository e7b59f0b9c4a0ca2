//! A leader that finds the ledger record lost reserves for each DC the largest floor any record
//! named (the fence's `floors_max`) under a holder of its own until that DC confirms a floor named
//! since, names every floor zero until its wait is over, and never counts the lost floor as room
//! for raising a DC's floor; a lost floor stays out of the others' share even for a DC dropped
//! from the definition (docs/FINDINGS.md#f18, docs/FINDINGS.md#f22, docs/FINDINGS.md#f23,
//! docs/FINDINGS.md#f40). Each test drives the real cores and asserts the safe outcome.
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew).

use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::quota::Quota;
use leasehold_core::wire::LedgerFence;

use crate::support;
use support::world::{deliver, print_run, sample, sample_bkk_and, Dc};
use support::{config, dc_report, floor_burst, named_floor, secs, MS, S};

// -------------------------------------------------------------------------------------------
// A leader that finds the ledger record lost names, during its wait, a floor the lost record
// no longer named (the fence's historical maximum), while the lost record's DC leases live
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
// After a lost record's wait, a floor is raised up to the fence's historical maximum because
// that maximum (reserved at e0v0) counts as the floor holder's own claim
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
// A lost ledger record and floors (storm seed 27 once records could be lost: FINDINGS F18).
// -------------------------------------------------------------------------------------------

/// Term A names BKK's floor 400; BKK is cut off and keeps spending it. The record is lost and
/// term B starts with BKK's floor lowered to 200 and Europe's raised from 0 to 300. From the
/// fence alone, B must keep counting BKK's 400 until BKK confirms the lower floor, and must name
/// no floor above zero while the lost record's leases may still be live.
#[test]
fn a_leader_without_a_record_counts_the_largest_floors_the_fence_says_were_named() {
    let q = Quota::per_s(1_000, 20);
    let a = CoordinatorCore::new(config(q, 400, 0), "coord-a", 1);
    let fence = LedgerFence::raised(None, 1, a.config().dc_ttl_ms);
    let fence = fence.covering(&a.record()).expect("the first record names floors");
    let after = config(q, 200, 300);
    let t0 = 5 * S;
    let fence = LedgerFence::raised(Some(&fence), 2, after.dc_ttl_ms);
    let mut b = CoordinatorCore::resume(after, "coord-b", 2, Stored::classify("api", None, Some(&fence)), t0);
    assert_eq!(b.floor_reserved("bkk", t0), Quota::per_s(400, 0), "the floor BKK may still spend counts");
    let named = |b: &CoordinatorCore, dc| b.floor_named(dc).map_or(Quota::ZERO, |(f, _)| f);
    let mut t = t0;
    while t < b.issues_from_ns() {
        b.tick(t);
        // Nothing is named above zero: a new manager term must not take a floor the lost
        // record may no longer have named while its DC leases are still live.
        assert!(named(&b, "eu").is_zero(), "Europe's floor went up to {} during the wait", named(&b, "eu"));
        assert!(named(&b, "bkk").is_zero(), "BKK's floor was named {} during the wait", named(&b, "bkk"));
        t += 250 * MS;
    }
    b.tick(t);
    assert_eq!(named(&b, "eu"), Quota::per_s(300, 0), "raised once the wait is over");
    assert_eq!(named(&b, "bkk"), Quota::per_s(200, 0));
    // The lost record's 400 is reserved apart from the 200 named now, until BKK confirms.
    assert_eq!(b.floor_reserved("bkk", t), Quota::per_s(600, 0), "until BKK confirms");
    // BKK comes back and reports the floor B names: only then does its 400 stop counting.
    let named = b.floor_named("bkk");
    b.on_dc_report(&dc_report("bkk", 1, None, named), t);
    assert_eq!(b.floor_reserved("bkk", t + S), Quota::per_s(200, 0));
}

// -------------------------------------------------------------------------------------------
// A lost record's floor of a DC no longer in the definition (found by an outside review of the
// change that made a lost floor count in the total but not among what lasts: FINDINGS F40).
//
// R = 1,000/s; floors BKK 100, Europe 200. Term 1 names both; Europe's manager takes its floor
// of 200 and spends it from then on. Europe is dropped from the definition and term 1's record
// is lost at 5 s: term 2 (BKK only) finds no record below the fence, so it counts the fence's
// floors as lost floors (Europe 200, BKK 100) and waits a DC-lease lifetime. Europe's reports
// are never heard again (it is not in the definition), so its lost floor stays. BKK is busy
// and grows into the rest. At 25 s R goes down to 800/s: every DC lease is inherited, and a
// renewal at the inherited level is bounded only by what lasts. Europe's 200 must still be kept
// out of BKK's share: from one DC-lease lifetime after the change, BKK's pods and Europe's
// floor hold at most 800/s.
// -------------------------------------------------------------------------------------------

fn bkk_only(quota: Quota) -> LimitConfig {
    let mut c = LimitConfig::new("api", quota, &[("bkk", Quota::per_s(100, 2))]);
    c.expiry.egress_spread_ms = 150;
    c.validate().expect("a valid configuration");
    c
}

#[test]
fn a_dropped_dcs_lost_floor_stays_out_of_the_others_share_after_the_limit_is_lowered() {
    let q = Quota::per_s(1_000, 20);
    let lowered = Quota::per_s(800, 20);
    let mut log = Vec::new();
    // Each floor holds a token for each of its DC's two pods.
    let c1 = CoordinatorCore::new(floor_burst(floor_burst(config(q, 100, 200), "bkk", 2), "eu", 2), "coord1", 1);
    let fence = LedgerFence::raised(None, 1, 10_000);
    let fence = fence.covering(&c1.record()).unwrap_or(fence);
    let mut coord = c1;
    let mut bkk = Dc::new("bkk", "bkk-mgr-a", 1, 0);
    let mut eu = Dc::new("eu", "eu-mgr-a", 1, 0);
    bkk.on_record(&coord, 0);
    eu.on_record(&coord, 0);
    let (loss, lower, judge_from, end) = (5 * S, 25 * S, 40 * S, 60 * S);
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == loss {
            coord = CoordinatorCore::resume(bkk_only(q), "coord2", 2, Stored::Lost(&fence), t);
            log.push(format!(
                "{:6.3}s record lost; term 2 (BKK only) issues from {:.3}s",
                secs(t),
                secs(coord.issues_from_ns())
            ));
        }
        if t == lower {
            coord.reconfigure(bkk_only(lowered), t).expect("same limit");
            log.push(format!("{:6.3}s R lowered to 800/s", secs(t)));
        }
        let reports = bkk.step(t);
        let eu_reports = eu.step(t);
        if t < loss {
            deliver(&mut coord, eu_reports, &mut [&mut eu], t);
        }
        deliver(&mut coord, reports, &mut [&mut bkk], t);
        if t.is_multiple_of(S) {
            let out = coord.tick(t);
            bkk.on_dc_leases(&out, t);
            bkk.on_record(&coord, t);
            if t < loss {
                eu.on_dc_leases(&out, t);
                eu.on_record(&coord, t);
            }
        }
        if t >= judge_from {
            sample(&bkk, &eu, t, lowered, &mut worst, &mut log);
        }
        t += 250 * MS;
    }
    print_run(&log, worst, lowered);
    assert!(
        eu.pods_hold(end - S).rate_milli_per_s >= 190_000,
        "Europe still spends its floor: {}",
        eu.pods_hold(end - S)
    );
    assert!(worst.fits_in(&lowered), "BKK's pods and Europe's floor held {worst} > {lowered}");
}
