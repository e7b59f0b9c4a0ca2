//! `leasehold-lab bench keys`, short: its last line is the JSON summary (decisions/s, p50/p99,
//! over-admissions, allowed, denied), the bench's own judge finds no over-admission, and the Redis
//! baseline runs when the machine's Redis is there.

use std::process::Command;

#[test]
fn bench_keys_prints_throughput_latency_and_over_admissions_for_both_designs() {
    let redis_up = std::net::TcpStream::connect("127.0.0.1:6379").is_ok();
    let out_dir = std::env::temp_dir().join(format!("lh-bench-keys-{}", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"));
    cmd.args(["bench", "keys", "--instances", "2", "--duration-s", "3", "--keys", "500", "--clients", "8"])
        .args(["--out-dir", out_dir.to_str().unwrap()]);
    if !redis_up {
        eprintln!("no Redis on 127.0.0.1:6379: measuring without the baseline");
        cmd.arg("--skip-redis");
    }
    let out = cmd.output().expect("binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    for field in ["decisions_per_s", "p50_ms", "p99_ms", "over_admissions", "allowed", "denied"] {
        assert!(v[field].is_number(), "{field} missing in {v}");
    }
    assert_eq!(v["over_admissions"], 0);
    assert!(v["allowed"].as_u64().unwrap() > 0 && v["denied"].as_u64().unwrap() > 0, "{v}");
    if redis_up {
        assert_eq!(v["redis"]["over_admissions"], 0);
        assert!(v["redis"]["decisions_per_s"].as_f64().unwrap() > 0.0);
    }
    let _ = std::fs::remove_dir_all(out_dir);
}
