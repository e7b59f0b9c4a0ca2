//! The bounded CI run on the fixed cores, and one negative control per `KnownBugs` switch: each
//! must produce a short counterexample that replays, and the same model with the switch off
//! must find none within the same budget.

use leasehold_modelcheck::config::ModelConfig;
use leasehold_modelcheck::explore::{explore, Limits, Outcome};
use leasehold_modelcheck::presets;
use leasehold_modelcheck::trace::replay;

fn limits(max_states: usize) -> Limits {
    Limits { max_states, max_depth: 10_000, progress_every: None, max_stored_states: Limits::DEFAULT_MAX_STORED_STATES }
}

fn run(cfg: &ModelConfig, max_states: usize) -> Outcome {
    let out = explore(cfg, &limits(max_states)).expect("valid preset");
    println!(
        "states {} depth {} elapsed {:.1} s violation {}",
        out.states,
        out.max_depth,
        out.elapsed.as_secs_f64(),
        out.counterexample.as_ref().map_or("none".into(), |c| c.violation.to_string())
    );
    out
}

#[test]
fn bounded_ci_run_finds_no_violation() {
    let out = run(&presets::ci(), 120_000);
    assert!(out.counterexample.is_none(), "{:?}", out.counterexample.map(|c| c.trace));
    assert_eq!(out.states, 120_000, "the bound, not an early end, stopped the search");
    assert!(out.max_depth >= 25, "the search went past the first steps: depth {}", out.max_depth);
}

/// The same bound with joins and growth batched as in production (`event_pass_gap_ms` above a
/// tick: a report's split waits for the next tick), so the states the batching adds (a report
/// handled without a split, a tick that splits before it is due) are explored too.
#[test]
fn bounded_run_with_batched_splits_finds_no_violation() {
    let mut cfg = presets::ci();
    cfg.event_pass_gap_ms = 2 * cfg.tick_ms;
    let out = run(&cfg, 120_000);
    assert!(out.counterexample.is_none(), "{:?}", out.counterexample.map(|c| c.trace));
    assert_eq!(out.states, 120_000, "the bound, not an early end, stopped the search");
}

/// A limit lowered live by the leading term, with a second fault: never above the old limit,
/// within the new one from one DC-lease lifetime after the change.
#[test]
fn a_limit_lowered_live_holds_through_a_second_fault() {
    let out = run(&presets::live_lower(), 60_000);
    assert!(out.counterexample.is_none(), "{:?}", out.counterexample.map(|c| c.trace));
    assert_eq!(out.states, 60_000, "the bound, not an early end, stopped the search");
}

/// Explores `preset` with its bug switch on (a violation with a short trace that replays to the
/// same violation) and off (none within the same budget).
fn control_fires_only_with_its_switch(preset: &str, max_states: usize, max_actions: usize) {
    let buggy = presets::by_name(preset).expect("a preset");
    assert!(buggy.bugs.any(), "{preset} turns a switch on");
    let out = run(&buggy, max_states);
    let cx = out.counterexample.unwrap_or_else(|| panic!("{preset}: no violation within {max_states} states"));
    println!("{preset}: counterexample of {} actions: {}", cx.trace.actions.len(), cx.violation);
    assert!(cx.trace.actions.len() <= max_actions, "{preset}: {} actions", cx.trace.actions.len());
    let replayed = replay(&cx.trace, |_| {}).expect("the trace replays");
    assert_eq!(replayed, Some(cx.trace.actions.len()), "the violation is reached at the trace's last step");
    // The trace survives its JSON form.
    let json = serde_json::to_string(&cx.trace).expect("serialises");
    let back = serde_json::from_str(&json).expect("parses");
    assert_eq!(replay(&back, |_| {}).expect("replays"), replayed);

    let fixed = run(&presets::without_bugs(buggy), max_states);
    assert!(fixed.counterexample.is_none(), "{preset} with the switch off: {:?}", fixed.counterexample);
    assert!(fixed.states > out.states, "the fixed run explored past the point the buggy one failed");
}

/// FINDINGS F1: restart with a shorter DC-lease TTL, demand moves, DC 0's reports are lost: DC 0's
/// newest lease expires first and the manager falls back to the older, larger one.
#[test]
fn finds_the_older_lease_fallback() {
    control_fires_only_with_its_switch("older-lease", 40_000, 80);
}

/// FINDINGS F2: coordinator down, both DCs on floor + E, DC 0's manager crashes; its standby
/// spends E while the old term's pod leases (with floor + E in them) are still live.
#[test]
fn finds_the_emergency_allowance_spent_during_the_quiet_period() {
    control_fires_only_with_its_switch("emergency-quiet", 20_000, 80);
}

/// FINDINGS F3: pod 0 restarts under the same id and applies a lease that answered its previous
/// process's report 1.
#[test]
fn finds_a_restarted_pod_applying_its_previous_processs_lease() {
    control_fires_only_with_its_switch("pod-incarnation", 80_000, 120);
}

/// FINDINGS F4: a DC manager's renewal is answered late; timing its term from that answer, it acts
/// again beside the standby that claimed meanwhile.
#[test]
fn finds_a_leader_timing_its_term_from_a_late_reply() {
    control_fires_only_with_its_switch("term-from-reply", 20_000, 40);
}

/// FINDINGS F48: coordinator down, both DCs on their floors; pod 0 freezes holding term A's 6 s
/// floor lease, and a rolling restart lowers DC 0's `pod_ttl_ms` to 1.5 s. Term B, timing its wait
/// by its own TTL rather than A's term record, gives pod 1 the whole floor while pod 0's runs on.
#[test]
fn finds_a_term_that_waits_only_its_own_lowered_pod_ttl() {
    control_fires_only_with_its_switch("ttl-lowering", 100_000, 130);
}
