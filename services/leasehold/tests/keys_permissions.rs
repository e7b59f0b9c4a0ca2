//! `leasehold keys` under the production permissions (`nats/prod/roles.toml`), on every
//! server the harness provides: instances running as `keys-instance` share shards, forward,
//! hand over with their state, and apply the tiers the `keys-admin` writes; an instance's own
//! `PUT /v1/tiers` cannot write them (only the admin role may).
#![allow(clippy::disallowed_methods)] // tests measure real time against deadlines (clippy.toml)

use crate::support;

use leasehold_core::subjects::{KEYS_CONFIG_BUCKET, KEYS_TIERS_KEY};
use leasehold_nats::kv::{compare_and_set, CasOutcome};
use leasehold_nats_harness::binaries;
use std::time::{Duration, Instant};
use support::keys_instances::{
    client, count, post, put_tiers, start_with, stop_gracefully, tiers_file, tiers_of, wait_balanced, Instance,
};

use leasehold_nats_harness::prod_auth;

async fn tier_limit(http: &reqwest::Client, i: &Instance) -> u64 {
    let t = tiers_of(http, i).await;
    t["tiers"]["t"]["limit"].as_u64().unwrap_or_else(|| panic!("no limit in {t}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_run_as_keys_instance_and_apply_the_tiers_only_the_admin_may_write() {
    let tiers = tiers_file(2);
    let http = client();
    for bin in binaries().expect("a nats-server is needed: run scripts/nats-servers") {
        let (server, auth) = prod_auth::start(&bin).unwrap();
        let (v, url) = (server.version.clone(), server.url());
        let creds = auth.creds("keys-instance");
        let as_instance = ["--nats-creds-file", creds.to_str().unwrap()];
        let a = start_with(&url, "a", &tiers, "interval:50", &as_instance);
        let mut b = start_with(&url, "b", &tiers, "interval:50", &[&as_instance[..], &["--drain-ms", "100"]].concat());
        wait_balanced(&http, &[&a, &b], Duration::from_secs(20)).await;

        // Decided by each key's owner, whichever instance is asked.
        let keys: Vec<String> = (0..8).map(|k| format!("user-{k}")).collect();
        for (k, key) in keys.iter().enumerate() {
            let (first, second) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
            assert_eq!((post(&http, first, key).await, post(&http, second, key).await), (200, 200), "{v}: {key}");
            assert_eq!((post(&http, &a, key).await, post(&http, &b, key).await), (429, 429), "{v}: {key}");
        }

        // b hands its shards over; a replays them.
        stop_gracefully(&mut b, Duration::from_secs(10));
        wait_balanced(&http, &[&a], Duration::from_secs(10)).await;
        for key in &keys {
            assert_eq!(count(&http, &a, key).await, 2, "{v}: {key} after the hand-over");
            assert_eq!(post(&http, &a, key).await, 429, "{v}: {key} after the hand-over");
        }

        // The admin raises the limit; a applies it.
        let admin = leasehold_nats::connect::jetstream(auth.client(&url, "keys-admin").await);
        let config = admin.get_key_value(KEYS_CONFIG_BUCKET).await.unwrap_or_else(|e| panic!("{v}: {e}"));
        let raised = serde_json::json!({ "default_tier": "t", "tiers": { "t": { "limit": 3, "window_ms": 60_000 } } });
        let written = compare_and_set(&config, KEYS_TIERS_KEY, raised.to_string().into(), None).await;
        assert!(matches!(written, Ok(CasOutcome::Written { .. })), "{v}: the admin's write: {written:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut poll = tokio::time::interval(Duration::from_millis(20));
        while tier_limit(&http, &a).await != 3 {
            assert!(Instant::now() < deadline, "{v}: a never applied the admin's tiers");
            poll.tick().await;
        }
        assert_eq!(post(&http, &a, &keys[0]).await, 200, "{v}: the raised limit");

        // An instance cannot store the tiers itself: its PUT changes nothing anywhere.
        let mine = serde_json::json!({ "default_tier": "t", "tiers": { "t": { "limit": 9, "window_ms": 60_000 } } });
        let r = put_tiers(&http, &a, &mine).await;
        assert_eq!(r.status().as_u16(), 503, "{v}: {}", r.text().await.unwrap());
        assert_eq!(tier_limit(&http, &a).await, 3, "{v}");
        assert_eq!(
            leasehold_nats::kv::read(&config, KEYS_TIERS_KEY).await.unwrap().unwrap().1,
            raised.to_string(),
            "{v}"
        );
    }
}
