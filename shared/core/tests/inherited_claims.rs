//! After an issuer's capacity shrinks (a DC manager's newer, smaller DC lease; a lower R or B), no
//! claim from before the shrink licenses a grant: the leases granted since must fit the new
//! capacity by themselves, and a takeover without a change keeps them lasting
//! (`Ledger`, "Shrinking capacity"; docs/FINDINGS.md#f8, docs/FINDINGS.md#f10).

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{CoordinatorCore, Stored};
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput};
use leasehold_core::expiry::ExpiryPolicy;
use leasehold_core::ledger::Ledger;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport, LeaseVersion};

use crate::support;
use support::config_with_bugs as config;
use support::dc_report as report;
use support::world::Dc;
use support::{first_term, Held, MS, S};

// -------------------------------------------------------------------------------------------
// Storm seed 23, reduced to the cores (FINDINGS F8): a pod's claim from the lease it held under a
// larger DC lease lets the DC manager give it a share of the *next*, smaller DC lease although
// the other pods already hold that whole lease ("anything up to its current claim" in
// `Ledger::grantable`/`Ledger::grant`). The old claim was nested under the old DC lease and ends
// with it; the new lease outlives it. Once the coordinator stops counting the old DC lease (it
// expires on its books; the manager never acked the new one), the DC's pods hold more than
// floor + the DC lease the coordinator counts, and the coordinator hands the difference to
// another DC.
//
// Path (one manager term, two pods, no clock skew, no manager pause or failover; pods report
// and the manager ticks every 250 ms; it prints the same lines):
// * 0.1 s   DC lease L1 = 1000/s, burst 1000, ttl 6 s: p1 and p2 get 500 each.
// * 2.25 s  p2 is cut off from the manager (pod <-> DC partition); its last lease (500, nested
//   under L1, lost on the way) still counts in the manager's ledger until about L1's end.
// * 4.05 s  the coordinator shrinks the DC: L2 = 200/s, burst 200. Only p1 is eligible: p1 gets
//   all 200 (a "shrink" from its claim of 500).
// * 4.25 s  p2's partition heals. 5 s: p1 is cut off (its next leases never arrive).
// * 5.25 s  renewal split 100 / 100: p2's claim is still its L1-era 500, so its 100 is granted
//   as a "shrink" although L2's headroom is 0 (p1 holds all 200 of it).
// * 6.16 s  the coordinator's count of L1 ends (issued 0.1 s + 6 s x 1.01 + 100 ms grace); the
//   manager never acked L2 (its pods exceed it), so the coordinator now counts L2 = 200
//   for the DC and may give the other 800 to Europe.
// * from then until p1's lease ends (~9 s): p1 spends 200 and p2 spends 100 under L2 = 200.
// -------------------------------------------------------------------------------------------

const MGR: &str = "bkk-mgr";

/// BKK (one manager term, pods `p1` and `p2` offering 500 per report) and the coordinator's books.
struct World {
    dc: Dc,
    /// The coordinator's books (the same `Ledger` `CoordinatorCore` keeps, capacity R - floors).
    coord: Ledger<String>,
    policy: ExpiryPolicy,
    last_report_seq: u64,
    dc_lease_seq: u64,
    log: Vec<String>,
}

impl World {
    fn new(bugs: KnownBugs) -> Self {
        let mut cfg = DcManagerConfig::new("api", "bkk", MGR);
        cfg.bugs = bugs;
        cfg.pod_ttl_ms = 5_000;
        let mut dc = Dc::with_pods("bkk", DcManagerCore::new(cfg, 0), &["p1", "p2"]);
        dc.offer(500);
        dc.sent = Some(Vec::new());
        World {
            dc,
            coord: Ledger::new(Quota::per_s(1_000, 1_000), 1),
            policy: ExpiryPolicy::default(),
            last_report_seq: 0,
            dc_lease_seq: 0,
            log: Vec::new(),
        }
    }

    /// The pod leases the manager sent go to the log; its reports to the coordinator's books.
    fn route(&mut self, out: Vec<DcOutput>, t: u64) {
        let reports = self.dc.route(out, t);
        self.take_reports(reports, t);
    }

    /// Log the pod leases the manager sent and what became of them; `reports` ack on the books.
    fn take_reports(&mut self, reports: Vec<DcReport>, t: u64) {
        for s in self.dc.sent.as_mut().map(std::mem::take).unwrap_or_default() {
            let fate = s.applied.map_or("lost".to_string(), |r| format!("{:?}", r.map(|_| "applied")));
            let l = &s.lease;
            self.log.push(format!("{:6.3}s lease {} {} -> {}: {}", s.at as f64 / 1e9, l.version, l.quota, l.pod, fate));
        }
        for r in reports {
            self.last_report_seq = r.seq;
            if let Some(v) = r.lease_in_use {
                let _ = self.coord.confirm_in_use(&MGR.to_string(), v, self.policy.released_until_ns(t));
            }
        }
    }

