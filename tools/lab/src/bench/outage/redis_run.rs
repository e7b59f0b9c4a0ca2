//! `bench outage` against the central Redis design: a fixed-window counter per second (`INCR`
//! and `EXPIRE` in one pipeline, admitted while the count is within R), on a redis-server of
//! the bench's own that the outage kills. A call Redis does not answer within 200 ms, or
//! refuses, is admitted (failing open) or denied (failing closed).
#![allow(clippy::disallowed_methods)] // a bench measures real time (clippy.toml)

use super::{load, Args, Run};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A redis-server on a free loopback port, keeping nothing on disk.
async fn start_redis(port: u16) -> Result<tokio::process::Child, String> {
    tokio::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start redis-server ({e}); install it, or pass --skip-redis"))
}

async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.get_multiplexed_async_connection().await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(format!("redis-server at {url} did not answer: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub(super) async fn run(a: &Args, fail_open: bool) -> Result<Run, String> {
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
    let mut redis_server = start_redis(port).await?;
    let conn = connect(&format!("redis://127.0.0.1:{port}")).await?;
    let mode = if fail_open { "failing open" } else { "failing closed" };
    eprintln!("bench outage: central Redis ({mode}) up; {} s healthy, then Redis killed", a.healthy_s);
    let rate = a.rate_per_s;
    let ask = move || {
        let mut conn = conn.clone();
        async move {
            let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let key = format!("outage_{now_s}");
            let mut pipe = redis::pipe();
            pipe.atomic().incr(&key, 1u64).expire(&key, 2).ignore();
            match tokio::time::timeout(Duration::from_millis(200), pipe.query_async::<(u64,)>(&mut conn)).await {
                Ok(Ok((count,))) => count <= rate,
                _ => fail_open,
            }
        }
    };
    let (start, total) = (Instant::now(), a.healthy() + a.outage());
    let load = tokio::spawn(load::drive(a.clients, Duration::from_millis(a.pace_ms), start, total, ask));
    tokio::time::sleep_until((start + a.healthy()).into()).await;
    let outage_at = start.elapsed();
    let _ = redis_server.kill().await;
    let admissions = load.await.map_err(|e| format!("the load stopped: {e}"))?;
    Ok(Run { admissions, outage_at, total, degraded: None })
}
