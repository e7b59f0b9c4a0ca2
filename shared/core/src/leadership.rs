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
//! * A write whose outcome is unknown may land at any later time, as long as the key still has
//!   the revision it expected. It stays remembered (its send time counts) until the key is past
//!   that revision; a read showing it has not landed *yet* does not forget it. A renewal that
//!   conflicts while such a write is pending reads the key first: a conflict with its own late
//!   write is not another leader.
//! * A follower claims only after it has seen the key unchanged (the same revision, or absent)
//!   for a full `ttl` on its own clock, measured from when the *answer* of the first such read
//!   arrived, and only by compare-and-set on exactly that revision. It claims only if its last read
//!   was answered (never into an outage), and one that got no answer for longer than the
//!   *sight gap* (`sight_gap_ms`: by default two TTLs; the services use the TTL plus their request
//!   timeout) starts its wait again at the next answer: after an outage that cut the leader off
//!   too (every NATS server restarted), the leader gets a full `ttl` to renew once the key
//!   answers, instead of racing a follower's claim, while one lost read does not hold a failover
//!   up. This is liveness only; waiting longer is always safe.
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
    /// No one holds the key.
    Absent,
    /// The key holds a claim.
    Held {
        /// The key's revision.
        revision: u64,
        /// The replica id it names.
        holder: String,
    },
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
    /// Read the key.
    Read,
    /// Write the key: a create when `expected_revision` is `None`, else conditional on it.
    Write {
        /// The revision the key must have for the write to land (`None`: absent).
        expected_revision: Option<u64>,
    },
}

/// The answer to a [`LeaderRequest::Write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteOutcome {
    /// The write landed.
    Written {
        /// The key's revision it produced.
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
    Elected {
        /// The term's epoch: the revision of its winning claim.
        epoch: u64,
    },
    /// The term is over: drop everything the term held.
    Deposed {
        /// Why the term ended.
        reason: &'static str,
    },
}

/// The settings of a [`Leadership`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeadershipConfig {
    /// The leader key's lifetime, in milliseconds: a follower claims after seeing the key unchanged
    /// this long.
    pub ttl_ms: u64,
    /// Share of the TTL a leader acts for after sending its last landed write.
    pub act_fraction: f64,
    /// A follower that got no answer about the key for longer than this starts its wait again
    /// at the next answer. Default two TTLs; the services use the TTL plus their request timeout,
    /// so one lost read never restarts a wait and an outage of every NATS server nearly always does.
    pub sight_gap_ms: u64,
    /// Negative controls only: `leader_fresh_from_reply` (freshness from the reply instead of the
    /// send) and `leader_forgets_unresolved_writes` (see [`crate::bugs`]).
    pub bugs: crate::bugs::KnownBugs,
}

impl LeadershipConfig {
    /// Default `act_fraction`.
    pub const DEFAULT_ACT_FRACTION: f64 = 0.6;

    /// Settings for a TTL of `ttl_ms` milliseconds, the rest their defaults (a sight gap of two
    /// TTLs).
    pub fn new(ttl_ms: u64) -> Self {
        LeadershipConfig {
            ttl_ms,
            act_fraction: Self::DEFAULT_ACT_FRACTION,
            sight_gap_ms: ttl_ms.saturating_mul(2),
            bugs: crate::bugs::KnownBugs::default(),
        }
    }

    fn ttl_ns(&self) -> u64 {
        self.ttl_ms.saturating_mul(NS_PER_MS)
    }

    fn act_ns(&self) -> u64 {
        (self.ttl_ns() as f64 * self.act_fraction) as u64
    }

    /// How often a leader renews, in nanoseconds: a quarter of the TTL.
    pub fn renew_every_ns(&self) -> u64 {
        self.ttl_ns() / 4
    }
}

/// Writes this replica sent whose outcome it does not know. Any of them may still land, at any
/// time, for as long as the key's revision is the one it expected; revisions only grow, so once
/// the key is past `highest_expected` none can land any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Unresolved {
    /// The earliest send among them: a term that one of them opened or extended is measured from
    /// here (never later than the send of the write that actually landed).
    earliest_sent_ns: u64,
    /// The highest revision any of them expected (0 for a create).
    highest_expected: u64,
}

impl Unresolved {
    fn add(this: &mut Option<Unresolved>, sent_ns: u64, expected: Option<u64>) {
        let expected = expected.unwrap_or(0);
        *this = Some(match *this {
            None => Unresolved { earliest_sent_ns: sent_ns, highest_expected: expected },
            Some(u) => Unresolved {
                earliest_sent_ns: u.earliest_sent_ns.min(sent_ns),
                highest_expected: u.highest_expected.max(expected),
            },
        });
    }

