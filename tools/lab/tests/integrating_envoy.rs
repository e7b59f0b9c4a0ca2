//! docs/INTEGRATING.md's step 5 ("Behind Envoy"), run as printed against `leasehold-lab dev`:
//! each line of its `sh` block through `sh` in the repository, the lines ending in `&` as
//! processes of their own (stopped at the end), with the Envoy `scripts/envoy` gives (a missing
//! Envoy fails the test, as in the other Envoy tests). Between the lines the test waits as a
//! reader would, each against a deadline: until the agent holds a lease with a rate and its
//! bucket has had the time to fill (a new lease's starts empty), the stand-in says where it
//! listens, and Envoy's admin answers `/ready`. Then the `curl` line's answers are judged against
//! the comment under it, and Envoy's and the stand-in's counters say who answered.
//!
//! What the test changes, so that it can run beside other tests: every address is a free port
//! (the agent and the stand-in bind port 0 and print theirs; the bootstrap is a copy with those
//! ports, a free listener port, its admin on port 0, and the RLS timeout of 2 s the other Envoy
//! tests give a loaded machine), and Envoy gets `--use-dynamic-base-id` (its shared memory apart
//! from other Envoys') and `--admin-address-path` (where its admin listens).
#![allow(clippy::disallowed_methods)] // waits on real processes, against deadlines

use crate::integrating::{judge_codes, printed, repo, run_sh, sh_commands, Dev, DocCommand, Limit, ENVOY_SECTION};
use leasehold_nats_harness::envoy::envoy_binary;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const WITHIN: Duration = Duration::from_secs(30);
/// The bootstrap the doc starts Envoy with, and the ports it names: Envoy's listener, the
/// stand-in, the agent's RLS server, Envoy's admin.
const BOOTSTRAP: &str = "deploy/envoy/rls-bootstrap.yaml";
const INGRESS: &str = "127.0.0.1:10000";

