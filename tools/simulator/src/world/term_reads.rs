//! A DC-manager term reads the ledger record directly when it begins, as the service does; the
//! read fails while the DC cannot reach the coordinators' side (its link cut, or its managers'
//! connection down), and the term then uses no floor and no emergency allowance until a read
//! succeeds at one of its ticks (`DcManagerCore::await_ledger_read`). Each replica's ledger
//! watch keeps the newest floor it delivered; a lagging watch (`FaultKind::WatchLag`) delivers
//! nothing until it catches up, so a standby may hold an older floor than its leader confirmed:
//! the floor a term would wrongly fall back on (`KnownBugs::term_uses_watched_floor`).

use super::World;
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput};
use leasehold_core::wire::LedgerRecord;

impl World {
    /// Whether DC `d`'s managers can read the ledger now.
    pub(super) fn ledger_readable(&self, d: usize) -> bool {
        !self.net.cut_dcs[d] && self.net.dc_reconnect_at[d] <= self.now
    }

    /// Whether replica `r`'s ledger watch delivers a record now (alive, not lagging).
    pub(super) fn watch_delivers(&self, d: usize, r: usize) -> bool {
        let m = &self.dcs[d].mgrs[r];
        m.alive && m.watch_lag_until <= self.now
    }

    /// What a record (at revision `rev`) gives the process of replica `r`: its removal and pod
    /// rules if newer, and the DC's floor if newer than the one it holds.
    pub(super) fn take_record(&mut self, d: usize, r: usize, rec: &LedgerRecord, rev: u64) {
        let dc = self.sc.dcs[d].name.clone();
        let m = &mut self.dcs[d].mgrs[r];
        m.record_rules.take(rev, rec);
        if let Some((f, v)) = rec.floor_of(&dc) {
            if m.watched_floor.is_none_or(|(_, old)| v > old) {
                m.watched_floor = Some((f, v));
            }
        }
    }

    /// A new term's core of replica `r` starts from a direct read of the record, or, if the DC
    /// cannot read the ledger now, strict on the floor the DC's floor confirmations name (if
    /// any) until it reads (on the watched floor regardless with
    /// `KnownBugs::term_uses_watched_floor`).
    pub(super) fn start_term(
        &mut self,
        d: usize,
        r: usize,
        core: &mut DcManagerCore,
        cfg: &DcManagerConfig,
    ) -> Vec<DcOutput> {
        let local = self.dcs[d].mgrs[r].clock.local(self.now);
        let confirmed = self.dcs[d].confirmed;
        core.cap_floor_confirmation(confirmed.map(|(_, v)| v));
        let mut out = Vec::new();
        if self.ledger_readable(d) {
            if let Some(rec) = self.kv.record.clone() {
                self.take_record(d, r, &rec, self.kv.record_rev);
            }
        } else {
            self.metrics.terms_without_ledger += 1;
            core.await_ledger_read();
            // The known bug is the code before the DC's confirmations existed: the watched floor.
            if let Some((floor, version)) = confirmed.filter(|_| !self.sc.bugs.term_uses_watched_floor) {
                self.metrics.floors_vouched += 1;
                out = core.on_vouched_floor(floor, version, local);
            }
        }
        let m = &mut self.dcs[d].mgrs[r];
        m.record_rules.apply(core, cfg);
        out.extend(m.watched_floor.map(|(f, v)| core.on_floor(f, v, local)).unwrap_or_default());
        out
    }

    /// At replica `r`'s tick: a term still waiting for its first read reads the record if it can.
    pub(super) fn retry_term_read(&mut self, d: usize, r: usize) {
        let waiting = self.dcs[d].mgrs[r].core.as_ref().is_some_and(|c| c.awaits_ledger_read());
        if !waiting || !self.ledger_readable(d) {
            return;
        }
        if let Some(rec) = self.kv.record.clone() {
            self.take_record(d, r, &rec, self.kv.record_rev);
        }
        let base = self.dc_config(d, r, 0);
        let m = &mut self.dcs[d].mgrs[r];
        let local = m.clock.local(self.now);
        let floor = m.watched_floor;
        let Some(core) = m.core.as_mut() else { return };
        m.record_rules.apply(core, &base);
        let out = core.on_ledger_read(floor, local);
        self.route_dc(d, out);
    }

    /// `FaultKind::WatchLag`: DC `d`'s first replica that does not lead lags until `until`;
    /// that replica.
    pub(super) fn lag_standby_watch(&mut self, d: usize, until: u64) -> Option<usize> {
        let r =
            (0..self.dcs[d].mgrs.len()).find(|&r| self.dcs[d].mgrs[r].alive && self.dcs[d].mgrs[r].core.is_none())?;
        self.dcs[d].mgrs[r].watch_lag_until = until;
        Some(r)
    }

    /// The lagging watch catches up: it delivers the kept history (a real watch delivers what it
    /// missed, late).
    pub(super) fn end_watch_lag(&mut self, d: usize, r: usize) {
        self.dcs[d].mgrs[r].watch_lag_until = 0;
        self.replay_records(d, r);
    }

    /// A cut often finds a standby's watch behind its leader's: at the start of DC `d`'s
    /// partition, each of its standbys holds the floor of the kept record before the newest
    /// floor the DC was named (drawing nothing from the seeded streams). A term cut off never
    /// uses it (only with `KnownBugs::term_uses_watched_floor`); one that can read the record
    /// takes the newer floor it names (after a lost record, none: the stale one stays, which the
    /// coordinator's lost-floor accounting covers).
    pub(super) fn standby_watch_behind(&mut self, d: usize) {
        let dc = self.sc.dcs[d].name.clone();
        let mut named: Vec<_> = self.kv.history.iter().filter_map(|(_, rec)| rec.floor_of(&dc)).collect();
        named.sort_by_key(|n| std::cmp::Reverse(n.1));
        named.dedup_by(|a, b| a.1 == b.1);
        let Some(&(floor, version)) = named.get(1) else { return };
        for m in self.dcs[d].mgrs.iter_mut().filter(|m| m.alive && m.core.is_none()) {
            if m.watched_floor.is_some_and(|(_, v)| v > version) {
                m.watched_floor = Some((floor, version));
            }
        }
    }

    /// Before an acting term's periodic step: the floor version its core is about to confirm
    /// is written to the DC's confirmations (its own store, reachable during a cut), then the core
    /// may confirm it. With `KnownBugs::floor_confirmed_unpersisted` only the first is written
    /// (and the core confirms regardless).
    pub(super) fn persist_floor_confirmation(&mut self, d: usize, r: usize) {
        let slot = &mut self.dcs[d];
        let Some(core) = slot.mgrs[r].core.as_mut() else { return };
        let Some((floor, version)) = core.floor_to_persist() else { return };
        if self.sc.bugs.floor_confirmed_unpersisted && slot.confirmed.is_some() {
            return;
        }
        if slot.confirmed.is_none_or(|(_, v)| version > v) {
            slot.confirmed = Some((floor, version));
        }
        core.cap_floor_confirmation(slot.confirmed.map(|(_, v)| v));
    }
}
