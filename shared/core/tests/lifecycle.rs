//! Lease lifecycle events of the partner API at 1,000 QPS (join, drain, crash, unhealthy pod),
//! driven through the DC manager and coordinator cores.

use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::dc_manager::{holder_key, DcManagerConfig, DcOutput, FailMode};
use leasehold_core::lease_intake::LeaseRejection;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReport, LeaseReturn, LeaseVersion};

use crate::support;
use support::scripted::{report_seq_of, ScriptedDc};
use support::{MS, S};

/// BKK's manager `bkk-mgr` that has read `floor`, with scripted pods (offered 50, admitted 50),
/// handling every event at once.
fn dc(mode: FailMode, floor: Quota) -> ScriptedDc {
    dc_with(mode, floor, |_| {})
}

/// [`dc`], its settings changed by `set` first.
fn dc_with(mode: FailMode, floor: Quota, set: impl FnOnce(&mut DcManagerConfig)) -> ScriptedDc {
    let mut cfg = DcManagerConfig::new("api", "bkk", "bkk-mgr");
    cfg.fail_mode = mode;
    // Every event split at once: these tests follow single events a millisecond apart; the
    // batching of joins and growth is `join_batching.rs`'s.
    cfg.event_pass_gap_ms = 0;
    set(&mut cfg);
    ScriptedDc::new(cfg, floor, 0, 1, (50, 50))
}

/// `holder`'s return of limit `api` in BKK.
fn lease_return(holder: &str, incarnation: u64, last_version: Option<LeaseVersion>) -> LeaseReturn {
    LeaseReturn { v: 1, limit: "api".into(), dc: "bkk".into(), holder: holder.into(), incarnation, last_version }
}

/// How these tests drive a [`ScriptedDc`].
trait Drive {
    /// Give the manager a DC lease of `quota` with `ttl_ms`, answering a report sent at `now`.
    fn dc_lease_now(&mut self, quota: Quota, ttl_ms: u64, epoch: u64, now: u64) -> Result<(), LeaseRejection>;
    fn rate(&self, pod: &str) -> u64;
    fn outstanding_rate(&self, now: u64) -> u64;
    /// Four pods at 200/s each, all acknowledged.
    fn steady_four(&mut self);
}

impl Drive for ScriptedDc {
    fn dc_lease_now(&mut self, quota: Quota, ttl_ms: u64, epoch: u64, now: u64) -> Result<(), LeaseRejection> {
        let basis = report_seq_of(&self.core.tick(now));
        let version = LeaseVersion::new(epoch, self.dc_leases + 1);
        self.dc_lease(quota, ttl_ms, version, basis.unwrap(), now)
    }

    fn rate(&self, pod: &str) -> u64 {
        self.held.get(pod).map_or(0, |l| l.quota.rate_milli_per_s / 1_000)
    }

    fn outstanding_rate(&self, now: u64) -> u64 {
        self.core.ledger().outstanding(now).rate_milli_per_s / 1_000
    }

    fn steady_four(&mut self) {
        self.dc_lease_now(Quota::per_s(800, 40), 10_000, 1, 0).unwrap();
        for p in ["p1", "p2", "p3", "p4"] {
            self.report(p, MS, true, false);
        }
        for p in ["p1", "p2", "p3", "p4"] {
            self.report(p, 2 * MS, true, true);
        }
        for p in ["p1", "p2", "p3", "p4"] {
            assert_eq!(self.rate(p), 200, "{p}");
        }
    }
}

#[test]
fn a_joining_pod_is_included_next_cycle_and_never_over_allocated() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.steady_four();
    dc.report("p5", 10 * MS, true, false);
    assert!(dc.outstanding_rate(10 * MS) <= 800);
    assert_eq!(dc.rate("p5"), 0, "no room until the others confirm their smaller leases");
    for p in ["p1", "p2", "p3", "p4"] {
        assert_eq!(dc.rate(p), 160);
        dc.report(p, 20 * MS, true, true);
        assert!(dc.outstanding_rate(20 * MS) <= 800);
    }
    assert_eq!(dc.rate("p5"), 160);
}

