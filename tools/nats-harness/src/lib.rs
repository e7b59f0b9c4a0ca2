//! # Real nats-server processes for tests and the lab
//!
//! * [`NatsServer`]: a `nats-server` on a free loopback port with JetStream on a fresh
//!   temporary directory; paused, killed, restarted on demand, stopped and removed on drop.
//!   [`binaries`] lists the servers to test against.
//! * [`envoy`]: a real Envoy process (installed by `scripts/envoy`) on a test's bootstrap.
//! * [`leaf_topology`]: the production topology (the hub and a cluster per DC, leaf-node links
//!   through proxies, the shipped roles as JWT credentials).
//! * [`LinkProxy`]: a TCP link (a DC's way into the cluster, a leaf-node link) to cut and heal.
//! * [`prod_auth`]: the shipped roles as NATS JWT credentials (made in a temporary directory), and
//!   a server that runs them.
//! * [`wait`]: bounded waits tests share (a connection within a deadline, a watched status
//!   reaching a condition) that fail with what was last seen instead of hanging.
#![allow(clippy::disallowed_methods)] // a development tool: it measures real time on purpose (clippy.toml)

pub mod envoy;
pub mod leaf_topology;
mod link_proxy;
pub mod prod_auth;
mod server;
pub mod wait;

pub use link_proxy::LinkProxy;

/// A free loopback port (bound and released: another process could take it in between).
pub fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}
pub use server::{binaries, NatsServer, ServerError, START_TIMEOUT};

/// Waits until every server of a cluster is alive and accepts connections on its cluster port
/// (`servers[i]` on `cluster_ports[i]`), for at most `within`. A node reports ready once it
/// listens for clients and binds its route listener only after that, exiting when another
/// socket took the port [`free_port`] reserved: the error says which node, for a caller that
/// starts the cluster afresh.
pub async fn cluster_listening(
    servers: &mut [NatsServer],
    cluster_ports: &[u16],
    within: std::time::Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    for (i, (server, port)) in servers.iter_mut().zip(cluster_ports).enumerate() {
        loop {
            if !server.is_running() {
                return Err(format!("node {} exited: {}", i + 1, server.log_tail(3).join(" | ")));
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", *port)).await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("node {} does not listen for routes on {port}", i + 1));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
