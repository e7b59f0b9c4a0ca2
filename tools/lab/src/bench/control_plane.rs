//! `leasehold-lab bench control-plane --pods N --limits L`: a coordinator, one DC manager and N
//! pods (sharing this process, each with its own NATS connection), every pod using all L limits,
//! at the default periods, on a nats-server of its own. A separate connection counts every
//! message on `lh.>` (and the items inside each batch) and every KV write on `$KV.>`. With
//! protocol v2 a pod's messages per second do not grow with L: the items inside them do.

use futures::StreamExt;
use leasehold_nats::connect::connect_until;
use leasehold_nats_harness::{binaries, NatsServer};
use leasehold_pod::{Pod, PodSettings};
use leasehold_shared::coordinator::LimitConfig;
use leasehold_shared::dc_manager::DcManagerConfig;
use leasehold_shared::quota::Quota;
use leasehold_sim::percentiles::Percentiles;
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Pods in the one DC.
    #[arg(long, default_value_t = 200)]
    pods: usize,
    /// Limits every pod uses (one DC manager and one coordinator serve them all).
    #[arg(long, default_value_t = 1)]
    limits: usize,
    /// Measuring time after every pod holds a lease.
    #[arg(long, default_value_t = 20)]
    duration_s: u64,
    #[arg(long)]
    nats_url: Option<String>,
}

fn kind(subject: &str) -> &'static str {
    if subject.starts_with("$KV.lh_ledger.") {
        "kv_ledger_write"
    } else if subject.starts_with("$KV.lh_leaders.dc.") {
        "kv_dc_leader_write"
    } else if subject.starts_with("$KV.lh_leaders.") {
        "kv_coordinator_leader_write"
    } else if subject.starts_with("lh.dc.") {
        "dc_report"
    } else if subject.starts_with("lh.pod.") && subject.ends_with(".report") {
        "pod_report"
    } else if subject.starts_with("lh.pod.") && subject.ends_with(".lease") {
        "pod_lease"
    } else {
        "other"
    }
}

/// The items in a batch (its one array of items), 0 for anything else.
fn items(payload: &[u8]) -> u64 {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(payload) else { return 0 };
    ["reports", "leases", "returns", "acks"].iter().find_map(|k| m.get(*k)?.as_array()).map_or(0, |a| a.len() as u64)
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    if a.pods == 0 || a.pods > 5_000 || a.duration_s == 0 {
        return Err("--pods must be within 1..=5000 and --duration-s positive".into());
    }
    if a.limits == 0 || a.limits > leasehold_pod::MAX_LIMITS {
        return Err(format!("--limits must be within 1..={}", leasehold_pod::MAX_LIMITS));
    }
    leasehold::block_on(measure(a))
}

/// The bench's one JSON line.
#[derive(Serialize)]
struct Summary {
    pods: usize,
    limits: usize,
    duration_s: f64,
    periods_ms: PeriodsMs,
    msgs_per_s: BTreeMap<&'static str, f64>,
    /// Items (one per limit) inside those messages, per second.
    items_per_s: BTreeMap<&'static str, f64>,
    bytes_per_s: f64,
    per_pod: PerPod,
    per_dc: PerDc,
    kv_writes_per_s: KvWritesPerS,
    lease_gap_ms: LeaseGapMs,
    dc_manager_keeps_renew_period: bool,
    dc_passes_per_s: DcPassesPerS,
}

#[derive(Serialize)]
struct PeriodsMs {
    pod_report: u64,
    pod_renew: u64,
    coordinator_renew: u64,
}

#[derive(Serialize)]
struct PerPod {
    /// Report messages a pod sends per second (one per period, whatever the limits).
    reports_per_s: f64,
    /// Lease messages a pod receives per second.
    leases_per_s: f64,
    /// Per-limit reports and leases inside them, per second.
    report_items_per_s: f64,
    lease_items_per_s: f64,
}

#[derive(Serialize)]
struct PerDc {
    dc_reports_per_s: f64,
    dc_report_items_per_s: f64,
    kv_leader_writes_per_s: f64,
}

#[derive(Serialize)]
struct KvWritesPerS {
    ledger: f64,
    coordinator_leader: f64,
    dc_leader: f64,
}

/// Time between two lease messages to the same pod.
#[derive(Serialize)]
struct LeaseGapMs {
    p50: f64,
    p99: f64,
    max: f64,
}

