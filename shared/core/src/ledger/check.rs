//! The ledger's self-check ([`Ledger::check`]): the conservation invariant, and that what it
//! keeps beside the books (the remembered sums, the count of closed markers) agrees with them.

use super::Ledger;
use crate::quota::Quota;
use std::hash::Hash;
use thiserror::Error;

/// A ledger whose books break conservation or disagree with what it keeps beside them.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BooksError {
    /// The remembered sums (`kept`, debug-printed) differ from the books (`books`).
    #[error("remembered sums {kept} differ from the books {books}")]
    RememberedSums {
        /// The remembered sums.
        kept: String,
        /// The sums of the books.
        books: String,
    },
    #[error("{on_books} closed markers on the books, {counted} counted")]
    /// The count of closed markers kept differs from those on the books.
    ClosedMarkers {
        /// Closed markers on the books.
        on_books: usize,
        /// Closed markers counted.
        counted: usize,
    },
    #[error("lasting leases {lasting} exceed capacity {capacity}")]
    /// The lasting (not inherited) leases exceed the capacity.
    LastingOverCapacity {
        /// The lasting leases' sum (less lowered floors on their way out).
        lasting: Quota,
        /// The capacity.
        capacity: Quota,
    },
    #[error("outstanding {outstanding} exceeds capacity {capacity} (inherited ceiling {ceiling})")]
    /// The outstanding leases exceed the larger of the capacity and the inherited ceiling.
    OutstandingOverBound {
        /// Every outstanding lease's sum.
        outstanding: Quota,
        /// The capacity.
        capacity: Quota,
        /// The most the total may reach while inherited leases are live.
        ceiling: Quota,
    },
}

impl<H: Ord + Hash + Clone> Ledger<H> {
    /// The conservation invariant at `now_ns`: the lasting leases fit the capacity, and the total
    /// never rises above the larger of the capacity and what was there when it shrank (or was
    /// adopted); once the inherited leases have expired, the total fits the capacity.
    pub fn check(&self, now_ns: u64) -> Result<(), BooksError> {
        for kept in self.totals.all() {
            let fresh = self.sum_claims(kept.at_ns);
            if kept != fresh {
                return Err(BooksError::RememberedSums { kept: format!("{kept:?}"), books: format!("{fresh:?}") });
            }
        }
        let markers = self.holders.values().filter(|h| h.closed_until_ns.is_some()).count();
        if markers != self.closed_markers {
            return Err(BooksError::ClosedMarkers { on_books: markers, counted: self.closed_markers });
        }
        // What lasts, less lowered floors on their way out (their excess is the documented
        // exception; grants never take its room: it counts among what lasts for them).
        let settled = self.holders.values().fold(Quota::ZERO, |s, h| s.saturating_add(h.settled_claim(now_ns)));
        if !settled.fits_in(&self.capacity) {
            return Err(BooksError::LastingOverCapacity { lasting: settled, capacity: self.capacity });
        }
        let out = self.outstanding(now_ns);
        let bound = self.capacity.max(self.ceiling);
        if !out.fits_in(&bound) {
            return Err(BooksError::OutstandingOverBound {
                outstanding: out,
                capacity: self.capacity,
                ceiling: self.ceiling,
            });
        }
        Ok(())
    }
}
