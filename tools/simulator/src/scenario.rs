//! Scenarios: topology, limits, demand and timing. Numbers come from the seeds.

use crate::upstream::HardLimit;
use leasehold_core::quota::Quota;

mod hidden_drop;
mod limit_change;
pub mod manager_failover;
mod overloaded;
mod tenants;
mod ttl_lowering;

pub use hidden_drop::{HIDDEN_DROP_S, HIDDEN_HIGH, HIDDEN_LOW, HIDDEN_RETURN_S};
pub use overloaded::OfferedLoad;
pub use tenants::TENANTS;

#[derive(Clone, Debug)]
pub enum Demand {
    /// Follow-the-sun: `low + (peak-low)·shape(local hour)`, shape peaking at 12:00 local.
    Diurnal { low: f64, peak: f64, utc_offset_h: f64 },
    /// Piecewise constant: `(from_s, rate)` pairs, sorted by time.
    Steps(Vec<(f64, f64)>),
}

#[derive(Clone, Debug)]
pub struct DcSim {
    pub name: String,
    pub pods: usize,
    /// One-way latency from this DC's pods to the upstream.
    pub upstream_latency_ms: u64,
    pub floor: Quota,
    pub demand: Demand,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub hard: HardLimit,
    /// R and B handed out by the coordinator (derived from `hard`, see [`Scenario::leased_quota`]).
    pub quota: Quota,
    pub dcs: Vec<DcSim>,
    pub duration_s: u64,
    /// Seconds of simulated time per 24 h of demand.
    pub day_s: f64,
    /// Uniform jitter added to every upstream call's latency.
    pub jitter_ms: u64,
    /// Times of abrupt demand changes (rebalance is measured after each).
    pub steps_s: Vec<f64>,
    /// Faults are injected in `[fault_from_s, fault_until_s)`; none when `chaos` is false.
    pub chaos: bool,
    pub fault_from_s: u64,
    pub fault_until_s: u64,
    /// Mean time between two fault onsets (exponential gaps): short gaps make faults overlap.
    pub fault_mean_gap_s: f64,
    /// Multiplies every fault's duration (1.0: the schedule's own ranges).
    pub fault_duration_scale: f64,
    /// The demand is meant to exceed the limit, so that a leak would reach the upstream: a run
    /// must show the judge has teeth (the uncoordinated baseline breaks the limit).
    pub overloaded: bool,
    pub pod_report_ms: u64,
    /// The longest a pod's limit with nothing new goes without a report (the Rust pod's
    /// `max_quiet_report_ms`, `shared/core/src/quiet_reports.rs`). 0, the scenarios' default: every
    /// period, as the seeds recorded in tests (negative controls among them) were found with;
    /// `simulate::quiet_reports_*` runs the scenarios with the Rust pod's default.
    pub pod_quiet_ms: u64,
    pub dc_report_ms: u64,
    pub renew_ms: u64,
    pub pod_ttl_ms: u64,
    pub dc_ttl_ms: u64,
    pub leader_ttl_ms: u64,
    /// How long a request may wait in a pod's queue for a token.
    pub queue_wait_ms: u64,
    pub queue_cap: usize,
    pub max_clock_offset_ms: u64,
    pub max_clock_drift: f64,
    /// Replaces the expiry policy the nodes assume (tests use it to break the drift assumption
    /// on purpose and check that the checkers notice).
    pub expiry_override: Option<leasehold_core::expiry::ExpiryPolicy>,
    /// Pauses are machine suspends; with this on, a suspended node's clock stops meanwhile (as
    /// `CLOCK_MONOTONIC` does on Linux). A negative control: the services read a clock that
    /// counts suspension (`leasehold_process::clock`), which the default models.
    pub clocks_stop_while_suspended: bool,
    /// Best-effort mode: each DC may use this much on top of its floor once its lease expired.
    /// Zero means strict mode.
    pub emergency_per_dc: Quota,
    /// Negative controls: bring back the holes of docs/FINDINGS.md (see `leasehold_core::bugs`).
    pub bugs: leasehold_core::bugs::KnownBugs,
    /// A fixed fault schedule instead of a seeded one (a named path through the failure space).
    pub fixed_faults: Vec<crate::faults::ScheduledFault>,
    /// The partner's own limit, lower than `hard` at times and never told (answers 429s).
    pub hidden: Option<crate::partner::HiddenLimit>,
    /// The limit follows upstream 429s (`LimitConfig.adaptive`).
    pub adaptive: Option<leasehold_core::aimd::AdaptiveConfig>,
}

