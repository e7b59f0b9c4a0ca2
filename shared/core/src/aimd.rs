//! Adaptive limits: a partner that lowers its limit without telling anyone answers 429 (Too
//! Many Requests). A limit that opts in ([`AdaptiveConfig`]) has its *effective* R follow the
//! 429s the pods report, by AIMD, once per renew period ([`Aimd::on_period`]):
//!
//! * **decrease** when more than `trigger_429_ratio` of at least `min_calls` calls in the period
//!   were answered 429: to at most `decrease_factor`·R_eff (the multiplicative decrease) and at
//!   most `accepted_fraction` of the rate the upstream accepted (calls − 429s per second) while
//!   it answered 429s. While the upstream answers 429 it is saturated, so what it accepts is its
//!   hidden limit: one step lands just below it instead of creeping down by β per period. No
//!   single step goes below `max_step_down`·R_eff (a misread). For `hold_periods` after a
//!   decrease nothing changes and the periods' counts are not used: 429s of calls made before
//!   the pods had their smaller leases are still coming in, and the pods' rate is between the
//!   old and the new one (a decrease read from them would undershoot);
//! * **stay** while a few 429s still come (more than a quarter of the trigger ratio);
//! * **increase** otherwise, additively by `increase_per_period`·R (the configured R) per
//!   period, or by `probe_increase_per_period`·R within `probe_band` below the last accepted rate
//!   that came with a decrease (where the upstream's limit was last seen), up to the configured R.
//!
//! The effective R never exceeds the configured R and never goes below the larger of
//! `min_fraction`·R and the sum of the DCs' floors (floors stay reserved). The coordinator
//! applies it through the same safe path as a limit changed live (`coordinator/reconfigure.rs`):
//! a decrease shrinks the books at once, leases out are inherited.

use serde::{Deserialize, Serialize};

/// How an adaptive limit follows upstream 429s (every field has a default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveConfig {
    /// β: a decrease takes R_eff to at most this fraction of itself.
    pub decrease_factor: f64,
    /// A decrease takes R_eff to at most this fraction of the rate the upstream accepted.
    pub accepted_fraction: f64,
    /// No single decrease goes below this fraction of R_eff.
    pub max_step_down: f64,
    /// A period with more than this share of its calls answered 429 triggers a decrease.
    pub trigger_429_ratio: f64,
    /// Fewer calls in a period than this say nothing about the upstream.
    pub min_calls: u64,
    /// Additive increase per renew period, as a fraction of the configured R.
    pub increase_per_period: f64,
    /// The increase per period near the last limit seen (see `probe_band`).
    pub probe_increase_per_period: f64,
    /// Below the last accepted rate that came with a decrease, by at most this fraction of it,
    /// R_eff rises by `probe_increase_per_period` only.
    pub probe_band: f64,
    /// R_eff never goes below this fraction of the configured R.
    pub min_fraction: f64,
    /// Renew periods after a decrease without an increase.
    pub hold_periods: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            decrease_factor: 0.9,
            accepted_fraction: 0.95,
            max_step_down: 0.6,
            trigger_429_ratio: 0.01,
            min_calls: 20,
            increase_per_period: 0.03,
            probe_increase_per_period: 0.005,
            probe_band: 0.05,
            min_fraction: 0.1,
            hold_periods: 1,
        }
    }
}

impl AdaptiveConfig {
    /// Checks that every fraction is in (0, 1] and the decreases are below 1.
    pub fn validate(&self) -> Result<(), crate::InvalidSetting> {
        let fractions = [
            ("decrease_factor", self.decrease_factor),
            ("accepted_fraction", self.accepted_fraction),
            ("max_step_down", self.max_step_down),
            ("trigger_429_ratio", self.trigger_429_ratio),
            ("increase_per_period", self.increase_per_period),
            ("probe_increase_per_period", self.probe_increase_per_period),
            ("probe_band", self.probe_band),
            ("min_fraction", self.min_fraction),
        ];
        for (name, x) in fractions {
            if !(x.is_finite() && x > 0.0 && x <= 1.0) {
                return Err(crate::InvalidSetting::AdaptiveFraction { name, value: x });
            }
        }
        if self.decrease_factor >= 1.0 || self.max_step_down >= 1.0 {
            return Err(crate::InvalidSetting::AdaptiveDecreaseNotBelowOne);
        }
        Ok(())
    }
}

