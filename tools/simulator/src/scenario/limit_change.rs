//! `limit-change`: a named path through reconfiguration. Rolling restarts of the coordinators,
//! and changes applied live by the leading term, lower R and B or move floor from one DC to the other while a DC is cut off from the
//! coordinator, with every DC over its share, so any quota the change creates is spent.

use super::{Demand, Scenario};
use crate::faults::{Fault, LimitEdit, ScheduledFault, Victim};

/// One cycle of the path: seconds between two changes.
const CYCLE_S: f64 = 60.0;
const CYCLES: u64 = 20;

impl Scenario {
    /// Twenty cycles on the partner API's topology, both DCs offering 1,350/s throughout:
    /// 1. BKK is cut off, then 80% of its floor moves to Europe (back 40 s later);
    /// 2. the same with Europe cut off and giving up floor;
    /// 3. R and B go down to 60% (back 20 s later), then BKK is cut off 1 s after the change;
    /// 4. the same, Europe cut off 3 s after the change;
    /// 5. R, B and floor (from BKK) all change at once while BKK is cut off;
    /// 6. floor moves from BKK with nobody cut off;
    ///
    /// then six cycles (7–12) where R and B go down while BKK cannot confirm and Europe is cut off
    /// after the first renewals, and six (13–18) that run cycles 1–6 again with each change
    /// applied in place by the leading term (as the service follows `lh_limits`) instead of
    /// restarting the coordinators with it; then the limit is removed and defined again 20 s
    /// later, applied live (19) and by restarting the coordinators (20), with no DC cut off (a
    /// cut-off DC keeps spending its floor: the documented exception).
    pub fn limit_change() -> Self {
        let cut = |at_s, dc: u64, duration_s| {
            ScheduledFault::new(at_s, duration_s, Victim::Dc(dc as usize), Fault::PartitionDcCoordinator)
        };
        let change = |at_s, duration_s, change, by_restart| {
            ScheduledFault::new(at_s, duration_s, Victim::Everyone, Fault::LimitChange { change, by_restart })
        };
        // R and B go down to `scale`; floor moves from `giver` (it keeps `scale` of its floor).
        let limit = |scale| LimitEdit::Scale { rate: true, burst: true, floor_from: None, scale };
        let floor = |giver, scale| LimitEdit::Scale { rate: false, burst: false, floor_from: Some(giver), scale };
        let mut faults = Vec::new();
        for k in 0..CYCLES {
            let t = 30.0 + CYCLE_S * k as f64;
            // The first twelve restart the coordinators with the change; the last six run the
            // first six again with the change applied live by the leading term.
            if k >= 18 {
                // The limit is removed (live, then by restart) and defined again 20 s later.
                faults.push(change(t, 20.0, LimitEdit::Remove, k != 18));
                continue;
            }
            let (arm, by_restart) = if k < 12 { (k, true) } else { (k - 12, false) };
            let change = |at_s, duration_s, edit| change(at_s, duration_s, edit, by_restart);
            let k = arm;
            match k {
                0 | 1 => {
                    faults.push(cut(t - 2.0, k, 30.0));
                    faults.push(change(t, 40.0, floor(k as usize, 0.2)));
                }
                2 | 3 => {
                    faults.push(change(t, 20.0, limit(0.6)));
                    faults.push(cut(t + 1.0 + 2.0 * (k - 2) as f64, k - 2, 12.0));
                }
                4 => {
                    faults.push(cut(t - 2.0, 0, 30.0));
                    let both = LimitEdit::Scale { rate: true, burst: true, floor_from: Some(0), scale: 0.6 };
                    faults.push(change(t, 20.0, both));
                }
                5 => faults.push(change(t, 20.0, floor(0, 0.2))),
                _ => {
                    // BKK cannot confirm its smaller lease (a pod cut off from its manager
                    // keeps its old, larger one), Europe is cut off after the new leader's
                    // first renewals: BKK is offered everything while its old claim stands.
                    faults.push(change(t, 30.0, limit(0.6)));
                    faults.push(ScheduledFault::new(t + 1.0, 10.0, Victim::PodUp { pick: 0 }, Fault::PartitionPodDc));
                    faults.push(cut(t + 3.0 + 0.5 * (k - 6) as f64, 1, 15.0));
                }
            }
        }
        faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let duration_s = 30 + CYCLES * CYCLE_S as u64;
        let heavy = || Demand::Steps(vec![(0.0, 1_350.0)]);
        let mut s = Scenario::bkk_and_europe("limit-change", heavy(), heavy(), duration_s);
        s.overloaded = true;
        s.fixed_faults = faults;
        s
    }
}
