//! The simulated nodes' slots (pods, DC manager replicas, coordinators) and the ledger bucket's
//! stand-in, as the world keeps them.

use crate::clock::NodeClock;
use leasehold_core::bucket::TokenBucket;
use leasehold_core::coordinator::CoordinatorCore;
use leasehold_core::dc_manager::{DcManagerCore, DcOutput};
use leasehold_core::pod::{IntervalCounters, PodCore};
use leasehold_core::quiet_reports::QuietReports;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{LeaseVersion, LedgerFence, LedgerRecord};
use std::collections::VecDeque;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PodState {
    Down,
    Up,
    Paused,
    Draining,
}

pub(super) struct PodSlot {
    pub(super) dc: usize,
    pub(super) clock: NodeClock,
    pub(super) state: PodState,
    pub(super) core: Option<PodCore>,
    /// Which reports the core's limit leaves out (a new one with every core).
    pub(super) quiet: QuietReports,
    /// Incarnation: events of a previous incarnation are ignored.
    pub(super) incarnation: u64,
    pub(super) routable: bool,
    pub(super) queue: VecDeque<u64>,
    pub(super) retry_at: Option<u64>,
    pub(super) counters: IntervalCounters,
    pub(super) paused_until: u64,
    pub(super) static_bucket: Option<TokenBucket>,
}

/// One DC manager replica: it leads the DC while its election says it may act.
pub(super) struct MgrReplica {
    pub(super) clock: NodeClock,
    pub(super) election: leasehold_core::leadership::Leadership,
    /// What its writes of the DC's leader key say, and what its term inherits from them.
    pub(super) records: leasehold_core::dc_manager::TermRecords,
    /// The state of its current term (a new term is a new holder).
    pub(super) core: Option<DcManagerCore>,
    pub(super) alive: bool,
    pub(super) paused_until: u64,
    /// Events of a previous process are ignored.
    pub(super) incarnation: u64,
    /// Computed just before a pause and sent when it wakes (the GC-pause bug to survive).
    pub(super) send_on_wake: Vec<DcOutput>,
    /// A pause (ns) to begin right after its next leader-key write is sent: the worst moment,
    /// with the write's answer arriving while it is frozen.
    pub(super) pause_after_write_ns: Option<u64>,
    /// What the process took from the ledger records it read (removal, pod rules), by revision.
    pub(super) record_rules: leasehold_core::dc_manager::RecordRules,
    /// The newest floor (by version) its ledger watch or a direct read gave the process.
    pub(super) watched_floor: Option<(Quota, LeaseVersion)>,
    /// Until then its ledger watch delivers nothing (a lagging watch; see `term_reads`).
    pub(super) watch_lag_until: u64,
}

pub(super) struct DcSlot {
    pub(super) clock: NodeClock,
    pub(super) mgrs: Vec<MgrReplica>,
    pub(super) static_bucket: Option<TokenBucket>,
    /// The judge's view: the revision of the newest record that reached the DC, and since when
    /// the newest one reached says the limit was removed (its pods may then hold no emergency
    /// allowance once their leases have run out).
    pub(super) newest_record_rev: u64,
    pub(super) removed_since: Option<u64>,
    /// The DC's floor confirmations (its own store): `None` until first written, then the
    /// floor (and version) a term wrote last before confirming it.
    pub(super) confirmed: Option<(Quota, LeaseVersion)>,
}

impl DcSlot {
    /// Whether replica `r` believes its term may act now (alive, awake, term open and fresh).
    /// Every replica hears the DC's subjects and decides for itself, as the real service does:
    /// two may act at once only if leadership is broken, which the checks catch.
    pub(super) fn acts(&self, r: usize, now: u64) -> bool {
        let m = &self.mgrs[r];
        m.alive && m.paused_until <= now && m.core.is_some() && m.election.acting_epoch(m.clock.local(now)).is_some()
    }

    /// The replicas that act now (one, when leadership holds).
    pub(super) fn acting(&self, now: u64) -> Vec<usize> {
        (0..self.mgrs.len()).filter(|&r| self.acts(r, now)).collect()
    }
}

pub(super) struct CoordSlot {
    pub(super) id: String,
    pub(super) clock: NodeClock,
    pub(super) alive: bool,
    pub(super) paused_until: u64,
    pub(super) incarnation: u64,
    pub(super) election: leasehold_core::leadership::Leadership,
    pub(super) core: Option<CoordinatorCore>,
    /// KV revision of the ledger record this leader last wrote or read.
    pub(super) record_rev: u64,
    /// Paused between checking its leadership and writing: on waking it finishes that write
    /// first (the classic GC-pause bug), which the record's compare-and-set must refuse.
    pub(super) write_on_wake: bool,
    /// A limit change came while it was frozen: it applies it on waking (after that write), and
    /// the limit in force before the change (this) stays in force a full window from then.
    pub(super) change_on_wake: Option<leasehold_core::quota::Quota>,
    /// As [`MgrReplica::pause_after_write_ns`].
    pub(super) pause_after_write_ns: Option<u64>,
}

/// The ledger bucket stand-in: the record, written by compare-and-set on its revision, and the
/// fence (kept apart from the record, raised by every new coordinator term).
#[derive(Default)]
pub(super) struct Kv {
    pub(super) record: Option<Rc<LedgerRecord>>,
    pub(super) record_rev: u64,
    /// The highest epoch any record was written under.
    pub(super) max_epoch: u64,
    pub(super) fence: Option<LedgerFence>,
    /// The last record an earlier term wrote: what a store that loses its tail goes back to.
    pub(super) earlier_term_record: Option<Rc<LedgerRecord>>,
    /// The values the bucket keeps (history 5), oldest first, with their revisions: what a
    /// watch opened again delivers.
    pub(super) history: VecDeque<(u64, Rc<LedgerRecord>)>,
    /// Unanswered writes on their way (`Ev::LateWrite`): the revision each expects, and its
    /// record.
    pub(super) in_flight: Vec<Option<(u64, Rc<LedgerRecord>)>>,
}
