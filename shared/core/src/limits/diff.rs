//! What a change of a limit's definition does, one line per changed field in human units: the
//! `--dry-run` of `leasehold limits put|rm`, and what `put` prints before it writes.
//!
//! A lowered limit cannot take back leases already out: they keep counting until they end, at
//! most one DC-lease lifetime, `dc_ttl_ms·(1+max_drift) + grace_ms + egress_spread_ms` of the
//! definition they were issued under (the old one).

use super::definition::{LimitDef, LimitDefError};
use super::pod_rules;
use super::rate::{format_amount, format_rate};
use crate::coordinator::{DcSpec, LimitConfig};
use crate::expiry::NS_PER_MS;

/// The lines describing `old` → `new` (`None`: no such limit). Empty when nothing changes.
pub fn diff(old: Option<&LimitConfig>, new: Option<&LimitConfig>) -> Vec<String> {
    match (old, new) {
        (None, None) => Vec::new(),
        (None, Some(new)) => vec![format!("added: {}", summary(new))],
        (Some(old), None) => vec![format!(
            "removed (its leases are revoked: pods deny once their lease ends, at most one DC-lease lifetime, {})",
            seconds(lease_lifetime_ms(old))
        )],
        (Some(old), Some(new)) => changes(old, new),
    }
}

/// [`diff`] of two definitions, each converted (and so validated) first.
pub fn diff_defs(old: Option<&LimitDef>, new: Option<&LimitDef>) -> Result<Vec<String>, LimitDefError> {
    let old = old.map(LimitDef::to_config).transpose()?;
    let new = new.map(LimitDef::to_config).transpose()?;
    Ok(diff(old.as_ref(), new.as_ref()))
}

/// How long an issuer counts a DC lease of `config` after issuing it (ms, rounded up).
pub fn lease_lifetime_ms(config: &LimitConfig) -> u64 {
    config.expiry.issuer_live_until_ns(0, config.dc_ttl_ms).div_ceil(NS_PER_MS)
}

/// `10200` → `"10.2 s"`.
fn seconds(ms: u64) -> String {
    format!("{} s", format_amount(ms))
}

/// `rate 976/s, burst 20, DCs bkk (floor 50/s), europe (floor 50/s)`.
fn summary(c: &LimitConfig) -> String {
    let dcs: Vec<String> = c.dcs.iter().map(|d| format!("{} (floor {})", d.name, floor_text(d))).collect();
    format!(
        "rate {}, burst {}, DCs {}",
        format_rate(c.quota.rate_milli_per_s),
        format_amount(c.quota.burst_milli),
        dcs.join(", ")
    )
}

fn floor_text(d: &DcSpec) -> String {
    if d.floor.burst_milli == 0 {
        format_rate(d.floor.rate_milli_per_s)
    } else {
        format!("{} burst {}", format_rate(d.floor.rate_milli_per_s), format_amount(d.floor.burst_milli))
    }
}

fn changes(old: &LimitConfig, new: &LimitConfig) -> Vec<String> {
    let mut lines = Vec::new();
    let lifetime = seconds(lease_lifetime_ms(old));
    let (r0, r1) = (old.quota.rate_milli_per_s, new.quota.rate_milli_per_s);
    if r0 != r1 {
        let why = if r1 < r0 {
            format!(
                "lowers R: new DC leases fit {} at once; leases already out keep counting until they end, \
                 at most one DC-lease lifetime, {lifetime}",
                format_rate(r1)
            )
        } else {
            "raises R: DCs get the extra as their leases are renewed".to_string()
        };
        lines.push(format!("rate: {} → {} ({why})", format_rate(r0), format_rate(r1)));
    }
    let (b0, b1) = (old.quota.burst_milli, new.quota.burst_milli);
    if b0 != b1 {
        let why = if b1 < b0 {
            format!(
                "lowers B: new DC leases fit {} at once; leases already out keep counting until they end, \
                 at most one DC-lease lifetime, {lifetime}",
                format_amount(b1)
            )
        } else {
            "raises B: DCs get the extra as their leases are renewed".to_string()
        };
        lines.push(format!("burst: {} → {} ({why})", format_amount(b0), format_amount(b1)));
    }
    for dc in &old.dcs {
        match new.dcs.iter().find(|n| n.name == dc.name) {
            None => lines.push(format!(
                "dcs.{}: removed (its DC lease is not renewed: its pods deny once it ends, at most {lifetime})",
                dc.name
            )),
            Some(n) => {
                let (f0, f1) = (dc.floor, n.floor);
                if f0.rate_milli_per_s != f1.rate_milli_per_s {
                    lines.push(format!(
                        "dcs.{}.floor: {} → {}",
                        dc.name,
                        format_rate(f0.rate_milli_per_s),
                        format_rate(f1.rate_milli_per_s)
                    ));
                }
                if f0.burst_milli != f1.burst_milli {
                    lines.push(format!(
                        "dcs.{}.floor_burst: {} → {}",
                        dc.name,
                        format_amount(f0.burst_milli),
                        format_amount(f1.burst_milli)
                    ));
                }
                if dc.weight != n.weight {
                    lines.push(format!("dcs.{}.weight: {} → {}", dc.name, dc.weight, n.weight));
                }
            }
        }
    }
    for dc in new.dcs.iter().filter(|n| !old.dcs.iter().any(|o| o.name == n.name)) {
        lines.push(format!("dcs.{}: added (floor {})", dc.name, floor_text(dc)));
    }
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            lines.push(format!("{name}: {a} → {b}"));
        }
    };
    field("dc_ttl_ms", old.dc_ttl_ms.to_string(), new.dc_ttl_ms.to_string());
    field("renew_interval_ms", old.renew_interval_ms.to_string(), new.renew_interval_ms.to_string());
    field("report_timeout_ms", old.report_timeout_ms.to_string(), new.report_timeout_ms.to_string());
    field("alloc_mode", mode(old), mode(new));
    field("reserve", old.reserve.to_string(), new.reserve.to_string());
    field("hysteresis", old.hysteresis.to_string(), new.hysteresis.to_string());
    field("min_realloc_interval_ms", old.min_realloc_interval_ms.to_string(), new.min_realloc_interval_ms.to_string());
    field("min_burst_per_pod", format_amount(old.min_burst_per_pod_milli), format_amount(new.min_burst_per_pod_milli));
    field("expiry.max_drift", old.expiry.max_drift.to_string(), new.expiry.max_drift.to_string());
    field("expiry.grace_ms", old.expiry.grace_ms.to_string(), new.expiry.grace_ms.to_string());
    field("expiry.egress_spread_ms", old.expiry.egress_spread_ms.to_string(), new.expiry.egress_spread_ms.to_string());
    let adaptive = |c: &LimitConfig| c.adaptive.as_ref().map_or("off".into(), |a| format!("{a:?}"));
    field("adaptive", adaptive(old), adaptive(new));
    let own = || "the DC managers' own".to_string();
    let split = |c: &LimitConfig| c.pods.split.map_or_else(own, |s| name_of(&s));
    field("split", split(old), split(new));
    let fail_mode = |c: &LimitConfig| pod_rules::fail_mode_name(c).map_or_else(own, |m| name_of(&m));
    field("fail_mode", fail_mode(old), fail_mode(new));
    let names: std::collections::BTreeSet<&String> = old.dcs.iter().chain(&new.dcs).map(|d| &d.name).collect();
    for dc in names {
        let allowance = |c: &LimitConfig| pod_rules::emergency_of(c, dc).map_or("none".into(), pod_rules::describe);
        field(&format!("dcs.{dc}.emergency"), allowance(old), allowance(new));
    }
    lines
}

