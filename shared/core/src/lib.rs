//! # Leasehold's lease core
//!
//! The safety rules, as pure, deterministic code shared by the services, the simulator and the
//! model checker: no I/O, no OS clock (every
//! time-dependent call takes `now_ns` from the caller's monotonic clock), randomness from a seed.
//!
//! ## Layout
//! * [`quota`]: exact rate/burst amounts in milli-units.
//! * [`expiry`]: clock-skew-safe lease lifetimes (the drift assumption is stated there).
//! * [`wire`]: every message and stored record, versioned JSON, panic-free decoding.
//! * [`bucket`]: the pod's lock-free token bucket.
//! * [`ewma`], [`allocator`]: demand smoothing and splitting a grant among children.
//! * [`bugs`]: switches that bring back the holes of docs/FINDINGS.md, for negative controls.
//! * [`leadership`]: leadership terms through a compare-and-set key, measured from send time.
//! * [`ledger`]: the conservation ledger — the safety property lives here.
//! * [`lease_intake`]: what a lease holder keeps (send log, version fence).
//! * [`pod`], [`dc_manager`], [`coordinator`]: the three layers as sans-I/O state machines.
//! * [`limits`]: limits as data: definitions in human units (`"976/s"`) for the `lh_limits` bucket.
//! * [`readiness`]: what each service's `/readyz` answers, and why.
//! * [`subjects`]: NATS subjects and KV buckets/keys.
//! * [`rng`]: seeded randomness.
//! * [`sorted_map`]: a map in key order with hashed lookups (the ledgers' holders, the pod views).

// Every public item documented: the core is the contract the services, simulator and model
// checker share (a package cannot add to `[workspace.lints]`, so the lint is switched on here).
#![warn(missing_docs)]

pub mod aimd;
pub mod allocator;
pub mod bucket;
pub mod bugs;
pub mod coordinator;
pub mod dc_manager;

pub mod ewma;
pub mod expiry;
pub mod lease_intake;

pub mod leadership;
pub mod ledger;
pub mod limits;
pub mod pod;
pub mod quiet_reports;
pub mod quota;
pub mod readiness;
pub mod rng;
pub mod setting;
pub mod sorted_map;
pub mod subjects;
pub mod wire;

pub use setting::InvalidSetting;
