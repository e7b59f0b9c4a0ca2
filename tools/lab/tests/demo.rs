//! `leasehold-lab demo` end to end, shortened: real processes, two limits through the same agents
//! and DC managers, a live `leasehold limits put` that lowers the partner API's R (and then its
//! upstream's hard limit), a SIGKILLed coordinator leader, and the strict upstreams as the judges.

use std::process::Command;

#[test]
#[ignore = "long: 30 s of real processes; scripts/test runs it (cargo test -- --include-ignored)"]
fn a_short_demo_holds_two_limits_through_a_live_lowering_and_a_leader_kill() {
    let dir = std::env::temp_dir().join(format!("leasehold-demo-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(["demo", "--duration-s", "30", "--kill-leader-at-s", "12", "--lower-at-s", "5"])
        .args(["--table-every-s", "10", "--out-dir"])
        .arg(&dir)
        .output()
        .expect("binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no summary; stderr:\n{stderr}"));
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    assert!(out.status.success(), "{last}\n{stderr}");
    assert_eq!(v["upstream_rejections"], 0, "{last}");
    assert!(v["max_window_ratio"].as_f64().unwrap() <= 1.0, "{last}");
    assert_eq!(v["pods"], 8);
    let limits = v["limits"].as_array().expect("limits");
    let names: Vec<&str> = limits.iter().map(|l| l["limit"].as_str().unwrap()).collect();
    assert_eq!(names, ["partner-api", "search-api"], "{last}");
    let (partner, search) = (&limits[0], &limits[1]);
    for l in limits {
        assert_eq!(l["upstream_rejections"], 0, "{last}");
        assert!(l["max_window_ratio"].as_f64().unwrap() <= 1.0, "{last}");
    }
    assert!(partner["upstream_calls"].as_u64().unwrap() > 5_000, "too little traffic to judge: {last}");
    assert!(search["upstream_calls"].as_u64().unwrap() > 2_500, "too little traffic to judge: {last}");
    // The standby leads within one DC-lease TTL (10 s).
    assert!(v["failover_s"].as_f64().is_some_and(|f| f <= 10.0), "{last}");
    // A 30 s "day" moves demand 4x faster than the 120 s demo and the failover stalls
    // rebalancing for a tenth of it (0.87 measured alone); the 120 s demo is the acceptance run.
    // With a CPU-bound test beside it (as in the suite) it measured 0.77–0.79 in one run of
    // three or four, on this code and on the code before the TSC clock alike: the floor is 0.7,
    // below what load alone was seen to cost.
    assert!(partner["utilization"].as_f64().unwrap() >= 0.7, "{last}");
    assert!(search["utilization"].as_f64().unwrap() >= 0.7, "{last}");
    assert!(dir.join("follow-the-sun.svg").is_file());
    assert!(dir.join("follow-the-sun-search-api.svg").is_file());
    // The live lowering: the put ran, the admitted rate fell to the new R within one DC-lease
    // lifetime (10.3 s) and a span, and the partner's lower limit refused nothing.
    let low = &v["lowering"];
    assert_eq!(low["put_exit_code"], 0, "{last}");
    assert!(low["applied_seen_at_s"].is_f64(), "{last}");
    assert!(low["admissions_dropped_after_s"].as_f64().is_some_and(|s| s <= 13.3), "{last}");
    assert!(low["upstream_lowered_at_s"].is_f64(), "{last}");
    assert_eq!(low["upstream_rejections_since_put"], 0, "{last}");
    assert_eq!(partner["hard_limit"]["calls_at_end"], 700, "{last}");
    assert_eq!(partner["leased"]["rate_at_end_per_s"], 612, "{last}");
    // SIGTERM at the end: every agent returned its leases and got the acknowledgement.
    assert_eq!(v["drains_acknowledged"], 8, "{last}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_demo_arguments_are_one_line_errors() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab")).args(["demo", "--duration-s", "3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--duration-s"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(["demo", "--duration-s", "20", "--lower-at-s", "20"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--lower-at-s"), "{err}");
}
