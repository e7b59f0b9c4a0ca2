//! `leasehold-lab bench envoy`, short, in an out dir an earlier run left its output in: through a
//! real Envoy, every mode answers every request 200 (the bench's limit is far above its load),
//! and the last line is the JSON summary
//! (requests/s and latency per mode, the p99 each rate limit design adds, their ratio, the floor
//! (an RLS server deciding nothing) against the Redis design, what RLQS costs over no limit,
//! pooled and round by round).

#[test]
fn bench_envoy_prints_the_latency_each_design_adds() {
    // An out dir an earlier run used: its `agent.out` names ports nobody listens on now.
    let out_dir = std::env::temp_dir().join(format!("lh-bench-envoy-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::write(
        out_dir.join("agent.out"),
        "Envoy rate limit service (RLS v3) on 127.0.0.1:9, limits: a\nEnvoy rate limit quota service (RLQS) on 127.0.0.1:9, limits lent: b\n",
    )
    .unwrap();
    let args = ["envoy", "--duration-s", "1", "--rounds", "2", "--rate", "500", "--clients", "4", "--out-dir"];
    let (v, redis_up) = crate::bench_json(&[&args[..], &[out_dir.to_str().unwrap()]].concat());
    let _ = std::fs::remove_dir_all(&out_dir);
    let modes: &[&str] = if redis_up {
        &["no_limit", "floor", "agent", "redis", "rlqs"]
    } else {
        &["no_limit", "floor", "agent", "rlqs"]
    };
    for mode in modes {
        let m = &v["modes"][mode];
        assert_eq!(m["not_200"], 0, "{mode}: {v}");
        assert!(m["requests_per_s"].as_f64().is_some_and(|r| r > 100.0), "{mode}: {v}");
        assert!(m["p99_ms"].as_f64().is_some_and(|p| p > 0.0), "{mode}: {v}");
        assert!(m["ready_ms_max"].as_f64().is_some_and(|r| r >= 0.0), "{mode}: {v}");
    }
    assert!(v["added_p99_ms"]["agent"].is_number(), "{v}");
    assert!(v["added_p99_ms"]["floor"].is_number(), "{v}");
    // The floor's own server did the floor's work, and nothing else's.
    let floor_cpu = |mode: &str| {
        let cpu = v["modes"][mode]["cpu_us_per_request"].as_array().expect("a list");
        cpu.iter().find(|c| c["component"] == "floor_rls").and_then(|c| c["cpu_us"].as_f64()).expect("measured")
    };
    assert!(floor_cpu("floor") > 1.0 && floor_cpu("agent") < 1.0, "{v}");
    assert_eq!(v["added_p99_ms"]["redis"].is_number(), redis_up, "{v}");
    // The ratio: a number, or null when Redis added nothing measurable in so short a run.
    for ratio in ["agent_over_redis_added_p99", "floor_over_redis_added_p99"] {
        assert!(v[ratio].is_number() || v[ratio].is_null(), "{ratio}: {v}");
    }
    // Paced: RLQS's p99 over no limit's, pooled and in each of the two rounds.
    assert!(v["rlqs_over_no_limit"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    let by_round = v["rlqs_over_no_limit_by_round"].as_array().expect("a list");
    assert_eq!(by_round.len(), 2, "{v}");
    assert!(by_round.iter().all(|x| x.as_f64().is_some_and(|x| x > 0.0)), "{v}");
}
