//! How a term reads the ledger: every group directly when it begins, by a task of its own
//! (`ledger_link::direct_reads`; asked again [`LEDGER_RETRY_NS`] after a failure), its cores
//! using no floor until the answer unless the DC vouches for one; and the floor cache the watch
//! and the reads keep.

use super::{Manager, LEDGER_RETRY_NS};
use crate::ledger_link::DirectRead;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{LeaseVersion, LedgerRecord};
use tracing::{info, warn};

impl Manager {
    /// Ask for a direct read of every group for the current term.
    pub(super) fn ask_direct_read(&mut self) {
        let now = self.now_ns();
        let Some(t) = self.term.as_mut() else { return };
        if self.direct_reads.try_send(t.epoch).is_ok() {
            t.read_in_flight = true;
            t.read_asked_ns = now;
        }
    }

    /// A term that has not read the ledger asks again [`LEDGER_RETRY_NS`] after its last ask,
    /// once the answer to it has come.
    pub(super) fn retry_direct_read(&mut self) {
        let now = self.now_ns();
        let due = self.term.as_ref().is_some_and(|t| {
            !t.read_every_group && !t.read_in_flight && now.saturating_sub(t.read_asked_ns) >= LEDGER_RETRY_NS
        });
        if due {
            self.ask_direct_read();
        }
    }

    /// The answer to a direct read: if it is this term's and it succeeded, remember every
    /// record that concerns this DC, make the cores of the limits it shows, and let every core
    /// use its floor.
    pub async fn on_direct_read(&mut self, (epoch, answer): DirectRead) {
        let Some(t) = self.term.as_mut().filter(|t| t.epoch == epoch) else { return };
        t.read_in_flight = false;
        if !self.fresh() {
            return; // a term that may not act issues nothing; it asks again once it may
        }
        let Some(t) = self.term.as_mut() else { return };
        let contents = match answer {
            Ok(contents) => contents,
            Err(e) => {
                if !std::mem::replace(&mut t.read_failed, true) {
                    self.status.terms_without_ledger += 1;
                }
                return warn!(cause = %e, "could not read the ledger: no floor or emergency allowance unless the DC vouches for one, until a read succeeds");
            }
        };
        for (limit, (revision, rec)) in contents.records() {
            if self.serves(limit) {
                self.recorded.insert(limit.to_string());
            }
            if self.concerns(rec) {
                self.remember_record(rec, revision);
            }
        }
        if let Some(t) = self.term.as_mut() {
            t.read_every_group = true;
        }
        self.status.ledger_read = true;
        info!("read the ledger: every limit's floor is in use");
        let known: Vec<String> = self.floors.keys().cloned().collect();
        for limit in known {
            self.ensure_core(&limit).await;
        }
        let limits: Vec<String> = self.term.as_ref().map(|t| t.limits.keys().cloned().collect()).unwrap_or_default();
        for limit in limits {
            let floor = self.cached_floor(&limit);
            let now = self.now_ns();
            let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&limit)) else { continue };
            let out = lt.core.on_ledger_read(floor, now);
            self.outbox.push(out);
        }
        self.refresh_status();
    }

    /// Whether this term has read every group directly (a limit with no record then had none
    /// its predecessor could have confirmed a floor of: any record of it arrives later).
    pub(super) fn term_has_read(&self) -> bool {
        self.term.as_ref().is_some_and(|t| t.read_every_group)
    }

    /// `limit`'s newest floor this process knows (a core that has not read the ledger in its
    /// term ignores it: `DcManagerCore::await_ledger_read`).
    pub(super) fn cached_floor(&self, limit: &str) -> Option<(Quota, LeaseVersion)> {
        self.floors.get(limit).copied().flatten()
    }

    /// Cache the record (at `revision` of its key) for this DC: its floor, never going back to
    /// an older version, and whether the limit runs retired and its pod rules, never going back
    /// to an older revision (the watch replays history when it is opened again; a direct read
    /// may be newer than what the watch delivers next).
    pub(super) fn remember_record(&mut self, rec: &LedgerRecord, revision: u64) {
        self.record_rules.take(revision, rec);
        let cached = self.floors.entry(rec.limit.clone()).or_default();
        if let Some((f, v)) = rec.floor_of(&self.settings.manager.dc) {
            if cached.is_none_or(|(_, old)| v >= old) {
                *cached = Some((f, v));
            }
        }
    }

    /// A record of a limit this process serves that names this DC (a floor or a DC lease), or
    /// that it already knows.
    pub(super) fn concerns(&self, rec: &LedgerRecord) -> bool {
        let names_dc = rec.floors.contains_key(self.dc()) || rec.leases.iter().any(|l| l.dc == self.dc());
        self.serves(&rec.limit) && (names_dc || self.floors.contains_key(&rec.limit))
    }
}
