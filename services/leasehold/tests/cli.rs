//! The production binary as an operator runs it: bad settings are a one-line error and exit 2,
//! and the example configuration passes validation.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

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
    // An agent whose default limit is no id (the limit itself is optional), or that would give
    // a limit back sooner than two report intervals.
    for (env, names) in [
        (("LEASEHOLD_AGENT_LIMIT", "a.b"), "limit"),
        (("LEASEHOLD_AGENT_LIMIT", ""), "limit"),
        (("LEASEHOLD_AGENT_IDLE_RELEASE_MS", "100"), "idle_release_ms"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .arg("agent")
            .envs([("LEASEHOLD_AGENT_DC", "bkk"), env])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{env:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.trim().lines().count() == 1 && err.contains(names), "{env:?}: {err}");
    }
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

/// A `leasehold keys` process, killed on drop.
struct Keys(std::process::Child);

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `leasehold keys` with these arguments and environment, stdout and stderr piped.
fn keys(args: &[&str], envs: &[(&str, &str)]) -> Keys {
    let child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("keys")
        .args(args)
        .envs(envs.iter().copied())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    Keys(child)
}

/// How it ended (code, stderr) within `limit`; `None` if it was still running (then killed).
fn ended_within(mut k: Keys, limit: Duration) -> Option<(Option<i32>, String)> {
    let stderr = k.0.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut text);
        let _ = tx.send(text);
    });
    // stderr closes when the process ends (or is killed on drop).
    let text = rx.recv_timeout(limit).ok()?;
    Some((k.0.wait().unwrap().code(), text))
}

/// The address it printed it listens on.
fn listening(k: &mut Keys) -> String {
    let mut line = String::new();
    BufReader::new(k.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected {line:?}")).to_string()
}

fn temp_file(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(format!("lh-cli-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into()
}

#[test]
fn keys_refuses_bad_settings_with_one_line_and_exit_2() {
    let shards_toml = temp_file("shards.toml", "shards = 0\n");
    let misspelt = temp_file(
        "misspelt.json",
        r#"{"default_tier": "free", "tiers": {"free": {"limit": 5, "window_ms": 60000}}, "overides": {}}"#,
    );
    let two_minutes =
        temp_file("long.json", r#"{"default_tier": "t", "tiers": {"t": {"limit": 5, "window_ms": 120000}}}"#);
    /// Arguments, environment, what the one line must say.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["--config", "/nonexistent.toml"], vec![], "not found"),
        (vec!["--config", &shards_toml], vec![], "shards"),
        (vec![], vec![("LEASEHOLD_KEYS_DURABILITY", "sometimes")], "durability"),
        (vec![], vec![("LEASEHOLD_KEYS_ADMIN_TOKEN", "hunter2")], "admin_token"),
        (vec![], vec![("LEASEHOLD_KEYS_TIER_HEADER", "x tier")], "tier_header"),
        (vec!["--tiers", &misspelt], vec![], "unknown field `overides`"),
        // A window longer than the admissions kept: refused before connecting anywhere.
        (
            vec!["--tiers", &two_minutes, "--nats-url", "nats://127.0.0.1:1", "--retention-ms", "60000"],
            vec![],
            "retention",
        ),
    ];
    for (args, envs, needle) in cases {
        let what = format!("{args:?} {envs:?}");
        let all: Vec<&str> = ["--listen", "127.0.0.1:0"].into_iter().chain(args.iter().copied()).collect();
        let (code, err) = ended_within(keys(&all, &envs), Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{what}: still running with bad settings"));
        assert_eq!(code, Some(2), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
        assert!(!err.contains("hunter2"), "{what}: the token was printed: {err}");
    }
}

/// Settings come from defaults, then the TOML file, then `LEASEHOLD_KEYS_*`, then the flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_reads_a_settings_file_then_the_environment_then_flags() {
    let toml = temp_file(
        "keys.toml",
        "listen = \"127.0.0.1:1\"\nmax_keys = 1\ncaller_tier = true\nadmin_token = \"from-the-file-0123456789\"\n",
    );
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    // The environment's listen address wins over the file's (port 1 would fail to bind).
    let mut k = keys(&["--config", &toml], &[("LEASEHOLD_KEYS_LISTEN", "127.0.0.1:0")]);
    let base = format!("http://{}", listening(&mut k));
    assert_eq!(http.post(format!("{base}/v1/keys/a?tier=free")).send().await.unwrap().status(), 200, "caller_tier");
    assert_eq!(http.post(format!("{base}/v1/keys/b")).send().await.unwrap().status(), 429, "max_keys = 1");
    let r = http.get(format!("{base}/v1/tiers")).bearer_auth("from-the-file-0123456789").send().await.unwrap();
    assert_eq!(r.status(), 200, "admin_token from the file");
    drop(k);
    // A flag wins over the file; a token of digits only is read as text, leading zero and all.
    let mut k = keys(
        &["--config", &toml, "--listen", "127.0.0.1:0", "--max-keys", "2"],
        &[("LEASEHOLD_KEYS_ADMIN_TOKEN", "0123456789012345678")],
    );
    let base = format!("http://{}", listening(&mut k));
    for key in ["a", "b"] {
        assert_eq!(http.post(format!("{base}/v1/keys/{key}")).send().await.unwrap().status(), 200, "{key}");
    }
    assert_eq!(http.post(format!("{base}/v1/keys/c")).send().await.unwrap().status(), 429, "--max-keys 2");
    let r = http.get(format!("{base}/v1/tiers")).bearer_auth("0123456789012345678").send().await.unwrap();
    assert_eq!(r.status(), 200, "admin_token from the environment");
}

/// Logs written to a pipe (a file, journald, a collector) carry no ANSI colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_pipe_carry_no_colour_codes() {
    let mut k = keys(&["--listen", "127.0.0.1:0", "--hot-key-rps", "1"], &[]);
    let base = format!("http://{}", listening(&mut k));
    let (tx, rx) = mpsc::channel();
    let stderr = k.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    // A key at 5 requests a second, above --hot-key-rps 1, is logged as hot within a second or two.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        for _ in 0..5 {
            http.post(format!("{base}/v1/keys/hot")).send().await.unwrap();
        }
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) if line.contains("hot key") => break line,
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("stderr ended: {e}"),
        }
        assert!(std::time::Instant::now() < deadline, "no hot-key warning logged");
    };
    assert!(!line.contains('\u{1b}'), "an ANSI escape in {line:?}");
    assert!(line.contains("WARN") && line.contains("key=\"hot\""), "{line}");
}

