//! # Leasehold DC manager (service)
//!
//! A thin async driver around [`leasehold_core::dc_manager::DcManagerCore`], one core per
//! limit: one process (with standbys) serves every limit of its DC, or the one its settings name.
//! * leadership of the DC through the `lh_leaders` key `dc.<dc>` (see [`manager`]);
//! * DC leases from the coordinator, by watching the limits' records in the `lh_ledger` bucket
//!   (kept in groups of limits: `group.<n>` keys, each holding several limits' records), in the
//!   coordinators' JetStream domain (`ledger_domain`; see [`ledger_link`]);
//! * pod reports and returns on `lh.pod.<dc>.*.{report,return}`;
//! * pod leases and return acks on `lh.pod.<dc>.<pod>.{lease,ack}`, DC reports on
//!   `lh.dc.<dc>.report`: every limit's in one batch per destination (protocol v2, see
//!   [`outbox`]);
//! * optional HTTP: `/metrics` (Prometheus) and `/v1/status` (JSON).

mod http;
pub mod inbound;
pub mod ledger_link;
pub mod manager;
pub(crate) mod outbox;
pub mod settings;

use futures::StreamExt;
use leasehold_core::subjects::{self, PodChannel};
use leasehold_nats::connect::{jetstream, jetstream_in};
use leasehold_nats::kv::{ensure_bucket, BucketSpec, KvError};
use manager::{Manager, Status};
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;

#[derive(Debug, Error)]
pub enum DcManagerError {
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
) -> Result<(), DcManagerError> {
    // The DC's own JetStream holds its leader key (created here: only this DC's managers use
    // it); the ledger lives in the coordinators' (`ledger_domain`), which creates it.
    let js = jetstream(client.clone());
    let ledger = ledger_link::LedgerLink::new(jetstream_in(client.clone(), settings.ledger_domain.as_deref()));
    let leaders = ensure_bucket(
        &js,
        &BucketSpec { history: 1, replicas: settings.replicas, ..BucketSpec::new(subjects::LEADER_BUCKET) },
    )
    .await?;
    let dc = settings.manager.dc.clone();
    if let Err(why) = settings.takeover_outlasts_pod_leases() {
        tracing::warn!("{why}");
    }
    // The limit served, or `*`: the subjects' wildcard token and the metrics' limit label.
    let limit = if settings.serves_every_limit() { "*".to_string() } else { settings.manager.limit.clone() };
    let subscribe = |channel| {
        let client = client.clone();
        let subject = subjects::pods_wildcard(&dc, channel).expect("validated");
        async move {
            client.subscribe(subject.clone()).await.map_err(|source| DcManagerError::Subscribe { subject, source })
        }
    };
    let reports = subscribe(PodChannel::Report).await?;
    let mut returns = subscribe(PodChannel::Return).await?;
    let key =
        if settings.serves_every_limit() { ">".to_string() } else { subjects::ledger_key(&limit).expect("validated") };
    let mut records = ledger_link::watch_records(ledger.clone(), key);
    let (ask_direct_read, mut direct_reads) = ledger_link::direct_reads(ledger);
    let clock =
        leasehold_process::clock::LeaseClock::start_skewed(settings.clock_offset_ms as i64, settings.clock_drift_ppm);
    let max_age_ns = settings.inbound_reports_max_age_ms.saturating_mul(leasehold_core::expiry::NS_PER_MS);
    let mut reports = inbound::BoundedInbound::new(reports, settings.inbound_reports_max_bytes, max_age_ns, clock);
    if let Some(addr) = settings.http_listen.clone() {
        let listener = leasehold_process::bind(&addr).await?;
        if let Ok(local) = listener.local_addr() {
            // On stdout, as the agent does: the bound address when asked for port 0.
            println!("dc-manager listening on {local}");
        }
        // A standby reads the key every tick: twice the TTL without an answer is not a fresh view.
        let app = http::router(status.subscribe(), limit.clone(), dc.clone(), clock, 2 * settings.leader_ttl_ms);
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    let mut tick = tokio::time::interval(Duration::from_millis(settings.report_interval_ms));
    // Ticks stay on their grid: a tick served late (a burst of reports before it) does not push
    // the later ones back. A pod's leases go every few ticks (`LeasePacing`), so with `Delay`
    // every late tick of a renew interval added to that pod's lease gap.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut m = Manager::new(settings, client, leaders, ask_direct_read, clock);
    // The status (every limit's, compared whole before it is sent) goes out after each tick, after
    // a message at least `STATUS_GAP_NS` after the last time it went, and on the way out: not after
    // each of the thousands of messages a second a manager of many limits reads. A change waits
    // at most until the next tick (a report interval).
    let mut status_sent_ns = m.now_ns();
    loop {
        // Each limit's core renews on its own schedule; the outbox paces each pod's leases to one
        // message per renew interval, sent after a tick (a holder's first lease goes at once).
        // In this order when several are ready: the few messages that carry DC leases and
        // leadership before the pods' many reports. The reports' queue sheds what it cannot read
        // in time; the ledger watch only falls behind, and a DC lease read seconds late is cut
        // short or refused (measured at 1,000 limits on a full machine: the watch 1–7 s behind,
        // up to 19 s, while the reports were read in turn with the rest).
        let on_tick = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            _ = tick.tick() => { m.tick().await; true }
            Some((key, value, revision)) = records.recv() => { m.on_ledger_value(&key, &value, revision).await; false }
            Some(answer) = direct_reads.recv() => { m.on_direct_read(answer).await; false }
            Some(msg) = returns.next() => { m.on_returns(&msg.subject, &msg.payload).await; false }
            Some(msg) = reports.next() => { m.on_pod_reports(&msg.subject, &msg.payload).await; false }
        };
        m.flush(on_tick).await;
        m.status.report_batches_shed = reports.shed();
        m.reports_shed_at_ns = reports.last_shed_ns();
        m.reports_read_through_ns = Some(reports.read_through_ns());
        let now_ns = m.now_ns();
        if on_tick || now_ns.saturating_sub(status_sent_ns) >= STATUS_GAP_NS {
            leasehold_process::publish_status(&status, &m.status);
            status_sent_ns = now_ns;
        }
    }
    leasehold_process::publish_status(&status, &m.status);
    Ok(())
}

/// The shortest gap between two publications of the status between ticks (see the loop in `run`).
const STATUS_GAP_NS: u64 = 50_000_000;

/// A running DC manager: watch its status, stop it, or crash it.
pub type Handle = leasehold_process::Handle<Status, DcManagerError>;

pub fn spawn(client: async_nats::Client, settings: settings::Settings) -> Handle {
    leasehold_process::spawn(|status, shutdown| run(client, settings, status, shutdown))
}

/// The process: load settings (`args`, then the environment), connect, run until
/// SIGTERM/SIGINT. One-line errors; exit 2 on bad configuration.
pub fn main(args: leasehold_process::ConfigArgs) -> std::process::ExitCode {
    leasehold_process::nats_main(
        "leasehold dc-manager",
        "leasehold-dc-manager",
        || settings::load(args.file()).map_err(|e| e.to_string()),
        |s| (s.nats_url.clone(), s.nats_creds_file.clone()),
        run,
    )
}
