//! FINDINGS F31: a coordinator that took over with no definition (fresh lh_limits) wrote
//! a fence with dc_ttl_ms_max = 0, and a limit added live never raised it (covering() left 0
//! "unknown"), so a later term finding the record lost waited only its own TTL. The fence now
//! goes up to the longest DC lease before a record holds it (this failed before the fix).
#![allow(clippy::disallowed_methods)]

use leasehold_coordinator::settings::Settings;
use leasehold_coordinator::spawn;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_core::subjects;
use leasehold_core::wire::{encode, DcReport, DcReports, LedgerFence};
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{ensure_bucket, read, BucketSpec};
use leasehold_nats::limits_store;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_added_to_a_term_that_started_without_definitions_raises_the_fence_to_its_dc_lease_ttl() {
    for bin in binaries().expect("a nats-server is needed") {
        let server = NatsServer::start(&bin).unwrap();
        let url = server.url();
        let js = jetstream(wait::client(&url, "test").await);
        let settings = Settings {
            nats_url: url.clone(),
            nats_creds_file: None,
            id: Some("coord-a".into()),
            leader_ttl_ms: 1_500,
            replicas: 1,
            http_listen: None,
            limits: Vec::new(),
        };
        let mut a = spawn(wait::client(&url, "coord").await, settings);
        wait::until(&mut a.status, Duration::from_secs(10), "a leads", |s| s.leading).await;
        let store = limits_store::open(&js, 1).await.unwrap();
        let mut api = LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::ZERO), ("eu", Quota::ZERO)]);
        api.dc_ttl_ms = 60_000;
        limits_store::put(&store, &LimitDef::from_config(&api), None).await.unwrap();
        let ledger = ensure_bucket(&js, &BucketSpec::new(subjects::LEDGER_BUCKET)).await.unwrap();
        let leaders = ensure_bucket(&js, &BucketSpec::new(subjects::LEADER_BUCKET)).await.unwrap();
        // BKK asks: its first DC lease (60 s) goes on record, the fence first.
        let c = wait::client(&url, "dc").await;
        let end = Instant::now() + Duration::from_secs(10);
        let mut seq = 0;
        loop {
            seq += 1;
            let r =
                DcReport { pods_healthy: 1, ..DcReport::new("api", "bkk", "bkk-mgr", 1, seq, Quota::per_s(500, 0)) };
            c.publish("lh.dc.bkk.report", encode(&DcReports::new("bkk", vec![r])).into()).await.unwrap();
            let rec = leasehold_nats::ledger::read_record(&ledger, "api").await.unwrap().1;
            if rec.is_some_and(|r| !r.leases.is_empty()) {
                break;
            }
            assert!(Instant::now() < end, "api's first DC lease never written");
            let _ = tokio::time::timeout(Duration::from_millis(100), a.status.changed()).await;
        }
        let (_, bytes) = read(&leaders, subjects::LEDGER_FENCE_KEY).await.unwrap().expect("a fence");
        let fence = LedgerFence::parse(&bytes).unwrap();
        println!("fence after api's first record: {fence:?}");
        a.stop().await.unwrap();
        assert!(fence.may_hold("api"));
        assert!(
            fence.dc_ttl_ms_max >= 60_000,
            "fence dc_ttl_ms_max {} while api's DC leases last 60 s",
            fence.dc_ttl_ms_max
        );
    }
}
