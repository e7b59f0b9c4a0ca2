//! `leasehold-lab demo` end to end, shortened: real processes, a SIGKILLed coordinator leader, and
//! the strict upstream as the judge.

use std::process::Command;

#[test]
#[ignore = "long: 30 s of real processes; scripts/test runs it (cargo test -- --include-ignored)"]
fn a_short_demo_holds_the_limit_through_a_leader_kill() {
    let dir = std::env::temp_dir().join(format!("leasehold-demo-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(["demo", "--duration-s", "30", "--kill-leader-at-s", "12", "--table-every-s", "10", "--out-dir"])
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
    assert!(v["upstream_calls"].as_u64().unwrap() > 5_000, "too little traffic to judge: {last}");
    // The standby leads within one DC-lease TTL (10 s).
    assert!(v["failover_s"].as_f64().is_some_and(|f| f <= 10.0), "{last}");
    // A 30 s "day" moves demand 4x faster than the 120 s demo and the failover stalls
    // rebalancing for a tenth of it (0.87 measured); the 120 s demo is the acceptance run.
    assert!(v["utilization"].as_f64().unwrap() >= 0.8, "{last}");
    assert!(dir.join("follow-the-sun.svg").is_file());
    // SIGTERM at the end: every agent returned its lease and got the acknowledgement.
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
}
