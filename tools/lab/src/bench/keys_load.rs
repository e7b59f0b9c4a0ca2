//! The load of `bench keys` and its independent judge.
//!
//! Concurrent clients pick keys from a Zipf distribution and an instance at random (or the key's
//! owner, as a key-aware client would), and record
//! for every answer when they sent it and when it came back. The judge counts over-admissions
//! from that alone: `N + 1` allowed answers for one key whose send-to-receive intervals all fit
//! in less than `W − 1 ms` (the limiter's clock has 1 ms resolution) were certainly decided
//! within one window, so each such group is one admission too many.

use leasehold_sim::percentiles::Percentiles;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys drawn with probability ∝ 1 / rank^`s` (rank 1 is key 0): `rand_distr`'s Zipf over `keys`
/// ranks. `s` must be at least 0 (0: every key equally likely).
pub fn key_ranks(keys: usize, s: f64) -> Result<Zipf<f64>, String> {
    Zipf::new(keys.max(1) as f64, s).map_err(|e| format!("--zipf-s {s} with --keys {keys}: {e}"))
}

/// One key drawn from `ranks`: its rank minus one.
pub fn draw_key(ranks: &Zipf<f64>, rng: &mut StdRng) -> u32 {
    (ranks.sample(rng) as u32).saturating_sub(1)
}

/// One answer as the client saw it.
#[derive(Clone, Copy, Debug)]
pub struct Observation {
    pub key: u32,
    pub sent_us: u64,
    pub received_us: u64,
    /// HTTP status, or 0 when no answer came (connection refused, timeout).
    pub status: u16,
    pub instance: u8,
}

pub struct LoadSpec {
    pub bases: Vec<String>,
    pub key_prefix: String,
    /// From [`key_ranks`].
    pub key_ranks: Zipf<f64>,
    pub clients: usize,
    pub duration: Duration,
    pub seed: u64,
    /// Send each key to its shard's owner (from `GET /v1/shards`, refreshed every 250 ms), as a
    /// key-aware client or balancer would; else to an instance at random.
    pub to_owner: bool,
}

/// Per shard, the index in `bases` of its owner (as an instance's `GET /v1/shards` says).
type OwnerIndex = Arc<std::sync::RwLock<Vec<Option<usize>>>>;

#[derive(serde::Deserialize)]
struct ShardRoutes {
    owners: Vec<Option<String>>,
}

/// Keep `index` in step with the shard owners, asking a live instance every 250 ms.
async fn follow_owners(http: reqwest::Client, bases: Vec<String>, dead: Arc<Vec<AtomicBool>>, index: OwnerIndex) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let Some(live) = (0..bases.len()).find(|&i| !dead[i].load(Ordering::Relaxed)) else { return };
        let Ok(r) = http.get(format!("{}/v1/shards", bases[live])).send().await else { continue };
        let Ok(routes) = r.json::<ShardRoutes>().await else { continue };
        let owners = routes
            .owners
            .iter()
            .map(|o| o.as_ref().and_then(|addr| bases.iter().position(|b| b.strip_prefix("http://") == Some(addr))))
            .collect();
        *index.write().unwrap_or_else(|p| p.into_inner()) = owners;
    }
}

