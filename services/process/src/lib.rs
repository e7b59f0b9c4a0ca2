//! What every Leasehold service process does the same way: read `[--config FILE]` ([`ConfigArgs`],
//! clap), load settings
//! (defaults → TOML file → environment), start logging and a 2-thread runtime, stop on
//! SIGTERM/SIGINT, and turn failures into one line on stderr and an exit code (2: bad
//! configuration or arguments, 1: failure while running).
//!
//! [`clock`] is the lease clock every service judges leases and terms by (it counts time the
//! machine spent suspended), read through the TSC where the kernel keeps time on it
//! ([`tsc_clock`]). [`metrics`] serves `GET /metrics` from a Prometheus registry;
//! [`problem`] writes `application/problem+json` answers.

pub mod allocator;
pub mod clock;
pub mod health;
mod kernel_clock;
pub mod metrics;
pub mod problem;
pub mod settings;
pub mod tsc_clock;

/// The allocator every Leasehold binary declares (`#[global_allocator] static ALLOCATOR:
/// leasehold_process::Allocator = leasehold_process::Allocator;` in its `main.rs`, then
/// [`keep_freed_memory`] first thing in `main`; a library must not choose it for the application
/// that embeds it). See [`allocator`].
pub use allocator::{keep_freed_memory, Allocator};
pub use settings::{load_settings, load_settings_with_flags, settings_help, SettingsError};

use std::future::Future;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::sync::watch;

/// `[--config FILE]`: the command-line arguments of every service command.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ConfigArgs {
    /// TOML settings file (every setting can also come from the environment).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(clap::Parser)]
struct ServiceCli {
    #[command(flatten)]
    config: ConfigArgs,
}

impl ConfigArgs {
    /// This process's own arguments (a service's stand-alone binary), its `--help` ending with
    /// `settings_help` ([`settings_help`]); usage errors exit 2.
    pub fn from_command_line(settings_help: String) -> Self {
        use clap::{CommandFactory, FromArgMatches};
        let matches = ServiceCli::command().after_help(settings_help).get_matches();
        match ServiceCli::from_arg_matches(&matches) {
            Ok(cli) => cli.config,
            Err(e) => e.exit(),
        }
    }

    pub fn file(&self) -> Option<&Path> {
        self.config.as_deref()
    }
}

/// A server's listener could not be bound: the address, and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}: {source}")]
pub struct ListenError {
    pub addr: String,
    #[source]
    pub source: std::io::Error,
}

/// Binds `addr` for a service's HTTP server, naming the address when it cannot (every service
/// says it the same way).
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, ListenError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|source| ListenError { addr: addr.into(), source })
}

/// A `nats_creds_file` setting, if any, names a readable NATS credentials file (checked before
/// anything starts, so a wrong path is a bad setting, not a failure to connect).
pub fn check_creds_file(path: Option<&Path>) -> Result<(), SettingsError> {
    let Some(path) = path else { return Ok(()) };
    match leasehold_nats::auth::read_creds_file(path) {
        Ok(_) => Ok(()),
        Err(e) => Err(SettingsError::CredsFile(e)),
    }
}

