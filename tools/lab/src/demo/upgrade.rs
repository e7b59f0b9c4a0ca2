//! `--upgrade-at-s`: a rolling upgrade under the demo's load, in the order of docs/OPERATIONS.md §12. Each
//! process is replaced, one at a time, by the same service started from `--upgrade-binary` (a
//! new build), and the next waits until the one just started is ready:
//!
//! 1. every agent: taken out of the load's rotation, SIGTERM (it drains: gives its leases back),
//!    started again from the new binary, back in rotation once it holds a lease of every limit;
//! 2. per DC, the DC managers: the standby first, then the leader (after SIGTERM the standby,
//!    already on the new build, takes over; the next step waits until it leads and `/readyz`
//!    says it holds a valid DC lease for every limit);
//! 3. the coordinators: the standby first, then the leader, likewise.
//!
//! The demo's own judges decide the rest: 0 upstream rejections, no window above the limit.

use super::limits::LIMITS;
use super::observe;
use super::procs::Procs;
use super::DCS;
use async_nats::jetstream::kv::Store;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one replaced process may take to be ready before the upgrade stops, failed.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long a SIGTERMed process may take to exit (an agent drains for up to 5 s).
const EXIT_WITHIN: Duration = Duration::from_secs(15);

pub(super) struct Context {
    pub procs: Arc<tokio::sync::Mutex<Procs>>,
    pub http: reqwest::Client,
    pub leaders: Store,
    /// Per DC, the agents the load sends to (shared with the load's drivers).
    pub rotation: Vec<Arc<Mutex<Vec<String>>>>,
    pub binary: PathBuf,
    /// When the load started.
    pub start: Instant,
}

/// What the upgrade did, for the summary.
#[derive(Serialize, Default)]
pub(super) struct Report {
    pub binary: String,
    pub started_at_s: f64,
    pub steps: Vec<Step>,
    pub completed: bool,
    pub error: Option<String>,
    /// From the first SIGTERM to the last process ready.
    pub seconds: f64,
}

#[derive(Serialize)]
pub(super) struct Step {
    pub process: String,
    pub role: String,
    /// From its SIGTERM until its replacement was ready.
    pub seconds: f64,
    /// A leader's only: from its SIGTERM until the other replica led, ready.
    pub handover_s: Option<f64>,
    /// The binary the replacement runs, read from the process (`/proc/<pid>/exe`).
    pub runs: String,
}

