//! A new DC-manager term uses neither its DC's floor nor the emergency allowance E before every
//! pod lease of earlier terms may have ended (docs/FINDINGS.md#f2), and it waits them out by the
//! bounds *they* published in the DC's leader key, whatever its own settings say
//! (docs/FINDINGS.md#f48). The term-record tests run two real terms (leadership, term records and
//! `DcManagerCore`) of one DC, strict, with the coordinators silent: the DC runs on its floor
//! alone.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::dc_manager::{DcManagerConfig, FailMode, PodLeaseBounds, TermRecords, POD_TTL_MS_MAX};
use leasehold_core::leadership::{LeaderRequest, Leadership, LeadershipConfig, WriteOutcome};
use leasehold_core::quota::Quota;

use crate::support::scripted::{bkk_with_scripted_pods as dc, Drive, ScriptedDc, PODS};
use crate::support::{MS, S};

const TICK: u64 = 250 * MS;
const LEADER_TTL_MS: u64 = 3_000;

/// The DC's leader key: its revision and value (a JetStream KV key, answered at once).
#[derive(Default)]
struct Register {
    revision: u64,
    value: Option<(u64, Vec<u8>)>,
}

/// One replica of BKK's manager: its election, its term records and, while it leads, its core.
struct Replica {
    cfg: DcManagerConfig,
    election: Leadership,
    records: TermRecords,
    dc: Option<ScriptedDc>,
}

impl Replica {
    fn new(id: &str, pod_ttl_ms: u64, bugs: KnownBugs) -> Self {
        let mut cfg = DcManagerConfig::new("api", "bkk", id);
        cfg.pod_ttl_ms = pod_ttl_ms;
        cfg.bugs = bugs;
        let records = TermRecords::new(PodLeaseBounds::of(&cfg), LEADER_TTL_MS, &bugs);
        Replica { cfg, election: Leadership::new(id, LeadershipConfig::new(LEADER_TTL_MS)), records, dc: None }
    }

    /// One step of its election against `key` at `now`; a term that begins gets its core.
    fn elect(&mut self, key: &mut Register, floor: Quota, now: u64) {
        let t = match self.election.poll(now) {
            None => None,
            Some(LeaderRequest::Read) => {
                let entry = key.value.as_ref().map(|(r, v)| (*r, v.as_slice()));
                self.records.on_read(&mut self.election, entry, now)
            }
            Some(LeaderRequest::Write { expected_revision }) => {
                let outcome = if key.value.as_ref().map(|(r, _)| *r) == expected_revision {
                    key.revision += 1;
                    key.value = Some((key.revision, self.records.value(self.election.id(), now)));
                    WriteOutcome::Written { revision: key.revision }
                } else {
                    WriteOutcome::Conflict
                };
                self.records.on_write(&mut self.election, outcome, now)
            }
        };
        if let Some(leasehold_core::leadership::Transition::Elected { epoch }) = t {
            let mut cfg = self.cfg.clone();
            cfg.instance = format!("{}-e{epoch}", cfg.instance);
            cfg.epoch = epoch;
            cfg.inherited = self.records.inherited();
            self.dc = Some(ScriptedDc::new(cfg, floor, now, 7, (500, 100)));
        }
    }

    /// Its pod `pod` reports and its core ticks, if it leads; returns the pod's newest lease's
    /// quota if it was issued at this tick.
    fn serve(&mut self, pod: &str, now: u64) -> Option<Quota> {
        let dc = self.dc.as_mut()?;
        let before = dc.held.get(pod).map(|l| l.version);
        dc.report(pod, now, true, true);
        let out = dc.core.tick(now);
        dc.absorb(out);
        dc.held.get(pod).filter(|l| Some(l.version) != before).map(|l| l.quota)
    }
}

/// What happened: the end of the last positive lease the first term gave `p1` (its issue plus
/// its TTL: `p1` stops spending it by then), and when the second term first gave `p2` any quota.
struct Handover {
    first_term_lease_ends: u64,
    second_term_first_grant: Option<u64>,
}

