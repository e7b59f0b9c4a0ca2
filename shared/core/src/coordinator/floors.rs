//! Floors on the coordinator's books.
//!
//! A DC's floor has no expiry: its manager keeps spending the last floor it read, however long
//! it is cut off. So each DC's floor is a holder in the ledger (`floor.<dc>`: no wire id contains
//! a dot) whose entries never expire, and a floor changes like a lease:
//!
//! * **down** at once: the lower floor is named in the next record, but the larger one keeps
//!   counting until the DC reports (`DcReport.floor_in_use`) a floor that fits the newest one
//!   *and* (`DcReport.floor_version`) that it has taken the newest one: a manager that has not
//!   read it yet may still move to an older floor it has not seen either (a raise a later term
//!   took back);
//! * **up** only as far as the headroom allows: a raise is a grant, so it waits until the
//!   leases that used the room have been released or have expired.
//!
//! The record carries, per DC, the newest floor, its version and what is reserved, so the next
//! leader keeps counting a floor a DC may still use.

use super::CoordinatorCore;
use crate::ledger::{LeaseEntry, NEVER};
use crate::quota::Quota;
use crate::wire::{LeaseVersion, LedgerRecord};

/// The ledger holder that stands for DC `dc`'s floor.
pub fn floor_holder(dc: &str) -> String {
    format!("floor.{dc}")
}

/// The DC a ledger holder stands for the floor of, if it is one.
fn floor_dc(holder: &str) -> Option<&str> {
    holder.strip_prefix("floor.")
}

/// The ledger holder that stands for the floor a lost record may have named for DC `dc`: apart
/// from the DC's own floor, so that it never counts as room for raising that floor.
fn lost_floor_holder(dc: &str) -> String {
    format!("{LOST_FLOOR_PREFIX}{dc}")
}

/// The DC a ledger holder stands for the lost floor of, if it is one.
fn lost_floor_dc(holder: &str) -> Option<&str> {
    holder.strip_prefix(LOST_FLOOR_PREFIX)
}

const LOST_FLOOR_PREFIX: &str = "lost-floor.";

impl CoordinatorCore {
    /// The newest floor granted to `dc` and its version: what records name and DC leases carry.
    pub fn floor_named(&self, dc: &str) -> Option<(Quota, LeaseVersion)> {
        let key = floor_holder(dc);
        self.ledger
            .entries()
            .filter(|(h, _)| **h == key)
            .max_by_key(|(_, e)| e.version)
            .map(|(_, e)| (e.quota, e.version))
    }

    /// What the books reserve for `dc`'s floor at `now_ns`: the newest floor, or an older, larger
    /// one the DC has not yet confirmed it stopped using, plus a lost record's floor for it.
    pub fn floor_reserved(&self, dc: &str, now_ns: u64) -> Quota {
        let own = self.ledger.holder_claim(&floor_holder(dc), now_ns);
        own.saturating_add(self.ledger.holder_claim(&lost_floor_holder(dc), now_ns))
    }

    /// Every DC with a floor on the books (a DC dropped from the configuration included), or a
    /// lost record's floor: the split keeps each one's floor aside (see [`floor_set_aside`]).
    /// A lost floor counts in the total but not among what lasts (`Ledger::adopt_outgoing`),
    /// so without this a DC dropped from the definition, whose lost floor no report of its
    /// ever releases, had its floor's room taken by the others' renewals after R went down
    /// (FINDINGS F40).
    pub(super) fn floor_dcs(&self) -> Vec<String> {
        let mut dcs: Vec<String> =
            self.ledger.holders().filter_map(|h| floor_dc(h).or_else(|| lost_floor_dc(h))).map(String::from).collect();
        dcs.sort_unstable();
        dcs.dedup();
        dcs
    }

    /// What the split keeps aside for `dc`'s floor: the configured floor, or more while more is
    /// reserved.
    pub(super) fn floor_set_aside(&self, dc: &str, now_ns: u64) -> Quota {
        let configured = self.cfg.dcs.iter().find(|d| d.name == dc).map_or(Quota::ZERO, |d| d.floor);
        configured.max(self.floor_reserved(dc, now_ns))
    }

    /// Count every floor the record names or reserves (a new leader's takeover).
    pub(super) fn adopt_floors(&mut self, rec: &LedgerRecord) {
        for dc in rec.floors.keys() {
            let (named, version) = rec.floor_of(dc).expect("listed");
            let version = version.max(LeaseVersion::new(0, 1));
            let reserved = rec.floor_reserved(dc).expect("listed");
            let key = floor_holder(dc);
            if reserved != named {
                let older = LeaseEntry { version: LeaseVersion::new(0, 0), quota: reserved, live_until_ns: NEVER };
                self.ledger.adopt(&key, older);
            }
            self.ledger.adopt(&key, LeaseEntry { version, quota: named, live_until_ns: NEVER });
        }
    }

