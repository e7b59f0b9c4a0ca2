//! Every configuration file of envoyproxy/ratelimit's own tests and examples (copied under
//! `tests/peer/`, whose README names the commit) loads here as it loads there, and every one it
//! refuses is refused with its reason (`test/config/config_test.go`).

use leasehold_envoy::{LoadOptions, RlsConfig, RlsConfigError};
use std::path::PathBuf;

/// A fixture's path under `tests/peer/` (ratelimit's own path).
fn peer_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peer").join(path)
}

/// The files, each named by its last path component as ratelimit's tests name them.
fn texts(paths: &[&str]) -> Vec<(String, String)> {
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(peer_file(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
            (p.rsplit('/').next().unwrap_or(p).to_string(), text)
        })
        .collect()
}

pub(crate) fn load_peer(paths: &[&str], merge_domains: bool) -> Result<RlsConfig, RlsConfigError> {
    let files = texts(paths);
    RlsConfig::load(files.iter().map(|(n, t)| (n.as_str(), t.as_str())), LoadOptions { merge_domains })
}

/// Every `.yaml` of a directory, in name order (as the agent reads a directory).
pub(crate) fn peer_dir(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(peer_file(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("a directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names.into_iter().map(|n| format!("{dir}/{n}")).collect()
}

const RUNTIME: &str = "test/integration/runtime/current/ratelimit";

#[test]
fn every_file_ratelimit_loads_loads() {
    let alone = [
        "test/config/basic_config.yaml",
        "test/config/metadata.yaml",
        "test/config/shadowmode_config.yaml",
        "test/config/share_threshold.yaml",
        "test/config/wildcard.yaml",
        "test/config/duplicate_domain.yaml",
        "test/config/merge_domain_key1.yaml",
        "test/config/merge_domain_key2.yaml",
    ];
    for path in alone {
        load_peer(&[path], false).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let merged = ["test/config/merge_domain_key1.yaml", "test/config/merge_domain_key2.yaml"];
    load_peer(&merged, true).expect("merged as ratelimit merges them (MERGE_DOMAIN_CONFIG)");
    let refused = load_peer(&merged, false).expect_err("one domain twice without merging").to_string();
    assert_eq!(refused, "merge_domain_key2.yaml: duplicate domain 'test-domain' in config file");

    // The integration tests' directory, and with the file its reload test adds.
    let runtime = peer_dir(&format!("{RUNTIME}/config"));
    assert_eq!(runtime.len(), 3);
    let paths: Vec<&str> = runtime.iter().map(String::as_str).collect();
    let c = load_peer(&paths, false).expect("the integration tests' configuration");
    assert_eq!(c.domains().collect::<Vec<_>>(), ["another", "basic", "share-threshold-test"]);
    let reload = format!("{RUNTIME}/reload.yaml");
    let with_reload: Vec<&str> = paths.iter().copied().chain([reload.as_str()]).collect();
    load_peer(&with_reload, false).expect("with reload.yaml");

    // The examples' directory.
    let examples = peer_dir("examples/ratelimit/config");
    let paths: Vec<&str> = examples.iter().map(String::as_str).collect();
    let c = load_peer(&paths, false).expect("the examples");
    assert_eq!(c.domains().collect::<Vec<_>>(), ["mongo_cps", "rl"]);
}

#[test]
fn every_file_ratelimit_refuses_is_refused_with_its_reason() {
    // test/config/config_test.go: the file, and the panic each test expects.
    let cases = [
        ("empty_domain.yaml", "empty_domain.yaml: config file cannot have empty domain"),
        ("empty_key.yaml", "empty_key.yaml: descriptor has empty key"),
        ("duplicate_key.yaml", "duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"),
        ("bad_limit_unit.yaml", "bad_limit_unit.yaml: invalid rate limit unit 'foo'"),
        ("replaces_self.yaml", "replaces_self.yaml: replaces should not contain name of same descriptor"),
        ("replaces_empty.yaml", "replaces_empty.yaml: should not have an empty replaces entry"),
        ("misspelled_key.yaml", "misspelled_key.yaml: config error, unknown key 'ratelimit'"),
        ("misspelled_key2.yaml", "misspelled_key2.yaml: config error, unknown key 'requestsperunit'"),
        ("non_string_key.yaml", "non_string_key.yaml: config error, key is not of type string: 0.25"),
        ("non_map_list.yaml", "non_map_list.yaml: config error, yaml file contains list of type other than map: a"),
        ("unlimited_with_unit.yaml", "unlimited_with_unit.yaml: should not specify rate limit unit when unlimited"),
    ];
    for (file, reason) in cases {
        let got = load_peer(&[&format!("test/config/{file}")], false).expect_err(file).to_string();
        // ratelimit's messages carry no descriptor path for these; ours may name it after the file.
        let (got_file, got_rule) = got.split_once(": ").expect("file: rule");
        let (want_file, want_rule) = reason.split_once(": ").expect("file: rule");
        assert_eq!(got_file, want_file);
        assert!(got_rule.ends_with(want_rule), "{file}: got {got:?}, ratelimit says {reason:?}");
    }
    // YAML that does not parse: ratelimit's prefix; the parser's own words differ.
    let got = load_peer(&["test/config/bad_yaml.yaml"], false).expect_err("bad yaml").to_string();
    assert!(got.starts_with("bad_yaml.yaml: error loading config file: "), "{got}");
    // TestDuplicateDomain, TestDuplicateKeyDomainMerge.
    let got = load_peer(&["test/config/basic_config.yaml", "test/config/duplicate_domain.yaml"], false);
    assert_eq!(
        got.expect_err("a domain twice").to_string(),
        "duplicate_domain.yaml: duplicate domain 'test-domain' in config file"
    );
    let twice = ["test/config/merge_domain_key1.yaml", "test/config/merge_domain_key1.yaml"];
    let got = load_peer(&twice, true).expect_err("a key twice in one merged domain").to_string();
    assert_eq!(got, "merge_domain_key1.yaml: duplicate descriptor composite key 'test-domain.key1_value1'");
}
