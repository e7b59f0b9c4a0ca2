//! What a DC manager's own work costs per (pod, limit), without NATS, other processes or the
//! machine's noise in the way: the sans-IO cores of `LIMITS` limits and `PODS` pods driven in a
//! steady state on virtual time, as `leasehold-dc-manager` drives them (a tick every 250 ms, a DC
//! lease per limit every second at the coordinator's default TTL, every pod's report batch once
//! a second with all its limits confirming the lease it holds, the leases paced per pod and
//! written as batches, the DC reports written).
//!
//! Timed, on one thread by the wall clock (on an otherwise idle machine, that thread's CPU):
//! decoding the pods' report batches, the cores' reports, ticks, splits and DC leases, the
//! pacing, and writing the lease and DC report batches. Not timed: the pods' side (writing their
//! reports, reading their leases). After a warm-up with the joins, it measures three windows of
//! 5 s and prints each: the manager's time per (pod, limit) per second, what that is in cores at
//! this size, the full splits and growth checks per limit per second (a steady state has no
//! joins, and almost no growth checks: the saturated service run is where those cost), and the
//! fewest leases any (pod, limit) got in a window (it fails below one per second but one).
//!
//! `LH_BENCH_LIMITS` (default 1,000) and `LH_BENCH_PODS` (default 100) set the size;
//! `cargo bench -p leasehold-bench --bench dc_manager_core`. There is no baseline in the same
//! run: compare builds by running it on each, alternating.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput, LeasePacing};
use leasehold_core::quota::Quota;
use leasehold_core::sorted_map::PlaceHint;
use leasehold_core::wire::{self, DcLease, LeaseVersion, PodReport, PodReports, SCHEMA_VERSION};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The services' allocator (`leasehold_process::Allocator`, mimalloc), so the costs are theirs.
#[global_allocator]
static ALLOCATOR: leasehold_process::Allocator = leasehold_process::Allocator;

const MS: u64 = 1_000_000;
const TICK_MS: u64 = 250;
const DC: &str = "bkk";
const WARM_S: u64 = 4;
const WINDOW_S: u64 = 5;
const WINDOWS: usize = 3;
/// The coordinator's default `dc_ttl_ms`.
const DC_TTL_MS: u64 = 10_000;

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

struct Dc {
    cores: Vec<DcManagerCore>,
    limits: Vec<String>,
    index: BTreeMap<String, usize>,
    pods: Vec<String>,
    pacing: LeasePacing,
    /// Per core, the seq of its last DC report (what a DC lease answers).
    last_report_seq: Vec<Option<u64>>,
    /// Per (pod, limit), the version the pod holds.
    held: BTreeMap<(usize, usize), LeaseVersion>,
    pod_seq: Vec<u64>,
    /// Per pod, where each report item found its view last time (as the manager keeps them).
    view_places: Vec<Vec<PlaceHint>>,
    next_dc_lease: u64,
    /// Leases delivered per (pod, limit) since the last read.
    delivered: Vec<u32>,
    /// The cores' DC reports since the last tick's flush.
    dc_reports: Vec<wire::DcReport>,
    timed: Duration,
}

impl Dc {
    fn new(limits: usize, pods: usize) -> Dc {
        let limits: Vec<String> = (0..limits).map(|i| format!("api-{i}")).collect();
        let cores_n = limits.len();
        let cores = limits
            .iter()
            .map(|l| {
                let mut core = DcManagerCore::new(DcManagerConfig::new(l, DC, "bkk-m"), 0);
                core.on_floor(Quota::per_s(100, 100), LeaseVersion::new(1, 1), 0);
                core
            })
            .collect();
        Dc {
            cores,
            index: limits.iter().enumerate().map(|(i, l)| (l.clone(), i)).collect(),
            last_report_seq: vec![None; limits.len()],
            limits,
            pods: (0..pods).map(|i| format!("{DC}-pod{i}")).collect(),
            pacing: LeasePacing::new(1_000, TICK_MS),
            held: BTreeMap::new(),
            pod_seq: vec![0; pods],
            view_places: vec![Vec::new(); pods],
            next_dc_lease: 2,
            delivered: vec![0; cores_n * pods],
            dc_reports: Vec::new(),
            timed: Duration::ZERO,
        }
    }

    /// The manager's handling of `out` from core `limit`.
    fn route(&mut self, limit: usize, out: Vec<DcOutput>) {
        for o in out {
            match o {
                DcOutput::PodLease(l) => self.pacing.push(l),
                DcOutput::Report(r) => {
                    self.last_report_seq[limit] = Some(r.seq);
                    self.dc_reports.push(r);
                }
                DcOutput::ReturnAck(_) => {}
            }
        }
    }

    /// Sends what the pacing says is due (timed), and the pods take their leases (not timed).
    fn flush(&mut self, now: u64, on_tick: bool) {
        let started = Instant::now();
        let due = self.pacing.take_due(now, on_tick);
        let encoded: Vec<_> = due.iter().map(|(_, leases)| wire::encode_batches(leases, 1 << 20)).collect();
        let reports = on_tick.then(|| wire::encode_batches(&std::mem::take(&mut self.dc_reports), 1 << 20));
        self.timed += started.elapsed();
        std::hint::black_box((encoded, reports));
        for (pod, leases) in due {
            let p: usize = pod.rsplit("pod").next().and_then(|n| n.parse().ok()).expect("pod ids are <dc>-pod<i>");
            for l in leases {
                let limit = self.index[l.limit.as_str()];
                self.held.insert((p, limit), l.version);
                self.delivered[p * self.limits.len() + limit] += 1;
            }
        }
    }

