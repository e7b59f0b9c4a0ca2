//! What `hidden-drop` measures of an adaptive limit: how fast and how well it follows a partner
//! that lowers its limit unannounced, and how fast it comes back once the limit returns.

use crate::partner::Partner;
use serde::Serialize;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HiddenDropMetrics {
    /// From the drop to the end of the first whole second in which at most 2% of the calls were
    /// answered 429 and the partner accepted at least 0.9 of its hidden limit, in renew periods.
    pub convergence_renew_periods: f64,
    /// Calls answered 429 ÷ calls, over the whole drop (the convergence included).
    pub drop_429_ratio: f64,
    /// Calls the partner accepted per second ÷ its hidden limit, over the whole drop.
    pub drop_utilization: f64,
    /// From the return to the end of the first whole second in which both the effective R and
    /// the calls admitted were at least 0.97 of the configured R (the R leased for the
    /// 1,000/s upstream); none if that never happened.
    pub recovery_s: Option<f64>,
    /// The lowest effective R during the drop, per second.
    pub effective_r_min_per_s: f64,
    pub hidden_low: u64,
}

/// `admitted`: calls admitted per second over every DC; `effective`: the leader's effective R
/// (per second) at each second; `configured_r`: per second.
pub fn hidden_drop_metrics(
    partner: &Partner,
    admitted: &[u64],
    effective: &[f64],
    configured_r: f64,
    renew_s: f64,
) -> Option<HiddenDropMetrics> {
    let steps = &partner.limit().steps;
    let high = steps.first()?.1;
    let (drop_i, &(drop_s, low)) = steps.iter().enumerate().find(|(_, s)| s.1 < high)?;
    let return_s = steps.iter().skip(drop_i + 1).find(|s| s.1 >= high).map_or(f64::INFINITY, |s| s.0);
    let (from, until) = (drop_s.ceil() as usize, (return_s.floor() as usize).min(partner.calls_per_s.len()));
    let calls = |s: usize| partner.calls_per_s[s] as f64;
    let r429 = |s: usize| partner.answered_429_per_s[s] as f64;
    let converged =
        (from..until).find(|&s| calls(s) > 0.0 && r429(s) <= 0.02 * calls(s) && calls(s) - r429(s) >= 0.9 * low as f64);
    let total_calls: f64 = (from..until).map(calls).sum();
    let total_429: f64 = (from..until).map(r429).sum();
    let seconds = until.saturating_sub(from).max(1) as f64;
    let recovered = (return_s.ceil() as usize..admitted.len().min(effective.len()))
        .find(|&s| effective[s] >= 0.97 * configured_r && admitted[s] as f64 >= 0.97 * configured_r);
    Some(HiddenDropMetrics {
        convergence_renew_periods: converged.map_or(f64::INFINITY, |s| (s as f64 + 1.0 - drop_s) / renew_s),
        drop_429_ratio: if total_calls > 0.0 { total_429 / total_calls } else { 0.0 },
        drop_utilization: (total_calls - total_429) / seconds / low as f64,
        recovery_s: recovered.map(|s| s as f64 + 1.0 - return_s),
        effective_r_min_per_s: effective[from.min(effective.len())..until.min(effective.len())]
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min),
        hidden_low: low,
    })
}
