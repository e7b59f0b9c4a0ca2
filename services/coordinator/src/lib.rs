//! # Leasehold's global coordinator (service)
//!
//! A thin async driver around [`leasehold_core::coordinator::CoordinatorCore`]: it reads the
//! clock in one place, receives DC reports on `lh.dc.*.report` (a batch per DC
//! manager report, an item per limit), and keeps the DC leases
//! in the `lh_ledger` KV bucket, one record per limit kept in groups of limits (64 keys, see
//! `leader/writes.rs`), each group written only by compare-and-set. Any
//! number of replicas may run; the one holding the `lh_leaders` key leads (see [`leader`]).
//! The limits are data: every definition in the `lh_limits` bucket, followed live (see
//! [`leader::definitions`]); the configuration file's `[[limits]]` only seed it.
//!
//! ## Layout
//! * [`settings`]: settings (figment: defaults → TOML → env), validated at start.
//! * [`leader`]: leadership, takeover with ledger resume, fenced writes (`leader/writes.rs`), the
//!   status it serves, and the limits' definitions applied live ([`leader::definitions`]).
//! * [`run`]: the event loop; [`spawn`] for tests and embedding.

mod http;
pub mod leader;
pub mod settings;

use futures::StreamExt;
use leader::definitions::Definitions;
use leader::{Leader, Status};
use leasehold_core::subjects;
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{ensure_bucket, BucketSpec, KvError};
use leasehold_nats::limits_store;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;
use tracing::info;

#[derive(Debug, Error)]
pub enum CoordinatorError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error("cannot subscribe to {subject}: {source}")]
    Subscribe {
        subject: String,
        #[source]
        source: async_nats::SubscribeError,
    },
    #[error(transparent)]
    Listen(#[from] leasehold_process::ListenError),
}

/// Run until `shutdown` turns true. `status` receives every change of [`Status`].
pub async fn run(
    client: async_nats::Client,
    settings: settings::Settings,
    status: watch::Sender<Status>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), CoordinatorError> {
    let js = jetstream(client.clone());
    let ledger = ensure_bucket(
        &js,
        &BucketSpec { history: 5, replicas: settings.replicas, ..BucketSpec::new(subjects::LEDGER_BUCKET) },
    )
    .await?;
    let leader_ttl = Duration::from_millis(settings.leader_ttl_ms);
    let leaders = ensure_bucket(
        &js,
        &BucketSpec { history: 1, replicas: settings.replicas, ..BucketSpec::new(subjects::LEADER_BUCKET) },
    )
    .await?;
    let subject = subjects::dc_reports_wildcard();
    let mut reports =
        client.subscribe(subject.clone()).await.map_err(|source| CoordinatorError::Subscribe { subject, source })?;
    let clock = leasehold_process::clock::LeaseClock::start();
    if let Some(addr) = settings.http_listen.clone() {
        let listener = leasehold_process::bind(&addr).await?;
        if let Ok(local) = listener.local_addr() {
            // On stdout, as the agent does: the bound address when asked for port 0.
            println!("coordinator listening on {local}");
        }
        // A standby reads the key every tick: twice the TTL without an answer is not a fresh view.
        let app = http::router(status.subscribe(), clock, 2 * settings.leader_ttl_ms);
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    let limits = limits_store::open(&js, settings.replicas).await?;
    // Seed the bucket and read every definition before seeking leadership (a takeover reads
    // them again). While NATS is restarting or a stream leader moves these may time out: retry.
    let Some(stored) = read_definitions(&limits, &settings.limits, &mut shutdown).await else { return Ok(()) };
    let id =
        settings.id.clone().unwrap_or_else(|| format!("coord-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    let stores = (ledger, leaders, limits.clone());
    let max_payload = client.server_info().max_payload;
    let mut leader =
        Leader::new(id, Definitions::new(settings), leader_ttl, stores, clock).with_max_payload(max_payload);
    for s in stored {
        leader.on_limit(s.into()).await;
    }
    let mut changes = limits_store::follow(client.clone(), limits);
    let mut tick_ms = leader.definitions.tick_ms();
    let mut tick = tokio::time::interval(Duration::from_millis(tick_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tick.tick() => leader.tick().await,
            Some(msg) = reports.next() => leader.on_reports(&msg.subject, &msg.payload).await,
            Some(change) = changes.recv() => {
                leader.on_limit(change).await;
                if leader.definitions.tick_ms() != tick_ms {
                    tick_ms = leader.definitions.tick_ms();
                    tick = tokio::time::interval(Duration::from_millis(tick_ms));
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                }
            }
        }
        leasehold_process::publish_status(&status, &leader.status);
    }
    Ok(())
}

/// Seed `lh_limits` from the file's limits and read every definition, retrying (backing off up
/// to 2 s) until both succeed. `None` if `shutdown` turned true first.
async fn read_definitions(
    limits: &async_nats::jetstream::kv::Store,
    seeds: &[leasehold_core::limits::LimitDef],
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Vec<limits_store::StoredLimit>> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = async {
            let seeded = limits_store::seed(limits, seeds).await?;
            let stored = limits_store::list(limits).await?;
            Ok::<_, KvError>((seeded, stored))
        };
        match attempt.await {
            Ok((seeded, stored)) => {
                for name in &seeded.created {
                    info!(limit = %name, "seeded lh_limits from the configuration file");
                }
                for name in &seeded.removed {
                    info!(limit = %name, "not seeded: it was removed from lh_limits (leasehold limits rm)");
                }
                return Some(stored);
            }
            Err(e) => tracing::warn!(cause = %e, "cannot read the limits' definitions yet; retrying"),
        }
        tokio::select! {
            _ = shutdown.changed() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// A running coordinator: watch its status, stop it, or crash it.
pub type Handle = leasehold_process::Handle<Status, CoordinatorError>;

pub fn spawn(client: async_nats::Client, settings: settings::Settings) -> Handle {
    leasehold_process::spawn(|status, shutdown| run(client, settings, status, shutdown))
}

/// The process: load settings (`args`, then the environment), connect, run until
/// SIGTERM/SIGINT. One-line errors; exit 2 on bad configuration.
pub fn main(args: leasehold_process::ConfigArgs) -> std::process::ExitCode {
    leasehold_process::nats_main(
        "leasehold coordinator",
        "leasehold-coordinator",
        || settings::load(args.file()).map_err(|e| e.to_string()),
        |s| (s.nats_url.clone(), s.nats_creds_file.clone()),
        run,
    )
}
