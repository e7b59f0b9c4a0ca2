//! A DC's burst share holds a whole token for each of its healthy pods
//! (`min_burst_per_pod_milli`). A DC manager behind on its reports counts fewer pods healthy for
//! a moment (a pod whose report it reads late looks silent); when that count moved the split at
//! once, a limit whose burst is one token per pod re-split both DCs every second, and each DC
//! then re-split its pods: the control-plane bench at 1,000 limits × 100 pods × 2 DCs spent
//! most of its full splits on it. The count a burst floor uses now holds its peak for
//! `PODS_HEALTHY_HOLD_MS`; a drop that lasts longer moves the split, a rise moves it at once.

use leasehold_shared::coordinator::{CoordinatorCore, LimitConfig, PODS_HEALTHY_HOLD_MS};
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::DcReport;

const MS: u64 = 1_000_000;

fn report(dc: &str, seq: u64, pods_healthy: u32) -> DcReport {
    DcReport { pods_healthy, ..DcReport::new("api", dc, &format!("{dc}-mgr"), 1, seq, Quota::per_s(2_000, 0)) }
}

/// Both DCs report every 250 ms, demand equal; `eu_pods(t)` healthy in Europe, 100 in BKK.
/// Europe's burst target after each tick (every second) until `until_ns`.
fn eu_burst_targets(c: &mut CoordinatorCore, from_s: u64, until_s: u64, eu_pods: impl Fn(u64) -> u32) -> Vec<u64> {
    let mut out = Vec::new();
    for step in (from_s * 4)..(until_s * 4) {
        let t = step * 250 * MS;
        c.on_dc_report(&report("bkk", step + 1, 100), t);
        c.on_dc_report(&report("eu", step + 1, eu_pods(t)), t);
        if step % 4 == 3 {
            c.tick(t);
            out.push(c.dcs()["eu"].target.burst_milli);
        }
    }
    out
}

fn limit() -> CoordinatorCore {
    // R = 1,000/s, B = 200 tokens: one token for each of the 200 pods.
    let cfg = LimitConfig::new("api", Quota::per_s(1_000, 200), &[("bkk", Quota::ZERO), ("eu", Quota::ZERO)]);
    CoordinatorCore::new(cfg, "coord-a", 1)
}

#[test]
fn a_moment_of_fewer_healthy_pods_leaves_the_burst_split_alone() {
    let mut c = limit();
    let settled = eu_burst_targets(&mut c, 0, 5, |_| 100);
    assert_eq!(settled.last(), Some(&100_000), "a token for each of Europe's 100 pods: {settled:?}");
    // Every other second, the report the tick reads counts 87 pods healthy (pods read late).
    let flicker = |t: u64| if (t / (250 * MS)) % 8 == 3 { 87 } else { 100 };
    let during = eu_burst_targets(&mut c, 5, 15, flicker);
    assert!(during.iter().all(|&b| b == 100_000), "Europe's burst moved with a passing count: {during:?}");
}

#[test]
fn a_lasting_drop_moves_the_burst_split_after_the_hold_and_a_rise_at_once() {
    let mut c = limit();
    eu_burst_targets(&mut c, 0, 5, |_| 100);
    // 50 of Europe's pods leave for good at 5 s.
    let hold_s = PODS_HEALTHY_HOLD_MS.div_ceil(1_000);
    let after = eu_burst_targets(&mut c, 5, 5 + hold_s + 3, |_| 50);
    assert!(*after.last().unwrap() < 100_000, "the drop never moved the split: {after:?}");
    assert!(after[0] == 100_000, "the drop moved the split within its first second: {after:?}");
    // They come back: the split follows within a tick.
    let back = eu_burst_targets(&mut c, 5 + hold_s + 3, 5 + hold_s + 5, |_| 100);
    assert_eq!(back[0], 100_000, "{back:?}");
}
