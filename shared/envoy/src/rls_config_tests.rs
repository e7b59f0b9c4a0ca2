use super::*;

const EDGE: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: partner-api
    rate_limit: { unit: second, requests_per_unit: 1000 }
  - key: destination_cluster
    value: billing
    descriptors:
      - key: method
        value: POST
        rate_limit: { unit: MINUTE, requests_per_unit: 600, name: billing-post }
        shadow_mode: true
      - key: method
        value: 200
        rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: header_match
    value: health
    rate_limit: { unlimited: true }
  - key: remote_address
    rate_limit: { unlimited: true }
  - key: path
    value: /v1/*
    rate_limit: { unlimited: true }
    detailed_metric: true
"#;

fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
    DescriptorEntry { key, value }
}

fn edge() -> RlsConfig {
    RlsConfig::parse([("edge.yaml", EDGE)]).expect("the example parses")
}

fn err(text: &str) -> String {
    RlsConfig::parse([("f.yaml", text)]).expect_err("refused").to_string()
}

#[test]
fn a_fixed_path_is_one_global_limit_named_by_its_full_key() {
    let c = edge();
    let l = c.lookup("edge", &[e("generic_key", "partner-api")]).expect("matched");
    assert_eq!(l.limit.as_deref(), Some("edge/generic_key_partner-api"));
    assert_eq!(l.full_key, "edge.generic_key_partner-api");
    assert_eq!(l.per_unit, Some((1000, Unit::Second)));
    let nested = c.lookup("edge", &[e("destination_cluster", "billing"), e("method", "POST")]).expect("matched");
    assert_eq!(nested.limit.as_deref(), Some("edge/destination_cluster_billing/method_POST"));
    assert_eq!(nested.name.as_deref(), Some("billing-post"));
    assert!(nested.shadow_mode);
    assert_eq!(nested.per_unit, Some((600, Unit::Minute)));
    // A YAML number as a value is its text, as in ratelimit.
    let numeric = c.lookup("edge", &[e("destination_cluster", "billing"), e("method", "200")]).expect("matched");
    assert_eq!(numeric.per_unit, Some((5, Unit::Hour)));
    let ids: Vec<&str> = c.limits().keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        [
            "edge/destination_cluster_billing/method_200",
            "edge/destination_cluster_billing/method_POST",
            "edge/generic_key_partner-api"
        ]
    );
}

#[test]
fn lookups_follow_ratelimits_get_limit() {
    let c = edge();
    // Unknown domain, unknown value, too few or too many entries: no limit.
    assert!(c.lookup("other", &[e("generic_key", "partner-api")]).is_none());
    assert!(c.lookup("edge", &[e("generic_key", "other")]).is_none());
    assert!(c.lookup("edge", &[e("destination_cluster", "billing")]).is_none());
    assert!(c.lookup("edge", &[e("generic_key", "partner-api"), e("x", "y")]).is_none());
    assert!(c.lookup("edge", &[]).is_none());
    // A bare key matches every value; a value ending in * matches by prefix; both unlimited.
    let any = c.lookup("edge", &[e("remote_address", "10.0.0.1")]).expect("bare key");
    assert_eq!((any.limit.as_ref(), any.per_unit), (None, None));
    assert!(c.lookup("edge", &[e("path", "/v1/users")]).is_some());
    assert!(c.lookup("edge", &[e("path", "/v2/users")]).is_none());
    // A fixed value is tried before the bare key.
    let both = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    rate_limit: {unlimited: true}\n";
    let c = RlsConfig::parse([("f", both)]).expect("parses");
    assert_eq!(c.lookup("d", &[e("k", "v")]).and_then(|l| l.limit.as_deref()), Some("d/k_v"));
    assert_eq!(c.lookup("d", &[e("k", "w")]).map(|l| l.limit.is_none()), Some(true));
}

#[test]
fn a_value_is_its_text_as_written() {
    // YAML would read these as numbers or booleans; ratelimit (and Envoy's descriptors) keep the
    // text, so a lossy reading would make a limit that never matches.
    for value in ["1.10", "0x1F", "007", "1e3", "yes", "True", "200"] {
        let text = format!("domain: d\ndescriptors:\n  - key: k\n    value: {value}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n");
        let c = RlsConfig::parse([("f", text.as_str())]).unwrap_or_else(|e| panic!("{value}: {e}"));
        let l = c.lookup("d", &[e("k", value)]).unwrap_or_else(|| panic!("{value} does not match itself"));
        assert_eq!(l.full_key, format!("d.k_{value}"));
    }
}

#[test]
fn characters_a_limit_id_may_not_hold_are_written_as_hex() {
    let text = "domain: api.example\ndescriptors:\n  - key: path\n    value: \"/v1/a b\"\n    rate_limit: {unit: second, requests_per_unit: 3}\n";
    let c = RlsConfig::parse([("f", text)]).expect("parses");
    let id = c.limits().keys().next().expect("one limit").clone();
    assert_eq!(id, "api=2Eexample/path_=2Fv1=2Fa=20b");
    leasehold_core::subjects::limits_key(&id).expect("a valid limit id");
}

#[test]
fn bad_configurations_are_refused_with_ratelimits_reasons() {
    let cases = [
        ("descriptors: []\n", "cannot have empty domain"),
        ("domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", "duplicate descriptor composite key 'd.k_v'"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "invalid rate limit unit 'fortnight'"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {requests_per_unit: 1}\n", "invalid rate limit unit ''"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unlimited: true, unit: second}\n", "should not specify rate limit unit when unlimited"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", "replaces should not contain name of same descriptor"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "empty replaces entry"),
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    ratelimit: {}\n", "config error, unknown key 'ratelimit'"),
        // A key ratelimit knows, in a place where it would ignore it: refused here.
        ("domain: d\ndescriptors:\n  - key: k\n    value: v\n    requests_per_unit: 5\n", "unknown field `requests_per_unit`"),
        ("domain: d\ndescriptors: {}\n", "error loading config file"),
        ("domain: d\ndescriptors:\n  - a\n", "config error, yaml file contains list of type other than map: a"),
        ("0.25: d\n", "config error, key is not of type string: 0.25"),
        ("- a\n", "error loading config file: the document is a list, not a map"),
        ("domain: d\ndescriptors:\n  - key: a_b\n    value: c\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    value: b_c\n    rate_limit: {unit: second, requests_per_unit: 2}\n", "duplicate descriptor composite key 'd.a_b_c'"),
    ];
    for (text, reason) in cases {
        let e = err(text);
        assert!(e.starts_with("f.yaml: ") && e.contains(reason), "{text:?}: got {e:?}, wanted {reason:?}");
    }
}

#[test]
fn a_limit_under_a_bare_key_or_a_prefix_is_per_value_a_tier_of_the_per_key_limiter() {
    let text = "domain: d\ndescriptors:\n  - key: user\n    descriptors:\n      - key: m\n        value: GET\n        rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: p\n    value: a*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: g\n    value: x\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
    let c = RlsConfig::parse([("f", text)]).expect("parses");
    assert_eq!(c.limits().keys().collect::<Vec<_>>(), ["d/g_x"]);
    assert_eq!(c.tiers().keys().collect::<Vec<_>>(), ["d/p_a=2A", "d/user/m_GET"]);
    let per_user = c.lookup("d", &[e("user", "alice.b"), e("m", "GET")]).expect("matched");
    assert_eq!((per_user.limit.as_deref(), per_user.tier.as_deref()), (None, Some("d/user/m_GET")));
    assert_eq!(per_user.per_unit, Some((10, Unit::Minute)));
    // Each user's key: the tier and the request's values, written as in an id.
    let key = per_user.key_for(&[e("user", "alice.b"), e("m", "GET")]);
    assert_eq!(key.as_deref(), Some("d/user/m_GET/alice=2Eb/GET"));
    assert_ne!(key, per_user.key_for(&[e("user", "alice/b"), e("m", "GET")]), "values stay apart");
    let prefixed = c.lookup("d", &[e("p", "abc")]).expect("matched by prefix");
    assert_eq!(prefixed.key_for(&[e("p", "abc")]).as_deref(), Some("d/p_a=2A/abc"));
    // A global limit has no per-value key.
    assert_eq!(c.lookup("d", &[e("g", "x")]).unwrap().key_for(&[e("g", "x")]), None);
}

#[test]
fn a_domain_given_twice_is_refused_and_several_domains_load() {
    let a = "domain: a\ndescriptors: []\n";
    let b = "domain: b\n";
    let c = RlsConfig::parse([("a.yaml", a), ("b.yaml", b)]).expect("two domains");
    assert_eq!(c.domains().collect::<Vec<_>>(), ["a", "b"]);
    let e = RlsConfig::parse([("a.yaml", a), ("again.yaml", a)]).expect_err("refused");
    assert_eq!(e.to_string(), "again.yaml: duplicate domain 'a' in config file");
}
