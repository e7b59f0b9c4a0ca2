//! The bounded CI run and the negative controls.

use leasehold_modelcheck::explore::{explore, Limits};
use leasehold_modelcheck::presets;
use leasehold_modelcheck::trace::replay;

fn limits(max_states: usize) -> Limits {
    Limits { max_states, max_depth: 10_000, progress_every: None }
}

#[test]
fn bounded_ci_run_finds_no_violation() {
    let out = explore(&presets::ci(), &limits(150_000)).expect("valid preset");
    println!("states {} depth {} elapsed {:?}", out.states, out.max_depth, out.elapsed);
    assert!(out.counterexample.is_none(), "{:?}", out.counterexample.map(|c| c.violation));
    assert_eq!(out.states, 150_000, "the bound, not an early end, stopped the search");
    assert!(out.max_depth >= 30, "the search went past the start-up: depth {}", out.max_depth);
}

/// Audit hole 1. Not found yet: in this model a standby or the next renewal always reaches the
/// DC before its newest lease expires, within the budgets tried (see the crate's report).
#[test]
#[ignore = "the older-lease fallback is not reached within the preset's budget yet"]
fn finds_the_older_lease_fallback() {
    let out = explore(&presets::older_lease_fallback(), &limits(3_000_000)).expect("valid preset");
    let cx = out.counterexample.expect("a violation");
    assert!(cx.trace.actions.len() < 200);
    assert!(replay(&cx.trace, |_| {}).expect("replays").is_some());
}
