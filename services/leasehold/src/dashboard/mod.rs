//! `leasehold dashboard`: the live web view of the leases. A read-only NATS client (like
//! `inspect`, it writes nothing and creates nothing) that follows the ledger and leader buckets,
//! the DC managers' reports and the pods' reports and leases, and serves:
//!
//! * `GET /`: one self-contained HTML page (no build step, no external assets; readable on a
//!   phone) drawing every limit's Σ against R and B, each DC's demand, allocation and use over
//!   the last `--history-s` seconds, leaders and epochs, takeovers, and each DC's pods with
//!   their leases and seconds since renewal;
//! * `GET /api/events`: server-sent events, one `snapshot` (JSON, [`snapshot::Snapshot`]) a
//!   second, which the page draws;
//! * `GET /api/state`: the newest snapshot; `GET /healthz`.

mod model;
pub mod snapshot;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use clap::Args;
use futures::StreamExt;
use leasehold_core::subjects;
use leasehold_core::wire::{decode, decode_pod_reports, DcReports, PodLeases};
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{follow, KeyChange};
use leasehold_process::clock::LeaseClock;
use model::{Shown, View};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

const PAGE: &str = include_str!("page.html");
/// How often the view samples and the page is sent a snapshot.
const PERIOD_MS: u64 = 1_000;

#[derive(Args)]
pub struct DashboardArgs {
    #[command(flatten)]
    nats: crate::NatsArgs,
    /// Address to serve the page on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8089")]
    listen: String,
    /// Seconds of demand and allocation history drawn per DC (1..=3600).
    #[arg(long, default_value_t = 300)]
    history_s: u64,
    /// Most limits drawn (by name); the page says how many more exist (1..=10000).
    #[arg(long, default_value_t = 50)]
    limits_shown: usize,
    /// Most pods listed per DC, the stalest renewals first (0..=10000).
    #[arg(long, default_value_t = 100)]
    pods_shown: usize,
}

impl DashboardArgs {
    fn check(&self) -> Result<(), crate::CommandError> {
        if !(1..=3_600).contains(&self.history_s) {
            return Err(format!("--history-s must be within 1..=3600, got {}", self.history_s).into());
        }
        if !(1..=10_000).contains(&self.limits_shown) {
            return Err(format!("--limits-shown must be within 1..=10000, got {}", self.limits_shown).into());
        }
        if self.pods_shown > 10_000 {
            return Err(format!("--pods-shown must be at most 10000, got {}", self.pods_shown).into());
        }
        Ok(())
    }
}

pub fn run(a: DashboardArgs) -> Result<ExitCode, crate::CommandError> {
    a.check()?;
    leasehold_process::init_logging();
    crate::block_on(serve(a))
}

async fn serve(a: DashboardArgs) -> Result<ExitCode, crate::CommandError> {
    let client = a.nats.connect("leasehold-dashboard").await?;
    let listener = leasehold_process::bind(&a.listen).await?;
    let local = listener.local_addr()?;
    let (tx, rx) = watch::channel(Arc::new(String::from("{}")));
    let shown = Shown { limits_max: a.limits_shown, pods_per_dc_max: a.pods_shown };
    let history_len = (a.history_s * 1_000 / PERIOD_MS) as usize;
    let feeds = Feeds::open(&client).await?;
    tokio::spawn(run_view(feeds, View::new(history_len), shown, tx));
    println!("dashboard listening on http://{local}");
    axum::serve(listener, router(rx))
        .with_graceful_shutdown(leasehold_process::shutdown_signal())
        .await
        .map_err(|e| format!("the web server stopped: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn router(snapshots: watch::Receiver<Arc<String>>) -> Router {
    let state = snapshots.clone();
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/api/state",
            get(move || {
                let json = state.borrow().clone();
                async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], json.to_string()) }
            }),
        )
        .route("/api/events", get(move || events(snapshots.clone())))
}