/// Drive the load; instances that refuse connections are dropped (as a load balancer would).
pub async fn drive(spec: &LoadSpec, start: Instant) -> Vec<Observation> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build().unwrap_or_default();
    let dead: Arc<Vec<AtomicBool>> = Arc::new(spec.bases.iter().map(|_| AtomicBool::new(false)).collect());
    let until = start + spec.duration;
    let owners: OwnerIndex = Arc::default();
    let follower = spec
        .to_owner
        .then(|| tokio::spawn(follow_owners(http.clone(), spec.bases.clone(), dead.clone(), owners.clone())));
    let mut tasks = Vec::new();
    for c in 0..spec.clients {
        let (ranks, dead, owners) = (spec.key_ranks, dead.clone(), owners.clone());
        let (bases, prefix) = (spec.bases.clone(), spec.key_prefix.clone());
        let mut rng = StdRng::seed_from_u64(spec.seed ^ (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut conns = Connections::new(&bases);
            while Instant::now() < until {
                let key = draw_key(&ranks, &mut rng);
                let live: Vec<usize> = (0..bases.len()).filter(|&i| !dead[i].load(Ordering::Relaxed)).collect();
                if live.is_empty() {
                    break;
                }
                let name = format!("{prefix}{key}");
                let owner = {
                    let owners = owners.read().unwrap_or_else(|p| p.into_inner());
                    let shard = leasehold_per_key::shard_of(&name, owners.len().max(1) as u32) as usize;
                    owners.get(shard).copied().flatten().filter(|&o| !dead[o].load(Ordering::Relaxed))
                };
                let i = owner.unwrap_or_else(|| live[rng.random_range(0..live.len())]);
                let sent_us = start.elapsed().as_micros() as u64;
                let answer = conns.post(i, &format!("/v1/keys/{name}")).await;
                let received_us = start.elapsed().as_micros() as u64;
                let status = match answer {
                    Ok(s) => s,
                    Err(Failure::Refused) => {
                        dead[i].store(true, Ordering::Relaxed);
                        0
                    }
                    Err(Failure::Lost) => 0,
                };
                seen.push(Observation { key, sent_us, received_us, status, instance: i as u8 });
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    if let Some(f) = follower {
        f.abort();
    }
    all
}

/// Why a request got no answer.
pub(crate) enum Failure {
    /// The instance refused the connection (it is gone: a balancer would drop it).
    Refused,
    /// Sent, but no answer came (reset, timeout).
    Lost,
}

/// One client's keep-alive HTTP/1.1 connection to each instance, opened when first needed and
/// again after a failure: the lightest client hyper offers (no pool, no URL parsing), so the
/// client's own CPU per request, which both designs pay alike, dilutes their difference least.
pub(crate) struct Connections {
    hosts: Vec<String>,
    senders: Vec<Option<hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>>>,
}

impl Connections {
    pub(crate) fn new(bases: &[String]) -> Self {
        let hosts = bases.iter().map(|b| b.trim_start_matches("http://").to_string()).collect();
        Connections { hosts, senders: bases.iter().map(|_| None).collect() }
    }

    /// POST `path` (no body) to instance `i`: the answer's status, its body read and dropped.
    pub(crate) async fn post(&mut self, i: usize, path: &str) -> Result<u16, Failure> {
        let outcome = tokio::time::timeout(Duration::from_secs(2), self.try_post(i, path)).await;
        let status = outcome.unwrap_or(Err(Failure::Lost));
        if status.is_err() {
            self.senders[i] = None;
        }
        status
    }

    async fn try_post(&mut self, i: usize, path: &str) -> Result<u16, Failure> {
        use http_body_util::BodyExt;
        if self.senders[i].as_ref().is_none_or(|s| s.is_closed()) {
            let stream = tokio::net::TcpStream::connect(&self.hosts[i]).await.map_err(|_| Failure::Refused)?;
            let _ = stream.set_nodelay(true);
            let io = hyper_util::rt::TokioIo::new(stream);
            let (sender, conn) = hyper::client::conn::http1::handshake(io).await.map_err(|_| Failure::Refused)?;
            tokio::spawn(conn);
            self.senders[i] = Some(sender);
        }
        let sender = self.senders[i].as_mut().ok_or(Failure::Lost)?;
        sender.ready().await.map_err(|_| Failure::Lost)?;
        let request = hyper::Request::post(path)
            .header(hyper::header::HOST, &self.hosts[i])
            .body(http_body_util::Empty::new())
            .map_err(|_| Failure::Lost)?;
        let response = sender.send_request(request).await.map_err(|_| Failure::Lost)?;
        let status = response.status().as_u16();
        response.into_body().collect().await.map_err(|_| Failure::Lost)?;
        Ok(status)
    }
}

/// Allowed answers beyond `limit` in any window of `window_ms`, from the client's view alone.
pub fn over_admissions(obs: &[Observation], limit: u64, window_ms: u64) -> u64 {
    let mut by_key: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    for o in obs.iter().filter(|o| o.status == 200) {
        by_key.entry(o.key).or_default().push((o.sent_us, o.received_us));
    }
    let n = limit as usize;
    let window_us = window_ms.saturating_sub(1) * 1_000;
    let mut over = 0;
    for allowed in by_key.values_mut() {
        allowed.sort_unstable();
        for j in n..allowed.len() {
            let group = &allowed[j - n..=j];
            let last_received = group.iter().map(|&(_, r)| r).max().unwrap_or(0);
            if last_received - group[0].0 < window_us {
                over += 1;
            }
        }
    }
    over
}

/// Throughput, latency and the judge's verdict for one run, as `bench keys` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct LoadSummary {
    pub decisions_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub over_admissions: u64,
    pub allowed: usize,
    pub denied: usize,
    pub unavailable: usize,
    pub no_answer: usize,
    pub other_status: usize,
}

/// Throughput and latency of the answered requests (200 and 429).
pub fn summary(obs: &[Observation], duration: Duration, limit: u64, window_ms: u64) -> LoadSummary {
    let answered: Vec<&Observation> = obs.iter().filter(|o| o.status == 200 || o.status == 429).collect();
    let latency_us: Percentiles = answered.iter().map(|o| o.received_us - o.sent_us).collect();
    let latency_ms = |q: f64| latency_us.at(q).map_or(0.0, |us| us as f64 / 1_000.0);
    let count = |f: &dyn Fn(&Observation) -> bool| obs.iter().filter(|o| f(o)).count();
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    LoadSummary {
        decisions_per_s: round(answered.len() as f64 / duration.as_secs_f64()),
        p50_ms: round(latency_ms(0.50)),
        p99_ms: round(latency_ms(0.99)),
        p999_ms: round(latency_ms(0.999)),
        over_admissions: over_admissions(obs, limit, window_ms),
        allowed: count(&|o| o.status == 200),
        denied: count(&|o| o.status == 429),
        unavailable: count(&|o| o.status == 503),
        no_answer: count(&|o| o.status == 0),
        other_status: count(&|o| ![0, 200, 429, 503].contains(&o.status)),
    }
}
