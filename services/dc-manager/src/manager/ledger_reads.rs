//! How a term reads the ledger: every group directly when it begins (else it waits, trying
//! again every [`LEDGER_RETRY_NS`], and its cores use no floor meanwhile), one record when a
//! core is made, and the floor cache the watch and the reads keep.

use super::{Manager, LEDGER_RETRY_NS};
use crate::ledger_link::ReadError;
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::{LeaseVersion, LedgerRecord};
use tracing::{info, warn};

impl Manager {
    /// Read every group directly and remember what concerns this DC; true if the read
    /// succeeded (the term may then use every floor it knows).
    pub(super) async fn read_every_group(&mut self) -> bool {
        match self.ledger.read_all().await {
            Ok(contents) => {
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
                    self.status.ledger_read = true;
                }
                true
            }
            Err(e) => {
                warn!(cause = %e, "could not read the ledger: no floor or emergency allowance until a read succeeds");
                false
            }
        }
    }

    /// A term that has not read the ledger yet tries again every [`LEDGER_RETRY_NS`]; once it
    /// has, every core takes its floor.
    pub(super) async fn retry_ledger_read(&mut self) {
        let now = self.now_ns();
        let Some(t) = self.term.as_mut() else { return };
        if t.read_every_group || now.saturating_sub(t.last_read_attempt_ns) < LEDGER_RETRY_NS || !self.fresh() {
            return;
        }
        if let Some(t) = self.term.as_mut() {
            t.last_read_attempt_ns = now;
        }
        if !self.read_every_group().await {
            return;
        }
        info!("read the ledger: every limit's floor is in use");
        let limits: Vec<String> = self.term.as_ref().map(|t| t.limits.keys().cloned().collect()).unwrap_or_default();
        for limit in limits {
            let floor = self.cached_floor(&limit);
            let now = self.now_ns();
            let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&limit)) else { continue };
            let out = lt.core.on_ledger_read(floor, now);
            self.outbox.push(out);
        }
    }

    /// Whether this term has read `limit`'s record directly (every group, or that record).
    pub(super) fn term_has_read(&self, limit: &str) -> bool {
        self.term.as_ref().is_some_and(|t| t.read_every_group || t.read_limits.contains(limit))
    }

    /// `limit`'s newest floor this process knows (a core that has not read the ledger in its
    /// term ignores it: `DcManagerCore::await_ledger_read`).
    pub(super) fn cached_floor(&self, limit: &str) -> Option<(Quota, LeaseVersion)> {
        self.floors.get(limit).copied().flatten()
    }

    /// Read `limit`'s ledger record directly and keep its floor if it is newer than the cached
    /// one; once read, the term may use the limit's floor. On failure the term uses no floor of
    /// the limit until a read succeeds.
    pub(super) async fn read_record_now(&mut self, limit: &str) {
        let read = match self.ledger.read_record(limit).await {
            Ok((Some(revision), Some(rec))) => {
                self.remember_record(&rec, revision);
                true
            }
            Ok(_) => true,
            Err(ReadError::Unreadable(_)) => {
                self.status.messages_malformed += 1;
                false
            }
            Err(ReadError::Failed(e)) => {
                warn!(limit, cause = %e, "could not read the ledger record: no floor until a read succeeds");
                false
            }
        };
        if let Some(t) = self.term.as_mut().filter(|_| read) {
            t.read_limits.insert(limit.to_string());
        }
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
