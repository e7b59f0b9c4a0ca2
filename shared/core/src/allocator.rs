//! Splitting a parent grant among children by smoothed demand.
//!
//! Two modes, run separately for rate and for burst (the tenant with rate and burst leases both):
//! * [`AllocMode::Proportional`]: the partner API design's formula, `share_i = C · d_i·w_i / Σ
//!   d·w`.
//! * [`AllocMode::WaterFill`] (default): demand-capped weighted max-min. No child receives more than
//!   it asks for while another is starved; capacity left once every demand is met is handed out
//!   half in proportion to demand (headroom for growth) and half by weight (headroom for a child
//!   whose demand is sparse or only starting), all by weight when nobody asks for anything.
//!
//! Floors are served first; `reserve` is a fraction of the capacity held back from everyone.
//! [`Rebalancer`] adds anti-oscillation: hysteresis and a minimum interval between changes.

use serde::{Deserialize, Serialize};

/// How a grant is split among children.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllocMode {
    /// In proportion to demand (times weight), after the floors.
    Proportional,
    /// Demand-capped weighted max-min, the rest by demand and weight (the default).
    #[default]
    WaterFill,
}

/// One child's claim, in milli-units of whatever is being split.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Claim {
    /// The child's smoothed demand, in milli-units.
    pub demand_milli: u64,
    /// The child's weight (1.0 = standard; not a positive number counts as 1).
    pub weight: f64,
    /// What the child is given first, whatever its demand, in milli-units.
    pub floor_milli: u64,
}

impl Claim {
    /// A claim of `demand_milli` with weight 1 and no floor.
    pub fn new(demand_milli: u64) -> Self {
        Claim { demand_milli, weight: 1.0, floor_milli: 0 }
    }
}

/// Split `capacity_milli` among `claims`. The result never sums above `capacity_milli`.
pub fn allocate(capacity_milli: u64, reserve: f64, claims: &[Claim], mode: AllocMode) -> Vec<u64> {
    let n = claims.len();
    if n == 0 {
        return Vec::new();
    }
    let reserve = if reserve.is_finite() { reserve.clamp(0.0, 1.0) } else { 0.0 };
    let usable = (capacity_milli as f64 * (1.0 - reserve)).floor() as u64;
    let weights: Vec<f64> =
        claims.iter().map(|c| if c.weight.is_finite() && c.weight > 0.0 { c.weight } else { 1.0 }).collect();

    // Floors first, scaled down together if they do not all fit.
    let floor_sum: u64 = claims.iter().map(|c| c.floor_milli).sum();
    let mut out: Vec<u64> = if floor_sum <= usable {
        claims.iter().map(|c| c.floor_milli).collect()
    } else {
        claims.iter().map(|c| (c.floor_milli as u128 * usable as u128 / floor_sum as u128) as u64).collect()
    };
    let mut left = usable - out.iter().sum::<u64>();
    let want: Vec<u64> = claims.iter().zip(&out).map(|(c, &o)| c.demand_milli.saturating_sub(o)).collect();

    match mode {
        AllocMode::Proportional => {
            let extra =
                split_by(left, &want.iter().zip(&weights).map(|(&d, &w)| d as f64 * w).collect::<Vec<_>>(), &weights);
            for (o, e) in out.iter_mut().zip(extra) {
                *o += e;
            }
        }
        AllocMode::WaterFill => {
            let fill = water_fill(left, &want, &weights);
            for (o, f) in out.iter_mut().zip(&fill) {
                *o += f;
            }
            left -= fill.iter().sum::<u64>();
            if left > 0 {
                // Headroom: half in proportion to total demand (every child gets the same relative
                // slack), half by weight, so that a child whose demand is sparse or just starting
                // (a pod between two rare requests, a region the demand is moving to) has some.
                let by_demand =
                    split_by(left / 2, &claims.iter().map(|c| c.demand_milli as f64).collect::<Vec<_>>(), &weights);
                for (o, e) in out.iter_mut().zip(by_demand) {
                    *o += e;
                }
                left = usable - out.iter().sum::<u64>();
                for (o, e) in out.iter_mut().zip(split_by(left, &weights, &weights)) {
                    *o += e;
                }
            }
        }
    }
    debug_assert!(out.iter().sum::<u64>() <= capacity_milli);
    out
}

/// Split `amount` in proportion to `keys`; when every key is zero, in proportion to `fallback`.
/// Rounds down, so the parts never sum above `amount`.
fn split_by(amount: u64, keys: &[f64], fallback: &[f64]) -> Vec<u64> {
    let total: f64 = keys.iter().sum();
    let (keys, total) = if total > 0.0 { (keys, total) } else { (fallback, fallback.iter().sum()) };
    if total <= 0.0 {
        return vec![0; keys.len()];
    }
    let mut parts: Vec<u64> = keys.iter().map(|k| (amount as f64 * k / total).floor() as u64).collect();
    // Float rounding can overshoot by a milli-unit: trim from the largest part.
    while parts.iter().sum::<u64>() > amount {
        let i = (0..parts.len()).max_by_key(|&i| parts[i]).unwrap_or(0);
        parts[i] -= 1;
    }
    parts
}

