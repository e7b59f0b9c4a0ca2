//! ratelimit's own descriptor lookups on its own fixtures (`tests/peer/`), each case naming the
//! test it comes from in envoyproxy/ratelimit (commit in `tests/peer/README.md`). An answer is
//! written as a line: `none` (no limit: OK, nothing counted), `unlimited`, `global <id>` (one
//! Leasehold limit for every request that lands there), `per-value <tier>` (each value counted
//! apart by the per-key limiter), or `blocked` (`requests_per_unit: 0`: every request over),
//! then `<requests_per_unit>/<unit>`, and `shadow` / `quota` when set.

use crate::peer_fixtures::{load_peer, peer_dir};
use leasehold_envoy::{overall_over_limit, DescriptorEntry, RlsConfig};

fn answer(c: &RlsConfig, domain: &str, entries: &[(&str, &str)]) -> String {
    let entries: Vec<DescriptorEntry<'_>> = entries.iter().map(|(key, value)| DescriptorEntry { key, value }).collect();
    let Some(l) = c.lookup(domain, &entries) else { return "none".into() };
    let Some((n, unit)) = l.per_unit else { return "unlimited".into() };
    let what = match (&l.limit, &l.tier) {
        (Some(id), _) => format!("global {id}"),
        (None, Some(tier)) => format!("per-value {tier}"),
        (None, None) if l.denies_every_request() => "blocked".into(),
        (None, None) => "neither".into(),
    };
    let mut line = format!("{what} {n}/{}", format!("{unit:?}").to_lowercase());
    if l.shadow_mode {
        line.push_str(" shadow");
    }
    if l.quota_mode {
        line.push_str(" quota");
    }
    line
}

fn check(c: &RlsConfig, domain: &str, cases: &[(&[(&str, &str)], &str)]) {
    for (entries, want) in cases {
        assert_eq!(answer(c, domain, entries), *want, "{domain} {entries:?}");
    }
}

fn fixture(path: &str) -> RlsConfig {
    load_peer(&[path], false).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn test_basic_config() {
    // config_test.go TestBasicConfig.
    let c = fixture("test/config/basic_config.yaml");
    check(&c, "foo_domain", &[(&[], "none")]);
    check(
        &c,
        "test-domain",
        &[
            (&[], "none"),
            (&[("key1", "something")], "none"),
            (&[("key1", "value1")], "none"),
            (&[("key2", "value2"), ("subkey", "subvalue")], "none"),
            (&[("key5", "value5"), ("subkey5", "subvalue")], "none"),
            (&[("key1", "value1"), ("subkey1", "something")], "per-value test-domain/key1_value1/subkey1 5/second"),
            (
                &[("key1", "value1"), ("subkey1", "subvalue1")],
                "global test-domain/key1_value1/subkey1_subvalue1 10/second",
            ),
            (&[("key2", "something")], "per-value test-domain/key2 20/minute"),
            (&[("key2", "value2")], "global test-domain/key2_value2 30/minute"),
            (&[("key2", "value3")], "none"),
            (&[("key3", "foo")], "per-value test-domain/key3 1/hour"),
            (&[("key4", "foo")], "per-value test-domain/key4 1/day"),
            (&[("key6", "foo")], "unlimited"),
            (&[("key7", "unspecified_value")], "per-value test-domain/key7 70/minute"),
            (&[("key7", "another_value")], "per-value test-domain/key7 70/minute"),
        ],
    );
    let key4 = c.lookup("test-domain", &[DescriptorEntry { key: "key4", value: "foo" }]).expect("key4");
    assert_eq!(key4.name.as_deref(), Some("key4_rate_limit"));
}

#[test]
fn test_domain_merge_and_metadata() {
    // config_test.go TestDomainMerge, TestMetadata.
    let merged = ["test/config/merge_domain_key1.yaml", "test/config/merge_domain_key2.yaml"];
    let c = load_peer(&merged, true).expect("merged");
    check(&c, "test-domain", &[(&[], "none")]);
    check(&c, "test-domain", &[(&[("key1", "value1")], "global test-domain/key1_value1 10/minute")]);
    check(&c, "test-domain", &[(&[("key2", "value2")], "global test-domain/key2_value2 20/minute")]);
    let c = fixture("test/config/metadata.yaml");
    check(&c, "test-domain", &[(&[], "none")]);
    check(
        &c,
        "test-domain",
        &[(&[("key1", "value1"), ("subkey1", "something")], "per-value test-domain/key1_value1/subkey1 5/second")],
    );
    check(&c, "test-domain", &[(&[("key2", "something")], "per-value test-domain/key2 20/minute")]);
}

#[test]
fn test_shadow_mode_config() {
    // config_test.go TestShadowModeConfig.
    let c = fixture("test/config/shadowmode_config.yaml");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("key1", "value1"), ("subkey1", "something")], "per-value test-domain/key1_value1/subkey1 5/second"),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            "global test-domain/key1_value1/subkey1_subvalue1 10/second shadow",
        ),
        (&[("key2", "something")], "per-value test-domain/key2 20/minute shadow"),
        (&[("key2", "value2")], "global test-domain/key2_value2 30/minute"),
    ];
    check(&c, "test-domain", cases);
}

