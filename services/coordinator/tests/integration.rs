//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module is one
//! former test file; `cargo nextest` still runs every test in its own process.

mod election;
mod fence_ttl;
mod ledger_groups;
mod limits_live;
mod outage;
