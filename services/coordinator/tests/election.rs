//! The coordinator against real nats-servers (the machine's 2.9.10 and a current one): election,
//! failover within the leader TTL, fencing of a deposed leader, ledger resume, bad input.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use bytes::Bytes;
use leasehold_coordinator::leader::Status;
use leasehold_coordinator::settings::Settings;
use leasehold_coordinator::{spawn, Handle};
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::quota::Quota;
use leasehold_core::subjects::{ledger_group_key, ledger_group_of};
use leasehold_core::wire::{encode, DcReport, DcReports, LedgerRecord};
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, ensure_bucket, BucketSpec, CasOutcome};
use leasehold_nats::ledger::{read_group, read_record};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};
use tokio::sync::watch;

const LEADER_TTL_MS: u64 = 1_500;

fn settings(url: &str, id: &str) -> Settings {
    let mut limit =
        LimitConfig::new("api", Quota::per_s(1_000, 100), &[("bkk", Quota::per_s(50, 0)), ("eu", Quota::per_s(50, 0))]);
    limit.renew_interval_ms = 250;
    Settings {
        nats_url: url.into(),
        nats_creds_file: None,
        id: Some(id.into()),
        leader_ttl_ms: LEADER_TTL_MS,
        replicas: 1,
        http_listen: None,
        limits: vec![leasehold_core::limits::LimitDef::from_config(&limit)],
    }
}

async fn client(url: &str) -> async_nats::Client {
    wait::client(url, "test").await
}

/// The ledger record of limit "api", read each time `rx` reports progress, until `f` holds.
async fn record_until(
    js: &async_nats::jetstream::Context,
    rx: &mut watch::Receiver<Status>,
    what: &str,
    f: impl Fn(&LedgerRecord) -> bool,
) -> (u64, LedgerRecord) {
    let store = ensure_bucket(js, &BucketSpec::new("lh_ledger")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let (Some(rev), Some(rec)) = read_record(&store, "api").await.unwrap() {
            if f(&rec) {
                return (rev, rec);
            }
        }
        let left =
            deadline.checked_duration_since(Instant::now()).unwrap_or_else(|| panic!("record never satisfied: {what}"));
        let _ = tokio::time::timeout(left, rx.changed()).await;
    }
}

fn report(dc: &str, seq: u64, demand: u64) -> Vec<u8> {
    let r =
        DcReport { pods_healthy: 4, ..DcReport::new("api", dc, &format!("{dc}-mgr"), 1, seq, Quota::per_s(demand, 0)) };
    encode(&DcReports::new(dc, vec![r]))
}

