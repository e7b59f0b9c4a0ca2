//! A seeded, deterministic adversary for the real `DcManagerCore` (and real `PodCore`s) against
//! a local oracle of what the coordinator may stop counting (written by an outside review of
//! the counted-ends rule, which found no hole with it in about 14,000 seeds: docs/FINDINGS.md#f29).
//! A regression net with negative controls: each control brings back a known hole and must be
//! caught. The adversary plays the coordinator for one DC:
//! * DC leases with arbitrary quotas (0–1,000/s) and TTLs (2–16 s, so ends arrive out of
//!   version order, as after a takeover that changed `dc_ttl_ms`), answering any of the last
//!   seven reports (old bases), delayed up to 3 s, 10% lost, carrying the floor named when
//!   issued (so a delayed lease carries an older floor);
//! * floors named at random (0/100/300/500/s, lowered or raised), delivered in order with
//!   delays; an older floor stops being reserved only when a report's `floor_in_use` fits the
//!   newest and its `floor_version` is at least the newest's (as `confirm_floor`);
//! * one manager-term switch after 8 s (a new instance, epoch 2, the first term's bounds inherited), the
//!   old term's last pass flushed late to the pods (up to 3 s);
//! * three pods with changing demand and health, 10% of reports lost, manager→pod direction
//!   toggled deaf; optionally pod clocks drifting up to ±0.98% against the manager's.
//!
//! Oracle (every 10 ms): the pods' applied, unexpired leases sum to at most the floor still
//! reserved + for each manager term, the largest DC lease issued to it that has not ended on
//! the manager's clock (`basis send + ttl`) and was not released by an ack sent before then.
//! In best-effort mode the emergency allowance is added (the documented overshoot).
use leasehold_core::dc_manager::DcOutput;
use leasehold_core::pod::{IntervalCounters, PodCore};
use leasehold_core::quota::Quota;
use leasehold_core::rng::SeededRng;
use leasehold_core::wire::{DcLease, LeaseVersion, SCHEMA_VERSION};

use crate::support;
use support::{manager_with_bugs, pod, MS, S};

thread_local! { static FR: std::cell::RefCell<Vec<(u64, Quota, Option<LeaseVersion>)>> = const { std::cell::RefCell::new(Vec::new()) }; }
struct Issued {
    version: LeaseVersion,
    quota: Quota,
    end: u64,
    h: usize,
}
thread_local! { static H: std::cell::Cell<usize> = const { std::cell::Cell::new(0) }; }

#[derive(Clone, Copy, Default)]
struct Mode {
    be: bool,
    demand: bool,
    drift: bool,
    bug: Option<&'static str>,
}

