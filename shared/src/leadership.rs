//! Leadership terms through one key written only by compare-and-set, sans I/O.
//!
//! One state machine for every replicated role (the coordinator, each DC's managers, and the
//! simulator's stand-ins for both). The driver performs the reads and writes it asks for and
//! feeds the answers back with its own monotonic clock; nothing here depends on a server's clock
//! or on a key disappearing by itself.
//!
//! **Rules.**
//! * A leader *acts* only until `sent + act_fraction·ttl`, where `sent` is when it **sent** its
//!   last write that is known to have landed (a claim or a renewal). A reply that comes back late
//!   therefore never extends a term.
//! * A leader renews every `ttl/4` by compare-and-set on the revision it last wrote. A conflict
//!   ends its term at once; an unknown outcome (timeout) is resolved by reading the key: if the
//!   stored revision is newer and names this replica, the write landed, and the term is extended
//!   from the *earliest* send whose outcome was unknown.
//! * A follower claims only after it has seen the key unchanged (the same revision, or absent)
//!   for a full `ttl` on its own clock, measured from when the *answer* of the first such read
//!   arrived, and only by compare-and-set on exactly that revision.
//!
//! **Why two leaders never act at once.** Let the leader's last landed write be sent at `S` and
//! produce revision `r`. A follower that later claims saw `r` in an answer that arrived after the
//! write landed, so after `S`, and then waited `ttl` on its clock. The leader stops at
//! `S + act_fraction·ttl` on its clock. With clock rates within a factor `1 + ρ` of each other
//! the follower's claim comes later as long as `act_fraction·(1 + ρ) < 1 / (1 + ρ)`: for the
//! default 0.6 that is any ρ below 29%. Any write the leader sends after the claim fails its
//! compare-and-set, and a claim sent before a renewal landed fails likewise. Server clocks play no
//! part; a key that a server expires early only makes the leader's next renewal fail.
//!
//! The **epoch** of a term is the revision of its winning claim: strictly greater than every
//! revision of the key before it, so every later term's epoch is higher.

use crate::expiry::NS_PER_MS;

/// What a read of the leader key found.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyState {
    Absent,
    Held { revision: u64, holder: String },
}

impl KeyState {
    fn revision(&self) -> Option<u64> {
        match self {
            KeyState::Absent => None,
            KeyState::Held { revision, .. } => Some(*revision),
        }
    }
}

/// A write the driver must perform now: `create` when `expected_revision` is `None`, otherwise
/// an update conditional on that revision. The value written is this replica's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaderRequest {
    Read,
    Write { expected_revision: Option<u64> },
}

/// The answer to a [`LeaderRequest::Write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteOutcome {
    Written {
        revision: u64,
    },
    /// The expected revision did not match: someone else wrote the key.
    Conflict,
    /// No answer in time: the write may or may not have landed.
    Unknown,
}

/// A change the driver must act on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Transition {
    /// A new term begins with this epoch: build fresh state for it.
    Elected { epoch: u64 },
    /// The term is over: drop everything the term held.
    Deposed { reason: &'static str },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeadershipConfig {
    pub ttl_ms: u64,
    /// Share of the TTL a leader acts for after sending its last landed write.
    pub act_fraction: f64,
    /// Negative controls only: freshness from the reply instead of the send (see [`crate::bugs`]).
    pub bug_fresh_from_reply: bool,
}

impl LeadershipConfig {
    pub const DEFAULT_ACT_FRACTION: f64 = 0.6;

    pub fn new(ttl_ms: u64) -> Self {
        LeadershipConfig { ttl_ms, act_fraction: Self::DEFAULT_ACT_FRACTION, bug_fresh_from_reply: false }
    }

    fn ttl_ns(&self) -> u64 {
        self.ttl_ms.saturating_mul(NS_PER_MS)
    }

    fn act_ns(&self) -> u64 {
        (self.ttl_ns() as f64 * self.act_fraction) as u64
    }

