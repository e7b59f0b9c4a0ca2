//! `tenants`: the SaaS case of seed 004 at its real count. Ten thousand tenants each bought a
//! limit of their own (rate and burst, by tier), served in three regions; demand across tenants
//! follows Zipf's law and each tenant's traffic moves from region to region.
//!
//! Each seed is one tenant (seed `k` is the `k`-th largest, wrapping every [`TENANTS`]), run on
//! the real cores from coordinator to pods. Limits never share quota (every limit has its own
//! ledger and leases), so 10,000 seeds are the 10,000 tenants; what the shared processes add
//! when one of them serves them all (batched reports and leases) is measured by
//! `leasehold-lab bench control-plane --limits`, not here.

use super::{DcSim, Demand, Scenario};
use crate::upstream::HardLimit;
use leasehold_core::quota::Quota;
use leasehold_core::rng::SeededRng;

/// Tenants in the population; seeds past it wrap around.
pub const TENANTS: u64 = 10_000;
/// The largest tenant's offered demand, requests per second; tenant `k` offers `PEAK / k`.
const PEAK_PER_S: f64 = 3_000.0;
/// Zipf's exponent over tenants' ranks.
const ZIPF_S: f64 = 1.0;
const DURATION_S: u64 = 130;
/// The tenant's traffic starts once the services have elected their leaders and leased: the
/// cold start of the whole system is not the tenant's to pay.
const WARMUP_S: f64 = 10.0;
const PODS_PER_REGION: usize = 2;
/// The share of a tenant's demand its busiest region offers (the others split the rest).
const BUSIEST_SHARE: f64 = 0.7;

/// What a tenant bought: requests per second and burst, by its rank in the population.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Tier {
    pub name: &'static str,
    pub rate_per_s: u64,
    pub burst: u64,
}

/// Ranks below 100 (the top 1%) bought 30,000/min with a burst of 6,000 (seed 004's tenant);
/// those below 1,000 a tenth of that; everyone else a hundredth.
pub(super) fn tier(rank: u64) -> Tier {
    match rank * 100 / TENANTS {
        0 => Tier { name: "enterprise", rate_per_s: 500, burst: 6_000 },
        1..=9 => Tier { name: "business", rate_per_s: 50, burst: 600 },
        _ => Tier { name: "starter", rate_per_s: 5, burst: 60 },
    }
}

/// The tenant a seed runs: ranks 1..=TENANTS.
pub(super) fn rank(seed: u64) -> u64 {
    (seed.max(1) - 1) % TENANTS + 1
}

/// Tenant `rank`'s offered demand over all regions, requests per second.
pub(super) fn offered_per_s(rank: u64) -> f64 {
    PEAK_PER_S / (rank as f64).powf(ZIPF_S)
}

impl Scenario {
    pub fn tenants(seed: u64) -> Self {
        let rank = rank(seed);
        let tier = tier(rank);
        let total = offered_per_s(rank);
        let mut rng = SeededRng::new(seed ^ 0x007e_4a47);
        // The busiest region changes every 15–45 s, starting at a region of the seed's choosing.
        let period_s = 15.0 + 30.0 * rng.next_f64();
        let first = rng.next_u64() as usize % 3;
        let phases = ((DURATION_S as f64 - WARMUP_S) / period_s).ceil() as usize;
        let quiet = total * (1.0 - BUSIEST_SHARE) / 2.0;
        let demand = |region: usize| {
            let phase = |k: usize| {
                let busiest = (first + k) % 3 == region;
                (WARMUP_S + k as f64 * period_s, if busiest { total * BUSIEST_SHARE } else { quiet })
            };
            Demand::Steps(std::iter::once((0.0, 0.0)).chain((0..phases).map(phase)).collect())
        };
        // 2% of R per region, with a token per pod: usable, and small beside the rest.
        let floor = Quota::new(tier.rate_per_s * 20, PODS_PER_REGION as u64 * 1_000);
        let regions = [("us", 20u64), ("eu", 90), ("ap", 160)];
        let dcs = regions
            .iter()
            .enumerate()
            .map(|(i, (name, lat))| DcSim {
                name: (*name).into(),
                pods: PODS_PER_REGION,
                upstream_latency_ms: *lat,
                floor,
                demand: demand(i),
            })
            .collect();
        let hard = HardLimit::TokenBucket { rate_per_s: tier.rate_per_s, burst: tier.burst };
        let mut s = Scenario::base(&format!("tenants/{}", tier.name), hard, dcs, DURATION_S);
        s.steps_s = (1..phases).map(|k| WARMUP_S + k as f64 * period_s).collect();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_follow_rank_and_demand_follows_zipf() {
        assert_eq!(tier(1).name, "enterprise");
        assert_eq!(tier(99).name, "enterprise");
        assert_eq!(tier(100).name, "business");
        assert_eq!(tier(999).name, "business");
        assert_eq!(tier(1_000).name, "starter");
        assert_eq!(tier(TENANTS).name, "starter");
        assert_eq!(rank(1), 1);
        assert_eq!(rank(TENANTS + 1), 1);
        assert!((offered_per_s(10) - offered_per_s(1) / 10.0).abs() < 1e-9);
        // The largest tenants offer more than they bought, the smallest far less.
        assert!(offered_per_s(1) > 5.0 * tier(1).rate_per_s as f64);
        assert!(offered_per_s(TENANTS) < 0.1 * tier(TENANTS).rate_per_s as f64);
    }

    #[test]
    fn a_tenant_s_demand_moves_between_its_regions() {
        for seed in [1, 150, 5_000] {
            let s = Scenario::tenants(seed);
            let total = offered_per_s(rank(seed));
            for dc in 0..3 {
                let rates: Vec<f64> = (0..s.duration_s).map(|t| s.demand(dc, t as f64 + 0.5)).collect();
                assert!(rates.iter().any(|&r| r > total * 0.5), "{} region {dc} is never busiest", s.name);
                assert!(rates.iter().any(|&r| r < total * 0.2), "{} region {dc} is never quiet", s.name);
            }
            let floors: u64 = s.dcs.iter().map(|d| d.floor.rate_milli_per_s).sum();
            assert!(floors < s.quota.rate_milli_per_s / 10, "{}: floors {floors}", s.name);
        }
    }
}
