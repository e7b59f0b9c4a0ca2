//! DC-manager faults: a leading manager crashes or freezes, a standby's ledger watch lags, a
//! DC's managers lose their NATS connection.

use super::Struck;
use crate::world::{leaders, Ev, World};

impl World {
    /// The leading manager (term open, alive, not paused) of DC `d`.
    pub(super) fn leading_mgr(&self, d: usize) -> Option<(usize, usize)> {
        let slot = &self.dcs[d];
        (0..slot.mgrs.len())
            .find(|&r| slot.mgrs[r].alive && slot.mgrs[r].paused_until <= self.now && slot.mgrs[r].core.is_some())
            .map(|r| (d, r))
    }

    /// A leading manager, in DC `d` or else the next DC that has one.
    pub(super) fn any_leading_mgr(&self, d: usize) -> Option<(usize, usize)> {
        let n = self.dcs.len();
        (0..n).find_map(|i| self.leading_mgr((d + i) % n))
    }

    pub(super) fn crash_manager(&mut self, d: usize, r: usize) -> Struck {
        self.crash_mgr(d, r);
        Struck::Manager(d, r)
    }

    /// Manager `r` of DC `d` freezes until `until`: now, or (`after_write`) right after it next
    /// sends a leader-key renewal, for as long.
    pub(super) fn freeze_manager(&mut self, d: usize, r: usize, after_write: bool, until: u64) -> Struck {
        if after_write {
            self.dcs[d].mgrs[r].pause_after_write_ns = Some(until - self.now);
        } else {
            self.pause_mgr(d, r, until);
        }
        Struck::Manager(d, r)
    }

    /// DC `d`'s first standby's ledger watch lags until `until` (no standby: nothing happens).
    pub(super) fn lag_watch(&mut self, d: usize, until: u64) -> Option<Struck> {
        self.lag_standby_watch(d, until).map(|r| Struck::Manager(d, r))
    }

    /// DC `d`'s managers are disconnected from NATS until `until`.
    pub(super) fn disconnect_managers(&mut self, d: usize, until: u64) -> Struck {
        self.net.dc_reconnect_at[d] = until;
        Struck::Dc(d)
    }

    /// Reconnected at heal time by construction (the buffer's delay ends then); the ledger
    /// watches, opened again, replay the kept history.
    pub(super) fn reconnect_managers(&mut self, d: usize) {
        for r in 0..self.dcs[d].mgrs.len() {
            self.replay_records(d, r);
        }
    }

    pub(super) fn crash_mgr(&mut self, d: usize, r: usize) {
        let m = &mut self.dcs[d].mgrs[r];
        m.alive = false;
        m.core = None;
        m.incarnation += 1;
        m.send_on_wake.clear();
        m.pause_after_write_ns = None;
    }

    /// A new process in the replica's place, as a standby.
    pub(super) fn restart_mgr(&mut self, d: usize, r: usize) {
        let id = format!("{}-mgr{r}", self.sc.dcs[d].name);
        let bugs = self.sc.bugs;
        let records = self.term_records(d, r);
        let m = &mut self.dcs[d].mgrs[r];
        m.alive = true;
        m.core = None;
        m.incarnation += 1;
        m.election = leaders::election(&id, self.sc.leader_ttl_ms, &bugs);
        m.records = records;
        m.record_rules = leasehold_core::dc_manager::RecordRules::with_bugs(bugs);
        m.watched_floor = None;
        m.watch_lag_until = 0;
        let inc = m.incarnation;
        self.push(self.now, Ev::DcTick(d, r, inc));
        // The new process's ledger watch delivers the kept history, oldest first.
        self.replay_records(d, r);
    }

    /// Freeze a manager replica until `until`. It had decided to renew every pod's lease just
    /// before it froze, and sends those leases when it wakes.
    pub(in crate::world) fn pause_mgr(&mut self, d: usize, r: usize, until: u64) {
        let stops = self.sc.clocks_stop_while_suspended;
        let m = &mut self.dcs[d].mgrs[r];
        let local = m.clock.local(self.now);
        m.send_on_wake = m.core.as_mut().map(|c| c.tick(local)).unwrap_or_default();
        m.paused_until = until;
        if stops {
            m.clock.stop(self.now, until);
        }
        m.pause_after_write_ns = None;
    }
}
