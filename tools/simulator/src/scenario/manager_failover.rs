//! `manager-failover`: BKK's leading DC manager dies every 60 s while both DCs offer more than
//! the limit and the coordinators are reachable. What a failover costs is the DC's admitted
//! rate in the seconds after each kill against its share before it ([`failover_costs`]).

use super::{Demand, Scenario};
use crate::faults::{Fault, ScheduledFault, Victim};

/// Seconds between two kills, and how many.
pub const KILL_EVERY_S: u64 = 60;
pub const KILLS: u64 = 4;

impl Scenario {
    /// Both DCs offer 1,350/s throughout; BKK's leading manager dies at 60, 120, 180 and 240 s
    /// (its standby claims the DC a leader TTL later; the dead one comes back 5 s after).
    pub fn manager_failover() -> Self {
        let faults = (1..=KILLS)
            .map(|k| {
                let at_s = (k * KILL_EVERY_S) as f64;
                ScheduledFault::new(at_s, 5.0, Victim::LeadingManager { dc: 0 }, Fault::DcManagerCrash)
            })
            .collect();
        let busy = || Demand::Steps(vec![(0.0, 1_350.0)]);
        let mut s = Scenario::bkk_and_europe("manager-failover", busy(), busy(), (KILLS + 1) * KILL_EVERY_S);
        s.fixed_faults = faults;
        s
    }
}

/// What one failover cost DC 0: its share (mean admitted per second over the 20 s before the
/// kill), the calls it admitted below that share in the 20 s after, and that loss in renew
/// periods of its share.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FailoverCost {
    pub kill_s: u64,
    pub share_per_s: f64,
    pub lost_calls: f64,
    pub lost_renew_periods: f64,
}

/// [`FailoverCost`] of every kill, from DC 0's admitted calls per second.
pub fn failover_costs(admitted_per_s: &[f64], renew_s: f64) -> Vec<FailoverCost> {
    (1..=KILLS)
        .map(|k| {
            let kill = (k * KILL_EVERY_S) as usize;
            let before = &admitted_per_s[kill.saturating_sub(20)..kill.saturating_sub(2)];
            let share = before.iter().sum::<f64>() / before.len().max(1) as f64;
            let after = admitted_per_s.get(kill..(kill + 20).min(admitted_per_s.len())).unwrap_or(&[]);
            let lost: f64 = after.iter().map(|a| (share - a).max(0.0)).sum();
            FailoverCost {
                kill_s: kill as u64,
                share_per_s: share,
                lost_calls: lost,
                lost_renew_periods: lost / (share * renew_s).max(1.0),
            }
        })
        .collect()
}

/// Run `sc` (a [`Scenario::manager_failover`], its bugs as set) for `seed`: the violations and
/// what each failover cost DC 0.
pub fn run_failovers(sc: Scenario, seed: u64) -> (u64, Vec<FailoverCost>) {
    let renew_s = sc.renew_ms as f64 / 1_000.0;
    let mut w = crate::World::new(sc, crate::Policy::Leasehold, seed);
    w.run();
    let m = &w.metrics;
    (m.upstream_rejections + m.invariant_breaches, failover_costs(&m.series.admitted[0], renew_s))
}
