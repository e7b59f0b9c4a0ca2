//! A term's succession: answering for its predecessor's pod leases, and continuing them.
//!
//! A new term's report says `counts_predecessor`, so the coordinator moves the DC's earlier
//! terms' DC leases under it and says in each DC lease how much they grant
//! (`DcLease::predecessor`). The coordinator now counts the larger of those and this term's
//! own leases, and this term's confirmation of a newer DC lease releases them: so this term
//! counts its predecessors' pod leases within its own books, as one entry of that size
//! ([`HolderKey::predecessor`]), until every pod lease an earlier term may have cut has expired
//! (the quiet end, as for the floor: `term_record.rs`). The floor and the emergency allowance
//! stay unused until then, as before, so they still cover what the old pods spend of them.
//!
//! Rather than wait them out, the term **continues** its pods' leases. A pod whose report says
//! what its lease in use grants and how long it has left (`PodReport::held`) gets a lease that
//! names that version (`PodLease::continues`), of the same quota and no longer than its time
//! left. The pod applies it only while that lease is still the one it uses, and then at most its
//! quota and never past its end; from then on it refuses every earlier term's lease (the epoch
//! fence). Until the pod confirms it, a continuation is counted by the predecessor's entry, not
//! apart: the pod spends no more than the lease it continues. Once the pod confirms it, the
//! continuation is counted as the pod's own lease and the predecessor's entry shrinks by the
//! quota of the lease continued; the next split grows the pod from the room that frees.
//!
//! Why the shrink is safe: a continuation is issued after the predecessor's leadership lapsed,
//! so the lease it continues was the pod's newest from that term when the term stopped granting.
//! An issuer releases a pod's newest applied lease only once it has run out (any other lease only
//! when the pod confirms a newer one), and the pod applies a continuation only while the lease
//! still runs, after the predecessor stopped granting: so that lease was counted at every grant of
//! the predecessor, and what its other pods may spend fits its budget less that lease's quota, at
//! every instant until they expire. (A lease that ran out cannot be continued, even empty: the
//! predecessor may have lent its share again.)

use super::{DcManagerCore, DcOutput, HolderKey};
use crate::expiry::NS_PER_MS;
use crate::ledger::LeaseEntry;
use crate::quota::Quota;
use crate::wire::{LeaseVersion, PodLease, PredecessorLeases, SCHEMA_VERSION};

/// The predecessors' pod leases this term answers for.
#[derive(Clone, Debug, Default)]
pub(super) struct Succession {
    /// What it still answers for (it shrinks as pods confirm continuations).
    left: Quota,
    /// The term whose DC leases were moved under this one: only continuations of its pod leases
    /// shrink `left` (an older term's may be counted apart, under a term that did not answer for
    /// it; continuing those counts them twice, which is waste, never excess).
    predecessor_term: Option<u64>,
    /// Per term, the quotas of its leases continued so far (confirmed), before the first DC
    /// lease too.
    continued: Vec<(u64, Quota)>,
    /// The floor the entry counted (the floor at its take): the most of the floor this term
    /// may count in its quiet period. A floor raised since may have been granted from room the
    /// coordinator still holds for a larger floor the predecessor's pods spend, lowered but
    /// not yet confirmed (the coordinator reserves the larger of the two, not both).
    floor_counted: Quota,
    /// The ledger version of the entry counting `left`.
    entry_seq: u64,
    /// Until when (this clock) a predecessor's pod lease may live.
    until_ns: u64,
}

/// A continuation sent to a pod and not yet confirmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Continuation {
    /// Its version (this term's).
    pub version: LeaseVersion,
    /// The earlier term's lease it continues.
    pub continues: LeaseVersion,
    /// That lease's quota.
    pub continues_quota: Quota,
    /// What it grants (at most `continues_quota`).
    pub quota: Quota,
    /// Its TTL.
    pub ttl_ms: u64,
    /// The report it answers: its countdown starts at that report's send.
    pub basis_seq: u64,
    /// When it was last sent.
    pub sent_ns: u64,
    /// Until when this manager counts it.
    pub live_until_ns: u64,
}