    fn tick(&mut self, now: u64, dc_leases: bool) {
        let started = Instant::now();
        for i in 0..self.cores.len() {
            let out = self.cores[i].tick(now);
            self.route(i, out);
            if let Some(basis_seq) = self.last_report_seq[i].filter(|_| dc_leases) {
                self.next_dc_lease += 1;
                let lease = DcLease {
                    v: SCHEMA_VERSION,
                    limit: self.limits[i].clone(),
                    dc: DC.into(),
                    holder: "bkk-m".into(),
                    version: LeaseVersion::new(1, self.next_dc_lease),
                    lease_id: format!("dc-{}", self.next_dc_lease),
                    quota: Quota::per_s(1_000, 1_000),
                    floor: Quota::per_s(100, 100),
                    ttl_ms: DC_TTL_MS,
                    basis_seq,
                    predecessor: None,
                };
                if let Ok(out) = self.cores[i].on_dc_lease(&lease, now) {
                    self.route(i, out);
                }
            }
        }
        self.timed += started.elapsed();
        self.flush(now, true);
    }

    /// Pod `p`'s report batch: every limit, confirming the lease it holds.
    fn report(&mut self, p: usize, now: u64) {
        self.pod_seq[p] += 1;
        let reports: Vec<PodReport> = (0..self.limits.len())
            .map(|l| PodReport {
                v: SCHEMA_VERSION,
                limit: self.limits[l].clone(),
                dc: DC.into(),
                pod: self.pods[p].clone(),
                incarnation: 7,
                seq: self.pod_seq[p],
                interval_ms: 1_000,
                offered: 40,
                admitted: 40,
                rejected: 0,
                queued: 0,
                errors: 0,
                upstream_429: 0,
                healthy: true,
                draining: false,
                weight: 1.0,
                lease_in_use: self.held.get(&(p, l)).copied(),
                periods: 4,
                held: None,
            })
            .collect();
        let payload = wire::encode(&PodReports::new(DC, &self.pods[p], reports));
        let started = Instant::now();
        let batch = wire::decode_pod_reports(&payload).expect("a batch this bench wrote");
        self.pacing.note_report_interval(&batch.pod, 1_000);
        let mut places = std::mem::take(&mut self.view_places[p]);
        places.resize(batch.reports.len(), PlaceHint::NOWHERE);
        for (r, place) in batch.reports.iter().zip(&mut places) {
            let i = self.index[&r.limit];
            let out = self.cores[i].on_pod_report_at(place, r, now);
            self.route(i, out);
        }
        self.view_places[p] = places;
        self.timed += started.elapsed();
        self.flush(now, false);
    }

    /// One second: four ticks (the first with DC leases), every pod's report spread between them.
    fn second(&mut self, start: u64) {
        let pods = self.pods.len();
        for t in 0..4u64 {
            let tick_at = start + t * TICK_MS * MS;
            self.tick(tick_at, t == 0);
            let (from, to) = (pods * t as usize / 4, pods * (t as usize + 1) / 4);
            for (n, p) in (from..to).enumerate() {
                let at = tick_at + 1 + (n as u64 * TICK_MS * MS) / (to - from).max(1) as u64;
                self.report(p, at);
            }
        }
    }
}

fn main() {
    leasehold_process::keep_freed_memory();
    let (limits, pods) = (env_usize("LH_BENCH_LIMITS", 1_000), env_usize("LH_BENCH_PODS", 100));
    let mut dc = Dc::new(limits, pods);
    for s in 0..WARM_S {
        dc.second(s * 1_000 * MS);
    }
    let pairs = (limits * pods) as f64;
    let mut per_pair_us = Vec::new();
    for w in 0..WINDOWS as u64 {
        dc.timed = Duration::ZERO;
        dc.delivered.iter_mut().for_each(|n| *n = 0);
        let counters = |dc: &Dc| {
            dc.cores.iter().fold((0, 0), |(f, g), c| (f + c.counters().passes_full, g + c.counters().growth_checks))
        };
        let before = counters(&dc);
        let from = WARM_S + w * WINDOW_S;
        for s in from..from + WINDOW_S {
            dc.second(s * 1_000 * MS);
        }
        let after = counters(&dc);
        let per_limit_s = |n: u64| n as f64 / limits as f64 / WINDOW_S as f64;
        let cores = dc.timed.as_secs_f64() / WINDOW_S as f64;
        let fewest = dc.delivered.iter().copied().min().unwrap_or(0);
        per_pair_us.push(cores * 1e6 / pairs);
        println!(
            "dc_manager_core: {limits} limits x {pods} pods, window {}: {:.2} us per (pod, limit) per second, \
             {cores:.3} cores at this size; per limit per second {:.2} full splits and {:.2} growth checks; \
             fewest leases a (pod, limit) got in {WINDOW_S} s: {fewest}",
            w + 1,
            cores * 1e6 / pairs,
            per_limit_s(after.0 - before.0),
            per_limit_s(after.1 - before.1),
        );
        assert!(
            u64::from(fewest) + 1 >= WINDOW_S,
            "every (pod, limit) is renewed every second: {fewest} in {WINDOW_S} s"
        );
    }
    per_pair_us.sort_by(f64::total_cmp);
    println!("dc_manager_core: median {:.2} us per (pod, limit) per second", per_pair_us[WINDOWS / 2]);
}
