//! `leasehold inspect` against a real nats-server with a real coordinator writing the ledger.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use bytes::Bytes;
use leasehold_coordinator::settings::Settings;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{encode, DcReport};
use leasehold_nats::connect::connect_until;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::process::Command;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_leader_and_the_dc_leases() {
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut limit = LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::per_s(50, 0))]);
    limit.renew_interval_ms = 250;
    let settings = Settings {
        nats_url: url.clone(),
        id: Some("coord-x".into()),
        leader_ttl_ms: 1_500,
        replicas: 1,
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
        ..Settings::default()
    };
    let mut coord = leasehold_coordinator::spawn(connect_until(&url, "c", deadline).await.unwrap(), settings);
    tokio::time::timeout(Duration::from_secs(10), coord.status.wait_for(|s| s.leading)).await.unwrap().unwrap();
    let publisher = connect_until(&url, "p", deadline).await.unwrap();
    let report = DcReport { pods_healthy: 2, ..DcReport::new("api", "bkk", "bkk-mgr", 1, 1, Quota::per_s(300, 0)) };
    let batch = leasehold_core::wire::DcReports::new("bkk", vec![report]);
    publisher.publish("lh.dc.bkk.report", Bytes::from(encode(&batch))).await.unwrap();
    publisher.flush().await.unwrap();

    // Inspect until the lease shows (the coordinator writes on its next tick), bounded.
    let inspect = |json: bool| {
        let mut args = vec!["inspect", "--nats-url", &url];
        if json {
            args.push("--json");
        }
        Command::new(env!("CARGO_BIN_EXE_leasehold")).args(&args).output().unwrap()
    };
    let v = loop {
        let out = inspect(true);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["ledgers"]["api"]["leases"].as_array().is_some_and(|l| l.iter().any(|l| l["dc"] == "bkk")) {
            break v;
        }
        assert!(Instant::now() < deadline, "no bkk lease within the deadline: {v}");
        let _ = tokio::time::timeout(Duration::from_secs(1), coord.status.changed()).await;
    };
    assert_eq!(v["coordinator_leader"], "coord-x");
    assert_eq!(v["ledgers"]["api"]["writer"], "coord-x");
    let text = String::from_utf8(inspect(false).stdout).unwrap();
    assert!(text.contains("coordinator leader: coord-x") && text.contains("dc bkk"), "{text}");

    // A DC manager and a pod: inspect names the DC's leader and hears the pod.
    let mut m = leasehold_core::dc_manager::DcManagerConfig::new("api", "bkk", "");
    m.renew_interval_ms = 250;
    let dc = leasehold_dc_manager::settings::Settings {
        nats_url: url.clone(),
        id: Some("bkk-mgr-x".into()),
        leader_ttl_ms: 1_500,
        manager: m,
        ..Default::default()
    };
    // A deadline of their own: waiting for the lease above may have used most of the first.
    let connect_by = Instant::now() + Duration::from_secs(10);
    let _m = leasehold_dc_manager::spawn(connect_until(&url, "m", connect_by).await.unwrap(), dc);
    let ps = leasehold_pod::PodSettings {
        limit: Some("api".into()),
        dc: "bkk".into(),
        pod_id: Some("pod-1".into()),
        ..Default::default()
    };
    let _pod = leasehold_pod::Pod::start(connect_until(&url, "p", connect_by).await.unwrap(), &ps);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let out = inspect(true);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let pod = &v["pods"]["pod-1"];
        if v["dc_leaders"]["bkk"] == "bkk-mgr-x" && pod["limits"]["api"]["last_lease"]["issuer"].is_string() {
            assert_eq!(pod["dc"], "bkk");
            assert!(pod["last_heartbeat_ms_ago"].as_u64().is_some_and(|ms| ms < 1_500), "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "pod or DC leader never shown: {v}");
    }
    let text = String::from_utf8(inspect(false).stdout).unwrap();
    assert!(text.contains("dc bkk manager leader: bkk-mgr-x") && text.contains("pod pod-1"), "{text}");
    coord.stop().await.unwrap();
}

#[test]
fn inspect_without_a_server_is_a_one_line_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["inspect", "--nats-url", "nats://127.0.0.1:1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("leasehold: "), "{err}");
}

/// On the production topology (a cluster per DC, joined to the hub as a leaf node), inspect
/// pointed at a DC's server reads the ledger and the coordinator's key in the hub's domain
/// (`--ledger-domain hub`) and the DC managers' keys in the DC's own; without the option it
/// says where the ledger is, in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_the_hub_s_ledger_from_a_dc_s_own_cluster() {
    use leasehold_nats_harness::leaf_topology::LeafTopology;
    let bin = binaries().expect("a nats-server is needed: run scripts/nats-servers").remove(0);
    let topology = LeafTopology::start(&bin, &["bkk"], 1).await.unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(15);
    let hub_url = LeafTopology::url(&topology.hub);
    let mut limit = LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::per_s(50, 4))]);
    limit.renew_interval_ms = 250;
    let settings = Settings {
        nats_url: hub_url.clone(),
        id: Some("coord-x".into()),
        leader_ttl_ms: 1_500,
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
        ..Settings::default()
    };
    let _coord = leasehold_coordinator::spawn(topology.client(&topology.hub, "coordinator").await, settings);
    let (bkk, _) = topology.dc("bkk");
    let dc_url = LeafTopology::url(bkk);
    let mut m = leasehold_core::dc_manager::DcManagerConfig::new("api", "bkk", "");
    m.renew_interval_ms = 250;
    let dc = leasehold_dc_manager::settings::Settings {
        nats_url: dc_url.clone(),
        id: Some("bkk-mgr-x".into()),
        leader_ttl_ms: 1_500,
        ledger_domain: Some("hub".into()),
        manager: m,
        ..Default::default()
    };
    let mut m = leasehold_dc_manager::spawn(topology.client(bkk, "dc-bkk").await, dc);
    let inspect_creds = topology.creds("inspect");
    let inspect = |domain: bool| {
        let creds = inspect_creds.to_str().unwrap();
        let mut args = vec!["inspect", "--nats-url", &dc_url, "--nats-creds-file", creds, "--json", "--listen-ms", "0"];
        if domain {
            args.extend(["--ledger-domain", "hub"]);
        }
        Command::new(env!("CARGO_BIN_EXE_leasehold")).args(&args).output().unwrap()
    };
    // Once BKK's manager leads and has applied a DC lease, everything inspect shows is written:
    // its leader key (BKK's JetStream), the coordinator's (the hub's) and the ledger record with
    // BKK's lease (written before the coordinator sends a DC lease).
    let within = deadline.saturating_duration_since(Instant::now());
    wait::until(
        &mut m.status,
        within,
        "BKK's manager leads on a DC lease",
        |s: &leasehold_dc_manager::manager::Status| s.leading && s.dc_leases_applied > 0,
    )
    .await;
    let out = inspect(true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let leased = v["ledgers"]["api"]["leases"].as_array().is_some_and(|l| l.iter().any(|l| l["dc"] == "bkk"));
    assert!(leased, "the hub's ledger, read from BKK's cluster, has no lease for BKK: {v}");
    assert_eq!(v["dc_leaders"]["bkk"], "bkk-mgr-x", "{v}");
    assert_eq!(v["coordinator_leader"], "coord-x", "{v}");
    let out = inspect(false);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--ledger-domain"), "{err}");
}
