//! Replayable traces: the configuration, the initial choice and the actions, as JSON.

use crate::actions::{apply, Action};
use crate::config::ModelConfig;
use crate::invariant::{check, spendable};
use crate::leaders::Replica;
use crate::model;
use crate::state::State;
use crate::world::{initial_state, InitChoice};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub config: ModelConfig,
    pub init: InitChoice,
    pub actions: Vec<Action>,
}

/// The key numbers of one state, one line.
pub fn describe(cfg: &ModelConfig, s: &State) -> String {
    let real = s.real_ns(cfg.tick_ms);
    let total = spendable(cfg, s);
    let pods: Vec<String> = s
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let q = model::pod_applied(&p.core, p.clock.local(real));
            format!("p{i}={}/{}", q.rate_milli_per_s, q.burst_milli)
        })
        .collect();
    let managers: Vec<String> = s
        .managers
        .iter()
        .filter_map(|m| {
            let core = m.core.as_ref()?;
            let (budget, _) = core.budget(m.clock.local(real));
            Some(format!("{}={}/{}", core.config().instance, budget.rate_milli_per_s, budget.burst_milli))
        })
        .collect();
    let leader = s.coordinator_leader().and_then(|c| Some((c, s.coords[c].core.as_ref()?.epoch())));
    let acting: Vec<String> = (0..s.coords.len())
        .map(Replica::Coordinator)
        .chain((0..s.managers.len()).map(Replica::Manager))
        .filter(|&who| s.acts(cfg, who))
        .map(|who| {
            let e = &s.elector(who).election;
            format!("{}@{}", e.id(), e.term().unwrap_or(0))
        })
        .collect();
    format!(
        "t={} ms | spendable {}/{} | {} | budgets {} | leader {:?} | acting {} | in flight {}",
        real / 1_000_000,
        total.rate_milli_per_s,
        total.burst_milli,
        pods.join(" "),
        managers.join(" "),
        leader,
        acting.join(" "),
        s.net.len()
    )
}

/// Re-run a trace step by step, printing each state's key numbers via `print`. Returns the
/// index of the first step whose state violates the invariant (0 = the initial state).
pub fn replay(trace: &Trace, mut print: impl FnMut(&str)) -> Result<Option<usize>, String> {
    let cfg = &trace.config;
    cfg.validate().map_err(|e| e.to_string())?;
    let mut s = initial_state(cfg, &trace.init)?;
    let mut first_violation = None;
    let mut report = |step: usize, what: &str, s: &State, first: &mut Option<usize>| {
        let verdict = match check(cfg, s) {
            Ok(()) => String::new(),
            Err(v) => {
                first.get_or_insert(step);
                format!("\n      VIOLATION: {v}")
            }
        };
        print(&format!("{step:>3} {what}\n      {}{verdict}", describe(cfg, s)));
    };
    report(0, "init", &s, &mut first_violation);
    for (i, &a) in trace.actions.iter().enumerate() {
        let what = match a {
            Action::Deliver(m) | Action::Delay(m) | Action::Drop(m) | Action::Duplicate(m) => {
                format!("{a:?}: {}", s.net.get(m).map_or("?".into(), |m| m.summary()))
            }
            _ => format!("{a:?}"),
        };
        apply(cfg, &mut s, a).map_err(|e| format!("step {}: {e}", i + 1))?;
        report(i + 1, &what, &s, &mut first_violation);
    }
    Ok(first_violation)
}
