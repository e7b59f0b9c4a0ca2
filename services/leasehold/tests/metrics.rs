//! Every service serves Prometheus metrics, including the five the partner API design asks for
//! and the ledger's books.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::support::one_dc::{self, free_addr};
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::quota::Quota;
use leasehold_nats::connect::connect_until;
use leasehold_nats_harness::{binaries, NatsServer};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Every series a Prometheus text body exposes: `name type label,label` (labels in order), sorted.
/// Dashboards, alerts and the docs name these: any change of a name, type or label shows here.
fn schema(body: &str) -> BTreeSet<String> {
    let types: std::collections::BTreeMap<&str, &str> =
        body.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split_once(' ')).collect();
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            let name = &l[..end];
            let labels: Vec<&str> = match l[end..].strip_prefix('{') {
                Some(rest) => rest.split("\",").filter_map(|kv| kv.split_once('=')).map(|(k, _)| k).collect(),
                None => Vec::new(),
            };
            format!("{name} {} {}", types.get(name).copied().unwrap_or("untyped"), labels.join(","))
        })
        .collect()
}

/// The same, from a list of `(names, type, labels)` rows.
fn expected(rows: &[(&[&str], &str, &str)]) -> BTreeSet<String> {
    rows.iter().flat_map(|(names, kind, labels)| names.iter().map(move |n| format!("{n} {kind} {labels}"))).collect()
}

/// docs/PROTOCOL.md's metrics table names every series by its full name.
fn documented(series: &BTreeSet<String>) {
    let protocol = include_str!("../../../docs/PROTOCOL.md");
    let table = &protocol[protocol.find("## Metrics").expect("a metrics section")..];
    for line in series {
        let name = line.split(' ').next().unwrap();
        assert!(table.contains(&format!("`{name}`")), "docs/PROTOCOL.md's metrics table does not name {name}");
    }
}

