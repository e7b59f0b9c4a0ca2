//! `leasehold`: every service as a subcommand (one binary to ship) and the operator's `inspect`.
//! The development tools are in `leasehold-lab` (tools/lab).

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: leasehold_process::Allocator = leasehold_process::Allocator;

#[derive(clap::Parser)]
#[command(name = "leasehold", version, about = "Global rate limits, held by lease.")]
struct Cli {
    #[command(subcommand)]
    command: leasehold::ServiceCommand,
}

fn main() -> ExitCode {
    leasehold_process::keep_freed_memory();
    leasehold::run("leasehold", leasehold::parse_with_settings_help::<Cli>().command)
}
