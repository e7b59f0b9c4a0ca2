//! `leasehold-coordinator [--config FILE]`: run one coordinator replica.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args: Vec<String> = std::env::args().collect();
    let file = match args.as_slice() {
        [_] => None,
        [_, flag, path] if flag == "--config" => Some(std::path::PathBuf::from(path)),
        _ => {
            eprintln!("leasehold-coordinator: usage: leasehold-coordinator [--config FILE]");
            return ExitCode::from(2);
        }
    };
    let settings = match leasehold_coordinator::config::load(file.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leasehold-coordinator: {e}");
            return ExitCode::from(2);
        }
    };
    let client = match leasehold_nats::connect::connect(&settings.nats_url, "leasehold-coordinator").await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold-coordinator: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (status, _) = tokio::sync::watch::channel(Default::default());
    let (shutdown_tx, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = shutdown_tx.send(true);
    });
    match leasehold_coordinator::run(client, settings, status, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leasehold-coordinator: {e}");
            ExitCode::FAILURE
        }
    }
}