/// What the pods saw of the upstream in one renew period, over every DC.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UpstreamSample {
    /// Upstream calls in the period (the pods' admissions).
    pub calls: u64,
    /// Of those, calls answered 429.
    pub upstream_429: u64,
    /// Calls the upstream accepted (not answered 429) per second, while it answered 429s (the
    /// reports that carried 429s; all reports if none did).
    pub accepted_per_s: f64,
}

/// The AIMD state machine of one limit (see the module docs). Rates in milli-requests/s.
#[derive(Clone, Debug, PartialEq)]
pub struct Aimd {
    cfg: AdaptiveConfig,
    configured_milli: u64,
    lowest_milli: u64,
    effective_milli: u64,
    /// The accepted rate of the last period that brought a decrease.
    last_limit_seen_milli: Option<u64>,
    hold_left: u32,
}

impl Aimd {
    /// Starting at the configured R; never below `floors_milli` (Σ floors).
    pub fn new(cfg: AdaptiveConfig, configured_milli: u64, floors_milli: u64) -> Self {
        let mut a = Aimd {
            cfg,
            configured_milli,
            lowest_milli: 0,
            effective_milli: configured_milli,
            last_limit_seen_milli: None,
            hold_left: 0,
        };
        a.set_bounds(configured_milli, floors_milli);
        a
    }

    /// Starting from `effective_milli` (a new leader resumes from its predecessor's), clamped.
    pub fn resume(cfg: AdaptiveConfig, configured_milli: u64, floors_milli: u64, effective_milli: u64) -> Self {
        let mut a = Aimd::new(cfg, configured_milli, floors_milli);
        a.effective_milli = effective_milli.clamp(a.lowest_milli, a.configured_milli);
        a
    }

    /// The effective R, in milli-requests per second.
    pub fn effective_milli(&self) -> u64 {
        self.effective_milli
    }

    /// Its settings.
    pub fn config(&self) -> &AdaptiveConfig {
        &self.cfg
    }

    /// A changed definition: new settings, configured R and floors; R_eff is clamped into them.
    pub fn reconfigure(&mut self, cfg: AdaptiveConfig, configured_milli: u64, floors_milli: u64) {
        self.cfg = cfg;
        self.set_bounds(configured_milli, floors_milli);
    }

    fn set_bounds(&mut self, configured_milli: u64, floors_milli: u64) {
        self.configured_milli = configured_milli;
        let min = (configured_milli as f64 * self.cfg.min_fraction) as u64;
        self.lowest_milli = min.max(floors_milli).min(configured_milli);
        self.effective_milli = self.effective_milli.clamp(self.lowest_milli, configured_milli);
    }

    /// One renew period's sample; returns the effective R from now on.
    pub fn on_period(&mut self, s: UpstreamSample) -> u64 {
        let c = &self.cfg;
        let eff = self.effective_milli as f64;
        let ratio = if s.calls >= c.min_calls { s.upstream_429.min(s.calls) as f64 / s.calls as f64 } else { 0.0 };
        let accepted_milli = if s.accepted_per_s.is_finite() { s.accepted_per_s.max(0.0) * 1_000.0 } else { eff };
        let next = if self.hold_left > 0 {
            self.hold_left -= 1;
            eff
        } else if ratio > c.trigger_429_ratio {
            self.hold_left = c.hold_periods;
            self.last_limit_seen_milli = Some(accepted_milli as u64);
            (eff * c.decrease_factor).min(accepted_milli * c.accepted_fraction).max(eff * c.max_step_down)
        } else if ratio > c.trigger_429_ratio / 4.0 {
            eff
        } else {
            let near = self
                .last_limit_seen_milli
                .is_some_and(|seen| eff >= seen as f64 * (1.0 - c.probe_band) && eff < seen as f64);
            let step = if near { c.probe_increase_per_period } else { c.increase_per_period };
            eff + step * self.configured_milli as f64
        };
        self.effective_milli = (next as u64).clamp(self.lowest_milli, self.configured_milli);
        self.effective_milli
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: u64 = 1_000_000; // 1,000/s

    fn sample(calls: u64, upstream_429: u64) -> UpstreamSample {
        UpstreamSample { calls, upstream_429, accepted_per_s: (calls - upstream_429) as f64 }
    }

    #[test]
    fn one_saturated_period_lands_just_below_what_the_upstream_accepts() {
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 100_000);
        assert_eq!(a.on_period(sample(1_000, 300)), 665_000, "0.95 of the 700/s accepted");
    }

