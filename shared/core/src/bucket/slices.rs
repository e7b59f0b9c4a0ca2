//! Slices: a few of the lease's tokens held by one thread, spent with no shared write.
//!
//! Every grant from the bucket itself is a compare-and-swap on one word that every thread
//! calling the limit writes: under contention its cache line moves between cores on every call.
//! A bucket made [`TokenBucket::with_slices`] lets each thread slot top its slice up to
//! [`slice_tokens`] tokens out of the bucket (one CAS) and spend them one call at a time
//! with a plain load and store on a line of its own. Only the request path's owner of a slot
//! spends from it, so no other write comes in between (the contract of
//! [`TokenBucket::try_spend_slice`]).
//!
//! ## Why the lease still holds
//! Tokens in a slice were taken from the bucket earlier than they are spent, so a window of
//! time can see both the slices' stock taken before it and the bucket's own tokens. The bucket
//! therefore sets the slices' most aside from the burst: its own capacity is
//! `burst − slots × slice_tokens` ([`reserve_milli`]). The condition every window relies on: at
//! every instant the bucket's balance plus *all* the stock the slices hold for the current chain
//! (spendable now or not) is at most the burst, and stock grows only by taking tokens from the
//! bucket. Then the admissions in any window of length T are at most its starting balance and
//! stock plus what the bucket refills in it: `rate × T + burst`, as for the bucket alone.
//! Counting only the stock spendable now would not do: stock above a cap could be spent later.
//! * **Which tokens a slice may spend**: those of its *chain*, the run of leases applied each
//!   while the previous one was valid (the renewals that keep the bucket's balance) with a slice
//!   size never smaller than the previous one. A lease applied after a gap or a revocation, or
//!   with smaller slices, starts a new chain: stock of an older chain is never spent (it is
//!   wasted), as a new lease starts from zero balance. Were a smaller size only to cap the stock,
//!   the bucket could refill over the stock hidden above the cap, and a later, larger size would
//!   bring it back: more than the burst at one instant.
//! * **How much**: within a chain sizes never shrink, so a slice holds at most the current
//!   lease's `slice_tokens` (checked again when spent), and all of them at most its reserve.
//! * **When**: only while the lease in force is valid (`now < expires_at`), read together with
//!   the chain and checked against the state word like every decision (seqlock), so a revoked or
//!   expired lease spends nothing.
//!
//! ## Sizing
//! A slice holds the tokens of [`SLICE_SPAN_MS`] at the lease's rate, at most
//! [`MAX_SLICE_TOKENS`], and the slots together at most 1/[`RESERVE_DIVISOR`] of the burst,
//! rounded down to a power of two (so small moves of the rate keep the chain); below
//! [`MIN_SLICE_TOKENS`] a lease is not sliced (too slow for contention to matter). The costs:
//! the bucket's own capacity is up to 1/8 below the burst, so a single cost above it is
//! [`BucketError::CostExceedsCapacity`](super::BucketError) though the lease's burst would fit
//! it, and with k threads calling the usable burst is `burst − (slots − k) × slice_tokens`;
//! tokens in a slice whose thread stopped calling stay unused until its chain ends; a renewal
//! with smaller slices wastes the stock they held, and one with larger slices cuts the bucket's
//! balance to its smaller capacity (waste, never excess).

use super::{TokenBucket, Verdict, GEN_SHIFT, OFFSET_MASK};
use crate::quota::{Quota, MILLI};
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// A slice holds at most the tokens of this many milliseconds at the lease's rate.
pub const SLICE_SPAN_MS: u64 = 1;
/// A slice never holds more than this many tokens.
pub const MAX_SLICE_TOKENS: u64 = 1_024;
/// Leases whose slices would hold fewer tokens than this are not sliced.
pub const MIN_SLICE_TOKENS: u64 = 4;
/// The slices together hold at most 1/`RESERVE_DIVISOR` of the burst.
pub const RESERVE_DIVISOR: u64 = 8;

/// Tokens one slice may hold under `quota` when the bucket has `slots` slices (0: not sliced).
pub fn slice_tokens(quota: Quota, slots: usize) -> u64 {
    if slots == 0 {
        return 0;
    }
    let of_rate = quota.rate_milli_per_s / MILLI * SLICE_SPAN_MS / 1_000;
    let of_burst = quota.burst_milli / MILLI / (RESERVE_DIVISOR * slots as u64);
    let tokens = of_rate.min(of_burst).min(MAX_SLICE_TOKENS);
    if tokens < MIN_SLICE_TOKENS {
        0
    } else {
        // A power of two: renewals whose rate moves a little keep the size (a smaller size
        // ends the chain, and its slices' stock with it).
        1 << tokens.ilog2()
    }
}

/// The part of the burst set aside for `slots` slices of `slice_tokens` each.
pub fn reserve_milli(slice_tokens: u64, slots: usize) -> u64 {
    slice_tokens * slots as u64 * MILLI
}

/// One slot's stock. Only its owner writes it; the bucket keeps each in a `CachePadded` line
/// of its own.
#[derive(Default)]
pub(super) struct Slice {
    /// The chain the stock belongs to (0: none; chains start at 1).
    chain: AtomicU64,
    /// Whole tokens taken from the bucket and not yet spent.
    stock: AtomicU64,
}