    pub fn renew_every_ns(&self) -> u64 {
        self.ttl_ns() / 4
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    Follower {
        /// The key as last read, and when the first answer showing it unchanged arrived.
        seen: Option<(KeyState, u64)>,
        /// A claim whose outcome is unknown was sent then (resolved by the next read).
        claim_unknown_since: Option<u64>,
    },
    Leader {
        epoch: u64,
        revision: u64,
        acts_until_ns: u64,
        /// Earliest send of a renewal whose outcome is unknown.
        renew_unknown_since: Option<u64>,
    },
}

/// One replica's view of its leadership.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Leadership {
    me: String,
    ttl_ms: u64,
    act_ns: u64,
    renew_every_ns: u64,
    bug_fresh_from_reply: bool,
    role: Role,
    /// The write in flight and when it was sent (at most one at a time).
    in_flight: Option<(LeaderRequest, u64)>,
    last_write_sent_ns: Option<u64>,
}

impl Leadership {
    pub fn new(me: &str, cfg: LeadershipConfig) -> Self {
        Leadership {
            me: me.into(),
            ttl_ms: cfg.ttl_ms,
            act_ns: cfg.act_ns(),
            renew_every_ns: cfg.renew_every_ns(),
            bug_fresh_from_reply: cfg.bug_fresh_from_reply,
            role: Role::Follower { seen: None, claim_unknown_since: None },
            in_flight: None,
            last_write_sent_ns: None,
        }
    }

    pub fn id(&self) -> &str {
        &self.me
    }

    /// The epoch of the current term, if this replica may act at `now_ns`.
    pub fn acting_epoch(&self, now_ns: u64) -> Option<u64> {
        match self.role {
            Role::Leader { epoch, acts_until_ns, .. } if now_ns < acts_until_ns => Some(epoch),
            _ => None,
        }
    }

    /// Leading (a term is open), whether or not it may act right now.
    pub fn term(&self) -> Option<u64> {
        match self.role {
            Role::Leader { epoch, .. } => Some(epoch),
            Role::Follower { .. } => None,
        }
    }

    /// When the current term stops acting unless renewed (this replica's clock).
    pub fn acts_until_ns(&self) -> Option<u64> {
        match self.role {
            Role::Leader { acts_until_ns, .. } => Some(acts_until_ns),
            Role::Follower { .. } => None,
        }
    }

    /// What to send now, if anything. Call on every tick; a request stays in flight until its
    /// answer is fed back (or [`abandon`](Self::abandon)ed after a driver-side timeout).
    pub fn poll(&mut self, now_ns: u64) -> Option<LeaderRequest> {
        if self.in_flight.is_some() {
            return None;
        }
        let req = match &self.role {
            Role::Leader { revision, renew_unknown_since, .. } => {
                if renew_unknown_since.is_some() {
                    LeaderRequest::Read
                } else if self.last_write_sent_ns.is_none_or(|t| now_ns.saturating_sub(t) >= self.renew_every_ns) {
                    LeaderRequest::Write { expected_revision: Some(*revision) }
                } else {
                    return None;
                }
            }
            Role::Follower { seen, claim_unknown_since } => match seen {
                Some((state, since)) if claim_unknown_since.is_none() && self.waited_out(*since, now_ns) => {
                    LeaderRequest::Write { expected_revision: state.revision() }
                }
                _ => LeaderRequest::Read,
            },
        };
        if matches!(req, LeaderRequest::Write { .. }) {
            self.last_write_sent_ns = Some(now_ns);
        }
        self.in_flight = Some((req, now_ns));
        Some(req)
    }

    fn waited_out(&self, since_ns: u64, now_ns: u64) -> bool {
        now_ns.saturating_sub(since_ns) >= self.ttl_ms.saturating_mul(NS_PER_MS)
    }

