//! The path users call, `Limiter::try_acquire`, against the `governor` crate's `check()` on its
//! default clock, measured in the same run, at 1 and 2 threads; and, labelled apart, the bare
//! bucket decision against governor's on the same fake clock.
//!
//! * `user_path/*`: what a service pays per call. Governor: `RateLimiter::direct(..).check()`
//!   (its default clock, quanta's TSC reading). Leasehold: `Limiter::try_acquire(1)` as the pod
//!   library hands it out (its `LeaseClock`, the skew arithmetic, the use counters, the bucket),
//!   and the bucket alone on the same `LeaseClock` reading. Both admit every call (a rate far
//!   above what the loop can reach), the common path. The 2-thread cases hammer one limiter from
//!   both threads: the only contended memory is the limiter's own.
//! * `bucket_only/1-thread`: the decision alone. Both read an atomic fake clock advanced once per
//!   decision (ours takes `now` as a parameter, governor reads its `FakeRelativeClock`).
//!
//! The baseline always runs first, so any warm-up drift favours it. `scripts/bench-bucket` runs
//! this 3 times and prints the ratios and their medians.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::clock::FakeRelativeClock;
use governor::{Quota as GQuota, RateLimiter};
use leasehold_core::bucket::TokenBucket;
use leasehold_core::quota::Quota;
use leasehold_pod::{Limiter, SLICE_SLOTS};
use leasehold_process::clock::LeaseClock;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RATE: u32 = 1_000_000; // one token per µs
const STEP_NS: u64 = 1_000;
/// Fast enough that no thread ever runs the bucket dry.
const FAST: u32 = 1_000_000_000;

fn bucket(rate: u32, burst: u64) -> Arc<TokenBucket> {
    lease(TokenBucket::new(), rate, burst)
}

fn lease(b: TokenBucket, rate: u32, burst: u64) -> Arc<TokenBucket> {
    b.apply_lease(Quota::per_s(rate as u64, burst), 1 << 46, 0).unwrap();
    Arc::new(b)
}

/// Run `call` `iters` times on each of `threads` threads at once; the elapsed wall time.
fn on_threads(threads: usize, iters: u64, call: &(impl Fn() + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..iters {
                    call();
                }
            });
        }
    });
    start.elapsed()
}

fn user_path(c: &mut Criterion, threads: usize) {
    let mut g = c.benchmark_group(format!("user_path/{threads}-thread"));
    g.throughput(Throughput::Elements(threads as u64));
    let gov = RateLimiter::direct(
        GQuota::per_second(NonZeroU32::new(FAST).unwrap()).allow_burst(NonZeroU32::new(1_000_000).unwrap()),
    );
    g.bench_function(BenchmarkId::new("governor", "check"), |bench| {
        bench.iter_custom(|iters| on_threads(threads, iters, &|| _ = black_box(gov.check().is_ok())))
    });
    let clock = LeaseClock::start();
    // As the pod makes them: a bucket with a slice per thread.
    let limiter = Limiter::new(lease(TokenBucket::with_slices(SLICE_SLOTS), FAST, 1_000_000), 16, clock);
    g.bench_function(BenchmarkId::new("leasehold", "limiter"), |bench| {
        bench.iter_custom(|iters| {
            on_threads(threads, iters, &|| _ = black_box(matches!(limiter.try_acquire(black_box(1)), Ok(Ok(())))))
        })
    });
    // The same limiter over one shared bucket (no slices): every grant a CAS on one word.
    let unsliced = Limiter::new(bucket(FAST, 1_000_000), 16, clock);
    g.bench_function(BenchmarkId::new("leasehold", "limiter-unsliced"), |bench| {
        bench.iter_custom(|iters| {
            on_threads(threads, iters, &|| _ = black_box(matches!(unsliced.try_acquire(black_box(1)), Ok(Ok(())))))
        })
    });
    let b = bucket(FAST, 1_000_000);
    g.bench_function(BenchmarkId::new("leasehold", "bucket"), |bench| {
        bench.iter_custom(|iters| {
            on_threads(threads, iters, &|| {
                _ = black_box(b.try_acquire(black_box(1), clock.now_ns()).is_ok_and(|d| d.is_granted()))
            })
        })
    });
    g.finish();
}

fn user_path_1(c: &mut Criterion) {
    eprintln!("lease clock source: {:?}", leasehold_process::tsc_clock::source());
    user_path(c, 1);
}

fn user_path_2(c: &mut Criterion) {
    user_path(c, 2);
}

fn bucket_only(c: &mut Criterion) {
    let mut g = c.benchmark_group("bucket_only/1-thread");
    g.throughput(Throughput::Elements(1));
    // Identical loop shapes for both: advance a shared fake clock, decide, keep the result.
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
    let b = bucket(RATE, 1_000);
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

criterion_group!(benches, user_path_1, user_path_2, bucket_only);
criterion_main!(benches);