/// What every per-DC service checks: its limit and DC names and its own id (`id_name`) are
/// valid ids, and its clock drift stays within ±100000 ppm.
pub fn check_dc_service(
    limit: Option<&str>,
    dc: &str,
    (id_name, id): (&'static str, Option<&str>),
    clock_drift_ppm: i64,
) -> Result<(), SettingsError> {
    if let Some(limit) = limit {
        leasehold_core::wire::check_id("limit", limit)?;
    }
    leasehold_core::wire::check_id("dc", dc)?;
    if let Some(id) = id {
        leasehold_core::wire::check_id(id_name, id)?;
    }
    if clock_drift_ppm.abs() > 100_000 {
        return Err(SettingsError::Invalid(format!("clock_drift_ppm must be within ±100000, got {clock_drift_ppm}")));
    }
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// A receiver that turns true on SIGTERM/SIGINT (call inside the runtime).
pub fn stop_on_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = tx.send(true);
    });
    rx
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, not in a file, journald or a collector.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Run a service process: `load` its settings, then `run` them.
pub fn main<S, LoadError, RunError, Fut>(
    name: &str,
    load: impl FnOnce() -> Result<S, LoadError>,
    run: impl FnOnce(S) -> Fut,
) -> ExitCode
where
    LoadError: std::fmt::Display,
    RunError: std::fmt::Display,
    Fut: Future<Output = Result<(), RunError>>,
{
    let settings = match load() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging();
    let source = tsc_clock::source();
    tracing::info!(
        ?source,
        window_ns = tsc_clock::WINDOW_NS,
        "lease clock (LEASEHOLD_CLOCK=boottime reads CLOCK_BOOTTIME every time)"
    );
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A NATS service process ([`main`]): connect to its NATS URL (with its `.creds` file, if any) as
/// `client_name`, then
/// `run(client, settings, status, shutdown)` until SIGTERM/SIGINT.
pub fn nats_main<S, St, LoadError, E, Fut>(
    name: &str,
    client_name: &'static str,
    load: impl FnOnce() -> Result<S, LoadError>,
    nats: impl FnOnce(&S) -> (String, Option<PathBuf>),
    run: impl FnOnce(async_nats::Client, S, watch::Sender<St>, watch::Receiver<bool>) -> Fut,
) -> ExitCode
where
    St: Default,
    LoadError: std::fmt::Display,
    E: std::fmt::Display,
    Fut: Future<Output = Result<(), E>>,
{
    main(name, load, |settings| async move {
        let (url, creds_file) = nats(&settings);
        let client = leasehold_nats::connect::connect_with_creds(&url, creds_file.as_deref(), client_name)
            .await
            .map_err(NatsServiceError::Connect)?;
        let (status, _) = watch::channel(St::default());
        run(client, settings, status, stop_on_signal()).await.map_err(NatsServiceError::Run)
    })
}

/// Why a NATS service process ([`nats_main`]) stopped: it could not connect, or its run failed.
#[derive(Debug, thiserror::Error)]
pub enum NatsServiceError<E: std::fmt::Display> {
    #[error("{0}")]
    Connect(#[source] leasehold_nats::connect::ConnectError),
    #[error("{0}")]
    Run(E),
}

/// Show `now` to the status watchers, waking them only if it changed.
pub fn publish_status<S: Clone + PartialEq>(status: &watch::Sender<S>, now: &S) {
    status.send_if_modified(|s| {
        let changed = s != now;
        if changed {
            *s = now.clone();
        }
        changed
    });
}

/// A service running as a task (tests, embedding): watch its status, stop it, or crash it.
pub struct Handle<S, E> {
    pub status: watch::Receiver<S>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), E>>,
}

impl<S, E> Handle<S, E> {
    /// Stop gracefully and wait.
    pub async fn stop(self) -> Result<(), E> {
        let _ = self.shutdown.send(true);
        match self.task.await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }

    /// Vanish at once, as a crash would: no further messages or writes; leader keys and leases
    /// are left to expire.
    pub fn crash(self) {
        self.task.abort();
    }
}

/// Spawn `run(status, shutdown)` on the current runtime.
pub fn spawn<S, E, F>(run: impl FnOnce(watch::Sender<S>, watch::Receiver<bool>) -> F) -> Handle<S, E>
where
    S: Default,
    E: Send + 'static,
    F: Future<Output = Result<(), E>> + Send + 'static,
{
    let (status_tx, status) = watch::channel(S::default());
    let (shutdown, shutdown_rx) = watch::channel(false);
    let task = tokio::spawn(run(status_tx, shutdown_rx));
    Handle { status, shutdown, task }
}
