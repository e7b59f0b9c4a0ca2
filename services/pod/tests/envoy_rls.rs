//! The agent as Envoy's rate limit service (RLS v3), against a real Envoy (`scripts/envoy`), a
//! real nats-server, coordinator and DC manager, and the strict upstream as judge: the shipped
//! `deploy/envoy` files, run on free ports.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::agent_process::AgentProcess;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_envoy::RlsConfig;
use leasehold_nats_harness::envoy::{envoy_binary, Envoy};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_pod::envoy::{read_rls_config, KeysClient, RateLimitServer};
use leasehold_pod::{Pod, PodSettings, PodStatus};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const WITHIN: Duration = Duration::from_secs(15);
pub(crate) const LIMIT: &str = "edge/generic_key_partner-api";

fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/envoy").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A coordinator defining `limits` (name, R/s, B; BKK's floor a quarter of R) and BKK's DC
/// manager, leading.
pub(crate) async fn control_plane(
    url: &str,
    limits: &[(&str, u64, u64)],
) -> (leasehold_coordinator::Handle, leasehold_dc_manager::Handle) {
    control_plane_with(url, limits, 2_000).await
}

/// [`control_plane`] with DC leases of `dc_ttl_ms`, and pod leases of half that.
pub(crate) async fn control_plane_with(
    url: &str,
    limits: &[(&str, u64, u64)],
    dc_ttl_ms: u64,
) -> (leasehold_coordinator::Handle, leasehold_dc_manager::Handle) {
    let defs = limits
        .iter()
        .map(|(name, rate, burst)| {
            let mut l = LimitConfig::new(name, Quota::per_s(*rate, *burst), &[("bkk", Quota::per_s(rate / 4, 0))]);
            l.renew_interval_ms = 200;
            l.dc_ttl_ms = dc_ttl_ms;
            LimitDef::from_config(&l)
        })
        .collect();
    if dc_ttl_ms == 2_000 {
        return crate::many_limits::control_plane(url, defs).await;
    }
    let coordinator = crate::many_limits::coordinator(url, defs).await;
    (coordinator, crate::many_limits::dc_manager_with(url, "bkk", dc_ttl_ms / 2).await)
}

/// A pod answering RLS for `config`, once every limit it names holds a lease with a rate.
pub(crate) async fn agent(url: &str, config: RlsConfig, keys: Option<KeysClient>) -> (Pod, RateLimitServer) {
    let settings =
        PodSettings { nats_url: url.into(), dc: "bkk".into(), report_interval_ms: 100, ..PodSettings::default() };
    let pod = Pod::start(wait::client(url, "pod").await, &settings);
    let limits: Vec<String> = config.limits().keys().cloned().collect();
    let server = RateLimitServer::new(pod.clone(), Arc::new(config), keys);
    for limit in limits {
        let mut status = pod.served(&limit).expect("started by the server").status();
        let what = format!("{limit} holds a lease with a rate");
        wait::until(&mut status, WITHIN, &what, |s: &PodStatus| {
            s.lease.as_ref().is_some_and(|l| l.quota.rate_milli_per_s > 0)
        })
        .await;
    }
    (pod, server)
}

