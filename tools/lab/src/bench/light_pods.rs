//! Pods as docs/PROTOCOL.md "Writing a pod in another language" describes them, many to a NATS
//! connection, so that `bench control-plane` can put 10,000 pods on one DC manager from one
//! process. Each pod sends one `PodReports` batch per report period (a steady demand) and puts
//! the newest lease version it received per limit in `lease_in_use`. Like the Rust pod
//! (`shared/core/src/quiet_reports.rs`), a limit reports at once when it has a new lease to confirm
//! and otherwise every `QUIET_PERIODS + 1` periods (its demand never moves); a batch with no
//! report is not sent. It enforces nothing (the bench measures the control plane, not
//! admissions).

use futures::StreamExt;
use leasehold_core::subjects::{self, PodChannel};
use leasehold_core::wire::{self, LeaseVersion, PodReport, PodReports};
use leasehold_sim::percentiles::Percentiles;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests each pod offers per report period (its demand).
const OFFERED_PER_REPORT: u64 = 5;
/// Report periods in a row a limit with nothing new is left out: the Rust pod's default
/// (`max_quiet_report_ms`, 1 s) at the default 250 ms period.
const QUIET_PERIODS: u32 = 3;
/// How often a connection's task looks for pods whose report is due.
const REPORT_TICK: Duration = Duration::from_millis(5);

struct PodState {
    dc: String,
    id: String,
    incarnation: u64,
    seq: u64,
    next_report_at: Instant,
    /// Per limit (by its place in the fleet's list), the newest lease version received.
    in_use: Vec<Option<LeaseVersion>>,
    /// Limits with a lease received.
    leased: usize,
    /// Per limit: the `lease_in_use` its last report carried, the pod time it was sent and the
    /// periods it has been left out since.
    reported: Vec<Option<(Option<LeaseVersion>, Instant, u32)>>,
    joined_at: Instant,
    /// When the pod first held a lease of every limit.
    all_leased_at: Option<Instant>,
    last_lease_msg_at: Option<Instant>,
}

#[derive(Default)]
struct Books {
    pods: HashMap<(String, String), PodState>,
    /// Time between two lease messages to one pod, recorded while `measuring`.
    lease_gap_us: Percentiles,
    measuring: bool,
    malformed: u64,
}

/// A pod's lease batch as the bench reads it: the fields it uses, borrowed from the payload
/// (only a name with escapes is copied, and no item is checked: the bench pods cost the machine
/// the DC managers run on, at 100,000 lease items a second per DC). A batch that is not this
/// shape is counted malformed.
#[derive(Deserialize)]
struct LeaseBatchView<'a> {
    #[serde(borrow)]
    dc: Cow<'a, str>,
    #[serde(borrow)]
    pod: Cow<'a, str>,
    #[serde(borrow)]
    leases: Vec<LeaseItemView<'a>>,
}

#[derive(Deserialize)]
struct LeaseItemView<'a> {
    #[serde(borrow)]
    limit: Cow<'a, str>,
    incarnation: u64,
    version: LeaseVersion,
}

