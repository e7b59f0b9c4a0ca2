//! Every integration test of this crate, in one test binary: one build and link in release
//! instead of one per file (each repeats the dependencies' generic code). Each module is one
//! former test file; `cargo nextest` still runs every test in its own process.

mod chaos;
mod cli;
mod demo;
mod docs;
mod envoy_bench;
mod integrating;
mod integrating_envoy;
mod keys_bench;
mod outage_bench;
mod units;

/// Runs `leasehold-lab bench …` with `args` (and `--skip-redis` when the machine's Redis is not
/// on 127.0.0.1:6379): its last stdout line as JSON, and whether Redis was measured.
fn bench_json(args: &[&str]) -> (serde_json::Value, bool) {
    let redis_up = std::net::TcpStream::connect("127.0.0.1:6379").is_ok();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold-lab"));
    cmd.arg("bench").args(args);
    if !redis_up {
        eprintln!("no Redis on 127.0.0.1:6379: measuring without the baseline");
        cmd.arg("--skip-redis");
    }
    let out = cmd.output().expect("binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("a JSON last line"), redis_up)
}
