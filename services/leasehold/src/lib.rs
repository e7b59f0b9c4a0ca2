//! The commands of the production `leasehold` binary: the services themselves and the operator's
//! `inspect` and `limits`. The lab binary (`leasehold-lab`, tools/lab) runs the same commands and adds the
//! development tools (simulator, demo, chaos, benches, the mock upstream), which do not ship.

pub mod dashboard;
pub mod inspect;
pub mod keys_cmd;
pub mod limits_cmd;

use clap::Subcommand;
use leasehold_process::ConfigArgs;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum ServiceCommand {
    /// Print the live state from NATS: the coordinator leader and every limit's DC leases.
    Inspect(inspect::InspectArgs),
    /// Serve the live web view of the leases (read-only; `--listen`, default 127.0.0.1:8089).
    Dashboard(dashboard::DashboardArgs),
    /// Run a coordinator replica (settings: LEASEHOLD_COORDINATOR_*).
    Coordinator(ConfigArgs),
    /// Run a DC manager replica (settings: LEASEHOLD_DC_MANAGER_*).
    DcManager(ConfigArgs),
    /// Run a pod agent serving permits over local HTTP (settings: LEASEHOLD_AGENT_*).
    Agent(ConfigArgs),
    /// Run the per-key limiter (per user / tenant tier) over HTTP and NATS request/reply
    /// (settings: LEASEHOLD_KEYS_*, or flags).
    Keys(Box<keys_cmd::KeysArgs>),
    /// Read and write the limits' definitions in KV (`lh_limits`), in human units: `put`, `get`,
    /// `ls`, `rm` (NATS: --nats-url or LEASEHOLD_NATS_URL).
    Limits(limits_cmd::LimitsArgs),
}

/// Runs `command`; a failure is one line on stderr prefixed with `program`, and exit code 2 for
/// bad settings or arguments (the services choose their own codes).
pub fn run(program: &str, command: ServiceCommand) -> ExitCode {
    match command {
        ServiceCommand::Inspect(args) => exit(program, inspect::run(args)),
        ServiceCommand::Dashboard(args) => exit(program, dashboard::run(args)),
        ServiceCommand::Coordinator(c) => leasehold_coordinator::main(c),
        ServiceCommand::DcManager(c) => leasehold_dc_manager::main(c),
        ServiceCommand::Agent(c) => leasehold_pod::agent_main(c),
        ServiceCommand::Keys(a) => keys_cmd::run(*a),
        ServiceCommand::Limits(a) => limits_cmd::run(program, a),
    }
}

/// The exit code of a command's result: its own on success; on failure the cause as one line
/// on stderr, prefixed with `program`, and 2.
pub fn exit(program: &str, result: Result<ExitCode, String>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Run a command's async body on the runtime every command uses (2 worker threads, the
/// machine's size).
pub fn block_on<T>(body: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(body)
}

/// The NATS server a command talks to: `arg` (its `--nats-url`), else `$LEASEHOLD_NATS_URL`,
/// else the local default.
pub fn nats_url_or_default(arg: Option<String>) -> String {
    arg.or_else(|| std::env::var("LEASEHOLD_NATS_URL").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into())
}
