//! Each pod's target in a split of the DC's budget: by demand, weight or equally (the
//! allocator's water-fill), bursts rounded to whole tokens, and a rate only for pods that hold
//! one.

use super::pods::{PodView, Pods};
use super::{DcManagerConfig, SplitMode};
use crate::allocator::{allocate, AllocMode, Claim};
use crate::quota::{Quota, MILLI};

impl Pods {
    /// Pods that get a share in the next split (fresh heartbeat, healthy, not draining), by
    /// their place in [`Pods::views`] (key order), and their targets in a split of `budget`: one
    /// pass over the views, and no key copied (a DC manager of 1,000 limits splits 100,000 pods'
    /// shares a second at 100 pods).
    pub(super) fn eligible_targets(&self, cfg: &DcManagerConfig, now_ns: u64, budget: Quota) -> Vec<(usize, Quota)> {
        let eligible: Vec<(usize, &PodView)> =
            self.views.values().enumerate().filter(|(_, v)| v.eligible(cfg, now_ns, self.reading)).collect();
        let targets = split_views(budget, eligible.iter().map(|(_, v)| *v), cfg.split);
        eligible.into_iter().map(|(i, _)| i).zip(targets).collect()
    }
}

/// `parts` (milli-tokens, summing to at most `budget_milli`) rounded to whole tokens: each part
/// rounded down, then the budget's whole tokens left over handed out one each, largest
/// remainder first (ties in order). A bucket admits a call of cost 1 only with a whole token of
/// burst, so a fraction of one is useless to a pod; this way at most a fraction of one token of
/// the whole budget goes unused, not a fraction per pod.
pub(super) fn whole_tokens(parts: &[u64], budget_milli: u64) -> Vec<u64> {
    let mut out: Vec<u64> = parts.iter().map(|p| p / MILLI * MILLI).collect();
    let mut left = (budget_milli / MILLI).saturating_sub(out.iter().sum::<u64>() / MILLI);
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(parts[i] % MILLI));
    for i in order {
        if left == 0 {
            break;
        }
        out[i] += MILLI;
        left -= 1;
    }
    out
}

/// Target quota per pod of `views`, in their order.
pub(super) fn split_views<'a>(budget: Quota, views: impl Iterator<Item = &'a PodView>, mode: SplitMode) -> Vec<Quota> {
    let claims: Vec<Claim> = views
        .map(|v| match mode {
            SplitMode::Equal => Claim { demand_milli: u64::MAX / 1024, weight: 1.0, floor_milli: 0 },
            SplitMode::Weighted => Claim { demand_milli: u64::MAX / 1024, weight: v.weight, floor_milli: 0 },
            SplitMode::Demand => Claim::new(v.demand.value() as u64),
        })
        .collect();
    let bursts = whole_tokens(&allocate(budget.burst_milli, 0.0, &claims, AllocMode::WaterFill), budget.burst_milli);
    // The rate goes only to pods that hold a token: a rate without one admits nothing.
    let holding: Vec<usize> = (0..claims.len()).filter(|&i| bursts[i] >= MILLI).collect();
    let holding_claims: Vec<Claim> = holding.iter().map(|&i| claims[i]).collect();
    let mut rates = vec![0; claims.len()];
    for (&i, r) in holding.iter().zip(allocate(budget.rate_milli_per_s, 0.0, &holding_claims, AllocMode::WaterFill)) {
        rates[i] = r;
    }
    rates.into_iter().zip(bursts).map(|(r, b)| Quota::new(r, b)).collect()
}
