//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module is one
//! former test file; `cargo nextest` still runs every test in its own process.

mod agent;
#[cfg(feature = "envoy")]
mod agent_process;
#[cfg(feature = "envoy")]
mod envoy_per_key;
#[cfg(feature = "envoy")]
mod envoy_rlqs;
#[cfg(feature = "envoy")]
mod envoy_rls;
#[cfg(feature = "envoy")]
mod envoy_two_dcs;
mod many_limits;