pub(super) async fn run(at_s: u64, cx: Context) -> Report {
    tokio::time::sleep_until((cx.start + Duration::from_secs(at_s)).into()).await;
    let began = Instant::now();
    let mut report = Report {
        binary: cx.binary.display().to_string(),
        started_at_s: (cx.start.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        ..Report::default()
    };
    eprintln!("demo: rolling upgrade to {} starts: agents, DC managers, coordinators", cx.binary.display());
    let result = upgrade_all(&cx, &mut report.steps).await;
    report.seconds = (began.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    match result {
        Ok(()) => {
            report.completed = true;
            eprintln!("demo: rolling upgrade done: {} processes in {:.1} s", report.steps.len(), report.seconds);
        }
        Err(e) => {
            eprintln!("demo: rolling upgrade FAILED: {e}");
            report.error = Some(e);
        }
    }
    report
}

async fn upgrade_all(cx: &Context, steps: &mut Vec<Step>) -> Result<(), String> {
    for (d, dc) in DCS.iter().enumerate() {
        for p in 1..=super::PODS_PER_DC {
            steps.push(agent(cx, d, &format!("{dc}-pod{p}")).await?);
        }
    }
    for dc in DCS {
        let pair = [format!("{dc}-mgr-a"), format!("{dc}-mgr-b")];
        for step in replicas(cx, &format!("dc.{dc}"), &pair, "DC manager").await? {
            steps.push(step);
        }
    }
    let pair = ["coord-a".to_string(), "coord-b".to_string()];
    for step in replicas(cx, leasehold_core::subjects::COORDINATOR_LEADER_KEY, &pair, "coordinator").await? {
        steps.push(step);
    }
    Ok(())
}

/// The step that replaced `process`, once its replacement is ready; an error unless the
/// replacement runs the new build.
async fn done(
    cx: &Context,
    process: &str,
    role: &str,
    since: Instant,
    handover_s: Option<f64>,
) -> Result<Step, String> {
    let seconds = (since.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    let runs = cx.procs.lock().await.binary_of(process).unwrap_or_default();
    if std::fs::canonicalize(&cx.binary).ok() != Some(runs.clone()) {
        return Err(format!("{process} runs {} after its upgrade, not {}", runs.display(), cx.binary.display()));
    }
    eprintln!("demo: upgrade: {process} ({role}) replaced by {} and ready in {seconds:.1} s", runs.display());
    let handover_s = handover_s.map(|h| (h * 10.0).round() / 10.0);
    Ok(Step { process: process.into(), role: role.into(), seconds, handover_s, runs: runs.display().to_string() })
}

/// SIGTERM `name`, wait for its exit, start it again from the new binary; its address.
async fn replace(cx: &Context, name: &str) -> Result<String, String> {
    let mut procs = cx.procs.lock().await;
    procs.terminate(name);
    if !procs.wait_exit(name, EXIT_WITHIN).await {
        return Err(format!("{name} did not exit within {EXIT_WITHIN:?} of SIGTERM"));
    }
    procs.respawn_with(name, &cx.binary, true).await?.ok_or_else(|| format!("{name} printed no address"))
}

async fn agent(cx: &Context, d: usize, name: &str) -> Result<Step, String> {
    let since = Instant::now();
    let old = cx.procs.lock().await.address(name).ok_or_else(|| format!("{name} has no address"))?;
    cx.rotation[d].lock().unwrap_or_else(|p| p.into_inner()).retain(|a| *a != old);
    let new = replace(cx, name).await?;
    let deadline = Instant::now() + READY_WITHIN;
    for l in LIMITS {
        if !observe::start_serving(&cx.http, &new, l.name).await
            || !observe::wait_for_lease_of(&cx.http, &new, Some(l.name), deadline).await
        {
            return Err(format!("{name} (new build at {new}) got no lease of {} within {READY_WITHIN:?}", l.name));
        }
    }
    cx.rotation[d].lock().unwrap_or_else(|p| p.into_inner()).push(new);
    done(cx, name, "agent", since, None).await
}

/// Replace both replicas of `pair` (their leader key `key`): the standby, then the leader.
async fn replicas(cx: &Context, key: &str, pair: &[String; 2], role: &str) -> Result<Vec<Step>, String> {
    let leader = leader_of(cx, key).await.ok_or_else(|| format!("no {role} leads ({key} is empty)"))?;
    let (first, second) = if leader == pair[0] { (&pair[1], &pair[0]) } else { (&pair[0], &pair[1]) };
    let mut steps = Vec::new();
    let since = Instant::now();
    let addr = replace(cx, first).await?;
    ready(cx, &addr, first, |_| true).await?;
    steps.push(done(cx, first, &format!("{role} standby"), since, None).await?);

    let since = Instant::now();
    let standby_addr = cx.procs.lock().await.address(first).ok_or_else(|| format!("{first} has no address"))?;
    {
        let mut procs = cx.procs.lock().await;
        procs.terminate(second);
        if !procs.wait_exit(second, EXIT_WITHIN).await {
            return Err(format!("{second} did not exit within {EXIT_WITHIN:?} of SIGTERM"));
        }
    }
    let deadline = Instant::now() + READY_WITHIN;
    while leader_of(cx, key).await.as_deref() != Some(first.as_str()) {
        if Instant::now() > deadline {
            return Err(format!("{first} did not take over {key} within {READY_WITHIN:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ready(cx, &standby_addr, first, |body| body["role"] == "leader").await?;
    let handover_s = since.elapsed().as_secs_f64();
    let addr = cx.procs.lock().await.respawn_with(second, &cx.binary, true).await?;
    let addr = addr.ok_or_else(|| format!("{second} printed no address"))?;
    ready(cx, &addr, second, |_| true).await?;
    steps.push(done(cx, second, &format!("{role} leader"), since, Some(handover_s)).await?);
    Ok(steps)
}

async fn leader_of(cx: &Context, key: &str) -> Option<String> {
    let v = cx.leaders.get(key).await.ok()??;
    // A DC's key holds a term record naming its holder; the coordinator's, the id alone.
    Some(leasehold_core::dc_manager::TermRecord::holder_of(&v))
}

/// Poll `/readyz` of `addr` until it answers 200 with a body `f` accepts (bounded).
async fn ready(cx: &Context, addr: &str, name: &str, f: impl Fn(&serde_json::Value) -> bool) -> Result<(), String> {
    let deadline = Instant::now() + READY_WITHIN;
    let mut last = String::from("no answer");
    loop {
        if let Ok(r) = cx.http.get(format!("http://{addr}/readyz")).send().await {
            let code = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            if code == 200 && f(&body) {
                return Ok(());
            }
            last = format!("{code} {body}");
        }
        if Instant::now() > deadline {
            return Err(format!("{name} at {addr} not ready within {READY_WITHIN:?}: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
