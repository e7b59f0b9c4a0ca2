//! Every shipped RLQS setup keeps the lending rule (docs/ENVOY.md, "Settings that must agree"):
//! the agent's `envoy_rlqs.clock_drift_percent` covers the `max_drift` of every limit a shipped
//! Envoy bootstrap or agent setting lends, every Envoy bucket denies without an assignment, and
//! the DC manager's pod leases outlast an assignment.

use leasehold_core::expiry::ExpiryPolicy;
use leasehold_core::limits::{DefFormat, LimitDef};
use leasehold_envoy::{least_drift_percent, RlqsTiming};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn files(dir: &str, ext: &str) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(ext))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    found.sort();
    found
}

#[derive(serde::Deserialize)]
struct AgentRlqs {
    #[serde(default)]
    envoy_rlqs_limits: Vec<String>,
    #[serde(default)]
    envoy_rlqs: RlqsTiming,
}

/// The agent's RLQS settings in `text` (a TOML file, or a file whose RLQS block is commented out
/// for the operator to enable: its `# key = value` lines from the first `# envoy_rlqs` on).
fn agent_rlqs(what: &str, text: &str) -> AgentRlqs {
    let enabled = text.lines().any(|l| l.starts_with("envoy_rlqs") || l.starts_with("[envoy_rlqs]"));
    let toml_text = if enabled {
        text.to_string()
    } else {
        let start = text.lines().position(|l| l.starts_with("# envoy_rlqs")).unwrap_or(usize::MAX);
        let uncommented: Vec<&str> = text
            .lines()
            .skip(start)
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.starts_with('[') || l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')))
            .collect();
        uncommented.join("\n")
    };
    let a: AgentRlqs = toml::from_str(&toml_text).unwrap_or_else(|e| panic!("{what}: {e}\n{toml_text}"));
    a.envoy_rlqs.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
    a
}

/// The `toml` block of docs/ENVOY.md that shows the agent's settings.
fn documented_agent_settings() -> String {
    let doc = read("docs/ENVOY.md");
    let from = doc.find("Agent settings").expect("ENVOY.md shows the agent settings");
    let block = &doc[from..];
    let start = block.find("```toml\n").expect("as TOML") + "```toml\n".len();
    block[start..start + block[start..].find("```").unwrap()].to_string()
}

/// Every shipped limit's `max_drift`, by limit (the largest where several files define one).
fn shipped_max_drifts() -> BTreeMap<String, f64> {
    let mut drifts = BTreeMap::new();
    let mut note = |limit: &str, d: f64| {
        let e = drifts.entry(limit.to_string()).or_insert(d);
        *e = f64::max(*e, d);
    };
    for path in files("deploy/limits", ".toml") {
        for def in LimitDef::parse_file_text(&read(&path), DefFormat::Toml).expect("shipped definitions read") {
            let cfg = def.to_config().expect("and run");
            note(&cfg.limit, cfg.expiry.max_drift);
        }
    }
    #[derive(serde::Deserialize)]
    struct Coordinator {
        limits: Vec<leasehold_core::coordinator::LimitConfig>,
    }
    let coordinator: Coordinator = toml::from_str(&read("deploy/coordinator.toml")).expect("coordinator.toml");
    for l in coordinator.limits {
        note(&l.limit, l.expiry.max_drift);
    }
    drifts
}

#[derive(serde::Deserialize)]
struct DcManager {
    pod_ttl_ms: u64,
    #[serde(default)]
    expiry: ExpiryPolicy,
}

/// The limits each shipped (or generated) RLQS bootstrap lends, by file: the `limit` entry of
/// every bucket id. Each bucket must deny without an assignment (else Envoy admits unmetered).
fn bootstraps() -> Vec<(String, Vec<String>)> {
    let mut texts: Vec<(String, String)> =
        files("deploy/envoy", ".yaml").into_iter().map(|p| (p.clone(), read(&p))).collect();
    texts.push(("tools/lab/src/bench/envoy.rs".into(), read("tools/lab/src/bench/envoy.rs")));
    let mut found = Vec::new();
    for (path, text) in texts.into_iter().filter(|(_, t)| t.contains("rate_limit_quota.v3.RateLimitQuotaFilterConfig"))
    {
        let builders = text.matches("RateLimitQuotaBucketSettings").count();
        let denying = text.matches("no_assignment_behavior").count();
        let deny_all = text.matches("blanket_rule: DENY_ALL").count();
        assert!(builders > 0 && builders == denying && denying == deny_all, "{path}: a bucket without DENY_ALL");
        let limits = text
            .split("limit: { string_value: ")
            .skip(1)
            .map(|rest| rest[..rest.find([' ', '}']).unwrap()].to_string())
            .collect();
        found.push((path, limits));
    }
    found
}

#[test]
fn every_shipped_rlqs_setup_keeps_the_lending_rule() {
    let drifts = shipped_max_drifts();
    let manager: DcManager = toml::from_str(&read("deploy/dc-manager.toml")).expect("dc-manager.toml");
    let default_drift = ExpiryPolicy::default().max_drift;
    let agents = [
        ("deploy/agent.toml".to_string(), agent_rlqs("deploy/agent.toml", &read("deploy/agent.toml"))),
        ("docs/ENVOY.md".to_string(), agent_rlqs("docs/ENVOY.md", &documented_agent_settings())),
    ];
    let boots = bootstraps();
    assert!(boots.iter().any(|(p, _)| p == "deploy/envoy/rlqs-bootstrap.yaml"), "{boots:?}");
    for (agent, a) in &agents {
        assert!(!a.envoy_rlqs_limits.is_empty(), "{agent}: no lent limits found");
        let lent = a.envoy_rlqs_limits.iter().chain(boots.iter().flat_map(|(_, l)| l));
        for limit in lent {
            // A limit without a shipped definition runs on the default policy, and every DC
            // manager's own policy counts too (it issues the pod leases).
            let m = drifts.get(limit).copied().unwrap_or(default_drift).max(manager.expiry.max_drift);
            let need = least_drift_percent(m);
            assert!(
                a.envoy_rlqs.clock_drift_percent >= need,
                "{agent}: envoy_rlqs.clock_drift_percent = {} below {limit}'s max_drift {m} ({need}%)",
                a.envoy_rlqs.clock_drift_percent
            );
        }
        let assignment_ms = a.envoy_rlqs.ttl_s as u64 * 1_000 + a.envoy_rlqs.delivery_margin_ms;
        assert!(manager.pod_ttl_ms > assignment_ms, "{agent}: pod_ttl_ms {} vs {assignment_ms}", manager.pod_ttl_ms);
    }
}

#[test]
fn the_least_drift_covers_the_limits_max_drift() {
    assert_eq!(least_drift_percent(0.0), 0);
    assert_eq!(least_drift_percent(0.01), 1);
    assert_eq!(least_drift_percent(0.011), 2);
    assert_eq!(least_drift_percent(0.05), 5);
}
