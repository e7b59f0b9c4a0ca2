//! Faults: what each one does with its parameters ([`Fault`]), whom it strikes ([`Victim`]),
//! and the seeded schedule that draws them all when it is made ([`schedule`]).

mod schedule;

pub use schedule::{schedule, FaultPace};

use serde::Serialize;

/// One fault of a run: when it starts, how long it lasts, whom it strikes and what it does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScheduledFault {
    pub at_s: f64,
    /// How long it lasts (pause, partition, network trouble) or until the restart/replacement.
    pub duration_s: f64,
    pub victim: Victim,
    pub fault: Fault,
}

impl ScheduledFault {
    pub fn new(at_s: f64, duration_s: f64, victim: Victim, fault: Fault) -> Self {
        ScheduledFault { at_s, duration_s, victim, fault }
    }
}

/// Whom a fault strikes, as the schedule names it. Who that is becomes known when the fault
/// starts: the pods up, the leaders, are those of that moment. A fault that finds no one (no pod
/// up, no leader) does nothing and is not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    /// Of the `n` pods up when the fault starts (numbered DC by DC), the `pick % n`-th.
    PodUp { pick: u64 },
    /// DC `dc` (its index in the scenario).
    Dc(usize),
    /// The leading manager (term open, alive, not paused) of DC `dc`, or else of the next DC
    /// that has one.
    LeadingManager { dc: usize },
    /// The coordinator that leads when the fault starts.
    CoordinatorLeader,
    /// No one in particular: the network, the stores' answers, the settings, the limit.
    Everyone,
}

/// What a fault does, with every parameter it needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// A pod dies; a new process starts under the same id when the fault heals.
    PodCrash,
    /// A pod crashes and is restarted under the same id again and again (lives of 0.3–1.5 s,
    /// restarts after 20–300 ms): leases meant for one process reach the next.
    PodCrashLoop,
    /// A pod freezes until the fault heals.
    PodPause,
    /// `pods` new pods join the DC (scale-up); they drain again when the fault heals.
    PodJoin { pods: usize },
    /// A pod drains (a rolling deploy); its replacement starts when the fault heals.
    PodDrain,
    /// A DC is cut off from the coordinators.
    PartitionDcCoordinator,
    /// A pod is cut off from its DC's managers.
    PartitionPodDc,
    /// The coordinator leader dies; `ledger` says what becomes of a single-replica ledger bucket
    /// that goes down with it (the record may be lost, the fence in the leader bucket is not).
    CoordinatorCrash { ledger: LedgerFate },
    /// The coordinator leader freezes: between checking its leadership and writing the ledger,
    /// or (`after_write`) right after it next sends a leader-key renewal.
    CoordinatorPause { after_write: bool },
    /// A DC's leading manager dies; its standby claims the DC after a leader TTL, and the
    /// dead one comes back as a standby.
    DcManagerCrash,
    /// A DC's leading manager freezes past its leader TTL with pod leases computed but not
    /// sent; on waking it sends them (the GC-pause bug) and finds its term taken. With
    /// `after_write`, it freezes right after it next sends a leader-key renewal.
    DcManagerPause { after_write: bool },
    /// A DC's managers lose their NATS connection and reconnect after the fault's `duration_s`:
    /// what they publish meanwhile is buffered by the client and flushed on reconnect (late
    /// leases), and what pods publish to them meanwhile is lost.
    DcManagerReconnect,
    /// Answers from the leader keys come back `reply_delay_ms` late (slow compare-and-set
    /// replies): a leader must time its term from the send. A share of requests is also held
    /// up on its way past the driver's timeout: it lands up to `reply_delay_ms` after the driver
    /// gave up on it.
    SlowLeaderReplies { reply_delay_ms: u64 },
    /// A rolling restart with new settings: `dc_ttl_ms` and `pod_ttl_ms` (and the emergency
    /// allowance) shrink to `ttl_scale` of the scenario's (60% in random schedules), or grow
    /// back: every other change in a run shrinks them. With `dc_ttl_only`, `pod_ttl_ms` stays.
    /// `restarted` says whose leaders restart, so standbys with the new settings take over.
    ConfigChange { ttl_scale: f64, restarted: Rollout, dc_ttl_only: bool },
    /// A new limit definition (`change`), in force until the fault heals, when the scenario's
    /// comes back. With `by_restart`, every coordinator that holds a term restarts with it (a
    /// new term); else the leading term applies it in place, as the service follows `lh_limits`.
    LimitChange { change: LimitEdit, by_restart: bool },
    /// Each message is lost with `probability`.
    MessageLoss { probability: f64 },
    /// Each message is delivered twice with `probability`.
    MessageDuplication { probability: f64 },
    /// Each message takes up to `extra_delay_ms` longer.
    MessageDelay { extra_delay_ms: u64 },
    /// A DC's standby's ledger watch lags: it delivers no record until the fault heals, then
    /// the kept history (scripted paths only: not in [`FaultKind::RANDOM_SCHEDULE_KINDS`]).
    WatchLag,
    /// The coordinator leader's ledger writes go unanswered (a timeout, a server restarting) and
    /// land `late_ms` later if the record still has the revision they expected (a client
    /// resending what it buffered); the leader reads the record unchanged, keeps its term and
    /// counts the write's leases, and its next write meets its own late one
    /// (`judge_group_write`: Unresolved, then Adopted). Scripted paths only, like `WatchLag`.
    LedgerWritesUnanswered { late_ms: u64 },
}

