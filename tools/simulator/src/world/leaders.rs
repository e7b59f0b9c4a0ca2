//! Leadership of the coordinator and of each DC's managers, through the core's [`Leadership`]
//! state machine against a compare-and-set key register. Reads and writes take time (and may be
//! slowed or lost); nothing here expires a key by itself.

use super::{Ev, World, MS};
use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{next_epoch, CoordinatorCore, Stored};
use leasehold_core::dc_manager::DcManagerCore;
use leasehold_core::leadership::{KeyState, LeaderRequest, Leadership, LeadershipConfig, Transition, WriteOutcome};
use leasehold_core::wire::LedgerFence;
use std::collections::BTreeMap;

/// Which replica a leadership operation belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Who {
    Coord(usize),
    /// DC, replica.
    Mgr(usize, usize),
}

/// A leadership operation on its way: to the register, then back with its answer.
pub(super) struct LeaderOp {
    who: Who,
    incarnation: u64,
    request: LeaderRequest,
    /// What a write puts in the key, made when it is sent.
    value: Vec<u8>,
    answer: Option<Answer>,
    /// The driver gave up on it (its answer is dropped; a write may still land).
    abandoned: bool,
}

#[derive(Clone, Debug)]
enum Answer {
    /// The key's revision and value (`None`: absent).
    Read(Option<(u64, Vec<u8>)>),
    Wrote(WriteOutcome),
    /// Lost on the way: the driver's own timeout fires.
    TimedOut,
}

/// The leader keys (one bucket-wide revision counter, like a JetStream stream sequence), each
/// with its revision and value (the coordinator's: its holder's id; a DC's: a term record).
#[derive(Default)]
pub(super) struct LeaderKeys {
    revision: u64,
    keys: BTreeMap<String, (u64, Vec<u8>)>,
}

