//! The DC manager, sans I/O: holds the DC lease, splits it into pod sub-leases.
//!
//! Rules it enforces (the partner API at 1,000 QPS, spread over data centers):
//! * **Budget** = the DC's reserved floor + its newest valid DC lease. After the DC lease expires
//!   without renewal: the floor only (strict), or floor + emergency allowance (best-effort).
//! * **Nesting**: a pod lease never outlives the DC lease it was cut from (in either clock).
//! * **Conservation**: pod grants go through a [`Ledger`]; a pod's old lease counts until the pod
//!   reports the new one in use, returns it, or it expires.
//! * **Counted ends** (`lease_ends.rs`): a grant also keeps, from now on and at the end of each
//!   DC lease the coordinator may still count, the pod leases still admitting within what stays
//!   counted (a DC lease already ended on this clock backs nothing).
//! * **Acks upward**: the manager tells the coordinator it is bound by DC lease `w` only once its
//!   pods' outstanding leases fit inside floor + `w`, so the coordinator never forgets a larger
//!   lease that pods may still be spending.
//! * **Floors** (`floors.rs`): only the newest floor the coordinator named is used (never an
//!   older one a delayed record carries), and the report says which floor the pods may still be
//!   spending under, so the coordinator knows when it may stop reserving an older, larger one.
//! * Lifecycle: a joining pod is included in the next split; a draining pod's return frees its
//!   share at once; a silent pod is excluded but its lease expires naturally; the floor is only
//!   used once every lease a previous manager instance could have issued from it has expired.

mod config;
mod floors;
mod holder_key;
mod lease_ends;
mod pacing;
mod parts;
mod pod_messages;
mod pods;
mod record_rules;
mod report;
mod split_pass;
mod succession;
mod targets;
mod term_record;
mod unread;

pub use config::{
    DcManagerConfig, FailMode, FailRule, PodRules, SplitMode, DEFAULT_HEARTBEAT_TIMEOUT_MS, FORGET_SILENT_AFTER_MS,
};
pub use holder_key::{holder_key, HolderKey};
pub use pacing::LeasePacing;
pub use pods::{PodView, ReportOutcome, ReportReading};
pub use record_rules::RecordRules;
pub use succession::Continuation;
pub use term_record::{PodLeaseBounds, TermRecord, TermRecords, POD_TTL_MS_MAX};

use crate::expiry::NS_PER_MS;
use crate::lease_intake::{LeaseFence, LeaseRejection, SentLog};
use crate::ledger::Ledger;
use crate::quota::Quota;
use crate::wire::{DcLease, DcReport, LeaseVersion, PodLease, ReturnAck};
use compact_str::CompactString;
use parts::{DcLeaseBook, FloorState, PassState};
use pods::Pods;
use succession::Succession;

/// Smallest growth (share of the target) worth an event-driven lease between renewals.
pub const MIN_GROWTH_STEP: f64 = 0.01;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Full,
    GrowthOnly,
}

/// Something the driver must send.
#[derive(Clone, Debug, PartialEq)]
pub enum DcOutput {
    /// A pod lease, to publish to its pod.
    PodLease(PodLease),
    /// A DC report, to publish to the coordinator.
    Report(DcReport),
    /// The confirmation of a pod's return, to publish to the pod.
    ReturnAck(ReturnAck),
}

/// A DC lease this manager term holds.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldDcLease {
    /// The lease's version.
    pub version: LeaseVersion,
    /// The rate and burst it grants.
    pub quota: Quota,
    /// This manager's clock.
    pub expires_at_ns: u64,
    /// The lease's id, for logs and audits.
    pub lease_id: String,
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DcCounters {
    /// Pod leases issued.
    pub pod_leases_issued: u64,
    /// Pod reports ignored: not newer than the holder's last, or from a holder that returned its
    /// lease.
    pub reports_stale: u64,
    /// Pod reports and returns ignored for naming another DC or limit.
    pub reports_foreign: u64,
    /// Reports of new pods refused because the manager already tracks `max_pods`.
    pub reports_over_capacity: u64,
    /// DC leases refused.
    pub dc_leases_rejected: u64,
    /// DC leases taken, and the sum of their ages when taken: the time since the DC report each
    /// answers was sent (a lease counts from then, so a late one is short: on a loaded machine
    /// they came 5–7 s after their reports, with 10 s to live).
    pub dc_leases_accepted: u64,
    /// The sum of the taken DC leases' ages when taken, in milliseconds (see `dc_leases_accepted`).
    pub dc_lease_age_ms_total: u64,
    /// Lease returns taken from pods.
    pub returns: u64,
    /// Of `returns`, those naming a holder this core had no view of and no lease on its books
    /// for: acknowledged, and nothing kept (a pod chooses the incarnation it names).
    pub returns_of_unknown_holders: u64,
    /// Of `returns`, those of a known holder that ended its leases but kept no closed marker:
    /// the ledger already held `max_pods` of them.
    pub returns_without_marker: u64,
    /// Re-splits of the whole budget (renewals, new DC leases, joins, returns).
    pub passes_full: u64,
    /// Of `passes_full`, those a DC lease ran (its budget or TTL differed from the last split's,
    /// or the renewal was overdue), and those a joining pod's report ran.
    pub passes_full_dc_lease: u64,
    /// Of `passes_full`, those a joining pod's report ran.
    pub passes_full_join: u64,
    /// Event-driven passes that only let pods grow.
    pub passes_growth: u64,
    /// Checks whether some pod could grow between renewals (each a pass over the pods).
    pub growth_checks: u64,
    /// Continuations of an earlier term's pod leases sent (`succession.rs`).
    pub continuations_issued: u64,
    /// Of those, confirmed in use by their pods.
    pub continuations_confirmed: u64,
}