    /// Pods report, the manager ticks.
    fn step(&mut self, t: u64) {
        let reports = self.dc.step(t);
        self.take_reports(reports, t);
        self.coord.expire(t);
    }

    /// The coordinator grants the DC `quota` for `ttl_ms` (answering the manager's last report)
    /// and the manager applies it at once.
    fn dc_lease(&mut self, quota: Quota, t: u64) {
        self.dc_lease_seq += 1;
        let version = LeaseVersion::new(1, self.dc_lease_seq);
        let live_until = self.policy.issuer_live_until_ns(t, 6_000);
        self.coord.grant(&MGR.to_string(), quota, version, live_until, t).expect("coordinator grant");
        let lease = DcLease {
            v: 1,
            limit: "api".into(),
            dc: "bkk".into(),
            holder: MGR.into(),
            version,
            lease_id: format!("l{}", self.dc_lease_seq),
            quota,
            floor: Quota::ZERO,
            ttl_ms: 6_000,
            basis_seq: self.last_report_seq,
            predecessor: None,
        };
        self.log.push(format!("{:6.3}s DC lease {version} {quota}", t as f64 / 1e9));
        let out = self.dc.mgr.on_dc_lease(&lease, t).expect("manager applies the DC lease");
        self.route(out, t);
    }
}

/// Runs the path; the first instant the DC's pods hold more than the coordinator counts, if any.
fn first_breach(bugs: KnownBugs) -> Option<String> {
    let mut w = World::new(bugs);
    let mut breach: Option<String> = None;
    let mut t = 0;
    while t <= 10 * S {
        if t == 2_250 * MS {
            w.dc.pod_cut[1] = true;
        }
        if t == 4_250 * MS {
            w.dc.pod_cut[1] = false;
        }
        if t == 5 * S {
            w.dc.pod_cut[0] = true;
        }
        w.step(t);
        if t == 0 {
            w.dc_lease(Quota::per_s(1_000, 1_000), 100 * MS);
        }
        if t == 4 * S {
            w.dc_lease(Quota::per_s(200, 200), 4_050 * MS);
        }
        // Check every 10 ms between steps: pods (ground truth) vs what the coordinator counts.
        for k in 0..25 {
            let now = t + k * 10 * MS;
            w.coord.expire(now);
            let counted = w.coord.holder_claim(&MGR.to_string(), now);
            let held = w.dc.pods_hold(now);
            if !held.fits_in(&counted) && breach.is_none() {
                let eu = w.coord.headroom_for(&"eu-mgr".to_string(), now);
                breach = Some(format!(
                    "at {:.2}s the DC's pods hold {held}, the coordinator counts {counted} for the DC \
                     (floor 0) and could give Europe {eu} of capacity {}",
                    now as f64 / 1e9,
                    w.coord.capacity()
                ));
            }
        }
        t += 250 * MS;
    }
    for l in &w.log {
        println!("{l}");
    }
    breach
}

#[test]
fn a_pod_claim_from_a_larger_expired_dc_lease_never_licenses_a_share_of_the_smaller_one() {
    let breach = first_breach(KnownBugs::default());
    assert!(breach.is_none(), "{}", breach.unwrap());
}

/// Negative control: the old rule (after the DC lease shrank, a pod's claim under the larger one
/// still licenses a renewal at its level) breaks here, once the later grant rule (room at the
/// end of each counted DC lease, which also stops this path) is off too.
#[test]
fn the_old_grant_rule_breaks_on_this_path() {
    let bugs = KnownBugs {
        renewal_reuses_inherited_claim: true,
        pod_lease_outlives_counted_dc_lease: true,
        ..KnownBugs::default()
    };
    let breach = first_breach(bugs).expect("the old rule held");
    assert!(breach.contains("pods hold 300.000/s"), "{breach}");
}

// -------------------------------------------------------------------------------------------
// A lower R or B, and a takeover after it
// -------------------------------------------------------------------------------------------

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

/// Storm seed 72 (after `LimitChange` joined the schedule), reduced (FINDINGS F10): R drops (term 2
/// inherits term 1's leases and renews Europe within the new R), then a plain takeover without any
/// change (term 3) while Europe is cut off. Term 3 must count Europe's term-2 lease as lasting, not
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