    /// A lost record's floors, as far as the fence knows them (or as the record of a leader
    /// still recovering carries them): each counts, under a holder of its own, until the DC
    /// confirms a floor named since the loss. Meanwhile the DC's own floor is named zero (see
    /// [`settle_floors`](Self::settle_floors)), so a connected DC drops the floor it may hold
    /// from the lost record and confirms, and no raise counts a lost floor as its own room.
    pub(super) fn adopt_lost_floors(&mut self, floors: &std::collections::BTreeMap<String, Quota>) {
        for (dc, floor) in floors {
            let lost = LeaseEntry { version: LeaseVersion::new(0, 0), quota: *floor, live_until_ns: NEVER };
            // On its way out, as a lowered floor not yet confirmed is: it counts in the total
            // (no grant takes its room) but not among what lasts beside the DC's own floor.
            self.ledger.adopt_outgoing(&lost_floor_holder(dc), lost);
        }
    }

    /// Per DC, the lost floors still counted (for the durable record).
    pub(super) fn lost_floors(&self) -> std::collections::BTreeMap<String, Quota> {
        self.ledger
            .entries()
            .filter(|(_, e)| e.live_until_ns == NEVER)
            .filter_map(|(h, e)| lost_floor_dc(h).map(|dc| (dc.to_string(), e.quota)))
            .collect()
    }

    /// Move every DC's floor towards its configured value: down at once, up as far as the
    /// headroom allows (not at all while a lost record's leases may be live). A DC dropped from
    /// the configuration whose floor is still on the books goes to zero like any lowered floor
    /// (its old one counts until it confirms), so no operator has to lower it first. True if a
    /// floor changed (the record must go out).
    pub(super) fn settle_floors(&mut self, now_ns: u64) -> bool {
        let mut changed = false;
        let quiet = now_ns < self.issue_from_ns;
        let mut floors: Vec<(String, Quota)> = self.cfg.dcs.iter().map(|d| (d.name.clone(), d.floor)).collect();
        for dc in self.floor_dcs() {
            if !floors.iter().any(|(d, _)| *d == dc) && self.floor_named(&dc).is_some() {
                floors.push((dc, Quota::ZERO));
            }
        }
        for (dc, configured) in floors {
            let named = self.floor_named(&dc).map(|(q, _)| q);
            // While a lost record's leases may be live, a floor may only go down from what this
            // term names (nothing yet: zero, at a version of this term).
            let want = if quiet { configured.min(named.unwrap_or(Quota::ZERO)) } else { configured };
            if named == Some(want) {
                continue;
            }
            let key = floor_holder(&dc);
            let quota =
                if self.cfg.bugs.floor_change_at_once() { want } else { self.ledger.grantable(&key, want, now_ns) };
            if named == Some(quota) {
                continue; // no room yet
            }
            self.next_seq += 1;
            let version = LeaseVersion::new(self.epoch(), self.next_seq);
            if self.cfg.bugs.floor_change_at_once() {
                // The old rule: the configured floor is in force at once, the old one forgotten.
                self.ledger.adopt(&key, LeaseEntry { version, quota, live_until_ns: NEVER });
                let _ = self.ledger.confirm_in_use(&key, version, now_ns);
                changed = true;
            } else {
                changed |= self.ledger.grant(&key, quota, version, NEVER, now_ns).is_ok();
            }
        }
        changed
    }

    /// The DC's manager spends under no floor above `in_use` and takes no floor older than
    /// `taken`: once the first fits the newest floor and the second is at least its version, the
    /// older ones stop counting (after the egress spread).
    pub(super) fn confirm_floor(&mut self, dc: &str, in_use: Quota, taken: Option<LeaseVersion>, now_ns: u64) {
        let Some((named, version)) = self.floor_named(dc) else { return };
        let seen = taken.is_some_and(|t| t >= version) || self.cfg.bugs.floor_confirmed_by_amount();
        if in_use.fits_in(&named) && seen {
            let release_at = self.cfg.expiry.released_until_ns(now_ns);
            let _ = self.ledger.confirm_in_use(&floor_holder(dc), version, release_at);
            // A floor named since a loss is taken: the lost record's floor is left for good.
            let lost = lost_floor_holder(dc);
            if self.ledger.holder_claim(&lost, now_ns) != Quota::ZERO {
                self.ledger.close(&lost, release_at, release_at);
            }
        }
    }
}
