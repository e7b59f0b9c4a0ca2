//! The simulator end to end: every scenario meets its targets on a few seeds, runs are
//! deterministic, and chaos and storm cover every fault kind with zero violations while the
//! demand overloads the limit (the uncoordinated baseline in the same run breaks it).

use leasehold_sim::faults::FaultKind;
use leasehold_sim::{run_many, run_seed, Policy, RunOptions, Scenario, Summary};

fn summary(scenario: &str, seeds: u64) -> Summary {
    let opts = RunOptions {
        scenario: scenario.into(),
        seeds,
        first_seed: 1,
        threads: 2,
        baseline_seeds: 1,
        progress: false,
        emergency_per_dc: Default::default(),
    };
    run_many(&opts).expect("known scenario").0
}

#[test]
fn diurnal_follows_the_sun_without_violations() {
    let s = summary("diurnal", 2);
    assert_eq!(s.violations, 0, "{s:?}");
    assert!(s.utilization >= 0.99, "{}", s.utilization);
    assert!(s.max_window_ratio <= 1.0);
    assert!(s.baselines["static_split"].utilization < s.utilization - 0.05, "the static split must be visibly worse");
    assert!(!s.judge_has_teeth, "diurnal demand stays below the limit: even no limit at all holds it");
    assert_eq!(s.teeth_warning(), None, "only overloaded scenarios must show teeth");
}

#[test]
fn overload_splits_fairly_and_rebalances_within_five_renew_periods() {
    let s = summary("overload", 2);
    assert_eq!(s.violations, 0, "{s:?}");
    assert!(s.utilization >= 0.95, "{}", s.utilization);
    let p99 = s.rebalance_s_p99.expect("overload has demand steps");
    assert!(p99 <= 5.0 * s.renew_s, "rebalance p99 {p99}s");
    assert!(s.baselines["uncoordinated"].violations > 0, "racing pods overrun the upstream");
}

#[test]
fn tenant_shift_moves_quota_between_regions() {
    let s = summary("tenant-shift", 2);
    assert_eq!(s.violations, 0, "{s:?}");
    assert!(s.utilization >= 0.95, "{}", s.utilization);
    assert!(s.rebalance_s_p99.expect("shifts are steps") <= 5.0 * s.renew_s);
    assert!(s.baselines["static_split"].utilization < 0.8);
}

#[test]
fn chaos_holds_the_limit_through_every_fault_and_recovers() {
    let s = summary("chaos", 12);
    assert_eq!(s.violations, 0, "failing seeds {:?}", s.failing_seeds);
    assert!(s.faults_injected_min >= 20, "{}", s.faults_injected_min);
    assert!(s.virtual_s_per_seed_min >= 600);
    for k in FaultKind::RANDOM_SCHEDULE_KINDS {
        assert!(s.faults_by_kind.get(&k).copied().unwrap_or(0) > 0, "{k:?} never injected");
    }
    assert!(s.fenced_writes > 0, "a paused leader's late write must be fenced at least once");
    // Every seed has a DC-manager failover, a TTL change and a limit change.
    assert!(s.dc_manager_failovers_min >= 1, "{}", s.dc_manager_failovers_min);
    assert!(s.config_changes_min >= 1, "{}", s.config_changes_min);
    assert!(s.limit_changes_min >= 1, "{}", s.limit_changes_min);
    // Under overload utilization is bounded by the leased rate: the hard limit less the drift
    // and jitter margins (96.6% for the 1,000/s window, 99% for the tenant). Recovery must reach
    // 97% of that ceiling.
    let ceiling = [1, 2]
        .map(|seed| {
            let sc = Scenario::chaos(seed);
            sc.quota.rate_per_s() / sc.hard.sustained_per_s() as f64
        })
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    let liveness = s.liveness_utilization_min.unwrap();
    assert!(liveness >= 0.97 * ceiling, "{liveness} below 97% of the ceiling {ceiling}");
    assert!(s.offered_over_limit >= 0.9, "{}", s.offered_over_limit);
    assert!(s.judge_has_teeth, "{:?}", s.baselines["uncoordinated"]);
    assert!(s.baselines["uncoordinated"].seeds >= 3);
    assert_eq!(s.teeth_warning(), None);
    let toothless = Summary { judge_has_teeth: false, ..s };
    assert!(toothless.teeth_warning().is_some_and(|w| w.contains("no teeth")));
}

