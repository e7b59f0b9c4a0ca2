//! A lost record's floor of a DC no longer in the definition (found by an outside review of the
//! change that made a lost floor count in the total but not among what lasts).
//!
//! R = 1,000/s; floors BKK 100, Europe 200. Term 1 names both; Europe's manager takes its floor
//! of 200 and spends it from then on. Europe is dropped from the definition and term 1's record
//! is lost at 5 s: term 2 (BKK only) finds no record below the fence, so it counts the fence's
//! floors as lost floors (Europe 200, BKK 100) and waits a DC-lease lifetime. Europe's reports
//! are never heard again (it is not in the definition), so its lost floor stays. BKK is busy
//! and grows into the rest. At 25 s R goes down to 800/s: every DC lease is inherited, and a
//! renewal at the inherited level is bounded only by what lasts. Europe's 200 must still be kept
//! out of BKK's share: from one DC-lease lifetime after the change, BKK's pods and Europe's
//! floor hold at most 800/s.

use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::quota::Quota;
use leasehold_core::wire::LedgerFence;

use crate::support;
use support::world::{deliver, print_run, sample, Dc};
use support::{config, floor_burst, secs, MS, S};

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