#[test]
fn test_wildcard_config() {
    // config_test.go TestWildcardConfig: a `*` counts each value apart (ratelimit's cache key
    // holds the request's value), so these are per value; `bar*b` and `foo*bar*baz` match in
    // the middle.
    let c = fixture("test/config/wildcard.yaml");
    let d = "test-domain";
    check(&c, d, &[(&[("noVal", "foo1")], "per-value test-domain/noVal 20/minute")]);
    check(&c, d, &[(&[("wild", "foo1")], "per-value test-domain/wild_foo=2A 20/minute")]);
    check(&c, d, &[(&[("wild", "foo2")], "per-value test-domain/wild_foo=2A 20/minute")]);
    let nested = "per-value test-domain/nestedWild_val1/wild_goo=2A 20/minute";
    check(&c, d, &[(&[("nestedWild", "val1"), ("wild", "goo2")], nested)]);
    check(&c, d, &[(&[("wild", "bar")], "none"), (&[("noWild", "foo1")], "none")]);
    let mid = "per-value test-domain/midWild_bar=2Ab 20/minute";
    for value in ["barab", "bar123b", "barb"] {
        check(&c, d, &[(&[("midWild", value)], mid)]);
    }
    check(&c, d, &[(&[("midWild", "bara")], "none"), (&[("midWild", "xbarb")], "none")]);
    let multi = "per-value test-domain/multiWild_foo=2Abar=2Abaz 10/minute";
    for value in ["foo123bar456baz", "foobarbaz"] {
        check(&c, d, &[(&[("multiWild", value)], multi)]);
    }
    check(&c, d, &[(&[("multiWild", "foo123baz")], "none"), (&[("multiWild", "bar456baz")], "none")]);
}

