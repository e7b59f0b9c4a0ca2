//! A renewal that lands after the read meant to resolve it (docs/FINDINGS.md#f14),
//! on a compare-and-set register of the leader key.

use super::*;

/// A compare-and-set register of the leader key.
#[derive(Default)]
struct Key {
    state: Option<(u64, String)>,
}

impl Key {
    fn read(&self) -> KeyState {
        match &self.state {
            None => KeyState::Absent,
            Some((revision, holder)) => KeyState::Held { revision: *revision, holder: holder.clone() },
        }
    }

    fn write(&mut self, expected: Option<u64>, who: &str) -> WriteOutcome {
        let current = self.state.as_ref().map(|(r, _)| *r);
        if current != expected {
            return WriteOutcome::Conflict;
        }
        let revision = current.unwrap_or(0) + 1;
        self.state = Some((revision, who.into()));
        WriteOutcome::Written { revision }
    }
}

/// TTL 1 s (act 0.6 s, renew every 0.25 s), one clock, no drift. Leader `a`'s renewal W1 times
/// out; its read R1 is served before W1 lands but answered late (640 ms, within the 1.5 s the
/// simulator allows); W1 then lands. `a` sends W2 (compare-and-set on the old revision: it
/// conflicts, the answer is lost), reads, finds W1's revision naming itself and extends its term
/// from W2's send. Follower `b` saw W1's revision 1.1 s before that extension ends, claims after
/// a full TTL and acts while `a` still does.
#[test]
fn a_renewal_that_landed_after_a_read_missed_it_never_extends_a_later_renewals_term() {
    assert_eq!(renewal_landing_after_a_read(LeadershipConfig::new(1_000)), None, "two replicas act at once");
}

#[test]
fn negative_control_forgetting_an_unresolved_write_lets_two_replicas_act() {
    let cfg = LeadershipConfig {
        bugs: crate::bugs::KnownBugs { leader_forgets_unresolved_writes: true, ..Default::default() },
        ..LeadershipConfig::new(1_000)
    };
    assert!(renewal_landing_after_a_read(cfg).is_some(), "the old rule went unnoticed");
}

