//! Shard ownership on NATS: the async driver around [`ShardBook`].
//!
//! * bucket `lh_keys_shards`: `shard.<n>` = `{"owner": "<instance>"|null, "ttl_ms": <its TTL>}`,
//!   written only by compare-and-set; `member.<instance>` = `{"http": "<addr>", "ttl_ms": ..}`,
//!   rewritten every TTL/4. Each record carries its writer's `shard_ttl_ms`, so instances started
//!   with different ones still never answer for a shard together (see [`ShardBook`]).
//! * A claimed shard is replayed from the admission stream, then served: this instance
//!   subscribes to `lh.keys.check.<n>` and answers while its lease is fresh.
//! * Leaving (SIGTERM) hands every shard over: stop answering, flush, release.

use crate::limiter::KeyLimiter;
use crate::owned::Owned;
use crate::persist::{Admission, PersistError};
use async_nats::jetstream::kv::{Operation, Store};
use futures::StreamExt;
use leasehold_core::subjects::{
    keys_check, keys_member_key, keys_member_of_key, keys_shard_key, keys_shard_of_key, KEYS_SHARDS_BUCKET,
};
use leasehold_core::wire::{encode, MAX_MESSAGE_BYTES, SCHEMA_VERSION};
use leasehold_nats::kv::{compare_and_set, ensure_bucket, BucketSpec, CasOutcome, KvError};
use leasehold_per_key::shards::{shard_of_action, Action, ShardBook};
use leasehold_per_key::wire::{decode_keys_message, MemberRecord, ShardRecord};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub instance_id: String,
    pub shard_ttl_ms: u64,
    pub replicas: usize,
    /// Announced in the member record (where this instance's HTTP API listens).
    pub http: String,
}

