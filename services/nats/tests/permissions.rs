//! `nats/prod/accounts.conf` enforced by real servers: a pod publishes only its own demand and
//! reads only its own lease; only the coordinator writes the ledger; a DC manager holds only its
//! own DC's leader key.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use bytes::Bytes;
use futures::StreamExt;
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, ensure_bucket, read, BucketSpec, CasOutcome};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};

const ACCOUNTS: &str = include_str!("../../../nats/prod/accounts.conf");
const ENV: [(&str, &str); 6] = [
    ("LH_SYS_PASSWORD", "sys-pw"),
    ("LH_COORDINATOR_PASSWORD", "coord-pw"),
    ("LH_DC_BKK_PASSWORD", "bkk-pw"),
    ("LH_DC_EUROPE_PASSWORD", "eu-pw"),
    ("LH_POD_PASSWORD", "pod-pw"),
    ("LH_INSPECT_PASSWORD", "inspect-pw"),
];

async fn as_user(server: &NatsServer, user: &str, password: &str) -> async_nats::Client {
    let url = format!("nats://{user}:{password}@127.0.0.1:{}", server.port());
    wait::client(&url, user).await
}

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
        let files = [("server.conf", "include ./accounts.conf\n"), ("accounts.conf", ACCOUNTS)];
        let server = NatsServer::start_with_config(&bin, &files, &ENV).unwrap();
        let v = server.version.clone();
        let coord = as_user(&server, "coordinator", "coord-pw").await;
        let dc = as_user(&server, "dc-bkk", "bkk-pw").await;
        let pod1 = as_user(&server, "bkk-pod1", "pod-pw").await;

        // A forged report for another pod is dropped by the server; the pod's own arrives. Both
        // are re-sent until the own one is seen (core NATS does not retry); the forged one must
        // never be. The forbidden actions use their own connection.
        let evil = as_user(&server, "bkk-pod1", "pod-pw").await;
        let mut reports = dc.subscribe("lh.*.pod.bkk.*.report").await.unwrap();
        dc.flush().await.unwrap();
        let own = delivered(&mut reports, || async {
            let _ = evil.publish("lh.partner-api.pod.bkk.bkk-pod2.report", "forged".into()).await;
            let _ = evil.flush().await;
            pod1.publish("lh.partner-api.pod.bkk.bkk-pod1.report", "own".into()).await.unwrap();
            pod1.flush().await.unwrap();
        })
        .await;
        assert!(own.iter().all(|m| &m.payload[..] == b"own"), "{v}: a forged report was delivered");

        // A pod cannot read another pod's lease.
        let mut theirs = evil.subscribe("lh.partner-api.pod.bkk.bkk-pod2.lease").await.unwrap();
        let _ = evil.flush().await;
        let mut mine = pod1.subscribe("lh.partner-api.pod.bkk.bkk-pod1.lease").await.unwrap();
        pod1.flush().await.unwrap();
        delivered(&mut mine, || async {
            dc.publish("lh.partner-api.pod.bkk.bkk-pod2.lease", "theirs".into()).await.unwrap();
            dc.publish("lh.partner-api.pod.bkk.bkk-pod1.lease", "mine".into()).await.unwrap();
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
    }
}

#[test]
fn every_shipped_server_config_is_valid_on_every_server() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../nats");
    let mut files = vec![root.join("dev.conf")];
    let mut prod: Vec<_> = std::fs::read_dir(root.join("prod"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf") && !p.ends_with("accounts.conf"))
        .collect();
    prod.sort();
    assert!(prod.len() >= 6, "two 3-node DC clusters expected, found {prod:?}");
    files.extend(prod);
    for bin in binaries().expect("a nats-server is needed") {
        for f in &files {
            let out = std::process::Command::new(&bin).arg("-t").arg("-c").arg(f).envs(ENV).output().unwrap();
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
