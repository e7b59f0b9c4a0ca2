//! Leases re-entered from durable state when a leader takes over ([`Ledger::adopt`] and its
//! kin): counted whatever the headroom, since they exist (see the module docs of
//! [`ledger`](super) on inherited leases).

use super::{LeaseEntry, Ledger};
use crate::quota::Quota;
use crate::wire::LeaseVersion;
use std::hash::Hash;

impl<H: Ord + Hash + Clone> Ledger<H> {
    /// Re-enter a lease found in durable state (leader takeover). It is counted whatever the
    /// headroom: it exists, so it must be counted. It is inherited unless it never expires.
    pub fn adopt(&mut self, holder: &H, entry: LeaseEntry) {
        self.adopt_as(holder, entry, true);
    }

    /// As [`adopt`](Self::adopt); `inherited: false` keeps the lease lasting (its writer granted
    /// it under a capacity no larger than this ledger's, and counted it as lasting).
    pub fn adopt_as(&mut self, holder: &H, entry: LeaseEntry, inherited: bool) {
        self.enter_as(holder, entry, inherited);
        let adopted = self
            .holders
            .values()
            .fold(Quota::ZERO, |s, h| s.saturating_add(h.entries.iter().fold(Quota::ZERO, |m, e| m.max(e.quota))));
        self.ceiling = self.ceiling.max(adopted);
    }

    /// Enter a lease whatever the headroom, as inherited (it ends by itself): a DC-manager term's
    /// predecessor's pod leases and the continuations of them (`dc_manager/succession.rs`). The
    /// self-check's ceiling rises to the total at `now_ns` only (no claim rises later by itself),
    /// where [`adopt`](Self::adopt) takes every holder's largest entry, so entering one where
    /// another is given up at the same instant leaves it as it was.
    pub fn enter(&mut self, holder: &H, entry: LeaseEntry, now_ns: u64) {
        self.enter_as(holder, entry, true);
        self.ceiling = self.ceiling.max(self.outstanding(now_ns));
    }

    fn enter_as(&mut self, holder: &H, entry: LeaseEntry, inherited: bool) {
        self.totals.forget();
        let h = self.holder_mut(holder);
        h.last_version = Some(h.last_version.map_or(entry.version, |v| v.max(entry.version)));
        let version = entry.version;
        h.entries.push(entry);
        if inherited {
            let next = LeaseVersion::new(version.epoch, version.seq.saturating_add(1));
            h.inherited_below = Some(h.inherited_below.map_or(next, |b| b.max(next)));
        }
    }

    /// As [`adopt`](Self::adopt), for a holder on its way out: its entries count in the total
    /// until they are released, but never among what lasts, even one that never expires. This is
    /// what a lowered floor not yet confirmed is to its own holder (see the module docs), for a
    /// floor held apart from the DC's own: a lost record's floor, which the DC gives up once it
    /// confirms a floor named since. Counted among what lasts, it and the DC's own floor would
    /// both be, and a capacity lowered later could leave the two above it for good, where the
    /// DC spends under one floor at a time.
    pub fn adopt_outgoing(&mut self, holder: &H, entry: LeaseEntry) {
        self.adopt(holder, entry);
        self.totals.forget();
        self.holders.get_mut(holder).expect("just adopted").outgoing = true;
    }

    /// Moves every lease of `from` under `to` (a DC's successive manager terms, when the newer
    /// says it answers for the older's pod leases): `to` claims the larger of its own and the
    /// moved leases from now on, and its confirmation of a newer version releases them. The
    /// newest version moved, if any.
    pub fn move_holder(&mut self, from: &H, to: &H) -> Option<LeaseVersion> {
        let moved = self.holders.remove(from)?;
        self.totals.forget();
        let newest = moved.entries.iter().map(|e| e.version).max();
        self.closed_markers -= usize::from(moved.closed_until_ns.is_some());
        let h = self.holder_mut(to);
        h.last_version = h.last_version.max(moved.last_version);
        h.inherited_below = h.inherited_below.max(moved.inherited_below);
        h.entries.extend(moved.entries);
        newest
    }
}
