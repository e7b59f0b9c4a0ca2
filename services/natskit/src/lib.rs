//! # Leasehold's NATS plumbing
//!
//! ## Layout
//! * [`clock`]: the lease clock (counts time the machine spent suspended).
//! * [`connect`]: connection defaults for control-plane traffic (short timeouts, fast dead-peer
//!   detection) and a JetStream context with a short ack timeout.
//! * [`kv`]: KV buckets created by hand (works on nats-server 2.9.10, where async-nats'
//!   `create_key_value` fails) and compare-and-set with an explicit "outcome unknown".
//! * [`leader_key`]: drives the core's leadership state machine against its KV key.
//! * [`server`]: runs real `nats-server` processes on free loopback ports with temporary storage,
//!   for tests and the demo; stopped and cleaned up on drop.
//! * [`process`]: what every service process does the same way (config file, settings, runtime,
//!   signals, one-line errors and exit codes).

pub mod clock;
pub mod connect;
pub mod kv;
pub mod leader_key;
pub mod process;
pub mod server;
