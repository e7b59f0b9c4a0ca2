//! # Leasehold pod
//!
//! The part of Leasehold that lives in every service instance:
//! * [`Limiter`]: the request path. `try_acquire(cost)` answers from a local token bucket (zero
//!   network hops); `acquire(cost, priority, max_wait)` waits in a bounded queue with two
//!   priority classes; `acquire_or_else` calls a fallback (serve from cache) on denial.
//! * [`Pod::start`]: the control loop on NATS: demand reports (heartbeats) on
//!   `lh.<limit>.pod.<dc>.<pod>.report`, leases from `….lease`, drain through `….return`/`….ack`.
//! * [`http`]: the agent's local HTTP API (429, `Retry-After`, IETF `RateLimit` headers) for
//!   services written in other languages.
//!
//! Starting one more pod is scaling out by one: the DC manager learns of it from its first report.

pub mod driver;
pub mod http;
pub mod limiter;
mod queue;
pub mod settings;

pub use driver::PodStatus;
pub use limiter::{AcquireError, Denial, Limiter, Priority, Totals};
pub use settings::PodSettings;

use leasehold_shared::pod::{PodConfig, PodCore};
use std::time::Duration;
use tokio::sync::watch;

/// A running pod: its limiter, its status, and the handle to drain it.
pub struct Pod {
    pub limiter: Limiter,
    pub status: watch::Receiver<PodStatus>,
    pub id: String,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<bool, driver::DriverError>>,
}

impl Pod {
    /// Start the control loop and the wait-queue dispatcher on the current runtime.
    pub fn start(client: async_nats::Client, settings: &PodSettings) -> Pod {
        let id = settings.pod_id();
        let config = PodConfig {
            limit: settings.limit.clone(),
            dc: settings.dc.clone(),
            pod: id.clone(),
            // Random per process, never from a clock: a restart under the same id is a new holder.
            incarnation: uuid::Uuid::new_v4().as_u64_pair().0,
            weight: settings.weight,
            bugs: Default::default(),
        };
        // The pod's one clock (skewed as configured): the core, the bucket and the driver read it.
        let clock = leasehold_process::clock::LeaseClock::start_skewed(
            settings.clock_offset_ms as i64,
            settings.clock_drift_ppm,
        );
        let core = PodCore::new(config, clock.now_ns());
        let limiter = Limiter::new(core.bucket().clone(), settings.queue_capacity, clock);
        tokio::spawn(limiter.clone().dispatch());
        let (status_tx, status) = watch::channel(PodStatus { pod: id.clone(), ..Default::default() });
        let (shutdown, shutdown_rx) = watch::channel(false);
        let d = driver::Driver {
            client,
            core,
            limiter: limiter.clone(),
            report_interval: Duration::from_millis(settings.report_interval_ms),
            drain_timeout: Duration::from_millis(settings.drain_timeout_ms),
            status: status_tx,
        };
        let task = tokio::spawn(d.run(shutdown_rx));
        Pod { limiter, status, id, shutdown, task }
    }

    /// Graceful drain: stop admitting, return the lease, wait for the DC manager's ack.
    /// True when acknowledged (false: the lease simply expires).
    pub async fn drain(self) -> Result<bool, driver::DriverError> {
        let _ = self.shutdown.send(true);
        self.task.await.unwrap_or(Ok(false))
    }

    /// Vanish as a crash would: no return, the lease runs out at the DC manager.
    pub fn crash(self) {
        self.task.abort();
        self.limiter.bucket().revoke();
    }
}

/// The agent process: connect, start the pod, serve HTTP, drain on SIGTERM/SIGINT.
/// Prints a one-line cause and exits non-zero on failure (2: bad settings).
pub fn agent_main(args: leasehold_process::ConfigArgs) -> std::process::ExitCode {
    leasehold_process::main("leasehold agent", || PodSettings::load(args.file()).map_err(|e| e.to_string()), run_agent)
}

async fn run_agent(settings: PodSettings) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(&settings.http_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.http_listen))?;
    let client =
        leasehold_nats::connect::connect(&settings.nats_url, "leasehold-agent").await.map_err(|e| e.to_string())?;
    let pod = Pod::start(client, &settings);
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("pod {} listening on {local}", pod.id);
    let app = http::router(pod.limiter.clone(), pod.status.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    leasehold_process::shutdown_signal().await;
    tracing::info!("draining");
    let acked = pod.drain().await.map_err(|e| e.to_string())?;
    server.abort();
    println!("drained (acknowledged: {acked})");
    Ok(())
}
