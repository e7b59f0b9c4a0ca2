//! The pool against a model of Envoy's `rate_limit_quota` filter, as its source behaves (see
//! docs/ENVOY.md, "RLQS: what Envoy does with an assignment"): messages apply late and in order;
//! the TTL starts when applied, on a clock that drifts; the same bucket keeps its object; a new
//! or changed bucket is a new object (full, or at the old one's fill ratio) while lagging
//! workers still drain the old one; expiry and `DENY_ALL` take effect late; a reconnect or a
//! hot restart is a new stream. Envoys take every whole token at once (the worst case), and
//! no window of their admissions may exceed R·T + B.

use super::*;
use envoy_model::{Consume, Envoy, Model};
use leasehold_core::bugs::KnownBugs;
use leasehold_core::rng::SeededRng;
use std::collections::{HashMap, VecDeque};

#[path = "rlqs_envoy_model.rs"]
mod envoy_model;

const STEP_NS: u64 = 5_000_000;
const MS: u64 = 1_000_000;

struct Run {
    /// Admissions per step, and the largest R and B any lease had.
    admitted: Vec<u64>,
    max_quota: Quota,
    sent: usize,
    /// Every lease the pod applied: when, its quota, and when it expires.
    leases: Vec<(u64, Quota, u64)>,
    /// Steps at which an Envoy bucket that had been assigned a token bucket held none.
    unassigned_steps: u64,
}

/// How the DC manager counts the pod's leases (its claim: the largest lease it counts).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Each until it expires (a pod that lends its leases never confirms a newer one).
    UntilExpiry,
    /// An older lease until the pod confirms a newer one, a report after applying it.
    UntilConfirmed { report_ns: u64 },
}

/// What the DC manager counts for the pod at each step: the largest of the leases it counts.
fn claims(run: &Run, counted: Counted) -> Vec<Quota> {
    let ends: Vec<u64> = (0..run.leases.len())
        .map(|i| {
            let (_, _, expires) = run.leases[i];
            match (counted, run.leases.get(i + 1)) {
                (Counted::UntilConfirmed { report_ns }, Some(&(next, _, _))) => expires.min(next + report_ns),
                _ => expires,
            }
        })
        .collect();
    (0..run.admitted.len() as u64)
        .map(|k| {
            let t = k * STEP_NS;
            let live = run.leases.iter().zip(&ends).filter(|((at, _, _), end)| *at <= t && t < **end);
            live.fold(Quota::ZERO, |m, ((_, q, _), _)| m.max(*q))
        })
        .collect()
}

fn claim_rates(run: &Run, counted: Counted) -> Vec<f64> {
    claims(run, counted).iter().map(|q| q.rate_milli_per_s as f64 / 1e3).collect()
}

/// The lowest level of a bucket that fills at the counted rate up to the counted burst (starting
/// empty, cut down when the burst drops) and pays for every admission: below 0, Envoy admitted
/// what the pod's claim never supplied (the per-holder condition the DC's sum rests on).
fn lowest_level(run: &Run, counted: Counted) -> f64 {
    let step_s = STEP_NS as f64 / 1e9;
    let (mut level, mut lowest) = (0.0f64, 0.0f64);
    for (c, &a) in claims(run, counted).iter().zip(&run.admitted) {
        let cap = c.burst_milli as f64 / 1e3;
        level = level.min(cap) - a as f64;
        lowest = lowest.min(level);
        level = (level + c.rate_milli_per_s as f64 / 1e3 * step_s).min(cap);
    }
    lowest
}

