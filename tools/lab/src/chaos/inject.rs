//! Injecting and healing each fault on the running system: processes (SIGKILL, SIGSTOP, SIGTERM,
//! restart), NATS servers (kill, restart, the partition proxy) and the adversary.

use super::schedule::{Fault, FaultKind};
use super::topology::Topology;
use crate::demo::procs::Procs;
use crate::demo::{DCS, LIMIT};
use async_nats::jetstream::kv::Store;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The running system the faults act on.
pub(super) struct World {
    pub procs: Procs,
    pub topology: Topology,
    /// Per DC: the agents the load sends to (name → address).
    pub agents: Vec<Arc<Mutex<BTreeMap<String, String>>>>,
    /// Per DC: the address list the load reads.
    pub lists: Vec<Arc<Mutex<Vec<String>>>>,
    pub hub: async_nats::Client,
    pub leaders: Store,
    pub joined: usize,
    /// Per DC: the process now in each pod slot (a drained pod is replaced under a new id).
    pub slots: Vec<Vec<String>>,
    pub adversary: Option<(watch::Sender<bool>, JoinHandle<super::adversary::Sent>)>,
    pub adversary_sent: Vec<super::adversary::Sent>,
    /// When JetStream led the leader and ledger buckets' streams again after every NATS node
    /// restarted (taken by the driver for the fault's record).
    pub store_back: Option<Instant>,
}

/// How long the harness waits for JetStream to lead the buckets' streams after every NATS node
/// restarted.
const STORE_BACK_WITHIN: Duration = Duration::from_secs(60);

/// What applying a fault did, to undo it.
pub(super) enum Undo {
    Respawn { name: String, dc: usize, agent: bool },
    Replace { dc: usize, slot: usize },
    Continue(String),
    Drain { names: Vec<String>, dc: usize },
    Heal(usize),
    RestartHubNode(usize),
    StartAllNats,
    StopAdversary,
    Nothing,
}

impl World {
    fn sync_list(&self, dc: usize) {
        let names = self.agents[dc].lock().unwrap_or_else(|p| p.into_inner());
        *self.lists[dc].lock().unwrap_or_else(|p| p.into_inner()) = names.values().cloned().collect();
    }

    fn remove_agent(&self, dc: usize, name: &str) {
        self.agents[dc].lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.sync_list(dc);
    }

