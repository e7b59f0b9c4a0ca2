//! The ledger's durable writes don't multiply with limits: many limits' records share a few KV
//! keys (groups), each written by compare-and-set, and a new leader resumes every limit from
//! them.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use bytes::Bytes;
use futures::StreamExt;
use leasehold_coordinator::settings::Settings;
use leasehold_coordinator::spawn;
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::LimitDef;
use leasehold_core::quota::Quota;
use leasehold_core::subjects::{ledger_group_key, ledger_group_of, LEDGER_BUCKET, LEDGER_GROUPS};
use leasehold_core::wire::{encode, LedgerGroup, LedgerRecord};
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, ensure_bucket, BucketSpec, CasOutcome};
use leasehold_nats::ledger::read_all;
use leasehold_nats::limits_store;
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const LIMITS: usize = 200;
const GROUPS: usize = LEDGER_GROUPS as usize;

fn settings(url: &str, id: &str) -> Settings {
    let floors = [("bkk", Quota::per_s(5, 0)), ("eu", Quota::per_s(5, 0))];
    let limits = (0..LIMITS)
        .map(|i| {
            let mut l = LimitConfig::new(&format!("tenant-{i:03}"), Quota::per_s(100, 10), &floors);
            l.renew_interval_ms = 250;
            LimitDef::from_config(&l)
        })
        .collect();
    Settings { nats_url: url.into(), id: Some(id.into()), leader_ttl_ms: 1_500, limits, ..Settings::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_limits_are_written_to_at_most_one_key_per_group_and_a_new_leader_resumes_them_all() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).unwrap();
        let (url, v) = (server.url(), server.version.clone());
        let watcher = wait::client(&url, "watcher").await;
        let mut writes = watcher.subscribe("$KV.lh_ledger.>").await.unwrap();
        watcher.flush().await.unwrap();
        let mut a = spawn(wait::client(&url, "coord").await, settings(&url, "coord-a"));
        wait::until(&mut a.status, Duration::from_secs(20), "a leads", |s| s.leading).await;
        // Two seconds of renewals (eight renew intervals).
        let mut keys = BTreeSet::new();
        let mut count = 0u64;
        let end = Instant::now() + Duration::from_secs(2);
        while let Ok(Some(msg)) = tokio::time::timeout_at(end.into(), writes.next()).await {
            keys.insert(msg.subject.to_string());
            count += 1;
        }
        assert!(count > 0, "{v}: no ledger write in 2 s");
        assert!(keys.len() <= GROUPS, "{v}: {LIMITS} limits were written to {} keys, not at most {GROUPS}", keys.len());
        let s = a.status.borrow().clone();
        println!(
            "{v}: {count} ledger writes in 2 s to {} keys; status: {} groups carrying {} records written",
            keys.len(),
            s.ledger_writes,
            s.records_written
        );
        assert!(s.records_written >= 2 * s.ledger_writes, "{v}: groups carry several records each: {s:?}");
        a.stop().await.unwrap();
        // A new leader reads every group and writes every limit's record back at its epoch.
        let mut b = spawn(wait::client(&url, "coord").await, settings(&url, "coord-b"));
        let s = wait::until(&mut b.status, Duration::from_secs(20), "b leads every limit", |s| {
            s.leading && s.limits.len() == LIMITS
        })
        .await;
        let ledger = ensure_bucket(&jetstream(watcher.clone()), &BucketSpec::new(LEDGER_BUCKET)).await.unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let contents = read_all(&ledger).await.unwrap();
            let records = contents.records();
            assert!(contents.groups.len() <= GROUPS && contents.other_keys.is_empty(), "{v}: {contents:?}");
            if records.len() == LIMITS && records.values().all(|(_, r)| r.writer == "coord-b" && r.epoch == s.epoch) {
                break;
            }
            assert!(Instant::now() < end, "{v}: b never wrote every record at its epoch {}", s.epoch);
            let _ = tokio::time::timeout(Duration::from_millis(100), b.status.changed()).await;
        }
        b.stop().await.unwrap();
    }
}