#[test]
fn a_draining_pod_returns_its_lease_and_the_rest_resplit_at_once() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.steady_four();
    let ret = lease_return("p3", 1, dc.held.get("p3").map(|l| l.version));
    let out = dc.core.on_lease_return(&ret, 10 * MS);
    assert!(out.iter().any(|o| matches!(o, DcOutput::ReturnAck(a) if a.holder == "p3")));
    dc.absorb(out);
    for p in ["p1", "p2", "p4"] {
        assert_eq!(dc.rate(p), 266, "{p}");
    }
    // Idempotent: a duplicate return is acknowledged again and changes nothing.
    let again = dc.core.on_lease_return(&ret, 11 * MS);
    assert!(again.iter().any(|o| matches!(o, DcOutput::ReturnAck(_))));
    // A report the returned holder sent before it stopped, read late, is refused: it makes the
    // holder no view (no share, no lease) and counts as stale.
    let stale_before = dc.core.counters().reports_stale;
    dc.held.remove("p3");
    dc.report("p3", 400 * MS, true, false);
    assert_eq!(dc.core.counters().reports_stale, stale_before + 1);
    assert!(!dc.held.contains_key("p3"), "a returned holder gets no lease");
    for p in ["p1", "p2", "p4"] {
        dc.report(p, 1_300 * MS, true, true);
    }
    let out = dc.core.tick(1_300 * MS);
    dc.absorb(out);
    assert!(!dc.held.contains_key("p3"), "nor a share in the next split");
    assert_eq!(dc.rate("p1"), 266);
}

#[test]
fn returns_naming_holders_the_manager_never_knew_are_acked_and_leave_no_state() {
    // A pod chooses the incarnation its returns name: one that names a new one each time must
    // not grow the manager's books (each closed marker was kept for 4 pod TTLs, and a holder is
    // inserted in key order, so 10,000 of them cost the loop O(n) each).
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.steady_four();
    let holders_before = dc.core.ledger().holders().count();
    let returns_before = dc.core.counters().returns;
    for incarnation in 100..10_100 {
        let ret = lease_return("p9", incarnation, None);
        let out = dc.core.on_lease_return(&ret, 10 * MS);
        assert!(
            out.iter().any(|o| matches!(o, DcOutput::ReturnAck(a) if a.incarnation == incarnation)),
            "every return is acknowledged"
        );
        dc.absorb(out);
    }
    assert_eq!(dc.core.ledger().holders().count(), holders_before, "no marker for a holder never known");
    assert_eq!(dc.core.counters().returns, returns_before + 10_000);
    assert_eq!(dc.core.counters().returns_of_unknown_holders, 10_000);
    for p in ["p1", "p2", "p3", "p4"] {
        assert_eq!(dc.rate(p), 200, "{p}: nothing re-split for them");
    }
    // A report one of them sent before its return, read late, is a new holder's: it joins and
    // is given a share only as the others' leases leave room (waste while it does not use it).
    let stale_before = dc.core.counters().reports_stale;
    dc.incarnation = 100;
    dc.report("p9", 20 * MS, true, false);
    dc.incarnation = 1;
    assert_eq!(dc.core.counters().reports_stale, stale_before, "not refused as a returned holder's");
    assert!(dc.core.pods().any(|(h, _)| *h == holder_key("p9", 100)));
    assert!(dc.outstanding_rate(20 * MS) <= 800, "the ledger still bounds every grant");
    // A holder it does know (p3, incarnation 1) is still closed by its return, as before.
    let ret = lease_return("p3", 1, None);
    dc.core.on_lease_return(&ret, 11 * MS);
    assert!(dc.core.ledger().is_closed(&holder_key("p3", 1)));
}

#[test]
fn a_pod_reporting_and_returning_new_incarnations_keeps_at_most_max_pods_closed_markers() {
    // Each incarnation reports (a view, a join, a lease) and returns: a holder the manager knew,
    // so its return closes it. The markers are capped at `max_pods` like the views: past that a
    // return still ends the holder's leases, and keeps no marker.
    let mut dc = dc_with(FailMode::Strict, Quota::ZERO, |cfg| cfg.max_pods = 16);
    dc.steady_four();
    let mut now = 10 * MS;
    for incarnation in 100..300 {
        dc.incarnation = incarnation;
        dc.report("p9", now, true, false);
        let ret = lease_return("p9", incarnation, dc.held.get("p9").map(|l| l.version));
        let out = dc.core.on_lease_return(&ret, now);
        assert!(out.iter().any(|o| matches!(o, DcOutput::ReturnAck(a) if a.incarnation == incarnation)));
        dc.absorb(out);
        assert!(dc.outstanding_rate(now) <= 800, "the ledger still bounds every grant");
        now += MS;
    }
    dc.incarnation = 1;
    assert_eq!(dc.core.ledger().closed_markers(), 16, "markers capped at max_pods");
    // A marked holder's return again, with the cap full: it stays marked.
    let again = lease_return("p9", 100, None);
    dc.core.on_lease_return(&again, now);
    assert!(dc.core.ledger().is_closed(&holder_key("p9", 100)));
    assert_eq!(dc.core.counters().returns_without_marker, 200 - 16);
    // Once the returned leases have ended, the books hold the four pods and the markers.
    let out = dc.core.tick(now + S);
    dc.absorb(out);
    assert_eq!(dc.core.ledger().holders().count(), 4 + 16);
    assert_eq!(dc.core.counters().returns_without_marker, 200 - 16);
}

