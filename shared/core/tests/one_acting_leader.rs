//! At most one replica acts as leader at any instant. The leadership core's own tests
//! (`shared/core/src/leadership/tests.rs`) cover slow replies, losses, stalls and late renewals;
//! here, a path through the real `Leadership` found by an outside review (docs/FINDINGS.md#f20).

use leasehold_core::leadership::{KeyState, LeaderRequest, Leadership, LeadershipConfig, Transition, WriteOutcome};

use crate::support::{secs, MS};

// -------------------------------------------------------------------------------------------
// Leadership: a replica re-elected by a read of its own earlier term's key
// -------------------------------------------------------------------------------------------

/// Replica A leads (revision 1) and resigns (the coordinator service resigns when it cannot
/// read the ledger or raise the fence at takeover, or steps down after a ledger conflict): the
/// key still names A at revision 1. A and B both see revision 1 unchanged for a TTL and claim
/// it. A's claim times out; A's read shows the key still at revision 1, naming A. A takes that
/// as its claim having landed and acts under epoch 1 again, although its claim has not landed
/// (and never will): B's claim lands as revision 2 and B acts too.
///
/// The rule at fault: `Leadership::on_read` (follower branch) elects on `mine` alone, without
/// checking that the stored revision is past the revision the pending claim expected.
#[test]
fn a_replica_whose_claim_is_pending_is_not_elected_by_a_read_of_its_own_earlier_term() {
    let cfg = LeadershipConfig::new(1_000);
    let mut a = Leadership::new("a", cfg);
    let mut b = Leadership::new("b", cfg);
    let held = |revision: u64, holder: &str| KeyState::Held { revision, holder: holder.into() };

    // A claims the absent key and leads at revision 1.
    assert_eq!(a.poll(0), Some(LeaderRequest::Read));
    a.on_read(KeyState::Absent, 0);
    assert_eq!(a.poll(600 * MS), Some(LeaderRequest::Read));
    a.on_read(KeyState::Absent, 600 * MS);
    assert_eq!(a.poll(1_000 * MS), Some(LeaderRequest::Write { expected_revision: None }));
    assert_eq!(a.on_write(WriteOutcome::Written { revision: 1 }, 1_010 * MS), Some(Transition::Elected { epoch: 1 }));
    // A resigns; the key keeps naming A at revision 1.
    assert!(matches!(a.resign("the ledger cannot be read"), Some(Transition::Deposed { .. })));

    // B (a follower all along) and A see revision 1 unchanged.
    assert_eq!(b.poll(1_050 * MS), Some(LeaderRequest::Read));
    b.on_read(held(1, "a"), 1_050 * MS);
    assert_eq!(a.poll(1_100 * MS), Some(LeaderRequest::Read));
    a.on_read(held(1, "a"), 1_100 * MS);
    // They keep reading it.
    for r in [&mut a, &mut b] {
        assert_eq!(r.poll(1_600 * MS), Some(LeaderRequest::Read));
        r.on_read(held(1, "a"), 1_600 * MS);
    }

    // Both claim revision 1 after a full TTL.
    assert_eq!(b.poll(2_100 * MS), Some(LeaderRequest::Write { expected_revision: Some(1) }));
    assert_eq!(a.poll(2_100 * MS), Some(LeaderRequest::Write { expected_revision: Some(1) }));
    // A's driver gives up on its claim; its read shows the key still at revision 1 (A's old term).
    assert_eq!(a.abandon(2_500 * MS), None);
    assert_eq!(a.poll(2_500 * MS), Some(LeaderRequest::Read));
    let a_after_read = a.on_read(held(1, "a"), 2_510 * MS);
    println!("A's read of revision 1 (its old term) while its claim is pending: {a_after_read:?}");
    // B's claim lands (revision 2); A's can no longer land.
    assert_eq!(b.on_write(WriteOutcome::Written { revision: 2 }, 2_520 * MS), Some(Transition::Elected { epoch: 2 }));

    let now = 2_530 * MS;
    let acting: Vec<(&str, u64)> =
        [("a", &a), ("b", &b)].iter().filter_map(|(n, r)| r.acting_epoch(now).map(|e| (*n, e))).collect();
    println!("acting at {:.3}s: {acting:?}", secs(now));
    assert!(acting.len() <= 1, "two replicas act at once: {acting:?}");
}