/// A term writes a group only on the revision it read at takeover or wrote itself: a group
/// someone else created since (a second writer) is never adopted and overwritten, even by a
/// limit added live that belongs to it. The term steps down instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_written_by_someone_else_is_never_adopted_by_a_limit_added_live() {
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let js = jetstream(wait::client(&url, "test").await);
    let floors = [("bkk", Quota::per_s(5, 0))];
    let api = LimitConfig::new("api", Quota::per_s(100, 10), &floors);
    let mut s = settings(&url, "coord-a");
    s.limits = vec![LimitDef::from_config(&api)];
    let mut a = spawn(wait::client(&url, "coord").await, s);
    wait::until(&mut a.status, Duration::from_secs(10), "a leads", |s| s.leading && s.ledger_writes >= 1).await;
    // A limit in a group nobody has written yet; an intruder creates that group.
    let second = (0..).map(|i| format!("second-{i}")).find(|n| ledger_group_of(n) != ledger_group_of("api")).unwrap();
    let ledger = ensure_bucket(&js, &BucketSpec::new(LEDGER_BUCKET)).await.unwrap();
    let mut foreign = LedgerRecord::empty(&second, 99, "intruder");
    foreign.capacity = Some(Quota::per_s(100, 10));
    let group = LedgerGroup::new(ledger_group_of(&second), vec![foreign]);
    let key = ledger_group_key(group.group);
    let written = compare_and_set(&ledger, &key, Bytes::from(encode(&group)), None).await.unwrap();
    assert!(matches!(written, CasOutcome::Written { .. }), "{written:?}");
    // The limit is defined live: the term must not take the intruder's revision as its own.
    let store = limits_store::open(&js, 1).await.unwrap();
    limits_store::put(&store, &LimitDef::from_config(&LimitConfig::new(&second, Quota::per_s(100, 10), &floors)), None)
        .await
        .unwrap();
    wait::until(&mut a.status, Duration::from_secs(5), "a steps down", |s| s.step_downs >= 1).await;
    let stored = leasehold_nats::ledger::read_group(&ledger, group.group).await.unwrap().unwrap().1;
    assert_eq!(stored, group, "the intruder's group was overwritten");
    a.stop().await.unwrap();
}

/// A server with a small `max_payload` (64 KiB) and 150 limits in group 0 (about 90 KiB of
/// records): the group keeps the limits that fit (taken in name order) and the rest are left
/// out, listed as refused; the leader keeps leading and renews every limit it kept. A limit of
/// that group defined live is left out too, and the kept ones go on being written. Before, the
/// whole group went unwritten (counted as oversized): one limit too many stopped them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_group_keeps_its_limits_and_leaves_out_new_ones_that_do_not_fit() {
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start_with_config(&bin, &[("small.conf", "max_payload: 65536\n")], &[]).unwrap();
    let url = server.url();
    let floors = [("bkk", Quota::per_s(5, 0)), ("eu", Quota::per_s(5, 0))];
    let mut names: Vec<String> =
        (0..).map(|i| format!("crowded-{i}")).filter(|n| ledger_group_of(n) == 0).take(150).collect();
    let alone = (0..).map(|i| format!("alone-{i}")).find(|n| ledger_group_of(n) != 0).unwrap();
    names.push(alone.clone());
    let mut s = settings(&url, "coord-a");
    s.limits =
        names.iter().map(|n| LimitDef::from_config(&LimitConfig::new(n, Quota::per_s(100, 10), &floors))).collect();
    let mut a = spawn(wait::client(&url, "coord").await, s);
    let st = wait::until(&mut a.status, Duration::from_secs(20), "a leads and leaves some limits out", |s| {
        s.leading && s.ledger_writes >= 4 && !s.definitions_refused.is_empty()
    })
    .await;
    assert_eq!((st.step_downs, st.groups_oversized), (0, 0), "{st:?}");
    assert!(st.ledger_group_bytes_max <= (65_536 - 4_096) / 3, "room left for records to grow: {st:?}");
    let js = jetstream(wait::client(&url, "t").await);
    let ledger = ensure_bucket(&js, &BucketSpec::new(LEDGER_BUCKET)).await.unwrap();
    let contents = read_all(&ledger).await.unwrap();
    let records = contents.records();
    assert!(records.contains_key(alone.as_str()), "the other group is written");
    let kept: Vec<&String> = names.iter().filter(|n| records.contains_key(n.as_str())).collect();
    let left: Vec<&String> = st.definitions_refused.keys().collect();
    assert_eq!(kept.len() + left.len(), names.len(), "every limit kept or left out: {left:?}");
    assert!(kept.len() >= 20, "group 0 holds {} limits", kept.len());
    println!("group 0 holds {} of 150 limits at {} bytes", kept.len() - 1, st.ledger_group_bytes_max);
    let mut crowded: Vec<&String> = names.iter().filter(|n| **n != alone).collect();
    crowded.sort();
    assert_eq!(left, crowded[crowded.len() - left.len()..].to_vec(), "the last names are left out");
    for l in &left {
        assert!(!st.limits.contains_key(*l), "{l} left out but on the books");
        assert!(st.definitions_refused[*l].contains("group.0"), "{:?}", st.definitions_refused[*l]);
    }
    // One more limit of group 0, defined live: left out; the kept ones go on being written.
    let late = (0..).map(|i| format!("late-{i}")).find(|n| ledger_group_of(n) == 0).unwrap();
    let store = limits_store::open(&js, 1).await.unwrap();
    limits_store::put(&store, &LimitDef::from_config(&LimitConfig::new(&late, Quota::per_s(100, 10), &floors)), None)
        .await
        .unwrap();
    let before = st.ledger_writes;
    let st = wait::until(&mut a.status, Duration::from_secs(10), "the late limit is left out", |s| {
        s.definitions_refused.contains_key(&late) && s.ledger_writes >= before + 4
    })
    .await;
    assert_eq!((st.step_downs, st.groups_oversized), (0, 0), "{st:?}");
    let (revision, group) = leasehold_nats::ledger::read_group(&ledger, 0).await.unwrap().unwrap();
    assert_eq!(group.records.len(), kept.len() - 1, "at revision {revision}: every kept limit but {alone}");
    assert!(group.record(&late).is_none(), "at revision {revision}");
    a.stop().await.unwrap();
}

