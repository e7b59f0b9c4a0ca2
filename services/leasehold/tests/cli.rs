//! The production binary as an operator runs it: bad settings are a one-line error and exit 2,
//! and the example configuration passes validation.

use std::process::Command;

fn leasehold(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold")).args(args).output().expect("binary runs")
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
    // An agent weight above what a report may carry (its every report would be dropped).
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("agent")
        .envs([("LEASEHOLD_AGENT_LIMIT", "api"), ("LEASEHOLD_AGENT_DC", "bkk"), ("LEASEHOLD_AGENT_WEIGHT", "1001")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.trim().lines().count() == 1 && err.contains("weight"), "{err}");
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
