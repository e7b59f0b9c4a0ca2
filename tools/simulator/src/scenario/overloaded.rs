//! The overloaded fault scenarios, `chaos` and `storm`, and the measure of how overloaded a
//! scenario is.
//!
//! The demand keeps the total offered at ≥ 1.5× the limit for most of the run, with several DCs
//! over their fair share at once, while quota still has to move between DCs. Then quota spent
//! twice (a leak) reaches the strict upstream, which rejects it: the judge has teeth. A run proves
//! it by running the uncoordinated baseline (no limit at all) on the same demand.

use super::{Demand, Scenario};
use serde::Serialize;

/// "Overloaded" means a total offered demand of at least this many times the limit.
pub(super) const OVERLOAD_FACTOR: f64 = 1.5;

/// Every DC is heavy this long, then one DC is light for [`LIGHT_S`], and so on.
const HEAVY_S: f64 = 60.0;
const LIGHT_S: f64 = 30.0;
/// A lull for every DC (everyone's buckets refill), then every DC surges at once.
const LULL_FROM_S: f64 = 360.0;
const LULL_UNTIL_S: f64 = 390.0;
const DURATION_S: u64 = 720;

/// How far the offered demand of a scenario exceeds its limit, from its demand function.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OfferedLoad {
    /// Fraction of the run's seconds in which the total offered demand is ≥ 1.5× the limit.
    pub over_limit_fraction: f64,
    /// Mean over the run's seconds of the total offered demand ÷ the limit.
    pub mean_to_limit: f64,
}

/// Heavy demand in every DC, but in turn one DC is light for a while: a DC that turns heavy again
/// takes quota from DCs that stay overloaded, so a late hand-over spends quota twice where the
/// upstream sees it. Cycles of [`HEAVY_S`] all heavy then [`LIGHT_S`] with DC 0 light, then with
/// DC 1 light, …; every DC is light during the lull.
fn rotating_overload(dcs: usize, heavy: f64, light: f64) -> Vec<Demand> {
    let cycle_s = HEAVY_S + LIGHT_S;
    let rate = |dc: usize, t: f64| {
        let cycle = (t / cycle_s).floor();
        let light_dc = (t - cycle * cycle_s >= HEAVY_S).then_some(cycle as usize % dcs);
        if (LULL_FROM_S..LULL_UNTIL_S).contains(&t) || light_dc == Some(dc) {
            light
        } else {
            heavy
        }
    };
    let cycles = (DURATION_S as f64 / cycle_s).ceil() as usize;
    let mut starts: Vec<f64> = (0..cycles).flat_map(|k| [k as f64 * cycle_s, k as f64 * cycle_s + HEAVY_S]).collect();
    starts.extend([LULL_FROM_S, LULL_UNTIL_S]);
    starts.sort_by(f64::total_cmp);
    starts.dedup();
    (0..dcs).map(|dc| Demand::Steps(starts.iter().map(|&t| (t, rate(dc, t))).collect())).collect()
}

impl Scenario {
    /// Every fault enabled against an overloaded limit: even seeds on the partner API's topology (a
    /// 1,000/s sliding window; heavy DCs offer 1,350/s, the light one 200/s: 1.55–2.7× the limit),
    /// odd seeds on the rate-and-burst tenant's (R = 500/s, B = 6,000; heavy regions offer 400/s,
    /// the light one 30/s: 1.66–2.4× R). Clock offsets of ± 5 s and drift of ± 0.4%; faults stop at
    /// 9 minutes and the last 3 minutes are the faults-off liveness phase.
    pub fn chaos(seed: u64) -> Self {
        let mut s = if seed.is_multiple_of(2) {
            let mut d = rotating_overload(2, 1_350.0, 200.0).into_iter();
            let (bkk, europe) = (d.next().expect("two DCs"), d.next().expect("two DCs"));
            Scenario::bkk_and_europe("chaos/bkk-europe", bkk, europe, DURATION_S)
        } else {
            Scenario::three_regions("chaos/us-eu-ap", rotating_overload(3, 400.0, 30.0), DURATION_S)
        };
        s.chaos = true;
        s.overloaded = true;
        s.fault_from_s = 20;
        s.fault_until_s = 540;
        s.max_clock_offset_ms = 5_000;
        s.max_clock_drift = 0.004;
        s
    }

