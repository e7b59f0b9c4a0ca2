//! Limits changed live: the leading term takes a new definition in place
//! (`CoordinatorCore::reconfigure`: limits as data, adaptive R, a limit removed), driven through
//! the real cores. Lowering never lets Σ above the old limit and holds the new one from one
//! DC-lease lifetime after the change; raising applies at once; versions keep rising; a floor
//! moved away from a cut-off DC keeps counting; a removed limit's leases end.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, ReconfigureError};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReport, LeaseVersion};

use crate::support;
use support::api_limit as cfg;
use support::config_with_bugs;
use support::{Held, MS, S};

fn config(quota: Quota, bkk_floor: u64, eu_floor: u64) -> LimitConfig {
    config_with_bugs(quota, bkk_floor, eu_floor, KnownBugs::default())
}

fn report(dc: &str, seq: u64, ack: Option<LeaseVersion>, floor: Option<(Quota, LeaseVersion)>) -> DcReport {
    support::dc_report(dc, seq, ack, floor)
}

/// A leader of `cfg` whose two DCs ask for everything and ack each lease, for 5 s.
fn leading(cfg: LimitConfig) -> (CoordinatorCore, Held, u64) {
    let mut a = CoordinatorCore::new(cfg, "coord-a", 1);
    let mut held = Held::default();
    let (mut t, mut seq) = (0, 0);
    while t < 5 * S {
        seq += 1;
        for dc in ["bkk", "eu"] {
            let floor = a.floor_named(dc);
            held.absorb(a.on_dc_report(&report(dc, seq, held.version(dc), floor), t), t);
        }
        held.absorb(a.tick(t), t);
        t += 250 * MS;
    }
    (a, held, seq)
}

/// R falls from 1,000 to 600 at `t0`. Europe acks for 2 s more, then goes silent; BKK never acks
/// again (its pods are slow to shrink). Returns the most the DCs' newest leases summed to at any
/// step, the most after one DC-lease lifetime, and whether the books held at every step.
fn lowered_live(bugs: KnownBugs) -> (Quota, Quota, bool) {
    let before = config_with_bugs(Quota::per_s(1_000, 20), 0, 0, bugs);
    let (mut a, mut held, mut seq) = leading(before.clone());
    let t0 = 5 * S;
    let after = config_with_bugs(Quota::per_s(600, 20), 0, 0, bugs);
    let window_end = before.expiry.issuer_live_until_ns(t0, before.dc_ttl_ms);
    assert_eq!(a.reconfigure(after, t0), Ok(true), "a lower R shrinks the books");
    let (mut worst, mut worst_after, mut books_ok) = (Quota::ZERO, Quota::ZERO, true);
    let mut t = t0;
    while t < t0 + 25 * S {
        seq += 1;
        held.absorb(a.on_dc_report(&report("bkk", seq, None, None), t), t);
        if t < t0 + 2 * S {
            held.absorb(a.on_dc_report(&report("eu", seq, held.version("eu"), None), t), t);
        }
        held.absorb(a.tick(t), t);
        books_ok &= a.ledger().check(t).is_ok();
        worst = worst.max(held.spendable(t));
        if t >= window_end {
            worst_after = worst_after.max(held.spendable(t));
        }
        t += 250 * MS;
    }
    (worst, worst_after, books_ok)
}

#[test]
fn a_limit_lowered_live_never_exceeds_the_old_one_and_holds_the_new_one_after_its_window() {
    let (worst, worst_after, books_ok) = lowered_live(KnownBugs::default());
    assert!(worst.fits_in(&Quota::per_s(1_000, 20)), "{worst} above the old limit");
    assert!(worst_after.fits_in(&Quota::per_s(600, 20)), "{worst_after} after the window");
    assert!(worst_after.rate_milli_per_s > 0, "BKK keeps a share of the new limit");
    assert!(books_ok);
}

#[test]
fn negative_control_a_live_lowering_that_renews_at_inherited_claims_carries_the_old_limit_on() {
    let bugs = KnownBugs { renewal_reuses_inherited_claim: true, ..KnownBugs::default() };
    let (_, worst_after, books_ok) = lowered_live(bugs);
    assert!(!worst_after.fits_in(&Quota::per_s(600, 20)), "the old rule went unnoticed: {worst_after}");
    assert!(!books_ok, "the ledger's own check must see it too");
}