impl DcManagerCore {
    /// A DC lease says what of its predecessor's DC leases the coordinator moved under this
    /// term: counted in the books, once, until the quiet end (the first lease that names it; a
    /// lease without it changes nothing).
    pub(super) fn take_predecessor(&mut self, predecessor: Option<PredecessorLeases>, now_ns: u64) {
        let until_ns = self.floors.usable_from_ns;
        let Some(p) = predecessor.filter(|_| now_ns < until_ns && self.succession.predecessor_term.is_none()) else {
            return;
        };
        // The predecessor's pods may spend its DC leases and the floor: both are counted here
        // (so the floor can back their continued leases while this term's quiet period lasts;
        // see `floor_usable`). Its pods continued before it came no longer spend their share.
        let floor = if self.cfg.bugs.successor_spends_floor_uncounted() { Quota::ZERO } else { self.floors.amount };
        let left = p.quota.saturating_add(floor).saturating_sub(self.succession.continued_of(p.term));
        let succession = &mut self.succession;
        (succession.left, succession.predecessor_term, succession.entry_seq, succession.until_ns) =
            (left, Some(p.term), 1, until_ns);
        succession.floor_counted = floor;
        if !self.cfg.bugs.successor_ignores_predecessor_leases() {
            let entry = LeaseEntry { version: LeaseVersion::new(0, 1), quota: left, live_until_ns: until_ns };
            self.ledger.enter(&HolderKey::predecessor(), entry, now_ns);
        }
    }

    /// The floor this term may count in its budget at `now_ns`: none in its quiet period (pods
    /// of earlier terms may spend it), unless it answers for its predecessor's pod leases, whose
    /// entry counts the floor with them: what it holds beyond them is this term's to grant
    /// (their continued leases, most often, which the floor backed). Without that, a DC whose
    /// share is mostly its floor had its continued pods shrunk to nothing a renew interval after
    /// the takeover. Never more floor than the entry counted (`Succession::floor_counted`).
    pub(super) fn floor_usable(&self, now_ns: u64) -> Quota {
        let answers = self.succession.predecessor_term.is_some()
            && now_ns < self.succession.until_ns
            && !self.cfg.bugs.successor_ignores_predecessor_leases();
        if now_ns >= self.floors.usable_from_ns || (answers && self.cfg.bugs.successor_spends_floor_uncounted()) {
            self.floors.amount
        } else if answers {
            self.floors.amount.min(self.succession.floor_counted)
        } else {
            Quota::ZERO
        }
    }

    /// What this term still answers for of its predecessors' pod leases at `now_ns`.
    pub fn predecessor_quota(&self, now_ns: u64) -> Quota {
        if now_ns < self.succession.until_ns {
            self.succession.left
        } else {
            Quota::ZERO
        }
    }

    /// What the pod at place `i` of the views gets in a split at `now_ns` while earlier terms'
    /// pod leases may live: `Some(Some(_))` a continuation of the lease it holds, `Some(None)`
    /// nothing (one was sent), `None` an ordinary lease. A continuation may go before the first
    /// DC lease has said what this term answers for: until its pod confirms it, it is the
    /// predecessor's lease by another name, and once confirmed it is counted in this term's
    /// books either way (twice, if the coordinator counts the predecessor's DC leases apart).
    pub(super) fn continuation_for(&mut self, i: usize, now_ns: u64) -> Option<Option<DcOutput>> {
        if now_ns >= self.floors.usable_from_ns {
            return None;
        }
        let (pod, view) = self.pods.views.get_index(i)?;
        let pending = view.continuation.filter(|c| c.live_until_ns > now_ns);
        // Still on the lease it continues: wait for the pod to take it, and send the same lease
        // again a renew interval after it went (lost on the way; a copy that finds it applied is
        // refused as not newer). On another lease, the pod refused it.
        let c = match pending.filter(|c| view.held.is_some_and(|(v, _)| v == c.continues)) {
            Some(c) if now_ns < c.sent_ns.saturating_add(self.cfg.renew_interval_ms * NS_PER_MS) => return Some(None),
            Some(c) => Continuation { sent_ns: now_ns, ..c },
            None => {
                let (held_version, held) = view.held.filter(|(v, h)| {
                    v.epoch < self.cfg.epoch && h.left_ms >= self.cfg.min_pod_ttl_ms && !view.draining
                })?;
                let ttl_ms = held.left_ms.min(self.cfg.pod_ttl_ms);
                self.next_seq += 1;
                self.counters.continuations_issued += 1;
                Continuation {
                    version: LeaseVersion::new(self.cfg.epoch, self.next_seq),
                    continues: held_version,
                    continues_quota: held.quota,
                    quota: held.quota,
                    ttl_ms,
                    basis_seq: view.last_seq,
                    sent_ns: now_ns,
                    live_until_ns: self.cfg.expiry.issuer_live_until_ns(now_ns, ttl_ms),
                }
            }
        };
        let lease = continuation_lease(&self.lease_names, self.limit_removed, pod, view.incarnation, &c);
        let view = self.pods.views.get_index_mut(i)?;
        view.continuation = Some(c);
        view.sent_a_lease = true;
        self.counters.pod_leases_issued += 1;
        Some(Some(DcOutput::PodLease(lease)))
    }

