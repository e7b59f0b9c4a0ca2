//! Per-value descriptors (a limit under a bare key: per address, per user) answered by the
//! agent's RLS server through a real `leasehold keys` instance over HTTP, on real leases (a real
//! nats-server, coordinator and DC manager for the agent's pod).

use crate::envoy_rls::{agent, codes, request};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use leasehold_envoy::RlsConfig;
use leasehold_nats_harness::free_port;
use leasehold_nats_harness::{binaries, NatsServer};
use leasehold_pod::envoy::{KeysClient, RateLimitServer};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

const PER_VALUE: &str = r#"
domain: d
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    value: 10.9.9.9
    rate_limit: { unlimited: true }
"#;

/// A standalone `leasehold keys` instance that takes the tier from the gateway header
/// `x-leasehold-tier` (unless `trusting_the_header` is false), with `tiers` (name, limit per
/// minute) besides its default (20 a minute).
async fn keys_instance(tiers: &[(&str, u64)], trusting_the_header: bool) -> String {
    use leasehold_per_key::{LimitSpec, Tiers};
    let mut t = Tiers::default();
    for (name, per_minute) in tiers {
        t.tiers.insert((*name).into(), LimitSpec::sliding(*per_minute, 60_000));
    }
    let limiter = leasehold_keys::KeyLimiter::standalone(t, 1_000).unwrap();
    let trust = leasehold_keys::access::Trust {
        tier_header: trusting_the_header.then(|| axum::http::HeaderName::from_static("x-leasehold-tier")),
        ..Default::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = leasehold_keys::http::router_with(limiter, trust, Default::default());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_value_descriptors_are_asked_of_the_per_key_limiter_and_denied_when_it_cannot_answer() {
    let nats = NatsServer::start(&binaries().expect("a nats-server is needed").remove(0)).unwrap();
    let url = nats.url();
    let config = RlsConfig::parse([("per-value.yaml", PER_VALUE)]).unwrap();
    assert_eq!(config.tiers().keys().collect::<Vec<_>>(), ["d/remote_address"]);
    let keys_url = keys_instance(&[("d/remote_address", 3)], true).await;
    let keys = KeysClient::new(&keys_url, "x-leasehold-tier", Duration::from_secs(2)).unwrap();
    let (_pod, server) = agent(&url, config, Some(keys)).await;
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let from = |address: &'static str| request("d", &[(&[("remote_address", address)][..], None)], 0);

    // Each address has its own 3 a minute; the fourth is over, with Retry-After.
    for left in [2, 1, 0] {
        let a = server.decide(&from("10.0.0.1")).await.unwrap();
        assert_eq!(codes(&a), (ok, vec![ok]), "{a:?}");
        assert_eq!(a.statuses[0].limit_remaining, left);
        let limit = a.statuses[0].current_limit.clone().expect("current_limit");
        assert_eq!((limit.requests_per_unit, limit.unit), (3, 2));
    }
    let fourth = server.decide(&from("10.0.0.1")).await.unwrap();
    assert_eq!(codes(&fourth), (over, vec![over]), "{fourth:?}");
    let retry = fourth.response_headers_to_add.iter().find(|h| h.key == "Retry-After").expect("Retry-After");
    assert!(retry.value.parse::<u64>().is_ok_and(|s| (1..=60).contains(&s)), "{retry:?}");
    assert_eq!(codes(&server.decide(&from("10.0.0.2")).await.unwrap()), (ok, vec![ok]), "another address");
    // Hits 0 only looks (GET /v1/keys/{key}, the key's '/' escaped in the path): over for the
    // spent address, OK for another, and neither is charged.
    let look = |address: &'static str| request("d", &[(&[("remote_address", address)][..], Some(0))], 0);
    assert_eq!(codes(&server.decide(&look("10.0.0.1")).await.unwrap()), (over, vec![over]));
    for _ in 0..3 {
        assert_eq!(codes(&server.decide(&look("10.0.0.4")).await.unwrap()), (ok, vec![ok]));
    }
    let after_looks = server.decide(&from("10.0.0.4")).await.unwrap();
    assert_eq!((after_looks.statuses[0].code, after_looks.statuses[0].limit_remaining), (ok, 2), "looks took hits");
    // A fixed value under the bare key is tried first: unlimited, not asked.
    for _ in 0..5 {
        assert_eq!(codes(&server.decide(&from("10.9.9.9")).await.unwrap()), (ok, vec![ok]));
    }
    assert_eq!(server.counters.keys_unanswered.load(Relaxed), 0);

    // The per-key limiter without the tier, deciding under its default tier (it does not take
    // the header), under other numbers than the configuration's, or unreachable: denied, counted.
    let no_tier = keys_instance(&[], true).await;
    let header_not_taken = keys_instance(&[("d/remote_address", 3)], false).await;
    let other_numbers = keys_instance(&[("d/remote_address", 30)], true).await;
    let unreachable = format!("http://127.0.0.1:{}", free_port().unwrap());
    for base in [no_tier, header_not_taken, other_numbers, unreachable] {
        let keys = KeysClient::new(&base, "x-leasehold-tier", Duration::from_secs(2)).unwrap();
        let config = RlsConfig::parse([("per-value.yaml", PER_VALUE)]).unwrap();
        let server = RateLimitServer::new(_pod.clone(), Arc::new(config), Some(keys));
        let a = server.decide(&from("10.0.0.3")).await.unwrap();
        assert_eq!(codes(&a), (over, vec![over]), "{base}: {a:?}");
        assert_eq!(server.counters.keys_unanswered.load(Relaxed), 1, "{base}");
    }
}
