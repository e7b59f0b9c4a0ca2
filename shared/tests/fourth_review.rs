//! Holes a fourth outside review found, each driven through the real sans-I/O cores and
//! asserting the safe outcome (so each test fails while the hole is open).
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew) unless a test says so.

use leasehold_shared::coordinator::{CoordinatorCore, LimitConfig};
use leasehold_shared::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput};
use leasehold_shared::pod::{IntervalCounters, PodConfig, PodCore};
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::{DcLease, DcReport, LeaseVersion};

mod support;
use support::{secs, Newest, MS, S};

fn config_with_floor(quota: Quota, bkk_floor: u64) -> LimitConfig {
    let mut c = LimitConfig::new("api", quota, &[("bkk", Quota::per_s(bkk_floor, 0)), ("eu", Quota::ZERO)]);
    c.expiry.egress_spread_ms = 150;
    c.validate().expect("a valid configuration");
    c
}

fn eu_report_asking(seq: u64, ack: Option<LeaseVersion>, demand_per_s: u64) -> DcReport {
    support::dc_report_asking("eu", seq, ack, None, demand_per_s)
}

fn pod(name: &str) -> PodCore {
    let cfg = PodConfig {
        limit: "api".into(),
        dc: "bkk".into(),
        pod: name.into(),
        incarnation: 7,
        weight: 1.0,
        bugs: Default::default(),
    };
    PodCore::new(cfg, 0)
}

fn manager(instance: &str, epoch: u64, now: u64) -> DcManagerCore {
    let mut cfg = DcManagerConfig::new("api", "bkk", instance);
    cfg.epoch = epoch;
    cfg.expiry.egress_spread_ms = 150;
    cfg.validate().expect("valid");
    DcManagerCore::new(cfg, now)
}

/// One DC manager term and the pods that talk to it (each may be cut off from it).
struct Term {
    mgr: DcManagerCore,
    pods: Vec<PodCore>,
    connected: Vec<bool>,
    offered: u64,
}

impl Term {
    fn route(&mut self, out: Vec<DcOutput>, now: u64) -> Vec<DcReport> {
        let mut reports = Vec::new();
        for o in out {
            match o {
                DcOutput::PodLease(l) => {
                    if let Some(i) = self.pods.iter().position(|p| p.config().pod == l.pod) {
                        if self.connected[i] {
                            let _ = self.pods[i].on_lease(&l, now);
                        }
                    }
                }
                DcOutput::Report(r) => reports.push(r),
                DcOutput::ReturnAck(_) => {}
            }
        }
        reports
    }

    /// Connected pods report, then the manager ticks: its report.
    fn step(&mut self, now: u64) -> Vec<DcReport> {
        let mut reports = Vec::new();
        for i in 0..self.pods.len() {
            if !self.connected[i] {
                continue;
            }
            let c = IntervalCounters { offered: self.offered, admitted: self.offered.min(100), ..Default::default() };
            let r = self.pods[i].report(now, c, true);
            let out = self.mgr.on_pod_report(&r, now);
            reports.extend(self.route(out, now));
        }
        let out = self.mgr.tick(now);
        reports.extend(self.route(out, now));
        reports
    }

    fn on_dc_leases(&mut self, leases: &[DcLease], now: u64) {
        for l in leases.iter().filter(|l| l.dc == "bkk") {
            if let Ok(out) = self.mgr.on_dc_lease(l, now) {
                self.route(out, now);
            }
        }
    }

    fn pods_hold(&self, now: u64) -> Quota {
        self.pods.iter().filter_map(|p| p.applied(now)).fold(Quota::ZERO, |s, a| s.saturating_add(a.quota))
    }
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
    let mut coord = CoordinatorCore::new(config_with_floor(q, 400), "coord", 1);
    let (floor, fv) = coord.record().floor_of("bkk").expect("named");
    let mut a = Term {
        mgr: manager("bkk-mgr-a", 1, 0),
        pods: vec![pod("p1"), pod("p2")],
        connected: vec![true; 2],
        offered: 250,
    };
    a.mgr.on_floor(floor, fv, 0);
    let crash = 7 * S;
    let mut b: Option<Term> = None;
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
            a.connected = vec![false, false];
            log.push(format!(
                "{:6.3}s term A crashes; p1, p2 (holding {} from the floor, until {:.3}s) lose their link to BKK's managers",
                secs(t),
                a.pods_hold(t),
                secs(a.pods[0].applied(t).map_or(0, |l| l.expires_at_ns))
            ));
            let mut term = Term {
                mgr: manager("bkk-mgr-b", 2, t),
                pods: vec![pod("p3"), pod("p4")],
                connected: vec![true; 2],
                offered: 250,
            };
            term.mgr.on_floor(floor, fv, t);
            b = Some(term);
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
            for l in &out {
                log.push(format!(
                    "{:6.3}s {} gets DC lease {} {} ttl {} ms",
                    secs(t),
                    l.dc,
                    l.version,
                    l.quota,
                    l.ttl_ms
                ));
            }
            if let Some(b) = b.as_mut() {
                let shrinks = out.iter().any(|l| l.dc == "bkk" && t >= 9 * S);
                if shrinks && b.connected[0] {
                    // p3 and p4 are cut off from B as the smaller lease arrives.
                    b.connected = vec![false, false];
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
        for k in 0..25 {
            let now = t + k * 10 * MS;
            let bkk = a.pods_hold(now).saturating_add(b.as_ref().map_or(Quota::ZERO, |b| b.pods_hold(now)));
            let total = bkk.saturating_add(eu.spendable(now));
            if !total.fits_in(&q) && !total.fits_in(&worst) {
                log.push(format!(
                    "{:6.3}s p1+p2 (term A) hold {}, p3+p4 (term B) hold {}, europe's lease {}: sum {total} > limit {q}",
                    secs(now),
                    a.pods_hold(now),
                    b.as_ref().map_or(Quota::ZERO, |b| b.pods_hold(now)),
                    eu.spendable(now)
                ));
            }
            worst = worst.max(total);
        }
        t += 250 * MS;
    }
    for l in &log {
        println!("{l}");
    }
    println!("most ever held: {worst} (limit {q})");
    assert!(worst.fits_in(&q), "BKK's pods and Europe held {worst} > {q}");
}