/// The lease in force, as a slice needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LiveSlice {
    chain: u64,
    slice_tokens: u64,
}

impl TokenBucket {
    /// How many slices this bucket has (0: made by [`new`](Self::new)).
    pub fn slice_slots(&self) -> usize {
        self.slices.len()
    }

    /// Spend `cost` tokens from slot `slot`'s slice, refilling it from the bucket when it runs
    /// dry. `false`: not granted this way (no slices, a slot out of range, an expired lease, a
    /// lease too slow to slice, a cost above a slice, or too few tokens for a slice): the caller
    /// asks the bucket itself ([`try_acquire`](Self::try_acquire)), which decides and says why.
    ///
    /// **Contract**: never two calls with the same `slot` at once (the pod gives each live
    /// thread a slot of its own). Breaking it cannot corrupt memory, but two threads could
    /// spend the same token: more admissions than the lease allows.
    #[inline]
    pub fn try_spend_slice(&self, slot: usize, cost: u32, now_ns: u64) -> bool {
        let Some(slice) = self.slices.get(slot) else { return false };
        let Some(live) = self.live_slice(now_ns) else { return false };
        let cost = cost as u64;
        let stock = if slice.chain.load(Ordering::Relaxed) == live.chain {
            slice.stock.load(Ordering::Relaxed).min(live.slice_tokens)
        } else {
            0
        };
        if stock >= cost {
            // Only this slot's owner writes it: a plain store, no read-modify-write.
            slice.stock.store(stock - cost, Ordering::Relaxed);
            return true;
        }
        self.refill_slice(slice, live, stock, cost, now_ns)
    }

    /// The chain and slice size of a valid, sliced lease at `now_ns`; read as one generation
    /// (the state word is the same before and after the reads).
    #[inline(always)]
    fn live_slice(&self, now_ns: u64) -> Option<LiveSlice> {
        let before = self.state.load(Ordering::Acquire);
        let p = self.slot_of(before);
        let expires_at_ns = p.expires_at_ns.load(Ordering::Acquire);
        let chain = p.chain.load(Ordering::Acquire);
        let slice_tokens = p.slice_tokens.load(Ordering::Acquire);
        fence(Ordering::Acquire);
        let after = self.state.load(Ordering::Relaxed);
        if (before ^ after) >> GEN_SHIFT != 0 || now_ns >= expires_at_ns || slice_tokens == 0 {
            return None;
        }
        Some(LiveSlice { chain, slice_tokens })
    }

    /// Top the slice up to a full slice from the bucket (one grant of what it lacks; none if the
    /// bucket holds less) and spend `cost` of it.
    #[cold]
    fn refill_slice(&self, slice: &Slice, live: LiveSlice, stock: u64, cost: u64, now_ns: u64) -> bool {
        if cost > live.slice_tokens {
            return false;
        }
        let want = live.slice_tokens - stock;
        let Some(took) = self.take_for_slice(want, now_ns) else { return false };
        // A lease applied in between may have started a new chain: the old stock is not its.
        let total = if took.chain == live.chain { stock + want } else { want };
        slice.chain.store(took.chain, Ordering::Relaxed);
        let granted = total >= cost;
        let left = if granted { total - cost } else { total };
        slice.stock.store(left.min(took.slice_tokens), Ordering::Relaxed);
        granted
    }

    /// Take `tokens` from the bucket as one grant; the chain and slice size of the generation
    /// they were taken under (the compare-and-swap checks it is still the one in force).
    fn take_for_slice(&self, tokens: u64, now_ns: u64) -> Option<LiveSlice> {
        let cost = u32::try_from(tokens).ok()?;
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let generation = current >> GEN_SHIFT;
            let p = self.read_slot(generation);
            let Verdict::Take(offset) = Self::decide(&p, current & OFFSET_MASK, cost, tokens * MILLI, now_ns) else {
                return None;
            };
            let next = (generation << GEN_SHIFT) | offset;
            match self.state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(LiveSlice { chain: p.chain, slice_tokens: p.slice_tokens }),
                Err(seen) => current = seen,
            }
        }
    }

    /// Tokens the slices could spend now (for tests and checks: the owners may be spending).
    pub fn slices_spendable(&self, now_ns: u64) -> u64 {
        let Some(live) = self.live_slice(now_ns) else { return 0 };
        self.slices
            .iter()
            .filter(|s| s.chain.load(Ordering::Relaxed) == live.chain)
            .map(|s| s.stock.load(Ordering::Relaxed).min(live.slice_tokens))
            .sum()
    }

    /// Every token the slices hold for the chain of the lease in force, spendable now or not
    /// (no cap at the slice size): what the safety condition counts.
    #[cfg(test)]
    fn slices_held(&self) -> u64 {
        let p = self.read_slot(self.state.load(Ordering::Acquire) >> GEN_SHIFT);
        self.slices
            .iter()
            .filter(|s| s.chain.load(Ordering::Relaxed) == p.chain)
            .map(|s| s.stock.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests;