/// A DC manager term's state for one limit, sans I/O: takes DC leases and pod reports, issues pod
/// leases and DC reports.
#[derive(Clone)]
pub struct DcManagerCore {
    cfg: DcManagerConfig,
    pods: Pods,
    ledger: Ledger<HolderKey>,
    /// The DC leases this term holds, and what taking them safely needs.
    dc_leases: DcLeaseBook,
    /// The floor the coordinator named, and what this term may still rely on.
    floors: FloorState,
    /// What this term answers for of its predecessors' pod leases.
    succession: Succession,
    next_seq: u64,
    /// When splits ran, and what waits for the next one.
    passes: PassState,
    counters: DcCounters,
    /// The limit's record runs retired (the limit was removed): said in every pod lease.
    limit_removed: bool,
    /// The term has not read the limit's ledger record directly yet (see `unread.rs`).
    ledger_unread: bool,
    /// What every pod lease of this core names, made once.
    lease_names: LeaseNames,
}

/// The names a core's pod leases carry, kept as they carry them (inline up to 24 bytes: a DC
/// manager of 1,000 limits writes 100,000 leases a second at 100 pods, and a `String` per name
/// per lease was an allocation and, when the batch was written, a cold heap block to read).
#[derive(Clone, Debug)]
struct LeaseNames {
    limit: CompactString,
    dc: CompactString,
    issuer: CompactString,
    /// `<instance>-<epoch>-`: a pod lease's id is this and its sequence number.
    lease_id_prefix: String,
}

impl DcManagerCore {
    /// A new term. Its floor is zero until the coordinator's durable record names it
    /// ([`on_floor`](Self::on_floor) or a DC lease), and neither the floor nor the emergency
    /// allowance is used before every pod lease an earlier term may have cut from them has
    /// expired: the most conservative of this term's bounds and those its predecessor's term
    /// record carried (`cfg.inherited`, see `term_record.rs`), from now.
    pub fn new(cfg: DcManagerConfig, now_ns: u64) -> Self {
        let bounds = PodLeaseBounds::of(&cfg);
        let quiet_ns = cfg.inherited.map_or(bounds, |b| bounds.merge(b)).live_until_ns(now_ns);
        let ledger = Ledger::new(Quota::ZERO, cfg.epoch).with_bugs(&cfg.bugs);
        let lease_names = LeaseNames {
            limit: CompactString::new(&cfg.limit),
            dc: CompactString::new(&cfg.dc),
            issuer: CompactString::new(&cfg.instance),
            lease_id_prefix: format!("{}-{}-", cfg.instance, cfg.epoch),
        };
        DcManagerCore {
            cfg,
            pods: Pods::default(),
            ledger,
            dc_leases: DcLeaseBook {
                held: Vec::new(),
                fence: LeaseFence::default(),
                sent: SentLog::new(1),
                acked: None,
            },
            floors: FloorState {
                amount: Quota::ZERO,
                version: None,
                bound: Quota::ZERO,
                usable_from_ns: quiet_ns,
                confirm_cap: None,
            },
            succession: Succession::default(),
            next_seq: 0,
            passes: PassState::default(),
            counters: DcCounters::default(),
            limit_removed: false,
            ledger_unread: false,
            lease_names,
        }
    }

    /// Whether the limit was removed, as the coordinator's newest record says: the pod leases
    /// issued from now on tell the pods (they grant nothing either way).
    pub fn set_limit_removed(&mut self, removed: bool) {
        if removed != self.limit_removed {
            self.passes.last_full = None; // the next DC lease tells the pods at once
        }
        self.limit_removed = removed;
    }

