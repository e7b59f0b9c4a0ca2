//! A leader cut off from NATS by an outage longer than its writes wait (every server paused or
//! restarting): its ledger writes go unanswered and so do the reads meant to settle them. That
//! is not another leader: the term goes on and writes again once NATS answers (a write it
//! buffered may land late, and is then adopted). Before, it stepped down, and the DC leases
//! waited a full failover.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use leasehold_coordinator::leader::Status;
use leasehold_coordinator::settings::Settings;
use leasehold_coordinator::spawn;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::quota::Quota;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::Duration;

fn settings(url: &str) -> Settings {
    let mut limit = LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::per_s(50, 0))]);
    limit.renew_interval_ms = 100;
    Settings {
        nats_url: url.into(),
        nats_creds_file: None,
        id: Some("coord-a".into()),
        leader_ttl_ms: 3_000,
        replicas: 1,
        http_listen: None,
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_ledger_writes_go_unanswered_in_an_outage_keeps_its_term() {
    let bin = binaries().unwrap().remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let client = wait::client(&server.url(), "coordinator").await;
    let mut coord = spawn(client, settings(&server.url()));
    let leading = coord.status.wait_for(|s| s.leading && s.ledger_writes >= 3);
    let first: Status = tokio::time::timeout(Duration::from_secs(15), leading).await.expect("leads").unwrap().clone();

    // Pause NATS right after a write landed, while the term still acts, until a ledger write
    // went unanswered (a write times out after 2 s, then so does its read). A pause that met
    // only a renewal of the leader key is tried again.
    let mut unanswered = false;
    for attempt in 1..=5 {
        let before = coord.status.borrow().clone();
        let wrote = coord.status.wait_for(|s| s.ledger_writes > before.ledger_writes);
        tokio::time::timeout(Duration::from_secs(10), wrote).await.expect("writes between outages").unwrap();
        assert!(server.pause(), "the server stops");
        let settled =
            coord.status.wait_for(|s| s.ledger_writes_unresolved > before.ledger_writes_unresolved || s.step_downs > 0);
        let met = tokio::time::timeout(Duration::from_secs(8), settled).await.is_ok();
        server.resume();
        let now = coord.status.borrow().clone();
        eprintln!("outage {attempt}: {} unresolved, {} step-downs", now.ledger_writes_unresolved, now.step_downs);
        assert_eq!(now.step_downs, 0, "an unanswered write ended the term");
        if met {
            unanswered = true;
            break;
        }
    }
    assert!(unanswered, "no outage met a ledger write in five tries");

    // NATS answers again: the same term writes the ledger again.
    let resumed_from = coord.status.borrow().ledger_writes;
    let writes = coord.status.wait_for(|s| s.ledger_writes >= resumed_from + 3 || s.step_downs > 0);
    let after = tokio::time::timeout(Duration::from_secs(20), writes).await.expect("writes again").unwrap().clone();
    assert_eq!(after.step_downs, 0, "{after:?}");
    assert_eq!((after.takeovers, after.epoch), (1, first.epoch), "the same term goes on");
    assert!(after.leading);
    coord.stop().await.expect("stops cleanly");
}
