//! # Leasehold pod
//!
//! The part of Leasehold that lives in every service instance:
//! * [`Limiter`]: the request path of one limit. `try_acquire(cost)` answers from a local token
//!   bucket (zero network hops); `acquire(cost, priority, max_wait)` waits in a bounded queue
//!   with two priority classes; `acquire_or_else` calls a fallback (serve from cache) on denial.
//! * [`Pod::start`] and [`Pod::limiter`]: one pod serves every limit it is asked for, a control
//!   loop per limit, and one link to NATS for all of them (protocol v2 batches): demand reports
//!   (heartbeats) of every limit in one message per period on `lh.pod.<dc>.<pod>.report`,
//!   leases from `….lease`, returns (idle or drain) through `….return`/`….ack`.
//! * [`http`]: the agent's local HTTP API (429, `Retry-After`, IETF `RateLimit` headers) for
//!   services written in other languages.
//!
//! Starting one more pod is scaling out by one: the DC manager learns of it from its first report.

pub mod driver;
#[cfg(feature = "envoy")]
pub mod envoy;
pub mod http;
pub mod limiter;
mod link;
mod pod;
pub mod settings;
#[cfg(test)]
mod slice_tests;
mod striped;

pub use driver::PodStatus;
pub use limiter::{AcquireError, Denial, Limiter, Priority, Totals};
pub use pod::{LimitError, Pod, MAX_LIMITS};
pub use settings::PodSettings;
pub use striped::SLICE_SLOTS;

/// The agent process: connect, start the pod, serve HTTP, drain on SIGTERM/SIGINT.
/// Prints a one-line cause and exits non-zero on failure (2: bad settings).
pub fn agent_main(args: leasehold_process::ConfigArgs) -> std::process::ExitCode {
    leasehold_process::main("leasehold agent", || PodSettings::load(args.file()), run_agent)
}

/// Why the agent could not start, or stopped other than on SIGTERM/SIGINT.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Listen(#[from] leasehold_process::ListenError),
    /// A listener's own address could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Connect(#[from] leasehold_nats::connect::ConnectError),
    #[error(transparent)]
    Settings(#[from] leasehold_process::SettingsError),
    #[cfg(feature = "envoy")]
    #[error(transparent)]
    Lend(#[from] envoy::rlqs::LendError),
    #[cfg(feature = "envoy")]
    #[error(transparent)]
    Envoy(#[from] envoy::EnvoyServiceError),
    /// An Envoy service's task ended on a panic.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    #[error("an Envoy service stopped")]
    EnvoyStopped,
    #[error(transparent)]
    Drain(#[from] driver::DriverError),
}

async fn bind(listen: &str) -> Result<tokio::net::TcpListener, AgentError> {
    Ok(leasehold_process::bind(listen).await?)
}

/// The address an Envoy service listens on; plaintext and unauthenticated, so whoever reaches it
/// can spend the quota: a warning beyond loopback.
#[cfg(feature = "envoy")]
fn local_addr(listener: &tokio::net::TcpListener, what: &str) -> Result<std::net::SocketAddr, AgentError> {
    let local = listener.local_addr()?;
    if !local.ip().is_loopback() {
        tracing::warn!(%local, "the Envoy {what} listens beyond loopback");
    }
    Ok(local)
}

async fn run_agent(settings: PodSettings) -> Result<(), AgentError> {
    let listener = bind(&settings.http_listen).await?;
    let client = leasehold_nats::connect::connect_with_creds(
        &settings.nats_url,
        settings.nats_creds_file.as_deref(),
        "leasehold-agent",
    )
    .await?;
    let envoy_rls = settings.envoy_rls()?;
    let rls_listener = match &envoy_rls {
        Some((listen, _, _)) => Some(bind(listen).await?),
        None => None,
    };
    let rlqs_listener = match settings.envoy_rlqs()? {
        Some(listen) => Some(bind(&listen).await?),
        None => None,
    };
    let pod = Pod::start(client, &settings);
    let local = listener.local_addr()?;
    println!("pod {} listening on {local}", pod.id);
    let mut metrics = Vec::new();
    let mut envoy_tasks = tokio::task::JoinSet::<Result<(), AgentError>>::new();
    #[cfg(feature = "envoy")]
    if let (Some((_, config, keys)), Some(rls_listener)) = (envoy_rls, rls_listener) {
        let rls_local = local_addr(&rls_listener, "rate limit service")?;
        let limits: Vec<&str> = config.limits().keys().map(String::as_str).collect();
        let tiers: Vec<&str> = config.tiers().keys().map(String::as_str).collect();
        println!(
            "Envoy rate limit service (RLS v3) on {rls_local}, limits: {}; per-key tiers: {}",
            limits.join(", "),
            tiers.join(", ")
        );
        let server = envoy::RateLimitServer::new(pod.clone(), std::sync::Arc::new(config), keys);
        metrics.push(envoy::rls::metrics(server.counters.clone()));
        let rls = envoy::on_own_thread("lh-envoy-rls", rls_listener, |l| envoy::serve_rls(l, server));
        envoy_tasks.spawn(async move { Ok(rls.await?) });
    }
    #[cfg(feature = "envoy")]
    if let Some(rlqs_listener) = rlqs_listener {
        let rlqs_local = local_addr(&rlqs_listener, "rate limit quota service")?;
        let server = envoy::RlqsServer::new(
            pod.clone(),
            &settings.envoy_rlqs_limits,
            &settings.envoy_rlqs_bucket_key,
            settings.envoy_rlqs,
        )?;
        println!(
            "Envoy rate limit quota service (RLQS) on {rlqs_local}, limits lent: {}",
            settings.envoy_rlqs_limits.join(", ")
        );
        metrics.push(envoy::rlqs::metrics(server.counters.clone()));
        let rlqs = envoy::on_own_thread("lh-envoy-rlqs", rlqs_listener, |l| envoy::serve_rlqs(l, server));
        envoy_tasks.spawn(async move { Ok(rlqs.await?) });
    }
    #[cfg(not(feature = "envoy"))]
    let _ = (envoy_rls, rls_listener, rlqs_listener, &mut envoy_tasks);
    let app = http::router_with(pod.clone(), metrics);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let envoy_stopped = async {
        match envoy_tasks.join_next().await {
            Some(r) => r.map_err(AgentError::from).and_then(|r| r),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = leasehold_process::shutdown_signal() => {}
        stopped = envoy_stopped => {
            stopped?;
            return Err(AgentError::EnvoyStopped);
        }
    }
    tracing::info!("draining");
    let acked = pod.drain().await?;
    server.abort();
    println!("drained (acknowledged: {acked})");
    Ok(())
}