/// The shipped bootstrap (`deploy/envoy/rls-bootstrap.yaml`) on the ports given: Envoy's ingress,
/// the upstream, the agent's RLS; the admin interface on a free port.
pub(crate) fn bootstrap(ingress: u16, upstream: u16, rls: u16) -> String {
    deploy("rls-bootstrap.yaml")
        .replace("port_value: 10000", &format!("port_value: {ingress}"))
        .replace("port_value: 8080", &format!("port_value: {upstream}"))
        .replace("port_value: 8081", &format!("port_value: {rls}"))
        .replace("port_value: 9901", "port_value: 0")
        // The shipped 250 ms is for a node that serves; this one also runs the whole test.
        .replace("timeout: 0.25s", "timeout: 2s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_enforces_the_leased_limit_with_429s_and_headers_and_denies_when_the_agent_is_gone() {
    let envoy_bin = envoy_binary().expect("an Envoy is needed");
    let nats = NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap();
    let url = nats.url();
    let (_c, _m) = control_plane(&url, &[(LIMIT, 20, 10)]).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut agent = AgentProcess::start(&url, "bkk", 0).await;
    let rls_port = agent.envoy_port();
    agent.wait_until_ready(&http, LIMIT).await;
    // The judge: at most R·1 s + B = 30 calls in any second; a call above is a 429 it counts.
    let upstream_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_port = upstream_listener.local_addr().unwrap().port();
    let judge = leasehold_mock_upstream::router(30, 1_000);
    tokio::spawn(async move { axum::serve(upstream_listener, judge).await });

    let (envoy, ingress) =
        Envoy::start_on_free_port(&envoy_bin, |ingress| bootstrap(ingress, upstream_port, rls_port), WITHIN)
            .await
            .expect("envoy starts");

    // About 100 calls/s for 3 s, five times the limit, through Envoy.
    let call = format!("http://127.0.0.1:{ingress}/call");
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let (mut ok, mut limited, mut other) = (0u64, 0u64, Vec::new());
    let (mut denied, mut admitted) = (None, None);
    while started.elapsed() < Duration::from_secs(3) {
        tick.tick().await;
        let r = http.post(&call).send().await.expect("envoy answers");
        match r.status().as_u16() {
            200 => {
                ok += 1;
                admitted.get_or_insert(r.headers().clone());
            }
            429 => {
                limited += 1;
                denied.get_or_insert(r.headers().clone());
            }
            s => other.push(s),
        }
    }
    let health = http.get(format!("http://127.0.0.1:{ingress}/health")).send().await.unwrap().status();
    let stats: serde_json::Value =
        http.get(format!("http://127.0.0.1:{upstream_port}/stats")).send().await.unwrap().json().await.unwrap();
    println!("through Envoy in 3 s: {ok} admitted, {limited} answered 429; the upstream: {stats}");
    assert!(other.is_empty(), "statuses other than 200 and 429: {other:?}; envoy: {:?}", envoy.log_tail());
    assert_eq!(stats["rejected"], 0, "the upstream refused a call: the limit was exceeded");
    assert_eq!(stats["admitted"], ok, "every call Envoy let through reached the upstream");
    // R·T + B = 70 at most; at least the floor's 5/s for 3 s.
    assert!((15..=70).contains(&ok), "{ok} admitted in 3 s at 20/s with a burst of 10");
    assert!(limited > ok, "offered five times the limit, only {limited} of the calls were limited");
    let denied = denied.expect("a 429");
    assert!(denied["retry-after"].to_str().unwrap().parse::<u64>().unwrap() >= 1, "{denied:?}");
    assert_eq!(denied["ratelimit-policy"], format!("\"{LIMIT}\";q=20;w=1"));
    assert!(denied["ratelimit"].to_str().unwrap().starts_with(&format!("\"{LIMIT}\";r=")), "{denied:?}");
    let admitted = admitted.expect("a 200");
    assert!(admitted.contains_key("ratelimit"), "an admitted answer carries RateLimit: {admitted:?}");
    assert!(!admitted.contains_key("retry-after"), "{admitted:?}");
    // Unlimited: the service answers (it has no /health: 404), the limit is not asked.
    assert_eq!(health, 404, "GET /health was not passed to the service");
    let over_limit = agent.metric(&http, "leasehold_agent_rls_requests_total{code=\"over_limit\"}").await;
    assert_eq!(over_limit, limited, "every 429 was the agent's OVER_LIMIT");
    let answered_ok = agent.metric(&http, "leasehold_agent_rls_requests_total{code=\"ok\"}").await;
    assert_eq!(answered_ok, ok + 1, "every 200 (and /health) was the agent's OK");

    // The agent gone: failure_mode_deny answers 500, and nothing more reaches the upstream.
    drop(agent);
    for _ in 0..3 {
        let status = http.post(&call).send().await.unwrap().status();
        assert_eq!(status, 500, "with the agent gone Envoy must deny");
    }
    let after: serde_json::Value =
        http.get(format!("http://127.0.0.1:{upstream_port}/stats")).send().await.unwrap().json().await.unwrap();
    assert_eq!(after["total"], stats["total"], "a call reached the upstream without the agent's answer");
}

/// A descriptor's entries (key, value) and its own `hits_addend`.
pub(crate) type Descriptor<'a> = (&'a [(&'a str, &'a str)], Option<u64>);

pub(crate) fn request(domain: &str, descriptors: &[Descriptor<'_>], hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors
            .iter()
            .map(|(entries, hits)| RateLimitDescriptor {
                entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
                hits_addend: hits.map(|value| UInt64Value { value }),
                ..Default::default()
            })
            .collect(),
        hits_addend,
    }
}

