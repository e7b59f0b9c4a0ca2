//! What floor a DC manager takes and reports: never an older floor than the one it uses (floors
//! carry versions), and `floor_in_use` covers every floor its pods may still spend, until they
//! confirm smaller leases (docs/FINDINGS.md#f11, docs/FINDINGS.md#f13). The coordinator keeps
//! counting an old floor on that report.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{CoordinatorCore, Stored};
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{LeaseVersion, PodLease, PodReport};
use std::collections::BTreeMap;

use crate::support;
use support::config_with_bugs as config;
use support::dc_report as report;
use support::{first_term, MS, S};

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

/// Storm seed 136, reduced (FINDINGS F11): a new manager term reads floor 50 and is still in its
/// quiet period at its first reports (`floor_in_use: None`); once the quiet period is over a pod
/// report makes it cut a 50/s pod lease from the floor, and the lowered floor (20) arrives before
/// its next report. The pod still holds 50 until it confirms a smaller lease: the report must say
/// 50, or the coordinator stops reserving the old floor while the pod spends it.
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
