//! From per-second counts and the fault schedule: utilization outside faults and the recovery
//! time of each fault. Pure, so it is tested on its own.
//!
//! * A second's utilization is `admitted / min(offered, R)`: the share of what could have been
//!   admitted under the leased rate `R` (demand above `R` is the limiter's job to refuse).
//! * Seconds count as "outside faults" when they come more than three DC-lease TTLs after the
//!   last fault healed (and before the next starts), after the warm-up.
//! * A fault's recovery is the time from its healing until a two-second average utilization is
//!   back within 5% of the fault-free level, or of the level in the two seconds before the fault
//!   if that was lower (but never below 90% of the fault-free level).
//! * While demand moves between DCs the leases follow it up to a DC-lease lifetime late: the
//!   capacity a shrinking DC no longer needs counts until its pods confirm the smaller lease, or
//!   until its lease ends. No fault causes that. So recovery is judged on the utilization with
//!   that lag excused ([`lag_excused`]): each DC's unserved demand, up to how much its offered
//!   load grew over the last DC-lease TTL. A DC whose demand holds or falls has nothing excused,
//!   and a DC left on its floor falls further behind than its growth: neither counts as
//!   recovered.

use super::schedule::Fault;

pub struct Judged {
    pub utilization_outside_faults: f64,
    /// Per fault: seconds from healing to recovery (None: not within its quiet stretch).
    pub recovery_s: Vec<Option<f64>>,
    pub seconds_outside_faults: usize,
}

fn usable(offered: f64, rate: f64) -> f64 {
    offered.min(rate)
}

/// Per second, the unserved demand that leases following demand one DC-lease TTL late explain:
/// for each DC, its shortfall, up to how much its offered load grew since `dc_ttl_s` earlier.
/// Indexed `[second][dc]`, like the load's bins.
pub fn lag_excused(offered_by_dc: &[Vec<u64>], admitted_by_dc: &[Vec<u64>], dc_ttl_s: f64) -> Vec<f64> {
    let back = dc_ttl_s.max(0.0).ceil() as usize;
    (0..offered_by_dc.len().min(admitted_by_dc.len()))
        .map(|s| {
            let then = &offered_by_dc[s.saturating_sub(back)];
            offered_by_dc[s]
                .iter()
                .zip(&admitted_by_dc[s])
                .zip(then)
                .map(|((&o, &a), &o_then)| o.saturating_sub(a).min(o.saturating_sub(o_then)) as f64)
                .sum()
        })
        .collect()
}

/// `excused`: per second, the shortfall the lag explains ([`lag_excused`]; empty for none).
pub fn judge(
    offered: &[f64],
    admitted: &[f64],
    excused: &[f64],
    rate: f64,
    faults: &[Fault],
    dc_ttl_s: f64,
    warmup_s: f64,
) -> Judged {
    let n = offered.len().min(admitted.len());
    let outside = |s: usize| {
        let t = s as f64;
        if t < warmup_s {
            return false;
        }
        // Not inside a fault, and more than 3 TTLs after every fault that healed before it.
        faults.iter().all(|f| t + 1.0 <= f.at_s || t >= f.heal_at_s + 3.0 * dc_ttl_s)
    };
    let (mut got, mut could, mut seconds) = (0.0, 0.0, 0);
    for s in (0..n).filter(|&s| outside(s)) {
        got += admitted[s];
        could += usable(offered[s], rate);
        seconds += 1;
    }
    let level = if could > 0.0 { got / could } else { 1.0 };
    // Utilization with the lag excused (never above full use), for recovery.
    let u = |s: usize| {
        let c = usable(offered[s], rate);
        if c > 0.0 {
            let excused = excused.get(s).copied().unwrap_or(0.0).min((c - admitted[s]).max(0.0));
            (admitted[s] + excused) / c
        } else {
            1.0
        }
    };
    let recovery_s = faults
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let until = faults.get(i + 1).map_or(n as f64, |next| next.at_s);
            let first = f.heal_at_s.ceil() as usize;
            let start = f.at_s.floor() as usize;
            let before = (start >= 2 && start <= n).then(|| (u(start - 2) + u(start - 1)) / 2.0);
            let reference = before.map_or(level, |b| b.min(level)).max(0.9 * level);
            (first..n.saturating_sub(1))
                .take_while(|&s| ((s + 2) as f64) <= until)
                .find(|&s| (u(s) + u(s + 1)) / 2.0 >= 0.95 * reference)
                .map(|s| (s as f64 - f.heal_at_s).max(0.0))
        })
        .collect();
    Judged { utilization_outside_faults: level, recovery_s, seconds_outside_faults: seconds }
}
