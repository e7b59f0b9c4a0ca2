//! The conservation ledger: every lease a holder may still be using, until it is confirmed
//! superseded, returned, or expired.
//!
//! **Accounting rule.** A holder uses at most one lease at a time: the newest it has applied
//! (holders refuse older versions). So a holder's claim on the limit is the component-wise
//! maximum over its live leases, and the ledger's total is the sum of those maxima. A new grant to
//! holder `h` must satisfy `Σ_{others} + max(h's live leases, new) ≤ capacity`, which keeps
//! `Σ rate ≤ R` and `Σ burst ≤ B` at every instant even while old and new leases overlap.
//!
//! Older leases leave the ledger when the holder reports a newer version *in use* (it can never
//! go back), when it returns everything (drain), or when they expire on the issuer's clock
//! ([`ExpiryPolicy::issuer_live_until_ns`](crate::expiry::ExpiryPolicy::issuer_live_until_ns)).
//! Grants carry the issuer's epoch; anything from a lower epoch is refused.
//!
//! **Shrinking capacity.** When the capacity goes down ([`Ledger::set_capacity`]) or a leader
//! adopts leases from durable state ([`Ledger::adopt`]), the leases already out may sum above it.
//! They are *inherited*: they keep counting, but only because they end by themselves. Every
//! grant then also keeps the leases that *last* (granted since, or never expiring) within the
//! capacity: `Σ_{others} lasting + max(lasting_h, new) ≤ capacity`, unless it raises nobody's
//! lasting claim. So no instant sees more than the larger of the old total and the capacity,
//! and once the inherited leases have expired the total is within the new capacity. Without this
//! a holder could renew at the level of an inherited lease and carry the excess past its end.
//! Entries that never expire (a DC's floor on the coordinator's books) are never inherited; one
//! below a newer never-expiring entry (a floor lowered, not yet confirmed) counts among what
//! lasts too, since it does not end by itself (the DC spends it until it confirms), so no grant
//! takes its room (storm seed 187: a renewal took a lowered floor's excess and pods held more
//! than the limit for as long as the DC stayed unconfirmed); the self-check ([`Ledger::check`])
//! holds what lasts to the capacity without it (its excess is the documented exception). Those
//! of a holder adopted as outgoing (a lost record's floor: [`Ledger::adopt_outgoing`]) count in
//! the total but not among what lasts.

mod adopt;
mod check;
pub use check::BooksError;
mod holder_leases;
mod totals;

use crate::quota::Quota;
use crate::sorted_map::{PlaceHint, SortedMap};
use crate::wire::LeaseVersion;
use holder_leases::{claims_of, HolderLeases, Rooms};
use std::hash::Hash;
use thiserror::Error;
use totals::{Sum, Totals, TotalsCache};

/// `live_until_ns` of an entry that never expires (released only when its holder confirms a
/// newer one).
pub const NEVER: u64 = u64::MAX;

/// One lease on the books.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseEntry {
    /// The lease's version.
    pub version: LeaseVersion,
    /// The rate and burst it grants.
    pub quota: Quota,
    /// Issuer clock: until when the holder may still be using it.
    pub live_until_ns: u64,
}

/// Why the ledger refused a change.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum LedgerError {
    #[error("epoch {got} is not the ledger's epoch {current}")]
    /// The epoch given is not the ledger's.
    WrongEpoch {
        /// The epoch given.
        got: u64,
        /// The ledger's epoch.
        current: u64,
    },
    #[error("version {got} is not above the holder's last version {last}")]
    /// The version given is not above the holder's last.
    VersionNotIncreasing {
        /// The version given.
        got: LeaseVersion,
        /// The holder's last version.
        last: LeaseVersion,
    },
    #[error("grant {wanted} exceeds the headroom {headroom}")]
    /// The grant does not fit the headroom.
    ExceedsHeadroom {
        /// The grant asked for.
        wanted: Quota,
        /// What the ledger may still hand out.
        headroom: Quota,
    },
    /// The holder returned its lease for good: it gets no further one.
    #[error("holder returned its lease for good")]
    HolderClosed,
    /// No lease with this version is outstanding.
    #[error("no lease with version {0} is outstanding")]
    UnknownVersion(LeaseVersion),
}

