//! Network faults: partitions, and messages or store answers lost, duplicated or late.

use super::Struck;
use crate::world::World;

impl World {
    /// DC `d` is cut off from the coordinators. Its standbys' watches start one floor behind.
    pub(super) fn cut_dc(&mut self, d: usize) -> Struck {
        self.net.cut_dcs[d] = true;
        self.standby_watch_behind(d);
        Struck::Dc(d)
    }

    /// Pod `p` is cut off from its DC's managers.
    pub(super) fn cut_pod(&mut self, p: usize) -> Struck {
        self.net.cut_pods[p] = true;
        Struck::Pod(p)
    }

    pub(super) fn lose_messages(&mut self, probability: f64) -> Struck {
        self.net.faults.loss = probability;
        Struck::Everyone
    }

    pub(super) fn duplicate_messages(&mut self, probability: f64) -> Struck {
        self.net.faults.duplicate = probability;
        Struck::Everyone
    }

    pub(super) fn delay_messages(&mut self, extra_delay_ms: u64) -> Struck {
        self.net.faults.extra_delay_ms = extra_delay_ms;
        Struck::Everyone
    }

    pub(super) fn slow_leader_replies(&mut self, reply_delay_ms: u64) -> Struck {
        self.net.faults.slow_leader_replies_ms = reply_delay_ms;
        Struck::Everyone
    }

    pub(super) fn leave_ledger_writes_unanswered(&mut self, late_ms: u64) -> Struck {
        self.net.faults.unanswered_ledger_writes_ms = late_ms;
        Struck::Everyone
    }
}