#[test]
fn a_limit_raised_live_is_granted_at_the_next_tick_with_versions_still_rising() {
    let (mut a, mut held, seq) = leading(config(Quota::per_s(600, 20), 0, 0));
    let before: Vec<LeaseVersion> = ["bkk", "eu"].iter().filter_map(|dc| held.version(dc)).collect();
    let t0 = 5 * S;
    assert_eq!(a.reconfigure(config(Quota::per_s(1_000, 20), 0, 0), t0), Ok(false));
    for dc in ["bkk", "eu"] {
        held.absorb(a.on_dc_report(&report(dc, seq + 1, held.version(dc), None), t0), t0);
    }
    held.absorb(a.tick(t0), t0);
    assert_eq!(held.spendable(t0), Quota::per_s(1_000, 20), "the raise applies at once");
    for dc in ["bkk", "eu"] {
        let v = held.version(dc).unwrap();
        assert!(before.iter().all(|b| v > *b), "{dc}: {v:?} not above every earlier lease {before:?}");
        assert_eq!(v.epoch, 1, "same term");
    }
    assert_eq!(a.ledger().check(t0), Ok(()));
}

#[test]
fn a_floor_moved_live_away_from_a_cut_off_dc_keeps_counting_until_that_dc_confirms() {
    let (mut a, mut held, mut seq) = leading(config(Quota::per_s(1_000, 20), 50, 50));
    let t0 = 5 * S;
    let bkk_floor = a.record().floors["bkk"];
    a.reconfigure(config(Quota::per_s(1_000, 20), 10, 90), t0).unwrap();
    // BKK is cut off from now on: it keeps spending its lease until it ends, and its old floor.
    let mut t = t0;
    let mut worst = Quota::ZERO;
    while t < t0 + 30 * S {
        seq += 1;
        let floor = a.floor_named("eu");
        held.absorb(a.on_dc_report(&report("eu", seq, held.version("eu"), floor), t), t);
        held.absorb(a.tick(t).into_iter().filter(|l| l.dc == "eu").collect(), t);
        let eu_floor = a.record().floors["eu"];
        worst = worst.max(held.spendable(t).saturating_add(eu_floor).saturating_add(bkk_floor));
        assert_eq!(a.ledger().check(t), Ok(()));
        t += 250 * MS;
    }
    assert!(worst.fits_in(&Quota::per_s(1_000, 20)), "{worst}");
    assert_eq!(a.record().floors["eu"], Quota::per_s(90, 0), "the raise is granted once there is room");
    assert_eq!(a.floor_reserved("bkk", t), Quota::per_s(50, 0), "BKK's old floor still counts");
    // BKK comes back on the lowered floor: the old one stops counting after the egress hold.
    let (_, lowered) = a.floor_named("bkk").expect("named");
    a.on_dc_report(&report("bkk", seq + 1, None, Some((Quota::per_s(10, 0), lowered))), t);
    assert_eq!(a.floor_reserved("bkk", t + S), Quota::per_s(10, 0));
    assert_eq!(a.ledger().check(t + S), Ok(()));
}

#[test]
fn a_removed_limit_names_every_floor_zero_and_its_books_empty_once_its_dcs_confirm() {
    let cfg = config(Quota::per_s(1_000, 20), 50, 50);
    let (mut a, mut held, mut seq) = leading(cfg.clone());
    let t0 = 5 * S;
    a.reconfigure(cfg.retired(), t0).unwrap();
    assert!(a.config().is_retired());
    let mut t = t0;
    while t < t0 + 15 * S {
        seq += 1;
        for dc in ["bkk", "eu"] {
            let floor = a.floor_named(dc).map(|(_, v)| (Quota::ZERO, v));
            held.absorb(a.on_dc_report(&report(dc, seq, held.version(dc), floor), t), t);
        }
        held.absorb(a.tick(t), t);
        assert!(held.spendable(t).fits_in(&Quota::per_s(1_000, 20)));
        t += 250 * MS;
    }
    assert_eq!(held.spendable(t), Quota::ZERO, "every DC lease since is empty");
    assert!(a.record().floors.values().all(|f| *f == Quota::ZERO));
    assert_eq!(a.ledger().outstanding(t), Quota::ZERO, "nothing is counted once the DCs confirmed");
}

