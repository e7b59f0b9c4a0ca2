//! Step-by-step checks of leadership terms in virtual time: three replicas with drifting clocks,
//! a compare-and-set register, requests and replies delayed or lost, replicas stalled with a
//! write in flight, and a driver that gives up on a request after a timeout (so a write it
//! abandoned may still land later, after the read that was meant to resolve it). At every step
//! at most one replica may act.

use super::*;
use crate::rng::SeededRng;
use std::collections::BTreeMap;

const MS: u64 = 1_000_000;
const TTL_MS: u64 = 1_000;
/// The driver's request timeout: its answer is dropped if it comes later.
const TIMEOUT_MS: u64 = 400;
/// Seeds of the stormy run (about 0.4 ms each).
const STORM_SEEDS: u64 = 3_000;

#[derive(Clone, Copy, Debug)]
enum Ev {
    Tick(usize),
    /// Request `.1` of replica `.0` reaches the register.
    Serve(usize, u64, LeaderRequest),
    /// The answer to request `.1` reaches replica `.0`.
    Answer(usize, u64, Answer),
    /// Replica `.0`'s driver stops waiting for request `.1`.
    Timeout(usize, u64),
}

#[derive(Clone, Copy, Debug)]
enum Answer {
    Wrote(WriteOutcome),
    Read(Option<(u64, usize)>),
}

struct Replica {
    core: Leadership,
    drift: f64,
    base_ns: u64,
    stalled_until: u64,
    epochs: Vec<u64>,
    /// The request the driver waits for, and the id the next one gets.
    outstanding: Option<u64>,
    next_request: u64,
}

impl Replica {
    fn local(&self, real: u64) -> u64 {
        self.base_ns + (real as f64 * (1.0 + self.drift)) as u64
    }
}

struct World {
    now: u64,
    queue: BTreeMap<(u64, u64), Ev>,
    seq: u64,
    key: Option<(u64, usize)>,
    revision: u64,
    replicas: Vec<Replica>,
    rng: SeededRng,
    /// Longest delay of a request or its answer, ms.
    delay_ms: u64,
    loss: f64,
    /// Chance that a request is held up past the driver's timeout (up to three timeouts).
    stuck: f64,
}

