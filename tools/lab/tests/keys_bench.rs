//! `leasehold-lab bench keys`, short: its last line is the JSON summary (decisions/s, p50/p99,
//! over-admissions, allowed, denied, CPU per decision by component) for requests sent to each
//! key's owner and to any instance, the bench's own judge finds no over-admission, and the Redis
//! baseline runs when the machine's Redis is there.

#[test]
fn bench_keys_prints_throughput_latency_and_over_admissions_for_both_designs() {
    let out_dir = std::env::temp_dir().join(format!("lh-bench-keys-{}", std::process::id()));
    let args = ["keys", "--instances", "2", "--duration-s", "3", "--keys", "500", "--clients", "8", "--out-dir"];
    let (v, redis_up) = crate::bench_json(&[&args[..], &[out_dir.to_str().unwrap()]].concat());
    for field in ["decisions_per_s", "p50_ms", "p99_ms", "over_admissions", "allowed", "denied"] {
        assert!(v[field].is_number(), "{field} missing in {v}");
    }
    assert_eq!(v["over_admissions"], 0);
    // Sent to each key's owner first, then to any instance (forwarded over NATS).
    assert_eq!(v["routing"], "to-owner");
    assert_eq!(v["any_instance"]["routing"], "any-instance");
    assert_eq!(v["any_instance"]["over_admissions"], 0);
    // Where the CPU went, per decision: the client, the instances, the nats-server, in total.
    let cpu = |run: &serde_json::Value, component: &str| {
        run["cpu_us_per_decision"].as_array().and_then(|c| c.iter().find(|c| c["component"] == component)).cloned()
    };
    for component in ["client", "instances", "nats_server", "total"] {
        assert!(cpu(&v, component).is_some_and(|c| c["cpu_us"].is_number()), "{component} in {v}");
    }
    assert!(cpu(&v, "total").unwrap()["cpu_us"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["allowed"].as_u64().unwrap() > 0 && v["denied"].as_u64().unwrap() > 0, "{v}");
    if redis_up {
        assert_eq!(v["redis"]["over_admissions"], 0);
        assert!(v["redis"]["decisions_per_s"].as_f64().unwrap() > 0.0);
        assert!(cpu(&v["redis"], "redis").is_some(), "{v}");
    }
    let _ = std::fs::remove_dir_all(out_dir);
}
