//! Every shipped and documented limit is sized by the one rule (`limits::sizing`, docs/OPERATIONS.md
//! §2): the partner API's 1,000 calls in any 1 s window with 4 ms of jitter and clocks up to
//! `max_drift` fast, and the tenant's 30,000/min with a burst of 6,000.

use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::sizing::{most_calls_in_window, sliding_window_rate_per_s, token_bucket_quota};
use leasehold_core::limits::{DefFormat, LimitDef};
use leasehold_core::quota::{Quota, MILLI};

const PARTNER_CALLS: u64 = 1_000;
const PARTNER_WINDOW_MS: u64 = 1_000;
const PARTNER_JITTER_MS: u64 = 4;

/// `quota` under `max_drift` is the rule's lease for the partner API, and keeps its limit.
fn assert_partner_sized(what: &str, quota: Quota, max_drift: f64) {
    let burst = quota.burst_milli / MILLI;
    let rule = sliding_window_rate_per_s(PARTNER_CALLS, PARTNER_WINDOW_MS, burst, max_drift, PARTNER_JITTER_MS);
    assert_eq!(quota.rate_milli_per_s, rule * MILLI, "{what}: R is not the rule's {rule}/s for burst {burst}");
    let most = most_calls_in_window(quota, PARTNER_WINDOW_MS, max_drift, PARTNER_JITTER_MS);
    assert!(most <= PARTNER_CALLS as f64, "{what}: a window may see {most} calls");
}

#[test]
fn the_shipped_partner_limit_definition_is_sized_by_the_rule() {
    let text = include_str!("../../../deploy/limits/partner-api.toml");
    let defs = LimitDef::parse_file_text(text, DefFormat::Toml).expect("the shipped definition reads");
    let cfg = defs[0].to_config().expect("and runs");
    assert_partner_sized("deploy/limits/partner-api.toml", cfg.quota, cfg.expiry.max_drift);
}

#[test]
fn the_shipped_coordinator_settings_are_sized_by_the_rule() {
    #[derive(serde::Deserialize)]
    struct Shipped {
        limits: Vec<LimitConfig>,
    }
    let text = include_str!("../../../deploy/coordinator.toml");
    let shipped: Shipped = toml::from_str(text).expect("the shipped coordinator settings read");
    let partner = shipped.limits.iter().find(|l| l.limit == "partner-api").expect("the partner API");
    assert_partner_sized("deploy/coordinator.toml", partner.quota, partner.expiry.max_drift);
}

#[test]
fn the_documented_examples_quote_the_rule() {
    let r = sliding_window_rate_per_s(PARTNER_CALLS, PARTNER_WINDOW_MS, 20, 0.01, PARTNER_JITTER_MS);
    let tenant = token_bucket_quota(500, 6_000, 0.01, PARTNER_JITTER_MS);
    let (tr, tb) = (tenant.rate_milli_per_s / MILLI, tenant.burst_milli / MILLI);
    for (doc, text) in [
        ("docs/OPERATIONS.md", include_str!("../../../docs/OPERATIONS.md")),
        ("docs/ARCHITECTURE.md", include_str!("../../../docs/ARCHITECTURE.md")),
    ] {
        assert!(text.contains(&format!("R = {r}/s")), "{doc} does not quote R = {r}/s for the partner API");
    }
    let readme = include_str!("../../../docs/OPERATIONS.md");
    let tenant_text = format!("{tr}/s");
    assert!(readme.contains(&tenant_text) && readme.contains(&format!("{},{:03}", tb / 1000, tb % 1000)), "tenant");
}
