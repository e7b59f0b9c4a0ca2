//! The tiers document as an operator writes it: a misspelt field is refused (it would otherwise
//! be silently dropped, leaving the limits the operator meant to change as they were), and an
//! invalid limit is explained once, without its prefix repeated.

use leasehold_per_key::{KeyError, Tiers};

#[test]
fn a_misspelt_field_in_a_tiers_document_is_refused_and_named() {
    let cases = [
        (r#"{"default_tier": "free", "tiers": {"free": {"limit": 5, "window_ms": 1000}}, "overides": {}}"#, "overides"),
        (r#"{"default_tier": "free", "tiers": {"free": {"limit": 5, "window_ms": 1000, "brust": 3}}}"#, "brust"),
        (r#"{"default_tier": "free", "tiers": {"free": {"limit": 5, "windows_ms": 1000}}}"#, "windows_ms"),
    ];
    for (doc, field) in cases {
        let err = serde_json::from_str::<Tiers>(doc).expect_err(doc).to_string();
        assert!(err.contains(&format!("unknown field `{field}`")), "{doc}: {err}");
    }
    // What this build writes, it reads back.
    let full = r#"{"default_tier": "free",
        "tiers": {"free": {"limit": 20, "window_ms": 60000},
                  "pro": {"algorithm": "gcra", "limit": 600, "window_ms": 60000, "burst": 50}},
        "overrides": {"tenant-42": {"limit": 1000, "window_ms": 60000}},
        "assignments": {"alice": "pro"}}"#;
    let tiers: Tiers = serde_json::from_str(full).unwrap();
    assert_eq!(serde_json::from_str::<Tiers>(&serde_json::to_string(&tiers).unwrap()).unwrap(), tiers);
}

#[test]
fn an_invalid_limit_is_explained_with_its_prefix_once() {
    let doc = r#"{"default_tier": "free", "tiers": {"free": {"limit": 0, "window_ms": 1000}}}"#;
    let err = serde_json::from_str::<Tiers>(doc).unwrap().validate().unwrap_err();
    assert_eq!(err.to_string(), "invalid limit: free: limit (0) and window_ms (1000) must be positive");
    assert!(matches!(err, KeyError::BadSpec(_)));
    let doc = r#"{"default_tier": "free", "tiers": {"free": {"limit": 5, "window_ms": 1000}},
        "overrides": {"tenant-42": {"limit": 20000, "window_ms": 1000}}}"#;
    let err = serde_json::from_str::<Tiers>(doc).unwrap().validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid limit: tenant-42: a sliding log holds at most 10000 entries per key; use gcra for limit 20000"
    );
}
