//! The leader's durable writes: ledger groups by compare-and-set, after the fence when a record
//! needs it (see [`crate::leader`] for the rules).
//!
//! A limit's record lives in its group ([`LedgerGroup`], key `group.<n>`,
//! [`subjects::LEDGER_GROUPS`] of them), so a tick of any number of limits is at most that many
//! writes. Writing a limit writes its whole group, every record in it as the cores hold them
//! now. The fence is raised once, covering every record of the batch, before any group is
//! written; then the groups are written concurrently. Each is still a compare-and-set on the
//! revision this term last wrote (or, for a group it has not written, read at its takeover: a
//! group that did not exist is created), so a group someone else wrote ends the term. A write
//! whose answer was lost (the group unreadable, or unchanged) keeps the term: it may still land,
//! so its records count as stored; a conflict with the term's own earlier write that landed late
//! is adopted ([`judge_group_write`]) while the fence, read after the group, still names the term. Every tick writes every group that holds a limit, changed
//! or not: a group rolled back or overwritten under the term (a single-replica bucket that lost
//! its tail, a second writer) is found within a tick, as when each record was its own key.
//!
//! A group has a size limit (the server's `max_payload`). A group keeps every record that may
//! be stored already and takes the limits never written in name order while the whole group
//! could still grow [`FRESH_GROWTH`](leasehold_core::wire::FRESH_GROWTH) times and fit (records
//! grow once DC leases are written; [`LedgerGroup::fit`]); the rest are left out of the term (no lease of theirs
//! exists: a lease exists only once its record is written) and listed as refused in the status
//! until their definition is put again or a term takes over. So a full group never stops the
//! limits it holds. Only a group whose stored records alone are too large (the server's
//! `max_payload` lowered) is not written: its limits get no new leases, and
//! `leasehold_coordinator_ledger_groups_oversized_total` counts it.

use super::Leader;
use bytes::Bytes;
use futures::StreamExt;
use leasehold_core::coordinator::{judge_group_write, GroupReadBack, GroupWrite, GroupWriteAnswer};
use leasehold_core::subjects::{self, ledger_group_of};
use leasehold_core::wire::{encode, LedgerFence, LedgerGroup, LedgerRecord};
use leasehold_nats::kv::{compare_and_set, read, CasOutcome};
use std::collections::{BTreeMap, BTreeSet};
use tracing::{error, warn};

impl Leader {
    /// Compare-and-set the limit's group (after the fence, if a record needs it). False when
    /// this replica no longer leads.
    pub(crate) async fn write(&mut self, limit: &str) -> bool {
        self.write_all(&[limit.to_string()]).await
    }

