//! `leasehold-lab bench envoy --duration-s 10 --clients 8 --rounds 2`: the latency Envoy's rate
//! limit adds to each request, through a real Envoy (`scripts/envoy`) to a local upstream, in one
//! run and on the same machine:
//! * `no_limit`: Envoy without the `ratelimit` filter;
//! * `floor`: RLS answered `OK` by a server that decides nothing ([`super::envoy_floor`]): Envoy's
//!   own call, the least any RLS server can add here;
//! * `agent`: RLS answered by the Leasehold agent from its lease (in memory, loopback gRPC);
//! * `redis`: RLS answered from one central Redis, as envoyproxy/ratelimit does
//!   ([`super::envoy_redis`]);
//! * `rlqs`: Envoy's `rate_limit_quota` filter enforcing token buckets the agent lends it over
//!   RLQS (no hop per request).
//!
//! Each round runs every mode once, in that order (every second round in reverse: over an even
//! number of rounds a machine getting steadily faster or slower weighs on every mode alike), on a
//! fresh Envoy (once it answers a call 200, 1 s of warm-up, then `--duration-s` measured), with
//! clients over keep-alive HTTP/1.1 paced to `--rate` requests/s in all, each request timed from
//! when it was due (`--rate 0`: closed loop, the throughput). The limit is far above the load:
//! this measures the cost of asking, not of being denied. The agent (`leasehold-lab agent`) and
//! the Redis design's server run as processes of their own ([`super::envoy_servers`]), and each
//! mode reports the CPU each process spent per request (`/proc`). The last line is JSON.

use super::cpu::{pid_named, CpuMeter, CpuPerDecision};
use super::envoy_load::{load, serving};
use super::envoy_servers::{ServerSpec, Servers};
use super::round_3;
use leasehold_nats_harness::envoy::{envoy_binary, Envoy};
use leasehold_nats_harness::{binaries, NatsServer};
use leasehold_sim::percentiles::Percentiles;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Measured load time of each mode in each round.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Requests per second over all clients, paced (each timed from when it was due: the latency
    /// of a request, not of a saturated machine's queues). 0: closed loop, each client sending its next request
    /// when the last is answered (the throughput).
    #[arg(long, default_value_t = 2_000)]
    rate: u64,
    /// Rounds of the modes (interleaved, so drift on the machine falls on all of them).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// Measure without the Redis baseline (no Redis to hand).
    #[arg(long)]
    skip_redis: bool,
    /// The Envoy binary (default: `LEASEHOLD_ENVOY`, else what `scripts/envoy` installed).
    #[arg(long)]
    envoy: Option<PathBuf>,
    /// Where the agent's and the Redis design's server's logs go.
    #[arg(long, default_value = "out/bench-envoy")]
    out_dir: PathBuf,
}

const MODES: [&str; 5] = ["no_limit", "floor", "agent", "redis", "rlqs"];
const LIMIT: &str = "bench/generic_key_api";
/// The limit lent to Envoy over RLQS.
const LENT: &str = "bench-rlqs";
const RLS_CONFIG: &str = "domain: bench\ndescriptors:\n  - key: generic_key\n    value: api\n    rate_limit: { unit: second, requests_per_unit: 1000000 }\n";

#[derive(Serialize)]
struct ModeSummary {
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    /// Answers other than 200 (a 429 here would mean the bench's limit was too low).
    not_200: u64,
    /// The longest a new Envoy of this mode took from its start to its first 200, not measured
    /// (over RLQS: until the previous Envoy's assignment is no longer counted).
    ready_ms_max: f64,
    /// CPU per answered request, by process, over the mode's measured loads (`/proc`): Envoy; the
    /// agent (RLS, RLQS, its leases); the Redis design's RLS server and Redis; the floor's server;
    /// the bench's own process (the load, the upstream, the coordinator and DC manager).
    cpu_us_per_request: Vec<CpuPerDecision>,
}

/// A mode's requests (answered, or per second) and p99, for the RLQS ratio.
#[derive(Clone, Copy)]
struct Measured {
    requests: f64,
    p99_ms: f64,
}

/// What a mode's rounds gathered.
#[derive(Default)]
struct ModeRuns {
    latencies_us: Vec<u64>,
    not_200: u64,
    ready_ms_max: f64,
    /// CPU seconds by component over the measured loads.
    cpu_s: BTreeMap<&'static str, f64>,
}