    #[test]
    fn a_decrease_is_at_least_multiplicative_and_at_most_halves() {
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 0);
        // 3% answered 429 at 1,000 calls: accepted 970/s, 0.95 of it is 921.5 > 0.9·1,000.
        assert_eq!(a.on_period(sample(1_000, 30)), 900_000);
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 0);
        assert_eq!(a.on_period(sample(1_000, 900)), 600_000, "a misread: at most 40% down in one step");
    }

    #[test]
    fn never_above_the_configured_r_nor_below_the_floors_or_min_fraction() {
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 300_000);
        for _ in 0..20 {
            a.on_period(sample(1_000, 999));
        }
        assert_eq!(a.effective_milli(), 300_000, "Σ floors");
        for _ in 0..200 {
            a.on_period(sample(1_000, 0));
        }
        assert_eq!(a.effective_milli(), R);
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 0);
        for _ in 0..20 {
            a.on_period(sample(1_000, 999));
        }
        assert_eq!(a.effective_milli(), 100_000, "min_fraction");
    }

    #[test]
    fn holds_after_a_decrease_then_probes_slowly_near_the_limit_seen_then_fast() {
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 0);
        assert_eq!(a.on_period(sample(1_000, 300)), 665_000);
        assert_eq!(a.on_period(sample(665, 0)), 665_000, "hold");
        assert_eq!(a.on_period(sample(665, 0)), 670_000, "probe: +0.5% of R");
        for _ in 0..6 {
            a.on_period(sample(670, 0));
        }
        assert_eq!(a.effective_milli(), 700_000);
        assert_eq!(a.on_period(sample(700, 0)), 730_000, "at the limit seen: fast again");
    }

    #[test]
    fn the_hold_ignores_the_late_429s_of_the_old_rate_then_a_further_decrease_may_follow() {
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 0);
        // The first period's estimate read high: 800/s accepted.
        assert_eq!(a.on_period(sample(1_000, 200)), 760_000);
        // Late 429s of the old rate while the pods move to the new one: ignored.
        assert_eq!(a.on_period(UpstreamSample { calls: 500, upstream_429: 100, accepted_per_s: 450.0 }), 760_000);
        // Still above the upstream's limit: down to 0.95 of the 600/s it accepts.
        assert_eq!(a.on_period(sample(760, 160)), 570_000);
    }

    #[test]
    fn a_few_429s_stop_the_increase_and_few_calls_say_nothing() {
        let mut a = Aimd::resume(AdaptiveConfig::default(), R, 0, 500_000);
        assert_eq!(a.on_period(sample(1_000, 5)), 500_000, "0.5%: stay");
        assert_eq!(a.on_period(sample(10, 10)), 530_000, "10 calls: no evidence");
    }

    #[test]
    fn bad_samples_do_not_panic_or_leave_the_bounds() {
        let mut a = Aimd::new(AdaptiveConfig::default(), R, 0);
        for s in [
            UpstreamSample { calls: 100, upstream_429: 500, accepted_per_s: f64::NAN },
            UpstreamSample { calls: u64::MAX, upstream_429: u64::MAX, accepted_per_s: f64::INFINITY },
            UpstreamSample { calls: 100, upstream_429: 50, accepted_per_s: -5.0 },
        ] {
            let e = a.on_period(s);
            assert!((100_000..=R).contains(&e), "{e}");
        }
    }

    #[test]
    fn resume_and_reconfigure_clamp_into_the_bounds() {
        assert_eq!(Aimd::resume(AdaptiveConfig::default(), R, 0, 5 * R).effective_milli(), R);
        let mut a = Aimd::resume(AdaptiveConfig::default(), R, 0, 800_000);
        a.reconfigure(AdaptiveConfig::default(), 600_000, 0);
        assert_eq!(a.effective_milli(), 600_000);
        a.reconfigure(AdaptiveConfig::default(), R, 700_000);
        assert_eq!(a.effective_milli(), 700_000, "floors raised above it");
    }

    #[test]
    fn validation_refuses_factors_out_of_range() {
        assert!(AdaptiveConfig::default().validate().is_ok());
        assert!(AdaptiveConfig { decrease_factor: 1.0, ..Default::default() }.validate().is_err());
        assert!(AdaptiveConfig { increase_per_period: f64::NAN, ..Default::default() }.validate().is_err());
        assert!(AdaptiveConfig { min_fraction: 0.0, ..Default::default() }.validate().is_err());
    }
}