/// The conservation ledger of one issuer: every lease its holders may still use.
#[derive(Clone, Debug)]
pub struct Ledger<H: Ord + Hash + Clone> {
    capacity: Quota,
    epoch: u64,
    /// In key order (durable records list them so), found by hash.
    holders: SortedMap<H, HolderLeases>,
    /// The most the total may reach while inherited leases are live: the largest earlier
    /// capacity, or what was adopted.
    ceiling: Quota,
    /// Negative control: `KnownBugs::renewal_reuses_inherited_claim`.
    reuse_inherited: bool,
    /// Sums over holders at the instants last asked about (`totals.rs`).
    totals: TotalsCache,
    /// Holders with a closed marker ([`Ledger::close`]), until `expire` forgets them.
    closed_markers: usize,
}

impl<H: Ord + Hash + Clone> Ledger<H> {
    /// An empty ledger that may hand out `capacity`, at `epoch`.
    pub fn new(capacity: Quota, epoch: u64) -> Self {
        Ledger {
            capacity,
            epoch,
            holders: SortedMap::new(),
            ceiling: Quota::ZERO,
            reuse_inherited: false,
            totals: TotalsCache::default(),
            closed_markers: 0,
        }
    }

    /// Bring back the behaviours `bugs` names (negative-control tests only).
    pub fn with_bugs(mut self, bugs: &crate::bugs::KnownBugs) -> Self {
        self.reuse_inherited = bugs.renewal_reuses_inherited_claim();
        self
    }

    /// What the ledger may hand out.
    pub fn capacity(&self) -> Quota {
        self.capacity
    }

    /// Change what the ledger may hand out (a DC manager's budget moves with its DC lease).
    /// Leases already out stay counted; after a shrink they are inherited (see the module docs):
    /// growth waits until they drain, and renewals fit the new capacity with what was granted
    /// since.
    pub fn set_capacity(&mut self, capacity: Quota) {
        if !self.capacity.fits_in(&capacity) {
            self.totals.forget();
            self.ceiling = self.ceiling.max(self.capacity);
            self.holders.values_mut().for_each(HolderLeases::inherit_all);
        }
        self.capacity = capacity;
    }

    /// The ledger's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Move to a higher epoch (leader change). Outstanding leases keep counting.
    pub fn advance_epoch(&mut self, epoch: u64) -> Result<(), LedgerError> {
        if epoch < self.epoch {
            return Err(LedgerError::WrongEpoch { got: epoch, current: self.epoch });
        }
        self.epoch = epoch;
        Ok(())
    }

    /// Σ over holders of each holder's largest live lease.
    pub fn outstanding(&self, now_ns: u64) -> Quota {
        self.totals_at(now_ns).all.capped()
    }

    /// The sums over every holder at `now_ns`, remembered (`totals.rs`).
    fn totals_at(&self, now_ns: u64) -> Totals {
        if let Some(t) = self.totals.get(now_ns) {
            return t;
        }
        let t = self.sum_claims(now_ns);
        self.totals.remember(t);
        t
    }

    fn sum_claims(&self, now_ns: u64) -> Totals {
        let (all, lasting) = self.holders.values().fold((Sum::default(), Sum::default()), |(a, l), h| {
            let (claim, lasting_claim) = h.claims(now_ns);
            (a.plus(claim), l.plus(lasting_claim))
        });
        Totals { at_ns: now_ns, all, lasting }
    }

    /// `holder`'s leases, an empty set made for it if it has none on the books.
    fn holder_mut(&mut self, holder: &H) -> &mut HolderLeases {
        self.holders.get_or_insert_with(holder, || holder.clone(), HolderLeases::default)
    }