    /// `holder` (at place `i` of the views) reports `in_use`: if that is the continuation it was
    /// sent, it is counted as the pod's own lease from now on, beside the lease it continued for
    /// the egress spread (as a confirmation keeps the older lease), and the predecessor's entry
    /// gives up that lease's quota at once, if it is of the term whose DC leases moved. The
    /// total on the books does not rise.
    pub(super) fn settle_continuation(&mut self, i: usize, holder: &HolderKey, in_use: LeaseVersion, now_ns: u64) {
        let Some(view) = self.pods.views.get_index_mut(i) else { return };
        let Some(c) = view.continuation.filter(|c| c.version == in_use) else { return };
        view.continuation = None;
        self.counters.continuations_confirmed += 1;
        self.succession.note_continued(c.continues.epoch, c.continues_quota);
        let release_at = self.cfg.expiry.released_until_ns(now_ns);
        let continued = LeaseEntry { version: c.continues, quota: c.continues_quota, live_until_ns: release_at };
        let entry = LeaseEntry { version: c.version, quota: c.quota, live_until_ns: c.live_until_ns };
        self.ledger.enter(holder, continued, now_ns);
        self.ledger.enter(holder, entry, now_ns);
        let of_the_moved_term = self.succession.predecessor_term == Some(c.continues.epoch);
        if now_ns >= self.succession.until_ns || !of_the_moved_term {
            // Counted apart, or by an entry not taken yet (its first DC lease subtracts it): on
            // these books it is new, twice counted at worst.
            return;
        }
        let left = self.succession.left.saturating_sub(c.continues_quota);
        self.succession.left = left;
        self.succession.entry_seq += 1;
        let version = LeaseVersion::new(0, self.succession.entry_seq);
        let key = HolderKey::predecessor();
        // (The new entry first: the holder claims the larger of the two until the old one ends.)
        self.ledger.enter(&key, LeaseEntry { version, quota: left, live_until_ns: self.succession.until_ns }, now_ns);
        let _ = self.ledger.confirm_in_use(&key, version, now_ns);
        self.passes.growth_waiting = true;
    }
}

impl Succession {
    /// What was continued of term `term`'s leases.
    fn continued_of(&self, term: u64) -> Quota {
        self.continued.iter().find(|(t, _)| *t == term).map_or(Quota::ZERO, |(_, q)| *q)
    }

    fn note_continued(&mut self, term: u64, quota: Quota) {
        match self.continued.iter_mut().find(|(t, _)| *t == term) {
            Some((_, q)) => *q = q.saturating_add(quota),
            None => self.continued.push((term, quota)),
        }
    }
}

/// The lease that carries continuation `c` to `pod`'s process `incarnation`.
fn continuation_lease(
    names: &super::LeaseNames,
    limit_removed: bool,
    pod: &HolderKey,
    incarnation: u64,
    c: &Continuation,
) -> PodLease {
    PodLease {
        v: SCHEMA_VERSION,
        limit: names.limit.clone(),
        dc: names.dc.clone(),
        pod: pod.pod().clone(),
        incarnation,
        issuer: names.issuer.clone(),
        version: c.version,
        lease_id: super::split_pass::lease_id(&names.lease_id_prefix, c.version.seq),
        quota: c.quota,
        ttl_ms: c.ttl_ms,
        basis_seq: c.basis_seq,
        limit_removed,
        continues: Some(c.continues),
    }
}
