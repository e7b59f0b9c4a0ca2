//! The only module that calls the cores: building them and feeding them inputs. When a core's
//! API changes (a constructor argument, a new report field), adapt it here.

use crate::config::ModelConfig;
use crate::state::Shadow;
use leasehold_core::coordinator::{CoordinatorCore, LimitConfig, Stored};
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput, FailMode, PodLeaseBounds, TermRecords};
use leasehold_core::expiry::ExpiryPolicy;
use leasehold_core::pod::{IntervalCounters, PodConfig, PodCore};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport, LedgerFence, LedgerRecord, PodLease, PodReport};
use std::fmt::{self, Write};

pub const LIMIT: &str = "modelled-limit";

pub fn dc_name(dc: usize) -> String {
    format!("dc{dc}")
}

/// A pod's id: the same across restarts (as a StatefulSet keeps it); only the incarnation changes.
pub fn pod_name(dc: usize, pod: usize) -> String {
    format!("dc{dc}-pod{pod}")
}

/// The id DC `dc`'s manager replica `slot` runs its election under (a restart keeps it).
pub fn manager_replica(dc: usize, slot: usize) -> String {
    format!("dc{dc}-mgr{slot}")
}

/// The instance id of DC `dc`'s manager term `epoch` (each term is a new DC-lease holder).
pub fn manager_instance(dc: usize, epoch: u64) -> String {
    format!("dc{dc}-mgr-e{epoch}")
}