/// A unit enum's name as its serde form (`"best-effort"`).
fn name_of<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}

fn mode(c: &LimitConfig) -> String {
    name_of(&c.alloc_mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;

    fn api(rate_per_s: u64) -> LimitConfig {
        LimitConfig::new("api", Quota::per_s(rate_per_s, 20), &[("bkk", Quota::per_s(50, 0)), ("eu", Quota::ZERO)])
    }

    #[test]
    fn lowering_the_rate_says_how_long_old_leases_keep_counting() {
        let lines = diff(Some(&api(1_000)), Some(&api(600)));
        assert_eq!(
            lines,
            vec![
                "rate: 1000/s → 600/s (lowers R: new DC leases fit 600/s at once; leases already out keep \
                  counting until they end, at most one DC-lease lifetime, 10.2 s)"
            ]
        );
        assert!(diff(Some(&api(600)), Some(&api(1_000)))[0].starts_with("rate: 600/s → 1000/s (raises R"));
    }

    #[test]
    fn the_lifetime_is_the_old_definition_s() {
        let mut old = api(1_000);
        old.expiry.egress_spread_ms = 144;
        let mut new = api(600);
        new.dc_ttl_ms = 4_000;
        let lines = diff(Some(&old), Some(&new));
        assert!(lines[0].ends_with("10.344 s)"), "{lines:?}");
        assert!(lines.contains(&"dc_ttl_ms: 10000 → 4000".to_string()), "{lines:?}");
        assert!(lines.contains(&"expiry.egress_spread_ms: 144 → 0".to_string()), "{lines:?}");
    }

    #[test]
    fn dcs_are_compared_by_name() {
        let old = api(1_000);
        let mut new = api(1_000);
        new.dcs[0].floor = Quota::per_s(20, 0);
        new.dcs.remove(1);
        new.dcs.push(DcSpec { name: "us".into(), floor: Quota::new(500, 1_000), weight: 2.0 });
        assert_eq!(
            diff(Some(&old), Some(&new)),
            vec![
                "dcs.bkk.floor: 50/s → 20/s".to_string(),
                "dcs.eu: removed (its DC lease is not renewed: its pods deny once it ends, at most 10.2 s)".into(),
                "dcs.us: added (floor 0.5/s burst 1)".into(),
            ]
        );
    }

    #[test]
    fn pod_rules_changes_are_named() {
        use crate::dc_manager::{FailRule, SplitMode};
        let old = api(1_000);
        let mut new = api(1_000);
        new.pods.split = Some(SplitMode::Demand);
        let emergency = [("eu".to_string(), Quota::per_s(20, 5))].into();
        new.pods.fail_mode = Some(FailRule::BestEffort { emergency });
        assert_eq!(
            diff(Some(&old), Some(&new)),
            vec![
                "split: the DC managers' own → demand".to_string(),
                "fail_mode: the DC managers' own → best-effort".into(),
                "dcs.eu.emergency: none → 20/s burst 5".into(),
            ]
        );
    }

    #[test]
    fn adding_removing_and_no_change() {
        assert_eq!(
            diff(None, Some(&api(976))),
            vec!["added: rate 976/s, burst 20, DCs bkk (floor 50/s), eu (floor 0/s)"]
        );
        let removed = diff(Some(&api(976)), None);
        assert_eq!(removed.len(), 1);
        assert!(removed[0].starts_with("removed (its leases are revoked: pods deny once their lease ends"));
        assert!(diff(Some(&api(976)), Some(&api(976))).is_empty());
        assert!(diff(None, None).is_empty());
    }
}
