//! Per-key instances as processes of the real `leasehold` binary, for the keys tests.
#![allow(dead_code)] // each test file uses its own part of it
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_nats_harness::{binaries, NatsServer};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const SHARDS: u64 = 64;
pub(crate) const TTL_MS: u64 = 1_000;
/// Every instance's admin token (`GET`/`PUT /v1/tiers`, `GET /v1/hot`).
pub(crate) const ADMIN_TOKEN: &str = "cluster-test-admin-token";
/// The header a trusted gateway names the tier in (every instance's `tier_header`).
pub(crate) const TIER_HEADER: &str = "x-leasehold-tier";

pub(crate) struct Instance {
    pub child: Child,
    pub base: String,
    /// Its stderr (the log), shown when a wait fails.
    pub log: std::path::PathBuf,
}

impl Instance {
    /// The last lines of its log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn tiers_file(limit: u64) -> String {
    let path = std::env::temp_dir().join(format!("lh-keys-tiers-{}-{limit}.json", std::process::id()));
    let doc = serde_json::json!({ "default_tier": "t", "tiers": { "t": { "limit": limit, "window_ms": 60_000 } } });
    std::fs::write(&path, doc.to_string()).unwrap();
    path.to_string_lossy().into()
}

pub(crate) fn start(nats: &str, id: &str, tiers: &str, durability: &str) -> Instance {
    start_with(nats, id, tiers, durability, &[])
}

pub(crate) fn start_with(nats: &str, id: &str, tiers: &str, durability: &str, extra: &[&str]) -> Instance {
    let log =
        std::env::temp_dir().join(format!("lh-keys-{}-{id}-{}.log", std::process::id(), nats.replace([':', '/'], "")));
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["keys", "--listen", "127.0.0.1:0", "--nats-url", nats, "--instance-id", id, "--tiers", tiers])
        .args(["--shard-ttl-ms", &TTL_MS.to_string(), "--durability", durability])
        .args(extra)
        .env("LEASEHOLD_KEYS_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("LEASEHOLD_KEYS_TIER_HEADER", TIER_HEADER)
        .stdout(Stdio::piped())
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("leasehold keys starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected {line:?}"));
    Instance { base: format!("http://{addr}"), child, log }
}

pub(crate) fn sigterm(i: &Instance) {
    Command::new("kill").arg("-TERM").arg(i.child.id().to_string()).status().unwrap();
}

pub(crate) async fn served(http: &reqwest::Client, i: &Instance) -> u64 {
    let Ok(r) = http.get(format!("{}/metrics", i.base)).send().await else { return 0 };
    let text = r.text().await.unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("leasehold_keys_shards_served ")).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Wait until the instances serve all shards with these counts (in any order); how long it took.
pub(crate) async fn wait_balanced(http: &reqwest::Client, instances: &[&Instance], within: Duration) -> Duration {
    let start = Instant::now();
    let n = instances.len() as u64;
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    loop {
        poll.tick().await;
        let mut counts = Vec::new();
        for i in instances {
            counts.push(served(http, i).await);
        }
        if counts.iter().sum::<u64>() == SHARDS && counts.iter().all(|&c| c >= SHARDS / n && c <= SHARDS.div_ceil(n)) {
            return start.elapsed();
        }
        if start.elapsed() >= within {
            let logs: Vec<String> = instances.iter().map(|i| format!("{}:\n{}", i.base, i.log_tail(15))).collect();
            panic!("shards not balanced within {within:?}: {counts:?}\n{}", logs.join("\n"));
        }
    }
}

pub(crate) async fn post(http: &reqwest::Client, i: &Instance, key: &str) -> u16 {
    http.post(format!("{}/v1/keys/{key}", i.base)).send().await.unwrap().status().as_u16()
}

pub(crate) async fn count(http: &reqwest::Client, i: &Instance, key: &str) -> u64 {
    let v: serde_json::Value =
        http.get(format!("{}/v1/keys/{key}", i.base)).send().await.unwrap().json().await.unwrap();
    v["count"].as_u64().unwrap_or_else(|| panic!("no count in {v}"))
}

/// The tiers an instance applies (`GET /v1/tiers`, an admin endpoint).
pub(crate) async fn tiers_of(http: &reqwest::Client, i: &Instance) -> serde_json::Value {
    let r = http.get(format!("{}/v1/tiers", i.base)).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    r.json().await.unwrap()
}

/// `PUT /v1/tiers` (an admin endpoint) on `i`.
pub(crate) async fn put_tiers(http: &reqwest::Client, i: &Instance, doc: &serde_json::Value) -> reqwest::Response {
    http.put(format!("{}/v1/tiers", i.base)).bearer_auth(ADMIN_TOKEN).json(doc).send().await.unwrap()
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap()
}

pub(crate) fn nats() -> NatsServer {
    NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap()
}

/// A nats-server and two instances sharing its shards evenly (interval durability).
pub(crate) async fn two_instances(tiers: &str) -> (NatsServer, reqwest::Client, Instance, Instance) {
    let server = nats();
    let http = client();
    let a = start(&server.url(), "a", tiers, "interval:50");
    let b = start(&server.url(), "b", tiers, "interval:50");
    wait_balanced(&http, &[&a, &b], Duration::from_secs(20)).await;
    (server, http, a, b)
}

/// Admit each key up to its limit through rotating instances; all must be allowed.
pub(crate) async fn fill(http: &reqwest::Client, instances: &[&Instance], keys: &[String], limit: u64) {
    for (k, key) in keys.iter().enumerate() {
        for n in 0..limit {
            let i = instances[(k + n as usize) % instances.len()];
            assert_eq!(post(http, i, key).await, 200, "{key} admission {n}");
        }
    }
}

/// A tiers file with one tier `t`: `limit` per `window_ms`.
pub(crate) fn tiers_file_with_window(limit: u64, window_ms: u64) -> String {
    let name = format!("lh-keys-tiers-{}-{limit}-per-{window_ms}.json", std::process::id());
    let path = std::env::temp_dir().join(name);
    let doc = serde_json::json!({ "default_tier": "t", "tiers": { "t": { "limit": limit, "window_ms": window_ms } } });
    std::fs::write(&path, doc.to_string()).unwrap();
    path.to_string_lossy().into()
}

/// A gauge from the instance's `/metrics` (0 if it does not answer).
pub(crate) async fn gauge(http: &reqwest::Client, i: &Instance, name: &str) -> u64 {
    let Ok(r) = http.get(format!("{}/metrics", i.base)).send().await else { return 0 };
    let text = r.text().await.unwrap_or_default();
    let prefix = format!("{name} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// SIGTERM (a graceful hand-over), then wait until the process is gone.
pub(crate) fn stop_gracefully(i: &mut Instance, within: Duration) {
    sigterm(i);
    wait_exit(&mut i.child, within);
}

/// The exit status of `child` once it exits; if it is still running after `within`, SIGKILL it
/// and fail.
pub(crate) fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let pid = child.id();
    std::thread::scope(|s| {
        let (exited, exit) = std::sync::mpsc::channel();
        s.spawn(move || {
            let _ = exited.send(child.wait());
        });
        match exit.recv_timeout(within) {
            Ok(status) => status.expect("the child can be waited for"),
            Err(_) => {
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
                panic!("still running {within:?} after SIGTERM");
            }
        }
    })
}
