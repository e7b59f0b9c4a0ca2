//! Regression tests for the holes an outside audit found in the cores, by number (the switches
//! that bring them back are in `shared/core/src/bugs.rs`). Each drives the real cores through the
//! path that broke the limit.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::dc_manager::{DcManagerConfig, FailMode};
use leasehold_core::holder::LeaseRejection;
use leasehold_core::pod::{IntervalCounters, PodConfig, PodCore};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{LeaseVersion, PodLease};
use std::collections::BTreeMap;

use crate::support;
use support::scripted::{report_seq_of, ScriptedDc};
use support::{MS, S};

/// BKK's manager `instance` (pod leases of 2 s) that has read `floor`, with scripted pods that
/// report every 250 ms (offered 500, admitted 100) and keep the newest lease they were sent.
fn dc(mode: FailMode, floor: Quota, instance: &str, now: u64, bugs: KnownBugs) -> ScriptedDc {
    let mut cfg = DcManagerConfig::new("api", "bkk", instance);
    cfg.fail_mode = mode;
    cfg.bugs = bugs;
    cfg.pod_ttl_ms = 2_000;
    ScriptedDc::new(cfg, floor, now, 7, (500, 100))
}

/// How these tests drive a [`ScriptedDc`].
trait Drive {
    /// The manager's report to the coordinator at `now`: its sequence number.
    fn report_seq(&mut self, now: u64) -> u64;
    /// Σ of the pod leases issued at or after `since` (what pods may spend after that instant).
    fn issued_since(&self, since: u64, issued_at: &BTreeMap<String, u64>) -> Quota;
    /// Run pods and ticks from `from` to `to`; returns the largest Σ of leases issued after `since`.
    fn run(&mut self, pods: &[&str], from: u64, to: u64, since: u64) -> Quota;
}

impl Drive for ScriptedDc {
    fn report_seq(&mut self, now: u64) -> u64 {
        let out = self.core.tick(now);
        let seq = report_seq_of(&out);
        self.absorb(out);
        seq.expect("a tick always reports")
    }

    fn issued_since(&self, since: u64, issued_at: &BTreeMap<String, u64>) -> Quota {
        self.held
            .iter()
            .filter(|(p, _)| issued_at.get(*p).is_some_and(|t| *t >= since))
            .fold(Quota::ZERO, |s, (_, l)| s.saturating_add(l.quota))
    }

    fn run(&mut self, pods: &[&str], from: u64, to: u64, since: u64) -> Quota {
        let mut issued_at: BTreeMap<String, u64> = BTreeMap::new();
        let mut worst = Quota::ZERO;
        let mut t = from;
        while t < to {
            let before: BTreeMap<String, LeaseVersion> =
                self.held.iter().map(|(p, l)| (p.clone(), l.version)).collect();
            for pod in pods {
                self.report(pod, t, true, true);
            }
            let out = self.core.tick(t);
            self.absorb(out);
            for (p, l) in &self.held {
                if before.get(p) != Some(&l.version) {
                    issued_at.insert(p.clone(), t);
                }
            }
            worst = worst.max(self.issued_since(since, &issued_at));
            t += 250 * MS;
        }
        worst
    }
}

const PODS: [&str; 2] = ["p1", "p2"];

/// Hole 1: a newer DC lease that expires before an older, larger one. The manager must fall to
/// its floor when the newest lease expires, never back to the lease it replaced (and acked).
#[test]
fn a_dc_manager_never_falls_back_to_a_lease_it_replaced_when_the_newer_one_expires_first() {
    let (after_expiry, floor, fell_back) = newer_lease_expires_first(KnownBugs::default());
    assert!(
        after_expiry.fits_in(&floor),
        "after the newest DC lease expired the pods were given {after_expiry}, above the floor {floor}"
    );
    assert!(!fell_back, "the replaced lease came back into use");
}

#[test]
fn negative_control_the_old_fallback_rule_hands_out_the_replaced_lease() {
    let bugs = KnownBugs { dc_falls_back_to_older_lease: true, ..KnownBugs::default() };
    let (after_expiry, floor, fell_back) = newer_lease_expires_first(bugs);
    assert!(fell_back && !after_expiry.fits_in(&floor), "{after_expiry} within {floor}");
}

