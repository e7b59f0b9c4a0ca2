//! The leader's durable writes: ledger records by compare-and-set, after the fence when a record
//! needs it (see [`crate::leader`] for the rules).
//!
//! Many limits' records are written together: the fence is raised once, covering every record
//! of the batch, before any of them; then the records (each its own key) are written
//! concurrently, at most [`WRITES_IN_FLIGHT`] at a time. Each is still a compare-and-set on the
//! revision this leader last wrote, so a conflict on any of them means someone else leads: the
//! leader steps down. Writing concurrently changes no rule; it keeps a tick of 1,000 limits
//! from taking 1,000 sequential round trips.

use crate::leader::Leader;
use bytes::Bytes;
use futures::StreamExt;
use leasehold_nats::kv::{compare_and_set, read, CasOutcome};
use leasehold_shared::subjects;
use leasehold_shared::wire::{encode, LedgerFence, LedgerRecord};

/// Most record writes one leader has in flight at once.
pub const WRITES_IN_FLIGHT: usize = 64;

impl Leader {
    /// Compare-and-set the limit's record (after the fence, if the record needs it). False when
    /// this replica no longer leads.
    pub(crate) async fn write(&mut self, limit: &str) -> bool {
        self.write_all(&[limit.to_string()]).await
    }

    /// Write every named limit's record (see the module docs). False when this replica no
    /// longer leads.
    pub(crate) async fn write_all(&mut self, limits: &[String]) -> bool {
        let Some(term) = self.leadership.as_ref() else { return false };
        let mut fence = term.fence.1.clone();
        let mut raise = false;
        let mut pending: Vec<(String, LedgerRecord, Option<u64>)> = Vec::with_capacity(limits.len());
        for limit in limits {
            let Some(state) = term.limits.get(limit) else { continue };
            let record = state.core.record();
            if state.core.config().is_retired() && state.written.as_ref() == Some(&record) {
                continue; // a removed limit whose record has settled: nothing to renew
            }
            if let Some(raised) = fence.covering(&record) {
                fence = raised;
                raise = true;
            }
            pending.push((limit.clone(), record, state.record_rev));
        }
        if raise && !self.raise_fence(fence).await {
            return false;
        }
        let ledger = self.ledger.clone();
        let outcomes: Vec<_> = futures::stream::iter(pending)
            .map(|(limit, record, expected)| {
                let ledger = ledger.clone();
                async move {
                    let key = subjects::ledger_key(&limit).expect("validated");
                    let bytes = Bytes::from(encode(&record));
                    let outcome = match compare_and_set(&ledger, &key, bytes.clone(), expected).await {
                        Ok(CasOutcome::Unknown) | Err(_) => match read(&ledger, &key).await {
                            // Outcome unknown: it counts as ours only if the stored value is
                            // exactly ours.
                            Ok(Some((rev, stored))) if stored == bytes => CasOutcome::Written { revision: rev },
                            _ => CasOutcome::Conflict,
                        },
                        Ok(o) => o,
                    };
                    (limit, record, outcome)
                }
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        let mut ours = true;
        for (limit, record, outcome) in outcomes {
            match outcome {
                CasOutcome::Written { revision } => {
                    if let Some(s) = self.leadership.as_mut().and_then(|l| l.limits.get_mut(&limit)) {
                        s.record_rev = Some(revision);
                        s.written = Some(record);
                    }
                    self.status.records_written += 1;
                }
                _ => ours = false,
            }
        }
        if !ours {
            self.step_down("the ledger was written by someone else");
        }
        ours
    }

    /// Write a raised fence before the records that need it. False (stepped down) if it could
    /// not.
    async fn raise_fence(&mut self, raised: LedgerFence) -> bool {
        let Some(expected) = self.leadership.as_ref().map(|t| t.fence.0) else { return false };
        let value = Bytes::from(encode(&raised));
        match compare_and_set(&self.leaders, subjects::LEDGER_FENCE_KEY, value, Some(expected)).await {
            Ok(CasOutcome::Written { revision }) => {
                if let Some(t) = self.leadership.as_mut() {
                    t.fence = (revision, raised);
                }
                true
            }
            _ => {
                self.step_down("the ledger fence could not be raised");
                false
            }
        }
    }
}