/// The largest excess of admissions, across every window of the run, over the rate the DC
/// manager counted in it plus the largest burst (≤ 0: held).
fn worst_excess_counted(run: &Run, counted: Counted) -> f64 {
    let rates = claim_rates(run, counted);
    let b = run.max_quota.burst_milli as f64 / 1e3;
    let step_s = STEP_NS as f64 / 1e9;
    let (mut best_start, mut sum, mut counted_sum, mut worst) = (f64::MIN, 0.0, 0.0, f64::MIN);
    for (k, &a) in run.admitted.iter().enumerate() {
        // A window starting at step k: its counted rate from t_k on, less what came before.
        best_start = best_start.max(counted_sum - sum);
        sum += a as f64;
        worst = worst.max(sum - counted_sum + best_start - b);
        counted_sum += rates[k] * step_s;
    }
    worst
}

fn worst_excess(run: &Run) -> f64 {
    worst_excess_counted(run, Counted::UntilExpiry)
}

struct Scenario {
    seed: u64,
    secs: u64,
    timing: RlqsTiming,
    bugs: KnownBugs,
    change_lease: bool,
    stalls: bool,
    /// When Envoys take tokens.
    consume: Consume,
    /// Reports at this fixed interval, each with a new demand and a busy spell of `busy_ms`
    /// right after (idle Envoys' buckets fill up before a change); otherwise at random.
    cycle: Option<(u64, u64)>,
    /// Streams break (and Envoys restart) with this chance per 5 ms step.
    break_chance: f64,
    /// How long the issuer stalls, when it does (ms).
    stall_ms: (u64, u64),
    quota: Quota,
    /// The pod's lease is renewed until then (seconds), and never again.
    lease_stops_at_s: Option<u64>,
    /// The lease alternates between 100/s and 130/s this often (seconds).
    swing_every_s: Option<u64>,
}

