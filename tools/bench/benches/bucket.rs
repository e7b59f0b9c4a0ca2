//! `try_acquire` against the `governor` crate's `check()`, measured in the same run.
//!
//! Both read the same kind of fake clock (an atomic counter advanced once per decision: ours takes
//! `now` as a parameter, governor reads its `FakeRelativeClock`), so the numbers compare the
//! decision itself. Each iteration advances time by one emission interval so both limiters
//! keep admitting (the common, non-denied path). A second group runs 2 contending threads on the
//! real monotonic clock. The baseline always runs first.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::{FakeRelativeClock, MonotonicClock};
use governor::{Quota as GQuota, RateLimiter};
use leasehold_shared::bucket::TokenBucket;
use leasehold_shared::quota::Quota;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RATE: u32 = 1_000_000; // one token per µs
const STEP_NS: u64 = 1_000;

fn ours() -> TokenBucket {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(RATE as u64, 1_000), 1 << 46, 0).unwrap();
    b
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("try_acquire/1-thread");
    g.throughput(Throughput::Elements(1));
    // Identical loop shapes for both: advance a shared fake clock, decide, keep the result.
    // The baseline runs first, so any warm-up drift favours it, not us.
    let clock = FakeRelativeClock::default();
    let lim = RateLimiter::direct_with_clock(
        GQuota::per_second(NonZeroU32::new(RATE).unwrap()).allow_burst(NonZeroU32::new(1_000).unwrap()),
        clock.clone(),
    );
    g.bench_function(BenchmarkId::new("governor", "granted"), |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                clock.advance(Duration::from_nanos(STEP_NS));
                black_box(lim.check().is_ok());
            }
            start.elapsed()
        })
    });
    let b = ours();
    let now = AtomicU64::new(1_000_000_000);
    g.bench_function(BenchmarkId::new("leasehold", "granted"), |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let t = now.fetch_add(STEP_NS, Ordering::Relaxed);
                black_box(b.try_acquire(black_box(1), t).is_ok_and(|d| d.is_granted()));
            }
            start.elapsed()
        })
    });
    g.finish();
}

/// Two threads hammer one limiter. Each reads the real monotonic clock (no shared fake clock
/// to fight over), at a rate high enough that every request is granted: the only contended
/// memory is the limiter's own state.
fn contended(c: &mut Criterion) {
    const FAST: u32 = 1_000_000_000;
    let mut g = c.benchmark_group("try_acquire/2-threads");
    g.throughput(Throughput::Elements(2));
    let lim = Arc::new(RateLimiter::direct_with_clock(
        GQuota::per_second(NonZeroU32::new(FAST).unwrap()).allow_burst(NonZeroU32::new(1_000_000).unwrap()),
        MonotonicClock,
    ));
    g.bench_function(BenchmarkId::new("governor", "contended"), |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    let lim = lim.clone();
                    s.spawn(move || {
                        for _ in 0..iters {
                            black_box(lim.check().is_ok());
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    let b = Arc::new(TokenBucket::new());
    let origin = Instant::now();
    b.apply_lease(Quota::per_s(FAST as u64, 1_000_000), 1 << 46, 0).unwrap();
    g.bench_function(BenchmarkId::new("leasehold", "contended"), |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    let b = b.clone();
                    s.spawn(move || {
                        for _ in 0..iters {
                            let now = origin.elapsed().as_nanos() as u64;
                            black_box(b.try_acquire(black_box(1), now).is_ok_and(|d| d.is_granted()));
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, single_thread, contended);
criterion_main!(benches);
