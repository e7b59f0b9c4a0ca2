//! What a DC-manager term tells the next one: the bounds of the pod leases it issued, carried in
//! the value of the DC's leader key (`dc.<dc>` in `lh_leaders`), sans I/O.
//!
//! **The rule.** A new term uses neither the floor nor the emergency allowance before every pod
//! lease an earlier term may have cut from them has expired. How long that is depends on the
//! earlier term's settings (its `pod_ttl_ms` and expiry margins), not on the new term's: a rolling
//! restart that lowers `pod_ttl_ms` from 20 s to 5 s would otherwise let the new term give the
//! floor again 5 s after it starts while the old term's pods spend it for 15 s more (the floor
//! spent twice). So every claim and renewal of the leader key writes a [`TermRecord`]: the
//! holder and the [`PodLeaseBounds`] of every pod lease that may still be live because of this
//! term: its own, and, until it has waited them out, its predecessor's. A successor reads the
//! key for a full leader TTL before it claims, by compare-and-set on exactly the revision it
//! read, so the value it read last before its claim landed is its predecessor's newest word.
//! It waits the most conservative of those bounds and its own ([`PodLeaseBounds::merge`]).
//!
//! A value that says nothing of bounds (written by a version before term records, or not
//! understood) counts as [`PodLeaseBounds::unknown`]: the longest pod TTL a manager accepts. An
//! absent key means no term ever led the DC. Nothing here is an operator setting.

use crate::expiry::ExpiryPolicy;
use crate::leadership::{KeyState, Leadership, Transition, WriteOutcome};
use serde::{Deserialize, Serialize};

/// The longest `pod_ttl_ms` a DC manager accepts: what a successor waits when its predecessor's
/// record does not say.
pub const POD_TTL_MS_MAX: u64 = 60_000;

/// What bounds a term's pod leases: each lives at most `pod_ttl_ms` stretched by `expiry` from
/// its issue, on the issuer's clock.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodLeaseBounds {
    /// Lifetime of a pod lease, in milliseconds.
    pub pod_ttl_ms: u64,
    /// The clock margins the lifetime is stretched by.
    pub expiry: ExpiryPolicy,
}

impl PodLeaseBounds {
    /// The bounds of the leases a term with these settings issues.
    pub fn of(cfg: &super::DcManagerConfig) -> Self {
        PodLeaseBounds { pod_ttl_ms: cfg.pod_ttl_ms, expiry: cfg.expiry }
    }

    /// A predecessor that did not say: the longest TTL any manager accepts, the margins `own`.
    pub fn unknown(own: PodLeaseBounds) -> Self {
        PodLeaseBounds { pod_ttl_ms: POD_TTL_MS_MAX.max(own.pod_ttl_ms), ..own }
    }

    /// Each field at the more conservative of the two (a lease bounded by either ends by then).
    pub fn merge(self, other: PodLeaseBounds) -> Self {
        let (a, b) = (self.expiry, other.expiry);
        PodLeaseBounds {
            pod_ttl_ms: self.pod_ttl_ms.max(other.pod_ttl_ms),
            expiry: ExpiryPolicy {
                max_drift: a.max_drift.max(b.max_drift),
                grace_ms: a.grace_ms.max(b.grace_ms),
                egress_spread_ms: a.egress_spread_ms.max(b.egress_spread_ms),
            },
        }
    }

    /// Until when (issuer clock) a pod lease issued at `issued_at_ns` under these bounds may be
    /// spent, or calls it admitted be on their way.
    pub fn live_until_ns(&self, issued_at_ns: u64) -> u64 {
        self.expiry.issuer_live_until_ns(issued_at_ns, self.pod_ttl_ms)
    }
}

/// The value of a DC's leader key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TermRecord {
    /// Schema version.
    pub v: u32,
    /// The replica that wrote it (what [`Leadership`] compares with its own id).
    pub holder: String,
    /// Every pod lease that may still be live because of this term ends within these.
    pub pod_leases: PodLeaseBounds,
    /// The writer's leader TTL: a standby claims only after seeing the key unchanged this long
    /// (or its own TTL, if longer). Missing (older versions): the standby's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_ttl_ms: Option<u64>,
}

impl TermRecord {
    /// The record as the JSON written to the key.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a term record always serializes")
    }

    /// The holder a DC leader key's value names (a term record's, or a plain id's).
    pub fn holder_of(value: &[u8]) -> String {
        match serde_json::from_slice::<TermRecord>(value) {
            Ok(r) => r.holder,
            Err(_) => String::from_utf8_lossy(value).into_owned(),
        }
    }

    /// The holder a value names and the bounds it carries ([`PodLeaseBounds::unknown`] for a
    /// value that is not a term record: a plain holder id, as versions before term records wrote).
    pub fn decode(value: &[u8], own: PodLeaseBounds) -> (String, PodLeaseBounds) {
        let r = Self::decode_record(value, own);
        (r.holder, r.pod_leases)
    }

    /// The whole record a value holds ([`decode`](Self::decode)'s reading of one that is not).
    pub fn decode_record(value: &[u8], own: PodLeaseBounds) -> TermRecord {
        serde_json::from_slice::<TermRecord>(value).unwrap_or_else(|_| TermRecord {
            v: 1,
            holder: String::from_utf8_lossy(value).into_owned(),
            pod_leases: PodLeaseBounds::unknown(own),
            leader_ttl_ms: None,
        })
    }
}

