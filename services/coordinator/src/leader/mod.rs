//! Leadership through the `lh_leaders` KV key, and fenced writes of the ledger records.
//!
//! * Terms follow the core's [`Leadership`] rules: a standby claims the key only after seeing
//!   it unchanged for a full TTL on its own clock, and a leader acts only while its last landed
//!   renewal was *sent* less than 0.6·TTL ago. No server clock (nor a bucket's `max_age`) is
//!   relied on.
//! * A new leader re-reads every definition in `lh_limits`, then reads every group of the
//!   ledger (records are kept [`LEDGER_GROUPS`](leasehold_core::subjects::LEDGER_GROUPS) to a
//!   bucket, several limits per key), and runs every limit that has a definition, a record, or
//!   a place in the fence's list. It takes an epoch above all records and above its claim's
//!   revision (so a lost record cannot restart epochs), resumes each core from its record (old
//!   leases keep counting; a missing record means a quiet period, see
//!   `CoordinatorCore::resume`) and writes the groups back by compare-and-set before it issues
//!   anything. A limit with a record but no definition was removed: it runs retired until its
//!   leases end (see [`crate::definitions`]).
//! * Every write is a compare-and-set on the revision this leader last wrote, or read at its
//!   takeover. A group someone else wrote means someone else leads: step down at once. A write
//!   without an answer is re-read: exactly ours has landed; unreadable or unchanged, it is
//!   unresolved (the term goes on and counts its records as stored); a later write of this term
//!   is adopted ([`leasehold_core::coordinator::judge_group_write`]). Every tick writes every group
//!   that holds a limit, changed or not. The writes themselves are in [`crate::writes`]: a
//!   tick's groups go together, the fence raised once before them, the groups written
//!   concurrently.

use bytes::Bytes;
use leasehold_core::coordinator::{next_epoch, CoordinatorCore, LimitConfig, Stored};
use leasehold_core::leadership::{Leadership, Transition};
use leasehold_core::readiness::ReplicaView;
use leasehold_core::subjects::{self, ledger_group_of};
use leasehold_core::wire::{decode, encode, DcReports, LedgerFence, LedgerRecord};
use leasehold_nats::kv::{compare_and_set, read, CasOutcome};
use leasehold_process::clock::LeaseClock;
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::{info, warn};

use async_nats::jetstream::kv::Store;

pub mod definitions;
mod status;
mod writes;

use definitions::Definitions;
pub use status::{LimitBooks, Status};

pub(crate) struct LimitState {
    pub(crate) core: CoordinatorCore,
    /// A record of it may be in the ledger (read at takeover or when added, written since, or
    /// named by the fence): never left out of its group. False only for a limit that has never
    /// been written, so that no lease of it exists.
    pub(crate) stored: bool,
}

pub(crate) struct Term {
    pub(crate) limits: BTreeMap<String, LimitState>,
    /// The revision of every ledger group as this term last wrote it or (at takeover) read it;
    /// a group missing here did not exist.
    pub(crate) groups: BTreeMap<u32, u64>,
    /// The ledger fence as this term last wrote it, and its revision.
    pub(crate) fence: (u64, LedgerFence),
}

pub struct Leader {
    pub(crate) id: String,
    /// The definitions this replica follows (`lh_limits`).
    pub definitions: Definitions,
    pub(crate) ledger: Store,
    pub(crate) leaders: Store,
    /// The `lh_limits` bucket, re-read at every takeover.
    limits: Store,
    clock: LeaseClock,
    election: Leadership,
    pub(crate) leadership: Option<Term>,
    pub status: Status,
    /// Largest group value written: the server's `max_payload` less room for headers, at most
    /// [`MAX_LEDGER_GROUP_BYTES`](leasehold_core::wire::MAX_LEDGER_GROUP_BYTES).
    pub(crate) max_group_bytes: usize,
    /// Limits left out of their full group, and why: not run until their definition changes or
    /// a term takes over (see [`crate::writes`]).
    pub(crate) left_out: BTreeMap<String, String>,
}

