//! One DC manager process serves every limit of its DC: two limits defined at the coordinator,
//! one manager without a `limit` setting, a pod for each limit; each pod gets its own limit's
//! budget, and the manager's status and metrics show both. A manager that names one limit serves
//! only that one.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_coordinator::settings::Settings as CoordSettings;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::dc_manager::DcManagerConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_dc_manager::manager::Status;
use leasehold_dc_manager::settings::Settings;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use leasehold_pod::{Pod, PodSettings, PodStatus};
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(15);

fn limit(name: &str, rate_per_s: u64) -> LimitDef {
    let mut l = LimitConfig::new(name, Quota::per_s(rate_per_s, 10), &[("bkk", Quota::per_s(5, 0))]);
    l.renew_interval_ms = 200;
    l.dc_ttl_ms = 2_000;
    LimitDef::from_config(&l)
}

/// A coordinator seeding `limits` (it runs until the handle is dropped).
async fn coordinator(url: &str, limits: Vec<LimitDef>) -> leasehold_coordinator::Handle {
    let settings = CoordSettings {
        nats_url: url.into(),
        nats_creds_file: None,
        id: Some("coord".into()),
        leader_ttl_ms: 1_000,
        replicas: 1,
        http_listen: None,
        limits,
    };
    leasehold_coordinator::spawn(wait::client(url, "c").await, settings)
}

fn manager(url: &str, id: &str, serves: &str) -> Settings {
    let mut m = DcManagerConfig::new(serves, "bkk", "");
    m.pod_ttl_ms = 1_000;
    m.renew_interval_ms = 200;
    m.heartbeat_timeout_ms = 400;
    Settings {
        nats_url: url.into(),
        id: Some(id.into()),
        leader_ttl_ms: 1_000,
        report_interval_ms: 100,
        manager: m,
        ..Settings::default()
    }
}

fn pod(url: &str, limit: &str, id: &str) -> PodSettings {
    PodSettings {
        nats_url: url.into(),
        limit: Some(limit.into()),
        dc: "bkk".into(),
        pod_id: Some(id.into()),
        report_interval_ms: 100,
        ..PodSettings::default()
    }
}

fn rate(s: &PodStatus) -> f64 {
    s.lease.as_ref().map_or(0.0, |l| l.quota.rate_per_s())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_manager_serves_every_limit_of_its_dc() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let (url, v) = (server.url(), server.version.clone());
        let _coord = coordinator(&url, vec![limit("api", 100), limit("second", 40)]).await;
        let mut m = leasehold_dc_manager::spawn(wait::client(&url, "m").await, manager(&url, "m1", ""));
        wait::until(&mut m.status, WITHIN, "the manager leads", |s: &Status| s.leading).await;
        let a = Pod::start(wait::client(&url, "a").await, &pod(&url, "api", "pod-a"));
        let b = Pod::start(wait::client(&url, "b").await, &pod(&url, "second", "pod-b"));
        let (mut a_rx, mut b_rx) = (a.limiter("api").unwrap().status(), b.limiter("second").unwrap().status());
        wait::until(&mut a_rx, WITHIN, "A holds most of api", |s| rate(s) >= 90.0).await;
        wait::until(&mut b_rx, WITHIN, "B holds most of second", |s| rate(s) >= 36.0).await;
        assert!(rate(&a_rx.borrow()) <= 100.0 && rate(&b_rx.borrow()) <= 40.0, "{v}: above a limit");
        let s = wait::until(&mut m.status, WITHIN, "both limits served", |s: &Status| {
            s.limits.get("api").is_some_and(|l| l.pods_eligible == 1)
                && s.limits.get("second").is_some_and(|l| l.pods_eligible == 1)
        })
        .await;
        assert_eq!(s.takeovers, 1, "{v}: one term serves both");
        assert!(s.limits["api"].budget_rate_per_s <= 100.0 && s.limits["second"].budget_rate_per_s <= 40.0, "{v}");
        m.stop().await.unwrap();

        // A manager that names one limit serves only that one: B's lease runs out, A keeps its.
        let mut only = leasehold_dc_manager::spawn(wait::client(&url, "m").await, manager(&url, "m2", "api"));
        let s = wait::until(&mut only.status, WITHIN, "m2 leads and serves api", |s: &Status| {
            s.leading && s.limits.get("api").is_some_and(|l| l.pods_eligible == 1)
        })
        .await;
        assert!(!s.limits.contains_key("second"), "{v}: {:?}", s.limits.keys());
        let under_m2 = |s: &PodStatus| s.lease.as_ref().is_some_and(|l| l.issuer.starts_with("m2"));
        let a_now = wait::until(&mut a_rx, WITHIN, "A renewed under m2", |s| rate(s) >= 90.0 && under_m2(s)).await;
        let b_applied = b_rx.borrow().leases_applied;
        let more = a_now.leases_applied + 5;
        wait::until(&mut a_rx, WITHIN, "A renewed five more times", |s| s.leases_applied >= more).await;
        let b_now = b_rx.borrow().clone();
        assert_eq!(b_now.leases_applied, b_applied, "{v}: B got a lease from a manager that does not serve its limit");
        assert!(!under_m2(&b_now), "{v}");
        only.stop().await.unwrap();
    }
}

/// A limit's definition names its split and fail mode; the DC manager runs each limit on its
/// own, follows a change live, and runs a limit whose definition says nothing on its settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_runs_on_its_definition_s_split_and_fail_mode_followed_live() {
    use leasehold_core::dc_manager::{FailMode, SplitMode};
    use leasehold_core::limits::{FailModeName, Rate};
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let mut second = limit("second", 40);
    second.split = Some(SplitMode::Weighted);
    second.fail_mode = Some(FailModeName::BestEffort);
    second.dcs[0].emergency = Some(Rate::parse("3/s").unwrap());
    let _coord = coordinator(&url, vec![limit("api", 100), second.clone()]).await;
    let mut m = leasehold_dc_manager::spawn(wait::client(&url, "m").await, manager(&url, "m1", ""));
    let best_effort = FailMode::BestEffort { emergency: Quota::per_s(3, 0) };
    let s = wait::until(&mut m.status, WITHIN, "both limits served, second on its rules", |s: &Status| {
        s.limits.contains_key("api") && s.limits.get("second").is_some_and(|l| l.fail_mode == best_effort)
    })
    .await;
    assert_eq!(s.limits["second"].split, SplitMode::Weighted);
    assert_eq!(
        (s.limits["api"].split, s.limits["api"].fail_mode),
        (SplitMode::Equal, FailMode::Strict),
        "own settings"
    );

    // `leasehold limits put` of the same limit without the rules: back to the manager's own.
    let store =
        leasehold_nats::limits_store::open(&leasehold_nats::connect::jetstream(wait::client(&url, "p").await), 1)
            .await
            .unwrap();
    let stored = leasehold_nats::limits_store::get(&store, "second").await.unwrap().expect("seeded");
    let plain = limit("second", 40);
    let put = leasehold_nats::limits_store::put(&store, &plain, Some(stored.revision)).await.unwrap();
    assert!(matches!(put, leasehold_nats::kv::CasOutcome::Written { .. }), "{put:?}");
    wait::until(&mut m.status, WITHIN, "second back on the manager's own rules", |s: &Status| {
        s.limits.get("second").is_some_and(|l| l.fail_mode == FailMode::Strict && l.split == SplitMode::Equal)
    })
    .await;
    m.stop().await.unwrap();
}
