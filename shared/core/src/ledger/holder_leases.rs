//! One holder's leases on the books, and what it claims of the capacity (see the module docs of
//! [`ledger`](super)).

use super::{LeaseEntry, NEVER};
use crate::quota::Quota;
use crate::wire::LeaseVersion;
use smallvec::SmallVec;

/// A holder's leases, kept in its place among the holders up to two (a lease in use and its
/// renewal): summing over every holder, as a DC manager does for each of 1,000 limits at every
/// tick, then reads the books in one sweep instead of following a pointer per holder.
pub(super) type Entries = SmallVec<[LeaseEntry; 2]>;

#[derive(Clone, Debug, Default)]
pub(super) struct HolderLeases {
    pub(super) entries: Entries,
    pub(super) last_version: Option<LeaseVersion>,
    pub(super) closed_until_ns: Option<u64>,
    /// Entries below this version that expire by themselves are inherited.
    pub(super) inherited_below: Option<LeaseVersion>,
    /// Its entries count in the total but never among what lasts, never-expiring ones included:
    /// a holder on its way out ([`Ledger::adopt_outgoing`]).
    pub(super) outgoing: bool,
}

impl HolderLeases {
    /// Ends every lease live after `release_at_ns` then; whether there was one.
    pub(super) fn end_at(&mut self, release_at_ns: u64) -> bool {
        let mut had = false;
        for e in self.entries.iter_mut().filter(|e| e.live_until_ns > release_at_ns) {
            e.live_until_ns = release_at_ns;
            had = true;
        }
        had
    }

    pub(super) fn claim(&self, now_ns: u64) -> Quota {
        self.entries.iter().filter(|e| e.live_until_ns > now_ns).fold(Quota::ZERO, |m, e| m.max(e.quota))
    }

    /// The quota of its newest entry live at `now_ns` (zero if none).
    pub(super) fn newest(&self, now_ns: u64) -> Quota {
        self.entries
            .iter()
            .filter(|e| e.live_until_ns > now_ns)
            .max_by_key(|e| e.version)
            .map_or(Quota::ZERO, |e| e.quota)
    }

    fn inherited(&self, e: &LeaseEntry) -> bool {
        e.live_until_ns != NEVER && self.inherited_below.is_some_and(|b| e.version < b)
    }

    /// The claim of the entries that last (see the module docs): every live entry but the
    /// inherited ones, of a holder not on its way out. A never-expiring entry below a newer one
    /// (a floor lowered, not yet confirmed) lasts: the DC keeps spending it until it confirms,
    /// so no grant may take its room. (The rule as written; [`HolderLeases::claims`] computes it
    /// with the claim in one pass, and the ledger's tests check the two agree.)
    #[cfg(test)]
    pub(super) fn lasting_claim(&self, now_ns: u64) -> Quota {
        if self.outgoing {
            return Quota::ZERO;
        }
        self.entries
            .iter()
            .filter(|e| e.live_until_ns > now_ns && !self.inherited(e))
            .fold(Quota::ZERO, |m, e| m.max(e.quota))
    }

    /// The lasting claim less the entries on their way out by confirmation: those below the
    /// holder's newest never-expiring entry (a floor lowered, confirmed or not). What the
    /// ledger's self-check holds to the capacity: a lowered floor's excess is the documented
    /// exception (a DC cut off keeps spending its last floor), kept out of every grant's room.
    pub(super) fn settled_claim(&self, now_ns: u64) -> Quota {
        if self.outgoing {
            return Quota::ZERO;
        }
        let newest_never = self.entries.iter().filter(|e| e.live_until_ns == NEVER).map(|e| e.version).max();
        self.entries
            .iter()
            .filter(|e| e.live_until_ns > now_ns && !self.inherited(e))
            .filter(|e| newest_never.is_none_or(|n| e.version >= n))
            .fold(Quota::ZERO, |m, e| m.max(e.quota))
    }

    /// `(claim, lasting_claim)` at `now_ns` in one pass over the entries (the ledger's sums
    /// read every holder's both at each new instant).
    pub(super) fn claims(&self, now_ns: u64) -> (Quota, Quota) {
        self.claims_of_first(self.entries.len(), now_ns)
    }

    /// [`claims`](Self::claims) as if it held only its first `count` entries: a grant reads its
    /// holder's claims before and after the entry it pushes from the one set of entries.
    pub(super) fn claims_of_first(&self, count: usize, now_ns: u64) -> (Quota, Quota) {
        let entries = &self.entries[..count.min(self.entries.len())];
        let mut claims = (Quota::ZERO, Quota::ZERO);
        for e in entries.iter().filter(|e| e.live_until_ns > now_ns) {
            claims.0 = claims.0.max(e.quota);
            if !self.outgoing && !self.inherited(e) {
                claims.1 = claims.1.max(e.quota);
            }
        }
        claims
    }

    /// Every entry held now becomes inherited.
    pub(super) fn inherit_all(&mut self) {
        if let Some(v) = self.entries.iter().map(|e| e.version).max() {
            let next = LeaseVersion::new(v.epoch, v.seq.saturating_add(1));
            self.inherited_below = Some(self.inherited_below.map_or(next, |b| b.max(next)));
        }
    }
}

/// A holder's claim and lasting claim at an instant (zero for a holder with no leases).
pub(super) fn claims_of(state: Option<&HolderLeases>, at_ns: u64) -> (Quota, Quota) {
    state.map_or((Quota::ZERO, Quota::ZERO), |h| h.claims(at_ns))
}

/// A holder's claims at an instant and the room each leaves it (`Ledger::rooms`).
pub(super) struct Rooms {
    pub(super) claim: Quota,
    pub(super) lasting_claim: Quota,
    pub(super) headroom: Quota,
    pub(super) lasting_headroom: Quota,
}
