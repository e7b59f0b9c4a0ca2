//! Per-key limits, checked against an independent counter: never more than N in any window W,
//! and a denial's retry-after is exact (admitted then, not a millisecond before).

use leasehold_per_key::{Algorithm, KeyTable, LimitSpec, Tiers};
use proptest::prelude::*;

/// Admissions (time, cost) in `(t − w, t]`, counted from scratch.
fn in_window(admitted: &[(u64, u64)], t: u64, w: u64) -> u64 {
    admitted.iter().filter(|(a, _)| a + w > t).map(|(_, c)| c).sum()
}

proptest! {
    #[test]
    fn the_sliding_log_never_admits_more_than_n_in_any_window(
        limit in 1u64..20, window_ms in 1u64..2_000,
        steps in prop::collection::vec((0u64..400, 1u64..4), 1..300),
    ) {
        let spec = LimitSpec::sliding(limit, window_ms);
        let mut table = KeyTable::new(10);
        let (mut t, mut admitted) = (0u64, Vec::new());
        for (dt, cost) in steps {
            t += dt;
            let cost = cost.min(limit);
            let v = table.check("user-1", &spec, cost, t).unwrap();
            let before = in_window(&admitted, t, window_ms);
            if v.allowed {
                admitted.push((t, cost));
                prop_assert!(before + cost <= limit, "over-admitted at {t}: {before}+{cost} > {limit}");
                prop_assert_eq!(v.remaining, limit - before - cost);
            } else {
                // Denied only when it really would not fit, and the wait is exact.
                prop_assert!(before + cost > limit);
                let r = v.retry_after_ms;
                prop_assert!(r > 0);
                prop_assert!(in_window(&admitted, t + r, window_ms) + cost <= limit, "still full after retry_after");
                prop_assert!(in_window(&admitted, t + r - 1, window_ms) + cost > limit, "retry_after too long");
            }
        }
    }

    /// Keys with different windows share a table too small for all of them: whichever key
    /// makes room, no key is ever admitted more than its limit in its own window.
    #[test]
    fn a_full_table_with_mixed_windows_never_over_admits_a_key(
        steps in prop::collection::vec((0u64..300, 0usize..4), 1..400),
    ) {
        let specs = [
            LimitSpec::sliding(2, 60_000),
            LimitSpec::sliding(3, 1_000),
            LimitSpec::sliding(1, 250),
            LimitSpec::sliding(4, 5_000),
        ];
        let mut table = KeyTable::new(2);
        let (mut t, mut admitted) = (0u64, vec![Vec::new(); specs.len()]);
        for (dt, k) in steps {
            t += dt;
            let Ok(v) = table.check(&format!("key-{k}"), &specs[k], 1, t) else { continue };
            if v.allowed {
                admitted[k].push((t, 1));
                let used = in_window(&admitted[k], t, specs[k].window_ms);
                prop_assert!(used <= specs[k].limit, "key-{k} holds {used} > {} at {t}", specs[k].limit);
            }
        }
    }

    #[test]
    fn gcra_never_exceeds_rate_times_window_plus_burst(
        limit in 1u64..50, window_ms in 10u64..2_000, burst in 0u64..5,
        steps in prop::collection::vec(0u64..200, 1..300),
    ) {
        let spec = LimitSpec { algorithm: Algorithm::Gcra, limit, window_ms, burst };
        let mut table = KeyTable::new(10);
        let (mut t, mut admitted) = (0u64, Vec::new());
        for dt in steps {
            t += dt;
            if table.check("k", &spec, 1, t).unwrap().allowed {
                admitted.push((t, 1));
                // Any window W holds at most limit + burst + 1 (rounding of the interval upward).
                prop_assert!(in_window(&admitted, t, window_ms) <= limit + burst + 1);
            }
        }
    }
}

#[test]
fn bad_input_changes_nothing() {
    let spec = LimitSpec::sliding(3, 1_000);
    let mut table = KeyTable::new(2);
    for (key, cost) in [("", 1), ("a\u{0}b", 1), (&"k".repeat(300)[..], 1), ("ok", 0), ("ok", 4)] {
        assert!(table.check(key, &spec, cost, 0).is_err(), "{key:?} cost {cost}");
    }
    assert!(table.is_empty());
    assert!(table.check("ok", &LimitSpec::sliding(0, 1_000), 1, 0).is_err());
    assert!(table.check("ok", &LimitSpec::sliding(20_000, 1_000), 1, 0).is_err(), "a log that large must be GCRA");
}

