//! `leasehold-lab bench …`: measurements that print one JSON line.

mod control_plane;
pub mod cpu;
mod envoy;
mod envoy_floor;
mod envoy_load;
mod envoy_redis;
mod envoy_servers;
mod keys;
pub mod keys_load;
mod light_pods;
mod outage;
mod runtimes;

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum Bench {
    /// Control-plane cost: messages/s and KV writes/s per pod and per DC, and whether the DC
    /// manager keeps its renew period with many pods.
    ControlPlane(control_plane::Args),
    /// Per-key limits: Zipf load over HTTP against NATS-sharded owners and, in the same run,
    /// against one central Redis (sorted set + Lua); over-admissions counted by the bench.
    Keys(keys::Args),
    /// Envoy: the latency the rate limit adds per request through a real Envoy, with no limit,
    /// with RLS answered by the Leasehold agent, and with RLS answered from a central Redis.
    Envoy(envoy::Args),
    /// The control plane gone: what Leasehold admits with its nats-server, coordinator and DC
    /// managers killed under load, and what a central Redis design admits with Redis killed
    /// (failing open, then closed), against the bound R·1 s + B.
    Outage(outage::Args),
    /// `bench envoy`'s Redis baseline: RLS deciding in Redis, a process of its own.
    #[command(hide = true)]
    EnvoyRedisRls(envoy_redis::ServeArgs),
    /// `bench envoy`'s floor: RLS answering every call OK, deciding nothing, a process of its own.
    #[command(hide = true)]
    EnvoyFloorRls(envoy_floor::ServeArgs),
}

pub fn run(b: Bench) -> Result<ExitCode, String> {
    match b {
        Bench::ControlPlane(a) => control_plane::run(a),
        Bench::Keys(a) => keys::run(a),
        Bench::Envoy(a) => envoy::run(a),
        Bench::Outage(a) => outage::run(a),
        Bench::EnvoyRedisRls(a) => envoy_redis::serve(a),
        Bench::EnvoyFloorRls(a) => envoy_floor::serve(a),
    }
}

/// The items in a protocol batch, 0 for anything else. Every item names its limit once
/// (`"limit":`, which no envelope has and no id can contain), so this counts without parsing:
/// the control-plane bench's monitor reads every message on `lh.>`, and parsing each into a
/// JSON tree took a core of its own at 1,000 limits × 200 pods (30 MB/s), starving the
/// services it measures.
pub fn batch_items(payload: &[u8]) -> u64 {
    memchr::memmem::find_iter(payload, b"\"limit\":").count() as u64
}

/// `x` to the thousandth, as the benches print their numbers.
pub(crate) fn round_3(x: f64) -> f64 {
    (x * 1_000.0).round() / 1_000.0
}
