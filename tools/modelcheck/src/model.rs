//! The only module that calls the cores: building them and feeding them inputs. When a core's
//! API changes (a constructor argument, a new report field), adapt it here.

use crate::config::{ModelConfig, Mutation};
use crate::state::Shadow;
use leasehold_shared::coordinator::{CoordinatorCore, LimitConfig};
use leasehold_shared::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput, FailMode};
use leasehold_shared::expiry::ExpiryPolicy;
use leasehold_shared::pod::{IntervalCounters, PodConfig, PodCore};
use leasehold_shared::quota::Quota;
use leasehold_shared::wire::{DcLease, DcReport, LedgerRecord, PodLease, PodReport};
use std::fmt::{self, Write};

pub const LIMIT: &str = "modelled-limit";

pub fn dc_name(dc: usize) -> String {
    format!("dc{dc}")
}

pub fn pod_name(pod: usize, incarnation: u32) -> String {
    format!("p{pod}-i{incarnation}")
}

pub fn expiry(cfg: &ModelConfig) -> ExpiryPolicy {
    ExpiryPolicy { max_drift: cfg.max_drift, grace_ms: cfg.grace_ms, egress_spread_ms: 0 }
}

fn floor(cfg: &ModelConfig) -> Quota {
    Quota::new(cfg.floor_rate_milli_per_s, cfg.floor_burst_milli)
}

pub fn limit_config(cfg: &ModelConfig, dc_ttl_ms: u64) -> LimitConfig {
    let names: Vec<String> = (0..cfg.dcs).map(dc_name).collect();
    let dcs: Vec<(&str, Quota)> = names.iter().map(|n| (n.as_str(), floor(cfg))).collect();
    let mut c = LimitConfig::new(LIMIT, Quota::new(cfg.rate_milli_per_s, cfg.burst_milli), &dcs);
    c.dc_ttl_ms = dc_ttl_ms;
    c.renew_interval_ms = cfg.coordinator_renew_ms;
    c.report_timeout_ms = cfg.report_timeout_ms;
    c.min_realloc_interval_ms = cfg.coordinator_renew_ms;
    c.expiry = expiry(cfg);
    c
}

pub fn manager_config(cfg: &ModelConfig, dc: usize, instance: &str, epoch: u64) -> DcManagerConfig {
    let mut c = DcManagerConfig::new(LIMIT, &dc_name(dc), instance);
    c.epoch = epoch;
    c.pod_ttl_ms = cfg.pod_ttl_ms;
    c.renew_interval_ms = cfg.pod_renew_ms;
    c.heartbeat_timeout_ms = cfg.tick_ms * 3;
    c.expiry = expiry(cfg);
    c.min_pod_ttl_ms = cfg.tick_ms / 2;
    if let Some((rate, burst)) = cfg.emergency_milli {
        c.fail_mode = FailMode::BestEffort { emergency: Quota::new(rate, burst) };
    }
    c
}

/// Checks the cores' own validation of the configurations the model will build.
pub fn validate_core_configs(cfg: &ModelConfig) -> Result<(), String> {
    limit_config(cfg, cfg.dc_ttl_ms).validate()?;
    limit_config(cfg, cfg.changed_dc_ttl_ms).validate()?;
    manager_config(cfg, 0, "m", 1).validate()
}

// ---- pods ----

pub fn new_pod(cfg: &ModelConfig, dc: usize, pod: usize, incarnation: u32) -> PodCore {
    let _ = cfg;
    PodCore::new(PodConfig { limit: LIMIT.into(), dc: dc_name(dc), pod: pod_name(pod, incarnation), weight: 1.0 })
}

pub fn pod_report(core: &mut PodCore, shadow: &mut Shadow, now_ns: u64, offered: u64) -> PodReport {
    let counters = IntervalCounters { offered, admitted: offered, ..Default::default() };
    let r = core.report(now_ns, counters, true);
    shadow.record_send(r.seq, now_ns);
    r
}

/// True when the pod applied the lease.
pub fn pod_on_lease(core: &mut PodCore, lease: &PodLease, now_ns: u64) -> bool {
    core.on_lease(lease, now_ns).is_ok()
}

/// What the pod may spend at `now_ns` (its own clock): the ground truth.
pub fn pod_applied(core: &PodCore, now_ns: u64) -> Quota {
    core.applied(now_ns).map_or(Quota::ZERO, |a| a.quota)
}

/// Fingerprint material the pod exposes.
pub fn write_pod_view(core: &PodCore, w: &mut dyn Write) -> fmt::Result {
    write!(w, "{:?}/{}", core.applied(0), core.is_draining())
}

// ---- DC managers ----

pub fn new_manager(cfg: &ModelConfig, dc: usize, instance: &str, epoch: u64, now_ns: u64) -> DcManagerCore {
    DcManagerCore::new(manager_config(cfg, dc, instance, epoch), floor(cfg), now_ns)
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

/// A KV watch update: apply the newest DC lease addressed to this manager's term.
pub fn manager_on_record(
    core: &mut DcManagerCore,
    shadow: &mut Shadow,
    record: &LedgerRecord,
    now_ns: u64,
) -> Vec<DcOutput> {
    let instance = core.config().instance.clone();
    let Some(lease) = record.leases.iter().filter(|l| l.holder == instance).max_by_key(|l| l.version) else {
        return Vec::new();
    };
    let lease: DcLease = lease.clone();
    let mut accepted = false;
    let out = observed(core, shadow, now_ns, |c| match c.on_dc_lease(&lease, now_ns) {
        Ok(out) => {
            accepted = true;
            out
        }
        Err(_) => Vec::new(),
    });
    if accepted {
        let sent = shadow.sent.iter().find(|(s, _)| *s == lease.basis_seq).map_or(0, |(_, t)| *t);
        shadow.held.retain(|(_, exp)| *exp > now_ns);
        shadow.held.push((lease.version, sent + lease.ttl_ms * 1_000_000));
    }
    out
}

/// Fingerprint material the manager exposes.
pub fn write_manager_view(core: &DcManagerCore, now_ns: u64, w: &mut dyn Write) -> fmt::Result {
    write!(w, "{}/{:?}/{:?}/", core.config().instance, core.ledger(), core.budget(now_ns))?;
    core.pods().try_for_each(|(p, v)| write!(w, "{p}:{v:?};"))
}

// ---- coordinators ----

pub fn coordinator_resume(
    cfg: &ModelConfig,
    dc_ttl_ms: u64,
    id: &str,
    epoch: u64,
    record: Option<&LedgerRecord>,
    now_ns: u64,
) -> CoordinatorCore {
    let record = if cfg.mutation == Mutation::ResumeWithoutRecord { None } else { record };
    CoordinatorCore::resume(limit_config(cfg, dc_ttl_ms), id, epoch, record, now_ns)
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
    write!(w, "{}/{:?}/{:?}/{}", core.epoch(), core.ledger(), core.dcs(), core.config().dc_ttl_ms)
}
