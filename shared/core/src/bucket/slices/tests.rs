use super::*;
use crate::bucket::Decision;
use crate::rng::SeededRng;

const S: u64 = 1_000_000_000;

/// A bucket of `slots` slices under `quota`, applied at 0 and full at `S` (valid for an hour).
fn full(slots: usize, quota: Quota) -> TokenBucket {
    let b = TokenBucket::with_slices(slots);
    b.apply_lease(quota, 3_600 * S, 0).unwrap();
    b
}

/// What a pod does: the slice first, then the bucket itself.
fn spend(b: &TokenBucket, slot: usize, cost: u32, now: u64) -> bool {
    b.try_spend_slice(slot, cost, now) || b.try_acquire(cost, now).is_ok_and(|d| d.is_granted())
}

#[test]
fn slices_hold_a_millisecond_of_rate_and_together_at_most_an_eighth_of_the_burst() {
    assert_eq!(slice_tokens(Quota::per_s(1_000_000, 1_000_000), 0), 0, "no slots, no slices");
    assert_eq!(slice_tokens(Quota::per_s(1_000_000, 1_000_000), 31), 512, "1 ms at 10^6/s, to a power of two");
    assert_eq!(slice_tokens(Quota::per_s(1_020_000, 1_000_000), 31), 512, "a small move keeps the size");
    assert_eq!(slice_tokens(Quota::per_s(1_000_000_000, 1_000_000), 31), 1_024, "at most MAX_SLICE_TOKENS");
    assert_eq!(slice_tokens(Quota::per_s(1_000_000, 2_480), 31), 8, "2480 / (8 x 31) = 10, to a power of two");
    assert_eq!(slice_tokens(Quota::per_s(3_000, 1_000_000), 31), 0, "3 tokens a ms: too slow to slice");
    assert_eq!(slice_tokens(Quota::per_s(1_000_000, 900), 31), 0, "burst too small to set 4 a slot aside");
    for (rate, burst, slots) in [(10_000u64, 5_000u64, 31usize), (1 << 30, 1 << 20, 7), (50_000, 1 << 40, 2)] {
        let s = slice_tokens(Quota::per_s(rate, burst), slots);
        assert!(reserve_milli(s, slots) * RESERVE_DIVISOR <= burst * MILLI, "{rate}/{burst}/{slots}: {s}");
    }
}

#[test]
fn a_slice_is_taken_from_the_bucket_and_the_view_shows_the_lease_and_the_reserve() {
    let b = full(2, Quota::per_s(1_000_000, 100_000));
    let v = b.view(S);
    assert_eq!(v.quota, Quota::per_s(1_000_000, 100_000), "the view shows the lease as applied");
    assert_eq!(v.slice_reserve_milli, 2 * 512 * MILLI, "two slices of 512 (1 ms at 10^6/s, to a power of two)");
    assert_eq!(v.balance_milli, 98_976 * MILLI, "the bucket itself holds the burst less the reserve");
    assert!(b.try_spend_slice(0, 1, S));
    assert_eq!(b.view(S).balance_milli, 98_464 * MILLI, "one slice of 512 taken at once");
    assert_eq!(b.slices_spendable(S), 511);
    assert!(b.try_spend_slice(0, 3, S));
    assert_eq!(b.slices_spendable(S), 508, "spent from the slice: the bucket is not touched");
    assert_eq!(b.view(S).balance_milli, 98_464 * MILLI);
    assert!(!b.try_spend_slice(2, 1, S), "a slot out of range is not sliced");
    assert!(!b.try_spend_slice(1, 513, S), "a cost above a slice goes to the bucket");
    assert!(
        matches!(
            b.try_acquire(99_000, S),
            Err(crate::bucket::BucketError::CostExceedsCapacity { capacity_milli: 98_976_000, .. })
        ),
        "a cost above the bucket's own capacity never fits (the price of the reserve)"
    );
}

#[test]
fn stock_of_an_older_chain_is_never_spent() {
    let b = full(2, Quota::per_s(1_000_000, 100_000));
    assert!(b.try_spend_slice(0, 1, S));
    b.revoke();
    assert!(!b.try_spend_slice(0, 1, S), "a revoked lease spends nothing");
    assert_eq!(b.slices_spendable(S), 0);
    // A new lease after the gap starts from zero, slices included.
    b.apply_lease(Quota::per_s(1_000_000, 100_000), 3_600 * S, S).unwrap();
    assert_eq!(b.slices_spendable(S), 0, "the old chain's stock is not this lease's");
    assert!(!spend(&b, 0, 1, S), "nothing to spend at the start of a new chain");
    let b = full(2, Quota::per_s(1_000_000, 100_000));
    assert!(b.try_spend_slice(0, 1, S));
    assert!(!b.try_spend_slice(0, 1, 3_600 * S), "an expired lease spends nothing");
    b.apply_lease(Quota::per_s(1_000_000, 100_000), 7_200 * S, 3_600 * S).unwrap();
    assert_eq!(b.slices_spendable(3_600 * S), 0, "a lease after expiry is a new chain");
}