fn run(s: &Scenario) -> Run {
    let mut rng = SeededRng::new(s.seed);
    let margin_ns = s.timing.delivery_margin_ms * MS;
    let mut model = Model {
        rng: rng.fork(1),
        objects: Vec::new(),
        envoys: Vec::new(),
        next_stream: 0,
        delay_max_ns: margin_ns * 5 / 10,
        lag_max_ns: margin_ns * 5 / 10,
        consume: s.consume,
    };
    let drift = s.timing.clock_drift_percent as f64 / 100.0;
    for _ in 0..rng.range_u64(1, 4) {
        model.next_stream += 1;
        let clock_rate = 1.0 + drift * (2.0 * rng.next_f64() - 1.0);
        let stream = model.next_stream;
        model.envoys.push(Envoy {
            stream,
            clock_rate,
            buckets: HashMap::new(),
            inbox: VecDeque::new(),
            last_apply_ns: 0,
            busy_until_ns: 0,
            demand_per_s: 10.0,
        });
    }
    let buckets = ["a", "b"];
    // (100, 8): a shrink of the burst alone, which the older lease's expiry can catch mid-change.
    let quotas =
        [Quota::per_s(100, 40), Quota::per_s(60, 10), Quota::per_s(150, 60), Quota::per_s(20, 4), Quota::per_s(100, 8)];
    let mut quota = s.quota;
    let mut max_quota = quota;
    let mut pool = RlqsPool::new(s.timing, s.bugs, 0);
    let mut run = Run { admitted: Vec::new(), max_quota, sent: 0, leases: Vec::new(), unassigned_steps: 0 };
    let (mut next_lease_ns, mut next_report_ns, mut stalled_until_ns) = (0, 0, 0);
    let end_ns = s.secs * 1_000_000_000;
    let mut now_ns = 0;
    while now_ns < end_ns {
        if now_ns >= next_lease_ns {
            if let Some(every_s) = s.swing_every_s {
                // The lease moves between two sizes, as the DC's split follows demand.
                let up = (now_ns / 1_000_000_000 / every_s) % 2 == 1;
                quota = if up { Quota::per_s(130, 52) } else { Quota::per_s(100, 40) };
                max_quota = max_quota.max(quota);
            } else if s.change_lease && rng.chance(0.15) {
                quota = quotas[rng.range_u64(0, quotas.len() as u64 - 1) as usize];
                max_quota = max_quota.max(quota);
            }
            // Now and then the pod's lease lapses (its DC manager is away).
            let stopped = s.lease_stops_at_s.is_some_and(|at| now_ns >= at * 1_000_000_000);
            let lapses = s.change_lease && rng.chance(0.05);
            if !(stopped || lapses) {
                pool.set_lease(Some((quota, now_ns + 5_000 * MS)), now_ns);
                run.leases.push((now_ns, quota, now_ns + 5_000 * MS));
            }
            next_lease_ns = now_ns + 1_000 * MS;
        }
        if now_ns >= next_report_ns {
            for e in 0..model.envoys.len() {
                let envoy = &mut model.envoys[e];
                if let Some((_, busy_ms)) = s.cycle {
                    envoy.demand_per_s = rng.range_u64(1, 200) as f64;
                    envoy.busy_until_ns = now_ns + busy_ms * MS;
                } else if rng.chance(0.3) {
                    envoy.demand_per_s = rng.range_u64(1, 200) as f64;
                    envoy.busy_until_ns = now_ns + rng.range_u64(0, 4_000) * MS;
                }
                let requests = (envoy.demand_per_s * 5.0) as u64;
                for b in buckets.iter().take(1 + (envoy.stream % 2) as usize) {
                    pool.report(BucketRef { stream: envoy.stream, bucket: b.to_string() }, requests, 0, now_ns);
                }
            }
            next_report_ns = now_ns + s.cycle.map_or_else(|| rng.range_u64(500, 5_000), |c| c.0) * MS;
        }
        // A stream breaks and the Envoy comes back on a new one, or restarts (buckets gone).
        if rng.chance(s.break_chance) {
            let e = rng.range_u64(0, model.envoys.len() as u64 - 1) as usize;
            pool.close_stream(model.envoys[e].stream);
            model.next_stream += 1;
            model.envoys[e].stream = model.next_stream;
            if rng.chance(0.5) {
                // What was still on its way is lost with the stream (a change, a revoke).
                model.envoys[e].inbox.clear();
            }
            if rng.chance(0.5) {
                model.envoys[e].buckets.clear();
            }
        }
        if s.stalls && now_ns >= stalled_until_ns && rng.chance(0.002) {
            stalled_until_ns = now_ns + rng.range_u64(s.stall_ms.0, s.stall_ms.1) * MS;
        }
        if now_ns >= stalled_until_ns && now_ns % (20 * MS) == 0 {
            for (key, a) in pool.tick(now_ns) {
                run.sent += 1;
                model.send(key.stream, key.bucket, a, now_ns);
            }
        }
        run.admitted.push(model.step(now_ns));
        let unassigned = model.envoys.iter().flat_map(|e| e.buckets.values()).filter(|b| b.current.is_none());
        run.unassigned_steps += unassigned.count() as u64;
        now_ns += STEP_NS;
    }
    run.max_quota = max_quota;
    run
}

fn scenario(seed: u64) -> Scenario {
    let consume = [Consume::Always, Consume::Spells, Consume::DuringChanges][seed as usize % 3];
    Scenario {
        seed,
        secs: 60,
        timing: RlqsTiming { min_change_ms: 200, change_threshold_percent: 5, ..RlqsTiming::default() },
        bugs: KnownBugs::default(),
        change_lease: seed.is_multiple_of(2),
        stalls: !seed.is_multiple_of(3),
        consume,
        cycle: (consume == Consume::DuringChanges).then_some((250, 0)),
        break_chance: 0.001,
        stall_ms: (200, 3_000),
        quota: Quota::per_s(100, 40),
        lease_stops_at_s: None,
        swing_every_s: None,
    }
}