pub(crate) fn codes(r: &RateLimitResponse) -> (i32, Vec<i32>) {
    (r.overall_code, r.statuses.iter().map(|s| s.code).collect())
}

const RULES: &str = r#"
domain: d
descriptors:
  - key: k
    value: small
    rate_limit: { unit: second, requests_per_unit: 4, name: small }
  - key: k
    value: shadow
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 4 }
  - key: k
    value: wide
    rate_limit: { unit: minute, requests_per_unit: 600, replaces: [{ name: small }] }
  - key: k
    value: free
    rate_limit: { unlimited: true }
  - key: k
    value: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: k
    value: quota-blocked
    quota_mode: true
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: k
    value: quota-shadow
    quota_mode: true
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 0 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptors_are_answered_as_ratelimit_answers_them() {
    let nats = NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap();
    let url = nats.url();
    let limits = [("d/k_small", 4, 4), ("d/k_shadow", 4, 4), ("d/k_wide", 10, 600)];
    let (_c, _m) = control_plane(&url, &limits).await;
    let (pod, server) = agent(&url, RlsConfig::parse([("rules.yaml", RULES)]).unwrap(), None).await;
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let small: &[(&str, &str)] = &[("k", "small")];

    // Bad requests, as ratelimit: INVALID_ARGUMENT.
    for bad in [request("", &[(small, None)], 0), request("d", &[], 0)] {
        assert_eq!(server.decide(&bad).await.expect_err("invalid").code(), tonic::Code::InvalidArgument);
    }
    // Unknown domain or descriptor, unlimited: OK, nothing counted.
    let free: &[(&str, &str)] = &[("k", "free")];
    for r in [request("other", &[(small, None)], 0), request("d", &[(&[("k", "nope")], None), (free, None)], 0)] {
        let a = server.decide(&r).await.unwrap();
        assert_eq!(codes(&a), (ok, vec![ok; r.descriptors.len()]));
        assert!(a.statuses.iter().all(|s| s.current_limit.is_none()), "{a:?}");
        // As ratelimit: no match has no room left to report, `unlimited` all of it.
        let remaining: Vec<u32> = a.statuses.iter().map(|s| s.limit_remaining).collect();
        assert_eq!(remaining, if r.descriptors.len() == 2 { vec![0, u32::MAX] } else { vec![0] }, "{a:?}");
    }
    // Hits 0 only looks; more hits than the lease's burst is over at once, and takes nothing.
    // (A new lease's bucket starts empty: first wait for a first token in each.)
    for limit in ["d/k_small", "d/k_wide"] {
        let bucket = pod.served(limit).unwrap().bucket();
        let what = format!("a first token in {limit}");
        wait::poll(WITHIN, Duration::from_millis(20), &what, async || match bucket.retry_after(1, pod.now_ns()) {
            Ok(Some(0)) => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .await;
    }
    let bucket = pod.served("d/k_small").unwrap().bucket();
    let lease = bucket.view(pod.now_ns()).quota;
    let over_burst = lease.burst_milli / 1_000 + 1;
    let looked = server.decide(&request("d", &[(small, Some(0))], 0)).await.unwrap();
    assert_eq!(codes(&looked), (ok, vec![ok]), "{looked:?}");
    let before = looked.statuses[0].limit_remaining;
    let too_many = server.decide(&request("d", &[(small, Some(over_burst))], 0)).await.unwrap();
    assert_eq!(codes(&too_many), (over, vec![over]), "{too_many:?}");
    // The request's hits_addend spends the bucket; the answer names the configured limit.
    let mut spent = None;
    for _ in 0..=before {
        let a = server.decide(&request("d", &[(small, None)], 2)).await.unwrap();
        let limit = a.statuses[0].current_limit.clone().expect("current_limit");
        assert_eq!((limit.name.as_str(), limit.requests_per_unit, limit.unit), ("small", 4, 1));
        if a.overall_code == over {
            spent = Some(a);
            break;
        }
    }
    let spent = spent.expect("the small limit denied within its burst");
    let headers: Vec<(&str, &str)> =
        spent.response_headers_to_add.iter().map(|h| (h.key.as_str(), h.value.as_str())).collect();
    assert!(headers.contains(&("RateLimit-Policy", "\"d/k_small\";q=4;w=1")), "{headers:?}");
    assert!(headers.iter().any(|(k, v)| *k == "Retry-After" && v.parse::<u64>().is_ok_and(|s| s >= 1)), "{headers:?}");
    assert!(spent.statuses[0].duration_until_reset.is_some());

    // A refund (negative hits) on the spent limit: OK, and it gives nothing back.
    let mut refund = request("d", &[(small, Some(3))], 0);
    refund.descriptors[0].is_negative_hits = true;
    let before_milli = bucket.view(pod.now_ns()).balance_milli;
    assert_eq!(codes(&server.decide(&refund).await.unwrap()), (ok, vec![ok]));
    let after_milli = bucket.view(pod.now_ns()).balance_milli;
    assert!(after_milli < before_milli + 1_000, "a refund gave tokens back: {before_milli} → {after_milli}");

    // A per-request `limit` override: decided by the configured limit it matches (`small`,
    // spent); matching none, refused: no lease stands behind it.
    let with_override = |entries: &'static [(&'static str, &'static str)]| {
        let mut r = request("d", &[(entries, Some(over_burst))], 0);
        r.descriptors[0].limit = Some(Default::default());
        r
    };
    assert_eq!(codes(&server.decide(&with_override(&[("k", "small")])).await.unwrap()), (over, vec![over]));
    let refused = server.decide(&with_override(&[("k", "nope")])).await.unwrap();
    assert_eq!(codes(&refused), (over, vec![over]), "{refused:?}");
    assert_eq!(server.counters.overrides_refused.load(Relaxed), 1);

    // Shadow mode: decided, counted, never OVER_LIMIT.
    let shadow: &[(&str, &str)] = &[("k", "shadow")];
    for _ in 0..20 {
        assert_eq!(server.decide(&request("d", &[(shadow, None)], 0)).await.unwrap().overall_code, ok);
    }
    assert!(server.counters.shadow_denials.load(Relaxed) > 0, "the shadow limit never denied in 20 calls at 4/s");

    // `replaces`: with `wide` matched, `small` is not asked (hits it could never take: OK).
    let wide: &[(&str, &str)] = &[("k", "wide")];
    let both = server.decide(&request("d", &[(small, Some(over_burst)), (wide, None)], 0)).await.unwrap();
    assert_eq!(codes(&both), (ok, vec![ok, ok]), "{both:?}");
    assert!(both.statuses[0].current_limit.is_none(), "the replaced limit was asked: {both:?}");
    // Without `wide`, `small` is asked; two descriptors, one over: the request is over.
    let still = server.decide(&request("d", &[(small, Some(over_burst)), (free, None)], 0)).await.unwrap();
    assert_eq!(codes(&still), (over, vec![over, ok]), "{still:?}");

    // `requests_per_unit: 0`: every request over, with no lease behind it.
    let blocked: &[(&str, &str)] = &[("k", "blocked")];
    for hits in [None, Some(0), Some(1)] {
        let a = server.decide(&request("d", &[(blocked, hits)], 0)).await.unwrap();
        assert_eq!(codes(&a), (over, vec![over]), "{a:?}");
    }
    // `quota_mode`: over only when every quota descriptor is (one over, one passing in shadow).
    let quota_blocked: &[(&str, &str)] = &[("k", "quota-blocked")];
    let quota_shadow: &[(&str, &str)] = &[("k", "quota-shadow")];
    let some = server.decide(&request("d", &[(quota_blocked, None), (quota_shadow, None)], 0)).await.unwrap();
    assert_eq!(codes(&some), (ok, vec![over, ok]), "{some:?}");
    let all = server.decide(&request("d", &[(quota_blocked, None), (free, None)], 0)).await.unwrap();
    assert_eq!(codes(&all), (over, vec![over, ok]), "{all:?}");
}

#[test]
fn the_shipped_ratelimit_config_and_a_directory_of_them_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/envoy");
    let config = read_rls_config(&dir.join("ratelimit.yaml"), false).expect("the shipped config");
    assert_eq!(config.limits().keys().collect::<Vec<_>>(), [LIMIT]);
    // The directory holds Envoy's and Istio's files too, no ratelimit configs: the first in name
    // order is named in the error.
    let e = read_rls_config(&dir, false).expect_err("the bootstrap is not a ratelimit config").to_string();
    assert!(e.contains("istio-envoyfilter.yaml") && e.contains("config error, unknown key"), "{e}");
}