    /// What `holder`'s leases claim at `now_ns` (zero if it has none on the books).
    pub fn holder_claim(&self, holder: &H, now_ns: u64) -> Quota {
        self.holders.get(holder).map(|h| h.claim(now_ns)).unwrap_or_default()
    }

    /// Every holder on the books and its claim at `now_ns`, in key order.
    pub fn claims_in_key_order(&self, now_ns: u64) -> impl Iterator<Item = (&H, Quota)> {
        self.holders.iter().map(move |(k, h)| (k, h.claim(now_ns)))
    }

    /// The quota of `holder`'s newest lease still live at `now_ns` (zero if none): what it holds
    /// once it confirms, where [`Ledger::holder_claim`] counts its older, larger leases too.
    pub fn holder_newest(&self, holder: &H, now_ns: u64) -> Quota {
        self.holders.get(holder).map(|h| h.newest(now_ns)).unwrap_or_default()
    }

    /// The capacity nobody claims at `now_ns` (component by component; zero where the claims
    /// reach it).
    pub fn unclaimed(&self, now_ns: u64) -> Quota {
        self.totals_at(now_ns).all.room_in(self.capacity)
    }

    /// The most `holder` may be granted now: capacity minus everyone else's claims.
    pub fn headroom_for(&self, holder: &H, now_ns: u64) -> Quota {
        self.rooms(self.holders.get(holder), now_ns).headroom
    }

    /// Capacity minus everyone else's lasting claims (≥ [`Ledger::headroom_for`]).
    #[cfg(test)]
    fn lasting_headroom_for(&self, holder: &H, now_ns: u64) -> Quota {
        self.rooms(self.holders.get(holder), now_ns).lasting_headroom
    }

    /// A holder's claims at `now_ns` (`state`: its leases, if any) and the room each leaves it:
    /// [`Ledger::headroom_for`] and `lasting_headroom_for`, from one lookup of the holder (a DC
    /// manager of 1,000 limits grants 100,000 leases a second at 100 pods).
    fn rooms(&self, state: Option<&HolderLeases>, now_ns: u64) -> Rooms {
        let (claim, lasting_claim) = claims_of(state, now_ns);
        let totals = self.totals_at(now_ns);
        Rooms {
            claim,
            lasting_claim,
            headroom: totals.all.minus(claim).room_in(self.capacity),
            lasting_headroom: totals.lasting.minus(lasting_claim).room_in(self.capacity),
        }
    }

    /// The most an issuer may grant `holder` towards `target` now: anything up to its current
    /// claim (a shrink or a plain renewal) or up to the headroom, whichever is larger; and no
    /// more than the lasting leases leave room for, unless it is within its lasting claim.
    pub fn grantable(&self, holder: &H, target: Quota, now_ns: u64) -> Quota {
        let r = self.rooms(self.holders.get(holder), now_ns);
        let grantable = target.min(r.headroom.max(r.claim));
        if self.reuse_inherited {
            return grantable;
        }
        grantable.min(r.lasting_headroom.max(r.lasting_claim))
    }

    /// `holder` is below `target` in some component and the headroom would let it rise there.
    /// (One lookup of the holder: a growth check asks it of every pod.)
    pub fn can_grow(&self, holder: &H, target: Quota, now_ns: u64) -> bool {
        let Rooms { claim, headroom: room, .. } = self.rooms(self.holders.get(holder), now_ns);
        (target.rate_milli_per_s > claim.rate_milli_per_s && room.rate_milli_per_s > claim.rate_milli_per_s)
            || (target.burst_milli > claim.burst_milli && room.burst_milli > claim.burst_milli)
    }

