//! [`RequestCounts`]: the request path's two counters (requests offered, requests admitted),
//! bumped without a shared write between threads.
//!
//! One stripe per thread, each on its own 128-byte line (two lines: adjacent-line prefetchers
//! pull pairs). A thread that counts takes a stripe of its own while one of [`OWNED`] is free,
//! and gives it back when it exits: only its owner writes a stripe, so an add is a plain load
//! and store, no read-modify-write. The next owner starts from the count the last one left (the
//! hand-over goes through a mutex, so it sees every add). Threads beyond `OWNED` alive at once
//! share one more stripe and add with `fetch_add`. Readers (the report, once per period) sum
//! every stripe; each stripe only grows, so a sum never goes back.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Threads with a stripe of their own; the rest share one more. At most 31: `Default` for the
/// array of stripes exists up to 32 elements.
const OWNED: usize = 31;

#[repr(align(128))]
#[derive(Default)]
struct Stripe {
    offered: AtomicU64,
    admitted: AtomicU64,
}

#[derive(Default)]
pub(crate) struct RequestCounts {
    stripes: [Stripe; OWNED + 1],
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
    fn bump(&self, counter: impl Fn(&Stripe) -> &AtomicU64) {
        // A thread exiting (its slot already given back) counts on the shared stripe.
        let i = STRIPE.try_with(|s| s.0).unwrap_or(OWNED);
        let c = counter(&self.stripes[i]);
        if i < OWNED {
            // Only this thread ever writes this stripe: no other write can come in between.
            c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
        } else {
            c.fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn offered(&self) {
        self.bump(|s| &s.offered);
    }

    pub(crate) fn admitted(&self) {
        self.bump(|s| &s.admitted);
    }

    pub(crate) fn offered_total(&self) -> u64 {
        self.stripes.iter().map(|s| s.offered.load(Relaxed)).fold(0, u64::wrapping_add)
    }

    pub(crate) fn admitted_total(&self) -> u64 {
        self.stripes.iter().map(|s| s.admitted.load(Relaxed)).fold(0, u64::wrapping_add)
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
                    }
                });
            }
        });
        assert_eq!(c.offered_total(), threads * 10_000, "owned stripes and the shared one both count exactly");
        assert_eq!(c.admitted_total(), threads * 10_000);
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
        let on_shared = c.stripes[OWNED].offered.load(Relaxed);
        assert!(on_shared < 3 * OWNED as u64 * 1_000, "exited threads' stripes are reused, not exhausted");
    }

    #[test]
    fn stripes_do_not_share_a_cache_line() {
        assert_eq!(std::mem::size_of::<Stripe>(), 128);
        assert_eq!(std::mem::align_of::<RequestCounts>(), 128);
    }
}
