//! `leasehold-lab bench control-plane --pods N --limits L --dcs D [--join-storm J]`: a
//! coordinator and one DC manager per DC (the real services, each on a runtime of its own so
//! that its CPU is read apart) and N pods per DC speaking the pod protocol (`light_pods.rs`, many
//! to a connection), every pod using all L limits, at the default periods, on a nats-server of
//! its own. Once every pod holds a lease of every limit, a separate connection counts every
//! message on `lh.>` (and the items inside each batch) and every KV write on `$KV.>`; then J
//! more pods join the first DC at once and the bench counts what their joining costs.

mod count;
mod storm;

use super::light_pods::Fleet;
use super::runtimes::NamedRuntime;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::DcManagerConfig;
use leasehold_core::quota::Quota;
use leasehold_nats::connect::connect_until;
use leasehold_nats_harness::{binaries, NatsServer};
use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Most pods per DC (the DC manager's `max_pods`).
const MAX_PODS_PER_DC: usize = 10_000;
/// Pods per NATS connection.
const PODS_PER_CONNECTION: usize = 1_000;
/// Requests per second each pod offers (`light_pods`: 5 per 250 ms report).
const POD_DEMAND_PER_S: u64 = 20;

#[derive(clap::Args)]
pub struct Args {
    /// Pods in each DC.
    #[arg(long, default_value_t = 200)]
    pods: usize,
    /// Limits every pod uses (one DC manager per DC and one coordinator serve them all).
    #[arg(long, default_value_t = 1)]
    limits: usize,
    /// Data centers, each with its own DC manager and `--pods` pods.
    #[arg(long, default_value_t = 1)]
    dcs: usize,
    /// Measuring time after every pod holds a lease (and `--settle-s`).
    #[arg(long, default_value_t = 20)]
    duration_s: u64,
    /// Time to wait, once every pod holds a lease, before measuring: the joins' re-splits and
    /// the first budget moves between DCs settle (progress printed every 5 s).
    #[arg(long, default_value_t = 0)]
    settle_s: u64,
    /// Then this many pods join the first DC at once (0: no join storm).
    #[arg(long, default_value_t = 0)]
    join_storm: usize,
    #[arg(long)]
    nats_url: Option<String>,
}

pub(super) fn run(a: Args) -> Result<ExitCode, String> {
    if a.pods == 0 || a.pods > MAX_PODS_PER_DC || a.pods + a.join_storm > MAX_PODS_PER_DC {
        return Err(format!("--pods (plus --join-storm) must be within 1..={MAX_PODS_PER_DC} per DC"));
    }
    if a.duration_s == 0 || a.dcs == 0 || a.dcs > 10 {
        return Err("--duration-s must be positive and --dcs within 1..=10".into());
    }
    if a.limits == 0 || a.limits > leasehold_pod::MAX_LIMITS {
        return Err(format!("--limits must be within 1..={}", leasehold_pod::MAX_LIMITS));
    }
    leasehold::block_on(measure(a))
}

#[derive(Clone, Copy, Serialize)]
pub(super) struct PeriodsMs {
    pub pod_report: u64,
    pub pod_renew: u64,
    pub coordinator_renew: u64,
}

impl Running {
    /// The nats-server the bench started, if it started one.
    pub(super) fn nats_server_pid(&self) -> Option<u32> {
        self._server.as_ref()?.pid()
    }
}

/// The system under measurement, every pod holding a lease of every limit.
pub(super) struct Running {
    _server: Option<NatsServer>,
    pub url: String,
    pub monitor: async_nats::Client,
    pub coordinator: (NamedRuntime, leasehold_coordinator::Handle),
    pub managers: Vec<(String, NamedRuntime, leasehold_dc_manager::Handle)>,
    pub pods_rt: NamedRuntime,
    pub fleet: Fleet,
    pub periods_ms: PeriodsMs,
}

async fn measure(a: Args) -> Result<ExitCode, String> {
    let mut running = start(&a).await?;
    if a.settle_s > 0 {
        eprintln!("bench: all {} pods hold leases; letting it settle for {} s", a.pods * a.dcs, a.settle_s);
        count::settle(&running, Duration::from_secs(a.settle_s)).await;
    }
    eprintln!("bench: all {} pods hold leases; measuring for {} s", a.pods * a.dcs, a.duration_s);
    let counted = count::count(&running, Duration::from_secs(a.duration_s)).await?;
    let mut summary = count::summarize(&a, running.periods_ms, &counted);
    let mut ok = summary.lease_gap_p99_within_1_1_renew_periods;
    if a.join_storm > 0 {
        eprintln!("bench: {} pods join {} at once", a.join_storm, running.managers[0].0);
        let storm = storm::join_storm(&mut running, a.pods, a.join_storm).await?;
        ok &= storm.all_within_2_renew_periods;
        summary.join_storm = Some(storm);
    }
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    let Running { coordinator, managers, pods_rt, fleet, .. } = running;
    drop(fleet);
    pods_rt.stop();
    managers.into_iter().for_each(|(_, rt, _)| rt.stop());
    coordinator.0.stop();
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub(super) fn dc_name(i: usize) -> String {
    format!("dc{i}")
}

/// A client connected from inside `rt` (its connection's tasks run there).
pub(super) async fn connect_in(rt: &NamedRuntime, url: &str, name: &'static str) -> Result<async_nats::Client, String> {
    let url = url.to_string();
    let task = rt.rt.spawn(async move { connect_until(&url, name, Instant::now() + Duration::from_secs(10)).await });
    task.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())
}

/// Start `ids` in `dc`, `PODS_PER_CONNECTION` to a connection.
pub(super) async fn add_pods(
    running_rt: &NamedRuntime,
    fleet: &mut Fleet,
    url: &str,
    dc: &str,
    ids: &[String],
) -> Result<(), String> {
    for chunk in ids.chunks(PODS_PER_CONNECTION) {
        let client = connect_in(running_rt, url, "bench-pods").await?;
        let _in_rt = running_rt.rt.enter();
        fleet.add(client, dc, chunk.to_vec());
    }
    Ok(())
}

pub(super) fn pod_ids(dc: &str, from: usize, n: usize) -> Vec<String> {
    (from..from + n).map(|i| format!("{dc}-pod{i}")).collect()
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
    let monitor =
        connect_until(&url, "monitor", Instant::now() + Duration::from_secs(10)).await.map_err(|e| e.to_string())?;
    let dcs: Vec<String> = (0..a.dcs).map(dc_name).collect();
    // Demand (every pod's) is twice the limit, so every split is contested; a whole token of
    // burst for each pod that may join.
    let all_pods = (a.pods * a.dcs + a.join_storm) as u64;
    let quota = Quota::per_s((all_pods * POD_DEMAND_PER_S / 2).max(100), all_pods.max(100));
    let floors: Vec<(&str, Quota)> =
        dcs.iter().map(|d| (d.as_str(), Quota::per_s(quota.rate_milli_per_s / 100_000, 0))).collect();
    let names: Vec<String> = (0..a.limits).map(|i| format!("api-{i}")).collect();
    let defs: Vec<_> = names
        .iter()
        .map(|n| leasehold_core::limits::LimitDef::from_config(&LimitConfig::new(n, quota, &floors)))
        .collect();
    let renew_ms = LimitConfig::new("api", Quota::per_s(1, 0), &[]).renew_interval_ms;
    let coord_rt = NamedRuntime::new("lh-coordinator")?;
    let coord = leasehold_coordinator::settings::Settings {
        nats_url: url.clone(),
        id: Some("coord".into()),
        limits: defs,
        ..Default::default()
    };
    let client = connect_in(&coord_rt, &url, "coordinator").await?;
    let coordinator = {
        let _in_rt = coord_rt.rt.enter();
        leasehold_coordinator::spawn(client, coord)
    };
    let mut managers = Vec::new();
    let mut dc_renew_ms = 0;
    for (i, dc) in dcs.iter().enumerate() {
        let rt = NamedRuntime::new(&format!("lh-dc-manager{i}"))?;
        let manager = DcManagerConfig::new("*", dc, "");
        dc_renew_ms = manager.renew_interval_ms;
        let settings =
            leasehold_dc_manager::settings::Settings { nats_url: url.clone(), manager, ..Default::default() };
        let client = connect_in(&rt, &url, "dc-manager").await?;
        let handle = {
            let _in_rt = rt.rt.enter();
            leasehold_dc_manager::spawn(client, settings)
        };
        managers.push((dc.clone(), rt, handle));
    }
    let pods_rt = NamedRuntime::new("lh-bench-pods")?;
    let report_interval = Duration::from_millis(leasehold_pod::PodSettings::default().report_interval_ms);
    let lease_client = connect_in(&pods_rt, &url, "bench-leases").await?;
    let fleet_rt = pods_rt.rt.spawn(Fleet::new(lease_client, names.clone(), report_interval));
    let mut fleet = fleet_rt.await.map_err(|e| e.to_string())??;
    for dc in &dcs {
        add_pods(&pods_rt, &mut fleet, &url, dc, &pod_ids(dc, 0, a.pods)).await?;
    }
    eprintln!(
        "bench: {} pods × {} limits in {} DC(s) started; waiting for every one to hold a lease",
        a.pods, a.limits, a.dcs
    );
    let ready_by = Instant::now() + Duration::from_secs(120);
    for dc in &dcs {
        let ids = pod_ids(dc, 0, a.pods);
        loop {
            let joined = fleet.joined(dc, &ids);
            if joined.held == joined.of {
                break;
            }
            if Instant::now() > ready_by {
                return Err(format!(
                    "{} of {} pods of {dc} got no lease within 120 s",
                    joined.of - joined.held,
                    joined.of
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let periods_ms = PeriodsMs {
        pod_report: report_interval.as_millis() as u64,
        pod_renew: dc_renew_ms,
        coordinator_renew: renew_ms,
    };
    Ok(Running {
        _server: server,
        url,
        monitor,
        coordinator: (coord_rt, coordinator),
        managers,
        pods_rt,
        fleet,
        periods_ms,
    })
}