#[test]
fn test_share_threshold() {
    // config_test.go TestShareThreshold: every value a shared wildcard matches is one counter
    // (ratelimit's cache key holds the pattern), so a path of fixed and shared levels is one
    // global limit; a level without share_threshold keeps counting each value apart.
    let c = fixture("test/config/share_threshold.yaml");
    let d = "test-domain";
    for value in ["files/a.pdf", "files/b.csv", "files/c.txt"] {
        check(&c, d, &[(&[("files", value)], "global test-domain/files_files=2F=2A 100/minute")]);
    }
    let per_method = "per-value test-domain/route_api=2F=2A/method 60/minute";
    check(&c, d, &[(&[("route", "api/v1"), ("method", "GET")], per_method)]);
    let per_endpoint = "per-value test-domain/service_svc=2F=2A/endpoint 80/minute";
    check(&c, d, &[(&[("service", "svc/user"), ("endpoint", "get")], per_endpoint)]);
    let nested = "global test-domain/nested_parent/files_nested=2F=2A 200/minute";
    check(&c, d, &[(&[("nested", "parent"), ("files", "nested/file1.txt")], nested)]);
    let twice = "global test-domain/files_top=2F=2A/files_nested=2F=2A 300/minute";
    check(&c, d, &[(&[("files", "top/file1.txt"), ("files", "nested/file1.txt")], twice)]);
    let mixed = "per-value test-domain/path_path=2F=2A/file_file=2F=2A/type 120/minute";
    check(&c, d, &[(&[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")], mixed)]);
    let both = "per-value test-domain/user_user=2F=2A/resource_res=2F=2A/action 150/minute";
    check(&c, d, &[(&[("user", "user/alice"), ("resource", "res/file1"), ("action", "read")], both)]);
    check(&c, d, &[(&[("file", "test1")], "global test-domain/file_test1 50/minute")]);
    for value in ["test2", "test123", "testABC"] {
        check(&c, d, &[(&[("file", value)], "global test-domain/file_test=2A 100/minute")]);
    }
    for value in ["/api/v1", "/api-beta-v1", "/apiv1"] {
        check(&c, d, &[(&[("midpath", value)], "global test-domain/midpath_=2Fapi=2Av1 100/minute")]);
    }
    check(&c, d, &[(&[("midpath", "/api/v2")], "none"), (&[("multiroute", "svcABCrpc")], "none")]);
    for value in ["svcAepBrpc", "svcepZrpc"] {
        check(&c, d, &[(&[("multiroute", value)], "global test-domain/multiroute_svc=2Aep=2Arpc 50/minute")]);
    }
    for value in ["/api/v2", "/api-beta-v2"] {
        check(&c, d, &[(&[("midroute", value)], "global test-domain/midroute_=2Fapi=2Av2 80/minute")]);
    }
    let tenant = "global test-domain/tenant_t=2Aprod/resource_res=2Av2 60/minute";
    check(&c, d, &[(&[("tenant", "t1prod"), ("resource", "resAv2")], tenant)]);
    check(&c, d, &[(&[("tenant", "t99prod"), ("resource", "resBBBv2")], tenant)]);
    // Shared levels under a per-value one are counted by their pattern: one key for every user.
    let e = |key, value| DescriptorEntry { key, value };
    let l = c.lookup(d, &[e("path", "path/foo"), e("file", "file/doc1"), e("type", "pdf")]).expect("mixed");
    let other_path = l.key_for(&[e("path", "path/bar"), e("file", "file/doc1"), e("type", "pdf")]);
    assert_eq!(l.key_for(&[e("path", "path/foo"), e("file", "file/doc1"), e("type", "pdf")]), other_path);
    assert_ne!(l.key_for(&[e("path", "path/foo"), e("file", "file/doc2"), e("type", "pdf")]), other_path);
}

#[test]
fn the_integration_tests_requests() {
    // integration_test.go testBasicBaseConfig, testShareThreshold and testConfigReload, on the
    // runtime directory (with reload.yaml, as the reload test adds it).
    let mut files = peer_dir("test/integration/runtime/current/ratelimit/config");
    files.push("test/integration/runtime/current/ratelimit/reload.yaml".into());
    let paths: Vec<&str> = files.iter().map(String::as_str).collect();
    let c = load_peer(&paths, false).expect("the runtime directory");
    check(&c, "foo", &[(&[("hello", "world")], "none")]);
    check(&c, "basic", &[(&[("key1", "foo")], "per-value basic/key1 50/second")]);
    check(&c, "basic", &[(&[("one_per_minute", "foo")], "per-value basic/one_per_minute 1/minute")]);
    check(&c, "another", &[(&[("key2", "foo")], "per-value another/key2 20/minute")]);
    check(&c, "another", &[(&[("key3", "foo")], "per-value another/key3 10/hour")]);
    check(&c, "another", &[(&[("key4", "foo")], "per-value another/key4 20/day")]);
    let shared = "global share-threshold-test/files_files=2F=2A 10/hour";
    check(&c, "share-threshold-test", &[(&[("files", "files/a.pdf")], shared), (&[("files", "files/b.csv")], shared)]);
    let apart = "per-value share-threshold-test/files_no_share_files_no_share=2F=2A 10/hour";
    check(&c, "share-threshold-test", &[(&[("files_no_share", "files_no_share/1-2")], apart)]);
    let e = |value| [DescriptorEntry { key: "files_no_share", value }];
    let l = c.lookup("share-threshold-test", &e("files_no_share/1")).expect("matched");
    assert_ne!(l.key_for(&e("files_no_share/1")), l.key_for(&e("files_no_share/2")), "isolated thresholds");
    check(
        &c,
        "reload",
        &[(&[("block", "foo")], "blocked 0/second"), (&[("key1", "foo")], "per-value reload/key1 50/second")],
    );
}

#[test]
fn the_example_deployment() {
    // examples/ratelimit/config: replaces, a zero limit, shadow and quota modes.
    let files = peer_dir("examples/ratelimit/config");
    let paths: Vec<&str> = files.iter().map(String::as_str).collect();
    let c = load_peer(&paths, false).expect("the examples");
    check(&c, "mongo_cps", &[(&[("database", "users")], "global mongo_cps/database_users 500/second")]);
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("category", "account")], "global rl/category_account 4/minute"),
        (
            &[("source_cluster", "proxy"), ("destination_cluster", "mock")],
            "global rl/source_cluster_proxy/destination_cluster_mock 1/minute",
        ),
        (&[("foo", "x")], "per-value rl/foo 2/minute"),
        (&[("foo", "x"), ("bar", "banned")], "blocked 0/minute"),
        (&[("foo", "x"), ("bar", "bkthomps")], "per-value rl/foo/bar_bkthomps 1/minute"),
        (&[("foo", "x"), ("baz", "shady")], "per-value rl/foo/baz_shady 3/minute shadow"),
        (&[("foo", "x"), ("bay", "y")], "unlimited"),
        (&[("qux", "y")], "unlimited"),
        (&[("service", "service_1")], "global rl/service_service_1 1/minute quota"),
        (&[("service", "service_2")], "global rl/service_service_2 2/minute quota"),
    ];
    check(&c, "rl", cases);
}

#[test]
fn the_services_quota_mode_rule() {
    // ratelimit_test.go: (descriptor over, in quota_mode) → overall OVER_LIMIT.
    // TestServiceQuotaModeOnlyAllOverTheLimit, TestServiceQuotaModeOnlySomeOverTheLimit:
    assert!(overall_over_limit([(true, true), (true, true)]));
    assert!(!overall_over_limit([(true, true), (false, true)]));
    // TestServicePerDescriptorQuotaMode's three requests:
    assert!(overall_over_limit([(true, false), (false, true)]));
    assert!(overall_over_limit([(false, false), (true, true)]));
    assert!(!overall_over_limit([(false, false), (false, true)]));
}