#[test]
fn envoys_never_admit_more_than_the_lease_in_any_window() {
    let mut total_sent = 0;
    for seed in 0..60 {
        let run = run(&scenario(seed));
        total_sent += run.sent;
        let excess = worst_excess(&run);
        assert!(excess <= 1e-6, "seed {seed}: {excess:.2} tokens over R·T + B ({})", run.max_quota);
        let lowest = lowest_level(&run, Counted::UntilExpiry);
        assert!(lowest >= -1e-6, "seed {seed}: {lowest:.2} tokens below the counted claim's bucket");
    }
    assert!(total_sent > 1_000, "the pool sent assignments ({total_sent})");
}

#[test]
fn envoys_are_given_most_of_a_steady_lease() {
    let mut s = scenario(1);
    s.change_lease = false;
    s.stalls = false;
    s.break_chance = 0.0;
    s.consume = Consume::Always;
    let run = run(&s);
    let admitted: u64 = run.admitted.iter().sum();
    // 80% of the rate is lent; streams that break start again from an empty reserve.
    assert!(admitted as f64 > 0.7 * 60.0 * 100.0, "admitted {admitted} in 60 s of 100/s");
}

fn caught(bugs: KnownBugs, tune: impl Fn(&mut Scenario)) -> Option<(u64, f64)> {
    (0..60).find_map(|seed| {
        let mut s = scenario(seed);
        s.bugs = bugs;
        tune(&mut s);
        let excess = worst_excess(&run(&s));
        (excess > 1e-6).then_some((seed, excess))
    })
}

#[test]
fn a_late_renewal_taken_as_free_is_caught() {
    let bugs = KnownBugs { rlqs_late_renewal_free: true, ..KnownBugs::default() };
    let found = caught(bugs, |s| {
        s.stalls = true;
        s.stall_ms = (1_000, 1_400);
        s.consume = Consume::Always;
        s.break_chance = 0.0;
        s.change_lease = false;
        s.quota = Quota::per_s(20, 200);
        s.timing.ttl_s = 1;
        s.timing.reserve_percent = 1;
    });
    assert!(found.is_some(), "no seed went over with late renewals free");
}

#[test]
fn a_new_bucket_not_paid_for_is_caught() {
    let bugs = KnownBugs { rlqs_new_bucket_unpaid: true, ..KnownBugs::default() };
    let found = caught(bugs, |s| {
        s.consume = Consume::Always;
        s.quota = Quota::per_s(100, 200);
        s.change_lease = false;
        s.break_chance = 0.01;
    });
    assert!(found.is_some(), "no seed went over with new buckets free");
}

#[test]
fn a_renewal_arrives_before_its_predecessor_can_expire() {
    let t = RlqsTiming::default();
    t.validate().unwrap();
    let too_slow = RlqsTiming { renew_every_ms: 600, ..t };
    assert!(too_slow.validate().unwrap_err().to_string().contains("earliest expiry"));
    assert_eq!(t.ttl_within(0, 500 * MS + 2_030 * MS), 2);
    assert_eq!(t.ttl_within(0, 500 * MS + 2_000 * MS), 1, "drift leaves less than 2 s");
    assert_eq!(t.ttl_within(0, 1_400 * MS), 0);
}

#[test]
fn nothing_is_admitted_once_the_pods_lease_has_ended() {
    for seed in 0..6 {
        let mut s = scenario(seed);
        s.consume = Consume::Always;
        s.change_lease = false;
        s.secs = 20;
        s.lease_stops_at_s = Some(8);
        let run = run(&s);
        // The last lease was given at 7 s and ran 5 s.
        let after_end: u64 = run.admitted[(12_000 * MS / STEP_NS) as usize..].iter().sum();
        let before: u64 = run.admitted[..(7_000 * MS / STEP_NS) as usize].iter().sum();
        assert!(before > 0, "seed {seed}: the Envoys were admitting before");
        assert_eq!(after_end, 0, "seed {seed}: admitted after the lease ended");
    }
}