#[test]
fn a_longer_drift_bound_counts_the_leases_already_out_for_a_full_lifetime_under_it() {
    let cfg = config(Quota::per_s(1_000, 20), 0, 0);
    let (mut a, _, _) = leading(cfg.clone());
    let t0 = 5 * S;
    let mut wider = cfg.clone();
    wider.expiry.max_drift = 0.5;
    a.reconfigure(wider.clone(), t0).unwrap();
    let old_end = cfg.expiry.issuer_live_until_ns(t0, cfg.dc_ttl_ms);
    let new_end = wider.expiry.issuer_live_until_ns(t0, cfg.dc_ttl_ms);
    assert_ne!(a.ledger().outstanding(old_end + MS), Quota::ZERO, "counted past the old stretch");
    assert_eq!(a.ledger().outstanding(new_end + MS), Quota::ZERO);
}

#[test]
fn another_limits_definition_is_refused_and_changes_nothing() {
    let (mut a, _, _) = leading(config(Quota::per_s(1_000, 20), 0, 0));
    let mut other = config(Quota::per_s(10, 0), 0, 0);
    other.limit = "other".into();
    let err = a.reconfigure(other, 5 * S).unwrap_err();
    assert_eq!(err, ReconfigureError::OtherLimit { limit: "api".into(), got: "other".into() });
    assert_eq!(a.config().quota, Quota::per_s(1_000, 20));
}

/// A DC dropped from a limit's definition: its floor is named zero at once and keeps counting
/// until the DC confirms it (its pods may still spend the old one), then its room goes back to
/// the limit. Before, it stayed reserved for good unless the operator knew to lower it to zero
/// first, wait, and only then drop the DC.
#[test]
fn a_dc_dropped_from_the_definition_gives_its_floor_back_once_it_confirms_zero() {
    let (mut a, _held, seq) = leading(config(Quota::per_s(1_000, 20), 50, 50));
    let t0 = 5 * S;
    let mut dropped = config(Quota::per_s(1_000, 20), 50, 50);
    dropped.dcs.retain(|d| d.name != "eu");
    a.reconfigure(dropped, t0).unwrap();
    let (named, version) = a.floor_named("eu").expect("still named");
    assert_eq!(named, Quota::ZERO, "a dropped DC's floor is named zero");
    assert_eq!(a.floor_reserved("eu", t0), Quota::per_s(50, 0), "and its old floor counts until it confirms");
    a.on_dc_report(&report("eu", seq + 1, None, Some((Quota::ZERO, version))), t0 + S);
    assert_eq!(a.floor_reserved("eu", t0 + 2 * S), Quota::ZERO, "its room is the limit's again");
    assert_eq!(a.ledger().check(t0 + 2 * S), Ok(()));
}

/// `LimitConfig::from_record` (a term running a limit whose definition it cannot use) counted
/// with fixed margins (drift 5 %, grace 1 s, egress 1 s), whatever the record's writer ran with;
/// the record now carries its writer's expiry policy (FINDINGS F33).
#[test]
fn a_limit_run_from_its_record_counts_with_its_writers_margins() {
    let mut writer = cfg(1_000, 10_000);
    writer.expiry.max_drift = 0.2;
    writer.expiry.egress_spread_ms = 2_000;
    let a = CoordinatorCore::new(writer.clone(), "coord-a", 1);
    let held = LimitConfig::from_record(&a.record());
    let w = writer.expiry.issuer_live_until_ns(0, 10_000);
    let h = held.expiry.issuer_live_until_ns(0, held.dc_ttl_ms);
    println!(
        "writer counts a lease for {:.2}s, from_record for {:.2}s; releases held {} ms vs {} ms",
        w as f64 / 1e9,
        h as f64 / 1e9,
        writer.expiry.egress_spread_ms,
        held.expiry.egress_spread_ms
    );
    assert!(h >= w, "from_record counts a lease {:.2}s shorter than its writer", (w - h) as f64 / 1e9);
}
