//! The shipped example configuration loads; bad settings are refused with a clear message.

use leasehold_core::dc_manager::{FailMode, SplitMode};
use leasehold_dc_manager::settings::{load, Settings};
use std::path::Path;

#[test]
fn the_example_config_loads_and_validates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/dc-manager.toml");
    let s = load(Some(&path)).unwrap();
    assert_eq!((s.manager.limit.as_str(), s.manager.dc.as_str()), ("", "bkk"));
    assert!(s.serves_every_limit(), "the example serves every limit of its DC");
    assert_eq!(s.manager.split, SplitMode::Equal);
    assert_eq!(s.manager.fail_mode, FailMode::Strict);
    assert_eq!(s.manager.expiry.egress_spread_ms, 144);
    assert_eq!((s.manager.heartbeat_timeout_ms, s.manager.heartbeat_timeout_after_drops_ms), (1_500, 15_000));
}

#[test]
fn bad_settings_are_refused_with_the_reason() {
    let mut s = Settings::default();
    assert!(s.validate().unwrap_err().to_string().contains("dc"), "an empty DC name");
    s.manager.dc = "bkk".into();
    s.validate().unwrap();
    assert!(s.serves_every_limit() && s.serves("api") && s.serves("other"), "no limit: every limit");
    s.manager.limit = "a.b".into();
    assert!(s.validate().unwrap_err().to_string().contains("limit"), "a bad limit name");
    s.manager.limit = "api".into();
    s.validate().unwrap();
    assert!(s.serves("api") && !s.serves("other"));
    s.manager.pod_ttl_ms = s.manager.renew_interval_ms;
    assert!(s.validate().unwrap_err().to_string().contains("pod_ttl_ms"));
    let mut s2 = s.clone();
    s2.manager.pod_ttl_ms = 5_000;
    s2.report_interval_ms = 5_000;
    assert!(s2.validate().unwrap_err().to_string().contains("report_interval_ms"));
    let mut s3 = Settings { manager: s2.manager.clone(), inbound_reports_max_bytes: 64 << 10, ..Settings::default() };
    s3.manager.pod_ttl_ms = 5_000;
    assert!(s3.validate().unwrap_err().to_string().contains("inbound_reports_max_bytes"));
    s3.inbound_reports_max_bytes = 1 << 20;
    s3.inbound_reports_max_age_ms = 0;
    assert!(s3.validate().unwrap_err().to_string().contains("inbound_reports_max_age_ms"));
    assert!(load(Some(Path::new("/nonexistent/dc.toml"))).unwrap_err().to_string().contains("not found"));
}

#[test]
fn a_pod_ttl_a_takeover_outlasts_is_warned_of() {
    let mut s = Settings::default();
    s.manager.dc = "bkk".into();
    assert_eq!(s.takeover_outlasts_pod_leases(), Ok(()), "the defaults ride a failover out");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/dc-manager.toml");
    assert_eq!(load(Some(&path)).unwrap().takeover_outlasts_pod_leases(), Ok(()), "so does the example");
    // 1.25 x 3 s + 2 x 1 s + 0.25 s = 6 s: a 5 s pod TTL runs out before a standby continues it.
    s.manager.pod_ttl_ms = 5_000;
    s.validate().expect("waste, not excess: still valid");
    let warning = s.takeover_outlasts_pod_leases().unwrap_err();
    assert!(warning.contains("pod_ttl_ms (5000)") && warning.contains("(6000)"), "{warning}");
    s.leader_ttl_ms = 2_000;
    assert_eq!(s.takeover_outlasts_pod_leases(), Ok(()), "a shorter leader TTL is the other way");
}
