//! The pod's lock-free token bucket.
//!
//! The hot path ([`TokenBucket::try_acquire`]) is a load, a few arithmetic operations and one
//! compare-and-swap on a single `AtomicU64`: no lock, no allocation, no clock read (`now_ns` is a
//! parameter, from the caller's monotonic clock).
//!
//! ## Representation
//! GCRA ("theoretical arrival time"): the state word holds a 16-bit parameter *generation* and a
//! 48-bit TAT offset in nanoseconds from the generation's origin. Lease parameters (rate,
//! capacity, expiry) live in two slots, double-buffered by generation parity. A renewal writes the
//! other slot, then swaps the state word to the next generation in one CAS; any hot-path thread
//! that read the old generation fails its CAS and retries, so a decision always uses one
//! consistent set of parameters. Renewals are serialised by a mutex that the hot path never takes.
//!
//! ## Lease rules (rate and burst leases, as for the tenant with rate and burst)
//! * A renewal that arrives while the previous lease is still valid **keeps the balance**,
//!   truncated to the new capacity. Nothing is refilled by renewing.
//! * A lease applied after a gap (previous one expired, or none) **starts at zero balance**.
//! * After expiry every request is denied.
//! * A cost above the current capacity is [`BucketError::CostExceedsCapacity`]: it cannot fit
//!   under this lease however long the caller waits.
//!
//! ## Slices (a bucket made [`with_slices`](TokenBucket::with_slices))
//! Threads may take a few tokens at a time out of the bucket into a slice of their own and spend
//! them with no shared write ([`slices`]). The bucket sets the slices' most aside from the burst,
//! so the bucket and the slices together never hold more than the lease's burst.

use crate::quota::{Quota, MILLI};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;
use thiserror::Error;

const GEN_SHIFT: u32 = 48;
const OFFSET_MASK: u64 = (1 << GEN_SHIFT) - 1;
/// Largest TAT offset we let a lease reach (~39 hours); keeps the 48-bit field from overflowing.
const MAX_SPAN_NS: u64 = 1 << 47;

/// A request that cannot fit under the current lease however long it waits.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum BucketError {
    #[error("cost {cost} can never fit: the current capacity is {capacity_milli} milli-tokens")]
    /// The cost exceeds the lease's burst capacity.
    CostExceedsCapacity {
        /// The request's cost, in tokens.
        cost: u32,
        /// The capacity, in milli-tokens.
        capacity_milli: u64,
    },
}

/// Lease parameters the bucket cannot represent.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("lease parameters out of range: {0}")]
pub struct LeaseParamsError(pub String);

/// Why a request was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenyReason {
    /// Not enough tokens yet; `retry_after_ns` says when there will be.
    Empty,
    /// The lease has expired and no renewal arrived: fail safe.
    Expired,
    /// No lease was ever applied.
    NoLease,
}

/// The bucket's answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The request may go.
    Granted,
    /// The request may not go.
    Denied {
        /// Why.
        reason: DenyReason,
        /// How long until enough tokens refill, in nanoseconds: only when the bucket is empty and
        /// they refill before the lease expires.
        retry_after_ns: Option<u64>,
    },
}

impl Decision {
    /// Whether the request was granted.
    pub fn is_granted(&self) -> bool {
        matches!(self, Decision::Granted)
    }
}

/// What the bucket currently enforces (for metrics, tests and the simulator's checks).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketView {
    /// The lease's rate and burst, as applied.
    pub quota: Quota,
    /// When the lease expires, on the pod's clock in nanoseconds.
    pub expires_at_ns: u64,
    /// The bucket's own balance (not counting tokens already in slices).
    pub balance_milli: u64,
    /// The part of the burst set aside for slices (0 without slices).
    pub slice_reserve_milli: u64,
}

/// One cache line per slot, so a generation's parity bit is directly a byte offset.
#[derive(Default)]
#[repr(C, align(64))]
struct ParamSlot {
    origin_ns: AtomicU64,
    /// Nanoseconds per whole token, rounded up (never faster than leased).
    token_ns: AtomicU64,
    tolerance_ns: AtomicU64,
    capacity_milli: AtomicU64,
    rate_milli_per_s: AtomicU64,
    expires_at_ns: AtomicU64,
    /// The run of leases this one continues: a lease applied while the previous one was still
    /// valid keeps its chain, any other starts a new one. Slices spend tokens of their chain only.
    chain: AtomicU64,
    /// Tokens a slice may hold under this lease (0: no slices).
    slice_tokens: AtomicU64,
}