impl World {
    fn new(seed: u64, cfg: LeadershipConfig, drift: f64) -> Self {
        let mut rng = SeededRng::new(seed);
        let replicas = (0..3)
            .map(|i| Replica {
                core: Leadership::new(&format!("r{i}"), cfg),
                drift: (rng.next_f64() * 2.0 - 1.0) * drift,
                base_ns: rng.range_u64(0, 1_000_000) * MS,
                stalled_until: 0,
                epochs: Vec::new(),
                outstanding: None,
                next_request: 0,
            })
            .collect();
        let mut w = World {
            now: 0,
            queue: BTreeMap::new(),
            seq: 0,
            key: None,
            revision: 0,
            replicas,
            rng,
            delay_ms: 20,
            loss: 0.0,
            stuck: 0.0,
        };
        for i in 0..3 {
            let at = w.rng.range_u64(0, 100) * MS;
            w.push(at, Ev::Tick(i));
        }
        w
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn delay(&mut self) -> u64 {
        self.rng.range_u64(1, self.delay_ms.max(1)) * MS
    }

    fn apply(&mut self, i: usize, t: Option<Transition>) {
        if let Some(Transition::Elected { epoch }) = t {
            self.replicas[i].epochs.push(epoch);
        }
    }

    fn step(&mut self) {
        let ((at, _), ev) = self.queue.pop_first().expect("ticks keep the queue non-empty");
        self.now = at;
        if let Ev::Tick(i) | Ev::Answer(i, ..) | Ev::Timeout(i, _) = ev {
            // A stalled process runs its timers and reads its socket when it wakes.
            let until = self.replicas[i].stalled_until;
            if until > self.now {
                self.push(until, ev);
                return;
            }
        }
        match ev {
            Ev::Tick(i) => {
                self.push(self.now + 50 * MS, Ev::Tick(i));
                let local = self.replicas[i].local(self.now);
                if let Some(req) = self.replicas[i].core.poll(local) {
                    let r = &mut self.replicas[i];
                    r.next_request += 1;
                    let id = r.next_request;
                    r.outstanding = Some(id);
                    let d = if self.rng.chance(self.stuck) {
                        self.rng.range_u64(TIMEOUT_MS, 3 * TIMEOUT_MS) * MS
                    } else {
                        self.delay()
                    };
                    self.push(self.now + d, Ev::Serve(i, id, req));
                    self.push(self.now + TIMEOUT_MS * MS, Ev::Timeout(i, id));
                }
            }
            Ev::Serve(i, id, req) => {
                let answer = match req {
                    LeaderRequest::Read => Answer::Read(self.key),
                    LeaderRequest::Write { expected_revision } => {
                        if expected_revision == self.key.map(|(r, _)| r) {
                            self.revision += 1;
                            self.key = Some((self.revision, i));
                            Answer::Wrote(WriteOutcome::Written { revision: self.revision })
                        } else {
                            Answer::Wrote(WriteOutcome::Conflict)
                        }
                    }
                };
                if !self.rng.chance(self.loss) {
                    let d = self.delay();
                    self.push(self.now + d, Ev::Answer(i, id, answer));
                }
            }
            Ev::Answer(i, id, answer) => {
                if self.replicas[i].outstanding != Some(id) {
                    return; // the driver gave up on it
                }
                self.replicas[i].outstanding = None;
                let local = self.replicas[i].local(self.now);
                let core = &mut self.replicas[i].core;
                let t = match answer {
                    Answer::Wrote(o) => core.on_write(o, local),
                    Answer::Read(k) => {
                        let state = match k {
                            None => KeyState::Absent,
                            Some((revision, h)) => KeyState::Held { revision, holder: format!("r{h}") },
                        };
                        core.on_read(state, local)
                    }
                };
                self.apply(i, t);
            }
            Ev::Timeout(i, id) => {
                if self.replicas[i].outstanding == Some(id) {
                    self.replicas[i].outstanding = None;
                    let local = self.replicas[i].local(self.now);
                    let t = self.replicas[i].core.abandon(local);
                    self.apply(i, t);
                }
            }
        }
    }

    fn acting(&self) -> Vec<(usize, u64)> {
        (0..self.replicas.len())
            .filter(|&i| self.replicas[i].stalled_until <= self.now)
            .filter_map(|i| self.replicas[i].core.acting_epoch(self.replicas[i].local(self.now)).map(|e| (i, e)))
            .collect()
    }

    /// Runs until `until_ms`; returns the first instant two replicas acted at once.
    fn run(&mut self, until_ms: u64) -> Option<String> {
        while self.queue.first_key_value().is_some_and(|((t, _), _)| *t <= until_ms * MS) {
            self.step();
            let acting = self.acting();
            if acting.len() > 1 {
                return Some(format!("at {} ms: {acting:?} act at once", self.now / MS));
            }
        }
        None
    }
}

/// Faults: slow answers (up to 40% of the TTL each way), lost answers, requests stuck past the
/// driver's timeout (they may land after the read meant to resolve them), and a leader stalled
/// for two TTLs with a renewal in flight.
fn stormy_run(seed: u64, cfg: LeadershipConfig) -> (Option<String>, World) {
    let mut w = World::new(seed, cfg, 0.05);
    assert_eq!(w.run(3_000), None, "seed {seed}: calm start");
    w.delay_ms = 400;
    w.loss = 0.2;
    w.stuck = 0.5;
    let breach = w.run(8_000);
    if breach.is_some() {
        return (breach, w);
    }
    if let Some(leader) = (0..3).find(|&i| w.replicas[i].core.term().is_some()) {
        w.replicas[leader].stalled_until = w.now + 2 * TTL_MS * MS;
    }
    let breach = w.run(15_000);
    if breach.is_some() {
        return (breach, w);
    }
    w.delay_ms = 20;
    w.loss = 0.0;
    w.stuck = 0.0;
    (w.run(20_000), w)
}

#[test]
fn at_most_one_replica_acts_through_slow_replies_losses_and_stalls() {
    for seed in 1..=STORM_SEEDS {
        let (breach, w) = stormy_run(seed, LeadershipConfig::new(TTL_MS));
        assert_eq!(breach, None, "seed {seed}");
        // Liveness: after the faults, someone acts, and every term's epoch is higher.
        let local = |i: usize| w.replicas[i].local(w.now);
        assert!((0..3).any(|i| w.replicas[i].core.acting_epoch(local(i)).is_some()), "seed {seed}: nobody leads");
        let mut all: Vec<u64> = w.replicas.iter().flat_map(|r| r.epochs.clone()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "seed {seed}: an epoch was used twice");
    }
}

#[test]
fn negative_control_freshness_from_the_reply_lets_two_replicas_act() {
    let cfg = LeadershipConfig {
        bugs: crate::bugs::KnownBugs { leader_fresh_from_reply: true, ..Default::default() },
        ..LeadershipConfig::new(TTL_MS)
    };
    let caught = (1..=STORM_SEEDS).find(|&seed| stormy_run(seed, cfg).0.is_some());
    assert!(caught.is_some(), "slow replies must break the old rule in some seed");
}

#[test]
fn a_first_claim_waits_one_ttl_and_a_renewal_keeps_the_term() {
    let mut l = Leadership::new("a", LeadershipConfig::new(1_000));
    assert_eq!(l.poll(0), Some(LeaderRequest::Read));
    assert_eq!(l.on_read(KeyState::Absent, 10 * MS), None);
    assert_eq!(l.poll(500 * MS), Some(LeaderRequest::Read));
    l.on_read(KeyState::Absent, 510 * MS);
    assert_eq!(l.poll(1_010 * MS), Some(LeaderRequest::Write { expected_revision: None }));
    assert_eq!(l.on_write(WriteOutcome::Written { revision: 7 }, 1_400 * MS), Some(Transition::Elected { epoch: 7 }));
    // Acts from the claim's send time, not the reply's.
    assert_eq!(l.acting_epoch(1_609 * MS), Some(7));
    assert_eq!(l.acting_epoch(1_610 * MS), None);
    assert_eq!(l.poll(1_300 * MS), Some(LeaderRequest::Write { expected_revision: Some(7) }));
    l.on_write(WriteOutcome::Written { revision: 9 }, 1_320 * MS);
    assert_eq!(l.acting_epoch(1_899 * MS), Some(7));
    assert_eq!(l.poll(1_400 * MS), None, "not due yet");
}

#[test]
fn an_unknown_renewal_that_landed_keeps_the_term() {
    let mut l = Leadership::new("a", LeadershipConfig::new(1_000));
    l.poll(0);
    l.on_read(KeyState::Held { revision: 3, holder: "b".into() }, 0);
    l.poll(600 * MS);
    l.on_read(KeyState::Held { revision: 3, holder: "b".into() }, 600 * MS);
    l.poll(1_000 * MS);
    l.on_write(WriteOutcome::Written { revision: 4 }, 1_001 * MS);
    assert_eq!(l.poll(1_250 * MS), Some(LeaderRequest::Write { expected_revision: Some(4) }));
    assert_eq!(l.abandon(1_500 * MS), None);
    assert_eq!(l.poll(1_500 * MS), Some(LeaderRequest::Read), "resolve the unknown outcome first");
    // The write did land: the term goes on, measured from that write's send (1,250 ms).
    assert_eq!(l.on_read(KeyState::Held { revision: 5, holder: "a".into() }, 1_520 * MS), None);
    assert_eq!(l.acting_epoch(1_849 * MS), Some(4));
    assert_eq!(l.acting_epoch(1_850 * MS), None);
    // A conflict ends the term at once.
    l.poll(1_600 * MS);
    assert_eq!(
        l.on_write(WriteOutcome::Conflict, 1_610 * MS),
        Some(Transition::Deposed { reason: "the leader key was written by another" })
    );
    assert_eq!(l.term(), None);
}

mod late_renewal;
mod service_cadence;
