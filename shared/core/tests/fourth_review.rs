//! Holes a fourth outside review found, each driven through the real sans-I/O cores and
//! asserting the safe outcome (so each test fails while the hole is open).
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew) unless a test says so.

use leasehold_core::coordinator::CoordinatorCore;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReport, LeaseVersion};

use crate::support;
use support::world::{log_dc_leases, print_run, sample_held, Dc};
use support::{config, manager, secs, Newest, MS, S};

fn eu_report_asking(seq: u64, ack: Option<LeaseVersion>, demand_per_s: u64) -> DcReport {
    support::dc_report_asking("eu", seq, ack, None, demand_per_s)
}

/// A term of BKK's manager started at `now` and the pods that talk to it, each offering 250 per
/// report (each may be cut off from it).
fn term(instance: &str, epoch: u64, now: u64, pods: &[&str]) -> Dc {
    let mut term = Dc::with_pods("bkk", manager("bkk", instance, epoch, now), pods);
    term.offer(250);
    term
}

// -------------------------------------------------------------------------------------------
// 1. A new DC-manager term acks a smaller DC lease by counting on the floor during its quiet
//    period, while the previous term's pods still spend that floor
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
