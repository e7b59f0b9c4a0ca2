//! The request path through the threads' slices of a pod's lease (`TokenBucket::with_slices`),
//! as `Limiter::try_acquire` takes it: exact counts, the lease's bound, revocation.

use crate::limiter::{Denial, Limiter};
use crate::SLICE_SLOTS;
use leasehold_core::bucket::TokenBucket;
use leasehold_core::quota::Quota;
use leasehold_process::clock::LeaseClock;
use std::sync::Arc;

const S: u64 = 1_000_000_000;

/// A limiter over a pod's sliced bucket, its lease applied now (starting empty) for a minute.
fn sliced(rate: u64, burst: u64) -> (Limiter, Arc<TokenBucket>, u64) {
    let bucket = Arc::new(TokenBucket::with_slices(SLICE_SLOTS));
    let l = Limiter::new(bucket.clone(), 4, LeaseClock::start());
    let start = l.now_ns();
    bucket.apply_lease(Quota::per_s(rate, burst), start + 60 * S, start).unwrap();
    (l, bucket, start)
}

/// Wait (bounded by `deadline_ns`) until the bucket holds more than any slice, then take one
/// with a call (calling meanwhile would spend each token as it comes).
fn take_a_slice(l: &Limiter, bucket: &TokenBucket, deadline_ns: u64) {
    while bucket.view(l.now_ns()).balance_milli < 2_048_000 {
        assert!(l.now_ns() < deadline_ns, "the bucket never held 2,048 tokens at 2,000,000/s");
        std::hint::spin_loop();
    }
    assert_eq!(l.try_acquire(1).unwrap(), Ok(()));
    assert!(bucket.slices_spendable(l.now_ns()) > 0, "the call took a slice");
}

#[test]
fn threads_spending_slices_are_counted_exactly_and_stay_within_the_lease() {
    let (rate, burst) = (2_000_000u64, 100_000u64);
    let (l, bucket, start) = sliced(rate, burst);
    assert!(bucket.view(start).slice_reserve_milli > 0, "a lease this fast is sliced");
    let (threads, calls) = (4u64, 300_000u64);
    let granted: u64 = std::thread::scope(|s| {
        let spawned: Vec<_> = (0..threads)
            .map(|_| s.spawn(|| (0..calls).filter(|_| l.try_acquire(1).unwrap().is_ok()).count() as u64))
            .collect();
        spawned.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let elapsed_ns = l.now_ns() - start;
    let counts = l.take_interval();
    assert_eq!(counts.offered, threads * calls, "every call counted once");
    assert_eq!(counts.admitted, granted, "every grant counted once, from a slice or the bucket");
    assert_eq!(counts.rejected, threads * calls - granted);
    let bound = rate as f64 * elapsed_ns as f64 / 1e9;
    assert!(granted as f64 <= bound + 1.0, "{granted} granted in {elapsed_ns} ns from an empty start: at most {bound}");
    assert!(granted > 0, "the lease admitted something");
}

#[test]
fn a_revoked_or_expired_lease_spends_nothing_from_a_slice() {
    let (l, bucket, _) = sliced(2_000_000, 100_000);
    take_a_slice(&l, &bucket, l.now_ns() + 10 * S);
    bucket.revoke();
    assert_eq!(l.try_acquire(1).unwrap(), Err(Denial::NoLease), "the slice's stock dies with the lease");
    // A lease that has expired: its slices spend nothing either, though one holds stock.
    let now = l.now_ns();
    let expiry = now + S / 5;
    bucket.apply_lease(Quota::per_s(2_000_000, 100_000), expiry, now).unwrap();
    take_a_slice(&l, &bucket, expiry);
    while l.now_ns() < expiry {
        std::hint::spin_loop();
    }
    assert_eq!(l.try_acquire(1).unwrap(), Err(Denial::NoLease));
}
