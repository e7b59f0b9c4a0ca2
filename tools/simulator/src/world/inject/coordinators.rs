//! Coordinator faults: the leader crashes (perhaps with its ledger bucket) or freezes.

use super::Struck;
use crate::faults::LedgerFate;
use crate::world::{leaders, Ev, World};

impl World {
    /// The coordinator that leads now (term open, alive).
    pub(super) fn leader(&self) -> Option<usize> {
        (0..self.coords.len()).find(|&c| self.coords[c].core.is_some() && self.coords[c].alive)
    }

    /// Coordinator `c` dies; a single-replica ledger bucket that goes down with it loses the
    /// record, or its tail, leaving the last record an earlier term wrote, as `ledger` says.
    /// The fence (another stream) stays.
    pub(super) fn crash_coordinator(&mut self, c: usize, ledger: LedgerFate) -> Struck {
        if ledger != LedgerFate::Kept && self.kv.record.is_some() {
            let rolled_back = ledger == LedgerFate::RolledBack && self.kv.earlier_term_record.is_some();
            self.kv.record = if rolled_back { self.kv.earlier_term_record.clone() } else { None };
            self.kv.record_rev += 1;
            // The kept history goes with the tail (what remains is the rolled-back value).
            self.kv.history.clear();
            if let Some(r) = self.kv.record.clone() {
                self.kv.history.push_back((self.kv.record_rev, r));
            }
            if rolled_back {
                self.metrics.records_rolled_back += 1;
            } else {
                self.metrics.records_lost += 1;
            }
        }
        self.coords[c].alive = false;
        self.coords[c].core = None;
        self.coords[c].incarnation += 1;
        Struck::Coordinator(c)
    }

    /// Coordinator `c` freezes until `until`: now, or (`after_write`) right after it next sends
    /// a leader-key renewal, for as long.
    pub(super) fn freeze_coordinator(&mut self, c: usize, after_write: bool, until: u64) -> Struck {
        if after_write {
            self.coords[c].pause_after_write_ns = Some(until - self.now);
        } else {
            self.pause_coordinator(c, until);
        }
        Struck::Coordinator(c)
    }

    /// Freeze a coordinator until `until`, between checking its leadership and writing the
    /// ledger: it finishes that write when it wakes.
    pub(in crate::world) fn pause_coordinator(&mut self, c: usize, until: u64) {
        let stops = self.sc.clocks_stop_while_suspended;
        let co = &mut self.coords[c];
        co.paused_until = until;
        co.write_on_wake = true;
        if stops {
            co.clock.stop(self.now, until);
        }
        co.pause_after_write_ns = None;
    }

    /// A new coordinator process in the slot's place, as a standby.
    pub(super) fn restart_coordinator(&mut self, c: usize) {
        let bugs = self.sc.bugs;
        let co = &mut self.coords[c];
        co.alive = true;
        co.core = None;
        co.incarnation += 1;
        co.paused_until = 0;
        co.write_on_wake = false;
        co.change_on_wake = None;
        co.pause_after_write_ns = None;
        co.election = leaders::election(&co.id, self.sc.leader_ttl_ms, &bugs);
        let inc = co.incarnation;
        self.push(self.now, Ev::CoordTick(c, inc));
    }
}
