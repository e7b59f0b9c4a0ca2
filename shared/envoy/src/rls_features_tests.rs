//! The parts of ratelimit's configuration beyond the basics: wildcards anywhere in a value,
//! `share_threshold`, the metric-only and metadata keys, `quota_mode`, empty descriptor lists,
//! merged domains, long values and `requests_per_unit: 0`.

use super::*;

fn e<'a>(key: &'a str, value: &'a str) -> DescriptorEntry<'a> {
    DescriptorEntry { key, value }
}

fn one(text: &str) -> RlsConfig {
    RlsConfig::parse([("f.yaml", text)]).unwrap_or_else(|e| panic!("{e}"))
}

fn limit_of(text: &str, value: &str) -> String {
    let rule = format!("domain: d\ndescriptors:\n  - key: k\n    value: \"{value}\"\n    share_threshold: true\n    rate_limit: {{unit: minute, requests_per_unit: 5}}\n");
    let c = one(&rule);
    c.lookup("d", &[e("k", text)]).and_then(|l| l.limit.clone()).unwrap_or_default()
}

#[test]
fn a_star_anywhere_in_a_value_matches_as_ratelimit_matches_it() {
    // ratelimit's wildcardMatch: the first part a prefix, the last a suffix, the middle ones in
    // order between them; a `*` matches nothing too.
    let matches = [
        ("bar*b", "barab", true),
        ("bar*b", "bar123b", true),
        ("bar*b", "barb", true),
        ("bar*b", "bara", false),
        ("bar*b", "xbarb", false),
        ("foo*bar*baz", "foo123bar456baz", true),
        ("foo*bar*baz", "foobarbaz", true),
        ("foo*bar*baz", "foo123baz", false),
        ("foo*bar*baz", "bar456baz", false),
        ("a*a", "a", false),
        ("a*a", "aa", true),
        ("*x", "x", true),
        ("*x", "yx", true),
        ("*x", "xy", false),
        ("p*", "p", true),
    ];
    for (pattern, value, expected) in matches {
        assert_eq!(!limit_of(value, pattern).is_empty(), expected, "{pattern} against {value}");
    }
}

#[test]
fn a_wildcard_is_never_taken_as_a_literal() {
    // Before: `bar*b` was a fixed value, so `barab` matched nothing and went unlimited.
    let c = one("domain: d\ndescriptors:\n  - key: midWild\n    value: bar*b\n    rate_limit: {unit: minute, requests_per_unit: 20}\n");
    let l = c.lookup("d", &[e("midWild", "barab")]).expect("bar*b matches barab");
    assert_eq!((l.limit.as_deref(), l.tier.as_deref()), (None, Some("d/midWild_bar=2Ab")), "counted per value");
    assert!(c.limits().is_empty());
}

#[test]
fn a_fixed_value_wins_over_a_wildcard_and_wildcards_go_in_file_order() {
    let c = one("domain: d\ndescriptors:\n  - key: f\n    value: test*\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: f\n    value: te*\n    rate_limit: {unit: minute, requests_per_unit: 7}\n  - key: f\n    value: test1\n    rate_limit: {unit: minute, requests_per_unit: 50}\n");
    assert_eq!(c.lookup("d", &[e("f", "test1")]).unwrap().per_unit, Some((50, Unit::Minute)));
    assert_eq!(c.lookup("d", &[e("f", "test2")]).unwrap().per_unit, Some((100, Unit::Minute)));
    assert_eq!(c.lookup("d", &[e("f", "tea")]).unwrap().per_unit, Some((7, Unit::Minute)));
}

#[test]
fn share_threshold_makes_one_counter_for_every_value_a_wildcard_matches() {
    let c = one("domain: d\ndescriptors:\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: files_no_share\n    value: files_no_share/*\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: user\n    value: u/*\n    share_threshold: true\n    descriptors:\n      - key: action\n        rate_limit: {unit: minute, requests_per_unit: 3}\n");
    // All fixed or shared: one global limit, whatever the value.
    let a = c.lookup("d", &[e("files", "files/a.pdf")]).expect("matched");
    let b = c.lookup("d", &[e("files", "files/b.csv")]).expect("matched");
    assert_eq!(a.limit.as_deref(), Some("d/files_files=2F=2A"));
    assert!(Arc::ptr_eq(a, b));
    assert_eq!(c.limits().keys().collect::<Vec<_>>(), ["d/files_files=2F=2A"]);
    // Without share_threshold each value is counted apart.
    let n = c.lookup("d", &[e("files_no_share", "files_no_share/a")]).expect("matched");
    assert_eq!(
        n.key_for(&[e("files_no_share", "files_no_share/a")]).as_deref(),
        Some("d/files_no_share_files_no_share=2F=2A/files_no_share=2Fa")
    );
    // A shared level under a per-value one: its value in the key is the pattern.
    let u = c.lookup("d", &[e("user", "u/alice"), e("action", "read")]).expect("matched");
    let k1 = u.key_for(&[e("user", "u/alice"), e("action", "read")]);
    let k2 = u.key_for(&[e("user", "u/bob"), e("action", "read")]);
    assert_eq!(k1.as_deref(), Some("d/user_u=2F=2A/action/u=2F=2A/read"));
    assert_eq!(k1, k2, "one counter for every user");
    assert_ne!(k1, u.key_for(&[e("user", "u/alice"), e("action", "write")]));
}

