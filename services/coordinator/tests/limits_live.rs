//! Limits as data against real nats-servers: the coordinator seeds `lh_limits` from its file,
//! follows every change live (no restart), takes a lower R without ever counting more than the
//! old one and within the new one once the old leases have ended, starts a limit added live at
//! once, runs a removed limit retired, refuses a bad definition, and never re-seeds a removed one.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use bytes::Bytes;
use leasehold_coordinator::leader::Status;
use leasehold_coordinator::settings::Settings;
use leasehold_coordinator::spawn;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{encode, DcReport, DcReports, LedgerRecord};
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, ensure_bucket, BucketSpec, CasOutcome};
use leasehold_nats::ledger::read_record;
use leasehold_nats::limits_store::{self, RemoveOutcome};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::sync::watch;

const LEADER_TTL_MS: u64 = 1_500;

fn limit(name: &str, rate_per_s: u64, dc_ttl_ms: u64) -> LimitConfig {
    let floors = [("bkk", Quota::per_s(50, 0)), ("eu", Quota::per_s(50, 0))];
    let mut l = LimitConfig::new(name, Quota::per_s(rate_per_s, 100), &floors);
    l.renew_interval_ms = 250;
    l.dc_ttl_ms = dc_ttl_ms;
    l
}

fn settings(url: &str, seeds: &[LimitConfig]) -> Settings {
    Settings {
        nats_url: url.into(),
        nats_creds_file: None,
        id: Some("coord-a".into()),
        leader_ttl_ms: LEADER_TTL_MS,
        replicas: 1,
        http_listen: None,
        limits: seeds.iter().map(LimitDef::from_config).collect(),
    }
}

/// Σ over holders of each holder's largest DC lease on record.
fn outstanding(rec: &LedgerRecord) -> u64 {
    let mut per_holder: BTreeMap<&str, u64> = BTreeMap::new();
    for l in &rec.leases {
        let m = per_holder.entry(&l.holder).or_default();
        *m = (*m).max(l.quota.rate_milli_per_s);
    }
    per_holder.values().sum()
}

struct Dcs {
    client: async_nats::Client,
    seq: u64,
}

impl Dcs {
    /// Both DCs of `limit` ask for 2,000/s.
    async fn report(&mut self, limit: &str) {
        self.seq += 1;
        for dc in ["bkk", "eu"] {
            let r = DcReport {
                pods_healthy: 4,
                ..DcReport::new(limit, dc, &format!("{dc}-mgr"), 1, self.seq, Quota::per_s(2_000, 0))
            };
            let batch = DcReports::new(dc, vec![r]);
            self.client.publish(format!("lh.dc.{dc}.report"), Bytes::from(encode(&batch))).await.unwrap();
        }
    }
}