    fn add_agent(&self, dc: usize, name: &str, addr: String) {
        self.agents[dc].lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_string(), addr);
        self.sync_list(dc);
    }

    /// Start a new agent `<dc>-<kind>-n<k>` and send it load.
    async fn start_agent(&mut self, dc: usize, kind: &str) -> Result<String, String> {
        self.joined += 1;
        let name = format!("{}-{kind}-n{}", DCS[dc], self.joined);
        let env = agent_env(&self.topology.dc_url(dc), DCS[dc], &name, None);
        let addr = self.procs.spawn(&name, &["agent"], &env, true).await?.unwrap_or_default();
        self.add_agent(dc, &name, addr);
        Ok(name)
    }

    async fn leader_of(&self, key: &str) -> Option<String> {
        let v = self.leaders.get(key).await.ok()??;
        // A DC's key holds a term record naming its holder; the coordinator's, the id alone.
        Some(leasehold_core::dc_manager::TermRecord::holder_of(&v))
    }

    /// The hub node (index) leading the ledger's stream.
    async fn stream_leader(&self) -> Option<usize> {
        let leader = self.stream_leader_name(leasehold_core::subjects::LEDGER_BUCKET).await?;
        leader.strip_prefix("hub-")?.parse::<usize>().ok().map(|n| n - 1)
    }

    /// The node leading a bucket's stream, as JetStream answers now.
    async fn stream_leader_name(&self, bucket: &str) -> Option<String> {
        let subject = format!("$JS.API.STREAM.INFO.KV_{bucket}");
        let ask = self.hub.request(subject, "".into());
        let reply = tokio::time::timeout(Duration::from_millis(500), ask).await.ok()?.ok()?;
        let info: serde_json::Value = serde_json::from_slice(&reply.payload).ok()?;
        info["cluster"]["leader"].as_str().map(str::to_string)
    }

    /// Wait (at most [`STORE_BACK_WITHIN`]) until the leader and ledger buckets' streams have
    /// leaders again, so they take writes; remembers when in `store_back`.
    async fn wait_for_the_store(&mut self) -> String {
        let started = Instant::now();
        let buckets = [leasehold_core::subjects::LEADER_BUCKET, leasehold_core::subjects::LEDGER_BUCKET];
        while started.elapsed() < STORE_BACK_WITHIN {
            let mut led = 0;
            for bucket in buckets {
                led += self.stream_leader_name(bucket).await.is_some() as usize;
            }
            if led == buckets.len() {
                self.store_back = Some(Instant::now());
                return format!("; JetStream leads both buckets again {:.1} s later", started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        format!("; JetStream did not lead both buckets within {} s", STORE_BACK_WITHIN.as_secs())
    }

    /// Inject `f`; returns how to heal it and a line for the log.
    pub(super) async fn apply(&mut self, f: &Fault) -> Result<(Undo, String), String> {
        let dc = DCS[f.dc];
        let pod = self.slots[f.dc][f.pod].clone();
        Ok(match f.kind {
            FaultKind::KillCoordinatorLeader => {
                let Some(l) = self.leader_of(leasehold_core::subjects::COORDINATOR_LEADER_KEY).await else {
                    return Ok((Undo::Nothing, "no coordinator leader to kill".into()));
                };
                self.procs.kill(&l).await;
                (Undo::Respawn { name: l.clone(), dc: f.dc, agent: false }, format!("SIGKILL coordinator leader {l}"))
            }
            FaultKind::KillDcManagerLeader => {
                let key = format!("dc.{dc}");
                let Some(l) = self.leader_of(&key).await else {
                    return Ok((Undo::Nothing, format!("no {dc} manager leader to kill")));
                };
                self.procs.kill(&l).await;
                (Undo::Respawn { name: l.clone(), dc: f.dc, agent: false }, format!("SIGKILL {dc} manager leader {l}"))
            }
            FaultKind::PausePod => {
                self.procs.signal(&pod, "-STOP");
                (Undo::Continue(pod.clone()), format!("SIGSTOP {pod}"))
            }
            FaultKind::CrashPod => {
                self.remove_agent(f.dc, &pod);
                self.procs.kill(&pod).await;
                (Undo::Respawn { name: pod.clone(), dc: f.dc, agent: true }, format!("SIGKILL {pod}"))
            }
            FaultKind::DrainPod => {
                self.remove_agent(f.dc, &pod);
                self.procs.terminate(&pod);
                (Undo::Replace { dc: f.dc, slot: f.pod }, format!("SIGTERM (drain) {pod}"))
            }
            FaultKind::BurstJoin => {
                let mut names = Vec::new();
                for _ in 0..4 {
                    names.push(self.start_agent(f.dc, "join").await?);
                }
                (Undo::Drain { names: names.clone(), dc: f.dc }, format!("{} join {dc}", names.join(", ")))
            }
            FaultKind::PartitionDc => {
                self.topology.partition(f.dc);
                (Undo::Heal(f.dc), format!("partition {dc} from the NATS cluster"))
            }
            FaultKind::KillStreamLeaderNode => {
                let Some(i) = self.stream_leader().await else {
                    return Ok((Undo::Nothing, "no stream leader found".into()));
                };
                self.topology.hub[i].kill();
                (Undo::RestartHubNode(i), format!("SIGKILL hub-{} (ledger stream leader)", i + 1))
            }
            FaultKind::RestartAllNats => {
                for s in self.topology.hub.iter_mut() {
                    s.kill();
                }
                (Undo::StartAllNats, "SIGKILL every NATS node".into())
            }
            FaultKind::Adversary => {
                let (tx, rx) = watch::channel(false);
                let task = tokio::spawn(super::adversary::run(self.topology.dc_url(f.dc), LIMIT.into(), dc.into(), rx));
                self.adversary = Some((tx, task));
                (Undo::StopAdversary, format!("adversary on {dc}"))
            }
        })
    }

    pub(super) async fn heal(&mut self, undo: Undo) -> Result<String, String> {
        Ok(match undo {
            Undo::Respawn { name, dc, agent } => {
                let addr = self.procs.respawn(&name, agent).await?;
                if let Some(addr) = addr {
                    self.add_agent(dc, &name, addr);
                }
                format!("{name} started again")
            }
            Undo::Replace { dc, slot } => {
                // A drained pod's holder (id and incarnation) stays closed for a while (late
                // messages from it must not count); its replacement is a new pod, as a deployment
                // would start.
                let name = self.start_agent(dc, "pod").await?;
                self.slots[dc][slot] = name.clone();
                format!("{name} replaces it")
            }
            Undo::Continue(name) => {
                self.procs.signal(&name, "-CONT");
                format!("SIGCONT {name}")
            }
            Undo::Drain { names, dc } => {
                for n in &names {
                    self.remove_agent(dc, n);
                    self.procs.terminate(n);
                }
                format!("{} drain", names.join(", "))
            }
            Undo::Heal(dc) => {
                self.topology.heal(dc);
                format!("{} reconnected", DCS[dc])
            }
            Undo::RestartHubNode(i) => {
                self.topology.hub[i].restart().map_err(|e| e.to_string())?;
                format!("hub-{} started again", i + 1)
            }
            Undo::StartAllNats => {
                for s in self.topology.hub.iter_mut() {
                    s.restart().map_err(|e| e.to_string())?;
                }
                format!("every NATS node started again{}", self.wait_for_the_store().await)
            }
            Undo::StopAdversary => {
                if let Some((tx, task)) = self.adversary.take() {
                    let _ = tx.send(true);
                    let sent = task.await.unwrap_or_default();
                    let line = format!("adversary stopped: {sent:?}");
                    self.adversary_sent.push(sent);
                    line
                } else {
                    "no adversary".into()
                }
            }
            Undo::Nothing => "nothing to heal".into(),
        })
    }
}

/// An agent's environment: its DC's link into NATS, its name, and an optional clock skew.
pub(super) fn agent_env(url: &str, dc: &str, name: &str, skew: Option<(u64, i64)>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("LEASEHOLD_AGENT_NATS_URL", url.to_string()),
        ("LEASEHOLD_AGENT_LIMIT", LIMIT.to_string()),
        ("LEASEHOLD_AGENT_DC", dc.to_string()),
        ("LEASEHOLD_AGENT_POD_ID", name.to_string()),
        ("LEASEHOLD_AGENT_HTTP_LISTEN", "127.0.0.1:0".to_string()),
    ];
    if let Some((offset_ms, drift_ppm)) = skew {
        env.push(("LEASEHOLD_AGENT_CLOCK_OFFSET_MS", offset_ms.to_string()));
        env.push(("LEASEHOLD_AGENT_CLOCK_DRIFT_PPM", drift_ppm.to_string()));
    }
    env
}