/// A pod process's random incarnation: a fixed pseudo-random function of (pod, restart count),
/// so states stay reproducible and traces replay.
pub fn pod_incarnation(pod: usize, restarts: u32) -> u64 {
    let mut z = (pod as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (restarts as u64 + 1).wrapping_mul(0xbf58_476d);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub fn expiry(cfg: &ModelConfig) -> ExpiryPolicy {
    ExpiryPolicy { max_drift: cfg.max_drift, grace_ms: cfg.grace_ms, egress_spread_ms: 0 }
}

fn floor(cfg: &ModelConfig) -> Quota {
    Quota::new(cfg.floor_rate_milli_per_s, cfg.floor_burst_milli)
}

pub fn limit_config(cfg: &ModelConfig, dc_ttl_ms: u64, rate_milli_per_s: u64) -> LimitConfig {
    let names: Vec<String> = (0..cfg.dcs).map(dc_name).collect();
    let dcs: Vec<(&str, Quota)> = names.iter().map(|n| (n.as_str(), floor(cfg))).collect();
    let mut c = LimitConfig::new(LIMIT, Quota::new(rate_milli_per_s, cfg.burst_milli), &dcs);
    c.dc_ttl_ms = dc_ttl_ms;
    c.renew_interval_ms = cfg.coordinator_renew_ms;
    c.report_timeout_ms = cfg.report_timeout_ms;
    c.min_realloc_interval_ms = cfg.coordinator_renew_ms;
    c.expiry = expiry(cfg);
    c
}

/// What a DC-manager term takes from its process and its election rather than the model: the
/// process's `pod_ttl_ms` (`changed_pod_ttl_ms` once a rollout restarted it) and the bounds its
/// predecessor's term record carried (`TermRecords::inherited`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ManagerSettings {
    pub pod_ttl_ms: u64,
    pub inherited: Option<PodLeaseBounds>,
}

pub fn manager_config(cfg: &ModelConfig, dc: usize, epoch: u64, settings: ManagerSettings) -> DcManagerConfig {
    let mut c = DcManagerConfig::new(LIMIT, &dc_name(dc), &manager_instance(dc, epoch));
    c.epoch = epoch;
    c.pod_ttl_ms = settings.pod_ttl_ms;
    c.inherited = settings.inherited;
    c.renew_interval_ms = cfg.pod_renew_ms;
    c.heartbeat_timeout_ms = cfg.tick_ms * 3;
    c.expiry = expiry(cfg);
    c.min_pod_ttl_ms = cfg.tick_ms / 2;
    // 0 in the presets: a split after every report that calls for one; `bounded_run_with_
    // batched_splits…` runs the production gap.
    c.event_pass_gap_ms = cfg.event_pass_gap_ms;
    c.bugs = cfg.bugs.known_bugs();
    if let Some((rate, burst)) = cfg.emergency_milli {
        c.fail_mode = FailMode::BestEffort { emergency: Quota::new(rate, burst) };
    }
    c
}

/// Checks the cores' own validation of the configurations the model will build.
pub fn validate_core_configs(cfg: &ModelConfig) -> Result<(), leasehold_core::InvalidSetting> {
    limit_config(cfg, cfg.dc_ttl_ms, cfg.rate_milli_per_s).validate()?;
    limit_config(cfg, cfg.changed_dc_ttl_ms, cfg.rate_milli_per_s).validate()?;
    if cfg.faults.limit_lowerings > 0 {
        limit_config(cfg, cfg.dc_ttl_ms, cfg.lowered_rate_milli_per_s).validate()?;
    }
    let settings = |pod_ttl_ms| ManagerSettings { pod_ttl_ms, inherited: None };
    manager_config(cfg, 0, 1, settings(cfg.pod_ttl_ms)).validate()?;
    manager_config(cfg, 0, 1, settings(cfg.changed_pod_ttl_ms)).validate()
}

/// The term records of a DC-manager process whose terms use `pod_ttl_ms`: what it writes in
/// the DC's leader key and what its terms inherit (as the service and the simulator build them).
pub fn term_records(cfg: &ModelConfig, dc: usize, pod_ttl_ms: u64) -> TermRecords {
    let own = PodLeaseBounds::of(&manager_config(cfg, dc, 0, ManagerSettings { pod_ttl_ms, inherited: None }));
    TermRecords::new(own, cfg.manager_leader_ttl_ticks as u64 * cfg.tick_ms, &cfg.bugs.known_bugs())
}

// ---- pods ----

pub fn new_pod(cfg: &ModelConfig, dc: usize, pod: usize, incarnation: u64, now_ns: u64) -> PodCore {
    PodCore::new(
        PodConfig {
            limit: LIMIT.into(),
            dc: dc_name(dc),
            pod: pod_name(dc, pod),
            incarnation,
            weight: 1.0,
            bugs: cfg.bugs.known_bugs(),
        },
        now_ns,
    )
}

/// A process's first report offers nothing (the process has just started); later reports offer
/// `offered`.
pub fn pod_report(core: &mut PodCore, shadow: &mut Shadow, now_ns: u64, offered: u64) -> PodReport {
    let offered = if shadow.sent.is_empty() { 0 } else { offered };
    let counters = IntervalCounters { offered, admitted: offered, ..Default::default() };
    let r = core.report(now_ns, counters, true);
    shadow.record_send(r.seq, now_ns);
    r
}

/// True when the pod applied the lease.
pub fn pod_on_lease(core: &mut PodCore, shadow: &mut Shadow, lease: &PodLease, now_ns: u64) -> bool {
    let applied = core.on_lease(lease, now_ns).is_ok();
    if applied {
        shadow.acked = Some(lease.version);
    }
    applied
}

/// What the pod may spend at `now_ns` (its own clock): the ground truth. Judged by `applied()`
/// only: clones of a `PodCore` share its token bucket.
pub fn pod_applied(core: &PodCore, now_ns: u64) -> Quota {
    core.applied(now_ns).map_or(Quota::ZERO, |a| a.quota)
}

/// Fingerprint material the pod exposes.
pub fn write_pod_view(core: &PodCore, w: &mut dyn Write) -> fmt::Result {
    write!(w, "{}/{:?}/{}", core.config().incarnation, core.applied(0), core.is_draining())
}

// ---- DC managers ----

/// A new term of DC `dc` at `epoch`; its floor comes from the last durable record, if any.
pub fn new_manager(
    cfg: &ModelConfig,
    dc: usize,
    epoch: u64,
    settings: ManagerSettings,
    record: Option<&LedgerRecord>,
    shadow: &mut Shadow,
    now_ns: u64,
) -> (DcManagerCore, Vec<DcOutput>) {
    let mut core = DcManagerCore::new(manager_config(cfg, dc, epoch, settings), now_ns);
    let floor = record.and_then(|r| r.floor_of(&dc_name(dc)));
    let out = match floor {
        Some((f, v)) => observed(&mut core, shadow, now_ns, |c| c.on_floor(f, v, now_ns)),
        None => Vec::new(),
    };
    (core, out)
}

/// Runs `f` on the core and notes in the shadow what the fingerprint needs.
fn observed(
    core: &mut DcManagerCore,
    shadow: &mut Shadow,
    now_ns: u64,
    f: impl FnOnce(&mut DcManagerCore) -> Vec<DcOutput>,
) -> Vec<DcOutput> {
    let passes = core.counters().passes_full;
    let out = f(core);
    if core.counters().passes_full != passes {
        shadow.last_pass_ns = Some(now_ns);
    }
    for o in &out {
        if let DcOutput::Report(r) = o {
            shadow.record_send(r.seq, now_ns);
            shadow.acked = r.lease_in_use;
        }
    }
    out
}

pub fn manager_tick(core: &mut DcManagerCore, shadow: &mut Shadow, now_ns: u64) -> Vec<DcOutput> {
    observed(core, shadow, now_ns, |c| c.tick(now_ns))
}

pub fn manager_on_pod_report(
    core: &mut DcManagerCore,
    shadow: &mut Shadow,
    report: &PodReport,
    now_ns: u64,
) -> Vec<DcOutput> {
    observed(core, shadow, now_ns, |c| c.on_pod_report(report, now_ns))
}

/// A KV watch update: the DC's floor as the record names it, then the newest DC lease addressed
/// to this manager's term (as the simulator's driver does).
pub fn manager_on_record(
    core: &mut DcManagerCore,
    shadow: &mut Shadow,
    record: &LedgerRecord,
    now_ns: u64,
) -> Vec<DcOutput> {
    let (floor, version) = record.floor_of(&core.config().dc).unwrap_or_default();
    let mut out = observed(core, shadow, now_ns, |c| c.on_floor(floor, version, now_ns));
    shadow.floor = Some(floor);
    let instance = core.config().instance.clone();
    let Some(lease) = record.leases.iter().filter(|l| l.holder == instance).max_by_key(|l| l.version) else {
        return out;
    };
    let lease: DcLease = lease.clone();
    let mut accepted = false;
    out.extend(observed(core, shadow, now_ns, |c| match c.on_dc_lease(&lease, now_ns) {
        Ok(out) => {
            accepted = true;
            out
        }
        Err(_) => Vec::new(),
    }));
    if accepted {
        let sent = shadow.sent.iter().find(|(s, _)| *s == lease.basis_seq).map_or(0, |(_, t)| *t);
        shadow.held.retain(|(_, exp)| *exp > now_ns);
        shadow.held.push((lease.version, sent + lease.ttl_ms * 1_000_000));
    }
    out
}

/// Fingerprint material the manager exposes.
pub fn write_manager_view(core: &DcManagerCore, now_ns: u64, w: &mut dyn Write) -> fmt::Result {
    write!(w, "{}/{:?}/{:?}/{:?}/", core.config().instance, core.ledger(), core.budget(now_ns), core.counters())?;
    core.pods().try_for_each(|(p, v)| write!(w, "{p}:{v:?};"))
}

// ---- coordinators ----

/// A new leader at `epoch` from what the KV holds: the record and the fence (the highest epoch
/// ever written, kept apart from the record).
pub fn coordinator_resume(
    cfg: &ModelConfig,
    (dc_ttl_ms, rate_milli_per_s): (u64, u64),
    id: &str,
    epoch: u64,
    record: Option<&LedgerRecord>,
    fence_epoch: Option<u64>,
    now_ns: u64,
) -> CoordinatorCore {
    // The model never loses a record, so the fence's TTL only has to be plausible.
    let fence = fence_epoch.map(|epoch| LedgerFence::raised(None, epoch, dc_ttl_ms));
    let stored = Stored::classify(LIMIT, record, fence.as_ref());
    CoordinatorCore::resume(limit_config(cfg, dc_ttl_ms, rate_milli_per_s), id, epoch, stored, now_ns)
}

pub fn coordinator_tick(core: &mut CoordinatorCore, now_ns: u64) -> Vec<DcLease> {
    core.tick(now_ns)
}

pub fn coordinator_on_report(core: &mut CoordinatorCore, report: &DcReport, now_ns: u64) -> Vec<DcLease> {
    core.on_dc_report(report, now_ns)
}

pub fn coordinator_record(core: &CoordinatorCore) -> LedgerRecord {
    core.record()
}

/// Fingerprint material the coordinator exposes.
pub fn write_coordinator_view(core: &CoordinatorCore, w: &mut dyn Write) -> fmt::Result {
    write!(
        w,
        "{}/{:?}/{:?}/{}/{}/{:?}/{:?}",
        core.epoch(),
        core.ledger(),
        core.dcs(),
        core.config().dc_ttl_ms,
        core.issues_from_ns(),
        core.counters(),
        core.record().leases
    )
}