    /// Forget them once the key has moved past every revision they expected.
    fn settle(this: &mut Option<Unresolved>, stored: Option<u64>) {
        if this.is_some_and(|u| stored.unwrap_or(0) > u.highest_expected) {
            *this = None;
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    Follower {
        /// The key as last read, when the first answer showing it unchanged arrived, and the
        /// longest leader TTL (ns) its value named meanwhile (0: none; see
        /// [`Leadership::on_read_naming_ttl`]).
        seen: Option<(KeyState, u64, u64)>,
        /// Claims whose outcome is unknown.
        unresolved: Option<Unresolved>,
    },
    Leader {
        epoch: u64,
        revision: u64,
        acts_until_ns: u64,
        /// Renewals whose outcome is unknown (or that conflicted while one was).
        unresolved: Option<Unresolved>,
    },
}

/// One replica's view of its leadership.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Leadership {
    me: String,
    ttl_ms: u64,
    act_ns: u64,
    renew_every_ns: u64,
    sight_gap_ns: u64,
    bugs: crate::bugs::KnownBugs,
    role: Role,
    /// The write in flight and when it was sent (at most one at a time).
    in_flight: Option<(LeaderRequest, u64)>,
    last_write_sent_ns: Option<u64>,
    /// A write's outcome is unknown (or a renewal conflicted while one was): read before writing.
    read_due: bool,
    /// When the last answer about the key arrived (a read, or a write's known outcome).
    answered_ns: Option<u64>,
    /// The last read went unanswered: read again before claiming.
    read_lost: bool,
}

impl Leadership {
    /// Replica `me`'s state machine, starting as a follower.
    pub fn new(me: &str, cfg: LeadershipConfig) -> Self {
        Leadership {
            me: me.into(),
            ttl_ms: cfg.ttl_ms,
            act_ns: cfg.act_ns(),
            renew_every_ns: cfg.renew_every_ns(),
            sight_gap_ns: cfg.sight_gap_ms.saturating_mul(NS_PER_MS),
            bugs: cfg.bugs,
            role: Role::Follower { seen: None, unresolved: None },
            in_flight: None,
            last_write_sent_ns: None,
            read_due: false,
            answered_ns: None,
            read_lost: false,
        }
    }

