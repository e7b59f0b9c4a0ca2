//! The demo's child processes: every service is this same binary with a subcommand. Output goes
//! to one log file per process; children are killed when the demo ends, however it ends.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// A child's arguments and environment, to start it again.
type Spec = (Vec<String>, Vec<(String, String)>);

pub struct Procs {
    exe: PathBuf,
    log_dir: PathBuf,
    children: BTreeMap<String, Child>,
    killed: Vec<String>,
    /// How each child was started, for [`Procs::respawn`].
    specs: BTreeMap<String, Spec>,
    addresses: BTreeMap<String, String>,
    /// The tasks copying each child's stdout to its `.out` file (done once the child exited).
    readers: BTreeMap<String, tokio::task::JoinHandle<()>>,
}

impl Procs {
    pub fn new(log_dir: &Path) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
        std::fs::create_dir_all(log_dir).map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
        Ok(Procs {
            exe,
            log_dir: log_dir.into(),
            children: BTreeMap::new(),
            killed: Vec::new(),
            specs: BTreeMap::new(),
            addresses: BTreeMap::new(),
            readers: BTreeMap::new(),
        })
    }

    /// Start `leasehold <args>` as `name`. With `address`, wait for its `listening on ADDR` line
    /// and return ADDR.
    pub async fn spawn(
        &mut self,
        name: &str,
        args: &[&str],
        env: &[(&str, String)],
        address: bool,
    ) -> Result<Option<String>, String> {
        let exe = self.exe.clone();
        self.spawn_from(&exe, name, args, env, address).await
    }

    /// [`Procs::spawn`] with the binary `exe` (a new build, in a rolling upgrade).
    async fn spawn_from(
        &mut self,
        exe: &Path,
        name: &str,
        args: &[&str],
        env: &[(&str, String)],
        address: bool,
    ) -> Result<Option<String>, String> {
        // A name's first start in this run begins its files afresh (a reused `--out-dir` holds an
        // earlier run's lines, whose addresses are dead: CI caught the Envoy bench asking a port
        // from one); a respawn appends, so a restarted process keeps its predecessor's lines.
        let first_start = !self.specs.contains_key(name);
        self.specs.insert(
            name.to_string(),
            (
                args.iter().map(|a| a.to_string()).collect(),
                env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            ),
        );
        let log = self.log_dir.join(format!("{name}.log"));
        let out_path = self.log_dir.join(format!("{name}.out"));
        if first_start {
            for path in [&log, &out_path] {
                std::fs::File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            }
        }
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut cmd = Command::new(exe);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr).kill_on_drop(true);
        cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reader = tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stdout).lines();
            // Appended to: a process started again (a respawn, an upgrade) keeps its predecessor's lines.
            let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(out_path).await.ok();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().to_string());
                    }
                }
                if let Some(f) = file.as_mut() {
                    let _ = f.write_all(format!("{line}\n").as_bytes()).await;
                    let _ = f.flush().await;
                }
            }
        });
        self.children.insert(name.to_string(), child);
        self.readers.insert(name.to_string(), reader);
        if !address {
            return Ok(None);
        }
        match tokio::time::timeout(Duration::from_secs(20), rx).await {
            Ok(Ok(addr)) => {
                self.addresses.insert(name.to_string(), addr.clone());
                Ok(Some(addr))
            }
            _ => Err(format!("{name} did not start listening; see {}", log.display())),
        }
    }

    /// Start `name` again as it was started (after a kill, a drain or its own exit).
    pub async fn respawn(&mut self, name: &str, address: bool) -> Result<Option<String>, String> {
        let exe = self.exe.clone();
        self.respawn_with(name, &exe, address).await
    }

    /// Start `name` again with its arguments and environment, from the binary `exe`.
    pub async fn respawn_with(&mut self, name: &str, exe: &Path, address: bool) -> Result<Option<String>, String> {
        let (args, env) = self.specs.get(name).cloned().ok_or_else(|| format!("{name} was never started"))?;
        if let Some(mut old) = self.children.remove(name) {
            let _ = old.kill().await;
        }
        self.killed.retain(|k| k != name);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        self.spawn_from(exe, name, &args, &env, address).await
    }

    /// Wait up to `within` for `name` to exit; whether it did.
    pub async fn wait_exit(&mut self, name: &str, within: Duration) -> bool {
        match self.children.get_mut(name) {
            Some(c) => tokio::time::timeout(within, c.wait()).await.is_ok_and(|r| r.is_ok()),
            None => true,
        }
    }

    /// The binary `name` runs now (Linux: `/proc/<pid>/exe`).
    pub fn binary_of(&self, name: &str) -> Option<PathBuf> {
        let pid = self.children.get(name)?.id()?;
        std::fs::read_link(format!("/proc/{pid}/exe")).ok()
    }

    /// The process ids of the running children.
    pub fn pids(&self) -> Vec<u32> {
        self.children.values().filter_map(|c| c.id()).collect()
    }

    /// The process id of `name` while it runs.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.children.get(name).and_then(|c| c.id())
    }

    /// Send a signal (`"-STOP"`, `"-CONT"`, `"-TERM"`) to `name`.
    pub fn signal(&self, name: &str, sig: &str) -> bool {
        let Some(pid) = self.pid(name) else { return false };
        std::process::Command::new("kill").arg(sig).arg(pid.to_string()).status().is_ok_and(|s| s.success())
    }

    /// The address `name` printed when it last started listening.
    pub fn address(&self, name: &str) -> Option<String> {
        self.addresses.get(name).cloned()
    }

    /// SIGTERM `name` on purpose (a drain): its exit is not a crash.
    pub fn terminate(&mut self, name: &str) -> bool {
        self.killed.push(name.to_string());
        self.signal(name, "-TERM")
    }

    /// SIGKILL, as a crash.
    pub async fn kill(&mut self, name: &str) -> bool {
        self.killed.push(name.to_string());
        match self.children.get_mut(name) {
            Some(c) => c.kill().await.is_ok(),
            None => false,
        }
    }

    /// SIGTERM the children whose name matches (agents drain), wait up to `grace` for them to
    /// exit, then SIGKILL what is left of them.
    pub async fn stop(&mut self, grace: Duration, which: impl Fn(&str) -> bool) {
        for (_, c) in self.children.iter().filter(|(n, _)| which(n)) {
            if let Some(pid) = c.id() {
                let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
            }
        }
        let deadline = tokio::time::Instant::now() + grace;
        for (_, c) in self.children.iter_mut().filter(|(n, _)| which(n)) {
            let _ = tokio::time::timeout_at(deadline, c.wait()).await;
            let _ = c.kill().await;
        }
        // What they printed last is in their `.out` files before anyone reads them.
        let done: Vec<String> = self.readers.keys().filter(|n| which(n)).cloned().collect();
        for name in done {
            if let Some(r) = self.readers.remove(&name) {
                let _ = tokio::time::timeout(Duration::from_secs(2), r).await;
            }
        }
    }

    /// How many children printed `line` on stdout.
    pub fn printed(&self, line: &str) -> usize {
        self.children
            .keys()
            .filter(|n| std::fs::read_to_string(self.log_dir.join(format!("{n}.out"))).is_ok_and(|o| o.contains(line)))
            .count()
    }

    /// Names of children that exited on their own (a crash the demo did not cause).
    pub fn exited(&mut self) -> Vec<String> {
        let killed = &self.killed;
        self.children
            .iter_mut()
            .filter(|(n, _)| !killed.contains(n))
            .filter_map(|(n, c)| matches!(c.try_wait(), Ok(Some(_))).then(|| n.clone()))
            .collect()
    }
}
