//! `nats/prod/roles.toml` (as `leasehold auth setup` makes it: NATS JWTs, one credential per
//! pod) enforced by real servers: a pod publishes only its own demand and reads only its own
//! lease, with a credential issued while the server runs; a credential signed by another
//! operator's keys is refused; only the coordinator writes the ledger; a DC manager holds only its
//! own DC's leader key; a per-key instance holds shards, stores admissions and answers
//! `lh.keys.check` but never writes the tiers; only the keys admin writes them.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use async_nats::jetstream::{consumer, stream, Context};
use bytes::Bytes;
use futures::StreamExt;
use leasehold_core::subjects::{
    keys_admissions, keys_admissions_wildcard, keys_check, KEYS_ADMISSIONS_STREAM, KEYS_CONFIG_BUCKET,
    KEYS_SHARDS_BUCKET, KEYS_TIERS_KEY,
};
use leasehold_nats::auth;
use leasehold_nats::connect::{connect_with_creds, jetstream};
use leasehold_nats::kv::{compare_and_set, ensure_bucket, ensure_stream, read, BucketSpec, CasOutcome};
use leasehold_nats_harness::binaries;
use std::time::{Duration, Instant};

use leasehold_nats_harness::prod_auth::{self, ProdAuth};

/// Run `send` until `sub` receives something (bounded); returns everything received meanwhile.
async fn delivered<F: std::future::Future<Output = ()>>(
    sub: &mut async_nats::Subscriber,
    send: impl Fn() -> F,
) -> Vec<async_nats::Message> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(Instant::now() < deadline, "nothing delivered within 10 s");
        send().await;
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            got.push(m);
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_are_confined_to_their_own_subjects_and_keys() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let (server, auth) = prod_auth::start(&bin).unwrap();
        let (v, url) = (server.version.clone(), server.url());
        let coord = auth.client(&url, "coordinator").await;
        let dc = auth.client(&url, "dc-bkk").await;
        // Issued after the server started: no server change, no reload.
        let pod1 = auth.client(&url, "bkk-pod1").await;

        // A forged report for another pod is dropped by the server; the pod's own arrives. Both
        // are re-sent until the own one is seen (core NATS does not retry); the forged one must
        // never be. The forbidden actions use their own connection.
        let evil = auth.client(&url, "bkk-pod1").await;
        let mut reports = dc.subscribe("lh.pod.bkk.*.report").await.unwrap();
        dc.flush().await.unwrap();
        let dc_europe = auth.client(&url, "dc-europe").await;
        let mut europe_reports = dc_europe.subscribe("lh.pod.europe.*.report").await.unwrap();
        dc_europe.flush().await.unwrap();
        let own = delivered(&mut reports, || async {
            let _ = evil.publish("lh.pod.bkk.bkk-pod2.report", "forged".into()).await;
            let _ = evil.publish("lh.pod.europe.bkk-pod1.report", "forged".into()).await;
            let _ = evil.flush().await;
            pod1.publish("lh.pod.bkk.bkk-pod1.report", "own".into()).await.unwrap();
            pod1.flush().await.unwrap();
        })
        .await;
        assert!(own.iter().all(|m| &m.payload[..] == b"own"), "{v}: a forged report was delivered");
        let subjects: Vec<&str> = own.iter().map(|m| m.subject.as_str()).collect();
        assert!(subjects.contains(&"lh.pod.bkk.bkk-pod1.report"), "{v}: {subjects:?}");
        let crossed = tokio::time::timeout(Duration::from_millis(300), europe_reports.next()).await;
        assert!(crossed.ok().flatten().is_none(), "{v}: a bkk pod reported in europe");

        // A pod cannot subscribe to every pod's leases either.
        let mut all = evil.subscribe("lh.pod.bkk.*.lease").await.unwrap();
        let _ = evil.flush().await;
        dc.publish("lh.pod.bkk.bkk-pod2.lease", "theirs".into()).await.unwrap();
        dc.flush().await.unwrap();
        let stolen = tokio::time::timeout(Duration::from_millis(300), all.next()).await;
        assert!(stolen.ok().flatten().is_none(), "{v}: a pod read every pod's leases");

        // A DC's leaf-link credential cannot log in as a client (it may do everything, but only as
        // a leaf-node link).
        let leaf = connect_with_creds(&url, Some(&auth.creds("leaf-bkk")), "leaf-as-client").await;
        assert!(leaf.is_err(), "{v}: the leaf credential logged in as a client");

        // A credential made with another operator's keys (same roles, same names) is refused.
        let foreign = ProdAuth::new(&["bkk"]).unwrap();
        let refused = connect_with_creds(&url, Some(&foreign.creds("bkk-pod1")), "foreign").await;
        assert!(refused.is_err(), "{v}: a credential of another operator was accepted");

        // A pod cannot read another pod's lease.
        let mut theirs = evil.subscribe("lh.pod.bkk.bkk-pod2.lease").await.unwrap();
        let _ = evil.flush().await;
        let mut mine = pod1.subscribe("lh.pod.bkk.bkk-pod1.lease").await.unwrap();
        pod1.flush().await.unwrap();
        delivered(&mut mine, || async {
            dc.publish("lh.pod.bkk.bkk-pod2.lease", "theirs".into()).await.unwrap();
            dc.publish("lh.pod.bkk.bkk-pod1.lease", "mine".into()).await.unwrap();
            dc.flush().await.unwrap();
        })
        .await;
        let stolen = tokio::time::timeout(Duration::from_millis(300), theirs.next()).await;
        assert!(stolen.ok().flatten().is_none(), "{v}: a pod read another pod's lease");

        // Only the coordinator writes the ledger.
        let cjs = jetstream(coord.clone());
        let ledger = ensure_bucket(&cjs, &BucketSpec::new("lh_ledger")).await.unwrap();
        let leaders_spec = BucketSpec { max_age: Duration::from_secs(30), ..BucketSpec::new("lh_leaders") };
        ensure_bucket(&cjs, &leaders_spec).await.unwrap();
        let rev = match compare_and_set(&ledger, "partner-api", Bytes::from("genuine"), None).await.unwrap() {
            CasOutcome::Written { revision } => revision,
            other => panic!("{v}: the coordinator could not write the ledger: {other:?}"),
        };
        let djs = jetstream(dc.clone());
        let dc_ledger = djs.get_key_value("lh_ledger").await.unwrap();
        let forged = compare_and_set(&dc_ledger, "partner-api", Bytes::from("forged"), Some(rev)).await;
        assert!(!matches!(forged, Ok(CasOutcome::Written { .. })), "{v}: a DC manager wrote the ledger");
        assert_eq!(read(&ledger, "partner-api").await.unwrap().unwrap().1, Bytes::from("genuine"), "{v}");

        // A DC manager holds its own DC's leader key, not another DC's.
        let dc_leaders = djs.get_key_value("lh_leaders").await.unwrap();
        let own = compare_and_set(&dc_leaders, "dc.bkk", Bytes::from("bkk-mgr"), None).await;
        assert!(matches!(own, Ok(CasOutcome::Written { .. })), "{v}: {own:?}");
        let other = compare_and_set(&dc_leaders, "dc.europe", Bytes::from("bkk-mgr"), None).await;
        assert!(!matches!(other, Ok(CasOutcome::Written { .. })), "{v}: took another DC's leader key");

        // A revoked pod: once the servers reload the account signed with the revocation, its
        // connection is closed and its credential refused; every other pod keeps working.
        let doomed_creds = auth.issue("pod-bkk", "bkk-pod9").unwrap();
        let doomed = connect_with_creds(&url, Some(&doomed_creds), "doomed").await.unwrap();
        doomed.flush().await.unwrap();
        server.reload_with("resolver.conf", &auth.revoke(&doomed_creds).unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut poll = tokio::time::interval(Duration::from_millis(20));
        while doomed.connection_state() == async_nats::connection::State::Connected {
            assert!(Instant::now() < deadline, "{v}: the revoked pod is still connected after 10 s");
            poll.tick().await;
        }
        let again = connect_with_creds(&url, Some(&doomed_creds), "doomed-again").await;
        assert!(again.is_err(), "{v}: a revoked credential logged in");
        pod1.publish("lh.pod.bkk.bkk-pod1.report", "still here".into()).await.unwrap();
        pod1.flush().await.unwrap();
        assert_eq!(pod1.connection_state(), async_nats::connection::State::Connected, "{v}");

        drop(doomed);
        // JetStream serves the account again after the reload (the ledger reads back).
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut poll = tokio::time::interval(Duration::from_millis(50));
        while !matches!(read(&ledger, "partner-api").await, Ok(Some(_))) {
            assert!(
                Instant::now() < deadline,
                "{v}: the ledger unreadable 10 s after the reload; server: {:?}",
                server.log_tail(20)
            );
            poll.tick().await;
        }
    }
}