#[test]
fn storm_holds_the_limit_while_faults_overlap() {
    let s = summary("storm", 2);
    assert_eq!(s.violations, 0, "failing seeds {:?}: {s:?}", s.failing_seeds);
    // chaos injects about 40 faults per seed (one every ~12 s); storm one every ~3 s.
    assert!(s.faults_injected_min >= 100, "{}", s.faults_injected_min);
    for k in FaultKind::RANDOM_SCHEDULE_KINDS {
        assert!(s.faults_by_kind.get(&k).copied().unwrap_or(0) > 0, "{k:?} never injected");
    }
    assert!(s.offered_over_limit >= 0.9, "{}", s.offered_over_limit);
    assert!(s.judge_has_teeth, "{:?}", s.baselines["uncoordinated"]);
    assert!(s.liveness_utilization_min.unwrap() >= 0.9, "{:?}", s.liveness_utilization_min);
}

/// Storm seed 26 broke the coordinator's books once floors carried burst (a token per pod): a
/// lost record's floor for Europe counted as lasting beside Europe's newer floor, then B went
/// down below the two (`ledger::tests::a_lost_floor_counts_in_the_total_but_not_among_what_lasts`).
#[test]
fn storm_seed_26_a_lost_floor_beside_a_newer_one_under_a_lowered_burst() {
    let r = run_seed("storm", 26, Policy::Leasehold).expect("storm");
    assert!(r.records_lost > 0, "the path: a record is lost");
    assert_eq!(r.violations, 0, "{:?}", r.first_breach);
}

#[test]
fn best_effort_overshoot_stays_within_the_emergency_allowance() {
    let opts = RunOptions {
        scenario: "chaos".into(),
        seeds: 6,
        first_seed: 1,
        threads: 2,
        baseline_seeds: 1,
        progress: false,
        emergency_per_dc: leasehold_core::quota::Quota::per_s(25, 0),
    };
    let s = run_many(&opts).unwrap().0;
    assert_eq!(s.mode, "best-effort");
    assert_eq!(s.violations, 0, "{s:?}");
    assert!(s.overshoot_measured_rate_per_s <= s.overshoot_bound_rate_per_s);
    assert!(s.overshoot_measured_rate_per_s > 0.0, "partitions should make the allowance kick in");
}

#[test]
fn a_seed_replays_exactly() {
    let a = run_seed("chaos", 7, Policy::Leasehold).unwrap();
    let b = run_seed("chaos", 7, Policy::Leasehold).unwrap();
    assert_eq!((a.events, a.upstream_calls, a.faults_total), (b.events, b.upstream_calls, b.faults_total));
    assert_eq!(a.utilization, b.utilization);
    let c = run_seed("chaos", 9, Policy::Leasehold).unwrap();
    assert_ne!(a.upstream_calls, c.upstream_calls, "different seeds differ");
}

#[test]
fn hidden_drop_follows_a_partner_that_lowers_its_limit_unannounced() {
    let s = summary("hidden-drop", 3);
    assert_eq!(s.violations, 0, "{s:?}");
    assert_eq!(s.hidden_drop.len(), 3);
    for (seed, m) in &s.hidden_drop {
        assert!(m.convergence_renew_periods <= 3.0, "seed {seed}: {m:?}");
        assert!(m.drop_429_ratio <= 0.02, "seed {seed}: {m:?}");
        assert!(m.drop_utilization >= 0.9, "seed {seed}: {m:?}");
        assert!(m.recovery_s.is_some_and(|r| r <= 30.0), "seed {seed}: {m:?}");
    }
    // Without adaptation the pods keep sending the configured R: the partner answers 429 to
    // about 4 calls in 10 throughout the drop.
    let mut fixed = Scenario::by_name("hidden-drop", 1).unwrap();
    fixed.adaptive = None;
    let r = leasehold_sim::run_scenario(fixed, 1, Policy::Leasehold);
    let m = r.hidden_drop.expect("the scenario has a hidden limit");
    assert!(m.drop_429_ratio > 0.3, "{m:?}");
    assert_eq!(r.violations, 0);
}

#[test]
fn the_other_scenarios_still_hold_with_adaptive_limits_built_in() {
    for name in ["limit-change", "rolling-restart"] {
        let s = summary(name, 1);
        assert_eq!(s.violations, 0, "{name}: {s:?}");
        assert!(s.hidden_drop.is_empty(), "{name} has no hidden limit");
    }
}

#[test]
fn tenants_of_every_tier_hold_their_own_limits_while_demand_moves_between_regions() {
    // The four largest tenants offer 6 to 1.5 times what they bought: no limit at all breaks theirs.
    let s = summary("tenants", 4);
    assert_eq!(s.violations, 0, "{s:?}");
    assert!(s.baselines["uncoordinated"].violations > 0, "the largest tenants overload their limits");
    assert!(s.utilization >= 0.9, "{}", s.utilization);
    // A business and two starter tenants, demand far below their limits: all of it is served.
    assert_eq!(s.utilization_by_variant.keys().collect::<Vec<_>>(), ["tenants/enterprise"]);
    for (seed, tier) in [(150, "business"), (5_000, "starter"), (9_999, "starter")] {
        let r = run_seed("tenants", seed, Policy::Leasehold).unwrap();
        assert_eq!(r.violations, 0, "seed {seed}: {:?}", r.first_breach);
        assert_eq!(r.variant, format!("tenants/{tier}"));
        assert!(r.utilization >= 0.95, "seed {seed} ({}): {}", r.variant, r.utilization);
    }
}