#[test]
fn a_renewal_keeps_the_stock_unless_its_slices_shrink() {
    let b = full(2, Quota::per_s(1_000_000, 100_000));
    assert!(b.try_spend_slice(0, 1, S));
    b.apply_lease(Quota::per_s(1_000_000, 100_000), 3_600 * S, S).unwrap();
    assert_eq!(b.slices_spendable(S), 511, "a renewal continues the chain");
    b.apply_lease(Quota::per_s(1_010_000, 200_000), 3_600 * S, S).unwrap();
    assert_eq!(b.slices_spendable(S), 511, "slices of the same size: the chain goes on");
    b.apply_lease(Quota::per_s(100_000, 100_000), 3_600 * S, S).unwrap();
    assert_eq!(b.slices_spendable(S), 0, "smaller slices (64) end the chain: its stock is wasted");
    let v = b.view(S);
    assert!(v.balance_milli + b.slices_spendable(S) * MILLI <= v.quota.burst_milli);
    b.apply_lease(Quota::per_s(1_000_000, 100_000), 3_600 * S, S).unwrap();
    assert_eq!(b.slices_spendable(S), 0, "larger slices again do not bring the old stock back");
}

/// Time to advance before the next step: mostly nothing (a burst at one instant), sometimes a
/// little, sometimes long enough to refill the bucket whole while slices still hold stock.
fn pause(rng: &mut SeededRng, quota: Quota) -> u64 {
    let refill_ns = quota.burst_milli * S / quota.rate_milli_per_s.max(1);
    match rng.next_u64() % 16 {
        0 => refill_ns + rng.next_u64() % refill_ns.max(1),
        1..=3 => rng.next_u64() % (refill_ns / 20).max(1),
        _ => 0,
    }
}

/// The rule every window relies on: the bucket's balance and the slices' spendable stock
/// together never exceed the lease's burst, whatever the renewals, gaps and spending.
#[test]
fn bucket_and_slices_together_never_hold_more_than_the_burst() {
    let random_quota =
        |rng: &mut SeededRng| Quota::per_s(10_000 + rng.next_u64() % 2_000_000, 500 + rng.next_u64() % 50_000);
    let mut sliced = 0;
    for seed in 0..300 {
        let mut rng = SeededRng::new(seed);
        let slots = 1 + (rng.next_u64() % 4) as usize;
        let mut now = 0u64;
        let mut quota = random_quota(&mut rng);
        let b = TokenBucket::with_slices(slots);
        b.apply_lease(quota, now + 10 * S, now).unwrap();
        for step in 0..3_000 {
            now += pause(&mut rng, quota);
            match rng.next_u64() % 200 {
                0 => {
                    quota = random_quota(&mut rng);
                    b.apply_lease(quota, now + rng.next_u64() % (10 * S), now).unwrap();
                }
                1 => {
                    b.revoke();
                    quota = Quota::ZERO;
                }
                _ => {
                    _ = spend(&b, (rng.next_u64() % (slots as u64 + 1)) as usize, 1 + (rng.next_u64() % 4) as u32, now)
                }
            }
            // All the stock of the current chain, spendable now or not, against the lease as
            // applied here (not as the bucket reports it).
            let stock = b.slices_held();
            sliced += (stock > 0) as u32;
            let held = b.view(now).balance_milli + stock * MILLI;
            assert!(held <= quota.burst_milli, "seed {seed} step {step}: {held} > burst {}", quota.burst_milli);
        }
    }
    assert!(sliced > 100_000, "slices held stock in {sliced} checks");
}