    /// `chaos` with faults that overlap: a fault every 3 s on average instead of every 12 s, each
    /// lasting twice as long, so several are active at once.
    pub fn storm(seed: u64) -> Self {
        let mut s = Scenario::chaos(seed);
        s.name = s.name.replacen("chaos/", "storm/", 1);
        s.fault_mean_gap_s = 3.0;
        s.fault_duration_scale = 2.0;
        s
    }

    /// Total offered demand at second `t` ÷ the limit's sustained rate (R).
    pub fn offered_to_limit(&self, t: f64) -> f64 {
        let total: f64 = (0..self.dcs.len()).map(|dc| self.demand(dc, t)).sum();
        total / self.hard.sustained_per_s() as f64
    }

    /// The offered load, sampled in the middle of every second of the run.
    pub fn offered_load(&self) -> OfferedLoad {
        let ratios: Vec<f64> = (0..self.duration_s).map(|s| self.offered_to_limit(s as f64 + 0.5)).collect();
        let n = ratios.len().max(1) as f64;
        OfferedLoad {
            over_limit_fraction: ratios.iter().filter(|&&r| r >= OVERLOAD_FACTOR).count() as f64 / n,
            mean_to_limit: ratios.iter().sum::<f64>() / n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds in which at least two DCs each offer more than an equal share of R.
    fn several_dcs_over_their_share(s: &Scenario) -> f64 {
        let share = s.hard.sustained_per_s() as f64 / s.dcs.len() as f64;
        let busy = (0..s.duration_s)
            .filter(|&sec| (0..s.dcs.len()).filter(|&dc| s.demand(dc, sec as f64 + 0.5) > share).count() >= 2)
            .count();
        busy as f64 / s.duration_s as f64
    }

    #[test]
    fn chaos_offers_at_least_one_and_a_half_times_the_limit() {
        for seed in [2, 1] {
            let s = Scenario::chaos(seed);
            let load = s.offered_load();
            assert!(load.over_limit_fraction >= 0.9, "{}: {load:?}", s.name);
            assert!(load.mean_to_limit >= 1.8, "{}: {load:?}", s.name);
            assert!(several_dcs_over_their_share(&s) >= 0.6, "{}", s.name);
            // The lull is below the limit, so the offered load is measured, not a constant.
            assert!(s.offered_to_limit(LULL_FROM_S + 1.0) < 1.0);
        }
        assert_eq!(Scenario::chaos(4).dcs.len(), 2);
        assert_eq!(Scenario::chaos(3).dcs.len(), 3);
    }

    #[test]
    fn chaos_demand_still_moves_between_dcs() {
        for seed in [2, 1] {
            let s = Scenario::chaos(seed);
            for dc in 0..s.dcs.len() {
                let rates: Vec<f64> = (0..s.duration_s).map(|t| s.demand(dc, t as f64 + 0.5)).collect();
                let share = s.hard.sustained_per_s() as f64 / s.dcs.len() as f64;
                assert!(rates.iter().any(|&r| r < share / 2.0), "{} dc {dc} is never light", s.name);
                assert!(rates.iter().any(|&r| r > share * 1.5), "{} dc {dc} is never heavy", s.name);
            }
        }
    }

    #[test]
    fn storm_is_chaos_with_overlapping_faults() {
        let (chaos, storm) = (Scenario::chaos(5), Scenario::storm(5));
        assert_eq!(storm.name, "storm/us-eu-ap");
        assert!(storm.overloaded && storm.chaos);
        assert!(storm.fault_mean_gap_s * 3.0 <= chaos.fault_mean_gap_s);
        assert!(storm.fault_duration_scale > chaos.fault_duration_scale);
        assert_eq!(storm.offered_load(), chaos.offered_load());
    }

    #[test]
    fn the_calm_scenarios_are_not_overloaded() {
        for s in [Scenario::diurnal(), Scenario::tenant_shift()] {
            assert_eq!(s.offered_load().over_limit_fraction, 0.0, "{}", s.name);
            assert!(!s.overloaded);
        }
    }
}
