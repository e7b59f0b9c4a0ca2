use super::*;
use crate::bugs::KnownBugs;
use crate::leadership::{LeaderRequest, LeadershipConfig};

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn bounds(pod_ttl_ms: u64) -> PodLeaseBounds {
    PodLeaseBounds { pod_ttl_ms, expiry: ExpiryPolicy::default() }
}

/// A replica of the DC's manager and the key it shares with the others (revision, value).
struct Replica {
    election: Leadership,
    records: TermRecords,
}

type Key = Option<(u64, Vec<u8>)>;

impl Replica {
    fn new(id: &str, pod_ttl_ms: u64) -> Self {
        Self::with_leader_ttl(id, pod_ttl_ms, 3_000)
    }

    fn with_leader_ttl(id: &str, pod_ttl_ms: u64, leader_ttl_ms: u64) -> Self {
        Replica {
            election: Leadership::new(id, LeadershipConfig::new(leader_ttl_ms)),
            records: TermRecords::new(bounds(pod_ttl_ms), leader_ttl_ms, &KnownBugs::default()),
        }
    }

    /// Steps every 250 ms from `from` until this replica leads; returns when.
    fn lead(&mut self, key: &mut Key, from: u64) -> u64 {
        let mut now = from;
        while self.election.term().is_none() {
            self.step(key, now);
            now += 250 * MS;
            assert!(now < from + 60 * S, "never elected");
        }
        now
    }

    fn step(&mut self, key: &mut Key, now: u64) {
        match self.election.poll(now) {
            None => {}
            Some(LeaderRequest::Read) => {
                let entry = key.as_ref().map(|(r, v)| (*r, v.clone()));
                self.records.on_read(&mut self.election, entry.as_ref().map(|(r, v)| (*r, v.as_slice())), now);
            }
            Some(LeaderRequest::Write { expected_revision }) => {
                let outcome = if key.as_ref().map(|(r, _)| *r) == expected_revision {
                    let revision = key.as_ref().map_or(0, |(r, _)| *r) + 1;
                    *key = Some((revision, self.records.value(self.election.id(), now)));
                    WriteOutcome::Written { revision }
                } else {
                    WriteOutcome::Conflict
                };
                self.records.on_write(&mut self.election, outcome, now);
            }
        }
    }
}

#[test]
fn the_first_term_of_a_dc_inherits_nothing() {
    let mut key = None;
    let mut a = Replica::new("a", 5_000);
    a.lead(&mut key, 0);
    assert_eq!(a.records.inherited(), None);
}

#[test]
fn a_successor_inherits_the_bounds_its_predecessor_published() {
    let mut key = None;
    let mut a = Replica::new("a", 20_000);
    let elected_a = a.lead(&mut key, 0);
    // A renews for a while, then dies; B (5 s) watches and takes over.
    let mut b = Replica::new("b", 5_000);
    let mut now = elected_a;
    while now < 10 * S {
        a.step(&mut key, now);
        b.step(&mut key, now);
        now += 250 * MS;
    }
    b.lead(&mut key, now);
    assert_eq!(b.records.inherited(), Some(bounds(20_000)));
}

/// A(20 s) → B(5 s), which dies before it has waited A's leases out → C(5 s): C must still wait
/// A's, because B kept speaking for them.
#[test]
fn a_term_speaks_for_its_predecessors_leases_until_it_has_waited_them_out() {
    let mut key = None;
    let mut a = Replica::new("a", 20_000);
    let t = a.lead(&mut key, 0);
    let mut b = Replica::new("b", 5_000);
    let t = b.lead(&mut key, t); // A never renews: B claims a leader TTL later
    assert_eq!(b.records.published(t), bounds(20_000), "B speaks for A's leases at first");
    let mut c = Replica::new("c", 5_000);
    c.lead(&mut key, t);
    assert_eq!(c.records.inherited(), Some(bounds(20_000)));
    // Once B has waited A's leases out, it speaks for its own alone.
    let later = t + 21 * S;
    assert_eq!(b.records.published(later), bounds(5_000));
}

#[test]
fn a_value_without_bounds_counts_as_the_longest_pod_ttl() {
    let own = bounds(5_000);
    assert_eq!(TermRecord::decode(b"bkk-mgr-1", own), ("bkk-mgr-1".into(), bounds(POD_TTL_MS_MAX)));
    assert_eq!(TermRecord::decode(b"{\"v\":1,\"holder\":", own).1, bounds(POD_TTL_MS_MAX));
    let r = TermRecord { v: 1, holder: "m".into(), pod_leases: bounds(7_000), leader_ttl_ms: Some(3_000) };
    assert_eq!(TermRecord::decode(&r.encode(), own), ("m".into(), bounds(7_000)));
}

#[test]
fn merging_bounds_keeps_the_longer_of_each() {
    let a = PodLeaseBounds {
        pod_ttl_ms: 20_000,
        expiry: ExpiryPolicy { max_drift: 0.01, grace_ms: 300, egress_spread_ms: 0 },
    };
    let b = PodLeaseBounds {
        pod_ttl_ms: 5_000,
        expiry: ExpiryPolicy { max_drift: 0.05, grace_ms: 100, egress_spread_ms: 144 },
    };
    let m = a.merge(b);
    assert_eq!(
        m,
        PodLeaseBounds {
            pod_ttl_ms: 20_000,
            expiry: ExpiryPolicy { max_drift: 0.05, grace_ms: 300, egress_spread_ms: 144 }
        }
    );
    assert!(m.live_until_ns(0) >= a.live_until_ns(0).max(b.live_until_ns(0)));
}

/// A rolling restart that lowers `leader_ttl_ms` (10 s → 3 s): the old leader acts until 60% of
/// its own TTL after its last landed renewal; a standby that waited only its own 3 s would claim
/// while it still acts. It waits the TTL the leader's record names.
#[test]
fn a_standby_waits_the_longer_leader_ttl_its_leader_named() {
    let mut key = None;
    let mut a = Replica::with_leader_ttl("a", 5_000, 10_000);
    let elected = a.lead(&mut key, 0);
    // A renews once more, then its renewals stop landing (it stops at 60% of 10 s after that).
    let mut now = elected;
    while a.election.poll(now).is_none() {
        now += 250 * MS;
    }
    let revision = key.as_ref().map_or(0, |(r, _)| *r) + 1;
    key = Some((revision, a.records.value(a.election.id(), now)));
    a.records.on_write(&mut a.election, WriteOutcome::Written { revision }, now);
    let acts_until = a.election.acts_until_ns().expect("leads");
    let mut b = Replica::with_leader_ttl("b", 5_000, 3_000);
    let claimed = b.lead(&mut key, now);
    assert!(claimed > acts_until, "b claimed at {claimed} while a may act until {acts_until}");
}
