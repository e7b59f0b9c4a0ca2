//! The production shape on loopback: a 3-node NATS cluster with JetStream (the ledger and the
//! leader keys are R3 streams, so one node may die), and one network link per DC: every NATS
//! connection of a DC's services (its managers and pods) goes through a TCP proxy the harness
//! controls, which forwards to the cluster's nodes (failing over between them). The coordinators
//! connect to the cluster directly. Cutting a DC's proxy is a real partition of that DC: its
//! connections drop and no new one gets through until it heals. The servers do not advertise
//! their other addresses to clients (`no_advertise`), so nothing routes around the proxy.

use leasehold_nats_harness::free_port;
use leasehold_nats_harness::{LinkProxy, NatsServer};
use std::path::Path;

pub(super) struct Topology {
    pub hub: Vec<NatsServer>,
    proxies: Vec<LinkProxy>,
}

fn hub_config(i: usize, cluster_ports: &[u16]) -> String {
    let routes: Vec<String> = cluster_ports
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, p)| format!("\"nats-route://127.0.0.1:{p}\""))
        .collect();
    format!(
        "server_name: hub-{}\ncluster {{\n  name: hub\n  listen: 127.0.0.1:{}\n  no_advertise: true\n  routes: [{}]\n}}\n",
        i + 1,
        cluster_ports[i],
        routes.join(", ")
    )
}

/// How many times the hub is started afresh when a node dies at start (e.g. a cluster port
/// reserved by [`free_port`](leasehold_nats_harness::free_port) was taken by another socket before the node bound it).
const HUB_START_ATTEMPTS: usize = 3;

impl Topology {
    pub(super) async fn start(binary: &Path, dcs: usize) -> Result<Self, String> {
        let mut hub = start_hub(binary).await;
        for attempt in 2..=HUB_START_ATTEMPTS {
            match hub {
                Ok(_) => break,
                Err(e) => {
                    eprintln!("chaos: the NATS cluster did not come up ({e}); starting it again (attempt {attempt})");
                    hub = start_hub(binary).await;
                }
            }
        }
        let hub = hub?;
        let client_ports: Vec<u16> = hub.iter().map(NatsServer::port).collect();
        let mut proxies = Vec::new();
        for _ in 0..dcs {
            proxies.push(LinkProxy::start(client_ports.clone()).await.map_err(|e| e.to_string())?);
        }
        Ok(Topology { hub, proxies })
    }

    /// Each hub node: alive or not, and its last log lines (for an error message).
    pub(super) fn diagnosis(&mut self) -> String {
        let nodes: Vec<String> = self
            .hub
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let state = if s.is_running() { "running" } else { "exited" };
                format!("hub-{} {state}: {}", i + 1, s.log_tail(4).join(" | "))
            })
            .collect();
        nodes.join("; ")
    }

    /// Every hub node's client URL, comma-separated (clients fail over between them).
    pub(super) fn hub_urls(&self) -> String {
        self.hub.iter().map(|s| s.url()).collect::<Vec<_>>().join(",")
    }

    /// The DC's way into NATS: its link proxy.
    pub(super) fn dc_url(&self, dc: usize) -> String {
        format!("nats://127.0.0.1:{}", self.proxies[dc].port())
    }

    pub(super) fn partition(&self, dc: usize) {
        self.proxies[dc].cut();
    }

    pub(super) fn heal(&self, dc: usize) {
        self.proxies[dc].heal();
    }
}

/// Three clustered nodes, returned once every one of them is alive and accepts route
/// connections on its cluster port (a node that lost its port to another socket exits).
async fn start_hub(binary: &Path) -> Result<Vec<NatsServer>, String> {
    let cluster_ports: Vec<u16> = (0..3).map(|_| free_port()).collect::<Result<_, _>>()?;
    let mut hub = Vec::new();
    for i in 0..3 {
        let config = hub_config(i, &cluster_ports);
        hub.push(NatsServer::start_with_config(binary, &[("hub.conf", &config)], &[]).map_err(|e| e.to_string())?);
    }
    leasehold_nats_harness::cluster_listening(&mut hub, &cluster_ports, std::time::Duration::from_secs(10))
        .await
        .map_err(|e| format!("the hub's {e}"))?;
    Ok(hub)
}
