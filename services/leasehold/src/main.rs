//! `leasehold`: the operator CLI, and every service as a subcommand (one binary to ship).

mod bench;
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
    /// Measurements: `bench control-plane`.
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
    Keys(KeysArgs),
}

#[derive(clap::Args)]
struct KeysArgs {
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: String,
    /// Also answer `lh.keys.check.<shard>` requests on this NATS server.
    #[arg(long)]
    nats_url: Option<String>,
    /// Tiers and overrides as JSON (`{"default_tier": …, "tiers": {…}, "overrides": {…}}`);
    /// default: one tier "free", 20 per minute (seed 003).
    #[arg(long)]
    tiers: Option<std::path::PathBuf>,
    /// Keys tracked at most; new keys beyond are shed with 429.
    #[arg(long, default_value_t = 1_000_000)]
    max_keys: usize,
}

fn keys(a: KeysArgs) -> Result<ExitCode, String> {
    let tiers = match &a.tiers {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => leasehold_shared::keys::Tiers::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let nats = match &a.nats_url {
            Some(url) => {
                Some(leasehold_nats::connect::connect(url, "leasehold-keys").await.map_err(|e| e.to_string())?)
            }
            None => None,
        };
        leasehold_keys::serve(&a.listen, nats, tiers, a.max_keys).await
    })?;
    Ok(ExitCode::SUCCESS)
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

fn upstream(a: UpstreamArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold upstream: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(leasehold_aggregator::serve(&a.listen, a.limit, a.window_ms)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold upstream: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(b) => bench::run(b),
        Command::Coordinator(c) => return leasehold_coordinator::main_with_args(c.args()),
        Command::DcManager(c) => return leasehold_dc_manager::main_with_args(c.args()),
        Command::Agent(c) => return leasehold_pod::agent_main(c.args()),
        Command::Upstream(a) => return upstream(a),
        Command::Keys(a) => keys(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold: {e}");
            ExitCode::from(2)
        }
    }
}