    /// The split and fail mode from now on (the limit's definition, from its ledger record).
    /// A new split applies from the next pass; the fail mode from the next budget.
    pub fn set_policy(&mut self, split: SplitMode, fail_mode: FailMode) {
        if (split, fail_mode) != (self.cfg.split, self.cfg.fail_mode) {
            self.passes.last_full = None; // the next DC lease splits by the new rule at once
        }
        self.cfg.split = split;
        self.cfg.fail_mode = fail_mode;
    }

    /// The settings it runs with.
    pub fn config(&self) -> &DcManagerConfig {
        &self.cfg
    }

    /// Its counters.
    pub fn counters(&self) -> &DcCounters {
        &self.counters
    }

    /// Its books of pod leases.
    pub fn ledger(&self) -> &Ledger<HolderKey> {
        &self.ledger
    }

    /// Every pod it has a view of, with that view.
    pub fn pods(&self) -> impl Iterator<Item = (&HolderKey, &PodView)> {
        self.pods.views.iter()
    }

    /// Pods that get a share of the next split at `now_ns` (fresh heartbeat, healthy, not
    /// draining): the count the DC report carries.
    pub fn pods_eligible(&self, now_ns: u64) -> u32 {
        self.pods.eligible_views(&self.cfg, now_ns).count() as u32
    }

    /// The driver dropped a report batch unread at `at_ns` (see
    /// [`DcManagerConfig::heartbeat_timeout_after_drops_ms`]).
    pub fn note_reports_dropped(&mut self, at_ns: u64) {
        self.pods.note_reports_dropped(at_ns);
    }

    /// The driver has read or dropped every report batch that arrived before `at_ns` (the
    /// arrival of the oldest one queued unread, or when it looked if none was): a pod's silence
    /// counts only up to then (see [`PodView::eligible`]).
    pub fn note_reports_read_through(&mut self, at_ns: u64) {
        self.pods.note_reports_read_through(at_ns);
    }

    /// Eligible pods that hold no whole token of burst at `now_ns`, so they deny every call: the
    /// budget has fewer whole tokens than pods (on the floor alone: `floor_burst` is too small
    /// for the pods), or a pod's grant is still waiting for room.
    /// (The views and the ledger's holders are both in key order: one pass over each, and no
    /// lookup, where a lookup per pod cost a manager of 1,000 limits 3% of its time.)
    pub fn pods_without_token(&self, now_ns: u64) -> u32 {
        let mut claims = self.ledger.claims_in_key_order(now_ns).peekable();
        let mut without = 0;
        for (pod, _) in self.pods.eligible_views(&self.cfg, now_ns) {
            while claims.next_if(|(holder, _)| *holder < pod).is_some() {}
            let claim = claims.next_if(|(holder, _)| *holder == pod).map_or(Quota::ZERO, |(_, claim)| claim);
            without += u32::from(claim.burst_milli < crate::quota::MILLI);
        }
        without
    }

    /// The newest DC lease, if it is still valid at `now_ns`. Only the newest is ever spent
    /// under: once a newer lease arrived the older ones may already be reported superseded and
    /// re-granted elsewhere, so when the newest expires the DC falls to its floor, never back.
    pub fn current_lease(&self, now_ns: u64) -> Option<&HeldDcLease> {
        if self.cfg.bugs.dc_falls_back_to_older_lease() {
            return self.dc_leases.held.iter().rev().find(|l| l.expires_at_ns > now_ns);
        }
        self.dc_leases.held.last().filter(|l| l.expires_at_ns > now_ns)
    }

    /// What the pods may share at `now_ns`, and the instant pod leases must end by (if nested).
    pub fn budget(&self, now_ns: u64) -> (Quota, Option<u64>) {
        // Before the quiet period ends, pods of an earlier term may still spend the floor (and,
        // in best-effort mode, the emergency allowance): this term uses neither, unless it
        // counts the floor with its predecessor's pod leases (`floor_usable`).
        let quiet = now_ns < self.floors.usable_from_ns;
        let floor = self.floor_usable(now_ns);
        match self.current_lease(now_ns) {
            Some(l) => (floor.saturating_add(l.quota), Some(l.expires_at_ns)),
            None => match self.cfg.fail_mode {
                FailMode::BestEffort { emergency }
                    if !self.ledger_unread && (!quiet || self.cfg.bugs.emergency_before_quiet_period()) =>
                {
                    (floor.saturating_add(emergency), None)
                }
                _ => (floor, None),
            },
        }
    }

