//! Named configurations: the bounded CI run, the deep run, and the negative controls.

use crate::config::{FaultBudget, ModelConfig, Mutation};

pub const NAMES: &[&str] =
    &["ci", "deep", "best-effort", "older-lease-fallback", "resume-without-record", "drift-beyond-bound"];

pub fn by_name(name: &str) -> Option<ModelConfig> {
    Some(match name {
        "ci" => ci(),
        "deep" => deep(),
        "best-effort" => best_effort(),
        "older-lease-fallback" => older_lease_fallback(),
        "resume-without-record" => mutation_control(Mutation::ResumeWithoutRecord),
        "drift-beyond-bound" => mutation_control(Mutation::DriftBeyondBound),
        _ => return None,
    })
}

/// 2 DCs × 2 pods, every kind of fault but the configuration change (today's cores are
/// expected to be safe here).
pub fn ci() -> ModelConfig {
    ModelConfig::default()
}

/// Longer runs, more drift choices, pauses too.
pub fn deep() -> ModelConfig {
    ModelConfig {
        drift_ppm_choices: vec![-5_000, 0, 5_000],
        horizon_ticks: 16,
        faults: FaultBudget { total: 2, pod_pauses: 1, coordinator_pauses: 1, config_changes: 0, ..ci().faults },
        ..ci()
    }
}

/// Best-effort mode: each DC may use an emergency allowance E after its DC lease expires.
pub fn best_effort() -> ModelConfig {
    ModelConfig { emergency_milli: Some((5_000, 1_000)), ..ci() }
}

/// The coordinator restarts with a shorter DC lease TTL (10 s → 6 s) while one DC still holds
/// an older, larger lease, then the new leader crashes (audit hole 1). One coordinator process
/// (no standby), one pod per DC, so the short counterexample is found in seconds.
pub fn older_lease_fallback() -> ModelConfig {
    ModelConfig {
        pods_per_dc: 1,
        coordinators: 1,
        offered_per_report: vec![10, 10],
        tick_ms: 1_000,
        coordinator_every_ticks: 1,
        pod_ttl_ms: 3_000,
        pod_renew_ms: 1_000,
        dc_ttl_ms: 10_000,
        changed_dc_ttl_ms: 6_000,
        report_timeout_ms: 1_500,
        leader_ttl_ticks: 3,
        drift_ppm_choices: vec![0],
        horizon_ticks: 14,
        max_carry_over: 3,
        faults: FaultBudget { total: 2, coordinator_crashes: 1, config_changes: 1, ..FaultBudget::default() },
        ..ModelConfig::default()
    }
}

/// A negative control: `mutation` switched on, and only the faults it needs to show.
pub fn mutation_control(mutation: Mutation) -> ModelConfig {
    let faults = match mutation {
        Mutation::ResumeWithoutRecord => FaultBudget { total: 1, coordinator_crashes: 1, ..FaultBudget::default() },
        Mutation::None | Mutation::DriftBeyondBound => {
            FaultBudget { total: 1, pod_crashes: 1, ..FaultBudget::default() }
        }
    };
    ModelConfig { mutation, faults, drift_ppm_choices: vec![0], ..ci() }
}
