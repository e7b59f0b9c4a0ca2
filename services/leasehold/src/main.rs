//! `leasehold`: the operator CLI.

mod inspect;
mod simulate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "leasehold", version, about = "Global rate limits, held by lease.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the deterministic simulator (virtual time, seeded faults, strict upstream).
    Simulate(simulate::SimulateArgs),
    /// Print the live state from NATS: the coordinator leader and every limit's DC leases.
    Inspect(inspect::InspectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::from(2)
        }
    }
}
