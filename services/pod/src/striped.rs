//! [`RequestCounts`]: the request path's counters (requests offered, admitted, rejected), bumped
//! without a shared write between threads.
//!
//! One stripe per thread, each on its own 128-byte line (two lines: adjacent-line prefetchers
//! pull pairs). A thread that counts takes a stripe of its own while one of [`OWNED`] is free,
//! and gives it back when it exits: only its owner writes a stripe, so an add is a plain load
//! and store, no read-modify-write. The next owner starts from the count the last one left (the
//! hand-over goes through a mutex, so it sees every add). Threads beyond `OWNED` alive at once
//! share one more stripe and add with `fetch_add`. Readers (the report, once per period) sum
//! every stripe; each stripe only grows, so a sum never goes back.
//!
//! The same numbering gives each thread its slice of a limit's bucket
//! ([`leasehold_core::bucket::slices`]): [`thread_slot`] is a slot no other live thread holds.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Threads with a stripe of their own; the rest share one more. At most 31: `Default` for the
/// array of stripes exists up to 32 elements.
const OWNED: usize = 31;

/// Slices a pod's bucket has: one per thread with a stripe of its own.
pub const SLICE_SLOTS: usize = OWNED;

/// This thread's slot, held by no other live thread (`None`: it shares the last stripe, or is
/// exiting). Spending a bucket's slice through it keeps the slices' contract: never two calls
/// on one slot at once.
#[inline]
pub(crate) fn thread_slot() -> Option<usize> {
    STRIPE.try_with(|s| s.0).ok().filter(|&i| i < OWNED)
}

/// One thread's counters; each stripe sits in a `CachePadded` line of its own.
#[derive(Default)]
struct Stripe {
    /// Requests granted at once by `try_acquire`: offered and admitted in one count, so the
    /// granted path writes one counter.
    granted_now: AtomicU64,
    /// Every other request, counted when offered.
    offered_other: AtomicU64,
    /// Those of them admitted (at once or after a wait).
    admitted_other: AtomicU64,
    /// Those of them denied (by the bucket, a full queue or a deadline).
    rejected: AtomicU64,
}

#[derive(Default)]
pub(crate) struct RequestCounts {
    stripes: [CachePadded<Stripe>; OWNED + 1],
}

/// Stripes no live thread owns, and how many were ever handed out.
static FREE_STRIPES: Mutex<(Vec<usize>, usize)> = Mutex::new((Vec::new(), 0));

/// A thread's stripe, the same in every limiter (`OWNED`: the shared one), given back on exit.
struct StripeSlot(usize);

impl StripeSlot {
    fn take() -> StripeSlot {
        let mut free = FREE_STRIPES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = free.0.pop() {
            return StripeSlot(i);
        }
        if free.1 < OWNED {
            free.1 += 1;
            return StripeSlot(free.1 - 1);
        }
        StripeSlot(OWNED)
    }
}

impl Drop for StripeSlot {
    fn drop(&mut self) {
        if self.0 < OWNED {
            FREE_STRIPES.lock().unwrap_or_else(|p| p.into_inner()).0.push(self.0);
        }
    }
}

thread_local! {
    static STRIPE: StripeSlot = StripeSlot::take();
}

impl RequestCounts {
    /// This thread's stripe, and whether it owns it. A thread exiting (its slot already given
    /// back) counts on the shared stripe.
    #[inline]
    fn stripe(&self) -> (&Stripe, bool) {
        let i = STRIPE.try_with(|s| s.0).unwrap_or(OWNED);
        (&self.stripes[i], i < OWNED)
    }

    #[inline]
    fn add(counter: &AtomicU64, owned: bool) {
        if owned {
            // Only this thread ever writes this stripe: no other write can come in between.
            counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
        } else {
            counter.fetch_add(1, Relaxed);
        }
    }

    /// A request offered (counted before its outcome is known).
    pub(crate) fn offered(&self) {
        let (s, owned) = self.stripe();
        Self::add(&s.offered_other, owned);
    }

    /// A request counted by [`offered`](Self::offered) was admitted.
    pub(crate) fn admitted(&self) {
        let (s, owned) = self.stripe();
        Self::add(&s.admitted_other, owned);
    }

    /// A request counted by [`offered`](Self::offered) was denied.
    pub(crate) fn rejected(&self) {
        let (s, owned) = self.stripe();
        Self::add(&s.rejected, owned);
    }

    /// A request offered and admitted at once (the granted path of `try_acquire`): one counter.
    pub(crate) fn granted_now(&self) {
        let (s, owned) = self.stripe();
        Self::add(&s.granted_now, owned);
    }

    /// [`granted_now`](Self::granted_now) by the thread holding `slot` (from [`thread_slot`]).
    #[inline]
    pub(crate) fn granted_now_in(&self, slot: usize) {
        Self::add(&self.stripes[slot].granted_now, true);
    }

    /// Requests decided elsewhere (by Envoy, on a lent lease), counted at once on the shared stripe.
    pub(crate) fn decided_elsewhere(&self, admitted: u64, rejected: u64) {
        let s = &self.stripes[OWNED];
        s.offered_other.fetch_add(admitted.wrapping_add(rejected), Relaxed);
        s.admitted_other.fetch_add(admitted, Relaxed);
        s.rejected.fetch_add(rejected, Relaxed);
    }

    fn total(&self, counter: impl Fn(&Stripe) -> &AtomicU64) -> u64 {
        self.stripes.iter().map(|s| counter(s).load(Relaxed)).fold(0, u64::wrapping_add)
    }

    pub(crate) fn offered_total(&self) -> u64 {
        self.total(|s| &s.granted_now).wrapping_add(self.total(|s| &s.offered_other))
    }

    pub(crate) fn admitted_total(&self) -> u64 {
        self.total(|s| &s.granted_now).wrapping_add(self.total(|s| &s.admitted_other))
    }

    pub(crate) fn rejected_total(&self) -> u64 {
        self.total(|s| &s.rejected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_more_threads_than_stripes_are_exact() {
        let c = RequestCounts::default();
        let threads = OWNED as u64 + 9;
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        c.offered();
                        c.admitted();
                        c.granted_now();
                        c.rejected();
                    }
                });
            }
        });
        assert_eq!(c.offered_total(), threads * 20_000, "owned stripes and the shared one both count exactly");
        assert_eq!(c.admitted_total(), threads * 20_000);
        assert_eq!(c.rejected_total(), threads * 10_000);
    }

    #[test]
    fn threads_that_come_and_go_keep_owned_stripes_and_lose_no_count() {
        let c = RequestCounts::default();
        for _ in 0..(3 * OWNED) {
            std::thread::scope(|s| {
                s.spawn(|| (0..1_000).for_each(|_| c.offered()));
            });
        }
        assert_eq!(c.offered_total(), 3 * OWNED as u64 * 1_000);
        let on_shared = c.stripes[OWNED].offered_other.load(Relaxed);
        assert!(on_shared < 3 * OWNED as u64 * 1_000, "exited threads' stripes are reused, not exhausted");
    }

    /// Two lines per stripe on the machines it runs on (adjacent-line prefetchers pull pairs).
    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn stripes_do_not_share_a_cache_line() {
        assert_eq!(std::mem::size_of::<CachePadded<Stripe>>(), 128);
        assert_eq!(std::mem::align_of::<RequestCounts>(), 128);
    }
}
