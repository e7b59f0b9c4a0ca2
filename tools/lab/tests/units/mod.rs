//! The lab's unit tests (pure parts of the chaos harness, the demo and the benchmarks). They live
//! here, against the lab's library, rather than in `#[cfg(test)]` modules: a unit-test harness
//! would compile the whole lab crate a second time in every test build (48 s on 2 cores).

mod bench_batch_items;
mod bench_cpu;
mod bench_keys_load;
mod chaos_adversary;
mod chaos_judge;
mod chaos_report;
mod chaos_schedule;
mod demo_limits;
mod demo_lowering;
mod demo_observe;