/// The first instant (ms) at which both replicas act, if any.
fn renewal_landing_after_a_read(cfg: LeadershipConfig) -> Option<u64> {
    let mut key = Key::default();
    let mut a = Leadership::new("a", cfg);
    let mut b = Leadership::new("b", cfg);
    let ms = |x: u64| x * MS;

    // `a` is elected: reads the key absent at 0, claims at 1000.
    assert_eq!(a.poll(0), Some(LeaderRequest::Read));
    a.on_read(key.read(), 0);
    assert_eq!(a.poll(ms(600)), Some(LeaderRequest::Read));
    a.on_read(key.read(), ms(600));
    assert_eq!(a.poll(ms(1_000)), Some(LeaderRequest::Write { expected_revision: None }));
    assert_eq!(a.on_write(key.write(None, "a"), ms(1_005)), Some(Transition::Elected { epoch: 1 }));
    // `b` starts watching.
    assert_eq!(b.poll(ms(1_010)), Some(LeaderRequest::Read));
    b.on_read(key.read(), ms(1_010));

    // 1250: renewal W1 (CAS on 1); no answer by 1450.
    assert_eq!(a.poll(ms(1_250)), Some(LeaderRequest::Write { expected_revision: Some(1) }));
    assert_eq!(a.abandon(ms(1_450)), None);
    // 1450: `a` reads to resolve it (R1). The register serves R1 at 1460: revision 1.
    assert_eq!(a.poll(ms(1_450)), Some(LeaderRequest::Read));
    let r1 = key.read();
    // 1470: W1 lands after all (a timed-out write may land later).
    assert_eq!(key.write(Some(1), "a"), WriteOutcome::Written { revision: 2 });
    // 1490: `b` sees revision 2 and starts its full-TTL wait from there.
    assert_eq!(b.poll(ms(1_480)), Some(LeaderRequest::Read));
    b.on_read(key.read(), ms(1_490));
    // 2100: R1's slow answer: revision 1, the write "did not land". `a` is not acting (1605).
    assert_eq!(a.on_read(r1, ms(2_100)), None);
    assert_eq!(a.acting_epoch(ms(2_100)), None);
    // 2100: W2 (CAS on 1) conflicts with W1's revision 2; its answer is lost.
    assert_eq!(a.poll(ms(2_100)), Some(LeaderRequest::Write { expected_revision: Some(1) }));
    assert_eq!(key.write(Some(1), "a"), WriteOutcome::Conflict);
    assert_eq!(a.abandon(ms(2_300)), None);
    // 2300: `a` reads: revision 2 names it. It takes W1's revision for W2's.
    assert_eq!(a.poll(ms(2_300)), Some(LeaderRequest::Read));
    assert_eq!(a.on_read(key.read(), ms(2_310)), None);
    println!("a acts until {:?} ms", a.acts_until_ns().map(|t| t / MS));
    // 2350: `a` renews (W3, CAS on 2); it is slow and reaches the register only after b's claim.
    assert_eq!(a.poll(ms(2_350)), Some(LeaderRequest::Write { expected_revision: Some(2) }));
    // `b` keeps reading the same revision 2 and claims after a full TTL since 1490.
    assert_eq!(b.poll(ms(2_000)), Some(LeaderRequest::Read));
    b.on_read(key.read(), ms(2_000));
    assert_eq!(b.poll(ms(2_490)), Some(LeaderRequest::Write { expected_revision: Some(2) }));
    assert_eq!(b.on_write(key.write(Some(2), "b"), ms(2_495)), Some(Transition::Elected { epoch: 3 }));
    // W3 reaches the register now: conflict; its answer reaches `a` at 2800.
    let w3 = key.write(Some(2), "a");
    let both = (ms(2_495)..ms(2_800))
        .step_by(MS as usize * 5)
        .find(|&t| a.acting_epoch(t).is_some() && b.acting_epoch(t).is_some());
    if let Some(t) = both {
        println!(
            "at {} ms both act: a (epoch {:?}, until {:?} ms) and b (epoch {:?})",
            t / MS,
            a.acting_epoch(t),
            a.acts_until_ns().map(|x| x / MS),
            b.acting_epoch(t)
        );
    }
    a.on_write(w3, ms(2_800));
    both.map(|t| t / MS)
}

/// A renewal that timed out lands late and makes the next renewal conflict: the read that
/// follows shows the leader's own newer revision, so the term goes on (measured from the
/// earlier send) instead of ending for a whole TTL.
#[test]
fn a_renewal_that_conflicts_with_its_own_late_predecessor_keeps_the_term() {
    let mut key = Key::default();
    let mut a = Leadership::new("a", LeadershipConfig::new(1_000));
    a.poll(0);
    a.on_read(key.read(), 0);
    a.poll(600 * MS);
    a.on_read(key.read(), 600 * MS);
    a.poll(1_000 * MS);
    assert_eq!(a.on_write(key.write(None, "a"), 1_001 * MS), Some(Transition::Elected { epoch: 1 }));
    // W1 at 1,250 ms times out; the read shows it has not landed yet.
    assert_eq!(a.poll(1_250 * MS), Some(LeaderRequest::Write { expected_revision: Some(1) }));
    a.abandon(1_450 * MS);
    a.poll(1_450 * MS);
    assert_eq!(a.on_read(key.read(), 1_460 * MS), None);
    // W1 lands; W2 (CAS on 1) at 1,500 ms conflicts with it.
    key.write(Some(1), "a");
    assert_eq!(a.poll(1_500 * MS), Some(LeaderRequest::Write { expected_revision: Some(1) }));
    assert_eq!(a.on_write(key.write(Some(1), "a"), 1_510 * MS), None, "no step-down before the read");
    assert_eq!(a.poll(1_510 * MS), Some(LeaderRequest::Read));
    assert_eq!(a.on_read(key.read(), 1_520 * MS), None);
    assert_eq!(a.term(), Some(1));
    // Extended from W1's send (1,250 + 600), not W2's.
    assert_eq!(a.acting_epoch(1_849 * MS), Some(1));
    assert_eq!(a.acting_epoch(1_850 * MS), None);
    assert_eq!(a.poll(1_760 * MS), Some(LeaderRequest::Write { expected_revision: Some(2) }));
}
