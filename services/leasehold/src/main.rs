//! `leasehold`: the operator CLI, and every service as a subcommand (one binary to ship).

mod bench;
mod chaos;
mod demo;
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

#[derive(clap::Args)]
struct ConfigArg {
    /// TOML settings file (every setting can also come from the environment).
    #[arg(long)]
    config: Option<String>,
}

impl ConfigArg {
    fn args(self) -> Vec<String> {
        self.config.map(|c| vec!["--config".to_string(), c]).unwrap_or_default()
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run the deterministic simulator (virtual time, seeded faults, strict upstream).
    Simulate(simulate::SimulateArgs),
    /// Print the live state from NATS: the coordinator leader and every limit's DC leases.
    Inspect(inspect::InspectArgs),
    /// Run the whole system as processes on this machine with diurnal load; print a summary.
    Demo(demo::DemoArgs),
    /// Inject seeded faults into the real system on a production-shaped NATS topology; judge
    /// safety by the upstream's counters and recovery by the per-second throughput.
    Chaos(chaos::ChaosArgs),
    /// Measurements: `bench control-plane`, `bench keys`.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Run a coordinator replica (settings: LEASEHOLD_COORDINATOR_*).
    Coordinator(ConfigArg),
    /// Run a DC manager replica (settings: LEASEHOLD_DC_MANAGER_*).
    DcManager(ConfigArg),
    /// Run a pod agent serving permits over local HTTP (settings: LEASEHOLD_AGENT_*).
    Agent(ConfigArg),
    /// Run the strict mock upstream (a hard limit in a sliding window).
    Upstream(UpstreamArgs),
    /// Run the per-key limiter (per user / tenant tier) over HTTP and NATS request/reply.
    Keys(keys_cmd::KeysArgs),
}

mod keys_cmd;

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
    block_on(async move {
        leasehold_aggregator::serve(&a.listen, a.limit, a.window_ms)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| format!("upstream: {e}"))
    })
}

/// Run a command's async body on the runtime every command uses (2 worker threads, the
/// machine's size).
fn block_on<T>(body: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(body)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(b) => bench::run(b),
        Command::Chaos(args) => chaos::run(args),
        Command::Coordinator(c) => return leasehold_coordinator::main_with_args(c.args()),
        Command::DcManager(c) => return leasehold_dc_manager::main_with_args(c.args()),
        Command::Agent(c) => return leasehold_pod::agent_main(c.args()),
        Command::Upstream(a) => upstream(a),
        Command::Keys(a) => return keys_cmd::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::from(2)
        }
    }
}
