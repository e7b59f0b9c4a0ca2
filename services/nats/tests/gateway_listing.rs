//! A bucket's keys listed from the other side of a gateway (`leasehold inspect` pointed at a
//! server of the other cluster never returned). Two single-server clusters, A and B, joined by
//! a gateway; the bucket lives in A; B's client lists it with one stream-info request
//! (`kv::list_keys`). The hang itself was not reproduced here: on the shipped
//! two-cluster topology (`nats/prod`, by hand) the consumer-based `keys()` of `async-nats` took
//! 1.0 s from the far cluster (5–8 ms from the near one; its first delivery is lost and
//! recovered), `list_keys` 2–3 ms from either.
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use bytes::Bytes;
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, ensure_bucket, list_keys, BucketSpec, CasOutcome};
use leasehold_nats_harness::{binaries, wait, NatsServer};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("bound").port()
}

/// Server `me` of cluster `me` with a gateway to cluster `other` (ports: cluster, own gateway,
/// the other's gateway). A clustered JetStream server needs a route: its own (ignored) will do.
fn config(me: &str, other: &str, cluster_port: u16, gateway_port: u16, other_gateway_port: u16) -> String {
    format!(
        "server_name: \"{me}-1\"\n\
         cluster {{ name: \"{me}\", listen: \"127.0.0.1:{cluster_port}\",\n\
           routes: [ \"nats://127.0.0.1:{cluster_port}\" ] }}\n\
         gateway {{ name: \"{me}\", listen: \"127.0.0.1:{gateway_port}\",\n\
           gateways: [ {{ name: \"{other}\", url: \"nats://127.0.0.1:{other_gateway_port}\" }} ] }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_listed_from_the_other_side_of_a_gateway() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let (ga, gb) = (free_port(), free_port());
        let a_conf = config("a", "b", free_port(), ga, gb);
        let b_conf = config("b", "a", free_port(), gb, ga);
        let a = NatsServer::start_with_config(&bin, &[("a.conf", &a_conf)], &[]).expect("a starts");
        let b = NatsServer::start_with_config(&bin, &[("b.conf", &b_conf)], &[]).expect("b starts");
        let who = a.version.clone();
        let js_a = jetstream(wait::client(&a.url(), "writer-in-a").await);
        // The JetStream meta group spans both clusters: the bucket can be made once it has a leader.
        let store = ensure_bucket_within(&js_a, Duration::from_secs(30)).await;
        for key in ["g.0", "g.1", "dc.bkk"] {
            let outcome = compare_and_set(&store, key, Bytes::from_static(b"{}"), None).await.expect("written");
            assert!(matches!(outcome, CasOutcome::Written { .. }), "{who}: {key}: {outcome:?}");
        }
        let js_b = jetstream(wait::client(&b.url(), "reader-in-b").await);
        let far = js_b.get_key_value("lh_listing").await.expect("B opens the bucket that lives in A");
        let listed = tokio::time::timeout(Duration::from_secs(10), list_keys(&far)).await;
        let listed = listed.unwrap_or_else(|_| panic!("{who}: the listing from B did not end within 10 s"));
        assert_eq!(listed.expect("listed"), vec!["dc.bkk", "g.0", "g.1"], "{who}");
        // What the listing replaced, for the record: async-nats's consumer-based `keys()`.
        let consumer_listing = tokio::time::timeout(Duration::from_secs(5), async {
            use futures::TryStreamExt;
            far.keys().await.map_err(|e| e.to_string())?.try_collect::<Vec<String>>().await.map_err(|e| e.to_string())
        })
        .await;
        eprintln!("{who}: listed from B: 3 keys; async-nats keys() from B: {consumer_listing:?}");
    }
}

/// The bucket `lh_listing` in the cluster `js` is connected to, once JetStream is up there.
async fn ensure_bucket_within(
    js: &async_nats::jetstream::Context,
    within: Duration,
) -> async_nats::jetstream::kv::Store {
    let deadline = Instant::now() + within;
    loop {
        match ensure_bucket(js, &BucketSpec::new("lh_listing")).await {
            Ok(store) => return store,
            Err(e) if Instant::now() < deadline => eprintln!("waiting for JetStream across the gateway: {e}"),
            Err(e) => panic!("not within {within:?}: the bucket in cluster a: {e}"),
        }
    }
}
