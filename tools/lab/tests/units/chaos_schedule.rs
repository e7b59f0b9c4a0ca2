//! Tests of `tools/lab/src/chaos/schedule.rs`.

use leasehold_lab::chaos::schedule::*;

fn plan(duration_s: f64) -> Plan {
    Plan { duration_s, warmup_s: 12.0, dc_ttl_s: 6.0, pod_ttl_s: 5.0, dcs: 2, pods_per_dc: 4 }
}

#[test]
fn a_seed_replays_the_same_schedule_and_seeds_differ() {
    let a = schedule(7, &plan(300.0), &FaultKind::ALL);
    assert_eq!(a, schedule(7, &plan(300.0), &FaultKind::ALL));
    assert_ne!(a, schedule(8, &plan(300.0), &FaultKind::ALL));
}

#[test]
fn five_minutes_hold_every_kind_once_without_overlap() {
    for seed in 0..20 {
        let s = schedule(seed, &plan(300.0), &FaultKind::ALL);
        let mut kinds: Vec<FaultKind> = s.iter().map(|f| f.kind).collect();
        kinds.sort();
        kinds.dedup();
        assert_eq!(kinds.len(), FaultKind::ALL.len(), "seed {seed}: {s:?}");
        for w in s.windows(2) {
            assert!(w[1].at_s + 1e-9 >= w[0].heal_at_s + quiet_after_s(6.0), "seed {seed}: overlap");
        }
        assert!(s.last().unwrap().heal_at_s + quiet_after_s(6.0) <= 300.0);
        assert!(s.iter().all(|f| f.dc < 2 && f.pod < 4));
    }
}

#[test]
fn only_the_chosen_kinds_are_scheduled() {
    let s = schedule(1, &plan(150.0), &[FaultKind::PartitionDc, FaultKind::PausePod]);
    assert!(s.len() >= 4 && s.iter().all(|f| matches!(f.kind, FaultKind::PartitionDc | FaultKind::PausePod)));
}
