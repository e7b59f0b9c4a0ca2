//! Leadership of the coordinators and of each DC's managers, through the shared sans-IO
//! [`Leadership`] core against the model's leader keys (compare-and-set on the revision).
//!
//! Each replica polls its election on its own timer with its own clock. The driver performs the
//! request against the KV at once and feeds the answer back at once, unless the explorer armed a
//! fault for the replica's next write ([`WriteFault`]): then the answer comes back
//! `slow_leader_reply_ticks` later, or never (the driver's own timeout, `leader_timeout_ticks`
//! later, makes the outcome unknown), whether or not the write landed. A held answer is fed back
//! at the end of the tick it is due in, so the replica acts on it until its next timer.

use crate::config::ModelConfig;
use crate::model;
use crate::state::State;
use leasehold_shared::coordinator::next_epoch;
use leasehold_shared::leadership::{KeyState, LeaderRequest, Leadership, LeadershipConfig, Transition, WriteOutcome};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A leader key as the KV stores it: absent, or the revision of its last write and the replica
/// it names. Keys are never deleted, so the next revision is one above the stored one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaderKey(Option<(u64, String)>);

impl LeaderKey {
    pub fn holder(&self) -> Option<&str> {
        self.0.as_ref().map(|(_, h)| h.as_str())
    }

    fn read(&self) -> KeyState {
        match &self.0 {
            None => KeyState::Absent,
            Some((revision, holder)) => KeyState::Held { revision: *revision, holder: holder.clone() },
        }
    }

    fn compare_and_set(&mut self, expected_revision: Option<u64>, holder: &str) -> WriteOutcome {
        let stored = self.0.as_ref().map(|(r, _)| *r);
        if stored != expected_revision {
            return WriteOutcome::Conflict;
        }
        let revision = stored.unwrap_or(0) + 1;
        self.0 = Some((revision, holder.to_string()));
        WriteOutcome::Written { revision }
    }
}

/// A replica taking part in an election: coordinator `c`, or DC manager `m` (`dc * 2 + slot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Replica {
    Coordinator(usize),
    Manager(usize),
}

/// What a fault does to a replica's next leader-key write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteFault {
    /// The write lands; its answer arrives `slow_leader_reply_ticks` ticks later.
    SlowReply,
    /// The write lands; its answer is lost, and the driver's timeout makes the outcome unknown.
    ReplyLost,
    /// The write never reaches the KV; the driver's timeout makes the outcome unknown.
    RequestLost,
}

/// The answer to a write held back by a fault; `outcome: None` is the driver's timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeldAnswer {
    pub outcome: Option<WriteOutcome>,
    pub due_tick: u32,
}

/// One replica's election and what the driver holds for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Elector {
    pub election: Leadership,
    pub held: Option<HeldAnswer>,
    /// A fault the explorer armed for this replica's next write.
    pub armed: Option<WriteFault>,
}

impl Elector {
    /// A replica that has watched the key stay absent from `watching_since_ns` (its clock) until
    /// `now_ns`, reading it at both: the model's history before tick 0, so the first term starts
    /// at the first timer.
    pub fn new(id: &str, ttl_ms: u64, cfg: &ModelConfig, watching_since_ns: u64, now_ns: u64) -> Self {
        let mut config = LeadershipConfig::new(ttl_ms);
        config.bug_fresh_from_reply = cfg.bugs.leader_fresh_from_reply;
        let mut election = Leadership::new(id, config);
        if election.poll(watching_since_ns) == Some(LeaderRequest::Read) {
            election.on_read(KeyState::Absent, watching_since_ns);
        }
        // Seen again just now (as a watch would): the key stayed in sight (see `Leadership`).
        election.on_read(KeyState::Absent, now_ns);
        Elector { election, held: None, armed: None }
    }
}

impl State {
    fn elector_and_key(&mut self, who: Replica) -> (&mut Elector, &mut LeaderKey) {
        match who {
            Replica::Coordinator(c) => (&mut self.coords[c].elector, &mut self.kv.coord_key),
            Replica::Manager(m) => {
                let dc = self.managers[m].dc;
                (&mut self.managers[m].elector, &mut self.kv.dc_keys[dc])
            }
        }
    }

    pub fn elector(&self, who: Replica) -> &Elector {
        match who {
            Replica::Coordinator(c) => &self.coords[c].elector,
            Replica::Manager(m) => &self.managers[m].elector,
        }
    }

    /// `who`'s clock now.
    pub fn local_ns(&self, cfg: &ModelConfig, who: Replica) -> u64 {
        let real = self.real_ns(cfg.tick_ms);
        match who {
            Replica::Coordinator(c) => self.coords[c].clock.local(real),
            Replica::Manager(m) => self.managers[m].clock.local(real),
        }
    }

