//! `ttl-lowering`: rolling restarts of the DC managers that lower `pod_ttl_ms` (20 s → 6 s) and
//! the emergency allowance while a DC runs on its floor alone, cut off from the coordinators,
//! with some of its pods cut off from their manager (they keep spending the old term's leases).
//! The new term must wait out the old term's longer pod leases by what the old term's record
//! in the leader key says, not by its own new settings (see `dc_manager/term_record.rs`).

use super::{Demand, Scenario};
use crate::faults::{Fault, Rollout, ScheduledFault, Victim};

/// One cycle of the path: seconds between two lowerings.
const CYCLE_S: f64 = 80.0;
const CYCLES: u64 = 4;

impl Scenario {
    /// Four cycles on the partner API's topology, both DCs offering 1,350/s throughout, pod
    /// leases of 20 s: BKK (even cycles) or Europe (odd ones) is cut off from the coordinators
    /// for 60 s; 20 s into the cut, two of its four pods lose their manager for 30 s and the
    /// managers of every DC restart with `pod_ttl_ms` and E at 30% (standbys first, then the
    /// leader); 40 s later another rolling restart brings them back.
    pub fn ttl_lowering() -> Self {
        let mut faults = Vec::new();
        // Standbys first, then each DC's leader (`world::faults`, ConfigChange).
        let rollout = Fault::ConfigChange { ttl_scale: 0.3, restarted: Rollout::DcManagers, dc_ttl_only: false };
        for k in 0..CYCLES {
            let t = 20.0 + CYCLE_S * k as f64;
            let dc = k % 2;
            faults.push(ScheduledFault::new(t, 60.0, Victim::Dc(dc as usize), Fault::PartitionDcCoordinator));
            // Pods are numbered DC by DC, four each: the first two of the cut-off DC.
            for pod in 0..2 {
                let victim = Victim::PodUp { pick: dc * 4 + pod };
                faults.push(ScheduledFault::new(t + 19.5, 30.0, victim, Fault::PartitionPodDc));
            }
            faults.push(ScheduledFault::new(t + 20.0, 1.0, Victim::Everyone, rollout));
            faults.push(ScheduledFault::new(t + 60.0, 1.0, Victim::Everyone, rollout));
        }
        faults.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let busy = || Demand::Steps(vec![(0.0, 1_350.0)]);
        let mut s = Scenario::bkk_and_europe("ttl-lowering", busy(), busy(), 20 + CYCLE_S as u64 * CYCLES + 20);
        s.pod_ttl_ms = 20_000;
        s.fixed_faults = faults;
        s
    }
}