    /// This replica's id.
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
            _ if self.read_due => LeaderRequest::Read,
            Role::Leader { revision, .. } => {
                if self.last_write_sent_ns.is_none_or(|t| now_ns.saturating_sub(t) >= self.renew_every_ns) {
                    LeaderRequest::Write { expected_revision: Some(*revision) }
                } else {
                    return None;
                }
            }
            Role::Follower { seen, .. } => match seen {
                Some((state, since, named_ns)) if self.waited_out(*since, *named_ns, now_ns) && !self.read_lost => {
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

    /// A full TTL has passed since `since_ns`: this replica's own, or the longer one the key's
    /// holder named (`named_ns`), so a leader whose TTL is longer than its standby's (a rolling
    /// restart that lowered `leader_ttl_ms`) is never claimed over while it may still act.
    fn waited_out(&self, since_ns: u64, named_ns: u64, now_ns: u64) -> bool {
        now_ns.saturating_sub(since_ns) >= self.ttl_ms.saturating_mul(NS_PER_MS).max(named_ns)
    }

    /// The last answer about the key came at most `within_ns` ago.
    fn answered_within(&self, now_ns: u64, within_ns: u64) -> bool {
        self.answered_ns.is_some_and(|t| now_ns.saturating_sub(t) <= within_ns)
    }

    /// The request in flight got no answer and will get none (the driver's own timeout). A write
    /// abandoned this way counts as [`WriteOutcome::Unknown`].
    pub fn abandon(&mut self, now_ns: u64) -> Option<Transition> {
        match self.in_flight {
            Some((LeaderRequest::Write { .. }, _)) => self.on_write(WriteOutcome::Unknown, now_ns),
            _ => {
                self.in_flight = None;
                self.read_lost = true;
                None
            }
        }
    }

    /// The answer to the write in flight.
    pub fn on_write(&mut self, outcome: WriteOutcome, now_ns: u64) -> Option<Transition> {
        let Some((LeaderRequest::Write { expected_revision }, sent_ns)) = self.in_flight.take() else { return None };
        let from_ns = if self.bugs.leader_fresh_from_reply() { now_ns } else { sent_ns };
        if outcome != WriteOutcome::Unknown {
            self.answered_ns = Some(now_ns);
        }
        match (&mut self.role, outcome) {
            (Role::Leader { revision, acts_until_ns, unresolved, .. }, WriteOutcome::Written { revision: r }) => {
                *revision = r;
                *acts_until_ns = (*acts_until_ns).max(from_ns + self.act_ns);
                Unresolved::settle(unresolved, Some(r));
                None
            }
            (Role::Leader { unresolved, .. }, WriteOutcome::Unknown) => {
                Unresolved::add(unresolved, sent_ns, expected_revision);
                self.read_due = true;
                None
            }
            (Role::Leader { unresolved: Some(_), .. }, WriteOutcome::Conflict) => {
                // Perhaps an earlier renewal of ours landed late: the read tells.
                self.read_due = true;
                None
            }
            (Role::Leader { .. }, WriteOutcome::Conflict) => Some(self.depose("the leader key was written by another")),
            (Role::Follower { unresolved, .. }, WriteOutcome::Written { revision }) => {
                // An earlier claim that landed would have made this one conflict.
                let from_ns = unresolved.map_or(from_ns, |u| u.earliest_sent_ns.min(from_ns));
                Some(self.elect(revision, from_ns))
            }
            (Role::Follower { unresolved, .. }, WriteOutcome::Unknown) => {
                Unresolved::add(unresolved, sent_ns, expected_revision);
                self.read_due = true;
                None
            }
            (Role::Follower { seen, unresolved }, WriteOutcome::Conflict) => {
                *seen = None;
                // A conflict with a claim of ours that landed late is told by the next read.
                self.read_due = unresolved.is_some();
                None
            }
        }
    }

    /// The answer to a read (or a watch update) of the key, arriving at `now_ns`.
    pub fn on_read(&mut self, state: KeyState, now_ns: u64) -> Option<Transition> {
        self.on_read_naming_ttl(state, None, now_ns)
    }

    /// [`on_read`](Self::on_read) of a key whose value also names its writer's leader TTL
    /// (`named_ttl_ms`; a DC manager's `TermRecord`): a follower waits that TTL if it is longer
    /// than its own before it claims.
    pub fn on_read_naming_ttl(
        &mut self,
        state: KeyState,
        named_ttl_ms: Option<u64>,
        now_ns: u64,
    ) -> Option<Transition> {
        let named_ns = named_ttl_ms.unwrap_or(0).saturating_mul(NS_PER_MS);
        if matches!(self.in_flight, Some((LeaderRequest::Read, _))) {
            self.in_flight = None;
            self.read_due = false;
        }
        let out_of_sight = !self.answered_within(now_ns, self.sight_gap_ns);
        self.answered_ns = Some(now_ns);
        self.read_lost = false;
        let mine = matches!(&state, KeyState::Held { holder, .. } if *holder == self.me);
        let stored = state.revision();
        let act_ns = self.act_ns;
        let forget = self.bugs.leader_forgets_unresolved_writes();
        match &mut self.role {
            Role::Leader { revision, acts_until_ns, unresolved, .. } => {
                if mine && stored.is_some_and(|r| r >= *revision) {
                    if let (Some(u), Some(r)) = (*unresolved, stored) {
                        if r > *revision {
                            // A renewal whose answer was lost did land: measured from the
                            // earliest send that may be it.
                            *revision = r;
                            *acts_until_ns = (*acts_until_ns).max(u.earliest_sent_ns + act_ns);
                        }
                    }
                    Unresolved::settle(unresolved, stored);
                    if forget {
                        *unresolved = None;
                    }
                    None
                } else {
                    Some(self.depose("the leader key names another holder"))
                }
            }
            Role::Follower { seen, unresolved } => {
                // Only a revision past what the pending claims expected can be one of them (the
                // key may still name this replica from an earlier term).
                if let (Some(u), true, Some(r)) = (*unresolved, mine, stored) {
                    if r > u.highest_expected {
                        return Some(self.elect(r, u.earliest_sent_ns));
                    }
                }
                Unresolved::settle(unresolved, stored);
                if forget {
                    *unresolved = None;
                }
                match seen {
                    Some((old, _, named)) if *old == state && !out_of_sight => *named = (*named).max(named_ns),
                    _ => *seen = Some((state, now_ns, named_ns)),
                }
                None
            }
        }
    }

    fn elect(&mut self, revision: u64, from_ns: u64) -> Transition {
        self.role = Role::Leader { epoch: revision, revision, acts_until_ns: from_ns + self.act_ns, unresolved: None };
        self.read_due = false;
        Transition::Elected { epoch: revision }
    }

    fn depose(&mut self, reason: &'static str) -> Transition {
        self.role = Role::Follower { seen: None, unresolved: None };
        self.in_flight = None;
        self.read_due = false;
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