impl LeaderKeys {
    /// The coordinator key's holder.
    pub(super) fn coordinator(&self) -> Option<&str> {
        self.keys.get("coordinator").and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// How long a replica waits for an answer before it counts it as lost.
const OP_TIMEOUT_MS: u64 = 1_000;
/// While leader replies are slow, the share of requests held up on their way to the register
/// past the driver's timeout (they land after the driver gave up on them).
const STUCK_SHARE: f64 = 0.2;

/// What the coordinator's key holds, as its election reads it (its value is the holder's id).
fn coordinator_key_state(entry: Option<(u64, Vec<u8>)>) -> KeyState {
    match entry {
        None => KeyState::Absent,
        Some((revision, value)) => KeyState::Held { revision, holder: String::from_utf8_lossy(&value).into_owned() },
    }
}

pub(super) fn election(id: &str, ttl_ms: u64, bugs: &KnownBugs) -> Leadership {
    let mut cfg = LeadershipConfig::new(ttl_ms);
    cfg.bugs.leader_fresh_from_reply = bugs.leader_fresh_from_reply;
    cfg.bugs.leader_forgets_unresolved_writes = bugs.leader_forgets_unresolved_writes;
    Leadership::new(id, cfg)
}

impl World {
    fn key_of(&self, who: Who) -> String {
        match who {
            Who::Coord(_) => "coordinator".into(),
            Who::Mgr(d, _) => format!("dc.{}", self.sc.dcs[d].name),
        }
    }

    fn election_mut(&mut self, who: Who) -> &mut Leadership {
        match who {
            Who::Coord(c) => &mut self.coords[c].election,
            Who::Mgr(d, r) => &mut self.dcs[d].mgrs[r].election,
        }
    }

    pub(super) fn local_of(&self, who: Who) -> u64 {
        match who {
            Who::Coord(c) => self.coords[c].clock.local(self.now),
            Who::Mgr(d, r) => self.dcs[d].mgrs[r].clock.local(self.now),
        }
    }

    fn incarnation_of(&self, who: Who) -> u64 {
        match who {
            Who::Coord(c) => self.coords[c].incarnation,
            Who::Mgr(d, r) => self.dcs[d].mgrs[r].incarnation,
        }
    }

    fn op_delay(&mut self) -> u64 {
        self.net_rng.range_u64(1, 5) * MS + self.net_rng.range_u64(0, 999_999)
    }

    /// Let the replica's election send what it wants to send now.
    pub(super) fn poll_election(&mut self, who: Who) {
        let local = self.local_of(who);
        let Some(request) = self.election_mut(who).poll(local) else { return };
        let incarnation = self.incarnation_of(who);
        let value = self.key_value(who);
        self.leader_ops.push(Some(LeaderOp { who, incarnation, request, value, answer: None, abandoned: false }));
        let i = self.leader_ops.len() - 1;
        let slow_ms = self.net.faults.slow_leader_replies_ms;
        let at = if slow_ms > 0 && self.net_rng.chance(STUCK_SHARE) {
            self.push(self.now + OP_TIMEOUT_MS * MS, Ev::LeaderTimeout(i));
            self.now + OP_TIMEOUT_MS * MS + self.net_rng.range_u64(1, slow_ms.max(2)) * MS
        } else {
            self.now + self.op_delay()
        };
        self.push(at, Ev::Leader(i));
        if matches!(request, LeaderRequest::Write { .. }) {
            self.pause_if_armed(who);
        }
    }

    /// A pause fault armed for "right after the next write" starts now.
    fn pause_if_armed(&mut self, who: Who) {
        match who {
            Who::Coord(c) => {
                if let Some(ns) = self.coords[c].pause_after_write_ns {
                    self.pause_coordinator(c, self.now + ns);
                }
            }
            Who::Mgr(d, r) => {
                if let Some(ns) = self.dcs[d].mgrs[r].pause_after_write_ns {
                    self.pause_mgr(d, r, self.now + ns);
                }
            }
        }
    }

    /// Step of an operation: served by the register, or its answer arriving.
    pub(super) fn on_leader_op(&mut self, i: usize) {
        let Some(mut op) = self.leader_ops[i].take() else { return };
        if op.incarnation != self.incarnation_of(op.who) {
            return; // the process that sent it is gone
        }
        let Some(answer) = op.answer.take() else {
            // At the register (served even if the driver has given up on it).
            let answer = self.serve(op.who, op.request, &op.value);
            let disconnected = matches!(op.who, Who::Mgr(d, _) if self.net.dc_reconnect_at[d] > self.now);
            let lost = disconnected || self.net_rng.chance(self.net.faults.loss);
            let (answer, delay) = if lost {
                (Answer::TimedOut, OP_TIMEOUT_MS * MS)
            } else {
                (answer, self.op_delay() + self.net.faults.slow_leader_replies_ms * MS)
            };
            op.answer = Some(answer);
            self.leader_ops[i] = Some(op);
            self.push(self.now + delay, Ev::Leader(i));
            return;
        };
        if op.abandoned {
            return; // the driver gave up on it: its answer is dropped
        }
        if self.is_frozen(op.who) {
            // A paused process reads its socket when it wakes.
            let at = self.frozen_until(op.who);
            op.answer = Some(answer);
            self.leader_ops[i] = Some(op);
            self.push(at, Ev::Leader(i));
            return;
        }
        let local = self.local_of(op.who);
        let t = match (op.who, answer) {
            (Who::Coord(c), answer) => {
                let e = &mut self.coords[c].election;
                match answer {
                    Answer::Read(entry) => e.on_read(coordinator_key_state(entry), local),
                    Answer::Wrote(outcome) => e.on_write(outcome, local),
                    Answer::TimedOut => e.abandon(local),
                }
            }
            (Who::Mgr(d, r), answer) => {
                let m = &mut self.dcs[d].mgrs[r];
                let (e, records) = (&mut m.election, &mut m.records);
                match answer {
                    Answer::Read(entry) => records.on_read(e, entry.as_ref().map(|(r, v)| (*r, v.as_slice())), local),
                    Answer::Wrote(outcome) => records.on_write(e, outcome, local),
                    Answer::TimedOut => records.abandon(e, local),
                }
            }
        };
        self.on_transition(op.who, t);
    }

    /// The driver's timeout for an operation stuck on its way: it gives up (the operation may
    /// still reach the register later).
    pub(super) fn on_leader_timeout(&mut self, i: usize) {
        let Some(op) = self.leader_ops[i].as_ref() else { return }; // answered already
        let who = op.who;
        if op.abandoned || op.incarnation != self.incarnation_of(who) {
            return;
        }
        if self.is_frozen(who) {
            // A paused process runs its timers when it wakes.
            let at = self.frozen_until(who);
            self.push(at, Ev::LeaderTimeout(i));
            return;
        }
        if let Some(op) = self.leader_ops[i].as_mut() {
            op.abandoned = true;
        }
        let local = self.local_of(who);
        let t = match who {
            Who::Coord(c) => self.coords[c].election.abandon(local),
            Who::Mgr(d, r) => {
                let m = &mut self.dcs[d].mgrs[r];
                m.records.abandon(&mut m.election, local)
            }
        };
        self.on_transition(who, t);
    }

    fn on_transition(&mut self, who: Who, t: Option<Transition>) {
        match t {
            Some(Transition::Elected { epoch }) => self.elected(who, epoch),
            Some(Transition::Deposed { .. }) => self.deposed(who),
            None => {}
        }
    }

    /// What a write of `who` sent now puts in its key: the coordinator's id, or a DC manager's
    /// term record.
    fn key_value(&self, who: Who) -> Vec<u8> {
        let local = self.local_of(who);
        match who {
            Who::Coord(c) => self.coords[c].election.id().as_bytes().to_vec(),
            Who::Mgr(d, r) => {
                let m = &self.dcs[d].mgrs[r];
                m.records.value(m.election.id(), local)
            }
        }
    }

    fn serve(&mut self, who: Who, request: LeaderRequest, value: &[u8]) -> Answer {
        let key = self.key_of(who);
        let lk = &mut self.leader_keys;
        match request {
            LeaderRequest::Read => Answer::Read(lk.keys.get(&key).cloned()),
            LeaderRequest::Write { expected_revision } => {
                if lk.keys.get(&key).map(|(r, _)| *r) != expected_revision {
                    return Answer::Wrote(WriteOutcome::Conflict);
                }
                lk.revision += 1;
                lk.keys.insert(key, (lk.revision, value.to_vec()));
                Answer::Wrote(WriteOutcome::Written { revision: lk.revision })
            }
        }
    }

    fn is_frozen(&self, who: Who) -> bool {
        self.frozen_until(who) > self.now
    }

    fn frozen_until(&self, who: Who) -> u64 {
        match who {
            Who::Coord(c) => self.coords[c].paused_until,
            Who::Mgr(d, r) => self.dcs[d].mgrs[r].paused_until,
        }
    }

    fn elected(&mut self, who: Who, claim_revision: u64) {
        match who {
            Who::Coord(c) => {
                let fence = self.kv.fence.clone();
                let epoch = next_epoch(self.kv.max_epoch, fence.as_ref().map(|f| f.epoch), claim_revision);
                let stored = Stored::classify("partner-api", self.kv.record.as_deref(), fence.as_ref());
                let local = self.coords[c].clock.local(self.now);
                let cfg = self.limit_config();
                // The fence goes up before any record of this epoch.
                self.kv.fence = Some(LedgerFence::raised(fence.as_ref(), epoch, cfg.dc_ttl_ms));
                let core = CoordinatorCore::resume(cfg, &self.coords[c].id, epoch, stored, local);
                self.kv.max_epoch = epoch;
                self.coords[c].core = Some(core);
                self.coords[c].record_rev = self.kv.record_rev;
                self.metrics.takeovers += 1;
                self.write_record(c, false);
            }
            Who::Mgr(d, r) => {
                let mut cfg = self.dc_config(d, r, claim_revision);
                cfg.inherited = self.dcs[d].mgrs[r].records.inherited();
                let local = self.dcs[d].mgrs[r].clock.local(self.now);
                let mut core = DcManagerCore::new(cfg.clone(), local);
                // The term reads the record directly (newer than what its watch may deliver
                // next) and runs on the rules it took; it cannot while its DC is cut off.
                let out = self.start_term(d, r, &mut core, &cfg);
                self.dcs[d].mgrs[r].core = Some(core);
                self.metrics.dc_takeovers += 1;
                self.route_dc(d, out);
            }
        }
    }

    fn deposed(&mut self, who: Who) {
        match who {
            Who::Coord(c) => self.coords[c].core = None,
            Who::Mgr(d, r) => self.dcs[d].mgrs[r].core = None,
        }
    }
}
