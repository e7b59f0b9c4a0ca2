//! Breadth-first exploration with a visited set of fingerprints, so counterexamples are short.

use crate::actions::{apply_enabled, enabled, Action};
use crate::config::ModelConfig;
use crate::fingerprint::fingerprint;
use crate::invariant::{check, Violation};
use crate::state::State;
use crate::trace::Trace;
use crate::world::{initial_choices, initial_state, InitChoice};
use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Limits {
    /// Stop once this many distinct states were found.
    pub max_states: usize,
    /// Do not expand states at this many actions from an initial state.
    pub max_depth: u32,
    /// Print a progress line on stderr this often.
    pub progress_every: Option<Duration>,
    /// Keep at most this many whole states in the queue; beyond it a queued state is kept as
    /// (its parent, the action) and recomputed when expanded: memory for time.
    pub max_stored_states: usize,
}

impl Limits {
    /// About 3 KB per stored state: 300 000 stored states stay under 1 GB.
    pub const DEFAULT_MAX_STORED_STATES: usize = 300_000;
}

#[derive(Clone, Debug)]
pub struct Counterexample {
    pub trace: Trace,
    pub violation: Violation,
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub initial_states: usize,
    /// Distinct states found (each was checked).
    pub states: usize,
    pub transitions: u64,
    pub max_depth: u32,
    pub elapsed: Duration,
    /// Every reachable state within the depth bound was explored.
    pub exhausted: bool,
    pub counterexample: Option<Counterexample>,
}

/// The fingerprints are already uniform: use their low bits as the hash.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

enum Step {
    Init(InitChoice),
    Act { parent: u32, action: Action },
}

/// A queued state: whole, or as its parent and the action that leads to it.
enum Pending {
    Stored(State),
    Recompute(Arc<State>, Action),
}

impl Pending {
    fn into_state(self, cfg: &ModelConfig) -> State {
        match self {
            Pending::Stored(s) => s,
            Pending::Recompute(parent, action) => {
                let mut s = (*parent).clone();
                apply_enabled(cfg, &mut s, action);
                s
            }
        }
    }
}

struct Search<'a> {
    cfg: &'a ModelConfig,
    steps: Vec<Step>,
    visited: HashSet<u128, BuildHasherDefault<FingerprintHasher>>,
    queue: VecDeque<(u32, u32, Pending)>,
    stored: usize,
    max_stored: usize,
}

impl Search<'_> {
    fn trace_to(&self, mut node: u32) -> Trace {
        let mut actions = Vec::new();
        loop {
            match &self.steps[node as usize] {
                Step::Act { parent, action } => {
                    actions.push(*action);
                    node = *parent;
                }
                Step::Init(init) => {
                    actions.reverse();
                    return Trace { config: self.cfg.clone(), init: init.clone(), actions };
                }
            }
        }
    }

    /// Records a new state; returns its violation, if any. `lazy` is how to recompute it.
    fn admit(
        &mut self,
        step: Step,
        depth: u32,
        state: State,
        lazy: Option<(&Arc<State>, Action)>,
    ) -> Option<Counterexample> {
        self.steps.push(step);
        let node = (self.steps.len() - 1) as u32;
        if let Err(violation) = check(self.cfg, &state) {
            return Some(Counterexample { trace: self.trace_to(node), violation });
        }
        let pending = match lazy {
            Some((parent, action)) if self.stored >= self.max_stored => Pending::Recompute(parent.clone(), action),
            _ => {
                self.stored += 1;
                Pending::Stored(state)
            }
        };
        self.queue.push_back((node, depth, pending));
        None
    }
}

#[allow(clippy::disallowed_methods)] // the search's wall time and progress; the model has no clock
pub fn explore(cfg: &ModelConfig, limits: &Limits) -> Result<Outcome, String> {
    cfg.validate().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut last_progress = started;
    let mut search = Search {
        cfg,
        steps: Vec::new(),
        visited: HashSet::default(),
        queue: VecDeque::new(),
        stored: 0,
        max_stored: limits.max_stored_states,
    };
    let mut outcome = Outcome {
        initial_states: 0,
        states: 0,
        transitions: 0,
        max_depth: 0,
        elapsed: Duration::ZERO,
        exhausted: false,
        counterexample: None,
    };
    for init in initial_choices(cfg) {
        let state = initial_state(cfg, &init)?;
        if search.visited.insert(fingerprint(cfg, &state)) {
            outcome.initial_states += 1;
            if let Some(cx) = search.admit(Step::Init(init), 0, state, None) {
                outcome.counterexample = Some(cx);
            }
        }
    }
    let mut cut_by_depth = false;
    'search: while outcome.counterexample.is_none() {
        let Some((node, depth, pending)) = search.queue.pop_front() else {
            outcome.exhausted = !cut_by_depth;
            break;
        };
        if matches!(pending, Pending::Stored(_)) {
            search.stored -= 1;
        }
        let state = Arc::new(pending.into_state(cfg));
        outcome.max_depth = outcome.max_depth.max(depth);
        if depth >= limits.max_depth {
            cut_by_depth = true;
            continue;
        }
        for action in enabled(cfg, &state) {
            let mut next = (*state).clone();
            apply_enabled(cfg, &mut next, action);
            outcome.transitions += 1;
            if !search.visited.insert(fingerprint(cfg, &next)) {
                continue;
            }
            outcome.max_depth = outcome.max_depth.max(depth + 1);
            if let Some(cx) = search.admit(Step::Act { parent: node, action }, depth + 1, next, Some((&state, action)))
            {
                outcome.counterexample = Some(cx);
                break 'search;
            }
            if search.visited.len() >= limits.max_states {
                break 'search;
            }
        }
        if let Some(every) = limits.progress_every {
            if last_progress.elapsed() >= every {
                last_progress = Instant::now();
                let secs = started.elapsed().as_secs_f64();
                eprintln!(
                    "progress: {} states, depth {}, queue {}, {:.0} states/s, {:.0} s",
                    search.visited.len(),
                    depth,
                    search.queue.len(),
                    search.visited.len() as f64 / secs,
                    secs
                );
            }
        }
    }
    outcome.states = search.visited.len();
    outcome.elapsed = started.elapsed();
    Ok(outcome)
}