/// Why a pod that lends its lease must never confirm a newer one (`PodCore::never_confirm`): the
/// DC manager would stop counting the older, larger lease a report later, while Envoy may spend
/// buckets cut from it until they expire (found by review: a shrink from 100/s to 20/s, Envoy at
/// 80/s for two more seconds).
#[test]
fn counted_only_until_a_newer_lease_is_confirmed_the_lent_buckets_go_over() {
    let over = (0..60).find_map(|seed| {
        let mut s = scenario(seed);
        s.change_lease = true;
        s.consume = Consume::Always;
        let run = run(&s);
        assert!(worst_excess_counted(&run, Counted::UntilExpiry) <= 1e-6, "seed {seed} over even counted to expiry");
        let excess = worst_excess_counted(&run, Counted::UntilConfirmed { report_ns: 250 * MS });
        (excess > 1e-6).then_some((seed, excess))
    });
    assert!(over.is_some(), "no seed went over the claim of a pod that confirms newer leases");
}

#[test]
fn lending_under_a_larger_lease_than_the_one_in_force_is_caught() {
    let bugs = KnownBugs { rlqs_keeps_largest_lease: true, ..KnownBugs::default() };
    let found = caught(bugs, |s| {
        s.change_lease = true;
        s.consume = Consume::Always;
    });
    assert!(found.is_some(), "no seed went over with the largest lease kept");
}

/// A lease that moves (the DC's split following demand) changes every bucket, and a change must
/// not leave Envoy without an assignment (it denies everything meanwhile).
#[test]
fn envoy_keeps_an_assignment_while_the_lease_moves() {
    for seed in 0..6 {
        let mut s = scenario(seed);
        s.consume = Consume::Always;
        s.change_lease = false;
        s.stalls = false;
        s.break_chance = 0.0;
        s.swing_every_s = Some(3);
        s.secs = 30;
        let run = run(&s);
        let steps = run.admitted.len() as u64;
        assert!(worst_excess(&run) <= 1e-6, "seed {seed}: over R·T + B");
        // Once assigned, a bucket is never without an assignment: a change that cannot be paid
        // for yet leaves the old one renewed, and a shrink is met by changes within the older
        // lease, which the DC manager still counts (before this, 960 bucket-steps of 6,000).
        println!("seed {seed}: {} bucket-steps without an assignment in {steps} steps", run.unassigned_steps);
        assert_eq!(run.unassigned_steps, 0, "seed {seed}: a bucket was left without an assignment");
    }
}

/// Changes while the counted burst drops (an older lease with a larger burst expires): what the
/// buckets may hold, replaced ones included, never exceeds the burst counted at that instant. (A
/// review found the case of 10 buckets of 8 changed to 5 just before such an expiry, 130 held
/// against 100; `fits` now checks it. This run does not reach that timing: it passes without
/// the check too.)
#[test]
fn what_buckets_hold_while_a_change_settles_fits_a_burst_that_drops() {
    let timing = RlqsTiming::default();
    let mut pool = RlqsPool::new(timing, KnownBugs::default(), 0);
    let buckets: Vec<BucketRef> = (0..10).map(|i| BucketRef { stream: i, bucket: "b".into() }).collect();
    let leases = [
        (0, Quota::per_s(100, 200), 6_000),
        (4_800, Quota::per_s(100, 160), 6_000),
        (5_000, Quota::per_s(100, 100), 10_000),
    ];
    let (mut sent, mut checked) = (0, 0);
    for step in 0..=400u64 {
        let now = step * 20 * MS;
        for &(at, q, expires) in &leases {
            if now == at * MS {
                pool.set_lease(Some((q, expires * MS)), now);
            }
        }
        if step == 0 {
            for b in &buckets {
                pool.report(b.clone(), 1, 0, now);
            }
        }
        sent += pool.tick(now).len();
        let held = pool.live.at(now).burst_milli;
        let claim = pool.claim(now).burst_milli;
        assert!(held <= claim, "at {} ms the buckets hold {held} milli-tokens, the claim's burst is {claim}", now / MS);
        checked += 1;
    }
    assert!(sent > 100 && checked > 0, "the pool lent ({sent} assignments)");
}