/// Returns the largest Σ of pod leases issued after the newest DC lease expired, the floor, and
/// whether the manager spends under a lease again after that.
fn newer_lease_expires_first(bugs: KnownBugs) -> (Quota, Quota, bool) {
    let floor = Quota::per_s(10, 2);
    let mut dc = dc(FailMode::Strict, floor, "bkk-mgr", 0, bugs);
    let s1 = dc.report_seq(0);
    // Leader 1: 900/s for 10 s.
    dc.dc_lease(Quota::per_s(900, 18), 10_000, LeaseVersion::new(1, 1), s1, 0).expect("lease applies");
    dc.run(&PODS, 0, S, 0);
    // Leader 2 (a rolling restart to dc_ttl_ms = 6 s): 100/s for 6 s. The manager acks it once
    // its pods are inside 100/s, and the coordinator gives the other 800/s to Europe.
    let s2 = dc.report_seq(S);
    dc.dc_lease(Quota::per_s(100, 2), 6_000, LeaseVersion::new(2, 1), s2, S + 50 * MS).expect("lease applies");
    dc.run(&PODS, S, 6 * S, 0);
    // Leader 2 crashes: no renewal. Its lease ends at 7 s, leader 1's at 10 s.
    let after_expiry = dc.run(&PODS, 6 * S, 10 * S, 7 * S + 1);
    (after_expiry, floor, dc.core.current_lease(8 * S).is_some())
}

/// Hole 1, second path: the basis of a newer lease is an older report (a new leader whose first
/// heard report is a delayed one), so the newer lease ends first.
#[test]
fn a_newer_lease_answering_an_older_report_still_supersedes_every_older_lease() {
    let floor = Quota::per_s(10, 2);
    let mut dc = dc(FailMode::Strict, floor, "bkk-mgr", 0, KnownBugs::default());
    let s1 = dc.report_seq(0);
    let s2 = dc.report_seq(S);
    dc.dc_lease(Quota::per_s(900, 18), 10_000, LeaseVersion::new(1, 1), s2, S + 50 * MS).expect("lease applies");
    dc.run(&PODS, S, 2 * S, 0);
    dc.dc_lease(Quota::per_s(100, 2), 10_000, LeaseVersion::new(2, 1), s1, 2 * S).expect("lease applies");
    dc.run(&PODS, 2 * S, 10 * S, 0);
    // The newer lease ended at 10 s (from report 1), the older one would last until 11 s.
    let after = dc.run(&PODS, 10 * S, 11 * S, 10 * S + 1);
    assert!(after.fits_in(&floor), "pods were given {after} from a superseded lease");
}

/// Hole 2: best-effort mode. A new manager term must not hand out the emergency allowance
/// before the previous term's pod leases (which may include it) have expired.
#[test]
fn a_new_best_effort_term_waits_before_it_hands_out_the_emergency_allowance() {
    let floor = Quota::per_s(100, 2);
    let e = Quota::per_s(100, 2);
    let mode = FailMode::BestEffort { emergency: e };
    let mut dc = dc(mode, floor, "bkk-mgr-e9", 0, KnownBugs::default());
    let quiet = dc.run(&PODS, 0, 2 * S, 0);
    assert!(
        quiet.is_zero(),
        "a new term gave {quiet} within the previous term's pod-lease lifetime (floor + E may still be in use)"
    );
    let later = dc.run(&PODS, 2 * S, 6 * S, 3 * S);
    assert_eq!(later, floor.saturating_add(e), "after the quiet period the floor and E are usable");
}

#[test]
fn negative_control_the_old_rule_hands_out_the_emergency_allowance_at_once() {
    let e = Quota::per_s(100, 2);
    let bugs = KnownBugs { emergency_before_quiet_period: true, ..KnownBugs::default() };
    let mut dc = dc(FailMode::BestEffort { emergency: e }, Quota::per_s(100, 2), "m", 0, bugs);
    assert_eq!(dc.run(&PODS, 0, 2 * S, 0), e, "the old rule spends E during the quiet period");
}

/// Hole 3: a pod restarted under the same id, its wall clock stepped back. Its sequence numbers
/// repeat the old process's, so a late lease that answered the old process's report N would be
/// timed from the new process's send of N. The incarnation tells them apart.
#[test]
fn a_pod_restarted_under_the_same_id_never_applies_a_lease_that_answered_its_previous_life() {
    assert_eq!(late_lease_after_restart(KnownBugs::default()), Err(LeaseRejection::NotMine));
}

#[test]
fn negative_control_a_pod_without_incarnations_applies_its_previous_lifes_lease() {
    let bugs = KnownBugs { pod_ignores_incarnation: true, ..KnownBugs::default() };
    assert_eq!(late_lease_after_restart(bugs), Ok(()));
}

fn late_lease_after_restart(bugs: KnownBugs) -> Result<(), LeaseRejection> {
    let cfg = |incarnation| PodConfig {
        limit: "api".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation,
        weight: 1.0,
        bugs,
    };
    let mut old = PodCore::new(cfg(0x01d), 0);
    let first = old.report(0, IntervalCounters::default(), true);
    // The old process dies; its DC manager answers its report late.
    let late = PodLease {
        v: 1,
        limit: "api".into(),
        dc: "bkk".into(),
        pod: "p1".into(),
        incarnation: first.incarnation,
        issuer: "m".into(),
        version: LeaseVersion::new(1, 1),
        lease_id: "x".into(),
        quota: Quota::per_s(900, 9),
        ttl_ms: 1_000,
        basis_seq: first.seq,
        limit_removed: false,
    };
    let mut new = PodCore::new(cfg(0x9e3), 800 * MS);
    let again = new.report(900 * MS, IntervalCounters::default(), true);
    assert_eq!(again.seq, first.seq, "sequence numbers start again in every process");
    new.on_lease(&late, 950 * MS)
}