#[derive(Serialize)]
struct Summary {
    modes: BTreeMap<&'static str, ModeSummary>,
    /// p99 of the mode minus p99 without a limit.
    added_p99_ms: BTreeMap<&'static str, f64>,
    /// CPU per request of the mode (all processes) minus that without a limit: what asking costs
    /// the machine, steadier than a p99 on shared cores.
    added_cpu_us_per_request: BTreeMap<&'static str, f64>,
    /// The agent's added p99 over Redis's: the target is at most 1/3 (null with --skip-redis, or
    /// when Redis added nothing measurable).
    agent_over_redis_added_p99: Option<f64>,
    target_met: Option<bool>,
    /// The same ratio within each round (a round where Redis added nothing has none).
    agent_over_redis_added_p99_by_round: Vec<f64>,
    /// The floor's added p99 over Redis's: the least any RLS server's ratio could be on this
    /// machine (the agent's target is out of reach here whenever it is above 1/3).
    floor_over_redis_added_p99: Option<f64>,
    floor_over_redis_added_p99_by_round: Vec<f64>,
    /// RLQS's p99 over no limit's (paced), or no limit's throughput over RLQS's (closed loop):
    /// the target is at most 1.05.
    rlqs_over_no_limit: Option<f64>,
    rlqs_target_met: Option<bool>,
    /// The same ratio within each round (its two modes one or two modes apart, not rounds): how
    /// much of the pooled ratio is the machine changing between rounds.
    rlqs_over_no_limit_by_round: Vec<f64>,
    clients: usize,
    /// Paced requests per second (0: closed loop).
    rate: u64,
    rounds: usize,
    duration_s: u64,
}

pub(super) fn run(a: Args) -> Result<ExitCode, String> {
    if a.duration_s == 0 || a.clients == 0 || a.rounds == 0 {
        return Err("--duration-s, --clients and --rounds must be positive".into());
    }
    let envoy = match &a.envoy {
        Some(p) => p.clone(),
        None => envoy_binary()?,
    };
    leasehold::block_on(bench(a, envoy))
}

/// The limit filter of a mode: none, `ratelimit` asking an RLS server, or `rate_limit_quota`
/// streaming with an RLQS server (on the port given).
#[derive(Clone, Copy)]
enum Filter {
    None,
    Rls(u16),
    Rlqs(u16),
}

/// The `rate_limit_quota` filter: every request in one bucket naming [`LENT`] (`on_no_match`:
/// no predicate to evaluate), denied without an assignment (as deploy/envoy/rlqs-bootstrap.yaml,
/// which matches on the path).
fn rlqs_filter() -> String {
    format!(
        "              - name: envoy.filters.http.rate_limit_quota\n                typed_config:\n                  \"@type\": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig\n                  rlqs_server: {{ envoy_grpc: {{ cluster_name: rls }} }}\n                  domain: bench\n                  bucket_matchers:\n                    on_no_match:\n                      action:\n                        name: lent\n                        typed_config:\n                          \"@type\": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings\n                          bucket_id_builder: {{ bucket_id_builder: {{ limit: {{ string_value: {LENT} }} }} }}\n                          reporting_interval: 5s\n                          no_assignment_behavior: {{ fallback_rate_limit: {{ blanket_rule: DENY_ALL }} }}\n"
    )
}

/// The bootstrap of one mode: ingress on `ingress`, the upstream on `upstream`, and its filter.
fn bootstrap(ingress: u16, upstream: u16, filter: Filter) -> String {
    let rls_cluster = |port: u16| {
        format!("  - name: rls\n    type: STATIC\n    typed_extension_protocol_options:\n      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n        \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n        explicit_http_config: {{ http2_protocol_options: {{}} }}\n    load_assignment: {{ cluster_name: rls, endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }} }}] }}] }}\n")
    };
    let (actions, filter, cluster) = match filter {
        Filter::None => (String::new(), String::new(), String::new()),
        Filter::Rlqs(port) => (String::new(), rlqs_filter(), rls_cluster(port)),
        Filter::Rls(port) => (
            "                  rate_limits: [{ actions: [{ generic_key: { descriptor_value: api } }] }]\n".to_string(),
            "              - name: envoy.filters.http.ratelimit\n                typed_config:\n                  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit\n                  domain: bench\n                  failure_mode_deny: true\n                  timeout: 1s\n                  rate_limit_service: { transport_api_version: V3, grpc_service: { envoy_grpc: { cluster_name: rls } } }\n".to_string(),
            rls_cluster(port),
        ),
    };
    format!(
        "static_resources:\n  listeners:\n  - name: ingress\n    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {ingress} }} }}\n    filter_chains:\n    - filters:\n      - name: envoy.filters.network.http_connection_manager\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n          stat_prefix: ingress\n          route_config:\n            virtual_hosts:\n            - name: all\n              domains: [\"*\"]\n              routes:\n              - match: {{ prefix: / }}\n                route:\n                  cluster: upstream\n{actions}          http_filters:\n{filter}              - name: envoy.filters.http.router\n                typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}\n  clusters:\n  - name: upstream\n    type: STATIC\n    load_assignment: {{ cluster_name: upstream, endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {upstream} }} }} }} }}] }}] }}\n{cluster}admin: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 0 }} }} }}\n"
    )
}