impl Leader {
    /// `stores`: the ledger, leader and limits buckets.
    pub fn new(
        id: String,
        definitions: Definitions,
        leader_ttl: Duration,
        (ledger, leaders, limits): (Store, Store, Store),
        clock: LeaseClock,
    ) -> Self {
        let election = Leadership::new(&id, leasehold_nats::leader_key::config(leader_ttl.as_millis() as u64));
        let status = Status::default();
        let max_group_bytes = leasehold_core::wire::MAX_LEDGER_GROUP_BYTES;
        let left_out = BTreeMap::new();
        Leader {
            id,
            definitions,
            ledger,
            leaders,
            limits,
            clock,
            election,
            leadership: None,
            status,
            max_group_bytes,
            left_out,
        }
    }

    /// Write no group larger than the server takes (`max_payload`, less 4 KiB for headers).
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_group_bytes = self.max_group_bytes.min(max_payload.saturating_sub(4 * 1024));
        self
    }

    /// Every decision reads the service's one clock (nanoseconds since start, counting suspension).
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    pub(crate) fn step_down(&mut self, why: &'static str) {
        self.election.resign(why);
        self.status.limits.clear();
        if self.leadership.take().is_some() {
            warn!(id = %self.id, epoch = self.status.epoch, reason = why, "stepping down");
            self.status.step_downs += 1;
        }
        self.status.leading = false;
        self.left_out.clear(); // a later term tries them again
        self.refresh_refused();
    }

    /// Periodic step: renew or seek leadership, then renew every DC's lease of every limit.
    pub async fn tick(&mut self) {
        let lease_clock = self.clock;
        let clock = move || lease_clock.now_ns();
        let key = subjects::COORDINATOR_LEADER_KEY;
        let mut reached = self.status.replica.key_reached_ns;
        let transition = leasehold_nats::leader_key::step(
            &mut self.election,
            &mut leasehold_nats::leader_key::HolderId,
            &self.leaders,
            key,
            clock,
            &mut reached,
        )
        .await;
        match transition {
            Some(Transition::Elected { epoch }) => self.take_over(epoch).await,
            Some(Transition::Deposed { reason }) => self.step_down(reason),
            None => self.act().await,
        }
        // What `/readyz` judges.
        self.status.replica = ReplicaView::of(&self.election, self.leadership.is_some(), reached);
    }

    /// A tick's work while the term may act: every limit's core, then every group written.
    async fn act(&mut self) {
        if !self.acting() {
            return; // not leading, or the last landed renewal is too old to act on
        }
        let now = self.now_ns();
        let names: Vec<String> =
            self.leadership.as_ref().map(|l| l.limits.keys().cloned().collect()).unwrap_or_default();
        for name in &names {
            if let Some(l) = self.leadership.as_mut().and_then(|l| l.limits.get_mut(name)) {
                l.core.tick(now);
            }
        }
        if self.write_all(&names).await {
            self.refresh_books();
        }
    }

    /// This replica leads and its term may act now.
    pub(crate) fn acting(&self) -> bool {
        self.leadership.is_some() && self.election.acting_epoch(self.now_ns()).is_some()
    }

    /// The ledger fence and its revision, if written. `Err` when it cannot be read or parsed.
    async fn read_fence(&self) -> Result<Option<(u64, LedgerFence)>, LedgerReadError> {
        match read(&self.leaders, subjects::LEDGER_FENCE_KEY).await? {
            None => Ok(None),
            Some((rev, bytes)) => Ok(Some((rev, LedgerFence::parse(&bytes).map_err(LedgerReadError::Fence)?))),
        }
    }

    /// `limit`'s record, if any. `Err` when its group cannot be read or decoded, or when the
    /// group is not at the revision this term knows (someone else wrote it): never lead on a
    /// ledger we cannot read (its leases would go uncounted).
    pub(crate) async fn read_record(&self, limit: &str) -> Result<Option<LedgerRecord>, LedgerReadError> {
        let (revision, record) = leasehold_nats::ledger::read_record(&self.ledger, limit)
            .await
            .map_err(|source| LedgerReadError::Record { limit: limit.into(), source })?;
        let group = ledger_group_of(limit);
        let known = self.leadership.as_ref().and_then(|t| t.groups.get(&group).copied());
        if revision != known {
            return Err(LedgerReadError::GroupWrittenElsewhere { group });
        }
        Ok(record)
    }

    async fn take_over(&mut self, claim_revision: u64) {
        let fence = match self.read_fence().await {
            Ok(f) => f,
            Err(e) => {
                warn!(cause = %e, "cannot read the ledger fence; not taking over");
                self.election.resign("the ledger fence cannot be read");
                return;
            }
        };
        // Every definition as stored now (the watch may lag behind what the last term applied).
        match leasehold_nats::limits_store::list(&self.limits).await {
            Ok(stored) => self.definitions.sync(stored.into_iter().map(Into::into).collect()),
            Err(e) => {
                warn!(cause = %e, "cannot read the limits' definitions; not taking over");
                self.election.resign("lh_limits cannot be read");
                return;
            }
        }
        let contents = match leasehold_nats::ledger::read_all(&self.ledger).await {
            Ok(c) => c,
            Err(e) => {
                warn!(cause = %e, "cannot read the ledger; not taking over");
                self.election.resign("the ledger cannot be read");
                return;
            }
        };
        for key in &contents.other_keys {
            warn!(key = %key, "a ledger key that is neither a group nor a limit's name; not read");
        }
        // Every limit defined now, every limit with a record, and every limit the fence says
        // had one (its record lost): a removed one runs retired.
        let mut records: BTreeMap<String, Option<LedgerRecord>> =
            contents.records().into_iter().map(|(name, (_, rec))| (name.to_string(), Some(rec.clone()))).collect();
        let mut names: Vec<String> = self.definitions.names();
        names.extend(self.definitions.refused().keys().cloned());
        if let Some(listed) = fence.as_ref().and_then(|(_, f)| f.limits.as_ref()) {
            names.extend(listed.iter().cloned());
        }
        // A record of a version that kept one key per limit resumes its limit unless a group
        // holds a record of a later term (the term then writes it into its group; the old key
        // is left as it is).
        for (limit, (_, rec)) in &contents.legacy {
            let grouped = records.get(limit).and_then(|r| r.as_ref()).map(|r| r.epoch);
            if grouped.is_none_or(|epoch| epoch < rec.epoch) {
                info!(limit = %limit, "resuming from a per-limit ledger record of an older version");
                records.insert(limit.clone(), Some(rec.clone()));
            }
        }
        for name in names {
            records.entry(name).or_default();
        }
        let groups: BTreeMap<u32, u64> =
            contents.groups.iter().map(|(number, (revision, _))| (*number, *revision)).collect();
        // Above every stored epoch, and at least the claim's revision: revisions only grow, so a
        // record that was lost (a single-replica bucket) cannot make epochs start again at 1.
        let stored = records.values().filter_map(|r| r.as_ref().map(|r| r.epoch)).max().unwrap_or(0);
        let fence_epoch = fence.as_ref().map(|(_, f)| f.epoch);
        let epoch = next_epoch(stored, fence_epoch, claim_revision);
        // The fence goes up before any record of this epoch exists, with the longest DC-lease
        // TTL any term used (what a record lost later may have held).
        let longest_ttl_ms = self.definitions.longest_dc_ttl_ms();
        let raised = LedgerFence::raised(fence.as_ref().map(|(_, f)| f), epoch, longest_ttl_ms);
        let value = Bytes::from(encode(&raised));
        let fence_rev = fence.as_ref().map(|(rev, _)| *rev);
        let fence_rev = match compare_and_set(&self.leaders, subjects::LEDGER_FENCE_KEY, value, fence_rev).await {
            Ok(CasOutcome::Written { revision }) => revision,
            other => {
                warn!(outcome = ?other, "cannot raise the ledger fence; not taking over");
                self.election.resign("the ledger fence cannot be raised");
                return;
            }
        };
        let now = self.now_ns();
        let mut limits = BTreeMap::new();
        for (name, rec) in &records {
            let cfg = self.definitions.config_for(name, rec.as_ref());
            let stored = Stored::classify(name, rec.as_ref(), fence.as_ref().map(|(_, f)| f));
            limits.insert(name.clone(), resume_logged(cfg, &self.id, epoch, stored, now));
        }
        self.leadership = Some(Term { limits, groups, fence: (fence_rev, raised) });
        self.status.leading = true;
        self.status.epoch = epoch;
        self.status.takeovers += 1;
        info!(id = %self.id, epoch, "leading");
        let names: Vec<String> = records.keys().cloned().collect();
        self.write_all(&names).await;
    }

    /// A DC manager's reports, one per limit: acks may free capacity a DC is waiting for. Each
    /// limit that can grant more is written once.
    pub async fn on_reports(&mut self, subject: &str, payload: &[u8]) {
        let batch = match decode::<DcReports>(payload) {
            Ok(b) if subjects::dc_of_report_subject(subject) == Some(b.dc.as_str()) => b,
            _ => {
                self.status.reports_malformed += 1;
                return;
            }
        };
        let now = self.now_ns();
        let mut grown = Vec::new();
        for report in &batch.reports {
            let Some(state) = self.leadership.as_mut().and_then(|l| l.limits.get_mut(&report.limit)) else {
                self.status.reports_ignored += 1;
                continue;
            };
            if !state.core.on_dc_report(report, now).is_empty() {
                grown.push(report.limit.clone());
            }
        }
        self.write_all(&grown).await;
    }
}

