//! The named parts of a [`DcManagerCore`](super::DcManagerCore)'s state: the DC leases it holds,
//! the floor it may rely on, and when its splits ran.

use super::HeldDcLease;
use crate::lease_intake::{LeaseFence, SentLog};
use crate::quota::Quota;
use crate::wire::LeaseVersion;

/// The DC leases a term holds from the coordinator, and what taking them safely needs.
#[derive(Clone)]
pub(super) struct DcLeaseBook {
    /// Newest last. Only the newest is ever spent under; older ones stay listed only for the ack
    /// rule (`report.rs`) and the counted ends (`lease_ends.rs`).
    pub(super) held: Vec<HeldDcLease>,
    /// The newest version taken: an older one is refused.
    pub(super) fence: LeaseFence,
    /// When each DC report was sent: a DC lease counts from the report it answers.
    pub(super) sent: SentLog,
    /// The DC lease the reports say the term is bound by (older ones back nothing upstream).
    pub(super) acked: Option<LeaseVersion>,
}

/// The floor the coordinator named for the DC, and what this term's pod leases may rely on.
#[derive(Clone)]
pub(super) struct FloorState {
    pub(super) amount: Quota,
    /// The version of `amount` (a floor from a record, or the DC lease that carried it): an
    /// older one is never taken again.
    pub(super) version: Option<LeaseVersion>,
    /// The largest floor this term's pod leases may still rely on (`DcReport.floor_in_use`).
    pub(super) bound: Quota,
    /// The floor may be used from then on (a previous instance's floor leases have expired).
    pub(super) usable_from_ns: u64,
    /// The newest floor version the driver has persisted in the DC's `FloorConfirmations`: a
    /// report confirms no newer one (`None`: the driver persists nothing, no cap).
    pub(super) confirm_cap: Option<Option<LeaseVersion>>,
}

/// When the term's splits ran, and what waits for the next one.
#[derive(Clone, Default)]
pub(super) struct PassState {
    /// The last full split.
    pub(super) last_full_ns: Option<u64>,
    /// The budget the last full split divided and the TTL it gave (full, or cut short to nest
    /// in a DC lease about to end): a DC lease that changes neither needs no split of its own.
    pub(super) last_full: Option<(Quota, u64)>,
    /// When [`DcManagerCore::tick`](super::DcManagerCore::tick) last ran.
    pub(super) last_tick_ns: Option<u64>,
    /// The last split or growth check of any kind (joins and growth wait `event_pass_gap_ms`).
    pub(super) last_work_ns: Option<u64>,
    /// A holder never issued a lease reported no lease in use since the last full split.
    pub(super) join_waiting: bool,
    /// A report since the last split or growth check may let some pod grow.
    pub(super) growth_waiting: bool,
    /// The last split or growth pass left an eligible pod below its target by a step worth
    /// growing (its grant held back by room others' older leases still take).
    pub(super) shortfall: bool,
}