impl Scenario {
    fn base(name: &str, hard: HardLimit, dcs: Vec<DcSim>, duration_s: u64) -> Self {
        let mut s = Scenario {
            name: name.into(),
            hard,
            quota: Quota::ZERO,
            dcs,
            duration_s,
            day_s: duration_s as f64,
            jitter_ms: 4,
            steps_s: Vec::new(),
            chaos: false,
            fault_from_s: 0,
            fault_until_s: 0,
            fault_mean_gap_s: 12.0,
            fault_duration_scale: 1.0,
            overloaded: false,
            pod_report_ms: 250,
            pod_quiet_ms: 0,
            dc_report_ms: 250,
            renew_ms: 1_000,
            pod_ttl_ms: 5_000,
            dc_ttl_ms: 10_000,
            leader_ttl_ms: 3_000,
            queue_wait_ms: 300,
            queue_cap: 2_000,
            max_clock_offset_ms: 0,
            max_clock_drift: 0.0,
            expiry_override: None,
            clocks_stop_while_suspended: false,
            emergency_per_dc: Quota::ZERO,
            bugs: Default::default(),
            fixed_faults: Vec::new(),
            hidden: None,
            adaptive: None,
        };
        s.quota = s.leased_quota();
        s
    }

    /// The fault schedule's pace: mean gap between onsets and duration scale.
    pub fn fault_pace(&self) -> crate::faults::FaultPace {
        crate::faults::FaultPace { mean_gap_s: self.fault_mean_gap_s, duration_scale: self.fault_duration_scale }
    }

    /// Σ E: the documented overshoot bound of best-effort mode (zero in strict mode).
    pub fn overshoot_bound(&self) -> Quota {
        Quota::new(
            self.emergency_per_dc.rate_milli_per_s * self.dcs.len() as u64,
            self.emergency_per_dc.burst_milli * self.dcs.len() as u64,
        )
    }

    /// The limit the upstream judges against: the hard limit, widened by Σ E in best-effort mode.
    pub fn judged_limit(&self) -> HardLimit {
        let e = self.overshoot_bound();
        match self.hard {
            HardLimit::SlidingWindow { calls, window_ms } => HardLimit::SlidingWindow {
                calls: calls + (e.rate_per_s() * window_ms as f64 / 1_000.0 + e.burst()).ceil() as u64,
                window_ms,
            },
            HardLimit::TokenBucket { rate_per_s, burst } => HardLimit::TokenBucket {
                rate_per_s: rate_per_s + e.rate_per_s().ceil() as u64,
                burst: burst + e.burst().ceil() as u64,
            },
        }
    }

    /// Largest difference in pod→upstream latency, jitter included: the ledger's release hold.
    pub fn egress_spread_ms(&self) -> u64 {
        let lat: Vec<u64> = self.dcs.iter().map(|d| d.upstream_latency_ms).collect();
        lat.iter().max().unwrap_or(&0) - lat.iter().min().unwrap_or(&0) + self.jitter_ms
    }

    /// R and B to lease so that the upstream's hard limit holds at the upstream, not only at the
    /// pods: jitter of `J` lets a bucket's calls bunch up by `R·J`, which comes out of the burst.
    /// Latency differences between DCs are handled by the ledger's release hold instead.
    ///
    /// Buckets refill on each pod's clock, which may run fast by δ (the assumed `max_drift`), so
    /// in true time a bucket refills `R·(1 + δ)`: the sizing includes that margin.
    pub fn leased_quota(&self) -> Quota {
        use leasehold_core::limits::sizing;
        let drift = leasehold_core::expiry::ExpiryPolicy::default().max_drift;
        match self.hard {
            HardLimit::SlidingWindow { calls, window_ms } => {
                // Keep B small (2% of the calls): the rest is rate.
                let burst = calls * 2 / 100;
                let rate = sizing::sliding_window_rate_per_s(calls, window_ms, burst, drift, self.jitter_ms);
                Quota::per_s(rate, burst)
            }
            HardLimit::TokenBucket { rate_per_s, burst } => {
                // To the milli-request: whole requests would cost a 5/s tenant a fifth of its limit.
                sizing::token_bucket_quota(rate_per_s, burst, drift, self.jitter_ms)
            }
        }
    }