#[test]
fn share_threshold_without_a_wildcard_value_is_refused() {
    let text = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n";
    let got = RlsConfig::parse([("f.yaml", text)]).expect_err("refused").to_string();
    assert_eq!(
        got,
        "f.yaml: share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'"
    );
}

#[test]
fn metadata_metric_keys_and_an_empty_descriptor_list_are_accepted() {
    let c = one("domain: d\ndescriptors:\n  - key: k\n    value: v\n    value_to_metric: true\n    detailed_metric: true\n    metadata:\n      service: {name: svc, tags: [a, 1, true], n: 2.5}\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: empty\n    value: x\n    descriptors:\n");
    assert_eq!(c.lookup("d", &[e("k", "v")]).and_then(|l| l.limit.as_deref()), Some("d/k_v"));
    assert!(c.lookup("d", &[e("empty", "x")]).is_none());
    let bare = one("domain: d\ndescriptors:\n");
    assert_eq!(bare.domains().collect::<Vec<_>>(), ["d"]);
}

#[test]
fn quota_mode_is_carried_to_the_limit() {
    let c = one("domain: d\ndescriptors:\n  - key: s\n    value: one\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: s\n    value: two\n    rate_limit: {unit: minute, requests_per_unit: 1}\n");
    assert!(c.lookup("d", &[e("s", "one")]).unwrap().quota_mode);
    assert!(!c.lookup("d", &[e("s", "two")]).unwrap().quota_mode);
}

#[test]
fn the_overall_code_follows_ratelimits_quota_rule() {
    use crate::rls_config::overall_over_limit as over;
    // (descriptor over its limit, descriptor in quota_mode)
    assert!(!over([(false, false), (false, true)]));
    assert!(over([(true, false), (false, true)]), "a rate limit over denies");
    assert!(!over([(true, true), (false, true)]), "some quota descriptors over: allowed");
    assert!(over([(true, true), (true, true)]), "every quota descriptor over: denied");
    assert!(over([(true, true)]));
    assert!(!over([]));
}

#[test]
fn domains_merge_only_when_asked() {
    let a = (
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
    );
    let b = (
        "b.yaml",
        "domain: d\ndescriptors:\n  - key: k2\n    value: v2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n",
    );
    let refused = RlsConfig::parse([a, b]).expect_err("refused by default").to_string();
    assert_eq!(refused, "b.yaml: duplicate domain 'd' in config file");
    let merging = LoadOptions { merge_domains: true };
    let c = RlsConfig::load([a, b], merging).expect("merged");
    assert_eq!(c.lookup("d", &[e("k1", "v1")]).unwrap().per_unit, Some((10, Unit::Minute)));
    assert_eq!(c.lookup("d", &[e("k2", "v2")]).unwrap().per_unit, Some((20, Unit::Minute)));
    let again = RlsConfig::load([a, a], merging).expect_err("a key twice").to_string();
    assert_eq!(again, "a.yaml: duplicate descriptor composite key 'd.k1_v1'");
}

#[test]
fn a_long_value_gets_a_bounded_limit_id() {
    let value = "v".repeat(150);
    let c = one(&format!("domain: d\ndescriptors:\n  - key: k\n    value: {value}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"));
    let id = c.lookup("d", &[e("k", &value)]).and_then(|l| l.limit.clone()).expect("a global limit");
    assert_eq!(id.len(), leasehold_core::wire::MAX_ID_LEN);
    assert!(id.starts_with("d/k_vvvv") && id.contains('~'), "{id}");
    leasehold_core::subjects::limits_key(&id).expect("a valid limit id");
    // Another long value: another id; the same text: the same id.
    let other = format!("{}w", "v".repeat(149));
    let c2 = one(&format!("domain: d\ndescriptors:\n  - key: k\n    value: {other}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"));
    assert_ne!(c2.limits().keys().next(), Some(&id));
    let c3 = one(&format!("domain: d\ndescriptors:\n  - key: k\n    value: {value}\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"));
    assert_eq!(c3.limits().keys().next(), Some(&id));
}

#[test]
fn zero_requests_per_unit_denies_every_request_and_needs_no_lease() {
    let c = one("domain: d\ndescriptors:\n  - key: block\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: bv\n    value: x\n    rate_limit: {unit: second, requests_per_unit: 0}\n");
    for entries in [[e("block", "anything")], [e("bv", "x")]] {
        let l = c.lookup("d", &entries).expect("matched");
        assert!(l.denies_every_request());
        assert_eq!((l.limit.as_ref(), l.tier.as_ref()), (None, None));
    }
    assert!(c.limits().is_empty() && c.tiers().is_empty());
}
