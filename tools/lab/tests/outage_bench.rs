//! `bench outage` as a user runs it: with the whole control plane killed under load, Leasehold's
//! agents stay within R·1 s + B in every window of 1 s and stop once their leases end; the
//! central Redis design, killed the same way, goes over when failing open and admits nothing
//! when failing closed.

use std::process::Command;

#[test]
fn with_the_control_plane_gone_leasehold_stays_within_the_bound_and_redis_fails_open_or_shut() {
    let redis = Command::new("redis-server").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"));
    cmd.args(["bench", "outage", "--clients", "50", "--healthy-s", "10", "--outage-s", "8"]);
    let out_dir = std::env::temp_dir().join(format!("lh-outage-{}", std::process::id()));
    cmd.arg("--out-dir").arg(&out_dir);
    if !redis {
        eprintln!("no redis-server on this machine: measuring without the baseline");
        cmd.arg("--skip-redis");
    }
    let out = cmd.output().expect("binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("JSON");
    let l = &v["leasehold"];
    assert!(l["within_bound"] == true, "Leasehold over R·1 s + B: {l}");
    assert!(l["admitted_per_s_healthy"].as_f64().unwrap() > 0.0, "nothing admitted while healthy: {l}");
    // The degraded state shows where the shipped alert looks: every agent's lease is stale.
    assert_eq!(l["agents_stale_during_outage"], "4 of 4", "{l}");
    // Pod leases last 5 s: the outage's last seconds admit nothing.
    let by_s: Vec<u64> =
        l["admitted_per_s_by_second"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
    assert_eq!(by_s[by_s.len() - 2..], [0, 0], "admitting long after the control plane died: {by_s:?}");
    if redis {
        assert!(v["redis_fail_open"]["within_bound"] == false, "{}", v["redis_fail_open"]);
        assert_eq!(v["redis_fail_closed"]["admitted_per_s_outage"].as_f64(), Some(0.0), "{}", v["redis_fail_closed"]);
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}
