//! Leadership of the coordinators and of each DC's managers, through the shared sans-IO
//! [`Leadership`] core against the model's leader keys (compare-and-set on the revision).
//!
//! Each replica polls its election on its own timer with its own clock. The driver performs the
//! request against the KV at once and feeds the answer back at once, unless the explorer armed a
//! fault for the replica's next write ([`WriteFault`]): then the answer comes back
//! `slow_leader_reply_ticks` later, or never (the driver's own timeout, `leader_timeout_ticks`
//! later, makes the outcome unknown), whether or not the write landed. A held answer is fed back
//! at the end of the tick it is due in, so the replica acts on it until its next timer.
//!
//! A DC manager's election runs through the shared `TermRecords`, as the service's and the
//! simulator's do: every claim and renewal writes a term record (the bounds of the pod leases
//! the term may have left live) made when the write is sent, every read and answer goes through
//! it, and a new term's core waits out what its predecessor's record said (`inherited`).

use crate::config::ModelConfig;
use crate::model;
use crate::state::State;
use leasehold_core::coordinator::next_epoch;
use leasehold_core::dc_manager::{PodLeaseBounds, TermRecords};
use leasehold_core::leadership::{KeyState, LeaderRequest, Leadership, LeadershipConfig, Transition, WriteOutcome};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A leader key as the KV stores it: absent, or the revision of its last write and its value
/// (the coordinator's: the holder's id; a DC's: the writer's `TermRecord`, as JSON). Keys are
/// never deleted, so the next revision is one above the stored one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LeaderKey(Option<(u64, String)>);

impl LeaderKey {
    /// The holder a coordinator key names (its value is the holder's id).
    pub fn holder(&self) -> Option<&str> {
        self.0.as_ref().map(|(_, h)| h.as_str())
    }

    fn entry(&self) -> Option<(u64, &[u8])> {
        self.0.as_ref().map(|(revision, value)| (*revision, value.as_bytes()))
    }

    fn compare_and_set(&mut self, expected_revision: Option<u64>, value: String) -> WriteOutcome {
        let stored = self.0.as_ref().map(|(r, _)| *r);
        if stored != expected_revision {
            return WriteOutcome::Conflict;
        }
        let revision = stored.unwrap_or(0) + 1;
        self.0 = Some((revision, value));
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
#[derive(Clone, Debug, PartialEq)]
pub struct Elector {
    pub election: Leadership,
    /// A DC manager's term records (what it writes in its key, what its term inherits), as the
    /// service and the simulator drive them; `None` for a coordinator.
    pub records: Option<TermRecords>,
    pub held: Option<HeldAnswer>,
    /// A fault the explorer armed for this replica's next write.
    pub armed: Option<WriteFault>,
}

impl Elector {
    /// A replica that has watched the key stay absent from `watching_since_ns` (its clock) until
    /// `now_ns`, reading it at both: the model's history before tick 0, so the first term starts
    /// at the first timer.
    pub fn new(
        id: &str,
        ttl_ms: u64,
        records: Option<TermRecords>,
        cfg: &ModelConfig,
        watching_since_ns: u64,
        now_ns: u64,
    ) -> Self {
        let mut e = Self::fresh(id, ttl_ms, records, cfg);
        if e.election.poll(watching_since_ns) == Some(LeaderRequest::Read) {
            e.on_read(&LeaderKey::default(), watching_since_ns);
        }
        // Seen again just now (as a watch would): the key stayed in sight (see `Leadership`).
        e.on_read(&LeaderKey::default(), now_ns);
        e
    }

    /// A process that just started: it has read nothing yet.
    pub fn fresh(id: &str, ttl_ms: u64, records: Option<TermRecords>, cfg: &ModelConfig) -> Self {
        let mut config = LeadershipConfig::new(ttl_ms);
        config.bugs.leader_fresh_from_reply = cfg.bugs.leader_fresh_from_reply;
        Elector { election: Leadership::new(id, config), records, held: None, armed: None }
    }

    fn on_read(&mut self, key: &LeaderKey, now_ns: u64) -> Option<Transition> {
        match &mut self.records {
            Some(records) => records.on_read(&mut self.election, key.entry(), now_ns),
            None => {
                let state = match &key.0 {
                    None => KeyState::Absent,
                    Some((revision, holder)) => KeyState::Held { revision: *revision, holder: holder.clone() },
                };
                self.election.on_read(state, now_ns)
            }
        }
    }

    fn on_write(&mut self, outcome: WriteOutcome, now_ns: u64) -> Option<Transition> {
        match &mut self.records {
            Some(records) => records.on_write(&mut self.election, outcome, now_ns),
            None => self.election.on_write(outcome, now_ns),
        }
    }

    fn abandon(&mut self, now_ns: u64) -> Option<Transition> {
        match &mut self.records {
            Some(records) => records.abandon(&mut self.election, now_ns),
            None => self.election.abandon(now_ns),
        }
    }

    /// What a write sent at `now_ns` puts in the key: a term record, or the holder's id.
    fn value(&self, now_ns: u64) -> String {
        match &self.records {
            Some(records) => String::from_utf8(records.value(self.election.id(), now_ns)).expect("JSON is UTF-8"),
            None => self.election.id().to_string(),
        }
    }

    /// What the current term must wait out besides its own bounds (see `TermRecords`).
    pub fn inherited(&self) -> Option<PodLeaseBounds> {
        self.records.as_ref().and_then(|r| r.inherited())
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
            LeaderRequest::Read => elector.on_read(key, now),
            LeaderRequest::Write { expected_revision } => {
                let fault = elector.armed.take();
                let landed = fault != Some(WriteFault::RequestLost);
                let outcome = landed.then(|| key.compare_and_set(expected_revision, elector.value(now)));
                match (fault, outcome) {
                    (None, Some(outcome)) => elector.on_write(outcome, now),
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
                Some(outcome) => elector.on_write(outcome, now),
                None => elector.abandon(now),
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
                let settings =
                    model::ManagerSettings { pod_ttl_ms: node.pod_ttl_ms(cfg), inherited: node.elector.inherited() };
                let (core, out) =
                    model::new_manager(cfg, node.dc, epoch, settings, record.as_deref(), &mut node.shadow, now);
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