/// Weighted max-min fair allocation of `capacity` capped at each child's `want`.
fn water_fill(capacity: u64, want: &[u64], weights: &[f64]) -> Vec<u64> {
    let n = want.len();
    let mut out = vec![0u64; n];
    let mut active: Vec<usize> = (0..n).filter(|&i| want[i] > 0).collect();
    let mut left = capacity;
    // Each round either satisfies at least one child or hands out everything: ≤ n rounds.
    for _ in 0..=n {
        if active.is_empty() || left == 0 {
            break;
        }
        let wsum: f64 = active.iter().map(|&i| weights[i]).sum();
        let level = left as f64 / wsum;
        let satisfied: Vec<usize> =
            active.iter().copied().filter(|&i| (want[i] - out[i]) as f64 <= level * weights[i]).collect();
        if satisfied.is_empty() {
            let shares = split_by(left, &active.iter().map(|&i| weights[i]).collect::<Vec<_>>(), &[]);
            for (&i, s) in active.iter().zip(shares) {
                out[i] += s;
            }
            break;
        }
        for &i in &satisfied {
            let give = want[i] - out[i];
            out[i] += give;
            left -= give;
        }
        active.retain(|i| !satisfied.contains(i));
    }
    out
}

/// Anti-oscillation: keeps the current split unless the new one differs enough and the last
/// change is old enough.
#[derive(Clone, Debug)]
pub struct Rebalancer {
    /// Minimum change of any child's share, as a fraction of the capacity, that triggers a change.
    pub hysteresis: f64,
    /// Minimum time between two changes, in nanoseconds.
    pub min_interval_ns: u64,
    current: Vec<u64>,
    last_change_ns: Option<u64>,
}

impl Rebalancer {
    /// No split yet: a later one is kept unless a share moves by more than `hysteresis` and the
    /// last change is at least `min_interval_ns` old.
    pub fn new(hysteresis: f64, min_interval_ns: u64) -> Self {
        Rebalancer { hysteresis, min_interval_ns, current: Vec::new(), last_change_ns: None }
    }

    /// Decide between the current split and `proposed`. A different number of children, or a
    /// current split that no longer fits `capacity_milli`, always takes the proposal.
    pub fn settle(&mut self, proposed: Vec<u64>, capacity_milli: u64, now_ns: u64) -> &[u64] {
        let structural = proposed.len() != self.current.len() || self.current.iter().sum::<u64>() > capacity_milli;
        let big = proposed
            .iter()
            .zip(&self.current)
            .any(|(p, c)| (p.abs_diff(*c) as f64) > self.hysteresis * capacity_milli as f64);
        let due = self.last_change_ns.is_none_or(|t| now_ns.saturating_sub(t) >= self.min_interval_ns);
        if structural || (big && due) {
            self.current = proposed;
            self.last_change_ns = Some(now_ns);
        }
        &self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(d: &[u64]) -> Vec<Claim> {
        d.iter().map(|&x| Claim::new(x)).collect()
    }

    #[test]
    fn the_partner_api_design_s_proportional_example() {
        // 900 allocatable, demands 700 and 80.
        let a = allocate(900_000, 0.0, &claims(&[700_000, 80_000]), AllocMode::Proportional);
        assert_eq!(a[0] / 1000, 807);
        assert_eq!(a[1] / 1000, 92);
    }

    #[test]
    fn water_fill_caps_at_demand_and_splits_the_rest_fairly() {
        let a = allocate(900_000, 0.0, &claims(&[900_000, 900_000]), AllocMode::WaterFill);
        assert_eq!(a, vec![450_000, 450_000]);
        let a = allocate(900_000, 0.0, &claims(&[100_000, 2_000_000]), AllocMode::WaterFill);
        assert_eq!(a, vec![100_000, 800_000]);
    }

    #[test]
    fn spare_goes_half_in_proportion_to_demand_and_half_by_weight() {
        // 600,000 spare: 300,000 as 3:1, 300,000 evenly.
        let a = allocate(1_000_000, 0.0, &claims(&[300_000, 100_000]), AllocMode::WaterFill);
        assert_eq!(a, vec![675_000, 325_000]);
        // A child between two rare requests (no smoothed demand now) still has headroom.
        let a = allocate(1_000_000, 0.0, &claims(&[200_000, 0]), AllocMode::WaterFill);
        assert_eq!(a, vec![800_000, 200_000]);
    }

    #[test]
    fn floors_weights_and_reserve() {
        let c = vec![
            Claim { demand_milli: 0, weight: 1.0, floor_milli: 50_000 },
            Claim { demand_milli: 5_000_000, weight: 1.0, floor_milli: 50_000 },
        ];
        let a = allocate(1_000_000, 0.1, &c, AllocMode::WaterFill);
        assert_eq!(a, vec![50_000, 850_000]);
        let w = vec![
            Claim { demand_milli: 10_000_000, weight: 3.0, floor_milli: 0 },
            Claim { demand_milli: 10_000_000, weight: 1.0, floor_milli: 0 },
        ];
        assert_eq!(allocate(400_000, 0.0, &w, AllocMode::WaterFill), vec![300_000, 100_000]);
    }

    #[test]
    fn hysteresis_and_min_interval_hold_the_split() {
        let mut r = Rebalancer::new(0.1, 30);
        assert_eq!(r.settle(vec![500, 500], 1_000, 0), &[500, 500]);
        assert_eq!(r.settle(vec![550, 450], 1_000, 100), &[500, 500], "5% change is below hysteresis");
        assert_eq!(r.settle(vec![800, 200], 1_000, 10), &[500, 500], "too soon");
        assert_eq!(r.settle(vec![800, 200], 1_000, 100), &[800, 200]);
        assert_eq!(r.settle(vec![300, 300, 400], 1_000, 101), &[300, 300, 400], "membership change");
    }
}
