//! Per-key windows across owners whose wall clocks disagree: an owner 5 s behind admits keys to
//! their limit, then hands its shards over (or crashes); the new owner, with a true clock, must
//! keep those admissions in the window for the whole window, not 5 s less (docs/FINDINGS.md#f59).
//! Waiting for real time to pass is the point here: every wait is on the clock, to a deadline.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::support;

use std::time::{Duration, Instant};
use support::keys_instances::{
    client, count, gauge, nats, post, start_with, stop_gracefully, tiers_file_with_window, wait_balanced,
};

const LIMIT: u64 = 3;
const WINDOW_MS: u64 = 10_000;
const BEHIND_MS: u64 = 5_000;

enum Stop {
    Graceful,
    Crash,
}

async fn a_new_owner_counts_a_slow_clocked_owners_admissions_for_the_whole_window(stop: Stop, durability: &str) {
    let server = nats();
    let tiers = tiers_file_with_window(LIMIT, WINDOW_MS);
    let http = client();
    let behind = format!("--clock-offset-ms=-{BEHIND_MS}");
    // A short drain: a's SIGTERM hand-over must be over well before the check at 6 s.
    let mut a = start_with(&server.url(), "a", &tiers, durability, &[&behind, "--drain-ms", "100"]);
    let b = start_with(&server.url(), "b", &tiers, durability, &[]);
    wait_balanced(&http, &[&a, &b], Duration::from_secs(20)).await;

    // Every key to its limit through a, which decides the keys of its own shards on its clock
    // (b decides the others and answers through a).
    let keys: Vec<String> = (0..16).map(|k| format!("user-{k}")).collect();
    let first = Instant::now();
    for key in &keys {
        for n in 0..LIMIT {
            assert_eq!(post(&http, &a, key).await, 200, "{key} admission {n}");
        }
    }
    let last = Instant::now();
    assert!(gauge(&http, &a, "leasehold_keys_tracked").await > 0, "a decided none of the keys on its own clock");

    match stop {
        Stop::Graceful => stop_gracefully(&mut a, Duration::from_secs(10)),
        Stop::Crash => a.child.kill().unwrap(),
    }
    wait_balanced(&http, &[&b], Duration::from_secs(10)).await;

    // Had b believed a's timestamps, a's admissions would have left its window 5 s early, i.e.
    // by now; the window really ends WINDOW_MS after the first of them.
    tokio::time::sleep_until((last + Duration::from_millis(WINDOW_MS - BEHIND_MS + 1_000)).into()).await;
    let judged_at = first.elapsed();
    assert!(
        judged_at < Duration::from_millis(WINDOW_MS - 2_000),
        "too slow to judge: {judged_at:?} after the first admission (the window is {WINDOW_MS} ms)"
    );
    for key in &keys {
        assert_eq!(post(&http, &b, key).await, 429, "{key}: admitted again inside the window");
        assert_eq!(count(&http, &b, key).await, LIMIT, "{key}");
    }
    assert!(first.elapsed() < Duration::from_millis(WINDOW_MS), "judged after the window ended");

    // And no longer than the window (plus the flush interval and a round trip): waste is bounded.
    tokio::time::sleep_until((last + Duration::from_millis(WINDOW_MS + 1_500)).into()).await;
    for key in &keys {
        assert_eq!(post(&http, &b, key).await, 200, "{key}: still denied after the window");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_hand_over_from_an_owner_whose_clock_is_behind_the_window_still_holds() {
    a_new_owner_counts_a_slow_clocked_owners_admissions_for_the_whole_window(Stop::Graceful, "interval:50").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_of_an_owner_whose_clock_is_behind_the_window_still_holds() {
    a_new_owner_counts_a_slow_clocked_owners_admissions_for_the_whole_window(Stop::Crash, "zero-loss").await;
}
