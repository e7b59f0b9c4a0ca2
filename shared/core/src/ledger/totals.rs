//! The ledger's sums over holders at a few instants, kept so that a pass granting to every pod
//! costs O(pods), not O(pods²).
//!
//! A grant must know what everyone *else* claims (in total, and among what lasts). Summing over
//! every holder for each grant makes a DC manager's pass over N pods cost N² claim reads (and a
//! join storm N³). Instead the ledger remembers, per instant it was asked about, the exact sums
//! over all holders; a holder's room is the capacity minus (sum − its own claim). A grant changes
//! only its holder's claims, so it adjusts each remembered sum by that holder's before and after;
//! every other change to the books forgets them all. Sums are kept in `u128`, so they never
//! saturate and `sum − own` is exactly the others' sum. [`Ledger::check`](super::Ledger::check)
//! recomputes every remembered sum and fails if one has drifted.

use crate::quota::Quota;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// An exact sum of quotas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Sum {
    rate_milli_per_s: u128,
    burst_milli: u128,
}

impl Sum {
    pub(super) fn plus(self, q: Quota) -> Sum {
        Sum {
            rate_milli_per_s: self.rate_milli_per_s + u128::from(q.rate_milli_per_s),
            burst_milli: self.burst_milli + u128::from(q.burst_milli),
        }
    }

    /// `self − q`, where `q` is one of the claims summed in `self`.
    pub(super) fn minus(self, q: Quota) -> Sum {
        Sum {
            rate_milli_per_s: self.rate_milli_per_s.saturating_sub(u128::from(q.rate_milli_per_s)),
            burst_milli: self.burst_milli.saturating_sub(u128::from(q.burst_milli)),
        }
    }

    /// The sum as a quota, each component capped at `u64::MAX` (what a saturating sum gives).
    pub(super) fn capped(self) -> Quota {
        let cap = |x: u128| u64::try_from(x).unwrap_or(u64::MAX);
        Quota::new(cap(self.rate_milli_per_s), cap(self.burst_milli))
    }

    /// What `capacity` leaves beside this sum, component by component (zero where it is above).
    pub(super) fn room_in(self, capacity: Quota) -> Quota {
        let room = |cap: u64, used: u128| u64::try_from(u128::from(cap).saturating_sub(used)).unwrap_or(0);
        Quota::new(room(capacity.rate_milli_per_s, self.rate_milli_per_s), room(capacity.burst_milli, self.burst_milli))
    }
}

/// The sums of every holder's claim, and of every holder's lasting claim, at `at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) at_ns: u64,
    pub(super) all: Sum,
    pub(super) lasting: Sum,
}

/// Instants remembered at once: a pass asks about now, now + the egress spread and each counted
/// DC lease's end (up to about `dc_ttl_ms / renew` of them while acks wait), in turn for every
/// grant; fewer than it asks about and each would miss, and a pass would be O(pods²) again.
const MAX_INSTANTS: usize = 64;

/// Remembered [`Totals`]. A clone starts empty (it is recomputed on first use).
#[derive(Debug, Default)]
pub(super) struct TotalsCache(Mutex<Vec<Totals>>);

impl Clone for TotalsCache {
    fn clone(&self) -> Self {
        TotalsCache::default()
    }
}

impl TotalsCache {
    /// The list (a panic elsewhere while it was held cannot leave it half-changed: every change
    /// is one push, remove or field update).
    fn held(&self) -> MutexGuard<'_, Vec<Totals>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held_mut(&mut self) -> &mut Vec<Totals> {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn get(&self, at_ns: u64) -> Option<Totals> {
        self.held().iter().find(|t| t.at_ns == at_ns).copied()
    }

    pub(super) fn remember(&self, totals: Totals) {
        let mut held = self.held();
        // Never two entries for one instant (`shift_each` would shift both).
        if held.iter().any(|t| t.at_ns == totals.at_ns) {
            return;
        }
        if held.len() >= MAX_INSTANTS {
            held.remove(0);
        }
        held.push(totals);
    }

    pub(super) fn all(&self) -> Vec<Totals> {
        self.held().clone()
    }

    /// One holder's claims changed: at each remembered instant, `claims(at)` says from what to
    /// what (`(before, after)`, each: all, lasting).
    pub(super) fn shift_each(&mut self, claims: impl Fn(u64) -> ((Quota, Quota), (Quota, Quota))) {
        for t in self.held_mut() {
            let (before, after) = claims(t.at_ns);
            t.all = t.all.minus(before.0).plus(after.0);
            t.lasting = t.lasting.minus(before.1).plus(after.1);
        }
    }

    /// The books changed in a way a shift does not describe.
    pub(super) fn forget(&mut self) {
        self.held_mut().clear();
    }
}
