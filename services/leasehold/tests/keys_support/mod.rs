//! `leasehold keys` instances as processes of the real binary, for the tests that need several
//! (with a skewed clock, or a NATS user of their own): start, stop, and bounded waits on what
//! they serve.
#![allow(dead_code)] // each test file uses its own part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SHARDS: u64 = 64;
pub const TTL_MS: u64 = 1_000;

pub struct Instance {
    pub child: Child,
    pub base: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Instance {
    /// SIGTERM (a graceful hand-over), then wait until the process is gone.
    pub fn stop_gracefully(&mut self, within: Duration) {
        Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status().unwrap();
        let deadline = Instant::now() + within;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "still running {within:?} after SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A tiers file with one tier `t`: `limit` per `window_ms`.
pub fn tiers_file(name: &str, limit: u64, window_ms: u64) -> String {
    let path = std::env::temp_dir().join(format!("lh-keys-{name}-{}-{limit}-{window_ms}.json", std::process::id()));
    let doc = serde_json::json!({ "default_tier": "t", "tiers": { "t": { "limit": limit, "window_ms": window_ms } } });
    std::fs::write(&path, doc.to_string()).unwrap();
    path.to_string_lossy().into()
}

/// Start an instance on `nats` (a URL, with credentials if the server wants them); returns once
/// it listens.
pub fn start(nats: &str, id: &str, tiers: &str, durability: &str, extra: &[&str]) -> Instance {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["keys", "--listen", "127.0.0.1:0", "--nats-url", nats, "--instance-id", id, "--tiers", tiers])
        .args(["--shard-ttl-ms", &TTL_MS.to_string(), "--durability", durability])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("leasehold keys starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected {line:?}"));
    Instance { base: format!("http://{addr}"), child }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

/// A gauge from the instance's `/metrics` (0 if it does not answer).
pub async fn gauge(http: &reqwest::Client, i: &Instance, name: &str) -> u64 {
    let Ok(r) = http.get(format!("{}/metrics", i.base)).send().await else { return 0 };
    let text = r.text().await.unwrap_or_default();
    let prefix = format!("{name} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Wait until the instances serve all shards, evenly.
pub async fn wait_balanced(http: &reqwest::Client, instances: &[&Instance], within: Duration) {
    let start = Instant::now();
    let n = instances.len() as u64;
    let mut poll = tokio::time::interval(Duration::from_millis(20));
    loop {
        poll.tick().await;
        let mut counts = Vec::new();
        for i in instances {
            counts.push(gauge(http, i, "leasehold_keys_shards_served").await);
        }
        if counts.iter().sum::<u64>() == SHARDS && counts.iter().all(|&c| c >= SHARDS / n && c <= SHARDS.div_ceil(n)) {
            return;
        }
        assert!(start.elapsed() < within, "shards not balanced within {within:?}: {counts:?}");
    }
}

pub async fn post(http: &reqwest::Client, i: &Instance, key: &str) -> u16 {
    http.post(format!("{}/v1/keys/{key}", i.base)).send().await.unwrap().status().as_u16()
}

pub async fn count(http: &reqwest::Client, i: &Instance, key: &str) -> u64 {
    let v: serde_json::Value =
        http.get(format!("{}/v1/keys/{key}", i.base)).send().await.unwrap().json().await.unwrap();
    v["count"].as_u64().unwrap_or_else(|| panic!("no count in {v}"))
}