/// The value of the first sample of `series` in a Prometheus text body.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find(|l| l.starts_with(series))?.rsplit(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_dc_manager_agent_and_upstream_serve_metrics() {
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let client = || connect_until(&url, "t", Instant::now() + Duration::from_secs(10));
    let (coord_addr, dc_addr) = (free_addr(), free_addr());
    let mut limit = LimitConfig::new("api", Quota::per_s(100, 10), &[("bkk", Quota::per_s(10, 0))]);
    limit.renew_interval_ms = 200;
    limit.dc_ttl_ms = 2_000;
    let coord = leasehold_coordinator::settings::Settings {
        nats_url: url.clone(),
        leader_ttl_ms: 1_000,
        http_listen: Some(coord_addr.clone()),
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
        ..Default::default()
    };
    let _c = leasehold_coordinator::spawn(client().await.unwrap(), coord);
    let _m = leasehold_dc_manager::spawn(client().await.unwrap(), one_dc::dc_manager(&url, 1_000, &dc_addr));
    let pod = leasehold_pod::Pod::start(client().await.unwrap(), &one_dc::pod());
    let (pod_l, up_l) = (
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let (pod_addr, up_addr) = (pod_l.local_addr().unwrap(), up_l.local_addr().unwrap());
    let pod_app = leasehold_pod::http::router(pod.clone());
    tokio::spawn(async move { axum_serve(pod_l, pod_app).await });
    tokio::spawn(async move { axum_serve(up_l, leasehold_mock_upstream::router(1_000, 1_000)).await });

    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let get = |addr: String| {
        let http = http.clone();
        async move {
            match http.get(format!("http://{addr}/metrics")).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            }
        }
    };
    // Until the pod holds a lease cut from a DC lease (everything has then reported once).
    let deadline = Instant::now() + Duration::from_secs(15);
    let (c, d, p) = loop {
        let (c, d, p) = (get(coord_addr.clone()).await, get(dc_addr.clone()).await, get(pod_addr.to_string()).await);
        let ready = sample(&c, "leasehold_ledger_outstanding_rate_per_s").is_some_and(|v| v > 0.0)
            && sample(&d, "leasehold_dc_lease_rate_per_s").is_some_and(|v| v > 0.0)
            && sample(&p, "leasehold_pod_lease_rate_per_s").is_some_and(|v| v > 0.0);
        if ready {
            break (c, d, p);
        }
        assert!(Instant::now() < deadline, "metrics never showed a lease:\n{c}\n{d}\n{p}");
        let _ = tokio::time::timeout(Duration::from_millis(200), pod.limiter("api").unwrap().status().changed()).await;
    };
    // The ledger's books: Σ outstanding never above the limit.
    let (out, lim) = (
        sample(&c, "leasehold_ledger_outstanding_rate_per_s").unwrap(),
        sample(&c, "leasehold_ledger_limit_rate_per_s").unwrap(),
    );
    assert!(out <= lim && lim == 100.0, "outstanding {out} vs limit {lim}");
    assert_eq!(sample(&c, "leasehold_coordinator_leading"), Some(1.0));
    // The five the partner API design asks for: allocated vs used per DC, renewal latency and
    // failures, rejections per pod, time since renewal per pod, and total QPS to the upstream.
    for series in
        ["leasehold_dc_allocated_rate_per_s", "leasehold_dc_used_rate_per_s", "leasehold_dc_lease_refusals_total"]
    {
        assert!(sample(&d, series).is_some(), "{series} missing:\n{d}");
    }
    for series in [
        "leasehold_pod_renewal_latency_ms",
        "leasehold_pod_rejected_total",
        "leasehold_pod_seconds_since_renewal",
        "leasehold_pod_leases_refused_total",
    ] {
        assert!(sample(&p, series).is_some(), "{series} missing:\n{p}");
    }
    assert!(sample(&p, "leasehold_pod_seconds_since_renewal").unwrap() < 2.0);
    http.post(format!("http://{up_addr}/call")).send().await.unwrap();
    let u = get(up_addr.to_string()).await;
    assert_eq!(sample(&u, "leasehold_upstream_calls_total"), Some(1.0), "{u}");

    // Every name, type and label exactly as the docs and dashboards know them.
    let coordinator = expected(&[
        (
            &[
                "leasehold_coordinator_leading",
                "leasehold_coordinator_epoch",
                "leasehold_coordinator_limits_defined",
                "leasehold_coordinator_definitions_refused",
                "leasehold_coordinator_ledger_group_bytes_max",
            ],
            "gauge",
            "",
        ),
        (
            &[
                "leasehold_coordinator_definition_changes_total",
                "leasehold_coordinator_takeovers_total",
                "leasehold_coordinator_ledger_writes_total",
                "leasehold_coordinator_ledger_writes_unresolved_total",
                "leasehold_coordinator_ledger_records_written_total",
                "leasehold_coordinator_ledger_groups_oversized_total",
                "leasehold_coordinator_step_downs_total",
                "leasehold_coordinator_reports_malformed_total",
                "leasehold_coordinator_reports_ignored_total",
            ],
            "counter",
            "",
        ),
        (
            &[
                "leasehold_ledger_outstanding_rate_per_s",
                "leasehold_ledger_limit_rate_per_s",
                "leasehold_ledger_outstanding_burst",
                "leasehold_ledger_limit_burst",
                "leasehold_ledger_dc_leases",
            ],
            "gauge",
            "limit",
        ),
    ]);
    assert_eq!(schema(&c), coordinator, "{c}");
    let dc_manager = expected(&[
        (
            &[
                "leasehold_dc_leading",
                "leasehold_dc_ledger_read",
                "leasehold_dc_allocated_rate_per_s",
                "leasehold_dc_used_rate_per_s",
                "leasehold_dc_lease_rate_per_s",
                "leasehold_dc_seconds_since_lease",
                "leasehold_dc_pods_eligible",
                "leasehold_dc_pods_without_token",
                "leasehold_dc_report_read_lag_seconds",
            ],
            "gauge",
            "limit,dc",
        ),
        (
            &[
                "leasehold_dc_pod_leases_issued_total",
                "leasehold_dc_lease_refusals_total",
                "leasehold_dc_messages_malformed_total",
                "leasehold_dc_report_batches_shed_total",
                "leasehold_dc_report_batches_read_by_serde_total",
                "leasehold_dc_reports_stale_total",
                "leasehold_dc_publish_failures_total",
                "leasehold_dc_leases_accepted_total",
                "leasehold_dc_lease_age_seconds_total",
            ],
            "counter",
            "limit,dc",
        ),
    ]);
    assert_eq!(schema(&d), dc_manager, "{d}");
    let agent = expected(&[
        (
            &[
                "leasehold_pod_requests_total",
                "leasehold_pod_admitted_total",
                "leasehold_pod_rejected_total",
                "leasehold_pod_leases_refused_total",
                "leasehold_pod_upstream_errors_total",
                "leasehold_pod_upstream_429_total",
            ],
            "counter",
            "pod,limit",
        ),
        (
            &[
                "leasehold_pod_lease_rate_per_s",
                "leasehold_pod_seconds_since_renewal",
                "leasehold_pod_renewal_latency_ms",
                "leasehold_pod_queued",
            ],
            "gauge",
            "pod,limit",
        ),
    ]);
    assert_eq!(schema(&p), agent, "{p}");
    let upstream = expected(&[
        (&["leasehold_upstream_calls_total", "leasehold_upstream_rejected_total"], "counter", ""),
        (&["leasehold_upstream_max_window", "leasehold_upstream_limit"], "gauge", ""),
    ]);
    assert_eq!(schema(&u), upstream, "{u}");
    [&coordinator, &dc_manager, &agent, &upstream].into_iter().for_each(documented);

    // `/v1/status`: the fields the docs name.
    let status = |addr: String| {
        let http = http.clone();
        async move {
            let v: serde_json::Value =
                http.get(format!("http://{addr}/v1/status")).send().await.unwrap().json().await.unwrap();
            v
        }
    };
    let fields = |v: &serde_json::Value| {
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys.join(" ")
    };
    let c = status(coord_addr).await;
    let expected =
        "definitions definitions_refused epoch groups_oversized leading ledger_group_bytes_max ledger_writes ledger_writes_unresolved limits records_written reports_malformed step_downs takeovers";
    assert_eq!(fields(&c), expected, "{c}");
    assert_eq!(fields(&c["limits"]["api"]), "dc_leases limit outstanding retired", "{c}");
    assert_eq!(c["limits"]["api"]["limit"]["rate_milli_per_s"], 100_000, "{c}");
    let d = status(dc_addr).await;
    assert_eq!(
        fields(&d),
        "budget_rate_per_s dc dc_lease_age_ms_mean dc_lease_rate_per_s epoch instance leading ledger_read limit limits messages_malformed \
         pod_leases_issued pods_eligible pods_known report_batches_shed report_read_lag_ms takeovers used_rate_per_s",
        "{d}"
    );
    assert_eq!(
        fields(&d["limits"]["api"]),
        "budget_rate_per_s dc_lease_rate_per_s fail_mode pods_eligible pods_known pods_without_token seconds_since_dc_lease split \
         used_rate_per_s",
        "{d}"
    );
    assert_eq!((d["limit"].as_str(), d["dc"].as_str(), d["leading"].as_bool()), (Some("api"), Some("bkk"), Some(true)));
    assert_eq!(d["limits"]["api"]["split"], "equal", "{d}");
    assert_eq!(d["limits"]["api"]["fail_mode"]["mode"], "strict", "{d}");
    let p = status(pod_addr.to_string()).await;
    assert_eq!(fields(&p), "default_limit limits pod", "{p}");
    assert_eq!(p["default_limit"], "api", "{p}");
    let api = "drained idle_releases lease leases_applied leases_refused limit messages_malformed pod queued \
               renewal_latency_ms serving totals";
    assert_eq!(fields(&p["limits"]["api"]), api, "{p}");
    assert_eq!(fields(&p["limits"]["api"]["lease"]), "expires_in_ms issuer quota version", "{p}");
    // One limit alone: the same fields.
    let url = format!("http://{pod_addr}/v1/status?limit=api");
    let one: serde_json::Value = http.get(url).send().await.unwrap().json().await.unwrap();
    assert_eq!(fields(&one), api, "{one}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_limiter_serves_its_metrics_under_their_documented_names() {
    use leasehold_per_key::{LimitSpec, Tiers};
    let tiers = Tiers {
        default_tier: "free".into(),
        tiers: [("free".to_string(), LimitSpec::sliding(1, 60_000))].into(),
        overrides: Default::default(),
        assignments: Default::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = leasehold_keys::http::router(leasehold_keys::KeyLimiter::standalone(tiers, 100).unwrap());
    tokio::spawn(async move { axum_serve(listener, app).await });
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    for expected_status in [200, 429] {
        let r = http.post(format!("http://{addr}/v1/keys/k")).send().await.unwrap();
        assert_eq!(r.status(), expected_status);
    }
    let body = http.get(format!("http://{addr}/metrics")).send().await.unwrap().text().await.unwrap();
    let keys = expected(&[
        (
            &[
                "leasehold_keys_allowed_total",
                "leasehold_keys_denied_total",
                "leasehold_keys_shed_total",
                "leasehold_keys_unavailable_total",
            ],
            "counter",
            "",
        ),
        (&["leasehold_keys_tracked", "leasehold_keys_shards_served", "leasehold_keys_hot_keys"], "gauge", ""),
    ]);
    assert_eq!(schema(&body), keys, "{body}");
    documented(&keys);
    // Counts as whole numbers: tools parse `leasehold_keys_shards_served` as an integer.
    for (series, value) in [("leasehold_keys_allowed_total", 1), ("leasehold_keys_denied_total", 1)] {
        assert!(body.lines().any(|l| l == format!("{series} {value}")), "{series} {value} missing:\n{body}");
    }
    assert!(body.lines().any(|l| l == "leasehold_keys_tracked 1"), "{body}");
}

async fn axum_serve(l: tokio::net::TcpListener, app: axum::Router) {
    let _ = axum::serve(l, app).await;
}