    /// Write the group of every named limit (see the module docs). False when this replica no
    /// longer leads.
    pub(crate) async fn write_all(&mut self, limits: &[String]) -> bool {
        let Some(term) = self.leadership.as_ref() else { return false };
        let touched: BTreeSet<u32> = limits.iter().map(|l| ledger_group_of(l)).collect();
        let mut fence = term.fence.1.clone();
        let mut raise = false;
        // Per group: records that may be stored already, and records never written.
        let mut members: BTreeMap<u32, (Vec<LedgerRecord>, Vec<LedgerRecord>)> = BTreeMap::new();
        for (limit, state) in &term.limits {
            let group = ledger_group_of(limit);
            if touched.contains(&group) {
                let (stored, fresh) = members.entry(group).or_default();
                if state.stored { stored } else { fresh }.push(state.core.record());
            }
        }
        let mut pending = Vec::with_capacity(members.len());
        let mut left_out = Vec::new();
        for (number, (stored, fresh)) in members {
            let fitted = match LedgerGroup::fit(number, stored, fresh, self.max_group_bytes) {
                Ok(f) => f,
                Err(bytes) => {
                    // Not written: its limits get no new leases, and their DCs keep the last
                    // floors they read (as a DC cut off from the coordinator does; see PROTOCOL).
                    let max = self.max_group_bytes;
                    error!(
                        group = number,
                        bytes, max, "a ledger group is too large to store; its limits are not renewed"
                    );
                    self.status.ledger_group_bytes_max = self.status.ledger_group_bytes_max.max(bytes as u64);
                    self.status.groups_oversized += 1;
                    continue;
                }
            };
            for record in &fitted.group.records {
                if let Some(raised) = fence.covering(record) {
                    fence = raised;
                    raise = true;
                }
            }
            left_out.extend(fitted.left_out.into_iter().map(|limit| (limit, number)));
            let bytes = Bytes::from(fitted.bytes);
            self.status.ledger_group_bytes_max = self.status.ledger_group_bytes_max.max(bytes.len() as u64);
            let expected = term.groups.get(&number).copied();
            pending.push((fitted.group, bytes, expected));
        }
        self.leave_out(left_out);
        if raise && !self.raise_fence(fence).await {
            return false;
        }
        let (ledger, leaders) = (self.ledger.clone(), self.leaders.clone());
        let (epoch, writer) = (self.status.epoch, self.id.clone());
        let outcomes: Vec<_> = futures::stream::iter(pending)
            .map(|(group, bytes, expected)| {
                let (ledger, leaders, writer) = (ledger.clone(), leaders.clone(), writer.clone());
                async move {
                    let key = subjects::ledger_group_key(group.group);
                    let answer = match compare_and_set(&ledger, &key, bytes.clone(), expected).await {
                        Ok(CasOutcome::Written { revision }) => GroupWriteAnswer::Written { revision },
                        Ok(CasOutcome::Conflict) => GroupWriteAnswer::Conflict,
                        Ok(CasOutcome::Unknown) | Err(_) => GroupWriteAnswer::Unknown,
                    };
                    let read = match answer {
                        GroupWriteAnswer::Written { .. } => None,
                        _ => Some(read(&ledger, &key).await),
                    };
                    let read_back = match &read {
                        None | Some(Err(_)) => GroupReadBack::Unreadable,
                        Some(Ok(None)) => GroupReadBack::Absent,
                        Some(Ok(Some((revision, stored)))) => {
                            GroupReadBack::Stored { revision: *revision, bytes: stored }
                        }
                    };
                    // The fence after the group: a group of this term is adopted only while the
                    // fence still names it (the bucket may have lost its tail back to an older
                    // record of this term after a newer term wrote).
                    let fence_epoch = match answer {
                        GroupWriteAnswer::Written { .. } => None,
                        _ => match leasehold_nats::kv::read(&leaders, subjects::LEDGER_FENCE_KEY).await {
                            Ok(Some((_, stored))) => LedgerFence::parse(&stored).ok().map(|f| f.epoch),
                            _ => None,
                        },
                    };
                    (group, judge_group_write(answer, expected, &bytes, read_back, epoch, &writer, fence_epoch))
                }
            })
            .buffer_unordered(subjects::LEDGER_GROUPS as usize)
            .collect()
            .await;
        let mut ours = true;
        for (group, judged) in outcomes {
            let Some(term) = self.leadership.as_mut() else { break };
            match judged {
                GroupWrite::Landed { revision } => {
                    self.status.records_written += group.records.len() as u64;
                    self.status.ledger_writes += 1;
                    term.groups.insert(group.group, revision);
                }
                // One of the term's earlier writes landed late; this one never can. The next
                // write goes on that revision.
                GroupWrite::Adopted { revision } => {
                    self.status.ledger_writes_unresolved += 1;
                    term.groups.insert(group.group, revision);
                    continue;
                }
                // It may still land: its records may be stored (see the module docs).
                GroupWrite::Unresolved => self.status.ledger_writes_unresolved += 1,
                GroupWrite::Lost => {
                    ours = false;
                    continue;
                }
            }
            for record in &group.records {
                if let Some(state) = term.limits.get_mut(&record.limit) {
                    state.stored = true;
                }
            }
        }
        if !ours {
            self.step_down("the ledger was written by someone else");
        }
        ours
    }

    /// Take limits that did not fit their group out of the term (never written: no lease of
    /// theirs exists) and list them as refused.
    fn leave_out(&mut self, limits: Vec<(String, u32)>) {
        if limits.is_empty() {
            return;
        }
        let max = self.max_group_bytes;
        for (limit, group) in limits {
            warn!(limit = %limit, group, max_bytes = max, "limit left out: its ledger group is full");
            if let Some(term) = self.leadership.as_mut() {
                term.limits.remove(&limit);
            }
            let cause = format!(
                "its ledger group {} is full ({max} bytes, the server's max_payload less 4 KiB, with room for records to grow): raise max_payload, or rename the limit (another name hashes to another group), then put it again",
                subjects::ledger_group_key(group)
            );
            self.left_out.insert(limit, cause);
        }
        self.refresh_refused();
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