/// One `snapshot` event per new snapshot, starting with the newest one.
async fn events(mut snapshots: watch::Receiver<Arc<String>>) -> impl IntoResponse {
    snapshots.mark_changed();
    let stream = futures::stream::unfold(snapshots, |mut rx| async move {
        rx.changed().await.ok()?;
        let json = rx.borrow_and_update().clone();
        Some((Ok::<_, std::convert::Infallible>(Event::default().event("snapshot").data(json.as_str())), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// What the view follows: two buckets and two subject trees.
struct Feeds {
    leaders: mpsc::Receiver<KeyChange>,
    ledger: mpsc::Receiver<KeyChange>,
    pods: async_nats::Subscriber,
    dcs: async_nats::Subscriber,
}

impl Feeds {
    async fn open(client: &async_nats::Client) -> Result<Feeds, crate::CommandError> {
        let js = jetstream(client.clone());
        let leaders = follow_when_there(js.clone(), subjects::LEADER_BUCKET);
        let ledger = follow_when_there(js, subjects::LEDGER_BUCKET);
        let sub = |s: String| async move {
            client.subscribe(s.clone()).await.map_err(|e| format!("cannot subscribe to {s}: {e}"))
        };
        let pods = sub(format!("{}.pod.>", subjects::PREFIX)).await?;
        let dcs = sub(subjects::dc_reports_wildcard()).await?;
        Ok(Feeds { leaders, ledger, pods, dcs })
    }
}

/// Follow `bucket` once it exists: the view never creates a bucket (where a bucket lives is
/// the services' choice), so it waits for the first service to create it.
fn follow_when_there(js: async_nats::jetstream::Context, bucket: &'static str) -> mpsc::Receiver<KeyChange> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let store = loop {
            match js.get_key_value(bucket).await {
                Ok(store) => break store,
                Err(e) => {
                    tracing::info!(bucket, error = %e, "waiting for the bucket");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        };
        let mut changes = follow(js.client(), store);
        while let Some(c) = changes.recv().await {
            if tx.send(c).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// Feed everything heard into `view`; once a period, sample and publish a snapshot.
async fn run_view(mut f: Feeds, mut view: View, shown: Shown, tx: watch::Sender<Arc<String>>) {
    let clock = LeaseClock::start();
    let mut period = tokio::time::interval(Duration::from_millis(PERIOD_MS));
    loop {
        tokio::select! {
            Some(c) = f.leaders.recv() => view.on_leader_key(&c.key, c.value.as_deref(), clock.now_ms()),
            Some(c) = f.ledger.recv() => {
                if let Some(group) = subjects::ledger_group_of_key(&c.key) {
                    let records = match c.value {
                        Some(v) => match leasehold_nats::ledger::decode_group(&c.key, &v) {
                            Ok(g) => Some(g),
                            Err(e) => {
                                tracing::warn!(key = %c.key, error = %e, "unreadable ledger group");
                                continue;
                            }
                        },
                        None => None,
                    };
                    view.on_ledger_group(group, records, clock.now_ms());
                }
            }
            Some(m) = f.pods.next() => {
                if m.subject.ends_with(".report") {
                    if let Ok(b) = decode_pod_reports(&m.payload) {
                        view.on_pod_reports(&b, clock.now_ms());
                    }
                } else if m.subject.ends_with(".lease") {
                    if let Ok(b) = decode::<PodLeases>(&m.payload) {
                        view.on_pod_leases(&b, clock.now_ms());
                    }
                }
            }
            Some(m) = f.dcs.next() => {
                if let Ok(b) = decode::<DcReports>(&m.payload) {
                    view.on_dc_reports(&b, clock.now_ms());
                }
            }
            _ = period.tick() => {
                let now_ms = clock.now_ms();
                view.tick(now_ms);
                match serde_json::to_string(&view.snapshot(now_ms, shown)) {
                    Ok(json) => { let _ = tx.send(Arc::new(json)); }
                    Err(e) => tracing::warn!(error = %e, "cannot encode the snapshot"),
                }
            }
        }
    }
}
