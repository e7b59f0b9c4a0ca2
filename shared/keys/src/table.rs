//! The keys one owner holds: decide, peek, evict idle keys, count hits for hot-key reports.
//! Memory is bounded by `max_keys` (a full table sheds new keys instead of forgetting live ones).

use super::gcra::Gcra;
use super::spec::{check_key, Algorithm, KeyError, LimitSpec};
use super::window_log::WindowLog;
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyState {
    Log(WindowLog),
    Gcra(Gcra),
}

#[derive(Clone, Debug)]
struct Entry {
    state: KeyState,
    hits: u64,
    /// The longest window this key was judged under: its admissions count that long.
    window_ms: u64,
}

impl Entry {
    fn new(spec: &LimitSpec) -> Self {
        Entry { state: fresh(spec), hits: 0, window_ms: spec.window_ms }
    }
}

/// The answer for one request (or a read: whether a request of cost 1 would be admitted now, and
/// when if not, with nothing recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub limit: u64,
    pub window_ms: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    pub retry_after_ms: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error(transparent)]
    Input(#[from] KeyError),
    #[error("this owner already tracks {0} keys; shedding new keys")]
    Full(usize),
}

pub struct KeyTable {
    keys: HashMap<String, Entry>,
    max_keys: usize,
}

impl KeyTable {
    pub fn new(max_keys: usize) -> Self {
        KeyTable { keys: HashMap::new(), max_keys }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Record a request of `cost` for `key` under `spec` at `now_ms`. Bad input changes nothing.
    pub fn check(&mut self, key: &str, spec: &LimitSpec, cost: u64, now_ms: u64) -> Result<Verdict, TableError> {
        check_key(key)?;
        spec.validate()?;
        if cost == 0 || cost > spec.max_cost() {
            return Err(KeyError::BadCost { got: cost, max: spec.max_cost() }.into());
        }
        if !self.keys.contains_key(key) && self.keys.len() >= self.max_keys {
            self.sweep(now_ms, spec.window_ms);
            if self.keys.len() >= self.max_keys {
                return Err(TableError::Full(self.max_keys));
            }
        }
        let e = self.keys.entry(key.to_string()).or_insert_with(|| Entry::new(spec));
        e.hits += 1;
        e.window_ms = e.window_ms.max(spec.window_ms);
        convert(&mut e.state, spec, now_ms);
        Ok(decide(&mut e.state, spec, cost, now_ms))
    }

    /// A key's current count and remaining, recording nothing.
    pub fn peek(&mut self, key: &str, spec: &LimitSpec, now_ms: u64) -> Result<(u64, Verdict), KeyError> {
        check_key(key)?;
        spec.validate()?;
        let (used, remaining, reset_ms) = match self.keys.get_mut(key).map(|e| &mut e.state) {
            Some(KeyState::Log(w)) => w.peek(spec.limit, spec.window_ms, now_ms),
            Some(KeyState::Gcra(g)) => g.peek(spec.limit, spec.window_ms, spec.burst, now_ms),
            None => (0, spec.limit, 0),
        };
        // Whether a request of cost 1 would be admitted now, and when if not: the decision itself,
        // made on a copy so nothing is recorded.
        let would = match self.keys.get(key) {
            Some(e) => {
                let mut copy = e.state.clone();
                convert(&mut copy, spec, now_ms);
                decide(&mut copy, spec, 1, now_ms)
            }
            None => decide(&mut fresh(spec), spec, 1, now_ms),
        };
        let v = Verdict {
            allowed: would.allowed,
            limit: spec.limit,
            window_ms: spec.window_ms,
            remaining,
            reset_ms,
            retry_after_ms: would.retry_after_ms,
        };
        Ok((used, v))
    }

    /// Forget keys whose state no longer restricts anything: nothing admitted within the longer
    /// of the key's own window and `window_ms` (the longest window the tiers name now, which may
    /// have grown since the key was last judged).
    pub fn sweep(&mut self, now_ms: u64, window_ms: u64) {
        self.keys.retain(|_, e| match &e.state {
            KeyState::Log(w) => w.last_ms().is_some_and(|t| t.saturating_add(e.window_ms.max(window_ms)) > now_ms),
            KeyState::Gcra(g) => g.tat_us > now_ms * 1_000,
        });
    }

    /// Keys with the most requests since the last call, at least `min_hits` (then reset).
    pub fn take_hot(&mut self, min_hits: u64, top: usize) -> Vec<(String, u64)> {
        let mut hot: Vec<(String, u64)> =
            self.keys.iter().filter(|(_, e)| e.hits >= min_hits).map(|(k, e)| (k.clone(), e.hits)).collect();
        hot.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        hot.truncate(top);
        self.keys.values_mut().for_each(|e| e.hits = 0);
        hot
    }

    pub fn state(&self, key: &str) -> Option<&KeyState> {
        self.keys.get(key).map(|e| &e.state)
    }

    /// Restore a persisted key (a new owner taking over a shard).
    pub fn restore(&mut self, key: String, state: KeyState, spec: &LimitSpec) {
        self.keys.insert(key, Entry { state, hits: 0, window_ms: spec.window_ms });
    }

    /// Re-apply an admission read back from the persistence stream (a new owner restoring a
    /// shard). It was admitted once, so it is counted whatever the limit says now; an entry older
    /// than the log's newest is recorded at the newest time (kept longer: never less strict).
    pub fn replay(&mut self, key: &str, spec: &LimitSpec, at_ms: u64, cost: u64) {
        let e = self.keys.entry(key.to_string()).or_insert_with(|| Entry::new(spec));
        e.window_ms = e.window_ms.max(spec.window_ms);
        convert(&mut e.state, spec, at_ms);
        match &mut e.state {
            KeyState::Log(w) => w.record(at_ms, cost),
            KeyState::Gcra(g) => {
                let t = super::gcra::interval_us(spec.limit, spec.window_ms);
                g.tat_us = g.tat_us.max(at_ms * 1_000) + cost * t;
            }
        }
    }

    /// Forget every key `belongs` says yes to (a shard given up or lost).
    pub fn remove_where(&mut self, belongs: impl Fn(&str) -> bool) {
        self.keys.retain(|k, _| !belongs(k));
    }

    pub fn states(&self) -> impl Iterator<Item = (&String, &KeyState)> {
        self.keys.iter().map(|(k, e)| (k, &e.state))
    }
}

/// The newest admission a sliding log holds (GCRA keeps no admission times).
pub fn last_admission_ms(state: &KeyState) -> Option<u64> {
    match state {
        KeyState::Log(w) => w.last_ms(),
        KeyState::Gcra(_) => None,
    }
}

/// Decide a request of `cost` against a key's state (recording it if admitted).
fn decide(state: &mut KeyState, spec: &LimitSpec, cost: u64, now_ms: u64) -> Verdict {
    let (allowed, remaining, reset_ms, retry_after_ms) = match state {
        KeyState::Log(w) => {
            let d = w.check(spec.limit, spec.window_ms, cost, now_ms);
            (d.allowed, d.remaining, d.reset_ms, d.retry_after_ms)
        }
        KeyState::Gcra(g) => {
            let d = g.check(spec.limit, spec.window_ms, spec.burst, cost, now_ms);
            (d.allowed, d.remaining, d.reset_ms, d.retry_after_ms)
        }
    };
    Verdict { allowed, limit: spec.limit, window_ms: spec.window_ms, remaining, reset_ms, retry_after_ms }
}

fn fresh(spec: &LimitSpec) -> KeyState {
    match spec.algorithm {
        Algorithm::SlidingLog => KeyState::Log(WindowLog::default()),
        Algorithm::Gcra => KeyState::Gcra(Gcra::default()),
    }
}

/// A key whose algorithm changed keeps what it already used (never a fresh start): a log's
/// count becomes GCRA debt; GCRA debt becomes log entries at `now` (they expire a window later).
fn convert(state: &mut KeyState, spec: &LimitSpec, now_ms: u64) {
    match (&*state, spec.algorithm) {
        (KeyState::Log(w), Algorithm::Gcra) => {
            let used = w.len() as u64;
            let t = super::gcra::interval_us(spec.limit, spec.window_ms);
            *state = KeyState::Gcra(Gcra { tat_us: now_ms * 1_000 + used * t });
        }
        (KeyState::Gcra(g), Algorithm::SlidingLog) => {
            let (used, _, _) = g.peek(spec.limit, spec.window_ms, spec.burst, now_ms);
            *state = KeyState::Log(WindowLog::from_entries(vec![now_ms; used as usize]));
        }
        _ => {}
    }
}