/// A record of the version that kept one key per limit (key: the limit's name) is read at
/// takeover: the limit resumes from it, its DC lease on the books, and the term writes it into
/// the limit's group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_limit_record_of_an_older_version_is_resumed_into_its_group() {
    use leasehold_core::wire::{DcLease, LeaseVersion, LedgerFence};
    let bin = binaries().expect("a nats-server is needed").remove(0);
    let server = NatsServer::start(&bin).unwrap();
    let url = server.url();
    let js = jetstream(wait::client(&url, "test").await);
    let ledger = ensure_bucket(&js, &BucketSpec { history: 5, ..BucketSpec::new(LEDGER_BUCKET) }).await.unwrap();
    let leaders = ensure_bucket(&js, &BucketSpec::new(leasehold_core::subjects::LEADER_BUCKET)).await.unwrap();
    // What the older version left: a fence at epoch 3 naming the limit, and its record.
    let mut fence = LedgerFence::raised(None, 3, 60_000);
    fence.limits.get_or_insert_with(Default::default).insert("api".into());
    let fence_key = leasehold_core::subjects::LEDGER_FENCE_KEY;
    compare_and_set(&leaders, fence_key, Bytes::from(encode(&fence)), None).await.unwrap();
    let lease = DcLease {
        v: 1,
        limit: "api".into(),
        dc: "bkk".into(),
        holder: "bkk-mgr-e1".into(),
        version: LeaseVersion { epoch: 3, seq: 9 },
        lease_id: "old-coord-3-9".into(),
        quota: Quota::per_s(80, 0),
        floor: Quota::per_s(5, 0),
        ttl_ms: 60_000,
        basis_seq: 1,
        predecessor: None,
    };
    let mut old = LedgerRecord::empty("api", 3, "old-coord");
    old.capacity = Some(Quota::per_s(100, 10));
    old.leases = vec![lease];
    old.floors = [("bkk".to_string(), Quota::per_s(5, 0))].into();
    compare_and_set(&ledger, "api", Bytes::from(encode(&old)), None).await.unwrap();
    let floors = [("bkk", Quota::per_s(5, 0))];
    let mut s = settings(&url, "coord-a");
    s.limits = vec![LimitDef::from_config(&LimitConfig::new("api", Quota::per_s(100, 10), &floors))];
    let mut a = spawn(wait::client(&url, "coord").await, s);
    let st = wait::until(&mut a.status, Duration::from_secs(10), "a leads api", |s| {
        s.leading && s.limits.contains_key("api")
    })
    .await;
    assert!(st.epoch > 3, "{st:?}");
    assert!(st.limits["api"].outstanding.rate_milli_per_s >= 80_000, "the old DC lease is on the books: {st:?}");
    let (_, rec) = leasehold_nats::ledger::read_record(&ledger, "api").await.unwrap();
    let rec = rec.expect("api's record in its group");
    assert!(rec.leases.iter().any(|l| l.lease_id == "old-coord-3-9"), "{rec:?}");
    a.stop().await.unwrap();
}
