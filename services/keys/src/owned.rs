//! The keys of the shards this instance owns: the pure `KeyTable` behind one lock, the ownership
//! gate checked under that lock (so no decision slips past a hand-over), and the admission log.
//!
//! Two clocks: key state uses milliseconds since the Unix epoch (it moves between instances
//! through the admission stream; kept non-decreasing here), the ownership gate uses this
//! process's monotonic clock (lease arithmetic must not jump).

use crate::persist::{Admission, Persister};
use leasehold_per_key::table::{TableError, Verdict};
use leasehold_per_key::wire::KeyCheck;
use leasehold_per_key::{shard_of, KeyError, KeyTable, LimitSpec};
use leasehold_process::clock::LeaseClock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OwnedError {
    #[error(transparent)]
    Input(#[from] KeyError),
    #[error("tracking {0} keys")]
    Full(usize),
    #[error("shard {0} is not served here")]
    NotOwner(u32),
    #[error("the admission was not stored")]
    NotStored,
}

impl From<TableError> for OwnedError {
    fn from(e: TableError) -> Self {
        match e {
            TableError::Input(k) => OwnedError::Input(k),
            TableError::Full(n) => OwnedError::Full(n),
        }
    }
}

struct Inner {
    table: Mutex<KeyTable>,
    shards: u32,
    clock: LeaseClock,
    /// Per shard: answer only while the monotonic clock (ms) is below this.
    serving_until_ms: Vec<AtomicU64>,
    /// Per shard: how many times it stopped being served (bumped under the table lock). A
    /// decision is given only if this has not moved since it was made.
    serving_term: Vec<AtomicU64>,
    persister: Option<Persister>,
    last_epoch_ms: AtomicU64,
}

#[derive(Clone)]
pub struct Owned {
    inner: Arc<Inner>,
}

/// A decision; in zero-loss mode an allowed one is only final once stored.
pub struct Pending {
    verdict: Verdict,
    stored: Option<oneshot::Receiver<bool>>,
    shard: u32,
    /// The shard's serving term when the decision was made.
    term: u64,
    owned: Owned,
}

impl Pending {
    /// Nothing to wait for (a denial, or not zero-loss).
    pub fn is_final(&self) -> bool {
        self.stored.is_none()
    }

    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    pub async fn wait(self) -> Result<Verdict, OwnedError> {
        if let Some(rx) = self.stored {
            if !rx.await.unwrap_or(false) {
                return Err(OwnedError::NotStored);
            }
            // Stored, but the shard may have been handed over (or lost and taken again) meanwhile:
            // then its owner's replay may not have seen it, so it is not given (it stays counted:
            // wasted, never exceeded).
            if !self.owned.is_serving(self.shard) || self.owned.serving_term(self.shard) != self.term {
                return Err(OwnedError::NotOwner(self.shard));
            }
        }
        Ok(self.verdict)
    }
}

impl Owned {
    pub fn new(
        shards: u32,
        max_keys: usize,
        persister: Option<Persister>,
        serving_from_start: bool,
        clock: LeaseClock,
    ) -> Self {
        let initial = if serving_from_start { u64::MAX } else { 0 };
        Owned {
            inner: Arc::new(Inner {
                table: Mutex::new(KeyTable::new(max_keys)),
                shards: shards.max(1),
                clock,
                serving_until_ms: (0..shards.max(1)).map(|_| AtomicU64::new(initial)).collect(),
                serving_term: (0..shards.max(1)).map(|_| AtomicU64::new(0)).collect(),
                persister,
                last_epoch_ms: AtomicU64::new(0),
            }),
        }
    }

    /// One instance that owns everything, keeps nothing on disk.
    pub fn standalone(max_keys: usize) -> Self {
        Self::new(64, max_keys, None, true, LeaseClock::start())
    }

    pub fn shards(&self) -> u32 {
        self.inner.shards
    }

    pub fn persister(&self) -> Option<&Persister> {
        self.inner.persister.as_ref()
    }

    pub fn mono_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    /// The service's one clock.
    pub fn clock(&self) -> LeaseClock {
        self.inner.clock
    }

    /// Milliseconds since the epoch on the service's clock ([`LeaseClock::wall_ms`]: read from
    /// the wall clock once, at start, then counted on; skewed as configured), never going
    /// backwards here.
    pub fn now_epoch_ms(&self) -> u64 {
        let wall = self.inner.clock.wall_ms();
        self.inner.last_epoch_ms.fetch_max(wall, Ordering::AcqRel).max(wall)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, KeyTable> {
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_serving(&self, shard: u32) -> bool {
        self.inner.serving_until_ms.get(shard as usize).is_some_and(|u| self.mono_ms() < u.load(Ordering::Acquire))
    }

    /// Decide here if this instance serves the key's shard (`None`: ask the owner).
    pub fn try_check(&self, shard: u32, req: &KeyCheck, spec: &LimitSpec) -> Result<Option<Pending>, OwnedError> {
        let mut table = self.table();
        if !self.is_serving(shard) {
            return Ok(None);
        }
        let at_ms = self.now_epoch_ms();
        let verdict = table.check(&req.key, spec, req.cost, at_ms)?;
        let stored = match (&self.inner.persister, verdict.allowed) {
            (Some(p), true) => p.record(shard, Admission(req.key.clone(), at_ms, req.cost, req.tier.clone())),
            _ => None,
        };
        Ok(Some(self.pending(shard, verdict, stored)))
    }

    /// A decision for `shard` made now (under the table lock), final once `stored` says so.
    fn pending(&self, shard: u32, verdict: Verdict, stored: Option<oneshot::Receiver<bool>>) -> Pending {
        Pending { verdict, stored, shard, term: self.serving_term(shard), owned: self.clone() }
    }

    fn serving_term(&self, shard: u32) -> u64 {
        self.inner.serving_term.get(shard as usize).map_or(0, |t| t.load(Ordering::Acquire))
    }

    /// (count, verdict) if this instance serves the key's shard.
    pub fn try_peek(&self, shard: u32, key: &str, spec: &LimitSpec) -> Result<Option<(u64, Verdict)>, OwnedError> {
        let mut table = self.table();
        if !self.is_serving(shard) {
            return Ok(None);
        }
        Ok(Some(table.peek(key, spec, self.now_epoch_ms())?))
    }

    /// Answer for `shard` until the monotonic clock reaches `until_ms` (0: stop now). Taken under
    /// the table lock, so a decision in progress finishes (and is queued for storage) first.
    pub fn serve_until(&self, shard: u32, until_ms: u64) {
        let _table = self.table();
        if let Some(u) = self.inner.serving_until_ms.get(shard as usize) {
            u.store(until_ms, Ordering::Release);
        }
        if until_ms == 0 {
            if let Some(t) = self.inner.serving_term.get(shard as usize) {
                t.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// Forget the keys of `shard` (given up or lost: the next owner has them).
    pub fn forget_shard(&self, shard: u32) {
        let shards = self.inner.shards;
        self.table().remove_where(|k| shard_of(k, shards) == shard);
    }

    /// Load `shard`'s admissions from the stream (before it is served), each already placed on
    /// this clock by when the stream stored it ([`Persister::replay`]).
    pub fn restore(
        &self,
        shard: u32,
        admissions: Vec<Admission>,
        resolve: impl Fn(&str, Option<&str>) -> Option<LimitSpec>,
    ) {
        let shards = self.inner.shards;
        let mut table = self.table();
        table.remove_where(|k| shard_of(k, shards) == shard);
        for Admission(key, at_ms, cost, tier) in admissions {
            if let Some(spec) = resolve(&key, tier.as_deref()) {
                table.replay(&key, &spec, at_ms, cost);
            }
        }
        drop(table);
        // Our clock must not be behind the restored entries: placed from our own reading after
        // the replay's marker, they are at most a few ms ahead of it (never another clock's time).
        if let Some(latest) = self.latest_restored() {
            self.inner.last_epoch_ms.fetch_max(latest, Ordering::AcqRel);
        }
    }

    fn latest_restored(&self) -> Option<u64> {
        self.table().states().filter_map(|(_, s)| leasehold_per_key::table::last_admission_ms(s)).max()
    }

    pub fn keys_tracked(&self) -> usize {
        self.table().len()
    }

    pub fn take_hot(&self, min_hits: u64) -> Vec<(String, u64)> {
        self.table().take_hot(min_hits, 20)
    }

    /// Forget idle keys (nothing in their window any more).
    pub fn sweep(&self, max_window_ms: u64) {
        let now = self.now_epoch_ms();
        self.table().sweep(now, max_window_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Verdict {
        Verdict { allowed: true, limit: 1, window_ms: 1_000, remaining: 0, reset_ms: 1_000, retry_after_ms: 0 }
    }

    /// Zero-loss gives an allowed answer only if the shard stayed ours from the decision until
    /// it was stored: a shard given up meanwhile (its keys dropped) and taken again (replayed
    /// from a stream the admission was not in yet) must not count as "still ours".
    #[tokio::test]
    async fn a_stored_admission_is_not_given_if_the_shard_was_lost_and_taken_again_meanwhile() {
        let owned = Owned::new(4, 100, None, true, LeaseClock::start());
        let (stored, stored_rx) = oneshot::channel();
        let pending = owned.pending(1, allowed(), Some(stored_rx));
        owned.serve_until(1, 0); // lost (a renewal refused): keys dropped
        owned.forget_shard(1);
        owned.serve_until(1, u64::MAX); // claimed again and replayed
        stored.send(true).unwrap();
        assert_eq!(pending.wait().await, Err(OwnedError::NotOwner(1)));

        // Served without a break: given once stored.
        let (stored, stored_rx) = oneshot::channel();
        let pending = owned.pending(2, allowed(), Some(stored_rx));
        owned.serve_until(2, u64::MAX - 1); // a renewal
        stored.send(true).unwrap();
        assert!(pending.wait().await.is_ok_and(|v| v.allowed));
    }
}