#[test]
fn a_crashed_pods_share_is_reused_only_after_its_lease_expires() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.steady_four();
    // p4 goes silent; the others keep reporting. Its lease was last renewed at ~2 ms.
    let mut t = 250 * MS;
    let mut first_full = None;
    while t < 8 * S {
        for p in ["p1", "p2", "p3"] {
            dc.report(p, t, true, true);
        }
        let out = dc.core.tick(t);
        dc.absorb(out);
        if dc.rate("p1") >= 266 && first_full.is_none() {
            first_full = Some(t);
        }
        assert!(dc.outstanding_rate(t) <= 800);
        t += 250 * MS;
    }
    let reused = first_full.expect("the crashed pod's share is eventually reused");
    // Not before its 5 s lease (stretched by drift and grace) has run out.
    assert!(reused >= 5 * S, "reused after {} ms", reused / MS);
}

/// A pod silent for `FORGET_SILENT_AFTER_MS` is forgotten at the first tick after it (its
/// lease stays on the books until it expires), and a pod that reported meanwhile is kept; a
/// pod first seen after a sweep is forgotten on time too (ticks between sweeps skip the pass
/// over the pods, see `Pods::forget_silent`), and so is the view a first report with sequence
/// number 0 leaves (stale at once: no honest pod sends one, a foreign sender may).
#[test]
fn a_pod_silent_for_a_minute_is_forgotten_at_the_next_tick_and_no_sooner() {
    use leasehold_core::dc_manager::FORGET_SILENT_AFTER_MS;
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    let forget = FORGET_SILENT_AFTER_MS * MS;
    dc.core.tick(MS / 2); // a sweep with no pod to forget, ever
    dc.report("p1", MS, true, false);
    dc.report("p2", MS, true, false);
    let known = |dc: &ScriptedDc| dc.core.pods().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    let (p1, p2, p3) = (holder_key("p1", 1), holder_key("p2", 1), holder_key("p3", 1));
    dc.core.tick(2 * MS);
    dc.report("p2", 30 * S, true, false);
    dc.core.tick(30 * S);
    dc.report("p3", 40 * S, true, false);
    dc.core.tick(MS + forget - 1);
    assert_eq!(known(&dc), [p1, p2.clone(), p3.clone()], "1 ns short of a minute: all kept");
    dc.core.tick(MS + forget);
    assert_eq!(known(&dc), [p2.clone(), p3.clone()], "p1 silent a minute: forgotten");
    dc.core.tick(30 * S + forget - 1);
    assert_eq!(known(&dc), [p2, p3.clone()]);
    dc.core.tick(30 * S + forget + 250 * MS);
    assert_eq!(known(&dc), [p3], "p2 at the first tick after its minute");
    dc.core.tick(40 * S + forget);
    assert!(known(&dc).is_empty(), "p3, first seen after a sweep: on time too");
    let at = 41 * S + forget;
    let stale = support::scripted::pod_report("p4", 1, 0, (50, 50), true, None);
    assert!(dc.core.on_pod_report(&stale, at).is_empty());
    assert_eq!(known(&dc), [holder_key("p4", 1)], "a view made by a stale first report");
    dc.core.tick(at + forget - 1);
    assert_eq!(known(&dc).len(), 1);
    dc.core.tick(at + forget);
    assert!(known(&dc).is_empty(), "forgotten a minute later, as any view");
}

#[test]
fn an_unhealthy_pod_is_excluded_next_cycle_but_its_lease_is_not_revoked() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.steady_four();
    let p2_lease = dc.held["p2"].clone();
    dc.report("p2", 300 * MS, false, true);
    let out = dc.core.tick(1_100 * MS);
    dc.absorb(out);
    assert_eq!(dc.held["p2"], p2_lease, "no new lease for the unhealthy pod");
    assert!(
        dc.core.ledger().holder_claim(&holder_key("p2", 1), 1_100 * MS).rate_milli_per_s > 0,
        "its lease still counts"
    );
}

#[test]
fn pod_leases_never_outlive_the_dc_lease() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.dc_lease_now(Quota::per_s(800, 40), 3_000, 1, 0).unwrap();
    dc.report("p1", MS, true, false);
    let l = &dc.held["p1"];
    assert!(l.ttl_ms < 3_000, "pod ttl {} must end before the 3 s DC lease", l.ttl_ms);
}