/// A process a block's line ends with `&` for: `sh -c LINE` in a process group of its own,
/// stdout and stderr in files; the group gets SIGTERM (then SIGKILL) when dropped.
struct Background {
    name: &'static str,
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Background {
    fn start(name: &'static str, line: &str, env: &[(&str, &str)], dir: &Path) -> Background {
        let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
        let file = |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let child = Command::new("sh")
            .args(["-c", line])
            .envs(env.iter().copied())
            .current_dir(repo())
            .stdin(Stdio::null())
            .stdout(file(&out))
            .stderr(file(&err))
            .process_group(0)
            .spawn()
            .expect("sh runs");
        Background { name, child, out, err }
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("a child to wait for")
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// `found` of what the process printed, once it is `Some`; a panic if the process exits or
    /// `WITHIN` passes first.
    fn wait_for<T>(&mut self, what: &str, mut found: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + WITHIN;
        loop {
            let out = std::fs::read_to_string(&self.out).unwrap_or_default();
            if let Some(t) = found(&out) {
                return t;
            }
            if let Some(status) = self.exited() {
                panic!("{} exited ({status}) before {what}:\n{out}{}", self.name, self.stderr());
            }
            assert!(Instant::now() < deadline, "{}: no {what} within {WITHIN:?}:\n{out}{}", self.name, self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let group = self.child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: kill(2) with the process group this struct started.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        while self.exited().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// The address after `label` in `out`: `… listening on 127.0.0.1:41235` → `127.0.0.1:41235`.
fn address_after(out: &str, label: &str) -> Option<String> {
    let rest = out.lines().find_map(|l| l.split(label).nth(1))?;
    Some(rest.split([' ', ',']).next()?.to_string())
}

/// `GET path` of `addr`: the status and the body; none while nothing answers.
fn get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let code = answer.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

/// `limits put ID --rate N/s --burst N …`: the limit's id, rate and burst.
fn put_limit(line: &str) -> (String, Limit) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]).expect(flag);
    let id = words.iter().position(|w| *w == "put").map(|i| words[i + 1]).expect("limits put ID");
    let rate = after("--rate").trim_end_matches("/s").parse().expect("--rate N/s");
    (id.to_string(), Limit { rate_per_s: rate, burst: after("--burst").parse().expect("--burst N") })
}

/// The shipped bootstrap on the ports given, its RLS timeout the one the other Envoy tests give
/// a loaded machine.
fn bootstrap(ingress: u16, upstream: &str, rls: &str) -> String {
    let port = |addr: &str| addr.rsplit(':').next().expect("host:port").to_string();
    let shipped = std::fs::read_to_string(repo().join(BOOTSTRAP)).expect("the shipped bootstrap");
    let copy = shipped
        .replace("port_value: 10000", &format!("port_value: {ingress}"))
        .replace("port_value: 8080", &format!("port_value: {}", port(upstream)))
        .replace("port_value: 8081", &format!("port_value: {}", port(rls)))
        .replace("port_value: 9901", "port_value: 0")
        .replace("timeout: 0.25s", "timeout: 2s");
    assert_ne!(copy, shipped, "{BOOTSTRAP} no longer names the ports the test moves");
    copy
}

/// The line without its `&` and the comment after it.
fn foreground(line: &str) -> &str {
    let amp = line.rfind(" &").filter(|&i| {
        let rest = line[i + 2..].trim();
        rest.is_empty() || rest.starts_with('#')
    });
    amp.map_or(line, |i| line[..i].trim_end())
}

/// Starts the Envoy line (its bootstrap a copy on free ports): Envoy, its listener's address and
/// its admin's, once the admin says `/ready`. A listener port taken in between is tried again.
fn start_envoy(
    line: &str,
    env: &[(&str, &str)],
    dir: &Path,
    upstream: &str,
    rls: &str,
) -> (Background, String, String) {
    for attempt in 0..5 {
        let ingress = leasehold_nats_harness::free_port().expect("a free port");
        let (config, admin) = (dir.join(format!("envoy-{attempt}.yaml")), dir.join(format!("admin-{attempt}")));
        std::fs::write(&config, bootstrap(ingress, upstream, rls)).expect("the bootstrap's copy");
        let line = format!(
            "{} --use-dynamic-base-id --admin-address-path '{}'",
            foreground(line).replace(BOOTSTRAP, &config.display().to_string()),
            admin.display()
        );
        let mut envoy = Background::start("envoy", &line, env, dir);
        let deadline = Instant::now() + WITHIN;
        loop {
            let admin_addr = std::fs::read_to_string(&admin).map(|a| a.trim().to_string()).unwrap_or_default();
            if !admin_addr.is_empty() && get(&admin_addr, "/ready").is_some_and(|(code, _)| code == 200) {
                return (envoy, format!("127.0.0.1:{ingress}"), admin_addr);
            }
            if let Some(status) = envoy.exited() {
                let err = envoy.stderr();
                assert!(err.contains("Address already in use"), "{line}: Envoy exited ({status}):\n{err}");
                break;
            }
            assert!(Instant::now() < deadline, "{line}: Envoy not ready within {WITHIN:?}:\n{}", envoy.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("Envoy found its listener's port taken 5 times");
}

/// A counter of Envoy's admin `/stats`.
fn envoy_stat(admin: &str, name: &str) -> u64 {
    let (_, body) = get(admin, &format!("/stats?filter=^{name}$")).expect("Envoy's admin answers");
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok()).unwrap_or(0)
}

#[test]
fn the_envoy_block_runs_as_printed_against_the_dev_stack() {
    let envoy_bin = envoy_binary().expect("an Envoy is needed (scripts/envoy installs one)");
    let dir = std::env::temp_dir().join(format!("leasehold-dev-envoy-{}", std::process::id()));
    let mut dev = Dev::start(&dir);
    let lines = dev.read_until("dev: Ctrl-C stops the stack", Duration::from_secs(90));
    let nats_url = printed(&lines, "dev: NATS");
    let lab_dir = Path::new(env!("CARGO_BIN_EXE_leasehold-lab")).parent().expect("a directory").display().to_string();
    let mut env =
        vec![("LEASEHOLD_NATS_URL".to_string(), nats_url), ("LEASEHOLD_ENVOY".into(), envoy_bin.display().to_string())];

    let block: Vec<DocCommand> =
        sh_commands("docs/INTEGRATING.md").into_iter().filter(|c| c.section == ENVOY_SECTION).collect();
    let mut limit = None;
    let (mut agent, mut upstream, mut envoy) = (None, None, None);
    let mut judged = None;
    for c in &block {
        let env_now: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        if let Some(assign) = c.line.strip_prefix("export ") {
            // The next lines' environment, as the reader's shell keeps it.
            let name = assign.split('=').next().expect("export NAME=…").to_string();
            let line = format!("{}; printf %s \"${name}\"", c.line.replace("$PWD/target/release", &lab_dir));
            let (value, _) = run_sh(&line, &[], &env_now);
            env.retain(|(k, _)| *k != name);
            env.push((name, value));
        } else if c.line.contains(" agent &") {
            let line = c.line.replace("127.0.0.1:9091", "127.0.0.1:0").replace("127.0.0.1:8081", "127.0.0.1:0");
            let mut a = Background::start("agent", foreground(&line), &env_now, &dir);
            let http = a.wait_for("its HTTP address", |out| address_after(out, " listening on "));
            let rls = a.wait_for("its RLS address", |out| address_after(out, "(RLS v3) on "));
            let (id, _) = limit.as_ref().expect("the limit is put before the agent starts");
            let status = format!("/v1/status?limit={id}");
            let (leased_at, rate_milli, burst_milli) = a.wait_for("a lease with a rate", |_| {
                let (_, body) = get(&http, &status).filter(|(code, _)| *code == 200)?;
                let quota = serde_json::from_str::<serde_json::Value>(&body).ok()?["lease"]["quota"].take();
                let (rate, burst) = (quota["rate_milli_per_s"].as_u64()?, quota["burst_milli"].as_u64()?);
                (rate >= 1_000).then(|| (Instant::now(), rate, burst))
            });
            // Its bucket fills from empty at its lease's rate: full after burst/rate, as a reader's
            // next lines take; the burst is asked no sooner.
            let full_at = leased_at + Duration::from_millis(burst_milli * 1_000 / rate_milli);
            agent = Some((a, rls, full_at, burst_milli / 1_000));
        } else if c.line.contains(" upstream ") {
            let line = c.line.replace("127.0.0.1:8080", "127.0.0.1:0");
            let mut u = Background::start("upstream", foreground(&line), &env_now, &dir);
            let addr = u.wait_for("its address", |out| address_after(out, "listening on "));
            upstream = Some((u, addr));
        } else if c.line.contains(BOOTSTRAP) {
            let (Some((_, rls, ..)), Some((_, up))) = (&agent, &upstream) else { panic!("Envoy before its agent") };
            envoy = Some(start_envoy(&c.line, &env_now, &dir, up, rls));
        } else if c.line.starts_with("curl ") {
            let Some((_, ingress, _)) = &envoy else { panic!("{}: before Envoy starts", c.line) };
            let (_, _, full_at, burst) = agent.as_ref().expect("the agent");
            std::thread::sleep(full_at.saturating_duration_since(Instant::now()));
            let (out, took) = run_sh(&c.line, &[(INGRESS, ingress)], &env_now);
            let (granted, denied) = judge_codes(c, &out, took, limit.as_ref().expect("the limit").1);
            // "for the agent's burst": its full bucket, granted in a row.
            let in_a_row = out.lines().take_while(|l| l.starts_with("200")).count() as u64;
            assert!(in_a_row >= *burst, "{in_a_row} granted in a row, the agent's burst is {burst}\n{out}");
            judged = Some((granted, denied));
        } else if c.line.contains(" limits put ") {
            run_sh(&c.line, &[], &env_now);
            limit = Some(put_limit(&c.line));
        } else {
            panic!("the test does not know how to run {:?} of {ENVOY_SECTION}", c.line);
        }
    }
    let (granted, denied) = judged.expect("a curl line with its answer under it");
    let (Some((mut envoy, _, admin)), Some((upstream, up)), Some((agent, ..))) = (envoy, upstream, agent) else {
        panic!("the block starts the agent, the stand-in and Envoy: {block:?}");
    };
    // Answered by Envoy: its filter counted each answer, and only the grants reached the service.
    assert_eq!(envoy_stat(&admin, "cluster.service.ratelimit.over_limit"), denied as u64, "Envoy's 429s");
    assert_eq!(envoy_stat(&admin, "cluster.service.ratelimit.ok"), granted as u64, "Envoy's grants");
    let (_, stats) = get(&up, "/stats").expect("the stand-in answers");
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("JSON");
    assert_eq!((stats["total"].as_u64(), stats["rejected"].as_u64()), (Some(granted as u64), Some(0)), "{stats}");
    println!("through Envoy: {granted} granted, {denied} answered 429 by Envoy; the stand-in saw {stats}");
    assert!(envoy.exited().is_none(), "Envoy ran to the end");
    drop((envoy, upstream, agent));
    assert_eq!(dev.stop(), Some(0), "Ctrl-C (SIGTERM) stops the stack cleanly");
    let _ = std::fs::remove_dir_all(&dir);
}
