//! Adaptive limits on the coordinator (`leasehold_core::aimd`), driven through the real
//! core: 429s the DCs report lower the effective R through the safe-shrink path (no instant sees
//! Σ above the configured R, and from one DC-lease lifetime after a decrease none sees it above
//! the effective R), it never goes above the configured R nor below Σ floors, the durable record
//! carries it and a new leader resumes from it.

use leasehold_core::aimd::AdaptiveConfig;
use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport, LeaseVersion};
use std::collections::BTreeMap;

use crate::support;
use support::{MS, S};

fn adaptive(quota: Quota, floor_per_s: u64) -> LimitConfig {
    let mut c = support::config(quota, floor_per_s, floor_per_s);
    c.adaptive = Some(AdaptiveConfig::default());
    c
}

/// Every DC lease each DC received, with when: a DC may spend the largest unexpired one (a DC
/// that does not ack may still be on an older, larger lease).
#[derive(Default)]
struct AllLeases(BTreeMap<String, Vec<(DcLease, u64)>>);

impl AllLeases {
    fn absorb(&mut self, leases: Vec<DcLease>, now: u64) {
        for l in leases {
            self.0.entry(l.dc.clone()).or_default().push((l, now));
        }
    }

    fn newest(&self, dc: &str) -> Option<LeaseVersion> {
        self.0.get(dc)?.iter().map(|(l, _)| l.version).max()
    }

    fn spendable(&self, now: u64) -> Quota {
        self.0.values().fold(Quota::ZERO, |s, ls| {
            let max =
                ls.iter().filter(|(l, at)| at + l.ttl_ms * MS > now).fold(Quota::ZERO, |m, (l, _)| m.max(l.quota));
            s.saturating_add(max)
        })
    }
}

/// A report asking 2,000/s with `calls` upstream calls of which `r429` answered 429.
fn report(dc: &str, seq: u64, ack: Option<LeaseVersion>, calls: u64, r429: u64) -> DcReport {
    DcReport { upstream_calls: calls, upstream_429: r429, ..support::dc_report(dc, seq, ack, None) }
}

/// Drive `a` from `t` for `secs` with reports every 250 ms: each DC reports `calls(t)` calls a
/// report with `r429(t)` 429s; BKK acks only if `bkk_acks`. Returns the most the DCs could spend
/// at any step, the most it exceeded the effective R in force at any step from `window_from` on,
/// and whether the books held at every step.
#[allow(clippy::too_many_arguments)]
fn drive(
    a: &mut CoordinatorCore,
    all: &mut AllLeases,
    seq: &mut u64,
    t: &mut u64,
    secs: u64,
    bkk_acks: bool,
    load: impl Fn(u64) -> (u64, u64),
    window_from: u64,
) -> (Quota, Quota, bool) {
    let (mut worst, mut over_effective, mut books_ok) = (Quota::ZERO, Quota::ZERO, true);
    let end = *t + secs * S;
    while *t < end {
        *seq += 1;
        let (calls, r429) = load(*t);
        for dc in ["bkk", "eu"] {
            let ack = if dc == "eu" || bkk_acks { all.newest(dc) } else { None };
            all.absorb(a.on_dc_report(&report(dc, *seq, ack, calls, r429), *t), *t);
        }
        if seq.is_multiple_of(4) {
            all.absorb(a.tick(*t), *t);
        }
        books_ok &= a.ledger().check(*t).is_ok();
        worst = worst.max(all.spendable(*t));
        if *t >= window_from {
            over_effective = over_effective.max(all.spendable(*t).saturating_sub(a.effective_quota()));
        }
        *t += 250 * MS;
    }
    (worst, over_effective, books_ok)
}

#[test]
fn upstream_429s_lower_the_effective_r_through_the_safe_shrink_path() {
    let cfg = adaptive(Quota::per_s(1_000, 20), 50);
    let mut a = CoordinatorCore::new(cfg.clone(), "coord-a", 1);
    let (mut all, mut seq, mut t) = (AllLeases::default(), 0, 0);
    drive(&mut a, &mut all, &mut seq, &mut t, 5, true, |_| (125, 0), u64::MAX);
    assert_eq!(a.effective_quota(), Quota::per_s(1_000, 20), "no 429s: the configured R");
    // The upstream now accepts 600/s of the 1,000/s the pods send (each DC: 125 calls a report,
    // 50 answered 429) for 2 s; BKK's pods never confirm a smaller lease.
    let t0 = t;
    let (worst, _, books_ok) = drive(&mut a, &mut all, &mut seq, &mut t, 2, false, |_| (125, 50), u64::MAX);
    let lowered = a.effective_quota();
    assert!(lowered.rate_milli_per_s <= 600_000 && lowered.rate_milli_per_s >= 500_000, "{lowered}");
    assert_eq!(lowered.burst_milli, 20_000, "B stays the configured one");
    // The pods follow the lower rate: no more 429s, R_eff rises again. Every decrease was in
    // [t0, t0 + 2 s]: from one DC-lease lifetime after that, Σ stays within the R_eff in force.
    let window_end = cfg.expiry.issuer_live_until_ns(t0 + 2 * S, cfg.dc_ttl_ms);
    let (worst2, over, books_ok2) = drive(&mut a, &mut all, &mut seq, &mut t, 20, false, |_| (70, 0), window_end);
    assert!(worst.max(worst2).fits_in(&Quota::per_s(1_000, 20)), "{worst} above the configured limit");
    assert!(books_ok && books_ok2);
    assert_eq!(over, Quota::ZERO, "Σ above the effective R after the window");
    assert!(all.spendable(t).rate_milli_per_s > 0, "the DCs keep a share");
}