fn run(seed: u64, mode: Mode, verbose: bool) -> Option<String> {
    let mut rng = SeededRng::new(seed);
    let prate: [f64; 3] = std::array::from_fn(|_| if mode.drift { 0.990_2 + 0.019_6 * rng.next_f64() } else { 1.0 });
    let pc = move |k: usize, t: u64| (t as f64 * prate[k]) as u64;
    let mut b = leasehold_core::bugs::KnownBugs::default();
    match mode.bug {
        Some("outlive") => b.pod_lease_outlives_counted_dc_lease = true,
        Some("ack") => b.ack_by_amount_only = true,
        Some("reuse") => b.renewal_reuses_inherited_claim = true,
        Some("fallback") => b.dc_falls_back_to_older_lease = true,
        _ => {}
    }
    let mut mgr = manager_with_bugs("eu", "eu-m1", 1, 0, b);
    let be = mode.be;
    let em = Quota::per_s(150, 3);
    if be {
        let mut cfg = mgr.config().clone();
        cfg.fail_mode = leasehold_core::dc_manager::FailMode::BestEffort { emergency: em };
        if mode.demand {
            cfg.split = leasehold_core::dc_manager::SplitMode::Demand;
        }
        mgr = leasehold_core::dc_manager::DcManagerCore::new(cfg, 0);
    }
    let fl = [0u64, 100, 300][rng.range_u64(0, 2) as usize];
    let floor = Quota::per_s(fl, fl / 50);
    let mut pods: Vec<PodCore> = (0..3).map(|i| pod("eu", &format!("p{i}"))).collect();
    let mut deaf = [false; 3];
    let mut unhealthy = [false; 3];
    let mut offered = [2000u64; 3];
    let mut reports: Vec<(u64, u64)> = Vec::new(); // (seq, sent)
    let mut issued: Vec<Issued> = Vec::new();
    let mut acks: Vec<(u64, LeaseVersion, usize)> = Vec::new();
    let mut late: Vec<(u64, Vec<DcOutput>)> = Vec::new();
    let mut switched = false;
    H.with(|h| h.set(0));
    let mut inflight: Vec<(u64, DcLease)> = Vec::new();
    let mut seq = 0u64;
    let mut log: Vec<String> = Vec::new();
    let _ = mgr.on_floor(floor, LeaseVersion::new(1, 0), 0);
    let mut floors: Vec<(LeaseVersion, Quota, Option<u64>)> = vec![(LeaseVersion::new(1, 0), floor, None)];
    let mut floor_q: Vec<(u64, Quota, LeaseVersion)> = Vec::new();
    let mut floor = floor;
    let mut t = 0u64;
    let route = move |out: Vec<DcOutput>,
                      pods: &mut Vec<PodCore>,
                      deaf: &[bool; 3],
                      t: u64,
                      log: &mut Vec<String>,
                      reports: &mut Vec<(u64, u64)>,
                      acks: &mut Vec<(u64, LeaseVersion, usize)>| {
        for o in out {
            match o {
                DcOutput::PodLease(l) => {
                    let i: usize = l.pod[1..].parse().unwrap();
                    log.push(format!(
                        "{:.3} grant {} {} {} ttl {} {}",
                        t as f64 / 1e9,
                        l.pod,
                        l.version,
                        l.quota,
                        l.ttl_ms,
                        if deaf[i] { "LOST" } else { "" }
                    ));
                    if !deaf[i] {
                        let _ = pods[i].on_lease(&l, pc(i, t));
                    }
                }
                DcOutput::Report(r) => {
                    reports.push((r.seq, t));
                    if let Some(v) = r.lease_in_use {
                        acks.push((t, v, H.with(|h| h.get())));
                    }
                    if let Some(f) = r.floor_in_use {
                        FR.with(|x| x.borrow_mut().push((t, f, r.floor_version)));
                    }
                    log.push(format!(
                        "{:.3} report seq {} ack {:?} floor_in_use {:?}",
                        t as f64 / 1e9,
                        r.seq,
                        r.lease_in_use,
                        r.floor_in_use
                    ));
                }
                _ => {}
            }
        }
    };
    while t < 60 * S {
        for k in 0..3 {
            if rng.chance(0.03) {
                deaf[k] = !deaf[k];
            }
            if rng.chance(0.03) {
                unhealthy[k] = !unhealthy[k];
            }
            if rng.chance(0.05) {
                offered[k] = [0, 50, 200, 2000][rng.range_u64(0, 3) as usize];
            }
            let c = IntervalCounters { offered: offered[k], admitted: offered[k].min(100), ..Default::default() };
            let r = pods[k].report(pc(k, t), c, !unhealthy[k]);
            if rng.chance(0.1) {
                continue;
            }
            let out = mgr.on_pod_report(&r, t);
            route(out, &mut pods, &deaf, t, &mut log, &mut reports, &mut acks);
        }
        if t.is_multiple_of(500 * MS) {
            let out = mgr.tick(t);
            route(out, &mut pods, &deaf, t, &mut log, &mut reports, &mut acks);
        }
        if !switched && t > 8 * S && rng.chance(0.02) {
            switched = true;
            let out: Vec<DcOutput> = mgr.tick(t).into_iter().filter(|o| matches!(o, DcOutput::PodLease(_))).collect();
            late.push((t + rng.range_u64(0, 12) * 250 * MS, out));
            let mut cfg = mgr.config().clone();
            cfg.instance = "eu-m2".into();
            cfg.epoch = 2;
            // The first term's record: its pod leases' bounds (the same TTL here).
            cfg.inherited = Some(leasehold_core::dc_manager::PodLeaseBounds::of(&cfg));
            mgr = leasehold_core::dc_manager::DcManagerCore::new(cfg, t);
            H.with(|h| h.set(1));
            reports.clear();
            let (nv, nq, _) = *floors.last().unwrap();
            let _ = mgr.on_floor(nq, nv, t);
            log.push(format!("{:.3} manager switch to eu-m2", t as f64 / 1e9));
        }
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut late).into_iter().partition(|(a, _)| *a <= t);
        late = rest;
        for (_, out) in due {
            route(out, &mut pods, &deaf, t, &mut log, &mut reports, &mut acks);
        }
        // fake coordinator: floor reports
        for (tr, f, fv) in FR.with(|x| std::mem::take(&mut *x.borrow_mut())) {
            let (nv, nq, _) = *floors.last().unwrap();
            if f.fits_in(&nq) && fv.is_some_and(|v| v >= nv) {
                for e in floors.iter_mut() {
                    if e.0 < nv && e.2.is_none() {
                        e.2 = Some(tr);
                        log.push(format!("{:.3} coord releases floor {} {}", tr as f64 / 1e9, e.0, e.1));
                    }
                }
            }
        }
        if rng.chance(0.03) {
            let fl = [0u64, 100, 300, 500][rng.range_u64(0, 3) as usize];
            seq += 1;
            let v = LeaseVersion::new(1, seq);
            floor = Quota::per_s(fl, fl / 50);
            floors.push((v, floor, None));
            let d = if rng.chance(0.5) { rng.range_u64(0, 12) * 250 * MS } else { 0 };
            let at = floor_q.last().map_or(t + d, |x| x.0.max(t + d));
            floor_q.push((at, floor, v));
            log.push(format!("{:.3} coord names floor {} {}", t as f64 / 1e9, v, floor));
        }
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut floor_q).into_iter().partition(|(a, _, _)| *a <= t);
        floor_q = rest;
        for (_, f, v) in due {
            let out = mgr.on_floor(f, v, t);
            log.push(format!("{:.3} mgr reads floor {} {}", t as f64 / 1e9, v, f));
            route(out, &mut pods, &deaf, t, &mut log, &mut reports, &mut acks);
        }
        // fake coordinator: issue a lease sometimes
        if rng.chance(0.25) && !reports.is_empty() {
            let back = rng.range_u64(0, 6.min(reports.len() as u64 - 1)) as usize;
            let (bseq, bsent) = reports[reports.len() - 1 - back];
            let ttl = [2_000u64, 4_000, 10_000, 16_000, 3_000][rng.range_u64(0, 4) as usize];
            let qr = [0u64, 100, 300, 600, 1000][rng.range_u64(0, 4) as usize];
            seq += 1;
            let version = LeaseVersion::new(1, seq);
            let quota = Quota::per_s(qr, qr / 50);
            let hh = H.with(|h| h.get());
            issued.push(Issued { version, quota, end: bsent + ttl * MS, h: hh });
            let l = DcLease {
                v: SCHEMA_VERSION,
                limit: "api".into(),
                dc: "eu".into(),
                holder: format!("eu-m{}", hh + 1),
                version,
                lease_id: format!("x{seq}"),
                quota,
                floor,
                ttl_ms: ttl,
                basis_seq: bseq,
                predecessor: None,
            };
            log.push(format!(
                "{:.3} coord issues {} {} ends {:.3}",
                t as f64 / 1e9,
                version,
                quota,
                (bsent + ttl * MS) as f64 / 1e9
            ));
            if !rng.chance(0.1) {
                let d = if rng.chance(0.5) { rng.range_u64(0, 12) * 250 * MS } else { 0 };
                inflight.push((t + d, l));
            }
        }
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut inflight).into_iter().partition(|(a, _)| *a <= t);
        inflight = rest;
        for (_, l) in due {
            match mgr.on_dc_lease(&l, t) {
                Ok(out) => {
                    log.push(format!("{:.3} mgr accepts {}", t as f64 / 1e9, l.version));
                    route(out, &mut pods, &deaf, t, &mut log, &mut reports, &mut acks)
                }
                Err(e) => log.push(format!("{:.3} mgr refuses {}: {e}", t as f64 / 1e9, l.version)),
            }
        }
        for k in 0..25 {
            let now = t + k * 10 * MS;
            let held = pods
                .iter()
                .enumerate()
                .filter_map(|(k, p)| p.applied(pc(k, now)))
                .fold(Quota::ZERO, |s, a| s.saturating_add(a.quota));
            let cnt = |hh: usize| {
                issued
                    .iter()
                    .filter(|l| {
                        l.h == hh
                            && l.end > now
                            && !acks.iter().any(|(ta, v, ah)| *ah == hh && l.version < *v && *ta <= now)
                    })
                    .fold(Quota::ZERO, |m, l| m.max(l.quota))
            };
            let counted = cnt(0).saturating_add(cnt(1));
            let fres = floors.iter().filter(|e| e.2.is_none_or(|r| now < r)).fold(Quota::ZERO, |m, e| m.max(e.1));
            let allowed = fres.saturating_add(counted).saturating_add(if be { em } else { Quota::ZERO });
            if !held.fits_in(&allowed) {
                if verbose {
                    for l in &log {
                        println!("{l}");
                    }
                }
                let ps: Vec<String> = pods
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        p.applied(pc(k, now)).map_or("-".into(), |a| {
                            format!("{} {} exp {:.3}", a.quota, a.version, a.expires_at_ns as f64 / 1e9)
                        })
                    })
                    .collect();
                return Some(format!(
                    "seed {seed} at {:.3}s pods hold {held} > floor {fres} + counted {counted}: {ps:?}",
                    now as f64 / 1e9
                ));
            }
        }
        t += 250 * MS;
    }
    None
}

