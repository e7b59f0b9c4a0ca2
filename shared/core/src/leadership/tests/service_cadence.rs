//! Followers at the services' cadence: how long a follower waits to claim when reads go
//! unanswered.

use super::*;

/// The services' cadence: a 3 s TTL, a read every second, a request timeout of 2 s, and a sight
/// gap of the TTL plus that timeout.
fn service_follower() -> Leadership {
    Leadership::new("b", LeadershipConfig { sight_gap_ms: 5_000, ..LeadershipConfig::new(3_000) })
}

/// Drives `f` from `from_ms` to `until_ms` at one poll a second: a read sent at `t` is answered
/// with the key unchanged at once unless `lost(t)`, in which case the driver gives up at
/// `t + 2 s`. Returns when it first asked to write (claim), if it did.
fn poll_reads(f: &mut Leadership, from_ms: u64, until_ms: u64, lost: impl Fn(u64) -> bool) -> Option<u64> {
    let held = KeyState::Held { revision: 3, holder: "a".into() };
    let mut t = from_ms;
    while t <= until_ms {
        match f.poll(t * MS) {
            Some(LeaderRequest::Write { .. }) => return Some(t),
            Some(LeaderRequest::Read) if lost(t) => {
                t += 2_000;
                assert_eq!(f.abandon(t * MS), None);
                continue;
            }
            Some(LeaderRequest::Read) => assert_eq!(f.on_read(held.clone(), t * MS), None),
            None => {}
        }
        t += 1_000;
    }
    None
}

#[test]
fn a_follower_that_lost_sight_of_the_key_waits_a_full_ttl_again() {
    // Every NATS server down from 0.5 s to 6.5 s: the reads sent at 1 s and 4 s go unanswered.
    // After that outage the incumbent, cut off as well, gets a full TTL to renew once the key
    // answers, instead of racing a follower's claim at the first answer.
    let mut f = service_follower();
    let claimed = poll_reads(&mut f, 0, 20_000, |t| (1_000..6_500).contains(&t));
    // Unchanged since 0 ms, but no answer from 0 to 7 s: the wait starts again at 7 s.
    assert_eq!(claimed, Some(10_000), "claimed across a gap in sight");
}

#[test]
fn one_lost_read_does_not_hold_a_failover_up() {
    // The leader is gone; the follower's read at 1 s goes unanswered. The next answer (at 4 s)
    // comes within the sight gap: the claim goes out then, as without the loss.
    let mut f = service_follower();
    assert_eq!(poll_reads(&mut f, 0, 20_000, |t| t == 1_000), Some(4_000));
    // Every other read lost (those sent at 1, 5, 9 … s): it claims after the next answer.
    let mut f = service_follower();
    assert_eq!(poll_reads(&mut f, 0, 20_000, |t| t % 4_000 == 1_000), Some(4_000));
    // No loss at all: at the TTL.
    let mut f = service_follower();
    assert_eq!(poll_reads(&mut f, 0, 20_000, |_| false), Some(3_000));
}