    /// Offered demand of DC `i` at simulated second `t`, requests per second.
    pub fn demand(&self, i: usize, t: f64) -> f64 {
        match &self.dcs[i].demand {
            Demand::Diurnal { low, peak, utc_offset_h } => {
                let utc_h = (t / self.day_s * 24.0) % 24.0;
                let local_h = (utc_h + utc_offset_h).rem_euclid(24.0);
                let shape = ((1.0 + (2.0 * std::f64::consts::PI * (local_h - 12.0) / 24.0).cos()) / 2.0).powi(4);
                low + (peak - low) * shape
            }
            Demand::Steps(steps) => steps.iter().take_while(|(from, _)| *from <= t).last().map_or(0.0, |s| s.1),
        }
    }

    /// The partner API's topology: a 1,000 QPS sliding-window limit, BKK and Europe with 4 pods
    /// each, 50 QPS floors with a token per pod, and the given demand per DC.
    fn bkk_and_europe(name: &str, bkk: Demand, europe: Demand, duration_s: u64) -> Self {
        let hard = HardLimit::SlidingWindow { calls: 1_000, window_ms: 1_000 };
        let floor = Quota::per_s(50, 4);
        let dc = |name: &str, upstream_latency_ms, demand| DcSim {
            name: name.into(),
            pods: 4,
            upstream_latency_ms,
            floor,
            demand,
        };
        Scenario::base(name, hard, vec![dc("bkk", 30, bkk), dc("europe", 170, europe)], duration_s)
    }

    pub fn diurnal() -> Self {
        // 24 h of demand in 24 minutes: one simulated minute per hour.
        Scenario::bkk_and_europe(
            "diurnal",
            Demand::Diurnal { low: 150.0, peak: 760.0, utc_offset_h: 7.0 },
            Demand::Diurnal { low: 60.0, peak: 650.0, utc_offset_h: 1.0 },
            1_440,
        )
    }

    pub fn overload() -> Self {
        // Both DCs want 900 QPS at once from t = 60 s; Europe calms down again at 420 s.
        let mut s = Scenario::bkk_and_europe(
            "overload",
            Demand::Steps(vec![(0.0, 700.0), (60.0, 900.0)]),
            Demand::Steps(vec![(0.0, 80.0), (60.0, 900.0), (420.0, 80.0)]),
            600,
        );
        s.steps_s = vec![60.0, 420.0];
        s
    }

    pub fn tenant_shift() -> Self {
        // 30,000 requests/minute with a burst of 6,000 (the tenant with rate and burst):
        // R = 500/s, B = 6,000.
        let period = 120.0;
        let duration_s = 720;
        let phases = (duration_s as f64 / period).ceil() as usize;
        let demands = (0..3)
            .map(|dc| {
                let steps = (0..phases).map(|k| (k as f64 * period, if k % 3 == dc { 420.0 } else { 25.0 })).collect();
                Demand::Steps(steps)
            })
            .collect();
        let mut s = Scenario::three_regions("tenant-shift", demands, duration_s);
        s.steps_s = (1..6).map(|k| k as f64 * period).collect();
        s
    }

    /// The rate-and-burst tenant's topology: R = 500/s and B = 6,000 (a token bucket), regions
    /// us, eu and ap with 3 pods each, 20/s floors with a token per pod, and the given demand per region.
    fn three_regions(name: &str, demands: Vec<Demand>, duration_s: u64) -> Self {
        let hard = HardLimit::TokenBucket { rate_per_s: 500, burst: 6_000 };
        let floor = Quota::per_s(20, 3);
        let regions = [("us", 20u64), ("eu", 90), ("ap", 160)];
        let dcs = regions
            .iter()
            .zip(demands)
            .map(|((name, lat), demand)| DcSim {
                name: (*name).into(),
                pods: 3,
                upstream_latency_ms: *lat,
                floor,
                demand,
            })
            .collect();
        Scenario::base(name, hard, dcs, duration_s)
    }