fn sweep(mode: Mode, first: u64, n: u64) -> Vec<String> {
    let mut bad = Vec::new();
    for s in first..first + n {
        if let Some(m) = run(s, mode, false) {
            bad.push(m);
            if bad.len() > 5 {
                break;
            }
        }
    }
    bad
}

const SEEDS: u64 = 150;

#[test]
fn pods_stay_within_the_floor_and_the_dc_leases_still_counted_strict() {
    let bad = sweep(Mode::default(), 0, SEEDS);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn pods_stay_within_the_floor_and_the_dc_leases_still_counted_with_pod_clock_drift() {
    let bad = sweep(Mode { drift: true, ..Default::default() }, 1_000, SEEDS);
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn best_effort_overshoot_stays_within_the_emergency_allowance() {
    let bad = sweep(Mode { be: true, ..Default::default() }, 2_000, SEEDS);
    assert!(bad.is_empty(), "{bad:#?}");
    let bad = sweep(Mode { be: true, demand: true, drift: true, bug: None }, 3_000, SEEDS);
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Negative controls: the same adversary catches holes earlier reviews found.
#[test]
fn the_adversary_catches_known_holes() {
    for bug in ["outlive", "ack", "fallback"] {
        let bad = sweep(Mode { bug: Some(bug), ..Default::default() }, 0, SEEDS);
        assert!(!bad.is_empty(), "known hole {bug} not caught");
    }
}

/// `SEEDS=n FIRST=k [BE=1] [DEM=1] [DRIFT=1] [SHOW=seed] cargo test --release -p leasehold-core
/// --test integration dc_manager_adversary -- --ignored --nocapture`: a longer search (200 seeds by default).
#[test]
#[ignore]
fn search() {
    let n: u64 = std::env::var("SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let first: u64 = std::env::var("FIRST").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mode = Mode {
        be: std::env::var("BE").is_ok(),
        demand: std::env::var("DEM").is_ok(),
        drift: std::env::var("DRIFT").is_ok(),
        bug: None,
    };
    let bad = sweep(mode, first, n);
    for b in &bad {
        println!("{b}");
    }
    if let Some(s) = std::env::var("SHOW").ok().and_then(|s| s.parse().ok()) {
        println!("{:?}", run(s, mode, true));
    }
    assert!(bad.is_empty());
}