/// Under one lease, admissions through slices and the bucket in every window of length T are
/// at most rate × T + burst (and from the zero start, rate × T), checked over every pair of
/// admission instants.
#[test]
fn admissions_in_any_window_stay_within_rate_times_t_plus_burst() {
    for seed in 0..60 {
        let mut rng = SeededRng::new(1_000 + seed);
        let slots = 1 + (rng.next_u64() % 4) as usize;
        let quota = Quota::per_s(20_000 + rng.next_u64() % 500_000, 200 + rng.next_u64() % 5_000);
        let b = TokenBucket::with_slices(slots);
        b.apply_lease(quota, 3_600 * S, 0).unwrap();
        let mut now = 0u64;
        // Tokens admitted at each instant, in time order.
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for _ in 0..20_000 {
            now += pause(&mut rng, quota);
            let cost = 1 + (rng.next_u64() % 4) as u32;
            if spend(&b, (rng.next_u64() % slots as u64) as usize, cost, now) {
                match admitted.last_mut() {
                    Some((t, sum)) if *t == now => *sum += cost as u64,
                    _ => admitted.push((now, cost as u64)),
                }
            }
        }
        let (rate, burst) = (quota.rate_milli_per_s / MILLI, quota.burst_milli / MILLI);
        let total: u64 = admitted.iter().map(|a| a.1).sum();
        assert!(total > 5 * burst, "seed {seed}: the test drains the bucket many times ({total})");
        for i in 0..admitted.len() {
            let mut sum = 0u64;
            for &(t, c) in &admitted[i..] {
                sum += c;
                let bound = rate as f64 * (t - admitted[i].0) as f64 / 1e9 + burst as f64 + 1.0;
                assert!(sum as f64 <= bound, "seed {seed}: {sum} tokens in a window allowing {bound}");
            }
        }
        assert!(total as f64 <= rate as f64 * now as f64 / 1e9 + 1.0, "seed {seed}: {total} since the zero start");
    }
}

