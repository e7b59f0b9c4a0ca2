//! The servers `bench envoy`'s modes ask, each a process of its own as deployed, so that none of
//! them shares a runtime with the load: the agent (`leasehold-lab agent`, a sidecar answering RLS
//! and RLQS from its leases), the Redis design's RLS server (`leasehold-lab bench
//! envoy-redis-rls`) and the floor, an RLS server answering OK without deciding (`leasehold-lab
//! bench envoy-floor-rls`). The coordinator and DC manager leasing the agent its limits run in the
//! bench's process: they are not on a request's path.

use crate::demo::procs::Procs;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::DcManagerConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_nats_harness::{wait, NatsServer};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The DC of the bench's one agent.
const DC: &str = "bkk";
/// How long the agent may take to print its addresses and to hold its leases.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The services' handles: they run while these are held.
type ControlPlane = (leasehold_coordinator::Handle, leasehold_dc_manager::Handle);

/// What a bench asks the agent and the Redis design for.
pub(super) struct ServerSpec<'a> {
    /// The ratelimit YAML both RLS servers read.
    pub(super) rls_config: &'a str,
    /// The limits the YAML names (full names), leased to the agent.
    pub(super) rls_limits: &'a [&'a str],
    /// The limit the agent lends to Envoy over RLQS.
    pub(super) lent: &'a str,
    /// `None`: no Redis baseline.
    pub(super) redis_url: Option<&'a str>,
}

pub(super) struct Servers {
    procs: Procs,
    pub(super) agent_rls_port: u16,
    pub(super) agent_rlqs_port: u16,
    pub(super) redis_rls_port: Option<u16>,
    pub(super) floor_rls_port: u16,
    _control_plane: ControlPlane,
}

impl Servers {
    /// A coordinator and a DC manager for the limits (each far above any load: 1,000,000/s),
    /// the agent once it holds a lease with a rate for every one, the Redis design's server and
    /// the floor.
    pub(super) async fn start(nats: &NatsServer, out_dir: &Path, spec: &ServerSpec<'_>) -> Result<Servers, String> {
        let url = nats.url();
        let mut limits: Vec<&str> = spec.rls_limits.to_vec();
        limits.push(spec.lent);
        let defs = limits
            .iter()
            .map(|name| {
                let mut limit =
                    LimitConfig::new(name, Quota::per_s(1_000_000, 1_000_000), &[(DC, Quota::per_s(250_000, 0))]);
                limit.renew_interval_ms = 250;
                LimitDef::from_config(&limit)
            })
            .collect();
        let coord = leasehold_coordinator::settings::Settings {
            nats_url: url.clone(),
            id: Some("coord".into()),
            replicas: 1,
            limits: defs,
            ..Default::default()
        };
        let coordinator = leasehold_coordinator::spawn(wait::client(&url, "coordinator").await, coord);
        let dc = leasehold_dc_manager::settings::Settings {
            nats_url: url.clone(),
            manager: DcManagerConfig::new("", DC, ""),
            ..Default::default()
        };
        let dc_manager = leasehold_dc_manager::spawn(wait::client(&url, "dc-manager").await, dc);

        let mut procs = Procs::new(out_dir)?;
        let config_path = out_dir.join("ratelimit.yaml");
        write(&config_path, spec.rls_config)?;
        let agent_toml = out_dir.join("agent.toml");
        write(
            &agent_toml,
            &format!(
                "nats_url = \"{url}\"\ndc = \"{DC}\"\nhttp_listen = \"127.0.0.1:0\"\n\
                 envoy_rls_listen = \"127.0.0.1:0\"\nenvoy_rls_config = \"{}\"\n\
                 envoy_rlqs_listen = \"127.0.0.1:0\"\nenvoy_rlqs_limits = [\"{}\"]\n",
                config_path.display(),
                spec.lent
            ),
        )?;
        let config_arg = agent_toml.display().to_string();
        let http = procs.spawn("agent", &["agent", "--config", &config_arg], &[], true).await?.unwrap_or_default();
        let out = out_dir.join("agent.out");
        let agent_rls_port = port_printed(&out, "(RLS v3) on ").await?;
        let agent_rlqs_port = port_printed(&out, "(RLQS) on ").await?;
        for limit in &limits {
            leased(&http, limit).await?;
        }
        let redis_rls_port = match spec.redis_url {
            None => None,
            Some(redis_url) => {
                let config_arg = config_path.display().to_string();
                let args = ["bench", "envoy-redis-rls", "--redis-url", redis_url, "--config", &config_arg];
                let addr = procs.spawn("redis-rls", &args, &[], true).await?.unwrap_or_default();
                Some(port_of(&addr).ok_or_else(|| format!("the Redis design's RLS printed no port: {addr:?}"))?)
            }
        };
        let addr = procs.spawn("floor-rls", &["bench", "envoy-floor-rls"], &[], true).await?.unwrap_or_default();
        let floor_rls_port = port_of(&addr).ok_or_else(|| format!("the floor RLS printed no port: {addr:?}"))?;
        Ok(Servers {
            procs,
            agent_rls_port,
            agent_rlqs_port,
            redis_rls_port,
            floor_rls_port,
            _control_plane: (coordinator, dc_manager),
        })
    }