async fn first_leader(a: &mut Handle, b: &mut Handle) -> bool {
    tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            _ = a.status.wait_for(|s| s.leading) => true,
            _ = b.status.wait_for(|s| s.leading) => false,
        }
    })
    .await
    .expect("someone leads within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_with_a_higher_epoch_and_keeps_the_old_leases() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let url = server.url();
        let (c, js) = (client(&url).await, jetstream(client(&url).await));
        let mut a = spawn(client(&url).await, settings(&url, "coord-a"));
        let mut b = spawn(client(&url).await, settings(&url, "coord-b"));
        let a_leads = first_leader(&mut a, &mut b).await;
        let (mut leader, mut standby, standby_id) = if a_leads { (a, b, "coord-b") } else { (b, a, "coord-a") };
        assert!(!standby.status.borrow().leading, "{}: two leaders", server.version);
        let epoch = leader.status.borrow().epoch;

        // BKK reports demand; the leader writes it a lease.
        c.publish("lh.dc.bkk.report", Bytes::from(report("bkk", 1, 900))).await.unwrap();
        let (_, rec) =
            record_until(&js, &mut leader.status, "bkk lease", |r| r.leases.iter().any(|l| l.dc == "bkk")).await;
        let bkk = rec.leases.iter().filter(|l| l.dc == "bkk").map(|l| l.quota.rate_milli_per_s).max().unwrap();
        assert!(bkk > 0);

        // Crash the leader: the standby leads within the TTL plus a couple of ticks.
        let crashed_at = Instant::now();
        leader.crash();
        let s =
            wait::until(&mut standby.status, Duration::from_millis(LEADER_TTL_MS * 3), "standby leads", |s| s.leading)
                .await;
        assert!(
            crashed_at.elapsed() >= Duration::from_millis(LEADER_TTL_MS / 2),
            "took over before the old key could expire"
        );
        // Above every stored epoch and at least its claim's revision in the leader bucket.
        assert!(s.epoch > epoch, "{}: epoch {} after {epoch}", server.version, s.epoch);
        let (_, rec) = record_until(&js, &mut standby.status, "new writer", |r| r.writer == standby_id).await;
        assert_eq!(rec.epoch, s.epoch);
        assert!(
            rec.leases.iter().any(|l| l.dc == "bkk" && l.version.epoch == epoch),
            "the old leader's lease is still on record"
        );

        // Europe now wants everything; it cannot get BKK's share while that lease may be live.
        c.publish("lh.dc.eu.report", Bytes::from(report("eu", 1, 1_000))).await.unwrap();
        let (_, rec) =
            record_until(&js, &mut standby.status, "eu lease", |r| r.leases.iter().any(|l| l.dc == "eu")).await;
        let eu = rec.leases.iter().filter(|l| l.dc == "eu").map(|l| l.quota.rate_milli_per_s).max().unwrap();
        assert!(eu + bkk <= 900_000, "{}: eu {eu} + bkk {bkk} above R − floors", server.version);
        standby.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_cannot_write_the_ledger() {
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let js = jetstream(client(&url).await);
    let mut a = spawn(client(&url).await, settings(&url, "coord-a"));
    let s = wait::until(&mut a.status, Duration::from_secs(10), "a leads", |s| s.leading).await;
    // An intruder (a new leader, from A's point of view) writes the record with a higher epoch.
    record_until(&js, &mut a.status, "a's record", |r| r.writer == "coord-a").await;
    let store = ensure_bucket(&js, &BucketSpec::new("lh_ledger")).await.unwrap();
    let (rev, mut group) = read_group(&store, ledger_group_of("api")).await.unwrap().unwrap();
    let rec = group.records.iter_mut().find(|r| r.limit == "api").unwrap();
    rec.writer = "intruder".into();
    rec.epoch = s.epoch + 10;
    let rec = rec.clone();
    let key = ledger_group_key(group.group);
    let out = compare_and_set(&store, &key, Bytes::from(encode(&group)), Some(rev)).await.unwrap();
    assert!(matches!(out, CasOutcome::Written { .. }));
    // A's next write conflicts (every tick writes every group, changed or not: an idle group
    // overwritten or rolled back under a term is found within a tick): it steps down instead
    // of overwriting.
    wait::until(&mut a.status, Duration::from_secs(5), "a steps down", |s| s.step_downs >= 1).await;
    let (_, now) = record_until(&js, &mut a.status, "intruder kept", |_| true).await;
    assert!(now.writer == "intruder" || now.epoch > rec.epoch, "a deposed write landed: {now:?}");
    // Once its own key expires it may lead again, but only above the intruder's epoch.
    let s =
        wait::until(&mut a.status, Duration::from_secs(10), "a leads again", |s| s.leading && s.takeovers >= 2).await;
    assert!(s.epoch > rec.epoch, "leads again at {} after the intruder's {}", s.epoch, rec.epoch);
    a.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_foreign_reports_are_counted_not_fatal() {
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let c = client(&url).await;
    let mut a = spawn(client(&url).await, settings(&url, "coord-a"));
    wait::until(&mut a.status, Duration::from_secs(10), "a leads", |s| s.leading).await;
    c.publish("lh.dc.bkk.report", Bytes::from_static(b"{not json")).await.unwrap();
    c.publish("lh.dc.bkk.report", Bytes::from(vec![b' '; 70_000].into_iter().collect::<Vec<u8>>())).await.unwrap_or(());
    let mut other = report("bkk", 1, 10);
    other = String::from_utf8(other).unwrap().replace("\"api\"", "\"other\"").into_bytes();
    c.publish("lh.dc.bkk.report", Bytes::from(other.clone())).await.unwrap();
    // A batch for one DC on another DC's subject is refused whole.
    c.publish("lh.dc.eu.report", Bytes::from(report("bkk", 2, 10))).await.unwrap();
    let s = wait::until(&mut a.status, Duration::from_secs(5), "counted", |s| {
        s.reports_malformed >= 2 && s.reports_ignored >= 1
    })
    .await;
    assert!(s.leading, "bad input must not cost leadership");
    a.stop().await.unwrap();
}
