use super::*;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

fn granted(b: &TokenBucket, cost: u32, now: u64) -> bool {
    b.try_acquire(cost, now).unwrap().is_granted()
}

#[test]
fn no_lease_denies() {
    let b = TokenBucket::new();
    assert!(matches!(b.try_acquire(1, 5), Ok(Decision::Denied { reason: DenyReason::NoLease, .. })));
}

#[test]
fn first_lease_starts_empty_then_refills_at_rate() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(10, 5), 100 * S, 0).unwrap();
    assert!(!granted(&b, 1, 0), "a first lease starts at zero balance");
    assert!(granted(&b, 1, 100 * MS));
    assert!(!granted(&b, 1, 100 * MS));
    // After 10 s the bucket is full with 5 tokens, not more.
    let mut n = 0;
    while granted(&b, 1, 10 * S) {
        n += 1;
    }
    assert_eq!(n, 5);
}

#[test]
fn admissions_never_exceed_rate_times_t_plus_burst() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(300, 7), 1_000 * S, 0).unwrap();
    let mut admitted = 0u64;
    let mut t = 0;
    while t <= 10 * S {
        while granted(&b, 1, t) {
            admitted += 1;
        }
        t += 137_000; // 137 µs steps
    }
    assert!(admitted as f64 <= 300.0 * 10.0 + 7.0, "{admitted}");
    assert!(admitted >= 2_995, "{admitted}");
}

#[test]
fn renewal_keeps_balance_and_truncates_on_shrink() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(10, 8), 10 * S, 0).unwrap();
    assert_eq!(b.view(5 * S).balance_milli, 8_000);
    // Renew with a bigger capacity: balance stays 8, not refilled to 20.
    b.apply_lease(Quota::per_s(10, 20), 20 * S, 5 * S).unwrap();
    assert_eq!(b.view(5 * S).balance_milli, 8_000);
    // Shrink capacity: truncated to 3.
    b.apply_lease(Quota::per_s(10, 3), 20 * S, 5 * S).unwrap();
    assert_eq!(b.view(5 * S).balance_milli, 3_000);
}

#[test]
fn expiry_denies_and_a_lease_after_a_gap_starts_from_zero() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(10, 8), 2 * S, 0).unwrap();
    assert!(granted(&b, 1, S));
    assert!(matches!(b.try_acquire(1, 2 * S), Ok(Decision::Denied { reason: DenyReason::Expired, .. })));
    b.apply_lease(Quota::per_s(10, 8), 10 * S, 3 * S).unwrap();
    assert_eq!(b.view(3 * S).balance_milli, 0);
}

#[test]
fn cost_above_capacity_is_an_error_not_a_denial() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(10, 4), 10 * S, 0).unwrap();
    assert_eq!(b.try_acquire(5, S), Err(BucketError::CostExceedsCapacity { cost: 5, capacity_milli: 4_000 }));
    assert!(b.try_acquire(4, S).unwrap().is_granted());
}

#[test]
fn retry_after_is_when_tokens_return() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(10, 1), 100 * S, 0).unwrap();
    assert!(granted(&b, 1, S));
    let wait = b.retry_after(1, S).unwrap().unwrap();
    assert!((99 * MS..=101 * MS).contains(&wait), "{wait}");
    assert!(!granted(&b, 1, S + wait - MS));
    assert!(granted(&b, 1, S + wait));
}

#[test]
fn a_zero_rate_lease_admits_nothing() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::new(0, 5_000), 10 * S, 0).unwrap();
    assert!(!granted(&b, 1, S));
    b.apply_lease(Quota::per_s(10, 5), 10 * S, S).unwrap();
    b.apply_lease(Quota::new(0, 5_000), 10 * S, 2 * S).unwrap();
    assert!(!granted(&b, 1, 3 * S));
}

#[test]
fn weighted_cost_takes_that_many_tokens() {
    let b = TokenBucket::new();
    b.apply_lease(Quota::per_s(100, 10), 100 * S, 0).unwrap();
    assert!(granted(&b, 10, S));
    assert!(!granted(&b, 1, S));
}

#[test]
fn concurrent_acquires_never_overspend() {
    use std::sync::Arc;
    let b = Arc::new(TokenBucket::new());
    b.apply_lease(Quota::per_s(1_000, 50), 100 * S, 0).unwrap();
    let now = 10 * S; // full: 50 tokens, no refill at a fixed instant
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || (0..1_000).filter(|_| b.try_acquire(1, now).unwrap().is_granted()).count())
        })
        .collect();
    let total: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(total, 50);
}

#[test]
fn renewals_racing_acquires_never_create_tokens() {
    use std::sync::Arc;
    let b = Arc::new(TokenBucket::new());
    b.apply_lease(Quota::per_s(1_000, 100), 100 * S, 0).unwrap();
    let now = 10 * S;
    let taker = {
        let b = b.clone();
        std::thread::spawn(move || (0..20_000).filter(|_| b.try_acquire(1, now).unwrap().is_granted()).count())
    };
    for _ in 0..2_000 {
        b.apply_lease(Quota::per_s(1_000, 100), 100 * S, now).unwrap();
    }
    assert!(taker.join().unwrap() <= 100);
}