#[test]
fn a_full_table_sheds_new_keys_but_keeps_serving_known_ones() {
    let spec = LimitSpec::sliding(3, 1_000);
    let mut table = KeyTable::new(2);
    table.check("a", &spec, 1, 0).unwrap();
    table.check("b", &spec, 1, 0).unwrap();
    assert!(table.check("c", &spec, 1, 10).is_err());
    assert!(table.check("a", &spec, 1, 10).unwrap().allowed);
    // Once a and b are idle for a window, they are swept and c gets in.
    assert!(table.check("c", &spec, 1, 1_011).unwrap().allowed);
}

#[test]
fn tiers_resolve_overrides_first_and_refuse_unknown_tiers() {
    let mut tiers = Tiers::default();
    tiers.tiers.insert("pro".into(), LimitSpec::sliding(100, 60_000));
    tiers.overrides.insert("vip".into(), LimitSpec::sliding(1_000, 60_000));
    tiers.validate().unwrap();
    assert_eq!(tiers.resolve("u", None).unwrap().limit, 20);
    assert_eq!(tiers.resolve("u", Some("pro")).unwrap().limit, 100);
    assert_eq!(tiers.resolve("vip", Some("free")).unwrap().limit, 1_000);
    assert!(tiers.resolve("u", Some("platinum")).is_err());
}

#[test]
fn changing_a_keys_limit_or_algorithm_keeps_what_it_already_used() {
    let mut table = KeyTable::new(10);
    let twenty = LimitSpec::sliding(20, 60_000);
    for t in 0..10 {
        assert!(table.check("u", &twenty, 1, t).unwrap().allowed);
    }
    // Lowered to 10: nothing more until the window moves on.
    let ten = LimitSpec::sliding(10, 60_000);
    let v = table.check("u", &ten, 1, 100).unwrap();
    assert!(!v.allowed && v.retry_after_ms == 60_000 - 100);
    // Switched to GCRA at the same rate: the 10 used become debt, not a fresh bucket.
    let gcra = LimitSpec { algorithm: Algorithm::Gcra, limit: 10, window_ms: 60_000, burst: 9 };
    assert!(!table.check("u", &gcra, 1, 200).unwrap().allowed);
    let (used, _) = table.peek("u", &gcra, 200).unwrap();
    assert_eq!(used, 10);
}

#[test]
fn replayed_admissions_count_as_admitted_and_assignments_win_over_the_callers_tier() {
    use leasehold_per_key::{KeyTable, LimitSpec, Tiers};
    let spec = LimitSpec::sliding(3, 1_000);
    let mut t = KeyTable::new(10);
    // A new owner replays three admissions (one out of order): the key is full until the
    // newest leaves the window, and never less strict than before the move.
    t.replay("k", &spec, 100, 1);
    t.replay("k", &spec, 300, 1);
    t.replay("k", &spec, 200, 1);
    assert!(!t.check("k", &spec, 1, 1_099).unwrap().allowed);
    assert!(t.check("k", &spec, 1, 1_100).unwrap().allowed, "the first replayed entry left at 1100");
    assert!(!t.check("k", &spec, 1, 1_299).unwrap().allowed);
    t.remove_where(|k| k == "k");
    assert!(t.is_empty());

    let mut tiers = Tiers::default();
    tiers.tiers.insert("pro".into(), LimitSpec::sliding(100, 60_000));
    tiers.assignments.insert("alice".into(), "pro".into());
    assert_eq!(tiers.resolve_named("alice", Some("free")).unwrap().0, "pro", "the operator's assignment wins");
    assert_eq!(tiers.resolve_named("bob", Some("pro")).unwrap().0, "pro");
    assert_eq!(tiers.resolve_named("bob", None).unwrap().0, "free");
    tiers.assignments.insert("carol".into(), "gold".into());
    assert!(tiers.validate().is_err(), "an assignment to an unknown tier is refused");
}
