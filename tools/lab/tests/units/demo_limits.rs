//! Tests of `tools/lab/src/demo/limits.rs`.

use leasehold_lab::demo::limits::*;
use leasehold_lab::demo::{DCS, DC_TTL_MS};

#[test]
fn every_leased_rate_keeps_its_window_bound() {
    let bound = |rate: u64, burst: u64| rate * window_on_fast_clocks_plus_jitter_ms() / 1_000 + burst;
    for l in LIMITS {
        assert!(bound(l.rate_per_s(), l.burst) <= l.hard_calls, "{l:?}");
        assert!(bound(l.rate_per_s() + 2, l.burst) > l.hard_calls, "{l:?}: R is not the largest that fits");
    }
    let low = Lowering::partner();
    assert!(bound(low.rate_after_per_s, PARTNER.burst) <= PARTNER_LOWERED_CALLS);
    // The old R would break the lowered limit: lowering R is what keeps the upstream quiet.
    assert!(bound(low.rate_before_per_s, PARTNER.burst) > PARTNER_LOWERED_CALLS);
}

#[test]
fn definitions_read_back_as_the_limits_they_describe() {
    for l in LIMITS {
        let config = parse(&definition_toml(&l, l.rate_per_s())).unwrap().to_config().unwrap();
        assert_eq!(config.limit, l.name);
        assert_eq!(config.quota.rate_milli_per_s, l.rate_per_s() * 1_000);
        assert_eq!(config.quota.burst_milli, l.burst * 1_000);
        assert_eq!(config.dc_ttl_ms, DC_TTL_MS);
        assert_eq!(config.dcs.len(), DCS.len());
        assert!(config.dcs.iter().all(|d| d.floor.rate_milli_per_s == l.floor_per_s * 1_000));
    }
}

#[test]
fn the_upstream_lowers_a_lease_lifetime_and_a_window_after_the_change() {
    let low = Lowering::partner();
    // 10 s · 1.01 + 100 ms grace + 100 ms egress spread.
    assert_eq!(low.lease_lifetime_ms, 10_300);
    // + 1 s · 1.01 + 100 ms jitter.
    assert_eq!(low.upstream_delay_ms(), 11_410);
    let config = parse(&low.definition_toml()).unwrap().to_config().unwrap();
    assert_eq!(config.quota.rate_milli_per_s, low.rate_after_per_s * 1_000);
    assert!(low.rate_after_per_s < low.rate_before_per_s);
}