#[derive(Serialize)]
struct DcPassesPerS {
    full: f64,
    growth: f64,
}

/// The system under measurement: its own nats-server (unless `--nats-url`), a coordinator, one
/// DC manager and the pods, every pod holding a lease.
struct Running {
    _server: Option<NatsServer>,
    monitor: async_nats::Client,
    _coordinator: leasehold_coordinator::Handle,
    manager: leasehold_dc_manager::Handle,
    pods: Vec<Pod>,
    periods_ms: PeriodsMs,
}

/// What the monitor saw in the measuring time.
struct Counted {
    secs: f64,
    counts: BTreeMap<&'static str, u64>,
    items: BTreeMap<&'static str, u64>,
    bytes: u64,
    lease_gap_us: Percentiles,
    passes_full: u64,
    passes_growth: u64,
}

async fn measure(a: Args) -> Result<ExitCode, String> {
    let running = start(&a).await?;
    eprintln!("bench: all pods hold leases; measuring for {} s", a.duration_s);
    let counted = count(&running, Duration::from_secs(a.duration_s)).await?;
    let summary = summarize(a.pods, a.limits, running.periods_ms, &counted);
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    for p in running.pods {
        p.crash();
    }
    Ok(if summary.dc_manager_keeps_renew_period { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn start(a: &Args) -> Result<Running, String> {
    let (server, url) = match &a.nats_url {
        Some(u) => (None, u.clone()),
        None => {
            let bin = binaries().map_err(|e| e.to_string())?;
            let s = NatsServer::start(&bin[0]).map_err(|e| e.to_string())?;
            let u = s.url();
            (Some(s), u)
        }
    };
    let connect = |name: &'static str| {
        let url = url.clone();
        async move { connect_until(&url, name, Instant::now() + Duration::from_secs(10)).await.map_err(|e| e.to_string()) }
    };
    let monitor = connect("monitor").await?;
    let names: Vec<String> = (0..a.limits).map(|i| format!("api-{i}")).collect();
    let defs: Vec<_> = names
        .iter()
        .map(|n| {
            let limit = LimitConfig::new(n, Quota::per_s(10_000, 1_000), &[("bkk", Quota::per_s(100, 0))]);
            leasehold_shared::limits::LimitDef::from_config(&limit)
        })
        .collect();
    let renew_ms = LimitConfig::new("api", Quota::per_s(1, 0), &[]).renew_interval_ms;
    let coord = leasehold_coordinator::config::Settings {
        nats_url: url.clone(),
        id: Some("coord".into()),
        limits: defs,
        ..Default::default()
    };
    let coordinator = leasehold_coordinator::spawn(connect("coordinator").await?, coord);
    let manager = DcManagerConfig::new("*", "bkk", "");
    let dc_renew_ms = manager.renew_interval_ms;
    let dc = leasehold_dc_manager::config::Settings { nats_url: url.clone(), manager, ..Default::default() };
    let manager = leasehold_dc_manager::spawn(connect("dc-manager").await?, dc);
    let mut pods = Vec::with_capacity(a.pods);
    for i in 0..a.pods {
        // Never given back while idle: every limit stays served for the whole run.
        let s =
            PodSettings { dc: "bkk".into(), pod_id: Some(format!("pod{i}")), idle_release_ms: 0, ..Default::default() };
        let pod = Pod::start(connect("pod").await?, &s);
        for n in &names {
            pod.limiter(n).map_err(|e| e.to_string())?;
        }
        pods.push(pod);
    }
    eprintln!("bench: {} pods × {} limits started; waiting for every one to hold a lease", a.pods, a.limits);
    let ready_by = Instant::now() + Duration::from_secs(120);
    for p in &pods {
        for l in p.limiters() {
            let mut st = l.status();
            let left = ready_by.saturating_duration_since(Instant::now());
            let ok = tokio::time::timeout(left, st.wait_for(|s| s.lease.is_some())).await.map(|r| r.is_ok());
            if ok != Ok(true) {
                return Err(format!("pod {} got no lease for {} within 120 s", p.id, l.limit()));
            }
        }
    }
    let periods_ms = PeriodsMs {
        pod_report: PodSettings::default().report_interval_ms,
        pod_renew: dc_renew_ms,
        coordinator_renew: renew_ms,
    };
    Ok(Running { _server: server, monitor, _coordinator: coordinator, manager, pods, periods_ms })
}

/// Count every message on `lh.>` and every KV write on `$KV.>` for `duration`.
async fn count(running: &Running, duration: Duration) -> Result<Counted, String> {
    let monitor = &running.monitor;
    // Subscribe only now: the joining storm (each join re-splits for everyone) is not steady state.
    let mut all = monitor.subscribe("lh.>").await.map_err(|e| e.to_string())?;
    let mut kv = monitor.subscribe("$KV.>").await.map_err(|e| e.to_string())?;
    monitor.flush().await.map_err(|e| e.to_string())?;
    let start = Instant::now();
    let before = running.manager.status.borrow().clone();
    let end = start + duration;
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut items_seen: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut bytes: u64 = 0;
    let mut last_lease: BTreeMap<String, Instant> = BTreeMap::new();
    let mut lease_gap_us = Percentiles::new();
    loop {
        let msg = tokio::select! {
            m = all.next() => m,
            m = kv.next() => m,
            _ = tokio::time::sleep_until(end.into()) => None,
        };
        let Some(msg) = msg else { break };
        let k = kind(msg.subject.as_str());
        *counts.entry(k).or_default() += 1;
        if !k.starts_with("kv_") {
            *items_seen.entry(k).or_default() += items(&msg.payload);
        }
        bytes += msg.payload.len() as u64;
        if k == "pod_lease" {
            let now = Instant::now();
            if let Some(prev) = last_lease.insert(msg.subject.to_string(), now) {
                lease_gap_us.record(now.duration_since(prev).as_micros() as u64);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let after = running.manager.status.borrow().clone();
    Ok(Counted {
        secs,
        counts,
        items: items_seen,
        bytes,
        lease_gap_us,
        passes_full: after.totals.passes_full - before.totals.passes_full,
        passes_growth: after.totals.passes_growth - before.totals.passes_growth,
    })
}

/// Rates per second (rounded to 0.001), and whether the DC manager kept its renew period: the
/// 99th percentile gap between two leases to one pod within 1.25 renew periods.
fn summarize(pods: usize, limits: usize, periods_ms: PeriodsMs, c: &Counted) -> Summary {
    let rate = |k: &str| c.counts.get(k).copied().unwrap_or(0) as f64 / c.secs;
    let item_rate = |k: &str| c.items.get(k).copied().unwrap_or(0) as f64 / c.secs;
    let n = pods as f64;
    let round = |x: f64| (x * 1_000.0).round() / 1_000.0;
    let gap_ms = |us: Option<u64>| us.map_or(0.0, |us| us as f64 / 1_000.0);
    let gap_p99 = gap_ms(c.lease_gap_us.at(0.99));
    Summary {
        pods,
        limits,
        duration_s: round(c.secs),
        msgs_per_s: c.counts.keys().map(|&k| (k, round(rate(k)))).collect(),
        items_per_s: c.items.iter().filter(|(_, &n)| n > 0).map(|(&k, _)| (k, round(item_rate(k)))).collect(),
        bytes_per_s: round(c.bytes as f64 / c.secs),
        per_pod: PerPod {
            reports_per_s: round(rate("pod_report") / n),
            leases_per_s: round(rate("pod_lease") / n),
            report_items_per_s: round(item_rate("pod_report") / n),
            lease_items_per_s: round(item_rate("pod_lease") / n),
        },
        per_dc: PerDc {
            dc_reports_per_s: round(rate("dc_report")),
            dc_report_items_per_s: round(item_rate("dc_report")),
            kv_leader_writes_per_s: round(rate("kv_dc_leader_write")),
        },
        kv_writes_per_s: KvWritesPerS {
            ledger: round(rate("kv_ledger_write")),
            coordinator_leader: round(rate("kv_coordinator_leader_write")),
            dc_leader: round(rate("kv_dc_leader_write")),
        },
        lease_gap_ms: LeaseGapMs {
            p50: round(gap_ms(c.lease_gap_us.at(0.5))),
            p99: round(gap_p99),
            max: round(gap_ms(c.lease_gap_us.max())),
        },
        dc_manager_keeps_renew_period: gap_p99 <= periods_ms.pod_renew as f64 * 1.25,
        dc_passes_per_s: DcPassesPerS {
            full: round(c.passes_full as f64 / c.secs),
            growth: round(c.passes_growth as f64 / c.secs),
        },
        periods_ms,
    }
}