/// Quiet reports (the Rust pod's default: a limit with nothing new reports about once a second)
/// drive no safety rule: under chaos and storm faults, and with the demand moving in diurnal,
/// they hold the limit, and keep the utilization of reporting every period within 4% on average
/// over the seeds (storm, whose overlapping faults make single seeds swing: +1% to −7% over seeds
/// 1–8, −3.1% on average since rolling restarts restart every DC's standbys too) and within
/// storm's own liveness bound.
#[test]
fn quiet_reports_hold_the_limit_and_the_utilization_under_faults() {
    for (scenario, seeds) in [("chaos", 1..=3), ("storm", 1..=8), ("diurnal", 1..=1)] {
        let (mut quiet_sum, mut every_sum) = (0.0, 0.0);
        for seed in seeds {
            let every = run_seed(scenario, seed, Policy::Leasehold).unwrap();
            let quiet = leasehold_sim::run_scenario(quiet(scenario, seed), seed, Policy::Leasehold);
            let what = format!("{scenario} seed {seed}");
            eprintln!(
                "{what}: utilization {:.4} quiet, {:.4} every period; liveness {:?}, {:?}",
                quiet.utilization, every.utilization, quiet.liveness_utilization, every.liveness_utilization
            );
            assert_eq!(quiet.violations, 0, "{what}: {:?}", quiet.first_breach);
            assert_eq!(quiet.invariant_breaches, 0, "{what}: {:?}", quiet.first_breach);
            if scenario == "storm" {
                assert!(quiet.liveness_utilization.unwrap() >= 0.9, "{what}");
            }
            (quiet_sum, every_sum) = (quiet_sum + quiet.utilization, every_sum + every.utilization);
        }
        assert!(quiet_sum >= 0.96 * every_sum, "{scenario}: mean utilization {quiet_sum} against {every_sum}");
    }
}

/// `scenario` at `seed` with the Rust pod's quiet reports.
fn quiet(scenario: &str, seed: u64) -> Scenario {
    let mut sc = Scenario::by_name(scenario, seed).unwrap();
    sc.pod_quiet_ms = leasehold_core::quiet_reports::DEFAULT_MAX_QUIET_MS;
    sc
}

/// Found by review: with quiet reports, adaptive limits converged in 14–16 renew periods (a
/// report bunching a second of calls skewed the accepted rate) and rebalancing took 6 s on
/// tenant-shift (the demand average took a report of a second as one 250 ms sample). The same
/// targets as with every-period reports.
#[test]
fn quiet_reports_keep_the_adaptive_and_rebalancing_targets() {
    for seed in 1..=2 {
        let r = leasehold_sim::run_scenario(quiet("hidden-drop", seed), seed, Policy::Leasehold);
        let m = r.hidden_drop.expect("the scenario has a hidden limit");
        eprintln!("hidden-drop seed {seed}: {m:?}");
        assert_eq!(r.violations, 0);
        assert!(m.convergence_renew_periods <= 3.0, "seed {seed}: {m:?}");
        assert!(m.drop_429_ratio <= 0.02, "seed {seed}: {m:?}");
        assert!(m.drop_utilization >= 0.9, "seed {seed}: {m:?}");
        assert!(m.recovery_s.is_some_and(|r| r <= 30.0), "seed {seed}: {m:?}");
    }
    for scenario in ["tenant-shift", "overload"] {
        for seed in 1..=2 {
            let r = leasehold_sim::run_scenario(quiet(scenario, seed), seed, Policy::Leasehold);
            let p99 = p99_of(&r.rebalance_s);
            eprintln!("{scenario} seed {seed}: rebalance p99 {p99:?} s, utilization {:.4}", r.utilization);
            assert_eq!(r.violations, 0, "{scenario} seed {seed}");
            assert!(r.utilization >= 0.95, "{scenario} seed {seed}: {}", r.utilization);
            assert!(p99.is_some_and(|p| p <= 5.0), "{scenario} seed {seed}: rebalance p99 {p99:?} s");
        }
    }
}

/// The 99th percentile (nearest rank) of `xs`, if any.
fn p99_of(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64 * 0.99).ceil() as usize).max(1);
    v.get(rank - 1).copied()
}
