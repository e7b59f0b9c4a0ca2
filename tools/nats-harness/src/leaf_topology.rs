//! The production topology of `nats/prod` on loopback: the coordinators' cluster (the hub,
//! JetStream domain `hub`) and one cluster per DC with its own JetStream domain, joined to the
//! hub as a leaf node through a [`LinkProxy`] the test can cut. Every server runs the shipped
//! accounts (`nats/prod/accounts.conf`) and the hub the shipped leaf-node users, with the test
//! passwords; `nodes` servers per cluster (1 for a short run, 3 for the production shape, where
//! buckets get 3 replicas).

use crate::prod_accounts::{ACCOUNTS_CONF, HUB_LEAF_USERS_CONF, TEST_PASSWORDS};
use crate::{LinkProxy, NatsServer};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long each cluster may take to elect its JetStream meta leader.
const JETSTREAM_READY_WITHIN: Duration = Duration::from_secs(30);

pub struct LeafTopology {
    pub hub: Vec<NatsServer>,
    /// Per DC: its name, its servers and its link to the hub.
    pub dcs: Vec<(String, Vec<NatsServer>, LinkProxy)>,
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// The `cluster` block of node `i` of `name` (none for a single node).
fn cluster_block(name: &str, i: usize, ports: &[u16]) -> String {
    if ports.len() < 2 {
        return String::new();
    }
    let routes: Vec<String> = ports.iter().map(|p| format!("\"nats-route://127.0.0.1:{p}\"")).collect();
    format!("cluster {{ name: {name}, listen: \"127.0.0.1:{}\", routes: [{}] }}\n", ports[i], routes.join(", "))
}

/// A hub node. Its leaf-node listener tells each leaf its own address, and a leaf reconnects to
/// it directly (around the proxy) after a cut: advertising a closed port keeps every link on
/// its proxy.
fn hub_config(i: usize, cluster_ports: &[u16], leaf_port: u16) -> String {
    format!(
        "server_name: hub-{}\njetstream {{ domain: hub }}\n{}\
         leafnodes {{\n  listen: \"127.0.0.1:{leaf_port}\"\n  advertise: \"127.0.0.1:1\"\n  include ./hub-leaf-users.conf\n}}\n\
         include ./accounts.conf\n",
        i + 1,
        cluster_block("hub", i, cluster_ports)
    )
}

/// A DC node: its own JetStream domain, a leaf-node link to the hub through `link_port` as the
/// DC's leaf user.
fn dc_config(dc: &str, i: usize, cluster_ports: &[u16], link_port: u16) -> String {
    format!(
        "server_name: {dc}-{}\njetstream {{ domain: {dc} }}\n{}\
         leafnodes {{ remotes: [ {{ url: \"nats-leaf://leaf-{dc}:leaf-{dc}-pw@127.0.0.1:{link_port}\", account: LEASEHOLD }} ] }}\n\
         include ./accounts.conf\n",
        i + 1,
        cluster_block(dc, i, cluster_ports)
    )
}

fn start_node(bin: &Path, name: &str, config: &str) -> Result<NatsServer, String> {
    let files = [(name, config), ("accounts.conf", ACCOUNTS_CONF), ("hub-leaf-users.conf", HUB_LEAF_USERS_CONF)];
    NatsServer::start_with_config(bin, &files, &TEST_PASSWORDS).map_err(|e| format!("{name}: {e}"))
}

impl LeafTopology {
    /// The hub and `dcs` (each must have a leaf user in `hub-leaf-users.conf`: `bkk`, `europe`),
    /// `nodes` servers each, every cluster's JetStream ready.
    pub async fn start(bin: &Path, dcs: &[&str], nodes: usize) -> Result<Self, String> {
        let cluster_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<Result<_, _>>()?;
        let leaf_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<Result<_, _>>()?;
        let mut hub = Vec::new();
        for (i, leaf_port) in leaf_ports.iter().enumerate() {
            hub.push(start_node(bin, "hub.conf", &hub_config(i, &cluster_ports, *leaf_port))?);
        }
        let mut out = Vec::new();
        for dc in dcs {
            let link = LinkProxy::start(leaf_ports.clone()).await.map_err(|e| e.to_string())?;
            let ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<Result<_, _>>()?;
            let mut servers = Vec::new();
            for i in 0..nodes {
                servers.push(start_node(bin, "dc.conf", &dc_config(dc, i, &ports, link.port()))?);
            }
            out.push((dc.to_string(), servers, link));
        }
        let topology = LeafTopology { hub, dcs: out };
        topology.wait_for_jetstream().await?;
        Ok(topology)
    }

    /// A URL of every server of `servers` for `user` (the shipped users, the test passwords):
    /// clients fail over between them.
    pub fn url(servers: &[NatsServer], user: &str) -> String {
        let password = match user {
            "coordinator" => "coord-pw",
            "dc-bkk" => "bkk-pw",
            "dc-europe" => "eu-pw",
            "inspect" => "inspect-pw",
            _ => "pod-pw",
        };
        let urls: Vec<String> =
            servers.iter().map(|s| format!("nats://{user}:{password}@127.0.0.1:{}", s.port())).collect();
        urls.join(",")
    }

    /// DC `dc`'s servers and link.
    pub fn dc(&self, dc: &str) -> (&[NatsServer], &LinkProxy) {
        let (_, servers, link) = self.dcs.iter().find(|(name, _, _)| name == dc).expect("a DC of the topology");
        (servers, link)
    }

    /// Every cluster answers JetStream account requests (its meta leader is elected).
    async fn wait_for_jetstream(&self) -> Result<(), String> {
        let clusters = std::iter::once(("hub", &self.hub)).chain(self.dcs.iter().map(|(n, s, _)| (n.as_str(), s)));
        for (name, servers) in clusters {
            let client = crate::wait::client(&Self::url(servers, "inspect"), "topology").await;
            let deadline = Instant::now() + JETSTREAM_READY_WITHIN;
            // The raw request: async-nats's typed account info does not parse 2.9.10's answer.
            let ready = || async {
                let answer = client.request("$JS.API.INFO", bytes::Bytes::new()).await;
                answer.is_ok_and(|m| !String::from_utf8_lossy(&m.payload).contains("\"error\""))
            };
            while !ready().await {
                if Instant::now() > deadline {
                    return Err(format!("{name}: JetStream not ready within {JETSTREAM_READY_WITHIN:?}"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}
