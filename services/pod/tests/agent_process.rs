//! The agent process (`leasehold-agent`) for the Envoy tests: started with its listeners on
//! ports the kernel picks, which it reads from the lines the agent prints once it listens.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::envoy_rls::WITHIN;
use leasehold_nats_harness::wait;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// The agent process (`leasehold-agent`), serving RLS on `rls_port` for the shipped config.
pub(crate) struct AgentProcess {
    child: std::process::Child,
    http: String,
    envoy_port: Option<u16>,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The address in a line the agent prints when it listens: `... on 127.0.0.1:port[, ...]`.
fn listening_on(line: &str) -> Option<std::net::SocketAddr> {
    let (_, rest) = line.split_once(" on ")?;
    rest.split(',').next()?.trim().parse().ok()
}

impl AgentProcess {
    /// The agent serving RLS on `rls_port` (0: a port the kernel picks, read with
    /// [`AgentProcess::envoy_port`]; a given one is for a restart on the port Envoy knows).
    pub(crate) async fn start(nats_url: &str, dc: &str, rls_port: u16) -> AgentProcess {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/envoy/ratelimit.yaml");
        let rls = format!("envoy_rls_listen = \"127.0.0.1:{rls_port}\"\nenvoy_rls_config = \"{}\"\n", config.display());
        Self::start_with(nats_url, dc, &rls).await
    }

    /// The agent with `envoy` settings (TOML lines) of its own. Its HTTP API listens on a port the
    /// kernel picks; the ports are read from the lines the agent prints once it listens, so no
    /// port is picked first and taken by another test before the agent binds it.
    pub(crate) async fn start_with(nats_url: &str, dc: &str, envoy: &str) -> AgentProcess {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let unique = format!("leasehold-agent-envoy-{}-{dc}-{}", std::process::id(), STARTED.fetch_add(1, Relaxed));
        let dir = TempDir(std::env::temp_dir().join(unique));
        std::fs::create_dir_all(&dir.0).unwrap();
        let settings = format!(
            "nats_url = \"{nats_url}\"\ndc = \"{dc}\"\nreport_interval_ms = 100\n\
             http_listen = \"127.0.0.1:0\"\n{envoy}"
        );
        let file = dir.0.join("agent.toml");
        std::fs::write(&file, settings).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-agent"))
            .arg("--config")
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("leasehold-agent starts");
        // Read to the end on a thread of its own (any bytes), so the agent never blocks on a full
        // pipe nor fails writing to a closed one.
        let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
        std::thread::spawn(move || {
            let mut line = Vec::new();
            while std::io::BufRead::read_until(&mut stdout, b'\n', &mut line).is_ok_and(|n| n > 0) {
                let _ = lines_tx.send(String::from_utf8_lossy(&line).trim_end().to_string());
                line.clear();
            }
        });
        // Held from here, so a panic below kills the agent (`Drop`).
        let mut agent = AgentProcess { child, http: String::new(), envoy_port: None, _dir: dir };
        let wants_envoy = envoy.contains("envoy_rls_listen") || envoy.contains("envoy_rlqs_listen");
        let (mut http, mut seen) = (None, Vec::new());
        let deadline = tokio::time::Instant::now() + WITHIN;
        while http.is_none() || (wants_envoy && agent.envoy_port.is_none()) {
            match tokio::time::timeout_at(deadline, lines.recv()).await {
                Ok(Some(line)) => {
                    if line.starts_with("pod ") {
                        http = listening_on(&line);
                    } else if line.starts_with("Envoy rate limit") {
                        agent.envoy_port = listening_on(&line).map(|a| a.port());
                    }
                    seen.push(line);
                }
                Ok(None) => panic!("the agent exited before it listened; it printed {seen:?}"),
                Err(_) => panic!("the agent did not say where it listens within {WITHIN:?}; it printed {seen:?}"),
            }
        }
        agent.http = format!("http://{}", http.expect("read above"));
        agent
    }

    /// The port the agent's Envoy service (RLS or RLQS, the first it printed) listens on.
    pub(crate) fn envoy_port(&self) -> u16 {
        self.envoy_port.expect("started with an Envoy service")
    }

    /// Waits until the agent is ready (`/readyz`: every limit of Envoy's configuration holds a
    /// valid lease; checked to hold one for `limit`) and `limit`'s lease has a rate (a first
    /// lease may have none: the floors are not usable at first).
    pub(crate) async fn wait_until_ready(&mut self, http: &reqwest::Client, limit: &str) {
        let what = format!("the agent ready, with a leased rate for {limit}");
        wait::poll(WITHIN, Duration::from_millis(50), &what, async || {
            assert!(self.child.try_wait().unwrap().is_none(), "the agent exited");
            let r = http.get(format!("{}/readyz", self.http)).send().await.map_err(|e| e.to_string())?;
            let ready = r.status() == 200;
            let text = r.text().await.unwrap_or_default();
            if !ready {
                return Err(text);
            }
            let status = http.get(format!("{}/v1/status?limit={limit}", self.http)).send().await.unwrap();
            let body: serde_json::Value = status.json().await.unwrap();
            let rate = body["lease"]["quota"]["rate_milli_per_s"].as_u64();
            assert!(rate.is_some(), "ready without a lease for {limit}: {body}");
            if rate.is_some_and(|r| r > 0) {
                Ok(())
            } else {
                Err(body.to_string())
            }
        })
        .await
    }

    /// The agent's HTTP API (`http://127.0.0.1:port`).
    pub(crate) fn http(&self) -> &str {
        &self.http
    }

    /// A counter of the agent's `/metrics` (the line that starts with `series`).
    pub(crate) async fn metric(&self, http: &reqwest::Client, series: &str) -> u64 {
        let text = http.get(format!("{}/metrics", self.http)).send().await.unwrap().text().await.unwrap();
        let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in {text}"));
        line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{line}"))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