    /// Alive and not frozen: it runs timers and reads answers.
    pub fn runs(&self, who: Replica) -> bool {
        match who {
            Replica::Coordinator(c) => self.coords[c].alive && self.coords[c].paused_until.is_none(),
            Replica::Manager(m) => self.managers[m].alive,
        }
    }

    /// Whether `who` believes its term may act now: running, holding a term's core, and fresh on
    /// its own clock. Two of one role at once means leadership is broken.
    pub fn acts(&self, cfg: &ModelConfig, who: Replica) -> bool {
        let has_core = match who {
            Replica::Coordinator(c) => self.coords[c].core.is_some(),
            Replica::Manager(m) => self.managers[m].core.is_some(),
        };
        self.runs(who) && has_core && self.elector(who).election.acting_epoch(self.local_ns(cfg, who)).is_some()
    }

    /// Polls `who`'s election and performs what it asks; reacts to a term beginning or ending.
    pub fn run_election(&mut self, cfg: &ModelConfig, who: Replica) {
        let now = self.local_ns(cfg, who);
        let tick = self.tick;
        let (elector, key) = self.elector_and_key(who);
        let Some(request) = elector.election.poll(now) else { return };
        let transition = match request {
            LeaderRequest::Read => elector.election.on_read(key.read(), now),
            LeaderRequest::Write { expected_revision } => {
                let fault = elector.armed.take();
                let landed = fault != Some(WriteFault::RequestLost);
                let outcome = landed.then(|| key.compare_and_set(expected_revision, elector.election.id()));
                match (fault, outcome) {
                    (None, Some(outcome)) => elector.election.on_write(outcome, now),
                    (Some(WriteFault::SlowReply), outcome) => {
                        elector.held = Some(HeldAnswer { outcome, due_tick: tick + cfg.slow_leader_reply_ticks });
                        None
                    }
                    _ => {
                        elector.held = Some(HeldAnswer { outcome: None, due_tick: tick + cfg.leader_timeout_ticks });
                        None
                    }
                }
            }
        };
        if let Some(t) = transition {
            self.on_transition(cfg, who, t);
        }
    }

    /// End of a tick: every running replica reads the held answer due by now.
    pub fn deliver_held_answers(&mut self, cfg: &ModelConfig) {
        let replicas = (0..self.coords.len())
            .map(Replica::Coordinator)
            .chain((0..self.managers.len()).map(Replica::Manager))
            .collect::<Vec<_>>();
        for who in replicas {
            let due = self.elector(who).held.is_some_and(|h| h.due_tick <= self.tick);
            if !due || !self.runs(who) {
                continue;
            }
            let now = self.local_ns(cfg, who);
            let (elector, _) = self.elector_and_key(who);
            let transition = match elector.held.take().and_then(|h| h.outcome) {
                Some(outcome) => elector.election.on_write(outcome, now),
                None => elector.election.abandon(now),
            };
            if let Some(t) = transition {
                self.on_transition(cfg, who, t);
            }
        }
    }

    fn on_transition(&mut self, cfg: &ModelConfig, who: Replica, t: Transition) {
        let now = self.local_ns(cfg, who);
        match (who, t) {
            (Replica::Coordinator(c), Transition::Elected { epoch }) => self.take_over(cfg, c, now, epoch),
            (Replica::Coordinator(c), Transition::Deposed { .. }) => self.coords[c].core = None,
            (Replica::Manager(m), Transition::Elected { epoch }) => {
                let record = self.kv.record.clone();
                let node = &mut self.managers[m];
                node.shadow = Default::default();
                let (core, out) = model::new_manager(cfg, node.dc, epoch, record.as_deref(), &mut node.shadow, now);
                node.core = Some(Arc::new(core));
                node.term_started_ns = now;
                self.route(cfg, out);
            }
            (Replica::Manager(m), Transition::Deposed { .. }) => self.managers[m].core = None,
        }
    }

    /// Coordinator `c` leads from the KV record (a takeover after a claim at `claim_revision`, or
    /// a restart of the leader with `claim_revision` 0) at an epoch above every one written.
    pub fn take_over(&mut self, cfg: &ModelConfig, c: usize, now_ns: u64, claim_revision: u64) {
        let fence = (self.kv.max_epoch > 0).then_some(self.kv.max_epoch);
        let epoch = next_epoch(0, fence, claim_revision);
        let limit = (self.dc_ttl_ms(cfg), self.rate_milli(cfg));
        let record = self.kv.record.clone();
        let core = model::coordinator_resume(cfg, limit, &self.coords[c].id, epoch, record.as_deref(), fence, now_ns);
        self.coords[c].core = Some(Arc::new(core));
        self.coords[c].record_rev = self.kv.record_rev;
        self.write_record(cfg, c, false);
    }
}