/// Hole 6: a new leader that finds no ledger record although the fence shows one was written
/// (a lost single-replica bucket) issues nothing for a full DC-lease lifetime.
#[test]
fn a_leader_whose_ledger_record_was_lost_waits_a_full_dc_lease_lifetime_before_issuing() {
    use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
    use leasehold_core::wire::{DcReport, LedgerFence, LedgerRecord};
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO), ("eu", Quota::ZERO)]);
    let ttl_ns = cfg.dc_ttl_ms * MS;
    let listed = LedgerFence::raised(None, 7, cfg.dc_ttl_ms).covering(&LedgerRecord::empty("api", 7, "c0"));
    let fence = LedgerFence::raised(listed.as_ref(), 8, cfg.dc_ttl_ms);
    assert!(matches!(Stored::classify("api", None, Some(&fence)), Stored::Lost(_)), "a fence without a record: lost");
    assert!(matches!(Stored::classify("api", None, None), Stored::Fresh));
    assert!(matches!(Stored::classify("new", None, Some(&fence)), Stored::Fresh), "never written: fresh");
    let fresh = CoordinatorCore::resume(cfg.clone(), "c1", 1, Stored::Fresh, 0);
    assert_eq!(fresh.issues_from_ns(), 0, "a first start issues at once");
    let mut c = CoordinatorCore::resume(cfg, "c2", 9, Stored::classify("api", None, Some(&fence)), 0);
    let report = |seq, dc: &str| DcReport {
        pods_healthy: 2,
        ..DcReport::new("api", dc, &format!("{dc}-mgr"), 1, seq, Quota::per_s(900, 0))
    };
    let mut t = 0;
    let mut first_grant = None;
    let mut seq = 0;
    while t < 2 * ttl_ns && first_grant.is_none() {
        seq += 1;
        c.on_dc_report(&report(seq, "bkk"), t);
        c.on_dc_report(&report(seq, "eu"), t);
        if !c.tick(t).is_empty() {
            first_grant = Some(t);
        }
        t += 250 * MS;
    }
    let first = first_grant.expect("the leader issues once the quiet period is over");
    assert!(first >= ttl_ns, "issued after {} ms, before a {} ms DC lease could expire", first / MS, ttl_ns / MS);
}

/// Hole 7 (waste): a delayed report from a previous DC-manager term must not turn the DC's
/// holder back to a manager that is gone (its next lease would be wasted for a whole TTL).
#[test]
fn a_delayed_report_from_an_earlier_manager_term_does_not_change_the_dcs_holder() {
    use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
    use leasehold_core::wire::DcReport;
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO)]);
    let mut c = CoordinatorCore::resume(cfg, "c", 1, Stored::Fresh, 0);
    let report = |holder: &str, term, seq| DcReport {
        pods_healthy: 2,
        ..DcReport::new("api", "bkk", holder, term, seq, Quota::per_s(500, 0))
    };
    c.on_dc_report(&report("bkk-mgr-e9", 9, 1), 0);
    c.on_dc_report(&report("bkk-mgr-e4", 4, 77), MS);
    assert_eq!(c.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e9"));
    let leases = c.tick(2 * MS);
    assert!(leases.iter().all(|l| l.holder == "bkk-mgr-e9"), "{leases:?}");

    // Across a coordinator takeover too (ninth outside review): the new leader knows the
    // holder's term from the record, and the holder of a DC with leases from two replicas is the
    // newest's, not the one whose name sorts last.
    c.on_dc_report(&report("bkk-mgr-e10", 10, 1), 3 * MS);
    let leases = c.tick(2 * S);
    assert!(leases.iter().all(|l| l.holder == "bkk-mgr-e10"), "{leases:?}");
    let record = c.record();
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO)]);
    let mut next = CoordinatorCore::resume(cfg, "c2", 2, Stored::Record(&record), 3 * S);
    assert_eq!(next.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e10"));
    next.on_dc_report(&report("bkk-mgr-e9", 9, 2), 3 * S + MS);
    assert_eq!(next.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e10"), "a delayed report of term 9 was accepted");
    // A record of an older writer (no `dc_holders`): the newest lease's holder.
    let older = leasehold_core::wire::LedgerRecord { dc_holders: Default::default(), ..record };
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 20), &[("bkk", Quota::ZERO)]);
    let next = CoordinatorCore::resume(cfg, "c3", 3, Stored::Record(&older), 3 * S);
    assert_eq!(next.dcs()["bkk"].holder.as_deref(), Some("bkk-mgr-e10"));
}