/// The pod's lock-free token bucket (GCRA), enforcing the lease in force.
pub struct TokenBucket {
    state: CachePadded<AtomicU64>,
    slots: CachePadded<[ParamSlot; 2]>,
    /// Serialises renewals; holds the last chain number handed out.
    renew: Mutex<u64>,
    /// One slice per thread slot (empty: a bucket without slices).
    slices: Box<[CachePadded<slices::Slice>]>,
}

struct Hot {
    origin_ns: u64,
    token_ns: u64,
    tolerance_ns: u64,
    expires_at_ns: u64,
}

struct Params {
    origin_ns: u64,
    token_ns: u64,
    tolerance_ns: u64,
    capacity_milli: u64,
    rate_milli_per_s: u64,
    expires_at_ns: u64,
    chain: u64,
    slice_tokens: u64,
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenBucket {
    /// A bucket with no lease: denies everything until [`apply_lease`](Self::apply_lease).
    pub fn new() -> Self {
        Self::with_slices(0)
    }

    /// A bucket with no lease whose lease threads may also spend through `slots` slices of
    /// their own ([`slices`]); `slots` = 0 is [`new`](Self::new).
    pub fn with_slices(slots: usize) -> Self {
        TokenBucket {
            state: CachePadded::new(AtomicU64::new(0)),
            slots: CachePadded::new(Default::default()),
            renew: Mutex::new(0),
            slices: (0..slots).map(|_| CachePadded::new(slices::Slice::default())).collect(),
        }
    }

    /// The parameter slot of the generation in `state` (by its parity bit).
    #[inline(always)]
    fn slot_of(&self, state: u64) -> &ParamSlot {
        // Bit 48 is the generation's parity; shifted down to bit 6 it is the slot's byte offset.
        const _: () = assert!(std::mem::size_of::<ParamSlot>() == 64 && GEN_SHIFT == 48);
        let offset = ((state >> 42) & 64) as usize;
        // SAFETY: `slots` is two consecutive 64-byte `ParamSlot`s and `offset` is 0 or 64.
        unsafe { &*(self.slots.as_ptr() as *const u8).add(offset).cast::<ParamSlot>() }
    }

    /// The four fields every decision needs; the rest only on the slow path.
    #[inline(always)]
    fn read_hot(&self, state: u64) -> Hot {
        let s = self.slot_of(state);
        let h = Hot {
            origin_ns: s.origin_ns.load(Ordering::Acquire),
            token_ns: s.token_ns.load(Ordering::Acquire),
            tolerance_ns: s.tolerance_ns.load(Ordering::Acquire),
            expires_at_ns: s.expires_at_ns.load(Ordering::Acquire),
        };
        fence(Ordering::Acquire);
        h
    }

    #[inline]
    fn read_slot(&self, generation: u64) -> Params {
        let s = &self.slots[(generation & 1) as usize];
        let p = Params {
            origin_ns: s.origin_ns.load(Ordering::Acquire),
            token_ns: s.token_ns.load(Ordering::Acquire),
            tolerance_ns: s.tolerance_ns.load(Ordering::Acquire),
            capacity_milli: s.capacity_milli.load(Ordering::Acquire),
            rate_milli_per_s: s.rate_milli_per_s.load(Ordering::Acquire),
            expires_at_ns: s.expires_at_ns.load(Ordering::Acquire),
            chain: s.chain.load(Ordering::Acquire),
            slice_tokens: s.slice_tokens.load(Ordering::Acquire),
        };
        // Seqlock-style: slot reads complete before the state word is checked again.
        fence(Ordering::Acquire);
        p
    }

    /// Time the bucket needs to refill `cost` tokens.
    #[inline(always)]
    fn cost_ns(token_ns: u64, cost: u32) -> u64 {
        (cost as u64).saturating_mul(token_ns)
    }

    /// Take `cost` tokens at `now_ns` if they are there. Lock-free, allocation-free.
    #[inline]
    pub fn try_acquire(&self, cost: u32, now_ns: u64) -> Result<Decision, BucketError> {
        let cost_milli = cost as u64 * MILLI;
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let generation = current >> GEN_SHIFT;
            // Fast path: a live lease (expiry 0 = none) and enough tokens.
            let h = self.read_hot(current);
            if now_ns < h.expires_at_ns {
                let now_off = now_ns.saturating_sub(h.origin_ns);
                let cost_ns = Self::cost_ns(h.token_ns, cost);
                // Lost races within the same generation retry with the parameters already read.
                loop {
                    let tat = current & OFFSET_MASK;
                    let new_tat = tat.max(now_off).saturating_add(cost_ns);
                    if new_tat - now_off > h.tolerance_ns {
                        break;
                    }
                    // Same generation bits, new offset (new_tat < 2^48: within tolerance of now).
                    let next = current - tat + new_tat;
                    match self.state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => return Ok(Decision::Granted),
                        Err(seen) => current = seen,
                    }
                    // Lost a race: let the winner's cache line settle before trying again.
                    std::hint::spin_loop();
                    if current >> GEN_SHIFT != generation {
                        break;
                    }
                }
                if current >> GEN_SHIFT != generation {
                    continue;
                }
            }
            let p = self.read_slot(generation);
            match Self::decide(&p, current & OFFSET_MASK, cost, cost_milli, now_ns) {
                Verdict::Take(new_offset) => {
                    let next = (generation << GEN_SHIFT) | new_offset;
                    match self.state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => return Ok(Decision::Granted),
                        Err(seen) => current = seen,
                    }
                }
                other => {
                    // A denial must also be based on one consistent generation.
                    let again = self.state.load(Ordering::Acquire);
                    if again != current {
                        current = again;
                        continue;
                    }
                    return match other {
                        Verdict::Deny(d) => Ok(d),
                        Verdict::Never(e) => Err(e),
                        Verdict::Take(_) => unreachable!(),
                    };
                }
            }
        }
    }

    #[inline]
    fn decide(p: &Params, tat: u64, cost: u32, cost_milli: u64, now_ns: u64) -> Verdict {
        if p.rate_milli_per_s == 0 {
            return Verdict::Deny(Decision::Denied { reason: DenyReason::NoLease, retry_after_ns: None });
        }
        if now_ns >= p.expires_at_ns {
            return Verdict::Deny(Decision::Denied { reason: DenyReason::Expired, retry_after_ns: None });
        }
        if cost_milli > p.capacity_milli {
            return Verdict::Never(BucketError::CostExceedsCapacity { cost, capacity_milli: p.capacity_milli });
        }
        let now_off = now_ns.saturating_sub(p.origin_ns);
        let new_tat = tat.max(now_off).saturating_add(Self::cost_ns(p.token_ns, cost));
        let excess = new_tat - now_off;
        if excess <= p.tolerance_ns {
            return Verdict::Take(new_tat);
        }
        let wait = excess - p.tolerance_ns;
        let retry = if now_ns.saturating_add(wait) < p.expires_at_ns { Some(wait) } else { None };
        Verdict::Deny(Decision::Denied { reason: DenyReason::Empty, retry_after_ns: retry })
    }

    /// How long until `cost` tokens could be taken (0 = now); `None` when not under this lease.
    pub fn retry_after(&self, cost: u32, now_ns: u64) -> Result<Option<u64>, BucketError> {
        let current = self.state.load(Ordering::Acquire);
        let p = self.read_slot(current >> GEN_SHIFT);
        match Self::decide(&p, current & OFFSET_MASK, cost, cost as u64 * MILLI, now_ns) {
            Verdict::Take(_) => Ok(Some(0)),
            Verdict::Deny(Decision::Denied { retry_after_ns, .. }) => Ok(retry_after_ns),
            Verdict::Deny(Decision::Granted) => Ok(Some(0)),
            Verdict::Never(e) => Err(e),
        }
    }

    fn balance_milli(p: &Params, tat: u64, now_ns: u64) -> u64 {
        if p.rate_milli_per_s == 0 || now_ns >= p.expires_at_ns {
            return 0;
        }
        let now_off = now_ns.saturating_sub(p.origin_ns);
        let debt_ns = tat.saturating_sub(now_off);
        let free_ns = p.tolerance_ns.saturating_sub(debt_ns);
        ((free_ns as u128 * MILLI as u128) / p.token_ns.max(1) as u128).min(p.capacity_milli as u128) as u64
    }

    /// The lease in force and the balance at `now_ns`.
    pub fn view(&self, now_ns: u64) -> BucketView {
        let current = self.state.load(Ordering::Acquire);
        let p = self.read_slot(current >> GEN_SHIFT);
        let slice_reserve_milli = slices::reserve_milli(p.slice_tokens, self.slices.len());
        BucketView {
            quota: Quota::new(p.rate_milli_per_s, p.capacity_milli + slice_reserve_milli),
            expires_at_ns: p.expires_at_ns,
            balance_milli: Self::balance_milli(&p, current & OFFSET_MASK, now_ns),
            slice_reserve_milli,
        }
    }

    /// Apply a (new or renewed) lease at `now_ns`, valid until `expires_at_ns` (same clock).
    /// Keeps the balance if the previous lease is still valid, else starts from zero.
    pub fn apply_lease(&self, quota: Quota, expires_at_ns: u64, now_ns: u64) -> Result<(), LeaseParamsError> {
        // Slices hold at most `reserve` between them: the bucket itself gets the rest.
        let slice_tokens = slices::slice_tokens(quota, self.slices.len());
        let capacity_milli = quota.burst_milli - slices::reserve_milli(slice_tokens, self.slices.len());
        // ns per token = 10^12 / rate_milli, rounded up so the bucket is never faster than leased.
        let token_ns =
            if quota.rate_milli_per_s == 0 { 0 } else { 1_000_000_000_000u64.div_ceil(quota.rate_milli_per_s) };
        let tolerance_ns = ((capacity_milli as u128 * token_ns as u128) / MILLI as u128) as u64;
        let span = expires_at_ns.saturating_sub(now_ns);
        if tolerance_ns.saturating_add(span) >= MAX_SPAN_NS {
            return Err(LeaseParamsError(format!(
                "burst/rate ({quota}) and lease length {span} ns do not fit the 2^47 ns range"
            )));
        }
        let mut chains = self.renew.lock().unwrap_or_else(|p| p.into_inner());
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let generation = current >> GEN_SHIFT;
            let old = self.read_slot(generation);
            let balance = Self::balance_milli(&old, current & OFFSET_MASK, now_ns).min(capacity_milli);
            let debt_milli = capacity_milli - balance;
            // The chain goes on when the balance is kept (the previous lease is valid), this is a
            // lease, and slices do not shrink: stock above a smaller size must never come back
            // when the size grows again (the bucket may have refilled over it meanwhile).
            let continues = old.rate_milli_per_s != 0
                && now_ns < old.expires_at_ns
                && quota.rate_milli_per_s != 0
                && slice_tokens >= old.slice_tokens;
            let chain = if continues { old.chain } else { *chains + 1 };
            let next_gen = (generation + 1) & 0xFFFF;
            let slot = &self.slots[(next_gen & 1) as usize];
            slot.origin_ns.store(now_ns, Ordering::Release);
            slot.token_ns.store(token_ns, Ordering::Release);
            slot.tolerance_ns.store(tolerance_ns, Ordering::Release);
            slot.capacity_milli.store(capacity_milli, Ordering::Release);
            slot.rate_milli_per_s.store(quota.rate_milli_per_s, Ordering::Release);
            // A zero-rate lease admits nothing: stored as "no lease" so the fast path never sees
            // a zero emission interval.
            let expiry = if quota.rate_milli_per_s == 0 { 0 } else { expires_at_ns };
            slot.expires_at_ns.store(expiry, Ordering::Release);
            slot.chain.store(chain, Ordering::Release);
            slot.slice_tokens.store(slice_tokens, Ordering::Release);
            // TAT so that (tolerance - (tat - now)) / interval == balance; rounded up (less balance).
            let debt_ns = (debt_milli as u128 * token_ns as u128).div_ceil(MILLI as u128) as u64;
            let tat = debt_ns.min(tolerance_ns);
            let next = (next_gen << GEN_SHIFT) | tat;
            match self.state.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    *chains = chains.max(chain);
                    return Ok(());
                }
                Err(seen) => current = seen,
            }
        }
    }

    /// Drop the lease at once (drain, or the holder learned it must stop): zero balance.
    pub fn revoke(&self) {
        let _ = self.apply_lease(Quota::ZERO, 0, 0);
    }
}

enum Verdict {
    Take(u64),
    Deny(Decision),
    Never(BucketError),
}

pub mod slices;

#[cfg(test)]
mod tests;