#[test]
fn the_effective_r_never_exceeds_the_configured_r_nor_goes_below_the_floors() {
    let mut a = CoordinatorCore::new(adaptive(Quota::per_s(1_000, 20), 300), "coord-a", 1);
    let (mut all, mut seq, mut t) = (AllLeases::default(), 0, 0);
    drive(&mut a, &mut all, &mut seq, &mut t, 30, true, |_| (200, 199), u64::MAX);
    assert_eq!(a.effective_quota(), Quota::per_s(600, 20), "Σ floors: 2 × 300/s");
    assert_eq!(a.floor_named("bkk").map(|(f, _)| f), Some(Quota::per_s(300, 0)), "floors stay reserved");
    drive(&mut a, &mut all, &mut seq, &mut t, 60, true, |_| (200, 0), u64::MAX);
    assert_eq!(a.effective_quota(), Quota::per_s(1_000, 20));
}

#[test]
fn a_limit_that_does_not_opt_in_ignores_429s() {
    let mut a = CoordinatorCore::new(support::config(Quota::per_s(1_000, 20), 50, 50), "coord-a", 1);
    let (mut all, mut seq, mut t) = (AllLeases::default(), 0, 0);
    drive(&mut a, &mut all, &mut seq, &mut t, 10, true, |_| (125, 100), u64::MAX);
    assert_eq!(a.effective_quota(), Quota::per_s(1_000, 20));
    assert_eq!(a.record().adaptive_rate_milli_per_s, None);
}

#[test]
fn a_new_leader_resumes_from_the_effective_r_the_record_names() {
    let cfg = adaptive(Quota::per_s(1_000, 20), 50);
    let mut a = CoordinatorCore::new(cfg.clone(), "coord-a", 1);
    let (mut all, mut seq, mut t) = (AllLeases::default(), 0, 0);
    drive(&mut a, &mut all, &mut seq, &mut t, 3, true, |_| (125, 50), u64::MAX);
    let lowered = a.effective_quota();
    assert!(lowered.rate_milli_per_s < 1_000_000);
    let rec = a.record();
    assert_eq!(rec.adaptive_rate_milli_per_s, Some(lowered.rate_milli_per_s));
    assert_eq!(rec.capacity, Some(lowered));
    let b = CoordinatorCore::resume(cfg.clone(), "coord-b", 2, Stored::Record(&rec), t);
    assert_eq!(b.effective_quota(), lowered, "no jump back to the configured R");
    assert_eq!(b.ledger().capacity(), lowered);
    let inherited = |c: &CoordinatorCore| -> BTreeMap<String, LeaseVersion> {
        c.ledger().inherited_below().map(|(h, v)| (h.clone(), v)).collect()
    };
    let counted_inherited = |marks: &BTreeMap<String, LeaseVersion>, l: &DcLease| {
        marks.get(&l.holder).is_some_and(|below| l.version < *below)
    };
    // Same capacity: each lease is inherited for the new leader exactly if it was for the writer.
    let b_marks = inherited(&b);
    assert!(rec.leases.iter().all(|l| counted_inherited(&b_marks, l) == counted_inherited(&rec.inherited_below, l)));
    // A leader whose definition no longer opts in runs the configured R.
    let mut plain = cfg.clone();
    plain.adaptive = None;
    let c = CoordinatorCore::resume(plain, "coord-c", 3, Stored::Record(&rec), t);
    assert_eq!(c.effective_quota(), Quota::per_s(1_000, 20));
    // One whose configured R went below it: clamped, and the leases it adopts are inherited.
    let lower = adaptive(Quota::per_s(400, 20), 50);
    let d = CoordinatorCore::resume(lower, "coord-d", 4, Stored::Record(&rec), t);
    assert_eq!(d.effective_quota(), Quota::per_s(400, 20));
    let d_marks = inherited(&d);
    assert!(rec.leases.iter().all(|l| counted_inherited(&d_marks, l)), "a smaller capacity: every lease inherited");
}

#[test]
fn a_definition_changed_live_clamps_the_effective_r_without_jumping_back() {
    let cfg = adaptive(Quota::per_s(1_000, 20), 50);
    let mut a = CoordinatorCore::new(cfg.clone(), "coord-a", 1);
    let (mut all, mut seq, mut t) = (AllLeases::default(), 0, 0);
    drive(&mut a, &mut all, &mut seq, &mut t, 3, true, |_| (125, 50), u64::MAX);
    let lowered = a.effective_quota();
    // A raise of the configured R keeps the effective R where the upstream put it.
    assert_eq!(a.reconfigure(adaptive(Quota::per_s(1_200, 20), 50), t), Ok(false));
    assert_eq!(a.effective_quota(), lowered);
    // A configured R below it clamps it, and the books shrink.
    assert_eq!(a.reconfigure(adaptive(Quota::per_s(300, 20), 50), t), Ok(true));
    assert_eq!(a.effective_quota(), Quota::per_s(300, 20));
    assert_eq!(a.ledger().capacity(), Quota::per_s(300, 20));
}
