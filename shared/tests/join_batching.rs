//! Joins are batched: a pod's first report runs a split of its own only if none ran in the last
//! `event_pass_gap_ms`, so 1,000 pods joining at once cost a few splits of O(pods) each, not a
//! split per joining pod (O(pods²) leases issued, and with the ledger summing over every holder
//! for each grant, O(pods³) work). Every joiner still holds a lease within 2 renew periods, and
//! the pods' leases never sum above the budget.

use leasehold_shared::dc_manager::{DcManagerConfig, FailMode};
use leasehold_shared::quota::{Quota, MILLI};
use leasehold_shared::wire::LeaseVersion;

use crate::support;
use support::scripted::{report_seq_of, ScriptedDc};
use support::{MS, S};

const PODS: usize = 1_000;
const TICK_MS: u64 = 250;

fn pod(i: usize) -> String {
    format!("p{i}")
}

#[test]
fn a_thousand_pods_joining_at_once_cost_a_few_splits_and_each_holds_a_token_within_two_renew_periods() {
    let mut cfg = DcManagerConfig::new("api", "bkk", "bkk-mgr");
    cfg.fail_mode = FailMode::Strict;
    let renew_ms = cfg.renew_interval_ms;
    let mut dc = ScriptedDc::new(cfg, Quota::ZERO, 0, 1, (5, 5));
    let budget = Quota::per_s(10_000, 2_000);
    let basis = report_seq_of(&dc.core.tick(0)).expect("a tick reports");
    dc.dc_lease(budget, 30_000, LeaseVersion::new(1, 1), basis, 0).expect("the DC lease applies");
    let (full_before, issued_before) = (dc.core.counters().passes_full, dc.core.counters().pod_leases_issued);

    // Every pod's first report, spread over one report interval (250 µs apart).
    let joined_at = MS;
    for i in 0..PODS {
        dc.report(&pod(i), joined_at + i as u64 * (TICK_MS * MS / PODS as u64), true, false);
    }
    let storm_end = joined_at + TICK_MS * MS;
    // The sums the ledger remembers after the report-driven splits (a tick's report expires
    // the books and forgets them).
    dc.core.ledger().check(storm_end).expect("the manager's books hold after the storm's splits");
    let out = dc.core.tick(storm_end);
    dc.absorb(out);
    let c = dc.core.counters().clone();
    let splits = c.passes_full - full_before;
    let issued = c.pod_leases_issued - issued_before;
    assert!(splits <= 5, "{splits} full splits for {PODS} joins in one report interval (one per join before batching)");
    assert!(issued <= 5 * PODS as u64, "{issued} pod leases issued for {PODS} joins (O(pods²) before batching)");
    assert_eq!(dc.held.len(), PODS, "every joiner got a lease by the tick after the storm");

    // The pods report every tick, saying which lease they use, until each holds a whole token.
    let mut t = storm_end;
    let deadline = joined_at + 2 * renew_ms * MS;
    let all_hold_a_token = |dc: &ScriptedDc| {
        (0..PODS)
            .all(|i| dc.held.get(&pod(i)).is_some_and(|l| l.quota.burst_milli >= MILLI && l.quota.rate_milli_per_s > 0))
    };
    while !all_hold_a_token(&dc) {
        assert!(
            t < deadline,
            "pods without a token 2 renew periods after joining: {}",
            (0..PODS).filter(|&i| dc.held.get(&pod(i)).is_none_or(|l| l.quota.burst_milli < MILLI)).count()
        );
        t += TICK_MS * MS;
        for i in 0..PODS {
            dc.report(&pod(i), t - (PODS - i) as u64 * 100_000, true, true);
        }
        let out = dc.core.tick(t);
        dc.absorb(out);
        let outstanding = dc.core.ledger().outstanding(t);
        assert!(
            outstanding.fits_in(&budget),
            "at {} ms the pods' leases {outstanding} exceed the budget {budget}",
            t / MS
        );
        dc.core.ledger().check(t).expect("the manager's books hold");
    }
    let c = dc.core.counters();
    let per_pod = (c.pod_leases_issued - issued_before) as f64 / PODS as f64;
    assert!(per_pod <= 12.0, "{per_pod} leases issued per pod until each held a token");
    assert!(t - joined_at <= 2 * S, "every pod held a token {} ms after the storm", (t - joined_at) / MS);
}