async fn bench(a: Args, envoy_bin: PathBuf) -> Result<ExitCode, String> {
    let nats_bin = binaries().map_err(|e| e.to_string())?.remove(0);
    let nats = NatsServer::start(&nats_bin).map_err(|e| e.to_string())?;
    let spec = ServerSpec {
        rls_config: RLS_CONFIG,
        rls_limits: &[LIMIT],
        lent: LENT,
        redis_url: (!a.skip_redis).then_some(a.redis_url.as_str()),
    };
    let servers = Servers::start(&nats, &a.out_dir, &spec).await?;
    let redis_pid = if a.skip_redis { None } else { pid_named("redis-server") };
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("the upstream: {e}"))?;
    let upstream_port = upstream.local_addr().map_err(|e| e.to_string())?.port();
    tokio::spawn(leasehold_mock_upstream::serve_on(upstream, u64::MAX / 2, 1_000));

    let duration = Duration::from_secs(a.duration_s);
    let mut per_mode: BTreeMap<&'static str, ModeRuns> = BTreeMap::new();
    let (mut rlqs_by_round, mut agent_by_round, mut floor_by_round) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=a.rounds {
        let mut order: Vec<&'static str> = MODES.into_iter().filter(|m| !(a.skip_redis && *m == "redis")).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        let mut this_round: BTreeMap<&'static str, Measured> = BTreeMap::new();
        for mode in order {
            let filter = match mode {
                "agent" => Filter::Rls(servers.agent_rls_port),
                "redis" => Filter::Rls(servers.redis_rls_port.ok_or("no Redis design's server")?),
                "rlqs" => Filter::Rlqs(servers.agent_rlqs_port),
                "floor" => Filter::Rls(servers.floor_rls_port),
                _ => Filter::None,
            };
            let (envoy, ingress) = Envoy::start_on_free_port(
                &envoy_bin,
                |ingress| bootstrap(ingress, upstream_port, filter),
                Duration::from_secs(20),
            )
            .await?;
            // A new Envoy over RLQS is lent a bucket only once the one before it (the previous
            // round's, when the order turns) is no longer counted: its assignment's TTL.
            let ready = serving(ingress).await.map_err(|e| format!("{mode}: {e}"))?;
            let meter = CpuMeter::start(vec![
                ("envoy", envoy.pid().into_iter().collect()),
                ("agent", servers.pid("agent").into_iter().collect()),
                ("redis_rls", servers.pid("redis-rls").into_iter().collect()),
                ("redis", redis_pid.into_iter().collect()),
                ("floor_rls", servers.pid("floor-rls").into_iter().collect()),
                ("bench", vec![std::process::id()]),
            ]);
            let (latencies, not_200) = load(ingress, a.clients, a.rate, duration).await;
            let cpu_s = meter.seconds();
            drop(envoy);
            let p99 = latencies.iter().copied().collect::<Percentiles>().at(0.99).unwrap_or(0) as f64 / 1_000.0;
            let answered = latencies.len();
            eprintln!("round {round}/{}: {mode}: {answered} requests, p99 {p99:.3} ms, {not_200} not 200", a.rounds);
            this_round.insert(mode, Measured { requests: answered as f64, p99_ms: p99 });
            let runs = per_mode.entry(mode).or_default();
            runs.latencies_us.extend(latencies);
            runs.not_200 += not_200;
            runs.ready_ms_max = runs.ready_ms_max.max(ready.as_secs_f64() * 1_000.0);
            for (component, seconds) in cpu_s {
                *runs.cpu_s.entry(component).or_default() += seconds;
            }
        }
        let added_in_round = |mode: &str| Some(this_round.get(mode)?.p99_ms - this_round.get("no_limit")?.p99_ms);
        for (mode, by_round) in [("agent", &mut agent_by_round), ("floor", &mut floor_by_round)] {
            by_round.extend(over_redis(added_in_round(mode), added_in_round("redis")));
        }
        if let (Some(&rlqs), Some(&none)) = (this_round.get("rlqs"), this_round.get("no_limit")) {
            rlqs_by_round.push(round_3(rlqs_over_no_limit(a.rate, none, rlqs)));
        }
    }
    // Microseconds to milliseconds, kept to the microsecond.
    let ms = |p: &Percentiles, q: f64| p.at(q).unwrap_or(0) as f64 / 1_000.0;
    let measured_s = (a.duration_s * a.rounds as u64) as f64;
    let modes: BTreeMap<&'static str, ModeSummary> = per_mode
        .iter()
        .map(|(mode, runs)| {
            let p: Percentiles = runs.latencies_us.iter().copied().collect();
            let p = &p;
            let summary = ModeSummary {
                requests_per_s: (runs.latencies_us.len() as f64 / measured_s).round(),
                p50_ms: ms(p, 0.50),
                p99_ms: ms(p, 0.99),
                p999_ms: ms(p, 0.999),
                not_200: runs.not_200,
                ready_ms_max: round_3(runs.ready_ms_max),
                cpu_us_per_request: CpuPerDecision::of_seconds(
                    runs.cpu_s.iter().map(|(c, s)| (*c, *s)),
                    runs.latencies_us.len(),
                ),
            };
            (*mode, summary)
        })
        .collect();
    let base_p99 = modes["no_limit"].p99_ms;
    let total_cpu = |m: &ModeSummary| m.cpu_us_per_request.iter().find(|c| c.component == "total").map(|c| c.cpu_us);
    let base_cpu = total_cpu(&modes["no_limit"]);
    let added_cpu = modes
        .iter()
        .filter(|(m, _)| **m != "no_limit")
        .filter_map(|(m, s)| Some((*m, round_3(total_cpu(s)? - base_cpu?))))
        .collect();
    let added: BTreeMap<&'static str, f64> =
        modes.iter().filter(|(m, _)| **m != "no_limit").map(|(m, s)| (*m, round_3(s.p99_ms - base_p99))).collect();
    let over_redis_pooled = |mode: &str| over_redis(added.get(mode).copied(), added.get("redis").copied());
    let (ratio, floor_ratio) = (over_redis_pooled("agent"), over_redis_pooled("floor"));
    // Paced: latency is what RLQS may add; closed loop: throughput.
    let measured = |m: &ModeSummary| Measured { requests: m.requests_per_s, p99_ms: m.p99_ms };
    let rlqs_over =
        modes.get("rlqs").map(|r| round_3(rlqs_over_no_limit(a.rate, measured(&modes["no_limit"]), measured(r))));
    let summary = Summary {
        target_met: ratio.map(|r| r <= 1.0 / 3.0),
        agent_over_redis_added_p99: ratio,
        added_p99_ms: added,
        added_cpu_us_per_request: added_cpu,
        modes,
        rlqs_over_no_limit: rlqs_over,
        rlqs_target_met: rlqs_over.map(|x| x <= 1.05),
        rlqs_over_no_limit_by_round: rlqs_by_round,
        agent_over_redis_added_p99_by_round: agent_by_round,
        floor_over_redis_added_p99: floor_ratio,
        floor_over_redis_added_p99_by_round: floor_by_round,
        clients: a.clients,
        rate: a.rate,
        rounds: a.rounds,
        duration_s: a.duration_s,
    };
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    Ok(ExitCode::SUCCESS)
}

