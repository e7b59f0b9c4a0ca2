//! Against every nats-server we support: the `lh_limits` bucket keeps one definition per limit,
//! writes and removals are compare-and-set on the revision read, seeding never overwrites, and
//! an entry that is not a definition is reported, not skipped.

use bytes::Bytes;
use leasehold_core::limits::{DcDef, Floor, LimitDef, Rate, Tokens};
use leasehold_nats::connect::jetstream;
use leasehold_nats::kv::{compare_and_set, CasOutcome};
use leasehold_nats::limits_store::{self, RemoveOutcome, StoredLimit};
use leasehold_nats_harness::{binaries, wait, NatsServer};

fn def(name: &str, rate: &str) -> LimitDef {
    let mut d = LimitDef::new(name, Rate::parse(rate).unwrap(), Tokens { milli: 20_000 });
    d.dcs = vec![DcDef {
        name: "bkk".into(),
        floor: Floor::Rate(Rate::parse("50/s").unwrap()),
        floor_burst: None,
        weight: 1.0,
        emergency: None,
        emergency_burst: None,
    }];
    d
}

fn written(outcome: CasOutcome, who: &str) -> u64 {
    match outcome {
        CasOutcome::Written { revision } => revision,
        other => panic!("{who}: expected a write, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_are_written_by_compare_and_set_and_removed_with_a_marker() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).expect("server starts");
        let who = server.version.clone();
        eprintln!("limits store against {who}");
        let js = jetstream(wait::client(&server.url(), "limits-store-test").await);
        let store = limits_store::open(&js, 1).await.unwrap_or_else(|e| panic!("{who}: {e}"));
        limits_store::open(&js, 1).await.expect("opening again is fine");
        assert_eq!(limits_store::list(&store).await.unwrap(), vec![], "{who}");
        assert_eq!(limits_store::get(&store, "api").await.unwrap(), None, "{who}");

        let api = def("api", "1000/s");
        let r1 = written(limits_store::put(&store, &api, None).await.unwrap(), &who);
        assert_eq!(limits_store::put(&store, &api, None).await.unwrap(), CasOutcome::Conflict, "{who}: create only");
        let got = limits_store::get(&store, "api").await.unwrap().unwrap();
        assert_eq!(got, StoredLimit { key: "api".into(), revision: r1, def: Ok(api.clone()) }, "{who}");

        // A change from the revision read lands; one from a stale read does not.
        let lower = def("api", "600/s");
        let r2 = written(limits_store::put(&store, &lower, Some(r1)).await.unwrap(), &who);
        assert!(r2 > r1);
        assert_eq!(limits_store::put(&store, &api, Some(r1)).await.unwrap(), CasOutcome::Conflict, "{who}");
        assert_eq!(limits_store::get(&store, "api").await.unwrap().unwrap().def, Ok(lower.clone()));

        // Removal is fenced the same way, then leaves no definition; the name can be created again.
        assert_eq!(limits_store::remove(&store, "api", Some(r1)).await.unwrap(), RemoveOutcome::Conflict, "{who}");
        assert!(limits_store::get(&store, "api").await.unwrap().is_some(), "{who}: a stale removal removed it");
        assert_eq!(limits_store::remove(&store, "api", Some(r2)).await.unwrap(), RemoveOutcome::Removed, "{who}");
        assert_eq!(limits_store::get(&store, "api").await.unwrap(), None, "{who}");
        assert_eq!(limits_store::list(&store).await.unwrap(), vec![], "{who}: a removed limit is not listed");
        let r3 = written(limits_store::put(&store, &api, None).await.unwrap(), &who);
        assert!(r3 > r2, "{who}");

        // Bad names never reach the server.
        assert!(limits_store::get(&store, "a.b").await.is_err(), "{who}");
        assert!(limits_store::remove(&store, "*", None).await.is_err(), "{who}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_entries_are_listed_and_seeding_never_overwrites() {
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let server = NatsServer::start(&bin).expect("server starts");
        let who = server.version.clone();
        eprintln!("limits store against {who}");
        let js = jetstream(wait::client(&server.url(), "limits-store-test").await);
        let store = limits_store::open(&js, 1).await.unwrap_or_else(|e| panic!("{who}: {e}"));

        // Written by hand (as with `nats kv put`): a definition, garbage, a name under another key.
        let by_hand = br#"{"limit":"partner-api","rate":"976/s","burst":20,"dcs":[{"name":"bkk","floor":"50/s"}]}"#;
        let r_hand =
            written(compare_and_set(&store, "partner-api", Bytes::from_static(by_hand), None).await.unwrap(), &who);
        written(compare_and_set(&store, "broken", Bytes::from_static(b"{\"limit\":"), None).await.unwrap(), &who);
        let other = def("other", "1/s").to_json();
        written(compare_and_set(&store, "misfiled", other.into(), None).await.unwrap(), &who);

        let listed = limits_store::list(&store).await.unwrap();
        let keys: Vec<&str> = listed.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["broken", "misfiled", "partner-api"], "{who}: sorted, none skipped");
        assert!(listed[0].def.is_err(), "{who}");
        assert!(listed[1].def.as_ref().unwrap_err().to_string().contains("holds a definition of limit other"), "{who}");
        let hand = listed[2].def.as_ref().unwrap();
        assert_eq!(listed[2].revision, r_hand);
        assert_eq!(hand.to_config().unwrap().quota.rate_milli_per_s, 976_000, "{who}");

        // Seeding creates what is missing and leaves what exists alone.
        let seeded = limits_store::seed(&store, &[def("partner-api", "1/s"), def("new-one", "5/s")]).await.unwrap();
        assert_eq!(seeded.created, vec!["new-one".to_string()], "{who}");
        let kept = limits_store::get(&store, "partner-api").await.unwrap().unwrap();
        assert_eq!(kept.revision, r_hand, "{who}: seeding overwrote an existing definition");
        assert_eq!(limits_store::seed(&store, &[def("new-one", "9/s")]).await.unwrap(), Default::default());
        // A removed limit stays removed: a coordinator restarted with its file must not bring it back.
        assert_eq!(limits_store::remove(&store, "partner-api", None).await.unwrap(), RemoveOutcome::Removed);
        let again = limits_store::seed(&store, &[def("partner-api", "1/s")]).await.unwrap();
        assert_eq!((again.created.len(), again.removed), (0, vec!["partner-api".to_string()]), "{who}");
        assert_eq!(limits_store::get(&store, "partner-api").await.unwrap(), None, "{who}");
        let seeded = limits_store::get(&store, "new-one").await.unwrap().unwrap();
        assert_eq!(seeded.def, Ok(def("new-one", "5/s")), "{who}");
    }
}
