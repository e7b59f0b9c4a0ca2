//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module holds the
//! tests of one rule (or one part: the wire, the limits' definitions), named for it; the holes
//! each rule's tests catch are in docs/FINDINGS.md. `cargo nextest` still runs every test in its
//! own process.

mod ack_cover;
mod adaptive_limits;
mod batches;
mod conservation_props;
mod cut_off_floors;
mod dc_holder;
mod dc_lease_ends;
mod dc_lease_fallback;
mod dc_manager_adversary;
mod dropped_reports;
mod floor_confirmation;
mod floor_reports;
mod inherited_claims;
mod join_batching;
mod lifecycle;
mod limits_def;
mod live_reconfiguration;
mod lost_record_floors;
mod lost_record_wait;
mod one_acting_leader;
mod pod_incarnation;
mod protocol_doc;
mod rolled_back_records;
mod shipped_sizing;
mod succession;
mod support;
mod takeover_quiet_period;
mod whole_tokens;
mod wire;