/// Resume a limit from what the takeover found, saying why when a record is missing or behind.
/// Only a limit found fresh (no record, none ever written) may be left out of its group.
pub(crate) fn resume_logged(cfg: LimitConfig, id: &str, epoch: u64, stored: Stored<'_>, now: u64) -> LimitState {
    match stored {
        Stored::Lost(f) => {
            warn!(limit = %cfg.limit, fence = f.epoch, dc_ttl_ms_max = f.dc_ttl_ms_max, "ledger record missing below the fence: it was lost; issuing nothing for the longest DC-lease lifetime, counting the largest floors it may have named");
        }
        Stored::Behind(r, f) => {
            warn!(limit = %cfg.limit, record_epoch = r.epoch, fence = f.epoch, dc_ttl_ms_max = f.dc_ttl_ms_max, "ledger record older than the fence's term: newer records were lost; issuing nothing for the longest DC-lease lifetime, counting the largest floors they may have named");
        }
        Stored::Record(_) | Stored::Fresh => {}
    }
    let fresh = matches!(stored, Stored::Fresh);
    LimitState { core: CoordinatorCore::resume(cfg, id, epoch, stored, now), stored: !fresh }
}

/// Why a term cannot rely on what it reads of the ledger (its fence, or a limit's record).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LedgerReadError {
    #[error(transparent)]
    Kv(#[from] leasehold_nats::kv::KvError),
    #[error("the {key} key is unreadable: {0}", key = subjects::LEDGER_FENCE_KEY)]
    Fence(#[source] leasehold_core::wire::WireError),
    #[error("limit {limit}: cannot read its ledger record: {source}")]
    Record {
        limit: String,
        #[source]
        source: leasehold_nats::ledger::LedgerError,
    },
    #[error("ledger group {group} was written by someone else")]
    GroupWrittenElsewhere { group: u32 },
}
