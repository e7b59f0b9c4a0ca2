//! # Leasehold's NATS plumbing
//!
//! ## Layout
//! * [`auth`]: the production topology's credentials (NATS JWTs from `nats/prod/roles.toml`:
//!   one scoped signing key per role, one credential per pod).
//! * [`connect`]: connection defaults for control-plane traffic (short timeouts, fast dead-peer
//!   detection) and a JetStream context with a short ack timeout.
//! * [`kv`]: KV buckets created by hand (works on nats-server 2.9.10, where async-nats'
//!   `create_key_value` fails) and compare-and-set with an explicit "outcome unknown".
//! * [`leader_key`]: drives the core's leadership state machine against its KV key.
//! * [`ledger`]: reads the `lh_ledger` bucket's groups of limits' records.
//! * [`limits_store`]: the `lh_limits` bucket of limit definitions (list, get, put and remove
//!   by compare-and-set, seed).
//! * [`watch`]: watches of a bucket that are opened again as soon as the client reconnects.
//!
//! What every service process does the same way (settings, signals, exit codes, the lease
//! clock) is `leasehold-process`; real nats-server processes for tests and the lab are
//! `leasehold-nats-harness` (tools/).

pub mod auth;
pub mod connect;
pub mod kv;
pub mod leader_key;
pub mod ledger;
pub mod limits_store;
pub mod watch;
