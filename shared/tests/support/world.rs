//! A hand-driven world of real cores for the review-round tests: per DC one manager term and
//! two pods (a pod may be cut off from its manager), the coordinator fed by the test.

use super::{manager_with_bugs, pod, secs, MS, S};
use leasehold_shared::bugs::KnownBugs;
use leasehold_shared::coordinator::CoordinatorCore;
use leasehold_shared::dc_manager::{DcManagerCore, DcOutput};
use leasehold_shared::pod::{IntervalCounters, PodCore};
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::{DcLease, DcReport};

/// One DC manager term and its pods (a pod may be cut off from the manager).
pub struct Dc {
    pub name: &'static str,
    pub mgr: DcManagerCore,
    pub pods: Vec<PodCore>,
    pub offered: u64,
    pub pod_cut: Vec<bool>,
}

impl Dc {
    pub fn new(name: &'static str, instance: &str, epoch: u64, now: u64) -> Self {
        Dc::with_bugs(name, instance, epoch, now, KnownBugs::default())
    }

    /// As [`Dc::new`], with holes an audit found brought back in the manager.
    pub fn with_bugs(name: &'static str, instance: &str, epoch: u64, now: u64, bugs: KnownBugs) -> Self {
        let pods = vec![pod(name, &format!("{name}-p1")), pod(name, &format!("{name}-p2"))];
        Dc {
            name,
            mgr: manager_with_bugs(name, instance, epoch, now, bugs),
            pods,
            offered: 2_000,
            pod_cut: vec![false, false],
        }
    }

    pub fn route(&mut self, out: Vec<DcOutput>, now: u64) -> Vec<DcReport> {
        let mut reports = Vec::new();
        for o in out {
            match o {
                DcOutput::PodLease(l) => {
                    if let Some(i) = self.pods.iter().position(|p| p.config().pod == l.pod) {
                        if !self.pod_cut[i] {
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

    pub fn step(&mut self, now: u64) -> Vec<DcReport> {
        let mut reports = Vec::new();
        for i in 0..self.pods.len() {
            if self.pod_cut[i] {
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

    pub fn on_dc_leases(&mut self, leases: &[DcLease], now: u64) {
        let name = self.name;
        for l in leases.iter().filter(|l| l.dc == name) {
            if let Ok(out) = self.mgr.on_dc_lease(l, now) {
                self.route(out, now);
            }
        }
    }

    pub fn on_record(&mut self, coord: &CoordinatorCore, now: u64) {
        if let Some((f, v)) = coord.record().floor_of(self.name) {
            let out = self.mgr.on_floor(f, v, now);
            self.route(out, now);
        }
    }

    pub fn pods_hold(&self, now: u64) -> Quota {
        self.pods.iter().filter_map(|p| p.applied(now)).fold(Quota::ZERO, |s, a| s.saturating_add(a.quota))
    }
}

/// Feed one batch of reports to the coordinator and the DC leases it answers with to `dcs`.
pub fn deliver(coord: &mut CoordinatorCore, reports: Vec<DcReport>, dcs: &mut [&mut Dc], t: u64) {
    for r in reports {
        let out = coord.on_dc_report(&r, t);
        for d in dcs.iter_mut() {
            d.on_dc_leases(&out, t);
        }
    }
}

/// Sample what both DCs' pods hold every 10 ms of the 250 ms step starting at `t`.
pub fn sample(bkk: &Dc, eu: &Dc, t: u64, q: Quota, worst: &mut Quota, log: &mut Vec<String>) {
    for k in 0..25 {
        let now = t + k * 10 * MS;
        let (b, e) = (bkk.pods_hold(now), eu.pods_hold(now));
        let total = b.saturating_add(e);
        if !total.fits_in(&q) && !total.fits_in(worst) {
            log.push(format!(
                "{:6.3}s bkk's pods hold {b}, europe's pods hold {e}: sum {total} > limit {q}",
                secs(now)
            ));
        }
        *worst = (*worst).max(total);
    }
}

/// One 250 ms step of BKK, Europe and the coordinator: pods report, managers tick, reports reach
/// the coordinator (Europe's not while `eu_cut`), and on whole seconds the coordinator ticks and
/// its DC leases and record reach the DCs. Returns the DC leases of the tick.
pub fn step_two_dcs(coord: &mut CoordinatorCore, bkk: &mut Dc, eu: &mut Dc, eu_cut: bool, t: u64) -> Vec<DcLease> {
    let mut reports = bkk.step(t);
    let eu_reports = eu.step(t);
    if eu_cut {
        deliver(coord, reports, &mut [bkk], t);
    } else {
        reports.extend(eu_reports);
        deliver(coord, reports, &mut [bkk, eu], t);
    }
    if !t.is_multiple_of(S) {
        return Vec::new();
    }
    let out = coord.tick(t);
    bkk.on_dc_leases(&out, t);
    bkk.on_record(coord, t);
    if !eu_cut {
        eu.on_dc_leases(&out, t);
        eu.on_record(coord, t);
    }
    out
}

/// Print a run's log and the most its pods ever held.
pub fn print_run(log: &[String], worst: Quota, limit: Quota) {
    for l in log {
        println!("{l}");
    }
    println!("most ever held: {worst} (limit {limit})");
}