    /// Record a new lease for `holder`. Fails (and changes nothing) if it would raise the total
    /// above capacity in either component, or if its version/epoch is stale.
    pub fn grant(
        &mut self,
        holder: &H,
        quota: Quota,
        version: LeaseVersion,
        live_until_ns: u64,
        now_ns: u64,
    ) -> Result<(), LedgerError> {
        if version.epoch != self.epoch {
            return Err(LedgerError::WrongEpoch { got: version.epoch, current: self.epoch });
        }
        // One lookup of the holder, and no allocation unless it is new.
        let index = self.holders.get_index_of(holder);
        let state = index.and_then(|i| self.holders.get_index(i)).map(|(_, h)| h);
        let Rooms { claim: current, lasting_claim: lasting_current, headroom, lasting_headroom: lasting_room } =
            self.rooms(state, now_ns);
        if let Some(h) = state {
            if h.closed_until_ns.is_some() {
                return Err(LedgerError::HolderClosed);
            }
            if let Some(last) = h.last_version {
                if version <= last {
                    return Err(LedgerError::VersionNotIncreasing { got: version, last });
                }
            }
        }
        // Neither the total nor the lasting total may rise above the capacity, except by a grant
        // that raises nothing (component by component).
        let fits = |current: Quota, room: Quota| {
            let after = current.max(quota);
            (after.rate_milli_per_s <= current.rate_milli_per_s || after.rate_milli_per_s <= room.rate_milli_per_s)
                && (after.burst_milli <= current.burst_milli || after.burst_milli <= room.burst_milli)
        };
        if !fits(current, headroom) {
            return Err(LedgerError::ExceedsHeadroom { wanted: quota, headroom });
        }
        if !self.reuse_inherited && !fits(lasting_current, lasting_room) {
            return Err(LedgerError::ExceedsHeadroom { wanted: quota, headroom: lasting_room });
        }
        // (Not `holder_mut`: the sums below are shifted beside it.)
        let h = match index.and_then(|i| self.holders.get_index_mut(i)) {
            Some(h) => h,
            None => self.holders.get_or_insert_with(holder, || holder.clone(), HolderLeases::default),
        };
        h.entries.push(LeaseEntry { version, quota, live_until_ns });
        h.last_version = Some(version);
        // The sums remembered move by what the holder claims with the new entry over what it
        // claimed without it, at each instant.
        let before = h.entries.len() - 1;
        self.totals.shift_each(|at| (h.claims_of_first(before, at), h.claims(at)));
        Ok(())
    }

    /// Count `holder`'s lease `version` at least until `until_ns` (never shorter than it is
    /// counted now; an entry that never expires stays so). False if no such lease is counted.
    pub fn count_until(&mut self, holder: &H, version: LeaseVersion, until_ns: u64) -> bool {
        self.totals.forget();
        let entry = self.holders.get_mut(holder).and_then(|h| h.entries.iter_mut().find(|e| e.version == version));
        let Some(e) = entry else { return false };
        e.live_until_ns = e.live_until_ns.max(until_ns);
        true
    }

    /// The holder applied `version`: it will never use an older lease again. Older leases stop
    /// counting at `release_at_ns` (now, plus the egress spread). Idempotent.
    /// Refused for a version this ledger never issued to that holder.
    pub fn confirm_in_use(
        &mut self,
        holder: &H,
        version: LeaseVersion,
        release_at_ns: u64,
    ) -> Result<bool, LedgerError> {
        self.confirm_in_use_at(&mut PlaceHint::default(), holder, version, release_at_ns)
    }

