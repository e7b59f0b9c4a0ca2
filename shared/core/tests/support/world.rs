//! A hand-driven world of real cores for the rule tests: per DC one manager term and its
//! pods (a pod may be cut off from its manager, or deaf to it), the coordinator fed by the test.

use super::{manager_with_bugs, pod, secs, MS, S};
use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::CoordinatorCore;
use leasehold_core::dc_manager::{DcManagerCore, DcOutput};
use leasehold_core::lease_intake::LeaseRejection;
use leasehold_core::pod::{IntervalCounters, PodCore};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport, PodLease};

/// One DC manager term and its pods.
pub(crate) struct Dc {
    pub name: &'static str,
    pub mgr: DcManagerCore,
    pub pods: Vec<PodCore>,
    /// What each pod offers per 250 ms report (it admits up to 100 of it).
    pub offered: Vec<u64>,
    /// Whether each pod reports itself healthy.
    pub healthy: Vec<bool>,
    /// Pods cut off from the manager both ways: they neither report nor receive leases.
    pub pod_cut: Vec<bool>,
    /// Pods that lose the manager's leases (the manager→pod direction) while their reports arrive.
    pub deaf: Vec<bool>,
    /// When set, every pod lease the manager sends, and its fate, is kept here for a test's log.
    pub sent: Option<Vec<Sent>>,
}

/// A pod lease the manager sent at `at`, and what became of it.
pub(crate) struct Sent {
    pub at: u64,
    pub lease: PodLease,
    /// `None`: lost on the way (the pod is cut off or deaf); else the pod's answer.
    pub applied: Option<Result<(), LeaseRejection>>,
}

impl Dc {
    /// Pods `<name>-p1` and `<name>-p2`, each offering 2,000/s.
    pub(crate) fn new(name: &'static str, instance: &str, epoch: u64, now: u64) -> Self {
        Dc::with_bugs(name, instance, epoch, now, KnownBugs::default())
    }

    /// As [`Dc::new`], with holes of docs/FINDINGS.md brought back in the manager.
    pub(crate) fn with_bugs(name: &'static str, instance: &str, epoch: u64, now: u64, bugs: KnownBugs) -> Self {
        let ids = [format!("{name}-p1"), format!("{name}-p2")];
        Dc::with_pods(name, manager_with_bugs(name, instance, epoch, now, bugs), &[&ids[0], &ids[1]])
    }

    /// Manager `mgr` and real pods `pod_ids` of DC `name`, each offering 2,000/s, healthy, linked.
    pub(crate) fn with_pods(name: &'static str, mgr: DcManagerCore, pod_ids: &[&str]) -> Self {
        let n = pod_ids.len();
        Dc {
            name,
            mgr,
            pods: pod_ids.iter().map(|p| pod(name, p)).collect(),
            offered: vec![2_000; n],
            healthy: vec![true; n],
            pod_cut: vec![false; n],
            deaf: vec![false; n],
            sent: None,
        }
    }

    /// Every pod offers `per_report` from now on.
    pub(crate) fn offer(&mut self, per_report: u64) {
        self.offered.iter_mut().for_each(|o| *o = per_report);
    }

    /// Deliver the manager's output: pod leases to the pods that can hear it; its reports back.
    pub(crate) fn route(&mut self, out: Vec<DcOutput>, now: u64) -> Vec<DcReport> {
        let mut reports = Vec::new();
        for o in out {
            match o {
                DcOutput::PodLease(l) => {
                    if let Some(i) = self.pods.iter().position(|p| p.config().pod == l.pod) {
                        let lost = self.pod_cut[i] || self.deaf[i];
                        let applied = (!lost).then(|| self.pods[i].on_lease(&l, now));
                        if let Some(sent) = self.sent.as_mut() {
                            sent.push(Sent { at: now, lease: l, applied });
                        }
                    }
                }
                DcOutput::Report(r) => reports.push(r),
                DcOutput::ReturnAck(_) => {}
            }
        }
        reports
    }

    /// The pods that are not cut off report, then the manager ticks: the manager's reports.
    pub(crate) fn step(&mut self, now: u64) -> Vec<DcReport> {
        let mut reports = Vec::new();
        for i in 0..self.pods.len() {
            if self.pod_cut[i] {
                continue;
            }
            let offered = self.offered[i];
            let c = IntervalCounters { offered, admitted: offered.min(100), ..Default::default() };
            let r = self.pods[i].report(now, c, self.healthy[i]);
            let out = self.mgr.on_pod_report(&r, now);
            reports.extend(self.route(out, now));
        }
        let out = self.mgr.tick(now);
        reports.extend(self.route(out, now));
        reports
    }