/// A mode's added p99 over the Redis design's; none when Redis added nothing measurable (a short
/// or noisy run).
fn over_redis(added: Option<f64>, redis_added: Option<f64>) -> Option<f64> {
    let redis = redis_added.filter(|&r| r > 0.0)?;
    Some(round_3(added?.max(0.0) / redis))
}

/// What RLQS costs over no limit (above 1: it costs): paced, the ratio of the p99s; closed loop,
/// no limit's throughput over RLQS's.
fn rlqs_over_no_limit(rate: u64, no_limit: Measured, rlqs: Measured) -> f64 {
    if rate > 0 {
        rlqs.p99_ms / no_limit.p99_ms
    } else {
        no_limit.requests / rlqs.requests
    }
}

#[cfg(test)]
mod tests {
    use super::{rlqs_over_no_limit, Measured};

    #[test]
    fn rlqs_costs_more_than_1_when_it_is_slower_or_serves_fewer() {
        let none = Measured { requests: 1_000.0, p99_ms: 2.0 };
        let rlqs = Measured { requests: 800.0, p99_ms: 3.0 };
        assert_eq!(rlqs_over_no_limit(2_000, none, rlqs), 1.5, "paced: the p99s");
        assert_eq!(rlqs_over_no_limit(0, none, rlqs), 1.25, "closed loop: the throughputs");
    }
}