/// `leasehold auth`: the operator's setup, one pod's credential, and the agent refusing a pod id
/// its credential is not for; bad input is one line and exit 2.
#[test]
fn auth_issues_one_credential_per_pod_and_the_agent_checks_it_names_its_pod() {
    let dir = std::env::temp_dir().join(format!("leasehold-cli-auth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let roles = concat!(env!("CARGO_MANIFEST_DIR"), "/../../nats/prod/roles.toml");
    let d = dir.to_str().unwrap();
    let out = leasehold(&["auth", "setup", "--roles", roles, "--dc", "bkk", "--dc", "europe", "--dir", d]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("--role pod-bkk") && said.contains("coordinator.creds"), "{said}");

    let creds = dir.join("bkk-pod7.creds");
    let c = creds.to_str().unwrap();
    let out = leasehold(&["auth", "issue", "--dir", d, "--role", "pod-bkk", "--name", "bkk-pod7", "--out", c]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777, 0o600);

    // What a DC's provisioning holds: the DC's pod key and the account's public key.
    let (key, account) = (dir.join("keys/role-pod-bkk.nk"), dir.join("account.pub"));
    let again =
        ["auth", "issue", "--key", key.to_str().unwrap(), "--account", account.to_str().unwrap(), "--role", "pod-bkk"];
    let out = leasehold(&[&again[..], &["--name", "bkk-pod7", "--out", c]].concat());
    assert!(out.status.success(), "issued again over the old file: {}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&creds).unwrap().contains("BEGIN NATS USER JWT"));

    let account_key = dir.join("keys/account-LEASEHOLD.nk");
    for (key, account, says) in [(&key, &key, "not an account"), (&account_key, &account, "not a role's signing key")] {
        let args = ["auth", "issue", "--key", key.to_str().unwrap(), "--account", account.to_str().unwrap()];
        let out = leasehold(&[&args[..], &["--role", "pod-bkk", "--name", "x"]].concat());
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains(says), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let europe = dir.join("europe-pod1.creds");
    let out = leasehold(&["auth", "issue", "--dir", d, "--role", "pod-europe", "--name", "europe-pod1"]);
    std::fs::write(&europe, &out.stdout).unwrap();
    for (args, says) in [
        (vec!["--role", "pod-tokyo", "--name", "t1"], "pod-bkk"),
        (vec!["--role", "pod-bkk", "--name", "a.b"], "not a usable name"),
        (vec!["--role", "coordinator", "--name", "c2"], "standing"),
    ] {
        let out = leasehold(&[&["auth", "issue", "--dir", d][..], &args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.trim().lines().count() == 1 && err.contains(says), "{args:?}: {err}");
    }

    for (env, says) in [
        (vec![("LEASEHOLD_AGENT_NATS_CREDS_FILE", c), ("LEASEHOLD_AGENT_POD_ID", "bkk-pod8")], "\"bkk-pod7\"'s"),
        (vec![("LEASEHOLD_AGENT_NATS_CREDS_FILE", europe.to_str().unwrap())], "not pod-bkk's"),
        (vec![("LEASEHOLD_AGENT_NATS_CREDS_FILE", "/nonexistent.creds")], "nats_creds_file"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .arg("agent")
            .envs([("LEASEHOLD_AGENT_DC", "bkk"), ("LEASEHOLD_AGENT_NATS_URL", "nats://127.0.0.1:1")])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {err}");
        assert!(err.trim().lines().count() == 1 && err.contains(says), "{env:?}: {err}");
    }
    // A revocation signs the account again (the servers apply it on reload: permissions.rs).
    let resolver_before = std::fs::read_to_string(dir.join("resolver.conf")).unwrap();
    let out = leasehold(&["auth", "revoke", "--dir", d, "--creds", c]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("revoked bkk-pod7"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_ne!(std::fs::read_to_string(dir.join("resolver.conf")).unwrap(), resolver_before);
    let out = leasehold(&["auth", "revoke", "--dir", d, "--user", "bkk-pod7"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a user's public key"));

    // Every service checks its credential before it starts.
    for (service, var, dc) in
        [("coordinator", "LEASEHOLD_COORDINATOR_", None), ("dc-manager", "LEASEHOLD_DC_MANAGER_", Some("bkk"))]
    {
        let mut env = vec![(format!("{var}NATS_CREDS_FILE"), "/nonexistent.creds")];
        env.extend(dc.map(|dc| (format!("{var}DC"), dc)));
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold")).arg(service).envs(env).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{service}: {err}");
        assert!(err.contains("nats_creds_file"), "{service}: {err}");
    }
    let out = leasehold(&["limits", "ls", "--nats-creds-file", "/nonexistent.creds"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A misspelt setting in any service's file, or in its environment, is refused: one line naming
/// the setting, where it came from and the nearest known one, and exit 2 (never ignored while
/// the service runs with the default).
#[test]
fn every_service_refuses_a_misspelt_setting_and_names_the_nearest_one() {
    let dir = std::env::temp_dir().join(format!("lh-typos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (service, typo, meant) in [
        ("coordinator", "leader_ttl = 3000", "leader_ttl_ms"),
        ("dc-manager", "dc = \"bkk\"\nrenew_interval = 200", "renew_interval_ms"),
        ("agent", "dc = \"bkk\"\nweigth = 2.0", "weight"),
        ("keys", "durabilty = \"zero-loss\"", "durability"),
    ] {
        let file = dir.join(format!("{service}.toml"));
        std::fs::write(&file, typo).unwrap();
        let out = leasehold(&[service, "--config", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{service}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{service}: {err}");
        assert!(err.contains(&format!("did you mean `{meant}`?")), "{service}: {err}");
        assert!(err.contains(file.to_str().unwrap()), "{service}: the file is named: {err}");
    }
    for (service, var, meant) in [
        ("coordinator", "LEASEHOLD_COORDINATOR_NATS_ULR", "nats_url"),
        ("dc-manager", "LEASEHOLD_DC_MANAGER_LEDGER_DOMIAN", "ledger_domain"),
        ("agent", "LEASEHOLD_AGENT_HTTP_LISTNE", "http_listen"),
        ("keys", "LEASEHOLD_KEYS_REPLICA", "replicas"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold")).arg(service).env(var, "x").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{service}: {err}");
        assert!(err.contains(var) && err.contains(&format!("did you mean `{meant}`?")), "{service}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Each service's `--help` lists every setting with its default, the ones without a flag
/// (the admin token) and the ones not set by default included.
#[test]
fn every_service_help_lists_its_settings_and_their_defaults() {
    for (service, lines) in [
        ("coordinator", &["  leader_ttl_ms = 3000", "  replicas = 1", "  http_listen  (unset)"][..]),
        ("dc-manager", &["  dc = \"\"", "  report_interval_ms = 250", "  ledger_domain  (unset)"][..]),
        ("agent", &["  http_listen = \"127.0.0.1:9090\"", "  weight = 1.0", "  envoy_rlqs.ttl_s = "][..]),
        ("keys", &["  admin_token  (unset)", "  replicas = 1", "  durability = \"interval:100\""][..]),
    ] {
        let out = leasehold(&[service, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{service}: {help}");
        for line in lines {
            assert!(help.lines().any(|l| l.starts_with(line)), "{service} --help lacks {line:?}:\n{help}");
        }
    }
}