#[test]
fn without_a_dc_lease_pods_fall_back_to_the_reserved_floor_or_the_emergency_allowance() {
    let floor = Quota::per_s(50, 0);
    let mut strict = dc(FailMode::Strict, floor);
    strict.dc_lease_now(Quota::per_s(800, 40), 10_000, 1, 0).unwrap();
    let after = 20 * S; // DC lease expired, quiet period over
    assert_eq!(strict.core.budget(after).0, floor);
    let mut be = dc(FailMode::BestEffort { emergency: Quota::per_s(100, 0) }, floor);
    be.dc_lease_now(Quota::per_s(800, 40), 10_000, 1, 0).unwrap();
    assert_eq!(be.core.budget(after).0, Quota::per_s(150, 0));
    // A new manager instance may not use the floor until its predecessor's leases have expired.
    let fresh = dc(FailMode::Strict, floor);
    assert_eq!(fresh.core.budget(0).0, Quota::ZERO);
    assert_eq!(fresh.core.budget(6 * S).0, floor);
}

#[test]
fn dc_leases_from_an_older_epoch_or_replayed_are_refused() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.dc_lease_now(Quota::per_s(800, 40), 10_000, 5, 0).unwrap();
    assert!(matches!(dc.dc_lease_now(Quota::per_s(900, 40), 10_000, 4, MS), Err(LeaseRejection::StaleEpoch { .. })));
    assert_eq!(dc.core.counters().dc_leases_rejected, 1);
}

#[test]
fn the_manager_acks_a_smaller_dc_lease_only_once_its_pods_fit_inside_it() {
    let mut dc = dc(FailMode::Strict, Quota::ZERO);
    dc.steady_four();
    dc.dc_lease_now(Quota::per_s(400, 20), 10_000, 1, 10 * MS).unwrap();
    let v_small = LeaseVersion::new(1, 2);
    let ack = |dc: &mut ScriptedDc, t| {
        dc.core.tick(t).into_iter().find_map(|o| match o {
            DcOutput::Report(r) => r.lease_in_use,
            _ => None,
        })
    };
    assert_ne!(ack(&mut dc, 20 * MS), Some(v_small), "pods still hold 800");
    for p in ["p1", "p2", "p3", "p4"] {
        assert_eq!(dc.rate(p), 100);
        dc.report(p, 30 * MS, true, true);
    }
    assert!(ack(&mut dc, 40 * MS) >= Some(v_small));
}

fn dc_report(dc: &str, holder: &str, seq: u64, demand: u64, ack: Option<LeaseVersion>) -> DcReport {
    DcReport { pods_healthy: 4, lease_in_use: ack, ..DcReport::new("api", dc, holder, 1, seq, Quota::per_s(demand, 0)) }
}

#[test]
fn a_new_leader_keeps_counting_the_old_leaders_leases() {
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::ZERO), ("eu", Quota::ZERO)]);
    let mut a = CoordinatorCore::new(cfg.clone(), "coord-a", 1);
    a.on_dc_report(&dc_report("bkk", "bkk-mgr", 1, 900, None), 0);
    a.on_dc_report(&dc_report("eu", "eu-mgr", 1, 10, None), 0);
    let leases = a.tick(0);
    let bkk = leases.iter().find(|l| l.dc == "bkk").unwrap().quota.rate_milli_per_s;
    assert!(bkk >= 890_000);
    let record = a.record();
    // The new leader's clock is unrelated to the old one's.
    let t0 = 777 * S;
    let mut b = CoordinatorCore::resume(cfg, "coord-b", 2, Stored::Record(&record), t0);
    assert_eq!(b.ledger().holder_claim(&"bkk-mgr".to_string(), t0).rate_milli_per_s, bkk);
    // Europe now wants everything: it cannot have BKK's share while that lease may be in use.
    b.on_dc_report(&dc_report("bkk", "bkk-mgr", 2, 0, None), t0);
    b.on_dc_report(&dc_report("eu", "eu-mgr", 2, 1_000, None), t0);
    let eu = b.tick(t0).into_iter().find(|l| l.dc == "eu").unwrap();
    assert!(eu.quota.rate_milli_per_s <= 1_000_000 - bkk);
    assert_eq!(eu.version.epoch, 2);
    // After the old lease's stretched TTL, Europe grows.
    let later = t0 + 11 * S;
    b.on_dc_report(&dc_report("eu", "eu-mgr", 3, 1_000, None), later);
    b.on_dc_report(&dc_report("bkk", "bkk-mgr", 3, 0, None), later);
    let eu = b.tick(later).into_iter().find(|l| l.dc == "eu").unwrap();
    assert!(eu.quota.rate_milli_per_s > 1_000_000 - bkk, "{}", eu.quota);
}

#[test]
fn the_coordinator_rejects_unknown_dcs_and_stale_reports() {
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::ZERO)]);
    let mut c = CoordinatorCore::new(cfg, "coord-a", 1);
    c.on_dc_report(&dc_report("mars", "m", 1, 10, None), 0);
    c.on_dc_report(&dc_report("bkk", "bkk-mgr", 5, 10, None), 0);
    c.on_dc_report(&dc_report("bkk", "bkk-mgr", 4, 10, None), 0);
    assert_eq!(c.counters().reports_rejected, 2);
}
