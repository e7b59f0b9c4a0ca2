//! What a coordinator replica is doing, for tests, metrics, `/v1/status` and `inspect`.

use super::Leader;
use leasehold_core::quota::Quota;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub leading: bool,
    /// Its term and view of the leader key, for `/readyz`.
    pub replica: leasehold_core::readiness::ReplicaView,
    pub epoch: u64,
    pub takeovers: u64,
    /// Limits' records written (each group write counts every record in it).
    pub records_written: u64,
    /// Ledger groups written (KV writes).
    pub ledger_writes: u64,
    /// Group writes whose answer was lost and that the read after them could not settle (they
    /// may land later), or that met an earlier write of the term landing late.
    pub ledger_writes_unresolved: u64,
    /// Group writes skipped because the group was larger than a KV value may be.
    pub groups_oversized: u64,
    /// The largest ledger group this replica encoded (bytes): alert well below the server's
    /// `max_payload`.
    pub ledger_group_bytes_max: u64,
    pub step_downs: u64,
    pub reports_malformed: u64,
    pub reports_ignored: u64,
    /// Per limit while leading: Σ of every lease still counted vs the limit (the ledger's books).
    pub limits: BTreeMap<String, LimitBooks>,
    /// Limits with a definition this replica runs (from `lh_limits`).
    pub definitions: usize,
    /// Definitions applied since start (added, changed or removed), on any replica.
    pub definition_changes: u64,
    /// Per limit, why its stored definition is refused (the one before it stays in force).
    pub definitions_refused: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitBooks {
    pub capacity: Quota,
    pub outstanding: Quota,
    pub dc_leases: u32,
    /// Removed from `lh_limits`: nothing is granted, its leases run out.
    pub retired: bool,
}

impl Leader {
    /// Copy every limit's books into the status (for metrics).
    pub(crate) fn refresh_books(&mut self) {
        let now = self.now_ns();
        self.status.limits = self
            .leadership
            .as_ref()
            .map(|l| {
                l.limits
                    .iter()
                    .map(|(name, st)| {
                        let books = LimitBooks {
                            capacity: st.core.ledger().capacity(),
                            outstanding: st.core.ledger().outstanding(now),
                            dc_leases: st.core.dc_leases() as u32,
                            retired: st.core.config().is_retired(),
                        };
                        (name.clone(), books)
                    })
                    .collect()
            })
            .unwrap_or_default();
    }
}
