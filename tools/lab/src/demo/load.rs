//! The load generator: the simulator's `diurnal` demand, compressed into the demo's duration,
//! sent as real HTTP calls: permit from a pod agent, then the call to the strict upstream. One
//! [`Load`] per limit, all on one clock, through the same agents.

use leasehold_sim::scenario::Scenario;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// Per-second counters, indexed by whole seconds since the load started.
#[derive(Clone, Debug, Default)]
pub struct Bins {
    pub offered: Vec<Vec<u64>>,
    pub admitted: Vec<Vec<u64>>,
    pub denied: Vec<Vec<u64>>,
    pub upstream_rejected: Vec<u64>,
    pub errors: u64,
}

impl Bins {
    pub fn new(dcs: usize, seconds: usize) -> Self {
        Bins {
            offered: vec![vec![0; dcs]; seconds + 2],
            admitted: vec![vec![0; dcs]; seconds + 2],
            denied: vec![vec![0; dcs]; seconds + 2],
            upstream_rejected: vec![0; seconds + 2],
            errors: 0,
        }
    }
}

pub struct Load {
    pub client: reqwest::Client,
    /// The limit each permit names (None: the agents' default limit).
    pub limit: Option<String>,
    pub upstream: String,
    pub start: Instant,
    pub duration: Duration,
    pub bins: Arc<Mutex<Bins>>,
    /// How long a request may wait at its pod for a permit.
    pub max_wait_ms: u64,
}

enum Outcome {
    Admitted,
    Denied,
    UpstreamRejected,
    Error,
}

impl Load {
    fn sec(&self) -> usize {
        (self.start.elapsed().as_secs() as usize).min(self.duration.as_secs() as usize + 1)
    }

    fn count(&self, dc: usize, o: Outcome) {
        let s = self.sec();
        let mut b = self.bins.lock().unwrap_or_else(|p| p.into_inner());
        match o {
            Outcome::Admitted => b.admitted[s][dc] += 1,
            Outcome::Denied => b.denied[s][dc] += 1,
            Outcome::UpstreamRejected => {
                b.admitted[s][dc] += 1;
                b.upstream_rejected[s] += 1;
            }
            Outcome::Error => b.errors += 1,
        }
    }

    async fn one(self: Arc<Self>, dc: usize, agent: String) {
        let url = match &self.limit {
            Some(limit) => format!("http://{agent}/v1/acquire?limit={limit}&max_wait_ms={}", self.max_wait_ms),
            None => format!("http://{agent}/v1/acquire?max_wait_ms={}", self.max_wait_ms),
        };
        let permit = self.client.post(url).send().await;
        let outcome = match permit {
            Ok(r) if r.status().is_success() => {
                match self.client.post(format!("http://{}/call", self.upstream)).send().await {
                    Ok(r) if r.status().is_success() => Outcome::Admitted,
                    Ok(r) if r.status().as_u16() == 429 => Outcome::UpstreamRejected,
                    _ => Outcome::Error,
                }
            }
            Ok(r) if r.status().as_u16() == 429 => Outcome::Denied,
            _ => Outcome::Error,
        };
        self.count(dc, outcome);
    }

    /// Offer `rate(t)` requests per second from DC `dc`, spread round-robin over its agents (the
    /// list may change while it runs: pods crash, drain and join).
    pub async fn drive(self: Arc<Self>, dc: usize, agents: Arc<Mutex<Vec<String>>>, rate: impl Fn(f64) -> f64) {
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut owed, mut next, mut last) = (0.0f64, 0usize, self.start.elapsed().as_secs_f64());
        let limit = Arc::new(tokio::sync::Semaphore::new(4_000));
        loop {
            tick.tick().await;
            let now = self.start.elapsed().as_secs_f64();
            if now >= self.duration.as_secs_f64() {
                break;
            }
            owed += rate(now) * (now - last);
            last = now;
            while owed >= 1.0 {
                owed -= 1.0;
                {
                    let s = self.sec();
                    self.bins.lock().unwrap_or_else(|p| p.into_inner()).offered[s][dc] += 1;
                }
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    self.count(dc, Outcome::Error);
                    continue;
                };
                let agent = {
                    let list = agents.lock().unwrap_or_else(|p| p.into_inner());
                    if list.is_empty() {
                        drop(list);
                        self.count(dc, Outcome::Error);
                        continue;
                    }
                    list[next % list.len()].clone()
                };
                next += 1;
                let me = self.clone();
                tokio::spawn(async move {
                    me.one(dc, agent).await;
                    drop(permit);
                });
            }
        }
    }
}

/// One limit's load: the limit permits name, its upstream, its share of the diurnal demand.
pub struct LoadSpec {
    pub limit: Option<String>,
    pub upstream: String,
    /// Demand as a multiple of the simulator's diurnal day.
    pub demand_share: f64,
}

/// Start the simulator's diurnal day, compressed into `duration`, from every DC's agents (one
/// list per DC, which may change while it runs), for the agents' default limit. Returns the load
/// (its clock and counters) and the drivers, which end with the day.
pub fn start_diurnal(
    client: reqwest::Client,
    upstream: String,
    duration: Duration,
    agents: Vec<Arc<Mutex<Vec<String>>>>,
) -> (Arc<Load>, Vec<JoinHandle<()>>) {
    let spec = LoadSpec { limit: None, upstream, demand_share: 1.0 };
    let (mut loads, drivers) = start_diurnal_loads(client, vec![spec], duration, agents);
    (loads.remove(0), drivers)
}

/// [`start_diurnal`] for several limits at once, through the same agents and on one clock: a
/// load per spec, in the specs' order, each offering its share of the day.
pub fn start_diurnal_loads(
    client: reqwest::Client,
    specs: Vec<LoadSpec>,
    duration: Duration,
    agents: Vec<Arc<Mutex<Vec<String>>>>,
) -> (Vec<Arc<Load>>, Vec<JoinHandle<()>>) {
    let start = Instant::now();
    let scenario = Scenario::diurnal();
    let day_scale = scenario.day_s / duration.as_secs_f64();
    let (mut loads, mut drivers) = (Vec::new(), Vec::new());
    for spec in specs {
        let bins = Arc::new(Mutex::new(Bins::new(agents.len(), duration.as_secs() as usize)));
        let load = Arc::new(Load {
            client: client.clone(),
            limit: spec.limit,
            upstream: spec.upstream,
            start,
            duration,
            bins,
            max_wait_ms: 250,
        });
        for (d, list) in agents.iter().enumerate() {
            let (sc, share) = (scenario.clone(), spec.demand_share);
            drivers
                .push(tokio::spawn(load.clone().drive(d, list.clone(), move |t| share * sc.demand(d, t * day_scale))));
        }
        loads.push(load);
    }
    (loads, drivers)
}
