//! One state of the modelled world: the real cores, the network, the KV store, fault budgets.

use crate::config::{FaultBudget, MsgKind};
use crate::leaders::{Elector, LeaderKey};
use leasehold_core::coordinator::CoordinatorCore;
use leasehold_core::dc_manager::DcManagerCore;
use leasehold_core::expiry::skewed_ns;
use leasehold_core::pod::PodCore;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReport, LeaseVersion, LedgerRecord, PodLease, PodReport};
use std::sync::Arc;

pub const NS_PER_MS: u64 = 1_000_000;

/// A node's clock: an arbitrary offset and a bounded rate error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Clock {
    pub offset_ns: u64,
    pub drift_ppm: i64,
}

impl Clock {
    pub fn local(&self, real_ns: u64) -> u64 {
        skewed_ns(real_ns, self.offset_ns, self.drift_ppm)
    }
}

/// What the driver saw a core do, for the fingerprint: the cores keep these fields private.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shadow {
    /// The last few (sequence, local send time) of this holder's reports.
    pub sent: Vec<(u64, u64)>,
    /// DC leases accepted, as (version, expiry on this node's clock); pods: unused.
    pub held: Vec<(LeaseVersion, u64)>,
    /// Newest version acknowledged upward in a report (managers) or applied (pods).
    pub acked: Option<LeaseVersion>,
    /// The floor last read from a record (DC managers).
    pub floor: Option<Quota>,
    /// Local time of the last full re-split (DC managers).
    pub last_pass_ns: Option<u64>,
}

impl Shadow {
    pub const SENT_KEPT: usize = 3;

    pub fn record_send(&mut self, seq: u64, now_ns: u64) {
        self.sent.push((seq, now_ns));
        if self.sent.len() > Self::SENT_KEPT {
            self.sent.remove(0);
        }
    }
}

#[derive(Clone)]
pub struct PodNode {
    pub dc: usize,
    /// Processes started under this pod id before the current one.
    pub restarts: u32,
    /// Copy-on-write: a successor state shares every core it did not change with its parent.
    pub core: Arc<PodCore>,
    pub clock: Clock,
    /// Frozen until this tick (exclusive): no reports, no deliveries.
    pub paused_until: Option<u32>,
    pub shadow: Shadow,
}

#[derive(Clone)]
pub struct ManagerNode {
    pub dc: usize,
    pub slot: usize,
    pub alive: bool,
    /// Some while this process leads the DC.
    pub core: Option<Arc<DcManagerCore>>,
    pub clock: Clock,
    /// Local time the current term started (the floor waits from there).
    pub term_started_ns: u64,
    pub shadow: Shadow,
    /// Its replica of the DC's leadership (the shared `Leadership` core and the term records it
    /// writes in the DC's leader key) and what is in flight.
    pub elector: Elector,
    /// Restarted by a rollout: its terms use `changed_pod_ttl_ms`.
    pub rolled: bool,
}

impl ManagerNode {
    /// The `pod_ttl_ms` this process's terms use.
    pub fn pod_ttl_ms(&self, cfg: &crate::config::ModelConfig) -> u64 {
        if self.rolled {
            cfg.changed_pod_ttl_ms
        } else {
            cfg.pod_ttl_ms
        }
    }
}

#[derive(Clone)]
pub struct CoordNode {
    pub id: String,
    pub alive: bool,
    pub paused_until: Option<u32>,
    /// Paused between checking leadership and writing: finishes that write on waking.
    pub write_on_wake: bool,
    pub core: Option<Arc<CoordinatorCore>>,
    /// KV revision of the record this leader last wrote or read.
    pub record_rev: u64,
    pub clock: Clock,
    pub elector: Elector,
}

/// JetStream KV stand-in: leader keys and the ledger record, all written by compare-and-set on
/// their revision. Nothing expires by itself: replicas time terms on their own clocks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kv {
    pub coord_key: LeaderKey,
    pub record: Option<Arc<LedgerRecord>>,
    pub record_rev: u64,
    pub max_epoch: u64,
    /// One leader key per DC; a term's epoch is the revision of its winning claim.
    pub dc_keys: Vec<LeaderKey>,
}

/// A message in flight. Payloads are shared (`Arc`): a sent message never changes, and the
/// states that hold it in flight share one copy.
#[derive(Clone, Debug, PartialEq)]
pub enum Msg {
    PodReport {
        dc: usize,
        report: Arc<PodReport>,
    },
    PodLease {
        pod: usize,
        lease: Arc<PodLease>,
    },
    DcReport(Arc<DcReport>),
    /// A KV watch update of the ledger record, to one DC's managers.
    Record {
        dc: usize,
        record: Arc<LedgerRecord>,
    },
}

