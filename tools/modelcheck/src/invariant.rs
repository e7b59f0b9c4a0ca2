//! The ground truth, checked in every state: what live pods may spend right now.

use crate::config::ModelConfig;
use crate::model;
use crate::state::State;
use leasehold_shared::quota::Quota;
use serde::{Deserialize, Serialize};

/// Σ over pods of the lease each applies at this instant, on its own clock. Paused pods count:
/// they spend again the moment they wake.
pub fn spendable(cfg: &ModelConfig, s: &State) -> Quota {
    let real = s.real_ns(cfg.tick_ms);
    s.pods.iter().fold(Quota::ZERO, |sum, p| sum.saturating_add(model::pod_applied(&p.core, p.clock.local(real))))
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub spendable_rate_milli_per_s: u64,
    pub spendable_burst_milli: u64,
    pub allowed_rate_milli_per_s: u64,
    pub allowed_burst_milli: u64,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pods may spend rate {} burst {} (milli) together, above the allowed rate {} burst {}",
            self.spendable_rate_milli_per_s,
            self.spendable_burst_milli,
            self.allowed_rate_milli_per_s,
            self.allowed_burst_milli
        )
    }
}

/// Σ spendable ≤ R and ≤ B (plus Σ E in best-effort mode), component-wise.
pub fn check(cfg: &ModelConfig, s: &State) -> Result<(), Violation> {
    let total = spendable(cfg, s);
    let (rate, burst) = cfg.allowed_milli();
    if total.fits_in(&Quota::new(rate, burst)) {
        return Ok(());
    }
    Err(Violation {
        spendable_rate_milli_per_s: total.rate_milli_per_s,
        spendable_burst_milli: total.burst_milli,
        allowed_rate_milli_per_s: rate,
        allowed_burst_milli: burst,
    })
}
