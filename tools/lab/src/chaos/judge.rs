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
//!   load grew over the last DC-lease TTL and up to what the limiter refused (errors are never
//!   excused), in the level as in each second. A DC whose demand holds or falls has nothing
//!   excused, and a DC left on its floor falls further behind than its growth. A lease from
//!   before the fault can last a TTL past the heal and hide a DC that is no longer renewed, so
//!   the bar must hold from the recovery until a TTL after the heal.

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

/// The load's per-second counts by DC (`[second][dc]`, like its bins).
pub struct ByDc<'a> {
    pub offered: &'a [Vec<u64>],
    pub admitted: &'a [Vec<u64>],
    /// Refused by the limiter (429): what a lease too small for the demand shows as.
    pub denied: &'a [Vec<u64>],
}

/// Per second, the unserved demand that leases following demand one DC-lease TTL late explain:
/// for each DC, its shortfall, up to how much its offered load grew since `dc_ttl_s` earlier
/// and up to what the limiter refused (errors and timeouts are never excused). A long TTL
/// excuses more; the chaos runs use 6 s.
pub fn lag_excused(by_dc: &ByDc<'_>, dc_ttl_s: f64) -> Vec<f64> {
    let back = dc_ttl_s.max(0.0).ceil() as usize;
    let n = by_dc.offered.len().min(by_dc.admitted.len()).min(by_dc.denied.len());
    (0..n)
        .map(|s| {
            let then = &by_dc.offered[s.saturating_sub(back)];
            let now = by_dc.offered[s].iter().zip(&by_dc.admitted[s]).zip(&by_dc.denied[s]).zip(then);
            now.map(|(((&o, &a), &d), &o_then)| o.saturating_sub(a).min(o.saturating_sub(o_then)).min(d) as f64).sum()
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
    let excused_at =
        |s: usize| excused.get(s).copied().unwrap_or(0.0).min((usable(offered[s], rate) - admitted[s]).max(0.0));
    let (mut got, mut got_excused, mut could, mut seconds) = (0.0, 0.0, 0.0, 0);
    for s in (0..n).filter(|&s| outside(s)) {
        got += admitted[s];
        got_excused += admitted[s] + excused_at(s);
        could += usable(offered[s], rate);
        seconds += 1;
    }
    let level = if could > 0.0 { got / could } else { 1.0 };
    // Recovery compares like with like: the lag excused in the level too (never above full use).
    let level_excused = if could > 0.0 { got_excused / could } else { 1.0 };
    let u = |s: usize| {
        let c = usable(offered[s], rate);
        if c > 0.0 {
            (admitted[s] + excused_at(s)) / c
        } else {
            1.0
        }
    };
    // A lease from before the fault lasts up to a TTL after it healed: a DC whose leases are no
    // longer renewed is only found short (beyond what its growth excuses) once they end. So the
    // bar must hold from the recovery on until a TTL after healing.
    let meets = |s: usize, bar: f64| (u(s) + u(s + 1)) / 2.0 >= bar;
    let recovery_s = faults
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let until = faults.get(i + 1).map_or(n as f64, |next| next.at_s);
            let first = f.heal_at_s.ceil() as usize;
            let start = f.at_s.floor() as usize;
            let before = (start >= 2 && start <= n).then(|| (u(start - 2) + u(start - 1)) / 2.0);
            let reference = before.map_or(level_excused, |b| b.min(level_excused)).max(0.9 * level_excused);
            let bar = 0.95 * reference;
            let held_until = (f.heal_at_s + dc_ttl_s).ceil() as usize;
            let windows = || (first..n.saturating_sub(1)).take_while(|&s| ((s + 2) as f64) <= until);
            let held_from = |s: usize| meets(s, bar) && (s + 1..=held_until).all(|w| meets(w, bar));
            // Unknowable if the quiet stretch ends before a TTL has passed.
            windows()
                .any(|w| w >= held_until)
                .then(|| windows().find(|&s| held_from(s)))
                .flatten()
                .map(|s| (s as f64 - f.heal_at_s).max(0.0))
        })
        .collect();
    Judged { utilization_outside_faults: level, recovery_s, seconds_outside_faults: seconds }
}
