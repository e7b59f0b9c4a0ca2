//! Tests of `tools/lab/src/bench/keys_load.rs`.

use leasehold_lab::bench::keys_load::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn allowed(key: u32, sent_ms: u64, received_ms: u64) -> Observation {
    Observation { key, sent_us: sent_ms * 1_000, received_us: received_ms * 1_000, status: 200, instance: 0 }
}

#[test]
fn the_judge_counts_only_certain_over_admissions() {
    // Three allowed within 500 ms under a limit of 2 per second: one too many.
    let obs = [allowed(1, 0, 1), allowed(1, 200, 201), allowed(1, 400, 401)];
    assert_eq!(over_admissions(&obs, 2, 1_000), 1);
    // Spread over more than a window: none.
    let obs = [allowed(1, 0, 1), allowed(1, 600, 601), allowed(1, 1_001, 1_002)];
    assert_eq!(over_admissions(&obs, 2, 1_000), 0);
    // A slow answer makes it uncertain: not counted.
    let obs = [allowed(1, 0, 1), allowed(1, 200, 201), allowed(1, 400, 1_500)];
    assert_eq!(over_admissions(&obs, 2, 1_000), 0);
    // Different keys never add up.
    let obs = [allowed(1, 0, 1), allowed(2, 1, 2), allowed(3, 2, 3)];
    assert_eq!(over_admissions(&obs, 2, 1_000), 0);
}

#[test]
fn zipf_prefers_low_ranks() {
    let ranks = key_ranks(1_000, 1.1).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let draws: Vec<u32> = (0..10_000).map(|_| draw_key(&ranks, &mut rng)).collect();
    assert!(draws.iter().all(|&k| k < 1_000));
    let top = draws.iter().filter(|&&k| k == 0).count();
    let tail = draws.iter().filter(|&&k| k == 999).count();
    assert!(top > 500 && tail < 20, "top {top}, tail {tail}");
}

#[test]
fn a_negative_exponent_is_refused() {
    assert!(key_ranks(10, -0.5).is_err());
    assert!(key_ranks(10, f64::NAN).is_err());
    assert!(key_ranks(10, 0.0).is_ok());
}