/// Keep both DCs of `limit` reporting until its record satisfies `f` (or panic at `deadline`);
/// `each` sees every record read on the way.
async fn until_record(
    ledger: &async_nats::jetstream::kv::Store,
    dcs: &mut Dcs,
    status: &mut watch::Receiver<Status>,
    limit: &str,
    deadline: Duration,
    mut each: impl FnMut(&LedgerRecord),
    f: impl Fn(&LedgerRecord) -> bool,
) -> LedgerRecord {
    let end = Instant::now() + deadline;
    loop {
        dcs.report(limit).await;
        if let Some(rec) = read_record(ledger, limit).await.unwrap().1 {
            each(&rec);
            if f(&rec) {
                return rec;
            }
        }
        assert!(Instant::now() < end, "limit {limit}: the record never got there within {deadline:?}");
        let _ = tokio::time::timeout(Duration::from_millis(100), status.changed()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_follows_limits_added_changed_and_removed_in_kv_without_a_restart() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let (url, v) = (server.url(), server.version.clone());
        let js = jetstream(wait::client(&url, "test").await);
        let mut dcs = Dcs { client: wait::client(&url, "dcs").await, seq: 0 };
        let api = limit("api", 1_000, 3_000);
        let mut a = spawn(wait::client(&url, "coord").await, settings(&url, std::slice::from_ref(&api)));
        wait::until(&mut a.status, Duration::from_secs(10), "a leads", |s| s.leading).await;
        let store = limits_store::open(&js, 1).await.unwrap();
        let seeded = limits_store::get(&store, "api").await.unwrap().expect("seeded from the file");
        let ledger = ensure_bucket(&js, &BucketSpec::new("lh_ledger")).await.unwrap();
        let s = &mut a.status;
        until_record(&ledger, &mut dcs, s, "api", Duration::from_secs(10), |_| {}, |r| outstanding(r) >= 800_000).await;

        // R goes down to 600/s, live: never more than the old 900 above the floors on record, and
        // within the new 500 once one DC-lease lifetime has passed.
        let lowered = LimitDef::from_config(&limit("api", 600, 3_000));
        let out = limits_store::put(&store, &lowered, Some(seeded.revision)).await.unwrap();
        assert!(matches!(out, CasOutcome::Written { .. }), "{v}");
        let changed_at = Instant::now();
        let mut worst = 0;
        let rec = until_record(
            &ledger,
            &mut dcs,
            s,
            "api",
            Duration::from_secs(15),
            |r| worst = worst.max(outstanding(r)),
            |r| r.capacity == Some(Quota::per_s(600, 100)) && outstanding(r) <= 500_000 && outstanding(r) > 0,
        )
        .await;
        assert!(worst <= 900_000, "{v}: {worst} on record after the change");
        assert!(changed_at.elapsed() < Duration::from_secs(6), "{v}: took {:?}", changed_at.elapsed());
        assert_eq!(rec.epoch, a.status.borrow().epoch, "{v}: the same term applied it");
        assert_eq!(a.status.borrow().takeovers, 1, "{v}: no restart, no new term");

        // A limit added live issues at once (its record was never written: nothing to wait out,
        // although its DC leases last 10 s).
        let added = LimitDef::from_config(&limit("second", 300, 10_000));
        limits_store::put(&store, &added, None).await.unwrap();
        let added_at = Instant::now();
        let s = &mut a.status;
        until_record(&ledger, &mut dcs, s, "second", Duration::from_secs(8), |_| {}, |r| outstanding(r) > 0).await;
        assert!(added_at.elapsed() < Duration::from_secs(5), "{v}: first lease after {:?}", added_at.elapsed());

        // A bad definition is refused; the one in force stays.
        let bad = br#"{"limit":"second","rate":"9000/s","burst":1,"dcs":[{"name":"bkk","floor":"99999/s"}]}"#;
        let rev = limits_store::get(&store, "second").await.unwrap().unwrap().revision;
        compare_and_set(&store, "second", Bytes::from_static(bad), Some(rev)).await.unwrap();
        let st = wait::until(&mut a.status, Duration::from_secs(5), "refused", |s| {
            s.definitions_refused.contains_key("second")
        })
        .await;
        assert!(st.definitions_refused["second"].contains("floors"), "{v}: {:?}", st.definitions_refused);
        assert_eq!(st.limits["second"].capacity, Quota::per_s(300, 100), "{v}: the valid one stays in force");

        // Removing a limit retires it: nothing granted, floors named zero.
        let rev = limits_store::get(&store, "api").await.unwrap().unwrap().revision;
        assert_eq!(limits_store::remove(&store, "api", Some(rev)).await.unwrap(), RemoveOutcome::Removed);
        let s = &mut a.status;
        let retired =
            |r: &LedgerRecord| r.capacity == Some(Quota::ZERO) && r.floors.values().all(|f| *f == Quota::ZERO);
        until_record(&ledger, &mut dcs, s, "api", Duration::from_secs(5), |_| {}, retired).await;
        // The status is published once the event that wrote the record has finished.
        wait::until(&mut a.status, Duration::from_secs(5), "api retired in the status", |s| {
            s.limits.get("api").is_some_and(|l| l.retired)
        })
        .await;
        a.stop().await.unwrap();

        // Restarted with the same file: the removed limit is not seeded again and stays retired.
        let mut b = spawn(wait::client(&url, "coord").await, settings(&url, std::slice::from_ref(&api)));
        let st =
            wait::until(&mut b.status, Duration::from_secs(10), "b leads", |s| s.leading && s.limits.len() == 2).await;
        assert!(st.limits["api"].retired, "{v}: {:?}", st.limits);
        assert_eq!(limits_store::get(&store, "api").await.unwrap(), None, "{v}: re-seeded");
        let rec = read_record(&ledger, "api").await.unwrap().1.unwrap();
        assert!(retired(&rec), "{v}");
        b.stop().await.unwrap();
    }
}

/// Under the shipped roles: the coordinator (as `coordinator`) seeds and follows `lh_limits`,
/// `limits-admin` changes a limit and the coordinator applies it, and a pod cannot write one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_shipped_permissions_only_limits_admin_and_the_coordinators_seed_write_limits() {
    use leasehold_nats_harness::prod_auth;
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let (server, auth) = prod_auth::start(&bin).unwrap();
        let (v, url) = (server.version.clone(), server.url());
        let mut a = spawn(auth.client(&url, "coordinator").await, settings(&url, &[limit("api", 1_000, 3_000)]));
        wait::until(&mut a.status, Duration::from_secs(10), "a leads", |s| s.leading && s.definitions == 1).await;

        let admin = jetstream(auth.client(&url, "limits-admin").await);
        let store = limits_store::open(&admin, 1).await.unwrap();
        let seeded = limits_store::get(&store, "api").await.unwrap().expect("seeded by the coordinator");
        let lowered = LimitDef::from_config(&limit("api", 600, 3_000));
        let out = limits_store::put(&store, &lowered, Some(seeded.revision)).await.unwrap();
        assert!(matches!(out, CasOutcome::Written { .. }), "{v}: limits-admin cannot write: {out:?}");
        wait::until(&mut a.status, Duration::from_secs(5), "applied", |s| {
            s.limits.get("api").is_some_and(|b| b.capacity == Quota::per_s(600, 100))
        })
        .await;

        let pod = auth.client(&url, "bkk-pod1").await;
        let pod_store = limits_store::open(&jetstream(pod), 1).await;
        let written = match pod_store {
            Err(_) => false,
            Ok(s) => matches!(limits_store::put(&s, &lowered, None).await, Ok(CasOutcome::Written { .. })),
        };
        assert!(!written, "{v}: a pod wrote a limit");
        a.stop().await.unwrap();
    }
}