#[test]
fn threads_on_slots_of_their_own_never_spend_more_than_the_bucket_held() {
    let quota = Quota::per_s(1_000_000, 200_000);
    let b = full(4, quota);
    let capacity = b.view(S).balance_milli / MILLI;
    let granted: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|slot| {
                let b = &b;
                s.spawn(move || (0..).take_while(|_| spend(b, slot, 1, S)).count() as u64)
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let slice = slice_tokens(quota, 4);
    assert!(granted <= capacity, "{granted} granted out of {capacity}");
    assert!(granted + 4 * slice >= capacity, "at most a slice a thread left unspent: {granted} of {capacity}");
    assert!(matches!(b.try_acquire(1, S), Ok(Decision::Denied { .. })));
}

/// An outside review's trace (FINDINGS F41): a renewal that lowers the slice size (here to none)
/// hides stock above it; a later renewal of the same run of leases that raises it must not bring
/// that stock back while the bucket itself has meanwhile refilled to the larger capacity.
#[test]
fn stock_hidden_by_a_smaller_slice_never_comes_back() {
    let fast = Quota::per_s(1_000_000, 100_000);
    let b = full(2, fast);
    assert!(b.try_spend_slice(0, 1, S) && b.try_spend_slice(1, 1, S), "two slices of 512 taken");
    b.apply_lease(Quota::per_s(3_000, 100_000), 3_600 * S, S).unwrap();
    let t = 3 * S;
    assert!(b.try_acquire(100_000, t).unwrap().is_granted(), "unsliced, the bucket refills to the whole burst");
    let mut at_t = 100_000u64;
    b.apply_lease(fast, 3_600 * S, t).unwrap();
    for slot in 0..2 {
        at_t += (1..=999u64).rev().find(|&c| b.try_spend_slice(slot, c as u32, t)).unwrap_or(0);
    }
    assert!(at_t <= 100_000, "{at_t} tokens admitted at one instant under a burst of 100,000");
}

/// `rate × T + burst` across renewals of one run of leases whose rate, burst and slice size move
/// up and down, with the bucket drained at single instants and some threads idle for long
/// stretches, holding stock: admissions in every window are at most the burst in force at its
/// start plus what the leases in force refilled in it.
#[test]
fn admissions_in_any_window_stay_within_the_leases_across_renewals() {
    let (mut drained, mut renewals_with_stock, mut shrinks_with_stock) = (0, 0, 0);
    for seed in 0..40 {
        let mut rng = SeededRng::new(7_000 + seed);
        let slots = 2 + (rng.next_u64() % 3) as usize;
        let mut quota = Quota::per_s(1_000_000, 40_000);
        let b = TokenBucket::with_slices(slots);
        // (from, quota) of every lease applied, and admissions (instant, tokens), in time order.
        let mut leases = vec![(0u64, quota)];
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        b.apply_lease(quota, 3_600 * S, 0).unwrap();
        let mut now = 0u64;
        let mut admit = |now: u64, cost: u64| match admitted.last_mut() {
            Some((t, sum)) if *t == now => *sum += cost,
            _ => admitted.push((now, cost)),
        };
        for _ in 0..10_000 {
            now += pause(&mut rng, quota);
            match rng.next_u64() % 100 {
                0 => {
                    now += 1;
                    // Fast and sliced, or too slow to slice; bursts up and down.
                    let rate =
                        if rng.next_u64().is_multiple_of(2) { 200_000 + rng.next_u64() % 2_000_000 } else { 1_000 };
                    let before = slice_tokens(quota, slots);
                    quota = Quota::per_s(rate, 2_000 + rng.next_u64() % 60_000);
                    let held = b.slices_held();
                    renewals_with_stock += (held > 0) as u32;
                    shrinks_with_stock += (held > 0 && slice_tokens(quota, slots) < before) as u32;
                    b.apply_lease(quota, 3_600 * S, now).unwrap();
                    leases.push((now, quota));
                }
                1..=3 => {
                    // Drain what this instant allows, through every slot.
                    drained += 1;
                    for slot in 0..slots {
                        while spend(&b, slot, 16, now) {
                            admit(now, 16);
                        }
                        while spend(&b, slot, 1, now) {
                            admit(now, 1);
                        }
                    }
                }
                _ => {
                    // Slot 0 busy; the others now and then, so their stock sits through renewals.
                    let slot = if rng.next_u64().is_multiple_of(10) {
                        1 + (rng.next_u64() % (slots as u64 - 1)) as usize
                    } else {
                        0
                    };
                    let cost = 1 + rng.next_u64() % 4;
                    if spend(&b, slot, cost as u32, now) {
                        admit(now, cost);
                    }
                }
            }
        }
        // F(t): tokens the leases refilled from 0 to t; the burst in force at t.
        let refilled = |t: u64| -> f64 {
            let mut sum = 0.0;
            for (k, &(from, q)) in leases.iter().enumerate() {
                let until = leases.get(k + 1).map_or(u64::MAX, |l| l.0).min(t);
                if until > from {
                    sum += q.rate_milli_per_s as f64 / MILLI as f64 * (until - from) as f64 / 1e9;
                }
            }
            sum
        };
        let burst_at = |t: u64| (leases.iter().rev().find(|l| l.0 <= t).unwrap().1.burst_milli / MILLI) as f64;
        // Window [t_i, t_j]: P_j − P_(i−1) ≤ burst(t_i) + F(t_j) − F(t_i) + 2, for every i ≤ j: with
        // M_i = max over j ≥ i of P_j − F(t_j), check M_i ≤ P_(i−1) + burst(t_i) − F(t_i) + 2.
        let f: Vec<f64> = admitted.iter().map(|a| refilled(a.0)).collect();
        let prefix: Vec<f64> = admitted
            .iter()
            .scan(0.0, |p, a| {
                *p += a.1 as f64;
                Some(*p)
            })
            .collect();
        let mut most = f64::MIN;
        for i in (0..admitted.len()).rev() {
            most = most.max(prefix[i] - f[i]);
            let before = if i == 0 { 0.0 } else { prefix[i - 1] };
            let allowed = before + burst_at(admitted[i].0) - f[i] + 2.0;
            assert!(
                most <= allowed,
                "seed {seed}: a window from {} ns admits {} tokens more than its leases allow",
                admitted[i].0,
                most - allowed + 2.0
            );
        }
    }
    assert!(drained > 1_000, "the bucket was drained at {drained} instants");
    assert!(renewals_with_stock > 100, "{renewals_with_stock} renewals applied while slices held stock");
    assert!(shrinks_with_stock > 30, "{shrinks_with_stock} renewals shrank slices that held stock");
}

/// A lease applied between a thread's reading of the chain and its topping up: the tokens it
/// then takes belong to the new chain, and the stock it read (of the old one) is not counted.
#[test]
fn a_lease_applied_between_reading_the_chain_and_topping_up_never_counts_the_old_stock() {
    let fast = Quota::per_s(1_000_000, 100_000);
    let b = full(2, fast);
    assert!(b.try_spend_slice(0, 1, S));
    let read = b.live_slice(S).unwrap();
    let stock = b.slices_held();
    assert_eq!(stock, 511);
    // The lease is revoked and a new one applied (a new chain, from zero), which refills.
    b.revoke();
    b.apply_lease(fast, 3_600 * S, S).unwrap();
    let t = 2 * S;
    // The thread goes on with what it read: it lacks 1 token for a cost of 512, takes 1.
    assert!(!b.refill_slice(&b.slices[0], read, stock, 512, t), "the old 511 do not make up the cost");
    assert_eq!(b.slices_held(), 1, "it holds only the token taken under the new chain");
    assert!(b.view(t).balance_milli + b.slices_held() * MILLI <= fast.burst_milli);
    // Renewed in between instead (the same chain): the stock it read counts.
    let b = full(2, fast);
    assert!(b.try_spend_slice(0, 1, S));
    let read = b.live_slice(S).unwrap();
    b.apply_lease(fast, 3_600 * S, S).unwrap();
    assert!(b.refill_slice(&b.slices[0], read, 511, 512, S), "511 kept and 1 taken make 512");
    assert_eq!(b.slices_held(), 0);
}