    /// [`confirm_in_use`](Self::confirm_in_use), looking first at place `*place` of the books
    /// for `holder` and setting it to where the holder was found: a place kept from its last
    /// confirmation spares the hashed lookup, which was 8% of a DC manager's time at 1,000
    /// limits × 100 pods (each pod confirms a lease of each limit every second, and each
    /// limit's books are cold by then). A wrong place only costs that lookup.
    pub fn confirm_in_use_at(
        &mut self,
        place: &mut PlaceHint,
        holder: &H,
        version: LeaseVersion,
        release_at_ns: u64,
    ) -> Result<bool, LedgerError> {
        let h = self.holders.place_from(place, holder).and_then(|i| self.holders.get_index_mut(i));
        let h = h.ok_or(LedgerError::UnknownVersion(version))?;
        if !h.entries.iter().any(|e| e.version == version) {
            // Either already superseded (a late duplicate ack) or never issued.
            return if h.entries.iter().all(|e| e.version > version) {
                Ok(false)
            } else {
                Err(LedgerError::UnknownVersion(version))
            };
        }
        let mut changed = false;
        for e in h.entries.iter_mut().filter(|e| e.version < version && e.live_until_ns > release_at_ns) {
            e.live_until_ns = release_at_ns;
            changed = true;
        }
        // Sums held for later instants are stale only if a lease now ends sooner (a pod
        // confirming the lease it already confirmed, every report, changes nothing).
        if changed {
            self.totals.forget();
        }
        Ok(changed)
    }

    /// The holder returned everything and will apply nothing more (graceful drain). Its leases
    /// stop counting at `release_at_ns`. Idempotent. `forget_after_ns` bounds how long the closed
    /// marker is kept.
    pub fn close(&mut self, holder: &H, release_at_ns: u64, forget_after_ns: u64) -> bool {
        self.totals.forget();
        let h = self.holder_mut(holder);
        let had = h.end_at(release_at_ns);
        let newly = h.closed_until_ns.is_none();
        h.closed_until_ns = Some(h.closed_until_ns.map_or(forget_after_ns, |t| t.max(forget_after_ns)));
        self.closed_markers += usize::from(newly);
        had
    }

    /// What [`Ledger::close`] does to `holder`'s leases (none counts after `release_at_ns`),
    /// without a closed marker: it may be granted again. Whether it had a lease live then.
    pub fn release(&mut self, holder: &H, release_at_ns: u64) -> bool {
        self.totals.forget();
        self.holders.get_mut(holder).is_some_and(|h| h.end_at(release_at_ns))
    }

    /// Holders with a closed marker.
    pub fn closed_markers(&self) -> usize {
        self.closed_markers
    }

    /// Whether `holder` is on the books: a lease (live or not yet expired away) or a closed
    /// marker.
    pub fn knows(&self, holder: &H) -> bool {
        self.holders.contains_key(holder)
    }

    /// Whether `holder` has returned its lease for good (a closed marker is on the books).
    pub fn is_closed(&self, holder: &H) -> bool {
        self.holders.get(holder).is_some_and(|h| h.closed_until_ns.is_some())
    }

    /// Forget leases that have expired on the issuer's clock, and stale closed markers.
    pub fn expire(&mut self, now_ns: u64) {
        self.totals.forget();
        let mut markers_gone = 0;
        self.holders.retain(|_, h| {
            h.entries.retain(|e| e.live_until_ns > now_ns);
            if h.entries.spilled() && h.entries.len() <= h.entries.inline_size() {
                h.entries.shrink_to_fit(); // back in its place among the holders
            }
            match h.closed_until_ns {
                Some(t) if t > now_ns => true,
                Some(_) => {
                    markers_gone += 1;
                    false
                }
                None => !h.entries.is_empty(),
            }
        });
        self.closed_markers -= markers_gone;
    }

    /// Every outstanding lease, for durable snapshots and inspection.
    pub fn entries(&self) -> impl Iterator<Item = (&H, &LeaseEntry)> {
        self.holders.iter().flat_map(|(k, h)| h.entries.iter().map(move |e| (k, e)))
    }

    /// Every holder on the books, in key order.
    pub fn holders(&self) -> impl Iterator<Item = &H> {
        self.holders.keys()
    }

    /// Per holder, the version below which its leases are inherited (for the durable record).
    pub fn inherited_below(&self) -> impl Iterator<Item = (&H, LeaseVersion)> {
        self.holders.iter().filter_map(|(k, h)| h.inherited_below.map(|v| (k, v)))
    }
}

#[cfg(test)]
mod tests;