/// What a coordinator crash does to a single-replica ledger bucket. In random schedules one
/// crash in four takes the bucket down: half of those lose the record, half its tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerFate {
    /// The bucket stays up.
    Kept,
    /// The record is gone (if there was one); the fence (another stream) stays.
    Lost,
    /// The record's tail is gone, leaving the last record an earlier term wrote (if none did,
    /// the record is lost); the fence stays.
    RolledBack,
}

/// Whose leaders a [`Fault::ConfigChange`] restarts. The leader restarts last: standbys
/// already run the new settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rollout {
    /// The coordinator leader's (the coordinators use `dc_ttl_ms`; standbys take the settings
    /// in force when they lead).
    Coordinators,
    /// Each DC's managers' (they use `pod_ttl_ms` and the emergency allowance): its standbys
    /// first, then its leader.
    DcManagers,
}

/// The definition a [`Fault::LimitChange`] puts in force.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LimitEdit {
    /// The limit is removed (R, B and every floor zero: what a term runs a removed limit on) and
    /// defined again when the fault heals.
    Remove,
    /// R (with `rate`) and/or B (with `burst`) go down to `scale` of the scenario's (60–80% in
    /// random schedules), and/or floor moves from DC `floor_from` to the next DC: the giver keeps
    /// `scale` of its floor.
    Scale { rate: bool, burst: bool, floor_from: Option<usize>, scale: f64 },
}

/// A [`Fault`]'s name without its parameters: what reports count and random schedules pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    PodCrash,
    PodCrashLoop,
    PodPause,
    PodJoin,
    PodDrain,
    PartitionDcCoordinator,
    PartitionPodDc,
    CoordinatorCrash,
    CoordinatorPause,
    DcManagerCrash,
    DcManagerPause,
    DcManagerReconnect,
    SlowLeaderReplies,
    ConfigChange,
    LimitChange,
    MessageLoss,
    MessageDuplication,
    MessageDelay,
    WatchLag,
    LedgerWritesUnanswered,
}

impl FaultKind {
    /// The kinds random schedules draw: every kind but the scripted-only `WatchLag` and
    /// `LedgerWritesUnanswered`. Their order is part of every schedule's draws.
    pub const RANDOM_SCHEDULE_KINDS: [FaultKind; 18] = [
        FaultKind::PodCrash,
        FaultKind::PodCrashLoop,
        FaultKind::PodPause,
        FaultKind::PodJoin,
        FaultKind::PodDrain,
        FaultKind::PartitionDcCoordinator,
        FaultKind::PartitionPodDc,
        FaultKind::CoordinatorCrash,
        FaultKind::CoordinatorPause,
        FaultKind::DcManagerCrash,
        FaultKind::DcManagerPause,
        FaultKind::DcManagerReconnect,
        FaultKind::SlowLeaderReplies,
        FaultKind::ConfigChange,
        FaultKind::LimitChange,
        FaultKind::MessageLoss,
        FaultKind::MessageDuplication,
        FaultKind::MessageDelay,
    ];
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::PodCrash => FaultKind::PodCrash,
            Fault::PodCrashLoop => FaultKind::PodCrashLoop,
            Fault::PodPause => FaultKind::PodPause,
            Fault::PodJoin { .. } => FaultKind::PodJoin,
            Fault::PodDrain => FaultKind::PodDrain,
            Fault::PartitionDcCoordinator => FaultKind::PartitionDcCoordinator,
            Fault::PartitionPodDc => FaultKind::PartitionPodDc,
            Fault::CoordinatorCrash { .. } => FaultKind::CoordinatorCrash,
            Fault::CoordinatorPause { .. } => FaultKind::CoordinatorPause,
            Fault::DcManagerCrash => FaultKind::DcManagerCrash,
            Fault::DcManagerPause { .. } => FaultKind::DcManagerPause,
            Fault::DcManagerReconnect => FaultKind::DcManagerReconnect,
            Fault::SlowLeaderReplies { .. } => FaultKind::SlowLeaderReplies,
            Fault::ConfigChange { .. } => FaultKind::ConfigChange,
            Fault::LimitChange { .. } => FaultKind::LimitChange,
            Fault::MessageLoss { .. } => FaultKind::MessageLoss,
            Fault::MessageDuplication { .. } => FaultKind::MessageDuplication,
            Fault::MessageDelay { .. } => FaultKind::MessageDelay,
            Fault::WatchLag => FaultKind::WatchLag,
            Fault::LedgerWritesUnanswered { .. } => FaultKind::LedgerWritesUnanswered,
        }
    }
}
