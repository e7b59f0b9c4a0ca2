//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module is one
//! former test file; `cargo nextest` still runs every test in its own process.

mod cli;
mod dashboard;
mod inspect;
mod keys_clocks;
mod keys_cluster;
mod keys_handover;
mod keys_permissions;
mod limits_cli;
mod metrics;
mod readyz;
mod support;
