//! The lab binary as a user runs it: the last stdout line is one JSON object; bad input is a
//! one-line error and a non-zero exit; the production commands run here too.

use std::process::Command;

fn lab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold-lab")).args(args).output().expect("binary runs")
}

#[test]
fn simulate_prints_one_json_summary_line_last() {
    let out = lab(&["simulate", "--scenario", "overload", "--seeds", "1", "--baseline-seeds", "1", "--quiet"]);
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
    let out = lab(&[
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
        let out = lab(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("leasehold-lab: "), "{err}");
    }
    let out = lab(&[
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
fn the_production_commands_run_in_the_lab_and_the_lab_commands_do_not_ship() {
    let out = lab(&["coordinator", "--config", "/nonexistent.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
    let help = String::from_utf8(lab(&["--help"]).stdout).unwrap();
    for command in
        ["simulate", "demo", "chaos", "bench", "upstream", "coordinator", "dc-manager", "agent", "keys", "inspect"]
    {
        assert!(help.contains(command), "leasehold-lab --help lacks {command}: {help}");
    }
}
