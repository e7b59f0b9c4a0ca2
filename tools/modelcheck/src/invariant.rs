//! The ground truth, checked in every state: what live pods may spend right now, and that at most
//! one term of each role acts at once (as the simulator's `check_one_term_acts`).

use crate::config::ModelConfig;
use crate::leaders::Replica;
use crate::model;
use crate::state::State;
use leasehold_core::quota::Quota;
use serde::{Deserialize, Serialize};

/// Σ over pods of the lease each applies at this instant, on its own clock. Paused pods count:
/// they spend again the moment they wake.
pub fn spendable(cfg: &ModelConfig, s: &State) -> Quota {
    let real = s.real_ns(cfg.tick_ms);
    s.pods.iter().fold(Quota::ZERO, |sum, p| sum.saturating_add(model::pod_applied(&p.core, p.clock.local(real))))
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Violation {
    /// Σ spendable above R or B (plus Σ E in best-effort mode).
    OverLimit {
        spendable_rate_milli_per_s: u64,
        spendable_burst_milli: u64,
        allowed_rate_milli_per_s: u64,
        allowed_burst_milli: u64,
    },
    /// Two terms of one role believe they may act: `role` is "coordinator" or "dc<d> manager".
    TermsActAtOnce { role: String, epochs: Vec<u64> },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::OverLimit {
                spendable_rate_milli_per_s,
                spendable_burst_milli,
                allowed_rate_milli_per_s,
                allowed_burst_milli,
            } => write!(
                f,
                "pods may spend rate {spendable_rate_milli_per_s} burst {spendable_burst_milli} (milli) together, \
                 above the allowed rate {allowed_rate_milli_per_s} burst {allowed_burst_milli}"
            ),
            Violation::TermsActAtOnce { role, epochs } => {
                write!(f, "{} {role} terms act at once (epochs {epochs:?})", epochs.len())
            }
        }
    }
}

/// Σ spendable ≤ R and ≤ B (plus Σ E in best-effort mode), component-wise; one acting term per
/// role.
pub fn check(cfg: &ModelConfig, s: &State) -> Result<(), Violation> {
    check_one_term_acts(cfg, s)?;
    let total = spendable(cfg, s);
    // A limit lowered live holds from one DC-lease lifetime after the change; the old one until.
    let real = s.real_ns(cfg.tick_ms);
    let lowered = s.limit_lowered_at_ns.is_some_and(|at| real >= cfg.lowering_window_end_ns(at));
    let r = if lowered { cfg.lowered_rate_milli_per_s } else { cfg.rate_milli_per_s };
    let (rate, burst) = cfg.allowed_milli_at(r);
    if total.fits_in(&Quota::new(rate, burst)) {
        return Ok(());
    }
    Err(Violation::OverLimit {
        spendable_rate_milli_per_s: total.rate_milli_per_s,
        spendable_burst_milli: total.burst_milli,
        allowed_rate_milli_per_s: rate,
        allowed_burst_milli: burst,
    })
}

fn check_one_term_acts(cfg: &ModelConfig, s: &State) -> Result<(), Violation> {
    let acting_terms = |replicas: &mut dyn Iterator<Item = Replica>| -> Option<Vec<u64>> {
        let acting: Vec<Replica> = replicas.filter(|&who| s.acts(cfg, who)).collect();
        (acting.len() > 1).then(|| acting.iter().filter_map(|&who| s.elector(who).election.term()).collect())
    };
    if let Some(epochs) = acting_terms(&mut (0..s.coords.len()).map(Replica::Coordinator)) {
        return Err(Violation::TermsActAtOnce { role: "coordinator".into(), epochs });
    }
    for dc in 0..cfg.dcs {
        if let Some(epochs) = acting_terms(&mut (dc * 2..dc * 2 + 2).map(Replica::Manager)) {
            return Err(Violation::TermsActAtOnce { role: format!("dc{dc} manager"), epochs });
        }
    }
    Ok(())
}