/// `keys-<8 hex>`.
pub fn random_instance_id() -> String {
    format!("keys-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

enum Event {
    Entry { key: String, revision: u64, value: Option<bytes::Bytes> },
    Restored { shard: u32, generation: u64, result: Result<Vec<Admission>, PersistError> },
}

struct Driver {
    client: async_nats::Client,
    kv: Store,
    owned: Owned,
    limiter: KeyLimiter,
    book: ShardBook,
    options: ClusterOptions,
    events: mpsc::Sender<Event>,
    /// Per served shard, the signal that stops its answering task.
    serving: HashMap<u32, tokio::sync::oneshot::Sender<()>>,
    generation: HashMap<u32, u64>,
    last_member_write_ms: Option<u64>,
    /// Each member's HTTP address, from its member record.
    member_http: HashMap<String, String>,
}

/// Run until `stop` turns true, then hand every shard over.
pub async fn run(
    client: async_nats::Client,
    owned: Owned,
    limiter: KeyLimiter,
    options: ClusterOptions,
    mut stop: watch::Receiver<bool>,
) -> Result<(), KvError> {
    let js = leasehold_nats::connect::jetstream(client.clone());
    let spec = BucketSpec { replicas: options.replicas, ..BucketSpec::new(KEYS_SHARDS_BUCKET) };
    let kv = ensure_bucket(&js, &spec).await?;
    tracing::info!(instance = %options.instance_id, "joining the cluster");
    let (tx, mut rx) = mpsc::channel(4_096);
    tokio::spawn(watch_bucket(kv.clone(), tx.clone()));
    let book = ShardBook::new(&options.instance_id, owned.shards(), options.shard_ttl_ms);
    let mut d = Driver {
        client,
        kv,
        owned,
        limiter,
        book,
        options,
        events: tx,
        serving: HashMap::new(),
        generation: HashMap::new(),
        last_member_write_ms: None,
        member_http: HashMap::new(),
    };
    let mut tick = tokio::time::interval(Duration::from_millis((d.options.shard_ttl_ms / 16).max(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            Some(ev) = rx.recv() => {
                // Everything queued is read before anything is written: a watch backlog (a busy
                // machine, many renewals) must not hold back a replay's result or a release.
                let mut released = d.handle(ev).await;
                while let Ok(ev) = rx.try_recv() {
                    released |= d.handle(ev).await;
                }
                // A released shard is claimed at once, not at the next tick: callers wait meanwhile.
                if released {
                    d.pass().await;
                }
                d.publish_routes();
            }
            _ = tick.tick() => {
                while let Ok(ev) = rx.try_recv() {
                    d.handle(ev).await;
                }
                d.pass().await;
                d.publish_routes();
            }
            _ = stop.changed() => break,
        }
    }
    d.leave().await;
    Ok(())
}

/// Flushes tried before leaving without releasing (the shards then move by expiry, and what was
/// not stored is lost as in a crash).
const LEAVE_FLUSH_TRIES: usize = 3;

/// Every change of the bucket, from the current values on; re-opened if it ends.
async fn watch_bucket(kv: Store, tx: mpsc::Sender<Event>) {
    loop {
        if let Ok(mut w) = kv.watch_with_history(">").await {
            while let Some(Ok(e)) = w.next().await {
                let value = (e.operation == Operation::Put).then_some(e.value);
                if tx.send(Event::Entry { key: e.key, revision: e.revision, value }).await.is_err() {
                    return;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

impl Driver {
    /// Apply one event; true when it showed a shard released (written with no owner).
    async fn handle(&mut self, ev: Event) -> bool {
        let now = self.owned.mono_ms();
        match ev {
            Event::Entry { key, revision, value } => {
                if let Some(shard) = keys_shard_of_key(&key) {
                    let record = value.as_ref().map(|v| decode_keys_message::<ShardRecord>(v, MAX_MESSAGE_BYTES));
                    let lost = match &record {
                        None => self.book.observe_shard(shard, revision, None, now),
                        Some(Ok(r)) => self.book.observe_shard(shard, revision, Some(r), now),
                        Some(Err(e)) => {
                            tracing::warn!(shard, cause = %e, "unreadable shard record; counted as owned");
                            self.book.observe_unreadable_shard(shard, revision, now)
                        }
                    };
                    if lost {
                        tracing::warn!(shard, "shard taken over by another instance");
                        self.stop_serving(shard, true);
                    }
                    // Written with no owner: a hand-over.
                    return matches!(record, Some(Ok(r)) if r.owner.is_none());
                }
                if let Some(id) = keys_member_of_key(&key) {
                    match value {
                        Some(v) => match decode_keys_message::<MemberRecord>(&v, MAX_MESSAGE_BYTES) {
                            Ok(m) => {
                                self.book.observe_member(id, m.ttl_ms, now);
                                self.member_http.insert(id.to_string(), m.http);
                            }
                            Err(_) => self.book.observe_member(id, None, now),
                        },
                        None => {
                            self.book.forget_member(id);
                            self.member_http.remove(id);
                        }
                    }
                }
                false
            }
            Event::Restored { shard, generation, result } => {
                if self.generation.get(&shard) != Some(&generation) || !self.book.held().contains(&shard) {
                    return false;
                }
                match result {
                    Ok(admissions) => {
                        let n = admissions.len();
                        let limiter = self.limiter.clone();
                        self.owned.restore(shard, admissions, |k, t| limiter.resolve(k, t).ok().map(|(_, s)| s));
                        self.book.restored(shard);
                        self.start_serving(shard).await;
                        tracing::info!(shard, admissions = n, "shard restored and served");
                    }
                    Err(e) => {
                        tracing::warn!(shard, cause = %e, "cannot restore shard; retrying");
                        self.restore(shard);
                    }
                }
                false
            }
        }
    }

    /// The owners' HTTP addresses as the watch shows them, for `GET /v1/shards`.
    fn publish_routes(&self) {
        let owners = (0..self.owned.shards())
            .map(|s| self.book.owner(s).and_then(|o| self.member_http.get(o).cloned()))
            .collect();
        self.limiter.routes().set(owners);
    }

    /// Heartbeat, renew, rebalance; keep the answer gates in step with the book.
    async fn pass(&mut self) {
        let now = self.owned.mono_ms();
        if self.last_member_write_ms.is_none_or(|at| now >= at + self.options.shard_ttl_ms / 4) {
            let member = MemberRecord {
                v: SCHEMA_VERSION,
                http: self.options.http.clone(),
                ttl_ms: Some(self.options.shard_ttl_ms),
            };
            let body = encode(&member);
            let key = keys_member_key(&self.options.instance_id);
            if self.kv.put(key, body.into()).await.is_ok() {
                self.last_member_write_ms = Some(now);
            }
        }
        self.book.expire_in_flight(now);
        let (renewals, others): (Vec<Action>, Vec<Action>) =
            self.book.plan(now).into_iter().partition(|a| matches!(a, Action::Renew { .. }));
        self.renew_all(renewals).await;
        for action in others {
            self.execute(action).await;
        }
        for shard in self.book.held() {
            self.owned.serve_until(shard, self.book.serving_until_ms(shard));
        }
    }

    /// Send every renewal at once (one round trip for all the shards held, not one each).
    async fn renew_all(&mut self, renewals: Vec<Action>) {
        let sent_at = self.owned.mono_ms();
        let writes = renewals.into_iter().filter_map(|action| {
            let Action::Renew { shard, expected } = action else { return None };
            let (kv, body) = (self.kv.clone(), encode(&self.book.record_for(&action)));
            Some(async move {
                let outcome = compare_and_set(&kv, &keys_shard_key(shard), body.into(), Some(expected)).await;
                (action, outcome)
            })
        });
        for (action, outcome) in futures::future::join_all(writes).await {
            match outcome {
                Ok(CasOutcome::Written { revision }) => self.book.written(&action, revision, sent_at),
                outcome => {
                    let shard = shard_of_action(&action);
                    tracing::warn!(shard, ?outcome, "lease renewal failed; no longer serving the shard");
                    self.book.failed(&action);
                    self.stop_serving(shard, true);
                }
            }
        }
    }

    async fn execute(&mut self, action: Action) {
        let body = encode(&self.book.record_for(&action));
        let sent_at = self.owned.mono_ms();
        let (shard, expected) = match action {
            Action::Claim { shard, expected } => (shard, expected),
            Action::Renew { .. } => return self.renew_all(vec![action]).await,
            Action::Release { shard, expected } => {
                tracing::info!(shard, "giving the shard back (rebalancing)");
                // Stop answering first, then make sure everything admitted is stored.
                self.stop_serving(shard, false);
                if let Some(p) = self.owned.persister() {
                    if !p.flush().await {
                        tracing::warn!(shard, "cannot store admissions before the hand-over; keeping the shard");
                        self.book.failed(&action);
                        self.owned.forget_shard(shard);
                        return;
                    }
                }
                (shard, Some(expected))
            }
        };
        let key = keys_shard_key(shard);
        match compare_and_set(&self.kv, &key, body.into(), expected).await {
            Ok(CasOutcome::Written { revision }) => {
                self.book.written(&action, revision, sent_at);
                match action {
                    Action::Claim { .. } => self.restore(shard),
                    Action::Release { .. } => self.owned.forget_shard(shard),
                    Action::Renew { .. } => {} // sent by renew_all
                }
            }
            _ => {
                self.book.failed(&action);
                self.stop_serving(shard, true);
            }
        }
    }

    /// Replay the shard's admissions in the background; [`Event::Restored`] comes back.
    fn restore(&mut self, shard: u32) {
        let generation = self.generation.get(&shard).copied().unwrap_or(0) + 1;
        self.generation.insert(shard, generation);
        let (owned, tx) = (self.owned.clone(), self.events.clone());
        tokio::spawn(async move {
            let mut admissions = Vec::new();
            let result = match owned.persister() {
                Some(p) => p.replay(shard, || owned.now_epoch_ms(), |a| admissions.push(a)).await.map(|_| admissions),
                None => Ok(admissions),
            };
            let _ = tx.send(Event::Restored { shard, generation, result }).await;
        });
    }

    async fn start_serving(&mut self, shard: u32) {
        match self.client.subscribe(keys_check(shard)).await {
            Ok(sub) => {
                let (c, o, l) = (self.client.clone(), self.owned.clone(), self.limiter.clone());
                let (stop, stopped) = tokio::sync::oneshot::channel();
                tokio::spawn(crate::nats::serve_shard(c, sub, shard, o, l, stopped));
                if let Some(old) = self.serving.insert(shard, stop) {
                    let _ = old.send(());
                }
                self.owned.serve_until(shard, self.book.serving_until_ms(shard));
            }
            Err(e) => tracing::warn!(shard, cause = %e, "cannot subscribe; the shard is not served"),
        }
    }

    /// Stop answering for `shard`; `forget` drops its keys at once (lost: the owner is elsewhere).
    fn stop_serving(&mut self, shard: u32, forget: bool) {
        self.owned.serve_until(shard, 0);
        // The task unsubscribes and answers what is already buffered with 503 (the gate is
        // closed), so forwarders ask the new owner at once instead of waiting out a timeout.
        if let Some(stop) = self.serving.remove(&shard) {
            let _ = stop.send(());
        }
        if forget {
            self.owned.forget_shard(shard);
        }
    }

    /// Graceful exit: leave the member list first (so the others' fair share takes in every shard
    /// at once), stop answering, store everything admitted, then release every shard; each one is
    /// claimed as soon as its release is seen. Requests meanwhile wait for the new owner (see
    /// `limiter::forward`).
    async fn leave(&mut self) {
        // Renewed first: the others may claim by expiry only a claim period from now, so the
        // flush below has that long to store what was admitted.
        let renewals = self
            .book
            .held()
            .into_iter()
            .filter_map(|shard| Some(Action::Renew { shard, expected: self.book.held_revision(shard)? }))
            .collect();
        self.renew_all(renewals).await;
        let _ = self.kv.delete(keys_member_key(&self.options.instance_id)).await;
        for shard in self.book.held() {
            self.stop_serving(shard, false);
        }
        let mut flushed = self.owned.persister().is_none();
        for _ in 0..LEAVE_FLUSH_TRIES {
            if flushed {
                break;
            }
            flushed = match self.owned.persister() {
                Some(p) => p.flush().await,
                None => true,
            };
        }
        if flushed {
            let body = encode(&self.book.record_for(&Action::Release { shard: 0, expected: 0 }));
            let releases =
                self.book.held().into_iter().filter_map(|shard| {
                    let expected = self.book.held_revision(shard)?;
                    let (kv, body) = (self.kv.clone(), body.clone());
                    Some(async move {
                        (shard, compare_and_set(&kv, &keys_shard_key(shard), body.into(), Some(expected)).await)
                    })
                });
            for (shard, outcome) in futures::future::join_all(releases).await {
                if let Ok(CasOutcome::Written { revision }) = outcome {
                    self.book.written(&Action::Release { shard, expected: 0 }, revision, 0);
                }
            }
        }
        tracing::info!(released = flushed, "left the cluster");
    }
}
