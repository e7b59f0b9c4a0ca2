//! A pod's bucket admits a call of cost 1 only if its lease's burst holds at least one whole
//! token. Splitting a DC's burst evenly among more pods than it has tokens (a floor of 5 tokens
//! among 8 pods, 6,000 tokens among 10,000 pods) left every pod a fraction: the DC admitted
//! nothing while the books said its pods held the whole floor. The split hands out whole tokens
//! and gives the rate only to pods that hold one.

use crate::support::scripted::{report_seq_of, ScriptedDc};
use leasehold_core::dc_manager::{DcManagerConfig, SplitMode};
use leasehold_core::quota::{Quota, MILLI};
use leasehold_core::wire::LeaseVersion;

use crate::support::{MS, S};

fn manager(split: SplitMode, floor: Quota) -> ScriptedDc {
    let mut cfg = DcManagerConfig::new("api", "bkk", "bkk-mgr");
    cfg.split = split;
    cfg.pod_ttl_ms = 2_000;
    ScriptedDc::new(cfg, floor, 0, 1, (500, 50))
}

/// Every pod reports a few times from `t` on (acking what it holds); the leases they hold then.
fn run_pods(dc: &mut ScriptedDc, pods: usize, t: u64) -> Vec<Quota> {
    for round in 0..8u64 {
        for p in 0..pods {
            dc.report(&format!("p{p}"), t + round * 250 * MS, true, true);
        }
    }
    (0..pods).map(|p| dc.held.get(&format!("p{p}")).map_or(Quota::ZERO, |l| l.quota)).collect()
}

fn check_whole(held: &[Quota], budget: Quota) -> usize {
    let total = held.iter().fold(Quota::ZERO, |s, q| s.saturating_add(*q));
    assert!(total.fits_in(&budget), "the pods hold {total}, more than {budget}");
    for q in held {
        assert_eq!(q.burst_milli % MILLI, 0, "a fraction of a token can never admit a call: {q}");
        assert!(q.burst_milli >= MILLI || q.rate_milli_per_s == 0, "a rate without a token admits nothing: {q}");
    }
    held.iter().filter(|q| q.burst_milli >= MILLI && q.rate_milli_per_s > 0).count()
}

#[test]
fn a_floor_of_five_tokens_among_eight_pods_serves_five_of_them() {
    for split in [SplitMode::Equal, SplitMode::Weighted, SplitMode::Demand] {
        let floor = Quota::per_s(50, 5);
        let mut dc = manager(split, floor);
        // No DC lease ever comes (the coordinators are gone): the DC runs on its floor.
        let held = run_pods(&mut dc, 8, 10 * S);
        let serving = check_whole(&held, floor);
        eprintln!("{split:?}: {serving} of 8 pods can admit; they hold {held:?}");
        assert_eq!(serving, 5, "{split:?}: one token each for five pods");
        assert_eq!(dc.core.pods_without_token(12 * S), 3, "{split:?}: the three others are counted");
        let rate: u64 = held.iter().map(|q| q.rate_milli_per_s).sum();
        assert_eq!(rate, floor.rate_milli_per_s, "{split:?}: the whole floor's rate goes to pods that can use it");
    }
}

#[test]
fn a_dc_lease_is_split_in_whole_tokens_and_none_is_left_over() {
    for (burst, pods) in [(20, 8), (7, 3), (3, 4), (1, 10)] {
        let mut dc = manager(SplitMode::Equal, Quota::ZERO);
        let lease = Quota::per_s(900, burst);
        let basis = report_seq_of(&dc.core.tick(10 * S)).expect("the manager reports");
        dc.dc_lease(lease, 10_000, LeaseVersion::new(1, 1), basis, 10 * S).expect("lease taken");
        let held = run_pods(&mut dc, pods, 10 * S);
        let serving = check_whole(&held, lease);
        let tokens: u64 = held.iter().map(|q| q.burst_milli / MILLI).sum();
        eprintln!("{burst} tokens among {pods} pods: {held:?}");
        assert_eq!(tokens, burst, "every whole token is handed out");
        assert_eq!(serving, pods.min(burst as usize));
    }
}