/// This term's inheritance: what it waits out, and until when it still speaks for it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Inherited {
    /// The predecessor's bounds (`None`: the key was absent; no earlier term).
    bounds: Option<PodLeaseBounds>,
    /// Past this instant (this replica's clock) every lease they bound has ended: the term's
    /// record names only its own bounds from then on.
    until_ns: u64,
}

/// A DC-manager replica's side of the term records: drives its [`Leadership`] with the key's
/// values and says what to write and what the term inherits. Both drivers (the service and the
/// simulator) feed every answer through it.
#[derive(Clone, Debug, PartialEq)]
pub struct TermRecords {
    own: PodLeaseBounds,
    /// This replica's leader TTL, written with its records.
    leader_ttl_ms: u64,
    /// What the last value read carried while following (`Some(None)`: the key was absent).
    seen: Option<Option<PodLeaseBounds>>,
    term: Option<Inherited>,
    /// Negative control: a successor waits only its own bounds (see [`crate::bugs`]).
    bugs: crate::bugs::KnownBugs,
}

impl TermRecords {
    /// This replica's own bounds and leader TTL (in milliseconds), with `bugs` switched on.
    pub fn new(own: PodLeaseBounds, leader_ttl_ms: u64, bugs: &crate::bugs::KnownBugs) -> Self {
        TermRecords { own, leader_ttl_ms, seen: None, term: None, bugs: *bugs }
    }

    /// The value a write of the key sends at `now_ns` (a claim or a renewal).
    pub fn value(&self, holder: &str, now_ns: u64) -> Vec<u8> {
        let leader_ttl_ms = Some(self.leader_ttl_ms);
        TermRecord { v: 1, holder: holder.into(), pod_leases: self.published(now_ns), leader_ttl_ms }.encode()
    }

    /// The bounds this replica speaks for at `now_ns`: its own, merged with its term's
    /// inheritance until that has ended (a claim: with what it read last).
    pub fn published(&self, now_ns: u64) -> PodLeaseBounds {
        let inherited = match self.term {
            Some(t) if now_ns < t.until_ns => t.bounds,
            Some(_) => None,
            None => self.predecessor(),
        };
        inherited.map_or(self.own, |b| self.own.merge(b))
    }

    /// What the current term must wait out besides its own bounds (`None`: nothing, or not
    /// leading): a [`super::DcManagerConfig::inherited`] for each of its cores.
    pub fn inherited(&self) -> Option<PodLeaseBounds> {
        self.term.and_then(|t| t.bounds)
    }

    /// The predecessor as the last read showed it (never read: unknown).
    fn predecessor(&self) -> Option<PodLeaseBounds> {
        if self.bugs.term_ignores_predecessor_bounds() {
            return None;
        }
        self.seen.unwrap_or(Some(PodLeaseBounds::unknown(self.own)))
    }

    /// A read of the key answered at `now_ns` with `entry` (revision and value; `None`: absent).
    pub fn on_read(
        &mut self,
        leadership: &mut Leadership,
        entry: Option<(u64, &[u8])>,
        now_ns: u64,
    ) -> Option<Transition> {
        let (state, bounds, ttl_ms) = match entry {
            None => (KeyState::Absent, None, None),
            Some((revision, value)) => {
                let r = TermRecord::decode_record(value, self.own);
                (KeyState::Held { revision, holder: r.holder }, Some(r.pod_leases), r.leader_ttl_ms)
            }
        };
        let t = leadership.on_read_naming_ttl(state, ttl_ms, now_ns);
        // A read that shows this replica's own claim landed says nothing of its predecessor.
        if !self.on_transition(t.as_ref(), now_ns) && leadership.term().is_none() {
            self.seen = Some(bounds);
        }
        t
    }

    /// The answer to a write, arriving at `now_ns`.
    pub fn on_write(&mut self, leadership: &mut Leadership, outcome: WriteOutcome, now_ns: u64) -> Option<Transition> {
        let t = leadership.on_write(outcome, now_ns);
        self.on_transition(t.as_ref(), now_ns);
        t
    }

    /// The request in flight got no answer (the driver's timeout).
    pub fn abandon(&mut self, leadership: &mut Leadership, now_ns: u64) -> Option<Transition> {
        let t = leadership.abandon(now_ns);
        self.on_transition(t.as_ref(), now_ns);
        t
    }

    /// Whether `t` began a term.
    fn on_transition(&mut self, t: Option<&Transition>, now_ns: u64) -> bool {
        match t {
            Some(Transition::Elected { .. }) => {
                let bounds = self.predecessor();
                let until_ns = bounds.map_or(now_ns, |b| self.own.merge(b).live_until_ns(now_ns));
                self.term = Some(Inherited { bounds, until_ns });
                self.seen = None;
                true
            }
            Some(Transition::Deposed { .. }) => {
                self.term = None;
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
