//! What every Leasehold service process does the same way: read `[--config FILE]`, load settings
//! (defaults → TOML file → environment), start logging and a 2-thread runtime, stop on
//! SIGTERM/SIGINT, and turn failures into one line on stderr and an exit code (2: bad
//! configuration or arguments, 1: failure while running).
//!
//! [`clock`] is the lease clock every service judges leases and terms by (it counts time the
//! machine spent suspended). [`metrics`] serves `GET /metrics` from a Prometheus registry;
//! [`problem`] writes `application/problem+json` answers.

pub mod clock;
pub mod metrics;
pub mod problem;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio::sync::watch;

/// `[]` or `["--config", FILE]`.
pub fn config_file(args: &[String]) -> Result<Option<PathBuf>, String> {
    match args {
        [] => Ok(None),
        [flag, path] if flag == "--config" => Ok(Some(PathBuf::from(path))),
        _ => Err("usage: [--config FILE]".into()),
    }
}

/// Defaults, then the TOML `file` (which must exist if given), then `<env_prefix>*` variables.
pub fn load_settings<T: Default + Serialize + DeserializeOwned>(
    file: Option<&Path>,
    env_prefix: &str,
) -> Result<T, String> {
    let mut f = Figment::from(Serialized::defaults(T::default()));
    if let Some(path) = file {
        if !path.is_file() {
            return Err(format!("file {} not found", path.display()));
        }
        f = f.merge(Toml::file(path));
    }
    f.merge(Env::prefixed(env_prefix)).extract().map_err(|e| e.to_string())
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

/// Run a service process: parse `args`, `load` its settings, then `run` them.
pub fn main<S, Fut>(
    name: &str,
    args: Vec<String>,
    load: impl FnOnce(Option<&Path>) -> Result<S, String>,
    run: impl FnOnce(S) -> Fut,
) -> ExitCode
where
    Fut: Future<Output = Result<(), String>>,
{
    let settings = match config_file(&args).and_then(|file| load(file.as_deref())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .try_init();
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
