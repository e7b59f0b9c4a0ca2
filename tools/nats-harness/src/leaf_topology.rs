//! The production topology of `nats/prod` on loopback: the coordinators' cluster (the hub,
//! JetStream domain `hub`) and one cluster per DC with its own JetStream domain, joined to the
//! hub as a leaf node through a [`LinkProxy`] the test can cut, as the DC's `leaf-<dc>` user. Every
//! server runs the shipped roles (`nats/prod/roles.toml`, as `leasehold auth setup` makes them:
//! [`ProdAuth`]) and clients connect with their role's credential; `nodes` servers per cluster
//! (1 for a short run, 3 for the production shape, where buckets get 3 replicas).

use crate::free_port;
use crate::prod_auth::ProdAuth;
use crate::{LinkProxy, NatsServer};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long each cluster may take to elect its JetStream meta leader.
const JETSTREAM_READY_WITHIN: Duration = Duration::from_secs(30);

pub struct LeafTopology {
    pub auth: ProdAuth,
    pub hub: Vec<NatsServer>,
    /// Per DC: its name, its servers and its link to the hub.
    pub dcs: Vec<(String, Vec<NatsServer>, LinkProxy)>,
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
        "include ./resolver.conf\nserver_name: hub-{}\njetstream {{ domain: hub }}\n{}\
         leafnodes {{\n  listen: \"127.0.0.1:{leaf_port}\"\n  advertise: \"127.0.0.1:1\"\n}}\n",
        i + 1,
        cluster_block("hub", i, cluster_ports)
    )
}

/// A DC node: its own JetStream domain, a leaf-node link to the hub through `link_port` as the
/// DC's leaf user (`leaf_creds`), bound to the LEASEHOLD account on both sides.
fn dc_config(dc: &str, i: usize, cluster_ports: &[u16], link_port: u16, leaf_creds: &Path) -> String {
    format!(
        "include ./resolver.conf\ninclude ./leaf-account.conf\nserver_name: {dc}-{}\njetstream {{ domain: {dc} }}\n{}\
         leafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{link_port}\", credentials: \"{}\", \
         account: ${} }} ] }}\n",
        i + 1,
        cluster_block(dc, i, cluster_ports),
        leaf_creds.display(),
        leasehold_nats::auth::ACCOUNT_VARIABLE,
    )
}

fn start_node(bin: &Path, auth: &ProdAuth, name: &str, config: &str) -> Result<NatsServer, String> {
    let files =
        [(name, config), ("resolver.conf", auth.resolver_conf()), ("leaf-account.conf", auth.leaf_account_conf())];
    NatsServer::start_with_config(bin, &files, &[]).map_err(|e| format!("{name}: {e}"))
}

/// How many times [`LeafTopology::start`] starts the servers afresh.
const START_ATTEMPTS: usize = 3;
/// How long a cluster's nodes may take to listen for routes once each reported ready.
const ROUTES_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

impl LeafTopology {
    /// The hub and `dcs`, `nodes` servers each, every cluster's JetStream ready. Started afresh
    /// (at most [`START_ATTEMPTS`] times) when a node does not come up: a cluster or leaf port
    /// reserved by [`free_port`] may be taken by another socket before the node binds it.
    pub async fn start(bin: &Path, dcs: &[&str], nodes: usize) -> Result<Self, String> {
        let mut attempt = 1;
        loop {
            match Self::start_once(bin, dcs, nodes).await {
                Err(e) if attempt < START_ATTEMPTS => {
                    eprintln!("the leaf topology did not come up ({e}); starting it again");
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_once(bin: &Path, dcs: &[&str], nodes: usize) -> Result<Self, String> {
        let auth = ProdAuth::new(dcs)?;
        let cluster_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<Result<_, _>>()?;
        let leaf_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<Result<_, _>>()?;
        let mut hub = Vec::new();
        for (i, leaf_port) in leaf_ports.iter().enumerate() {
            hub.push(start_node(bin, &auth, "hub.conf", &hub_config(i, &cluster_ports, *leaf_port))?);
        }
        if nodes > 1 {
            crate::cluster_listening(&mut hub, &cluster_ports, ROUTES_WITHIN)
                .await
                .map_err(|e| format!("the hub's {e}"))?;
        }
        let mut out = Vec::new();
        for dc in dcs {
            let link = LinkProxy::start(leaf_ports.clone()).await.map_err(|e| e.to_string())?;
            let ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect::<Result<_, _>>()?;
            let mut servers = Vec::new();
            let leaf_creds = auth.creds(&format!("leaf-{dc}"));
            for i in 0..nodes {
                servers.push(start_node(bin, &auth, "dc.conf", &dc_config(dc, i, &ports, link.port(), &leaf_creds))?);
            }
            if nodes > 1 {
                crate::cluster_listening(&mut servers, &ports, ROUTES_WITHIN)
                    .await
                    .map_err(|e| format!("{dc}'s {e}"))?;
            }
            out.push((dc.to_string(), servers, link));
        }
        let topology = LeafTopology { auth, hub, dcs: out };
        topology.wait_for_jetstream().await?;
        Ok(topology)
    }

    /// A URL of every server of `servers` (clients fail over between them).
    pub fn url(servers: &[NatsServer]) -> String {
        servers.iter().map(|s| format!("nats://127.0.0.1:{}", s.port())).collect::<Vec<_>>().join(",")
    }

    /// The `.creds` of `user` (a role, or a pod id `<dc>-…`: see [`ProdAuth::creds`]).
    pub fn creds(&self, user: &str) -> PathBuf {
        self.auth.creds(user)
    }

    /// A client of `servers` as `user`.
    pub async fn client(&self, servers: &[NatsServer], user: &str) -> async_nats::Client {
        self.auth.client(&Self::url(servers), user).await
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
            let client = self.client(servers, "inspect").await;
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