    /// A DC lease from the coordinator (via the KV ledger record).
    pub fn on_dc_lease(&mut self, lease: &DcLease, now_ns: u64) -> Result<Vec<DcOutput>, LeaseRejection> {
        let r = self.accept_dc_lease(lease, now_ns);
        if r.is_err() {
            self.counters.dc_leases_rejected += 1;
        }
        let basis_sent_ns = r?;
        self.counters.dc_leases_accepted += 1;
        self.counters.dc_lease_age_ms_total += now_ns.saturating_sub(basis_sent_ns) / NS_PER_MS;
        // A renewal of the same amount changes no pod's share, and the pods' leases stay nested
        // in the older lease: the renewal tick renews them, if they outlive it (cut at full
        // length, or to at least three renew intervals to nest in a DC lease that came late: the
        // renewal comes within one, its delivery may wait most of another for the pod's paced
        // lease message, and a lease counts from the report it answers. On a loaded machine DC
        // leases came 5–7 s after their basis, and re-splitting for each one doubled the
        // splits). Any other DC lease (a budget of another size, floor and lease together, or
        // one the last split was cut shorter for), or one that finds the renewal overdue (no
        // tick for a while), re-splits at once.
        let renewal_due = self.renewal_due(now_ns, self.cfg.renew_interval_ms * NS_PER_MS);
        let lasting_ms = self.cfg.pod_ttl_ms.min(self.cfg.renew_interval_ms.saturating_mul(3));
        let budget = self.budget(now_ns).0;
        if !renewal_due && self.passes.last_full.is_some_and(|(b, ttl_ms)| b == budget && ttl_ms >= lasting_ms) {
            return Ok(Vec::new());
        }
        self.counters.passes_full_dc_lease += 1;
        Ok(self.pass(now_ns, Pass::Full))
    }

    /// Takes `lease` if it is this manager's, newer than any taken, and still running: when the
    /// DC report it answers was sent.
    fn accept_dc_lease(&mut self, lease: &DcLease, now_ns: u64) -> Result<u64, LeaseRejection> {
        if lease.holder != self.cfg.instance || lease.dc != self.cfg.dc || lease.limit != self.cfg.limit {
            return Err(LeaseRejection::NotMine);
        }
        self.dc_leases.fence.check(lease.version)?;
        let sent = self.dc_leases.sent.sent_at(lease.basis_seq).ok_or(LeaseRejection::UnknownBasis(lease.basis_seq))?;
        let anchor_ns = if self.cfg.bugs.dc_lease_counts_from_receipt() { now_ns } else { sent };
        let expires_at_ns = anchor_ns.saturating_add(lease.ttl_ms.saturating_mul(NS_PER_MS));
        if expires_at_ns <= now_ns {
            return Err(LeaseRejection::AlreadyExpired);
        }
        self.dc_leases.fence.accept(lease.version);
        // The floor it carries was the newest when the lease was issued (a lower version).
        self.take_floor(lease.floor, lease.version);
        self.take_predecessor(lease.predecessor, now_ns);
        // Older leases stay listed only for the ack rule in `report`; they are never spent again.
        self.dc_leases.held.retain(|h| h.expires_at_ns > now_ns);
        self.dc_leases.held.push(HeldDcLease {
            version: lease.version,
            quota: lease.quota,
            expires_at_ns,
            lease_id: lease.lease_id.clone(),
        });
        Ok(sent)
    }

    /// No full split has run in the last `renew_ns` (or none ever).
    fn renewal_due(&self, now_ns: u64, renew_ns: u64) -> bool {
        self.passes.last_full_ns.is_none_or(|t| now_ns.saturating_sub(t) >= renew_ns)
    }

    /// Call every report interval: sends the DC report, and renews pod leases when due.
    /// A renewal is due once the renew interval has passed since the last full split, less half
    /// the time since the previous tick: a tick landing a little early still renews, instead of
    /// the next one a whole tick late.
    pub fn tick(&mut self, now_ns: u64) -> Vec<DcOutput> {
        let half_tick_ns = self.passes.last_tick_ns.map_or(0, |t| now_ns.saturating_sub(t) / 2);
        self.passes.last_tick_ns = Some(now_ns);
        let renew_ns = (self.cfg.renew_interval_ms * NS_PER_MS).saturating_sub(half_tick_ns);
        let due = self.renewal_due(now_ns, renew_ns);
        let mut out = if due { self.pass(now_ns, Pass::Full) } else { self.waiting_pass(now_ns) };
        out.push(DcOutput::Report(self.report(now_ns)));
        self.pods.forget_silent(now_ns);
        out
    }
}
