//! `leasehold-lab`: the command line of the lab library (`src/lib.rs`), plus the production
//! commands of `leasehold`.

use leasehold_lab::{bench, chaos, demo, dev, simulate};

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: leasehold_process::Allocator = leasehold_process::Allocator;

#[derive(Parser)]
#[command(name = "leasehold-lab", version, about = "Leasehold's services plus its development tools.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the deterministic simulator (virtual time, seeded faults, strict upstream).
    Simulate(simulate::SimulateArgs),
    /// Run the whole system as processes on this machine with diurnal load; print a summary.
    Demo(demo::DemoArgs),
    /// Run a local one-DC stack to integrate a service against (NATS, coordinator, DC manager,
    /// agent, per-key limiter) until Ctrl-C; print its addresses.
    Dev(dev::DevArgs),
    /// Inject seeded faults into the real system on a production-shaped NATS topology; judge
    /// safety by the upstream's counters and recovery by the per-second throughput.
    Chaos(chaos::ChaosArgs),
    /// Measurements: `bench control-plane`, `bench keys`.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Run the strict mock upstream (a hard limit in a sliding window).
    Upstream(UpstreamArgs),
    #[command(flatten)]
    Service(leasehold::ServiceCommand),
}

#[derive(clap::Args)]
struct UpstreamArgs {
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Calls allowed in any window.
    #[arg(long, default_value_t = 1_000)]
    limit: u64,
    #[arg(long, default_value_t = 1_000)]
    window_ms: u64,
}

fn upstream(a: UpstreamArgs) -> Result<ExitCode, String> {
    leasehold::block_on(async move {
        leasehold_mock_upstream::serve(&a.listen, a.limit, a.window_ms)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| format!("upstream: {e}"))
    })
}

fn main() -> ExitCode {
    leasehold_process::keep_freed_memory();
    const PROGRAM: &str = "leasehold-lab";
    let result = match leasehold::parse_with_settings_help::<Cli>().command {
        Command::Simulate(args) => simulate::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Bench(b) => bench::run(b),
        Command::Upstream(a) => upstream(a),
        Command::Service(command) => return leasehold::run(PROGRAM, command),
    };
    leasehold::exit(PROGRAM, result)
}