/// Term A (`pod_ttl_ms` = `a_ttl_ms`) gives `p1` the whole floor, then dies at 25 s; its standby
/// B, restarted with `pod_ttl_ms` = 5 s, takes over and serves `p2`. `p1`'s reports are lost: it
/// keeps spending A's last lease.
fn lowered_ttl_handover(a_ttl_ms: u64, bugs: KnownBugs, plain_ids: bool) -> Handover {
    let floor = Quota::per_s(100, 10);
    let mut key = Register::default();
    let mut a = Replica::new("bkk-mgr-a", a_ttl_ms, bugs);
    let mut b = Replica::new("bkk-mgr-b", 5_000, bugs);
    let mut first_term_lease_ends = 0;
    let mut second_term_first_grant = None;
    let mut now = 0;
    while now < 100 * S {
        if now < 25 * S {
            a.elect(&mut key, floor, now);
            if plain_ids && a.dc.is_some() {
                // A version before term records: the key names the holder alone.
                let revision = key.value.as_ref().map_or(0, |(r, _)| *r);
                key.value = Some((revision, b"bkk-mgr-a".to_vec()));
            }
            if let Some(q) = a.serve("p1", now).filter(|q| !q.is_zero()) {
                first_term_lease_ends = now + a_ttl_ms * MS;
                assert!(q.fits_in(&floor), "term A gave {q} above the floor {floor}");
            }
        }
        b.elect(&mut key, floor, now);
        if let Some(q) = b.serve("p2", now).filter(|q| !q.is_zero()) {
            second_term_first_grant.get_or_insert(now);
            assert!(q.fits_in(&floor), "term B gave {q} above the floor {floor}");
        }
        now += TICK;
    }
    assert!(a.dc.is_some() && b.dc.is_some(), "both replicas led a term");
    assert!(first_term_lease_ends > 40 * S, "term A's last lease ran past 40 s: {first_term_lease_ends}");
    Handover { first_term_lease_ends, second_term_first_grant }
}

#[test]
fn a_term_that_lowers_pod_ttl_waits_out_its_predecessors_longer_pod_leases() {
    let h = lowered_ttl_handover(20_000, KnownBugs::default(), false);
    let first = h.second_term_first_grant.expect("term B serves the floor once A's leases ended");
    assert!(
        first >= h.first_term_lease_ends,
        "term B gave p2 the floor at {:.2} s while p1 may spend term A's until {:.2} s: the floor spent twice",
        first as f64 / S as f64,
        h.first_term_lease_ends as f64 / S as f64
    );
    assert!(first < h.first_term_lease_ends + 5 * S, "and not much later: {first}");
}

#[test]
fn negative_control_a_term_that_waits_only_its_own_pod_ttl_spends_the_floor_twice() {
    let bugs = KnownBugs { term_ignores_predecessor_bounds: true, ..KnownBugs::default() };
    let h = lowered_ttl_handover(20_000, bugs, false);
    let first = h.second_term_first_grant.expect("term B serves the floor");
    assert!(first < h.first_term_lease_ends, "{first} >= {}", h.first_term_lease_ends);
}

#[test]
fn a_predecessor_whose_value_names_only_its_holder_is_waited_out_for_the_longest_pod_ttl() {
    let h = lowered_ttl_handover(20_000, KnownBugs::default(), true);
    let first = h.second_term_first_grant.expect("term B serves the floor after the longest TTL");
    assert!(first >= h.first_term_lease_ends, "{first} < {}", h.first_term_lease_ends);
    assert!(first >= 28 * S + POD_TTL_MS_MAX * MS, "term B waited less than {POD_TTL_MS_MAX} ms: {first}");
}

/// Best-effort mode (FINDINGS F2). A new manager term must not hand out the emergency allowance
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
