//! `leasehold bench …`: measurements that print one JSON line.

mod control_plane;

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum Bench {
    /// Control-plane cost: messages/s and KV writes/s per pod and per DC, and whether the DC
    /// manager keeps its renew period with many pods.
    ControlPlane(control_plane::Args),
}

pub fn run(b: Bench) -> Result<ExitCode, String> {
    match b {
        Bench::ControlPlane(a) => control_plane::run(a),
    }
}
