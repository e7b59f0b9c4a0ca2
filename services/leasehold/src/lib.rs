//! The commands of the production `leasehold` binary: the services themselves and the operator's
//! `inspect` and `limits`. The lab binary (`leasehold-lab`, tools/lab) runs the same commands and adds the
//! development tools (simulator, demo, chaos, benches, the mock upstream), which do not ship.

pub mod auth_cmd;
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
    /// The production topology's credentials (NATS JWTs): `setup` (the operator step: keys,
    /// resolver.conf, the roles' credentials), `issue` (one pod's credential) and `revoke`.
    Auth(auth_cmd::AuthArgs),
}

/// `cli`'s command line (a program whose subcommands include [`ServiceCommand`]'s), each
/// service's `--help` ending with its settings and their defaults; usage errors exit 2.
pub fn parse_with_settings_help<C: clap::Parser>() -> C {
    type SettingsHelp = fn() -> String;
    let services: [(&str, SettingsHelp); 4] = [
        ("coordinator", leasehold_coordinator::settings::settings_help),
        ("dc-manager", leasehold_dc_manager::settings::settings_help),
        ("agent", leasehold_pod::settings::PodSettings::help),
        ("keys", leasehold_keys::settings::KeysSettings::help),
    ];
    let mut command = C::command();
    for (name, help) in services {
        command = command.mut_subcommand(name, |c| c.after_help(help()));
    }
    let matches = command.get_matches();
    C::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
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
        ServiceCommand::Auth(a) => exit(program, auth_cmd::run(a)),
    }
}

/// The exit code of a command's result: its own on success; on failure the cause as one line
/// on stderr, prefixed with `program`, and 2.
pub fn exit<E: std::fmt::Display>(program: &str, result: Result<ExitCode, E>) -> ExitCode {
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
pub fn block_on<T, E: From<RuntimeError>>(body: impl std::future::Future<Output = Result<T, E>>) -> Result<T, E> {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(RuntimeError)?;
    rt.block_on(body)
}

/// A command's failure, printed as one line ([`exit`]).
pub type CommandError = Box<dyn std::error::Error + Send + Sync>;

/// The runtime every command uses could not start.
#[derive(Debug)]
pub struct RuntimeError(pub std::io::Error);

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot start the runtime: {}", self.0)
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// For the lab's commands, whose failures are still text.
impl From<RuntimeError> for String {
    fn from(e: RuntimeError) -> String {
        e.to_string()
    }
}

/// Where an operator's command connects: `--nats-url` (default: `$LEASEHOLD_NATS_URL`, else
/// the local default) as the user of `--nats-creds-file` (default: `$LEASEHOLD_NATS_CREDS_FILE`;
/// none: the URL's user and password, if any).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct NatsArgs {
    /// NATS server (default: $LEASEHOLD_NATS_URL, else nats://127.0.0.1:4222). Credentials may
    /// be given in the URL; they are never printed.
    #[arg(long, global = true)]
    nats_url: Option<String>,
    /// Connect as the user of this .creds file (`leasehold auth`; default:
    /// $LEASEHOLD_NATS_CREDS_FILE).
    #[arg(long, global = true)]
    nats_creds_file: Option<std::path::PathBuf>,
}

impl NatsArgs {
    pub fn url(&self) -> String {
        nats_url_or_default(self.nats_url.clone())
    }

    pub fn creds_file(&self) -> Option<std::path::PathBuf> {
        self.nats_creds_file.clone().or_else(|| std::env::var_os("LEASEHOLD_NATS_CREDS_FILE").map(Into::into))
    }

    /// The credentials file, if any, is readable and one (a bad setting: exit 2).
    pub fn check(&self) -> Result<(), leasehold_process::SettingsError> {
        let creds = self.creds_file();
        leasehold_process::check_creds_file(creds.as_deref())
    }

    /// A client named `name`.
    pub async fn connect(&self, name: &str) -> Result<async_nats::Client, leasehold_nats::connect::ConnectError> {
        let creds = self.creds_file();
        leasehold_nats::connect::connect_with_creds(&self.url(), creds.as_deref(), name).await
    }
}

/// The NATS server a command talks to: `arg` (its `--nats-url`), else `$LEASEHOLD_NATS_URL`,
/// else the local default.
pub fn nats_url_or_default(arg: Option<String>) -> String {
    arg.or_else(|| std::env::var("LEASEHOLD_NATS_URL").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into())
}
