//! The load `bench envoy` puts on an Envoy: a wait for its first 200, then clients over
//! keep-alive HTTP/1.1, paced or closed loop.

use super::keys_load::{Connections, Failure};
use std::time::Duration;

/// Load before the measured part (connections opened, Envoy's caches warm).
const WARM_UP: Duration = Duration::from_secs(1);

/// Until Envoy on `ingress` answers a call 200 (at most 20 s): how long that took.
pub(super) async fn serving(ingress: u16) -> Result<Duration, String> {
    let base = format!("http://127.0.0.1:{ingress}");
    let mut conns = Connections::new(std::slice::from_ref(&base));
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(20);
    let mut tries = tokio::time::interval(Duration::from_millis(50));
    let mut last = String::from("no answer");
    while tokio::time::Instant::now() < deadline {
        tries.tick().await;
        match conns.post(0, "/call").await {
            Ok(200) => return Ok(started.elapsed()),
            Ok(status) => last = format!("{status}"),
            Err(Failure::Refused) => last = "connection refused".into(),
            Err(Failure::Lost) => last = "no answer".into(),
        }
    }
    Err(format!("Envoy answered no call 200 within 20 s (last: {last})"))
}

/// The load on `ingress` for `warm_up + duration`: latencies (µs) of the measured part, and how
/// many answers were not 200. Paced (`rate` > 0): each client's requests are due on its own
/// schedule, the clients' schedules spread evenly over the period, and a request's latency runs
/// from when it was due, so a late answer also counts against the requests it held back
/// (no coordinated omission). Closed loop (`rate` 0): from when each request is sent.
pub(super) async fn load(ingress: u16, clients: usize, rate: u64, duration: Duration) -> (Vec<u64>, u64) {
    let base = format!("http://127.0.0.1:{ingress}");
    let start = tokio::time::Instant::now();
    let measure_from = start + WARM_UP;
    let until = measure_from + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let base = base.clone();
            tokio::spawn(async move {
                let mut conns = Connections::new(std::slice::from_ref(&base));
                let (mut latencies_us, mut not_200) = (Vec::new(), 0u64);
                let mut pace = (rate > 0).then(|| {
                    let period = Duration::from_secs_f64(clients as f64 / rate as f64);
                    let offset = period.mul_f64(client as f64 / clients as f64);
                    let mut t = tokio::time::interval_at(start + offset, period);
                    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                    t
                });
                loop {
                    let due = match pace.as_mut() {
                        Some(t) => t.tick().await,
                        None => tokio::time::Instant::now(),
                    };
                    if due >= until {
                        break;
                    }
                    let status = conns.post(0, "/call").await.unwrap_or(0);
                    if due >= measure_from {
                        latencies_us.push(due.elapsed().as_micros() as u64);
                        not_200 += u64::from(status != 200);
                    }
                }
                (latencies_us, not_200)
            })
        })
        .collect();
    let (mut all, mut not_200) = (Vec::new(), 0);
    for t in tasks {
        let (latencies, n) = t.await.unwrap_or_default();
        all.extend(latencies);
        not_200 += n;
    }
    (all, not_200)
}
