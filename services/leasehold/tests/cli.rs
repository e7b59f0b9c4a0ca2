//! The operator CLI as a user runs it: the last stdout line is one JSON object; bad input is a
//! one-line error and a non-zero exit.

use std::process::Command;

fn leasehold(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold")).args(args).output().expect("binary runs")
}

#[test]
fn simulate_prints_one_json_summary_line_last() {
    let out = leasehold(&["simulate", "--scenario", "overload", "--seeds", "1", "--baseline-seeds", "1", "--quiet"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().expect("some output");
    let v: serde_json::Value = serde_json::from_str(last).expect("last line is JSON");
    for key in [
        "scenario",
        "seeds",
        "violations",
        "utilization",
        "max_window_ratio",
        "rebalance_s_p99",
        "seconds",
        "baselines",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {last}");
    }
    for b in ["static_split", "static_per_pod", "uncoordinated"] {
        assert!(v["baselines"][b]["utilization"].is_number() && v["baselines"][b]["violations"].is_number());
    }
    assert_eq!(v["violations"], 0);
}

#[test]
fn chart_is_written_as_svg() {
    let dir = std::env::temp_dir().join(format!("leasehold-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("day.svg");
    let out = leasehold(&[
        "simulate",
        "--scenario",
        "overload",
        "--seeds",
        "1",
        "--baseline-seeds",
        "1",
        "--quiet",
        "--chart",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.contains("europe"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_is_a_one_line_error_and_nonzero_exit() {
    for args in [
        vec!["simulate", "--scenario", "mars"],
        vec!["simulate", "--scenario", "diurnal", "--seeds", "0"],
        vec!["simulate", "--scenario", "diurnal", "--threads", "0"],
    ] {
        let out = leasehold(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("leasehold: "), "{err}");
    }
    let out = leasehold(&[
        "simulate",
        "--scenario",
        "diurnal",
        "--chart",
        "/nonexistent-dir/x.svg",
        "--quiet",
        "--baseline-seeds",
        "1",
    ]);
    assert!(!out.status.success());
}

#[test]
fn services_refuse_bad_configuration_with_one_line_and_exit_2() {
    for args in
        [&["dc-manager", "--config", "/nonexistent.toml"][..], &["coordinator", "--config", "/nonexistent.toml"][..]]
    {
        let out = leasehold(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("not found"), "{err}");
    }
    // An agent without a limit name.
    let out =
        Command::new(env!("CARGO_BIN_EXE_leasehold")).arg("agent").env("LEASEHOLD_AGENT_DC", "bkk").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.trim().lines().count() == 1 && err.contains("limit"), "{err}");
    // The example agent config is valid: the agent gets past validation and fails only to connect.
    let agent_toml = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/agent.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["agent", "--config", agent_toml])
        .env("LEASEHOLD_AGENT_NATS_URL", "nats://127.0.0.1:1")
        .env("LEASEHOLD_AGENT_HTTP_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"));
}
