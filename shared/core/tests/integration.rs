//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module is one
//! former test file; `cargo nextest` still runs every test in its own process.

mod adaptive_limits;
mod audit_holes;
mod batches;
mod carried_claim;
mod conservation_props;
mod dc_manager_adversary;
mod dropped_dc_lost_floor;
mod dropped_reports;
mod eighth_review;
mod fourth_review;
mod join_batching;
mod lifecycle;
mod limits_def;
mod live_reconfiguration;
mod lost_record;
mod protocol_doc;
mod reconfiguration;
mod reconfiguration_holes;
mod seventh_review;
mod shipped_sizing;
mod storm_seeds;
mod support;
mod tenth_review;
mod term_records;
mod third_review;
mod whole_tokens;
mod wire;
