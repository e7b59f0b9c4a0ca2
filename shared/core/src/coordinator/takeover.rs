//! What a new coordinator term finds in durable storage, and how it waits out what may have
//! been lost (see [`CoordinatorCore::resume`]).

use super::CoordinatorCore;
use crate::wire::{LedgerFence, LedgerRecord};

/// The epoch of a new coordinator term: above every epoch stored in a record or the fence, and
/// at least the revision of its claim on the leader key (revisions only grow, so a lost record
/// cannot make epochs start again at 1).
pub fn next_epoch(stored_epoch_max: u64, fence_epoch: Option<u64>, claim_revision: u64) -> u64 {
    (stored_epoch_max.max(fence_epoch.unwrap_or(0)) + 1).max(claim_revision)
}

/// What a new leader found in durable storage for one limit.
#[derive(Clone, Copy, Debug)]
pub enum Stored<'a> {
    /// The limit's record.
    Record(&'a LedgerRecord),
    /// No record, and the fence shows none was ever written (or there is no fence): a first start.
    Fresh,
    /// No record, but the fence shows one was written: it was lost. The fence bounds what it
    /// held: no DC lease longer than `dc_ttl_ms_max` (0: unknown, an older fence), no floor above
    /// `floors_max`.
    Lost(&'a LedgerFence),
    /// A record of an earlier term than the fence's: the fence's term (or a later one) may have
    /// written newer records that were lost (a store that lost its tail, restored from a
    /// snapshot). The leader treats it as lost: the fence bounds what the newer ones held.
    Behind(&'a LedgerRecord, &'a LedgerFence),
}

impl<'a> Stored<'a> {
    /// From `limit`'s record read (if any) and the fence read (if any). No record and a fence
    /// that says none was ever written for `limit` (a limit added since) is a first start.
    pub fn classify(limit: &str, record: Option<&'a LedgerRecord>, fence: Option<&'a LedgerFence>) -> Self {
        match (record, fence) {
            (Some(r), Some(f)) if r.epoch < f.epoch => Stored::Behind(r, f),
            (Some(r), _) => Stored::Record(r),
            (None, Some(f)) if f.may_hold(limit) => Stored::Lost(f),
            (None, _) => Stored::Fresh,
        }
    }
}

impl CoordinatorCore {
    /// Records the fence vouches for are missing: wait out the DC leases they may have named
    /// and count the floors they may have named apart, as `resume` describes.
    pub(super) fn wait_out_fenced_records(&mut self, fence: &LedgerFence, now_ns: u64) {
        let earlier_dc_ttl_ms = if self.cfg.bugs.lost_record_waits_own_ttl() { 0 } else { fence.dc_ttl_ms_max };
        self.wait_out_lost_record(earlier_dc_ttl_ms, now_ns);
        if let Some(floors) = fence.floors_of(&self.cfg.limit) {
            self.adopt_lost_floors(floors);
        }
    }

    /// Issue nothing for one full lifetime of the longest DC lease a lost record may hold.
    pub(super) fn wait_out_lost_record(&mut self, earlier_dc_ttl_ms: u64, now_ns: u64) {
        let longest_ms = self.cfg.dc_ttl_ms.max(earlier_dc_ttl_ms);
        self.issue_from_ns = self.issue_from_ns.max(self.cfg.expiry.issuer_live_until_ns(now_ns, longest_ms));
        self.lost_wait_dc_ttl_ms = Some(longest_ms);
    }

    /// Each DC's manager replica and term as the record's writer knew them, so that a delayed
    /// report of an earlier term is refused after the takeover too (it would send the next DC
    /// lease to a replica that is gone). A record without them (an older writer): the holder of
    /// each DC's newest lease, its term unknown.
    pub(super) fn adopt_dc_holders(&mut self, rec: &LedgerRecord) {
        for (dc, view) in self.dcs.iter_mut() {
            if let Some(h) = rec.dc_holders.get(dc) {
                view.holder = Some(h.holder.clone());
                view.holder_term = h.term;
                view.predecessor = h.predecessor;
            } else if let Some(newest) = rec.leases.iter().filter(|l| &l.dc == dc).max_by_key(|l| l.version) {
                view.holder = Some(newest.holder.clone());
            }
        }
    }
}