/// The first `expected` messages stored on `subject` of the admissions stream, read as a new
/// owner replays a shard (an ordered pull consumer).
async fn stored_on(js: &Context, subject: &str, expected: usize) -> Result<Vec<Bytes>, String> {
    let stream = js.get_stream(KEYS_ADMISSIONS_STREAM).await.map_err(|e| e.to_string())?;
    let config = consumer::pull::OrderedConfig { filter_subject: subject.into(), ..Default::default() };
    let consumer = stream.create_consumer(config).await.map_err(|e| e.to_string())?;
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    while got.len() < expected {
        match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
            Ok(Some(Ok(m))) => got.push(m.payload.clone()),
            _ => return Err(format!("{} of {expected} messages read", got.len())),
        }
    }
    Ok(got)
}

/// The answer to a request "from a peer" on `subject`, asked again until one comes (core NATS
/// does not retry), within 10 s.
async fn answered(client: &async_nats::Client, subject: &str) -> Bytes {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.request(subject.to_string(), "from a peer".into()).await {
            Ok(m) => return m.payload,
            Err(e) => assert!(Instant::now() < deadline, "no answer on {subject} within 10 s: {e}"),
        }
    }
}

/// A JetStream publish the server does not store (refused: no acknowledgement comes).
async fn not_stored(js: &Context, subject: &str) -> bool {
    match js.publish(subject.to_string(), Bytes::from("forged")).await {
        Ok(ack) => ack.await.is_err(),
        Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_roles_hold_only_the_per_key_subjects_buckets_and_stream() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let (server, auth) = prod_auth::start(&bin).unwrap();
        let (v, url) = (server.version.clone(), server.url());
        let instance = auth.client(&url, "keys-instance").await;
        let peer = auth.client(&url, "keys-instance").await;
        let admin = auth.client(&url, "keys-admin").await;
        let pod = auth.client(&url, "bkk-pod1").await;
        let (dc, coord) = (auth.client(&url, "dc-bkk").await, auth.client(&url, "coordinator").await);
        let (ijs, ajs, pjs) = (jetstream(instance.clone()), jetstream(admin.clone()), jetstream(pod.clone()));

        // What an instance does at start: create both buckets and the admissions stream, and
        // raise the stream's max_age.
        let shards =
            ensure_bucket(&ijs, &BucketSpec::new(KEYS_SHARDS_BUCKET)).await.unwrap_or_else(|e| panic!("{v}: {e}"));
        let config =
            ensure_bucket(&ijs, &BucketSpec::new(KEYS_CONFIG_BUCKET)).await.unwrap_or_else(|e| panic!("{v}: {e}"));
        let adm = stream::Config {
            name: KEYS_ADMISSIONS_STREAM.into(),
            subjects: vec![keys_admissions_wildcard()],
            max_age: Duration::from_secs(60),
            ..Default::default()
        };
        ensure_stream(&ijs, adm.clone()).await.unwrap_or_else(|e| panic!("{v}: {e}"));
        let raised = stream::Config { max_age: Duration::from_secs(120), ..adm };
        ijs.update_stream(raised).await.unwrap_or_else(|e| panic!("{v}: raising max_age: {e}"));

        // It holds a shard by compare-and-set and follows the bucket.
        let mut changes = shards.watch_with_history(">").await.unwrap();
        let record = Bytes::from(r#"{"v":1,"owner":"a"}"#);
        let held = match compare_and_set(&shards, "shard.3", record.clone(), None).await {
            Ok(CasOutcome::Written { revision }) => revision,
            other => panic!("{v}: an instance could not hold a shard: {other:?}"),
        };
        let seen = tokio::time::timeout(Duration::from_secs(5), changes.next()).await;
        assert!(matches!(&seen, Ok(Some(Ok(e))) if e.key == "shard.3"), "{v}: the watch saw {seen:?}");
        // Another instance's claim of the same shard is a conflict (it reads the record), not a
        // timeout.
        let peer_shards = jetstream(peer.clone()).get_key_value(KEYS_SHARDS_BUCKET).await.unwrap();
        let claim = compare_and_set(&peer_shards, "shard.3", Bytes::from(r#"{"v":1,"owner":"b"}"#), None).await;
        assert!(matches!(claim, Ok(CasOutcome::Conflict)), "{v}: {claim:?}");

        // It stores admissions and replays them.
        let batch = Bytes::from(r#"{"v":1,"admissions":[["alice",1,1,null]]}"#);
        let adm3 = keys_admissions(3);
        ijs.publish(adm3.clone(), batch.clone()).await.unwrap().await.unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(stored_on(&ijs, &adm3, 1).await, Ok(vec![batch.clone()]), "{v}");

        // It answers requests on its shards' subjects, and asks another instance's.
        let mut checks = instance.subscribe("lh.keys.check.*").await.unwrap();
        instance.flush().await.unwrap();
        let (asked_tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
        let answerer = instance.clone();
        tokio::spawn(async move {
            while let Some(m) = checks.next().await {
                let _ = asked_tx.send(m.payload.clone());
                if let Some(reply) = m.reply {
                    let _ = answerer.publish(reply, "answer".into()).await;
                }
            }
        });
        assert_eq!(answered(&peer, &keys_check(5)).await, Bytes::from("answer"), "{v}");

        // The admin writes the tiers; the instance reads them and sees them change.
        let mut tiers_seen = config.watch(KEYS_TIERS_KEY).await.unwrap();
        let admin_config = ajs.get_key_value(KEYS_CONFIG_BUCKET).await.unwrap_or_else(|e| panic!("{v}: {e}"));
        let tiers = Bytes::from(r#"{"default_tier":"t","tiers":{"t":{"limit":3,"window_ms":60000}}}"#);
        let tiers_rev = match compare_and_set(&admin_config, KEYS_TIERS_KEY, tiers.clone(), None).await {
            Ok(CasOutcome::Written { revision }) => revision,
            other => panic!("{v}: the admin could not write the tiers: {other:?}"),
        };
        let seen = tokio::time::timeout(Duration::from_secs(5), tiers_seen.next()).await;
        assert!(matches!(&seen, Ok(Some(Ok(e))) if e.value == tiers), "{v}: the tiers watch saw {seen:?}");
        assert_eq!(read(&config, KEYS_TIERS_KEY).await.unwrap().map(|(_, b)| b), Some(tiers.clone()), "{v}");

        // The admin reads the shards and the admissions.
        let admin_shards = ajs.get_key_value(KEYS_SHARDS_BUCKET).await.unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(read(&admin_shards, "shard.3").await.unwrap().map(|(_, b)| b), Some(record.clone()), "{v}");
        assert_eq!(stored_on(&ajs, &adm3, 1).await, Ok(vec![batch.clone()]), "{v}: the admin's replay");

        // A pod sees no request for a shard.
        let mut pod_checks = pod.subscribe("lh.keys.check.*").await.unwrap();
        let _ = pod.flush().await;
        answered(&peer, &keys_check(6)).await;
        let pod_saw = tokio::time::timeout(Duration::from_millis(300), pod_checks.next()).await;
        assert!(pod_saw.ok().flatten().is_none(), "{v}: a pod read a request for a shard");

        // The coordinator's ledger, and a pod's lease subject, for the instance to try.
        let ledger = ensure_bucket(&jetstream(coord.clone()), &BucketSpec::new("lh_ledger")).await.unwrap();
        let genuine = Bytes::from("genuine");
        assert!(matches!(
            compare_and_set(&ledger, "partner-api", genuine.clone(), None).await,
            Ok(CasOutcome::Written { .. })
        ));
        let mut lease = pod.subscribe("lh.pod.bkk.bkk-pod1.lease").await.unwrap();
        pod.flush().await.unwrap();
        let leases = delivered(&mut lease, || async {
            let _ = instance.publish("lh.pod.bkk.bkk-pod1.lease", "forged".into()).await;
            let _ = instance.flush().await;
            dc.publish("lh.pod.bkk.bkk-pod1.lease", "genuine".into()).await.unwrap();
            dc.flush().await.unwrap();
        })
        .await;
        assert!(leases.iter().all(|m| m.payload == genuine), "{v}: a keys instance leased a pod");

        // Refused, all at once (each waits for an answer that never comes).
        let adm_stream = ijs.get_stream(KEYS_ADMISSIONS_STREAM).await.unwrap();
        let (
            instance_tiers,
            admin_shard,
            admin_stored,
            pod_stored,
            ledger_written,
            admin_asked,
            pod_asked,
            deleted,
            purged,
        ) = tokio::join!(
            compare_and_set(&config, KEYS_TIERS_KEY, Bytes::from("forged"), Some(tiers_rev)),
            compare_and_set(&admin_shards, "shard.3", Bytes::from(r#"{"v":1,"owner":"admin"}"#), Some(held)),
            not_stored(&ajs, &adm3),
            not_stored(&pjs, &adm3),
            not_stored(&ijs, "$KV.lh_ledger.partner-api"),
            admin.request(keys_check(5), "from the admin".into()),
            pod.request(keys_check(5), "from a pod".into()),
            ijs.delete_stream(KEYS_ADMISSIONS_STREAM),
            adm_stream.purge(),
        );
        assert!(!matches!(instance_tiers, Ok(CasOutcome::Written { .. })), "{v}: an instance wrote the tiers");
        assert!(!matches!(admin_shard, Ok(CasOutcome::Written { .. })), "{v}: the admin took a shard");
        assert!(
            admin_stored && pod_stored,
            "{v}: an admission stored by the admin ({admin_stored}) or a pod ({pod_stored})"
        );
        assert!(ledger_written, "{v}: a keys instance wrote the ledger");
        assert!(admin_asked.is_err() && pod_asked.is_err(), "{v}: the admin or a pod asked a shard's owner");
        assert!(deleted.is_err() && purged.is_err(), "{v}: an instance deleted or purged the admissions");
        // And nothing changed.
        assert_eq!(read(&config, KEYS_TIERS_KEY).await.unwrap().map(|(_, b)| b), Some(tiers), "{v}");
        assert_eq!(read(&admin_shards, "shard.3").await.unwrap().map(|(_, b)| b), Some(record), "{v}");
        assert_eq!(stored_on(&ijs, &adm3, 1).await, Ok(vec![batch]), "{v}");
        let info = ajs.get_stream(KEYS_ADMISSIONS_STREAM).await.unwrap().info().await.unwrap().state.messages;
        assert_eq!(info, 1, "{v}: messages in {KEYS_ADMISSIONS_STREAM}");
        assert_eq!(read(&ledger, "partner-api").await.unwrap().map(|(_, b)| b), Some(genuine), "{v}");
        while let Ok(payload) = asked.try_recv() {
            assert_eq!(payload, Bytes::from("from a peer"), "{v}: a request reached the instance");
        }
    }
}

/// The leaf-node URL variables a DC node's file reads (`nats/prod/<dc>-<n>.conf`), pointing at
/// the shipped hub nodes' leaf ports: enough to check the files.
const TEST_LEAF_URLS: [(&str, &str); 6] = [
    ("LH_LEAF_BKK_URL_1", "nats-leaf://127.0.0.1:17211"),
    ("LH_LEAF_BKK_URL_2", "nats-leaf://127.0.0.1:17212"),
    ("LH_LEAF_BKK_URL_3", "nats-leaf://127.0.0.1:17213"),
    ("LH_LEAF_EUROPE_URL_1", "nats-leaf://127.0.0.1:17211"),
    ("LH_LEAF_EUROPE_URL_2", "nats-leaf://127.0.0.1:17212"),
    ("LH_LEAF_EUROPE_URL_3", "nats-leaf://127.0.0.1:17213"),
];

/// Every shipped node file, with the credentials `leasehold auth setup` makes next to it (in a
/// copy of the tree: nats/prod/auth/ is the operator's, never in the repository), is accepted by
/// every server.
#[test]
fn every_shipped_server_config_is_valid_on_every_server() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../nats");
    let auth = ProdAuth::new(&["bkk", "europe"]).unwrap();
    let copy = auth.dir().join("tree");
    std::fs::create_dir_all(copy.join("nats/prod/auth")).unwrap();
    let made = auth::setup(&copy.join("nats/prod/auth"), prod_auth::ROLES_TOML, &["bkk".into(), "europe".into()], 0);
    made.unwrap();
    let mut files = vec![root.join("dev.conf")];
    let mut prod: Vec<_> = std::fs::read_dir(root.join("prod"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .map(|p| {
            let to = copy.join("nats/prod").join(p.file_name().unwrap());
            std::fs::copy(&p, &to).unwrap();
            to
        })
        .collect();
    prod.sort();
    assert!(prod.len() >= 9, "the hub and two DCs, 3 nodes each, expected, found {prod:?}");
    files.extend(prod);
    for bin in binaries().expect("a nats-server is needed") {
        for f in &files {
            let out = std::process::Command::new(&bin)
                .arg("-t")
                .arg("-c")
                .arg(f)
                .current_dir(&copy)
                .envs(TEST_LEAF_URLS.iter().copied())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{} rejects {}: {}",
                bin.display(),
                f.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