    pub fn by_name(name: &str, seed: u64) -> Option<Self> {
        match name {
            "diurnal" => Some(Scenario::diurnal()),
            "overload" => Some(Scenario::overload()),
            "tenant-shift" => Some(Scenario::tenant_shift()),
            "chaos" => Some(Scenario::chaos(seed)),
            "storm" => Some(Scenario::storm(seed)),
            "rolling-restart" => Some(Scenario::rolling_restart()),
            "limit-change" => Some(Scenario::limit_change()),
            "ttl-lowering" => Some(Scenario::ttl_lowering()),
            "manager-failover" => Some(Scenario::manager_failover()),
            "hidden-drop" => Some(Scenario::hidden_drop()),
            "tenants" => Some(Scenario::tenants(seed)),
            _ => None,
        }
    }

    /// The path an audit used to break the limit (docs/FINDINGS.md#f1): demand moves from BKK to Europe while a rolling
    /// restart lowers `dc_ttl_ms` to 30% (10 s → 3 s); BKK acks its new, smaller lease and
    /// Europe gets the difference; then BKK is cut off from the coordinator, so its newest lease
    /// expires while the older, larger one it replaced would still be valid.
    pub fn rolling_restart() -> Self {
        use crate::faults::{Fault, Rollout, ScheduledFault, Victim};
        // Six cycles of 40 s; the cut comes at a different offset after each restart, so one of
        // them lands between the new leader's first lease and the old lease's end.
        let cycles = 6;
        let (mut bkk, mut europe, mut faults) = (vec![(0.0, 950.0)], vec![(0.0, 60.0)], Vec::new());
        let rollout = Fault::ConfigChange { ttl_scale: 0.3, restarted: Rollout::Coordinators, dc_ttl_only: false };
        for k in 0..cycles {
            let t = 40.0 + 40.0 * k as f64;
            let (heavy, light) = if k % 2 == 0 { (&mut europe, &mut bkk) } else { (&mut bkk, &mut europe) };
            heavy.push((t + 1.0, 950.0));
            light.push((t + 1.0, 60.0));
            // Shrink (the coordinator leader restarts), then grow back 20 s later.
            faults.push(ScheduledFault::new(t, 1.0, Victim::Everyone, rollout));
            faults.push(ScheduledFault::new(t + 20.0, 1.0, Victim::Everyone, rollout));
            let dc = if k % 2 == 0 { 0 } else { 1 };
            let cut = Fault::PartitionDcCoordinator;
            faults.push(ScheduledFault::new(t + 5.0 + 0.5 * k as f64, 12.0, Victim::Dc(dc), cut));
        }
        faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let duration_s = 40 + 40 * cycles + 20;
        let mut s = Scenario::bkk_and_europe("rolling-restart", Demand::Steps(bkk), Demand::Steps(europe), duration_s);
        s.fixed_faults = faults;
        s
    }

    pub const NAMES: [&'static str; 11] = [
        "diurnal",
        "overload",
        "tenant-shift",
        "chaos",
        "storm",
        "rolling-restart",
        "limit-change",
        "hidden-drop",
        "tenants",
        "ttl-lowering",
        "manager-failover",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diurnal_matches_the_partner_api_design_s_numbers() {
        let s = Scenario::diurnal();
        // 12:00 in Bangkok is 05:00 UTC.
        let t_bkk_noon = 5.0 / 24.0 * s.day_s;
        assert!((700.0..=800.0).contains(&s.demand(0, t_bkk_noon)));
        assert!(s.demand(1, t_bkk_noon) < 110.0);
        // 12:00 in Europe (CET) is 11:00 UTC.
        let t_eu_noon = 11.0 / 24.0 * s.day_s;
        assert!((600.0..=700.0).contains(&s.demand(1, t_eu_noon)));
        assert!(s.demand(0, t_eu_noon) < 200.0);
    }

    #[test]
    fn leased_quota_keeps_the_window_bound() {
        let s = Scenario::diurnal();
        let q = s.quota;
        let bound = q.rate_per_s() * (1.01 + s.jitter_ms as f64 / 1000.0) + q.burst();
        assert!(bound <= 1_000.0, "{bound}");
        assert!(q.rate_per_s() >= 950.0);
    }
}
