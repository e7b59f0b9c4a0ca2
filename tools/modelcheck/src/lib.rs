//! # An exhaustive model checker of Leasehold's sans-IO cores
//!
//! Explores, breadth-first, every interleaving of a small configuration (one limit, DCs with a
//! standby manager each, pods, a coordinator with a standby) under bounded faults: message loss,
//! duplication, reordering and delay, crashes, pauses, clock drift, a configuration change of the
//! coordinator and a rolling restart of a DC's managers that lowers their `pod_ttl_ms`.
//! The real cores from `leasehold-core` make every decision; the ground-truth invariant (what
//! live pods may spend sums to at most R and B) is checked in every state.
//!
//! * [`config`]: what is modelled and the fault budgets; [`config::BugSwitches`] are the negative controls.
//! * [`model`]: the only module that calls the limiter's cores; [`leaders`]: the driver of the
//!   shared `Leadership` core (coordinators and DC managers) against the KV's leader keys; a DC
//!   manager's key holds its `TermRecord`, which a successor term waits out.
//! * [`state`], [`world`], [`actions`]: the state, the driver, the moves.
//! * [`invariant`], [`fingerprint`], [`explore`], [`trace`]: checking, dedup, search, replay.
//!
//! The network is delay-bounded: the oldest deliverable message may always be delivered, time
//! may advance while at most `max_carry_over` messages are still in flight (they are delayed),
//! and moving a message behind the others (reordering), a loss or a duplicate spends a fault
//! budget, as do a slow answer to a leader's write and a write that times out.

pub mod actions;
pub mod config;
pub mod explore;
pub mod fingerprint;
pub mod invariant;
pub mod leaders;
pub mod model;
pub mod presets;
pub mod state;
pub mod trace;
pub mod world;