    /// Give the manager DC lease `l` if it is this DC's (else nothing happens): its answer.
    pub(crate) fn on_dc_lease(&mut self, l: &DcLease, now: u64) -> Result<(), LeaseRejection> {
        if l.dc != self.name {
            return Ok(());
        }
        let out = self.mgr.on_dc_lease(l, now)?;
        self.route(out, now);
        Ok(())
    }

    /// Give the manager this DC's leases among `leases` (a refused one changes nothing).
    pub(crate) fn on_dc_leases(&mut self, leases: &[DcLease], now: u64) {
        for l in leases {
            let _ = self.on_dc_lease(l, now);
        }
    }

    /// The manager reads the coordinator's record: the floor it names for this DC.
    pub(crate) fn on_record(&mut self, coord: &CoordinatorCore, now: u64) {
        if let Some((f, v)) = coord.record().floor_of(self.name) {
            let out = self.mgr.on_floor(f, v, now);
            self.route(out, now);
        }
    }

    /// What the pods may spend at `now`: the sum of their applied, unexpired leases.
    pub(crate) fn pods_hold(&self, now: u64) -> Quota {
        self.pods.iter().filter_map(|p| p.applied(now)).fold(Quota::ZERO, |s, a| s.saturating_add(a.quota))
    }
}

/// Feed one batch of reports to the coordinator and the DC leases it answers with to `dcs`.
pub(crate) fn deliver(coord: &mut CoordinatorCore, reports: Vec<DcReport>, dcs: &mut [&mut Dc], t: u64) {
    for r in reports {
        let out = coord.on_dc_report(&r, t);
        for d in dcs.iter_mut() {
            d.on_dc_leases(&out, t);
        }
    }
}

/// Every 10 ms from `t` for `step_ns`: what `held(now)` sums to, and a description of its parts.
/// The most ever held goes to `worst`; each new excess over `limit` to the log.
pub(crate) fn sample_held(
    t: u64,
    step_ns: u64,
    limit: Quota,
    worst: &mut Quota,
    log: &mut Vec<String>,
    held: impl Fn(u64) -> (Quota, String),
) {
    for k in 0..step_ns / (10 * MS) {
        let now = t + k * 10 * MS;
        let (total, parts) = held(now);
        if !total.fits_in(&limit) && !total.fits_in(worst) {
            log.push(format!("{:6.3}s {parts}: sum {total} > limit {limit}", secs(now)));
        }
        *worst = (*worst).max(total);
    }
}

/// [`sample_held`] over a 250 ms step: BKK's pods and what `eu(now)` says Europe holds
/// (`eu_holds` names it in the log: "europe's pods hold", "europe's lease").
pub(crate) fn sample_bkk_and(
    bkk: &Dc,
    eu_holds: &str,
    eu: impl Fn(u64) -> Quota,
    t: u64,
    limit: Quota,
    worst: &mut Quota,
    log: &mut Vec<String>,
) {
    sample_held(t, 250 * MS, limit, worst, log, |now| {
        let (b, e) = (bkk.pods_hold(now), eu(now));
        (b.saturating_add(e), format!("bkk's pods hold {b}, {eu_holds} {e}"))
    });
}

/// Sample what both DCs' pods hold every 10 ms of the 250 ms step starting at `t`.
pub(crate) fn sample(bkk: &Dc, eu: &Dc, t: u64, q: Quota, worst: &mut Quota, log: &mut Vec<String>) {
    sample_bkk_and(bkk, "europe's pods hold", |now| eu.pods_hold(now), t, q, worst, log);
}

/// One 250 ms step of BKK, Europe and the coordinator: pods report, managers tick, reports reach
/// the coordinator (Europe's not while `eu_cut`), and on whole seconds the coordinator ticks and
/// its DC leases and record reach the DCs. Returns the DC leases of the tick.
pub(crate) fn step_two_dcs(
    coord: &mut CoordinatorCore,
    bkk: &mut Dc,
    eu: &mut Dc,
    eu_cut: bool,
    t: u64,
) -> Vec<DcLease> {
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

/// Log the DC leases a coordinator tick issued at `t`, with their TTL.
pub(crate) fn log_dc_leases(out: &[DcLease], t: u64, log: &mut Vec<String>) {
    for l in out {
        log.push(format!("{:6.3}s {} gets DC lease {} {} ttl {} ms", secs(t), l.dc, l.version, l.quota, l.ttl_ms));
    }
}

/// Print a run's log and the most its pods ever held.
pub(crate) fn print_run(log: &[String], worst: Quota, limit: Quota) {
    for l in log {
        println!("{l}");
    }
    println!("most ever held: {worst} (limit {limit})");
}
