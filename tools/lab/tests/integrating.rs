//! docs/INTEGRATING.md and README's "How a service uses it", run as printed: `leasehold-lab dev`
//! (the stack `scripts/dev` starts) as real processes, then every `curl` line of their `sh` blocks
//! and the pod library's example, each judged against the answer the comment under it names.
//! The stack listens on free ports here; the doc's addresses are replaced by them. Step 5's
//! block (Envoy) is run by `integrating_envoy.rs`.
#![allow(clippy::disallowed_methods)] // the stack's readiness and the commands' durations are real time

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The dev stack's limit: R per second and B (tools/lab/src/dev.rs).
const DEV_LIMIT: Limit = Limit { rate_per_s: 100.0, burst: 20.0 };
/// The addresses the docs print, which the stack here does not take.
const DOC_AGENT: &str = "127.0.0.1:9090";
const DOC_KEYS: &str = "127.0.0.1:8090";

/// The section of docs/INTEGRATING.md whose block `integrating_envoy.rs` runs.
pub(crate) const ENVOY_SECTION: &str = "## 5. Behind Envoy";

/// A limit's refill rate per second and its burst.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    pub rate_per_s: f64,
    pub burst: f64,
}

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The stack, stopped with SIGTERM (as Ctrl-C would) when dropped.
pub(crate) struct Dev {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Dev {
    pub(crate) fn start(out_dir: &Path) -> Dev {
        let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
            .args(["dev", "--agent-listen", "127.0.0.1:0", "--keys-listen", "127.0.0.1:0", "--out-dir"])
            .arg(out_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("leasehold-lab runs");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Dev { child, lines }
    }

    /// Lines printed until `last` (included), within `within`.
    pub(crate) fn read_until(&self, last: &str, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(last);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("no {last:?} within {within:?}; printed:\n{}", seen.join("\n"));
    }

    pub(crate) fn stop(&mut self) -> Option<i32> {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        None
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// The word after `label` on the line that has it: `dev: agent  http://ADDR  (…)` → `ADDR`.
pub(crate) fn printed(lines: &[String], label: &str) -> String {
    let line = lines.iter().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label:?} in {lines:?}"));
    let word = line[label.len()..].split_whitespace().next().expect("an address");
    word.trim_start_matches("http://").to_string()
}

/// A command of a doc's `sh` blocks (its `\`-continued lines joined), the comment line under it
/// if any, and the `## ` section it is in.
#[derive(Debug)]
pub(crate) struct DocCommand {
    pub doc: &'static str,
    pub section: String,
    pub line: String,
    pub expect: Option<String>,
}

/// Every command of `doc`'s ```sh blocks.
pub(crate) fn sh_commands(doc: &'static str) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut out = Vec::new();
    let (mut in_sh, mut section) = (false, String::new());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let mut t = line.trim().to_string();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh {
            if t.starts_with("## ") {
                section = t;
            }
            continue;
        }
        while let Some(head) = t.strip_suffix('\\') {
            let next = lines.next().unwrap_or_else(|| panic!("{doc}: a block ends after {t:?}"));
            t = format!("{} {}", head.trim_end(), next.trim());
        }
        if !t.is_empty() && !t.starts_with('#') {
            let expect = lines.peek().map(|n| n.trim()).filter(|n| n.starts_with('#')).map(String::from);
            out.push(DocCommand { doc, section: section.clone(), line: t, expect });
        }
    }
    out
}

/// The commands of `doc`'s ```sh blocks that start with one of `starts`, but not step 5's.
fn commands(doc: &'static str, starts: &[&str]) -> Vec<DocCommand> {
    let mut all = sh_commands(doc);
    all.retain(|c| c.section != ENVOY_SECTION && starts.iter().any(|s| c.line.starts_with(s)));
    all
}

/// The HTTP status codes a comment names, in order (`# 200 …, then 429 …` → [200, 429]).
fn named_statuses(c: &DocCommand) -> Vec<u16> {
    let comment =
        c.expect.as_deref().unwrap_or_else(|| panic!("{}: no `# <status> …` comment under {}", c.doc, c.line));
    let codes: Vec<u16> = comment
        .split(|ch: char| !ch.is_ascii_digit())
        .filter(|w| w.len() == 3)
        .filter_map(|w| w.parse().ok())
        .filter(|code| (100..600).contains(code))
        .collect();
    assert!(!codes.is_empty(), "{}: the comment {comment:?} names no status", c.doc);
    codes
}

/// The number a comment gives after `label` (`Retry-After: 1`, `burst (20)`), if it has one.
fn named_number(c: &DocCommand, label: &str) -> Option<u64> {
    let rest = c.expect.as_deref()?.split(label).nth(1)?;
    rest.trim_start_matches([' ', ':', '(']).split(|ch: char| !ch.is_ascii_digit()).next()?.parse().ok()
}

/// Run `line` with `sh` in the repository, each `(doc's text, this run's)` of `replace` replaced
/// and `env` set: its stdout, and how long it took.
pub(crate) fn run_sh(line: &str, replace: &[(&str, &str)], env: &[(&str, &str)]) -> (String, Duration) {
    let line = replace.iter().fold(line.to_string(), |l, (doc, here)| l.replace(doc, here));
    let started = Instant::now();
    let out =
        Command::new("sh").args(["-c", &line]).envs(env.iter().copied()).current_dir(repo()).output().expect("sh runs");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{line}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    (stdout, took)
}

/// A `curl -si` answer: its status, and its headers and body.
fn judge_full_answer(c: &DocCommand, out: &str) {
    let want = named_statuses(c)[0];
    let status: u16 = out.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert_eq!(status, want, "{}: {}\n{out}", c.doc, c.line);
    let lower = out.to_ascii_lowercase();
    assert!(lower.contains("\nratelimit-policy:"), "{}: no RateLimit-Policy\n{out}", c.line);
    if want == 429 {
        assert!(lower.contains("\nretry-after:"), "{}: a 429 without Retry-After\n{out}", c.line);
    }
    if c.line.contains("/v1/acquire") && want == 200 {
        assert!(out.contains(r#"{"granted":true}"#), "{}\n{out}", c.line);
    }
    if c.line.contains("/v1/keys/") {
        assert!(out.contains(&format!("\"allowed\":{}", want == 200)), "{}\n{out}", c.line);
    }
}

/// `-w '%{http_code} %header{retry-after}\n'` over many requests under `limit`, as the comment
/// under them says (`# 200 for the burst (20), then 429 with Retry-After: 1`): the first status
/// it names first (at least the burst it names of them in a row), then the second with the
/// Retry-After it names (at least 1 s if none), nothing else, and never more grants than R·T + B.
/// The grants and denials.
pub(crate) fn judge_codes(c: &DocCommand, out: &str, took: Duration, limit: Limit) -> (usize, usize) {
    let (grant, deny) = match named_statuses(c)[..] {
        [grant, deny] => (grant.to_string(), deny.to_string()),
        ref named => panic!("{}: the comment under {} names {named:?}, not two statuses", c.doc, c.line),
    };
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.first().and_then(|l| l.first()).copied(), Some(grant.as_str()), "{}\n{out}", c.line);
    let granted = lines.iter().filter(|l| l[0] == grant).count();
    let denied: Vec<_> = lines.iter().filter(|l| l[0] == deny).collect();
    assert_eq!(granted + denied.len(), lines.len(), "only {grant} and {deny}: {out}");
    assert!(!denied.is_empty(), "{}: the burst was never spent\n{out}", c.line);
    let retry_after = |l: &&Vec<&str>| l.get(1).and_then(|s| s.parse::<u64>().ok());
    match named_number(c, "Retry-After") {
        Some(s) => assert!(denied.iter().all(|l| retry_after(l) == Some(s)), "Retry-After: {s}, says the doc\n{out}"),
        None => assert!(denied.iter().all(|l| retry_after(l).is_some_and(|s| s >= 1)), "{out}"),
    }
    if let Some(burst) = named_number(c, "burst") {
        let in_a_row = lines.iter().take_while(|l| l[0] == grant).count() as u64;
        assert!(in_a_row >= burst, "{}: {in_a_row} granted in a row, the doc says {burst}\n{out}", c.line);
    }
    let most = limit.burst + limit.rate_per_s * took.as_secs_f64() + 1.0;
    assert!(granted as f64 <= most, "{granted} granted in {took:?} under {limit:?}\n{out}");
    (granted, denied.len())
}

/// The pod library's example, built by `cargo test` beside this test (target/release/examples).
fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let bin = profile_dir.join("examples").join(name);
    if !bin.is_file() {
        // Tested alone (`cargo test -p leasehold-lab`): build it.
        let status = Command::new(option_env!("CARGO").unwrap_or("cargo"))
            .args(["build", "--release", "--locked", "-p", "leasehold-pod", "--example", name])
            .current_dir(repo())
            .status()
            .expect("cargo runs");
        assert!(status.success() && bin.is_file(), "cargo build --example {name} did not make {}", bin.display());
    }
    bin
}

/// `cargo run … --example NAME -- ARGS` as printed, run from the built example.
fn judge_example(c: &DocCommand, nats_url: &str) {
    let name = c.line.split("--example ").nth(1).and_then(|r| r.split_whitespace().next()).expect("--example NAME");
    let args = c.line.split(" -- ").nth(1).unwrap_or("");
    let line = format!("'{}' {args}", example_binary(name).display());
    let (out, took) = run_sh(&line, &[], &[("LEASEHOLD_NATS_URL", nats_url)]);
    assert!(out.contains("holds a lease of partner-api"), "{out}");
    let total = out.lines().find(|l| l.starts_with("total: ")).unwrap_or_else(|| panic!("no total: {out}"));
    let words: Vec<&str> = total.split_whitespace().collect();
    let (granted, denied): (f64, u64) = (words[1].parse().unwrap(), words[3].parse().unwrap());
    assert!(granted >= 1.0 && denied >= 1, "it asks 5x the limit: some granted, some denied\n{out}");
    let most = DEV_LIMIT.burst + DEV_LIMIT.rate_per_s * took.as_secs_f64();
    assert!(granted <= most, "{granted} granted in {took:?}\n{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("second ")).count(), 3, "{out}");
    assert!(out.contains("drained (acknowledged: true)"), "{out}");
}

#[test]
fn the_integration_examples_run_as_printed_against_the_dev_stack() {
    let out_dir = std::env::temp_dir().join(format!("leasehold-dev-{}", std::process::id()));
    let mut dev = Dev::start(&out_dir);
    let lines = dev.read_until("dev: Ctrl-C stops the stack", Duration::from_secs(90));
    let (agent, keys) = (printed(&lines, "dev: agent"), printed(&lines, "dev: keys"));
    let nats_url = printed(&lines, "dev: NATS");
    assert!(nats_url.starts_with("nats://127.0.0.1:") && !nats_url.ends_with(":4222"), "{nats_url}");

    let mut ran = 0;
    let readme = commands("README.md", &["curl "]);
    let guide = commands("docs/INTEGRATING.md", &["curl ", "cargo run "]);
    assert!(guide.iter().any(|c| c.line.contains("--example")), "no example in docs/INTEGRATING.md");
    for c in readme.iter().chain(&guide) {
        if c.line.starts_with("cargo run ") {
            judge_example(c, &nats_url);
        } else {
            let replace = [(DOC_AGENT, agent.as_str()), (DOC_KEYS, keys.as_str())];
            let (out, took) = run_sh(&c.line, &replace, &[("LEASEHOLD_NATS_URL", &nats_url)]);
            if c.line.contains("%{http_code}") {
                judge_codes(c, &out, took, DEV_LIMIT);
            } else {
                judge_full_answer(c, &out);
            }
        }
        ran += 1;
    }
    assert!(ran >= 6, "README and docs/INTEGRATING.md show fewer commands than expected: {ran}");
    assert_eq!(dev.stop(), Some(0), "Ctrl-C (SIGTERM) stops the stack cleanly");
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn a_dev_stack_on_a_taken_port_says_so() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-lab"))
        .args(["dev", "--agent-listen", &addr, "--keys-listen", "127.0.0.1:0"])
        .output()
        .expect("leasehold-lab runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(&addr) && err.contains("--agent-listen"), "{err}");
}