impl Msg {
    pub fn kind(&self) -> MsgKind {
        match self {
            Msg::PodReport { .. } => MsgKind::PodReport,
            Msg::PodLease { .. } => MsgKind::PodLease,
            Msg::DcReport(_) => MsgKind::DcReport,
            Msg::Record { .. } => MsgKind::Record,
        }
    }

    /// One line for traces.
    pub fn summary(&self) -> String {
        match self {
            Msg::PodReport { report, .. } => {
                format!(
                    "PodReport {}#{:x} seq {} offered {} in_use {}",
                    report.pod,
                    report.incarnation,
                    report.seq,
                    report.offered,
                    version(report.lease_in_use)
                )
            }
            Msg::PodLease { lease, .. } => format!(
                "PodLease {}#{:x} {} {}/{} ttl {} basis {}",
                lease.pod,
                lease.incarnation,
                lease.version,
                lease.quota.rate_milli_per_s,
                lease.quota.burst_milli,
                lease.ttl_ms,
                lease.basis_seq
            ),
            Msg::DcReport(r) => format!(
                "DcReport {} seq {} demand {} in_use {}",
                r.holder,
                r.seq,
                r.demand.rate_milli_per_s,
                version(r.lease_in_use)
            ),
            Msg::Record { dc, record } => {
                let leases: Vec<String> = record
                    .leases
                    .iter()
                    .map(|l| {
                        format!(
                            "{}:{}:{}/{}:ttl{}",
                            l.holder, l.version, l.quota.rate_milli_per_s, l.quota.burst_milli, l.ttl_ms
                        )
                    })
                    .collect();
                format!("Record to dc{dc} e{} [{}]", record.epoch, leases.join(", "))
            }
        }
    }
}

fn version(v: Option<LeaseVersion>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

#[derive(Clone)]
pub struct State {
    pub tick: u32,
    pub pods: Vec<PodNode>,
    /// Two per DC: index `dc * 2 + slot`.
    pub managers: Vec<ManagerNode>,
    pub coords: Vec<CoordNode>,
    pub kv: Kv,
    /// In flight, oldest first.
    pub net: Vec<Msg>,
    pub budget: FaultBudget,
    pub config_changed: bool,
    /// When (real ns) the leading term lowered R live, if it did.
    pub limit_lowered_at_ns: Option<u64>,
    /// The "demand moves" action was taken.
    pub demand_shifted: bool,
}

impl State {
    /// R as new terms run it: lowered once the leader lowered it live.
    pub fn rate_milli(&self, cfg: &crate::config::ModelConfig) -> u64 {
        if self.limit_lowered_at_ns.is_some() {
            cfg.lowered_rate_milli_per_s
        } else {
            cfg.rate_milli_per_s
        }
    }

    pub fn real_ns(&self, tick_ms: u64) -> u64 {
        self.tick as u64 * tick_ms * NS_PER_MS
    }

    /// Whether message `m` can be delivered now (a paused pod takes nothing until it wakes).
    pub fn deliverable(&self, m: &Msg) -> bool {
        match m {
            Msg::PodLease { pod, .. } => self.pods[*pod].paused_until.is_none(),
            _ => true,
        }
    }

    /// Index of the oldest deliverable message: delivering it is free, any other costs a reorder.
    pub fn fifo_head(&self) -> Option<usize> {
        self.net.iter().position(|m| self.deliverable(m))
    }

    /// DC `dc`'s (leading manager, live standby not yet restarted by a rollout), if it has both.
    pub fn rollout_standby(&self, dc: usize) -> Option<(usize, usize)> {
        let leader = (dc * 2..dc * 2 + 2).find(|&m| self.managers[m].alive && self.managers[m].core.is_some())?;
        let standby = if leader % 2 == 0 { leader + 1 } else { leader - 1 };
        let s = &self.managers[standby];
        (s.alive && !s.rolled && s.core.is_none()).then_some((leader, standby))
    }

    /// The coordinator the leader key names, if it is alive and holds a term's core (a paused,
    /// deposed one may still believe it leads; it is not this one).
    pub fn coordinator_leader(&self) -> Option<usize> {
        let named = self.kv.coord_key.holder()?;
        (0..self.coords.len())
            .find(|&c| self.coords[c].id == named && self.coords[c].alive && self.coords[c].core.is_some())
    }
}
