//! Property tests: for arbitrary sequences of grants, renewals, returns, expiries and epoch
//! changes, the ledger never lets Σ outstanding exceed the limit, and no holder is ever told it
//! has more than was reserved for it.

use leasehold_core::allocator::{allocate, AllocMode, Claim};
use leasehold_core::bucket::TokenBucket;
use leasehold_core::ledger::{Ledger, LedgerError};
use leasehold_core::quota::Quota;
use leasehold_core::wire::LeaseVersion;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Grant { holder: u8, rate: u64, burst: u64, ttl: u64 },
    Confirm { holder: u8, back: u8 },
    Close { holder: u8 },
    Advance { dt: u64 },
    NewEpoch,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..5, 0u64..1_200_000, 0u64..150_000, 1u64..50).prop_map(|(holder, rate, burst, ttl)| Op::Grant { holder, rate, burst, ttl }),
        2 => (0u8..5, 0u8..4).prop_map(|(holder, back)| Op::Confirm { holder, back }),
        1 => (0u8..5).prop_map(|holder| Op::Close { holder }),
        2 => (0u64..20).prop_map(|dt| Op::Advance { dt }),
        1 => Just(Op::NewEpoch),
    ]
}

/// The operations both properties apply the same way: confirmations, returns, time passing.
fn bookkeeping(l: &mut Ledger<u8>, op: Op, issued: &[(u8, LeaseVersion)], now: &mut u64) {
    match op {
        Op::Confirm { holder, back } => {
            let mine: Vec<LeaseVersion> = issued.iter().filter(|(h, _)| *h == holder).map(|(_, v)| *v).collect();
            if let Some(v) = mine.iter().rev().nth(back as usize) {
                let _ = l.confirm_in_use(&holder, *v, *now);
            }
        }
        Op::Close { holder } => {
            l.close(&holder, *now, *now + 100);
        }
        Op::Advance { dt } => {
            *now += dt;
            l.expire(*now);
        }
        Op::Grant { .. } | Op::NewEpoch => unreachable!("not bookkeeping"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ledger_never_exceeds_capacity(ops in proptest::collection::vec(op(), 1..120)) {
        let cap = Quota::new(1_000_000, 100_000);
        let mut l: Ledger<u8> = Ledger::new(cap, 1);
        let mut now = 0u64;
        let mut seq = 0u64;
        let mut issued: Vec<(u8, LeaseVersion)> = Vec::new();
        for op in ops {
            match op {
                Op::Grant { holder, rate, burst, ttl } => {
                    seq += 1;
                    let want = Quota::new(rate, burst);
                    // What an issuer does: never more than the holder's current claim or the headroom.
                    let claim = l.holder_claim(&holder, now);
                    let room = l.headroom_for(&holder, now);
                    let told = want.min(room.max(claim));
                    let version = LeaseVersion::new(l.epoch(), seq);
                    match l.grant(&holder, told, version, now + ttl, now) {
                        Ok(()) => {
                            prop_assert!(told.fits_in(&room.max(claim)), "told {told} with room {room} claim {claim}");
                            issued.push((holder, version));
                        }
                        Err(LedgerError::HolderClosed) => {}
                        Err(e) => prop_assert!(false, "a grant within headroom failed: {e}"),
                    }
                    // And an oversized ask is refused, never silently granted.
                    seq += 1;
                    let greedy = Quota::new(cap.rate_milli_per_s + 1, 0);
                    prop_assert!(l.grant(&holder, greedy, LeaseVersion::new(l.epoch(), seq), now + ttl, now).is_err());
                }
                Op::Confirm { .. } | Op::Close { .. } | Op::Advance { .. } => bookkeeping(&mut l, op, &issued, &mut now),
                Op::NewEpoch => {
                    let e = l.epoch() + 1;
                    l.advance_epoch(e).unwrap();
                }
            }
            prop_assert!(l.check(now).is_ok(), "{:?}", l.check(now));
        }
    }

    /// The capacity moves (a lower or higher R, a DC manager's budget) while holders renew at
    /// whatever the issuer may grant: the books never fail their check, and once every lease out
    /// at the last shrink has expired the total is within the capacity.
    #[test]
    fn after_a_shrink_the_total_fits_the_new_capacity_once_the_old_leases_expire(
        ops in proptest::collection::vec(op(), 1..120),
        caps in proptest::collection::vec((200_000u64..1_200_000, 20_000u64..150_000), 1..6),
    ) {
        let mut l: Ledger<u8> = Ledger::new(Quota::new(1_000_000, 100_000), 1);
        let (mut now, mut seq, mut inherited_until) = (0u64, 0u64, 0u64);
        let mut issued: Vec<(u8, LeaseVersion)> = Vec::new();
        let mut caps = caps.into_iter().cycle();
        for (i, op) in ops.into_iter().enumerate() {
            if i % 10 == 9 {
                let (rate, burst) = caps.next().expect("cycle");
                let cap = Quota::new(rate, burst);
                if !l.capacity().fits_in(&cap) {
                    inherited_until = l.entries().map(|(_, e)| e.live_until_ns).fold(inherited_until, u64::max);
                }
                l.set_capacity(cap);
            }
            match op {
                Op::Grant { holder, rate, burst, ttl } => {
                    seq += 1;
                    let told = l.grantable(&holder, Quota::new(rate, burst), now);
                    let version = LeaseVersion::new(l.epoch(), seq);
                    match l.grant(&holder, told, version, now + ttl, now) {
                        Ok(()) => issued.push((holder, version)),
                        Err(LedgerError::HolderClosed) => {}
                        Err(e) => prop_assert!(false, "a grantable amount was refused: {e}"),
                    }
                }
                Op::Confirm { .. } | Op::Close { .. } | Op::Advance { .. } => bookkeeping(&mut l, op, &issued, &mut now),
                Op::NewEpoch => {}
            }
            prop_assert!(l.check(now).is_ok(), "{:?}", l.check(now));
            if now >= inherited_until {
                prop_assert!(l.outstanding(now).fits_in(&l.capacity()), "{} above {}", l.outstanding(now), l.capacity());
            }
        }
    }

    #[test]
    fn allocations_fit_and_water_fill_never_overfeeds_while_another_starves(
        demands in proptest::collection::vec(0u64..2_000_000, 1..8),
        floors in proptest::collection::vec(0u64..100_000, 8),
        cap in 0u64..3_000_000,
        reserve in 0.0f64..0.3,
    ) {
        let claims: Vec<Claim> = demands.iter().zip(&floors).map(|(&d, &f)| Claim { demand_milli: d, weight: 1.0, floor_milli: f }).collect();
        for mode in [AllocMode::Proportional, AllocMode::WaterFill] {
            let a = allocate(cap, reserve, &claims, mode);
            prop_assert_eq!(a.len(), claims.len());
            prop_assert!(a.iter().sum::<u64>() <= cap);
        }
        let a = allocate(cap, 0.0, &claims, AllocMode::WaterFill);
        let starved = claims.iter().zip(&a).any(|(c, &x)| x + 1 < c.demand_milli.max(c.floor_milli));
        if starved {
            for (c, &x) in claims.iter().zip(&a) {
                prop_assert!(x <= c.demand_milli.max(c.floor_milli) + 1, "child got {x} above its want {} while another starves", c.demand_milli);
            }
        }
    }

    #[test]
    fn bucket_admits_at_most_rate_times_t_plus_burst(
        rate in 1u64..5_000, burst in 1u64..200, steps in proptest::collection::vec((0u64..50_000_000, 1u32..4), 1..400)
    ) {
        let b = TokenBucket::new();
        let horizon = 3_600_000_000_000u64;
        b.apply_lease(Quota::per_s(rate, burst), horizon, 0).unwrap();
        let mut now = 0u64;
        let mut taken = 0u64;
        for (dt, cost) in steps {
            now += dt;
            if let Ok(d) = b.try_acquire(cost, now) {
                if d.is_granted() { taken += cost as u64; }
            }
        }
        // Starting from zero balance: at most rate·T (plus one token of rounding).
        let bound = rate as f64 * now as f64 / 1e9 + 1.0;
        prop_assert!(taken as f64 <= bound, "took {taken} > {bound}");
    }

    #[test]
    fn renewals_never_create_balance(
        r1 in 1u64..1_000, b1 in 1u64..100, r2 in 1u64..1_000, b2 in 1u64..100, at in 0u64..10_000_000_000
    ) {
        let b = TokenBucket::new();
        b.apply_lease(Quota::per_s(r1, b1), 100_000_000_000, 0).unwrap();
        let before = b.view(at).balance_milli;
        b.apply_lease(Quota::per_s(r2, b2), 100_000_000_000, at).unwrap();
        let after = b.view(at).balance_milli;
        prop_assert!(after <= before.min(b2 * 1_000), "{after} > min({before}, {})", b2 * 1_000);
        prop_assert!(after + 1 >= before.min(b2 * 1_000), "balance lost: {after} < {before}");
    }
}