    /// The request in flight got no answer and will get none (the driver's own timeout). A write
    /// abandoned this way counts as [`WriteOutcome::Unknown`].
    pub fn abandon(&mut self, now_ns: u64) -> Option<Transition> {
        match self.in_flight {
            Some((LeaderRequest::Write { .. }, _)) => self.on_write(WriteOutcome::Unknown, now_ns),
            _ => {
                self.in_flight = None;
                None
            }
        }
    }

    /// The answer to the write in flight.
    pub fn on_write(&mut self, outcome: WriteOutcome, now_ns: u64) -> Option<Transition> {
        let Some((LeaderRequest::Write { .. }, sent_ns)) = self.in_flight.take() else { return None };
        let from_ns = if self.bug_fresh_from_reply { now_ns } else { sent_ns };
        match (&mut self.role, outcome) {
            (Role::Leader { revision, acts_until_ns, .. }, WriteOutcome::Written { revision: r }) => {
                *revision = r;
                *acts_until_ns = (*acts_until_ns).max(from_ns + self.act_ns);
                None
            }
            (Role::Leader { renew_unknown_since, .. }, WriteOutcome::Unknown) => {
                renew_unknown_since.get_or_insert(sent_ns);
                None
            }
            (Role::Leader { .. }, WriteOutcome::Conflict) => Some(self.depose("the leader key was written by another")),
            (Role::Follower { .. }, WriteOutcome::Written { revision }) => Some(self.elect(revision, from_ns)),
            (Role::Follower { claim_unknown_since, .. }, WriteOutcome::Unknown) => {
                claim_unknown_since.get_or_insert(sent_ns);
                None
            }
            (Role::Follower { seen, .. }, WriteOutcome::Conflict) => {
                *seen = None;
                None
            }
        }
    }

    /// The answer to a read (or a watch update) of the key, arriving at `now_ns`.
    pub fn on_read(&mut self, state: KeyState, now_ns: u64) -> Option<Transition> {
        if matches!(self.in_flight, Some((LeaderRequest::Read, _))) {
            self.in_flight = None;
        }
        let mine = matches!(&state, KeyState::Held { holder, .. } if *holder == self.me);
        let act_ns = self.act_ns;
        match &mut self.role {
            Role::Leader { revision, acts_until_ns, renew_unknown_since, .. } => {
                let stored = state.revision();
                if mine && stored.is_some_and(|r| r >= *revision) {
                    if let (Some(sent), Some(r)) = (renew_unknown_since.take(), stored) {
                        if r > *revision {
                            // A renewal whose answer was lost did land: measured from its send.
                            *revision = r;
                            *acts_until_ns = (*acts_until_ns).max(sent + act_ns);
                        }
                    }
                    None
                } else {
                    Some(self.depose("the leader key names another holder"))
                }
            }
            Role::Follower { seen, claim_unknown_since } => {
                if let (Some(sent), true, Some(r)) = (claim_unknown_since.take(), mine, state.revision()) {
                    return Some(self.elect(r, sent));
                }
                match seen {
                    Some((old, _)) if *old == state => {}
                    _ => *seen = Some((state, now_ns)),
                }
                None
            }
        }
    }

    fn elect(&mut self, revision: u64, from_ns: u64) -> Transition {
        self.role =
            Role::Leader { epoch: revision, revision, acts_until_ns: from_ns + self.act_ns, renew_unknown_since: None };
        Transition::Elected { epoch: revision }
    }

    fn depose(&mut self, reason: &'static str) -> Transition {
        self.role = Role::Follower { seen: None, claim_unknown_since: None };
        self.in_flight = None;
        Transition::Deposed { reason }
    }

    /// Give up leadership (e.g. the driver cannot serve the term); the key is left to expire by
    /// the followers' own observation.
    pub fn resign(&mut self, reason: &'static str) -> Option<Transition> {
        self.term().map(|_| self.depose(reason))
    }
}

#[cfg(test)]
mod tests;
