//! # Real nats-server processes for tests and the lab
//!
//! * [`NatsServer`]: a `nats-server` on a free loopback port with JetStream on a fresh
//!   temporary directory; paused, killed, restarted on demand, stopped and removed on drop.
//!   [`binaries`] lists the servers to test against.
//! * [`prod_accounts`]: a server with the shipped accounts and permissions, and test passwords.
//! * [`wait`]: bounded waits tests share (a connection within a deadline, a watched status
//!   reaching a condition) that fail with what was last seen instead of hanging.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

pub mod prod_accounts;
mod server;
pub mod wait;

pub use server::{binaries, NatsServer, ServerError, START_TIMEOUT};
