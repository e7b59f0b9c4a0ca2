//! The coordinator leader's ledger writes: a compare-and-set of the record, judged as the service
//! judges its group writes ([`judge_group_write`]). Under `FaultKind::LedgerWritesUnanswered` a
//! write goes unanswered: the leader reads the record unchanged (Unresolved), keeps its term and
//! counts the write's leases, and the write lands later if the record still has the revision it
//! expected (a client resending what it buffered). The leader's next write then meets it: a
//! record of its own term, adopted (the next write goes on its revision), never a step-down,
//! unless the fence names a newer term (a crash that took the bucket's tail back to an older
//! record of a frozen term: storm seeds 201 and 739).
//!
//! Not modelled: a late write of a term that has ended landing after its successor read the
//! record (the scripted fault keeps one leader; a trial with a coordinator crash during it made
//! the simulator's checks flag an epoch going back and, until the successor's next write failed,
//! pods holding more than its books: no limit was exceeded, as the successor can land nothing);
//! the fence raise under the fault (it is answered here; the service steps down when it is not);
//! writes that land at once but unanswered, or out of order of their sends.

use super::{Ev, Msg, World, MS};
use crate::net::Link;
use leasehold_core::coordinator::{judge_group_write, GroupReadBack, GroupWrite, GroupWriteAnswer};
use leasehold_core::subjects::ledger_group_of;
use leasehold_core::wire::{encode, LedgerGroup, LedgerRecord};
use std::rc::Rc;

/// Values the ledger bucket keeps per key (the services' `history: 5`).
pub(super) const RECORD_HISTORY: usize = 5;

/// The record as the service stores it: alone in its group.
fn group_bytes(record: &LedgerRecord) -> Vec<u8> {
    encode(&LedgerGroup::new(ledger_group_of(&record.limit), vec![record.clone()]))
}

impl World {
    /// Compare-and-set the ledger record on the revision coordinator `c` last wrote (or
    /// adopted); on success every DC's watch sees it.
    pub(super) fn write_record(&mut self, c: usize, quiet: bool) {
        let record = Rc::new(self.coords[c].core.as_ref().expect("leader").record());
        if self.coords[c].record_rev != self.kv.record_rev {
            // A conflict is never stored: judge it from the record read back (no fence raised).
            return self.judge_write(c, GroupWriteAnswer::Conflict, &record);
        }
        // The fence goes up first when the record names a floor above it (its own write,
        // answered).
        if let Some(raised) = self.kv.fence.as_ref().and_then(|f| f.covering(&record)) {
            self.kv.fence = Some(raised);
        }
        let late_ms = self.net.faults.unanswered_ledger_writes_ms;
        if late_ms > 0 {
            // On its way: it lands later if the record still has the revision it expects.
            let i = self.kv.in_flight.len();
            self.kv.in_flight.push(Some((self.kv.record_rev, record.clone())));
            self.push(self.now + late_ms * MS, Ev::LateWrite(i));
            return self.judge_write(c, GroupWriteAnswer::Unknown, &record);
        }
        self.store_record(record, quiet);
        self.coords[c].record_rev = self.kv.record_rev;
    }

    /// A write not answered `Written`, judged from the record read back as the service judges
    /// it ([`judge_group_write`]).
    fn judge_write(&mut self, c: usize, answer: GroupWriteAnswer, record: &LedgerRecord) {
        let expected = (self.coords[c].record_rev > 0).then_some(self.coords[c].record_rev);
        let stored = self.kv.record.as_deref().map(group_bytes);
        let read_back = match &stored {
            Some(bytes) => GroupReadBack::Stored { revision: self.kv.record_rev, bytes },
            None => GroupReadBack::Absent,
        };
        let ours = group_bytes(record);
        let (epoch, writer) = (record.epoch, &self.coords[c].id);
        // The fence as read after the group (with the known bug: not asked, taken as its own).
        let fence = match self.sc.bugs.adoption_ignores_fence {
            true => Some(epoch),
            false => self.kv.fence.as_ref().map(|f| f.epoch),
        };
        match judge_group_write(answer, expected, &ours, read_back, epoch, writer, fence) {
            // Stored after all (the read shows it): the next write goes on it.
            GroupWrite::Landed { revision } => self.coords[c].record_rev = revision,
            // Its own earlier write landed late: this one never can; the next goes on it.
            GroupWrite::Adopted { revision } => {
                self.coords[c].record_rev = revision;
                self.metrics.ledger_writes_adopted += 1;
            }
            // It may still land: the term goes on, its core counting the write's leases.
            GroupWrite::Unresolved => self.metrics.ledger_writes_unresolved += 1,
            GroupWrite::Lost => {
                self.coords[c].core = None; // fenced: someone else wrote since
                self.coords[c].election.resign("the ledger was written by another");
                self.metrics.fenced_writes += 1;
            }
        }
    }

    /// An unanswered write reaches the store: it lands if the record still has the revision it
    /// expected, else its compare-and-set fails and nobody hears of it.
    pub(super) fn land_late_write(&mut self, i: usize) {
        let Some((expected, record)) = self.kv.in_flight[i].take() else { return };
        if expected == self.kv.record_rev {
            self.metrics.ledger_writes_landed_late += 1;
            self.store_record(record, false);
        }
    }

    /// The record is stored at the next revision; unless `quiet`, every DC's watch delivers it.
    fn store_record(&mut self, record: Rc<LedgerRecord>, quiet: bool) {
        // A changed floor must reach the DCs even when no lease changed.
        let quiet = quiet && self.kv.record.as_ref().is_some_and(|r| r.floors == record.floors);
        if record.epoch < self.kv.max_epoch {
            self.metrics
                .invariant(self.now, format!("ledger epoch went back from {} to {}", self.kv.max_epoch, record.epoch));
        }
        self.kv.max_epoch = self.kv.max_epoch.max(record.epoch);
        self.kv.record_rev += 1;
        if let Some(prev) = self.kv.record.take().filter(|p| p.epoch < record.epoch) {
            self.kv.earlier_term_record = Some(prev);
        }
        self.kv.record = Some(record.clone());
        self.kv.history.push_back((self.kv.record_rev, record.clone()));
        if self.kv.history.len() > RECORD_HISTORY {
            self.kv.history.pop_front();
        }
        if quiet {
            return; // nothing new: the watch would deliver the same leases and floors again
        }
        let rev = self.kv.record_rev;
        for d in 0..self.dcs.len() {
            let r = record.clone();
            self.send(Link::DcCoord(d), || Msg::Record(d, None, r.clone(), rev));
        }
    }
}