/// The pods, their report tasks and the one subscription that reads every pod's leases.
pub(super) struct Fleet {
    books: Arc<Mutex<Books>>,
    limits: Arc<Vec<String>>,
    report_interval: Duration,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Join times of a set of pods: from its first report to holding a lease of every limit.
pub(super) struct Joined {
    pub held: usize,
    pub of: usize,
    pub latency_ms: Percentiles,
}

impl Fleet {
    /// A fleet reading every pod's leases (`lh.pod.*.*.lease`) on `leases`.
    pub(super) async fn new(
        leases: async_nats::Client,
        limits: Vec<String>,
        report_interval: Duration,
    ) -> Result<Self, String> {
        let books = Arc::new(Mutex::new(Books::default()));
        let subject = format!("{}.pod.*.*.lease", subjects::PREFIX);
        let mut sub = leases.subscribe(subject).await.map_err(|e| e.to_string())?;
        leases.flush().await.map_err(|e| e.to_string())?;
        let reader_books = books.clone();
        let places: HashMap<String, usize> = limits.iter().enumerate().map(|(i, l)| (l.clone(), i)).collect();
        let reader = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                on_leases(&reader_books, &places, &msg.payload, Instant::now());
            }
        });
        Ok(Fleet { books, limits: Arc::new(limits), report_interval, tasks: vec![reader] })
    }

    /// Start `ids` (pod ids in `dc`) on `client`, their reports spread over one period.
    pub(super) fn add(&mut self, client: async_nats::Client, dc: &str, ids: Vec<String>) {
        let now = Instant::now();
        let n = ids.len().max(1) as u32;
        let mut keys = Vec::with_capacity(ids.len());
        {
            let mut books = self.books.lock().expect("fleet books");
            for (i, id) in ids.into_iter().enumerate() {
                let key = (dc.to_string(), id.clone());
                let phase = self.report_interval * i as u32 / n;
                books.pods.insert(
                    key.clone(),
                    PodState {
                        dc: dc.to_string(),
                        id,
                        incarnation: rand::random::<u64>() >> 12,
                        seq: 0,
                        next_report_at: now + phase,
                        in_use: vec![None; self.limits.len()],
                        leased: 0,
                        reported: vec![None; self.limits.len()],
                        joined_at: now,
                        all_leased_at: None,
                        last_lease_msg_at: None,
                    },
                );
                keys.push(key);
            }
        }
        let (books, limits, period) = (self.books.clone(), self.limits.clone(), self.report_interval);
        self.tasks.push(tokio::spawn(report_loop(client, books, limits, period, keys)));
    }

    /// Record lease gaps from now on (the joins before are not steady state).
    pub(super) fn start_measuring(&self) {
        let mut books = self.books.lock().expect("fleet books");
        books.measuring = true;
        books.lease_gap_us = Percentiles::new();
    }

    pub(super) fn lease_gap_us(&self) -> Percentiles {
        self.books.lock().expect("fleet books").lease_gap_us.clone()
    }

    pub(super) fn malformed(&self) -> u64 {
        self.books.lock().expect("fleet books").malformed
    }

    /// How many of `ids` in `dc` hold a lease of every limit, and how long each took.
    pub(super) fn joined(&self, dc: &str, ids: &[String]) -> Joined {
        let books = self.books.lock().expect("fleet books");
        let mut latency_ms = Percentiles::new();
        let mut held = 0;
        for id in ids {
            let Some(p) = books.pods.get(&(dc.to_string(), id.clone())) else { continue };
            if let Some(at) = p.all_leased_at {
                held += 1;
                latency_ms.record(at.duration_since(p.joined_at).as_millis() as u64);
            }
        }
        Joined { held, of: ids.len(), latency_ms }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// A lease batch read: each limit's newest version, and the gap since the pod's last batch.
fn on_leases(books: &Mutex<Books>, places: &HashMap<String, usize>, payload: &[u8], now: Instant) {
    let batch = serde_json::from_slice::<LeaseBatchView>(payload);
    let mut guard = books.lock().expect("fleet books");
    let books = &mut *guard;
    let Ok(batch) = batch else {
        books.malformed += 1;
        return;
    };
    let Some(pod) = books.pods.get_mut(&(batch.dc.to_string(), batch.pod.to_string())) else { return };
    if let Some(prev) = pod.last_lease_msg_at.replace(now) {
        if books.measuring {
            books.lease_gap_us.record(now.duration_since(prev).as_micros() as u64);
        }
    }
    for lease in batch.leases.iter().filter(|l| l.incarnation == pod.incarnation) {
        let Some(newest) = places.get(lease.limit.as_ref()).and_then(|&i| pod.in_use.get_mut(i)) else { continue };
        if newest.is_none() {
            pod.leased += 1;
        }
        *newest = Some(newest.map_or(lease.version, |v| v.max(lease.version)));
    }
    if pod.all_leased_at.is_none() && pod.leased == pod.in_use.len() {
        pod.all_leased_at = Some(now);
    }
}

/// Every `REPORT_TICK`, send the due pods' reports (one batch per pod, an item per limit).
async fn report_loop(
    client: async_nats::Client,
    books: Arc<Mutex<Books>>,
    limits: Arc<Vec<String>>,
    period: Duration,
    keys: Vec<(String, String)>,
) {
    let mut tick = tokio::time::interval(REPORT_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let due: Vec<(String, Vec<u8>)> = {
            let mut books = books.lock().expect("fleet books");
            keys.iter()
                .filter_map(|k| {
                    let p = books.pods.get_mut(k)?;
                    (p.next_report_at <= now).then(|| report(p, &limits, period, now)).flatten()
                })
                .collect()
        };
        for (subject, body) in due {
            if client.publish(subject, body.into()).await.is_err() {
                return;
            }
        }
    }
}

/// The pod's batch for this period: the limits with a new lease to confirm, never reported, or
/// left out `QUIET_PERIODS` times in a row. None when no limit reports.
fn report(p: &mut PodState, limits: &[String], period: Duration, now: Instant) -> Option<(String, Vec<u8>)> {
    p.seq += 1;
    p.next_report_at += period;
    if p.next_report_at < now {
        p.next_report_at = now + period;
    }
    let reports: Vec<PodReport> = limits
        .iter()
        .zip(p.in_use.iter().zip(p.reported.iter_mut()))
        .filter_map(|(limit, (&in_use, last))| {
            let (since, periods) = match last {
                Some((reported, _, quiet)) if *reported == in_use && *quiet < QUIET_PERIODS => {
                    *quiet += 1;
                    return None;
                }
                Some((_, at, quiet)) => (*at, *quiet + 1),
                None => (p.joined_at, 1),
            };
            *last = Some((in_use, now, 0));
            Some((limit, in_use, now.duration_since(since).as_millis().clamp(1, 600_000) as u64, periods))
        })
        .map(|(limit, in_use, interval_ms, periods)| PodReport {
            v: wire::SCHEMA_VERSION,
            limit: limit.clone(),
            dc: p.dc.clone(),
            pod: p.id.clone(),
            incarnation: p.incarnation,
            seq: p.seq,
            interval_ms,
            offered: OFFERED_PER_REPORT * interval_ms / period.as_millis().max(1) as u64,
            admitted: OFFERED_PER_REPORT * interval_ms / period.as_millis().max(1) as u64,
            rejected: 0,
            queued: 0,
            errors: 0,
            upstream_429: 0,
            healthy: true,
            draining: false,
            weight: 1.0,
            lease_in_use: in_use,
            periods,
            held: None,
        })
        .collect();
    if reports.is_empty() {
        return None;
    }
    let subject = subjects::pod(&p.dc, &p.id, PodChannel::Report).expect("bench pod ids are valid");
    Some((subject, wire::encode(&PodReports::new(&p.dc, &p.id, reports))))
}