    /// `agent`, `redis-rls` or `floor-rls`'s process id.
    pub(super) fn pid(&self, name: &str) -> Option<u32> {
        self.procs.pid(name)
    }
}

/// Serve the RLS service `make` builds on `listen` until killed, printing `<what> listening on
/// ADDR`. On one thread, as the agent answers Envoy (`leasehold_pod::envoy::on_own_thread`):
/// the servers `bench envoy` compares differ only in what they do with a call.
pub(super) fn serve_rls_on_one_thread<S: RateLimitService>(
    what: &str,
    listen: &str,
    make: impl std::future::Future<Output = Result<RateLimitServiceServer<S>, String>>,
) -> Result<ExitCode, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(async move {
        let service = make.await?;
        let listener =
            tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        println!("{what} listening on {local}");
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
            .map_err(|e| format!("serving: {e}"))?;
        Ok(ExitCode::SUCCESS)
    })
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The port in `ADDR` or `ADDR, …`.
fn port_of(text: &str) -> Option<u16> {
    text.split(',').next()?.trim().parse::<std::net::SocketAddr>().ok().map(|a| a.port())
}

/// The port on the first line of `out` holding `marker` followed by an address (the agent prints
/// one line per service it starts).
async fn port_printed(out: &Path, marker: &str) -> Result<u16, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut tries = tokio::time::interval(Duration::from_millis(20));
    while Instant::now() < deadline {
        tries.tick().await;
        let text = std::fs::read_to_string(out).unwrap_or_default();
        if let Some(port) = text.lines().find_map(|l| l.split(marker).nth(1).and_then(port_of)) {
            return Ok(port);
        }
    }
    Err(format!("the agent did not print {marker:?} within {START_TIMEOUT:?}; see {}", out.display()))
}

/// Until the agent on `http` holds a lease with a rate for `limit` (from its `/v1/status`).
async fn leased(http: &str, limit: &str) -> Result<(), String> {
    let client = reqwest::Client::new();
    let url = format!("http://{http}/v1/status");
    let deadline = Instant::now() + START_TIMEOUT;
    let mut tries = tokio::time::interval(Duration::from_millis(50));
    while Instant::now() < deadline {
        tries.tick().await;
        let Ok(answer) = client.get(&url).query(&[("limit", limit)]).send().await else { continue };
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        if body["lease"]["quota"]["rate_milli_per_s"].as_u64().is_some_and(|r| r > 0) {
            return Ok(());
        }
    }
    Err(format!("the agent held no lease of {limit} within {START_TIMEOUT:?}"))
}

#[cfg(test)]
mod tests {
    use super::port_of;

    #[test]
    fn the_port_is_read_from_an_address_alone_or_before_a_comma() {
        assert_eq!(port_of("127.0.0.1:8081"), Some(8081));
        assert_eq!(port_of("127.0.0.1:8082, limits lent: a"), Some(8082));
        assert_eq!(port_of("nowhere"), None);
    }
}
