//! Shard state in JetStream: every admission is appended to the stream `LH_KEYS_ADM` on
//! `lh.keys.adm.<shard>`, in [`AdmissionBatch`]es (one or more messages per shard per flush). A new owner replays its
//! shard's subject before it answers, placing each admission by when the stream stored it, on its
//! own clock ([`StoreClock`]); the stream's `max_age` (the longest window kept) trims what can no
//! longer count. Denials change no state and are not written.
//!
//! Durability modes ([`Durability`]):
//! * `interval`: flushed every `persist_interval_ms`. If an owner crashes, what it admitted since
//!   its last acknowledged flush is lost, so a key may be over-admitted after the takeover by at
//!   most what it was admitted in the last `persist_interval_ms` plus one publish timeout
//!   (never more than its limit `N` per window). A graceful hand-over flushes first: no loss.
//! * `zero-loss`: an allowed answer is held until its admission is acknowledged by JetStream
//!   (group commit: one publish per shard for everything pending), and only given if the shard
//!   was served here without a break since the decision (not lost and taken again meanwhile).
//!   Nothing admitted is ever lost; it costs one JetStream round trip.

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use leasehold_core::subjects::{keys_admissions, keys_admissions_wildcard, KEYS_ADMISSIONS_STREAM as STREAM};
use leasehold_core::wire::{encode, SCHEMA_VERSION};
use leasehold_per_key::store_clock::StoreClock;
pub use leasehold_per_key::wire::Admission;
use leasehold_per_key::wire::AdmissionBatch;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Flush every so many milliseconds; a crash may lose that much.
    Interval { persist_interval_ms: u64 },
    /// Hold allowed answers until they are stored.
    ZeroLoss,
}

/// A `durability` setting that names no mode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("durability must be zero-loss or interval:<1..60000 ms>, got {0:?}")]
pub struct BadDurability(pub String);

impl std::str::FromStr for Durability {
    type Err = BadDurability;
    fn from_str(s: &str) -> Result<Self, BadDurability> {
        match s {
            "zero-loss" => Ok(Durability::ZeroLoss),
            other => match other.strip_prefix("interval:").and_then(|ms| ms.parse::<u64>().ok()) {
                Some(ms) if (1..=60_000).contains(&ms) => Ok(Durability::Interval { persist_interval_ms: ms }),
                _ => Err(BadDurability(s.to_string())),
            },
        }
    }
}

#[derive(Default)]
struct Pending {
    by_shard: BTreeMap<u32, Vec<Admission>>,
    waiters: Vec<oneshot::Sender<bool>>,
}

#[derive(Clone)]
pub struct Persister {
    js: jetstream::Context,
    durability: Durability,
    pending: Arc<Mutex<Pending>>,
    wake: Arc<Notify>,
}

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("cannot create stream {STREAM}: {0}")]
    Stream(String),
    #[error("cannot create stream {STREAM}: {0}")]
    Create(#[source] async_nats::jetstream::context::CreateStreamError),
    #[error("stream {STREAM} keeps admissions {kept_ms} ms, less than --retention-ms {retention_ms}, and cannot be raised: {reason}")]
    Retention { kept_ms: u128, retention_ms: u64, reason: String },
    #[error("cannot replay shard {shard}: {reason}")]
    Replay { shard: u32, reason: String },
}

/// An existing stream (made by an earlier deployment, or an instance with a shorter
/// `--retention-ms`) may keep less than the longest window needs: raise its `max_age`, never lower
/// it (another instance may need the longer one).
async fn keep_at_least(js: &jetstream::Context, wanted: stream::Config) -> Result<(), PersistError> {
    let err = |e: String| PersistError::Stream(e);
    let mut stream = js.get_stream(STREAM).await.map_err(|e| err(e.to_string()))?;
    let kept = stream.info().await.map_err(|e| err(e.to_string()))?.config.clone();
    // max_age 0 keeps everything.
    if kept.max_age.is_zero() || kept.max_age >= wanted.max_age {
        return Ok(());
    }
    let raised = stream::Config { max_age: wanted.max_age, ..kept.clone() };
    let retention_ms = wanted.max_age.as_millis() as u64;
    js.update_stream(raised).await.map_err(|e| PersistError::Retention {
        kept_ms: kept.max_age.as_millis(),
        retention_ms,
        reason: e.to_string(),
    })?;
    tracing::warn!(
        from_ms = kept.max_age.as_millis() as u64,
        to_ms = retention_ms,
        "raised {STREAM}'s max_age to --retention-ms"
    );
    Ok(())
}

impl Persister {
    /// Create the stream (keeping admissions for `retention_ms`) and start the flusher.
    pub async fn start(
        js: jetstream::Context,
        durability: Durability,
        retention_ms: u64,
        replicas: usize,
    ) -> Result<Self, PersistError> {
        let config = stream::Config {
            name: STREAM.into(),
            subjects: vec![keys_admissions_wildcard()],
            max_age: Duration::from_millis(retention_ms),
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        };
        leasehold_nats::kv::ensure_stream(&js, config.clone()).await.map_err(PersistError::Create)?;
        keep_at_least(&js, config).await?;
        let p = Persister { js, durability, pending: Arc::default(), wake: Arc::default() };
        tokio::spawn(p.clone().flush_loop());
        Ok(p)
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Queue an admission. In zero-loss mode the receiver says whether it was stored.
    pub fn record(&self, shard: u32, a: Admission) -> Option<oneshot::Receiver<bool>> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.by_shard.entry(shard).or_default().push(a);
        if self.durability != Durability::ZeroLoss {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        p.waiters.push(tx);
        drop(p);
        self.wake.notify_one();
        Some(rx)
    }

    /// Wait until everything queued so far is stored (before a shard is handed over).
    pub async fn flush(&self) -> bool {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).waiters.push(tx);
        self.wake.notify_one();
        rx.await.unwrap_or(false)
    }

    async fn flush_loop(self) {
        loop {
            match self.durability {
                Durability::ZeroLoss => self.wake.notified().await,
                Durability::Interval { persist_interval_ms } => {
                    let _ =
                        tokio::time::timeout(Duration::from_millis(persist_interval_ms), self.wake.notified()).await;
                }
            }
            let Pending { by_shard, waiters } =
                std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
            let stored = self.publish(&by_shard).await;
            if !stored {
                // Keep them for the next flush, ahead of anything newer (order matters for replay).
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                for (shard, mut batch) in by_shard {
                    let newer = p.by_shard.remove(&shard).unwrap_or_default();
                    batch.extend(newer);
                    p.by_shard.insert(shard, batch);
                }
                tracing::warn!("admissions not stored; retrying on the next flush");
            }
            waiters.into_iter().for_each(|w| {
                let _ = w.send(stored);
            });
        }
    }

    /// One message per shard, all in flight at once; true when every one is acknowledged.
    async fn publish(&self, by_shard: &BTreeMap<u32, Vec<Admission>>) -> bool {
        let mut acks = Vec::new();
        for (shard, admissions) in by_shard {
            for batch in AdmissionBatch::chunks(admissions) {
                match self.js.publish(keys_admissions(*shard), encode(&batch).into()).await {
                    Ok(ack) => acks.push(ack),
                    Err(_) => return false,
                }
            }
        }
        let all = futures::future::join_all(acks.into_iter().map(|a| tokio::time::timeout(Duration::from_secs(2), a)));
        all.await.into_iter().all(|r| matches!(r, Ok(Ok(_))))
    }

    /// Every admission stored for `shard`, oldest first, placed on this owner's clock by when
    /// the stream stored it ([`StoreClock`]), never by the clock of the owner that made it.
    /// `now_ms` reads this owner's clock (the one its table is judged by). A marker (an empty
    /// batch, nothing to every build) is appended first: its store time, and `now_ms` right after
    /// its acknowledgement, tie the stream's clock to ours; the replay ends at it. A shard with
    /// nothing stored is done at once, without a marker.
    pub async fn replay(
        &self,
        shard: u32,
        now_ms: impl Fn() -> u64,
        mut apply: impl FnMut(Admission),
    ) -> Result<usize, PersistError> {
        let err = |reason: String| PersistError::Replay { shard, reason };
        let subject = keys_admissions(shard);
        let stream = self.js.get_stream(STREAM).await.map_err(|e| err(e.to_string()))?;
        // Nothing ever stored for the shard: nothing to place (and no consumer to make).
        match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(_) => {}
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => return Ok(0),
            Err(e) => return Err(err(e.to_string())),
        }
        let marker = encode(&AdmissionBatch { v: SCHEMA_VERSION, admissions: Vec::new() });
        let ack = self.js.publish(subject.clone(), marker.into()).await.map_err(|e| err(e.to_string()))?;
        let marker_seq = ack.await.map_err(|e| err(format!("the marker was not stored: {e}")))?.sequence;
        let local_after_ms = now_ms();
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: subject.clone(),
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| err(e.to_string()))?;
        let mut messages = consumer.messages().await.map_err(|e| err(e.to_string()))?;
        let mut stored = Vec::new();
        let marker_stored_ns = loop {
            let next = tokio::time::timeout(Duration::from_secs(5), messages.next()).await;
            let msg = match next {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Err(err(e.to_string())),
                Ok(None) | Err(_) => return Err(err("the stream stopped before the marker".into())),
            };
            let info = msg.info().map_err(|e| err(e.to_string()))?;
            let (seq, stored_ns) = (info.stream_sequence, info.published.unix_timestamp_nanos());
            if seq == marker_seq {
                break stored_ns;
            }
            if seq > marker_seq {
                // Purged or trimmed meanwhile: a later message's time would place batches early.
                return Err(err("the marker is gone from the stream".into()));
            }
            match AdmissionBatch::parse(&msg.payload) {
                Ok(batch) if batch.admissions.is_empty() => {}
                Ok(batch) => stored.push((stored_ns, batch.admissions)),
                Err(e) => tracing::warn!(shard, seq, cause = %e, "skipping a malformed admission batch"),
            }
        };
        let clock = StoreClock::new(marker_stored_ns, local_after_ms);
        warn_of_clock_offset(shard, &clock, &stored);
        let mut applied = 0;
        for (stored_ns, admissions) in stored {
            let at_ms = clock.local_ms(stored_ns);
            for Admission(key, _, cost, tier) in admissions {
                apply(Admission(key, at_ms, cost, tier));
                applied += 1;
            }
        }
        Ok(applied)
    }
}

/// An apparent offset above this between the previous owner's clock and ours is logged as a warning.
const CLOCK_OFFSET_WARN_MS: i64 = 1_000;

/// How far ahead (negative: behind) the clock of the newest batch's writer appears to be: it no
/// longer decides when anything leaves a window, but a large one says the instances' clocks (or
/// NTP) need a look.
fn warn_of_clock_offset(shard: u32, clock: &StoreClock, stored: &[(i128, Vec<Admission>)]) {
    let newest = stored.last().and_then(|(ns, a)| a.iter().map(|a| a.1).max().map(|at_ms| (*ns, at_ms)));
    let Some((stored_ns, at_ms)) = newest else { return };
    let offset_ms = clock.apparent_offset_ms(at_ms, stored_ns);
    if offset_ms.abs() > CLOCK_OFFSET_WARN_MS {
        tracing::warn!(
            shard,
            offset_ms,
            "the previous owner's clock appears offset from ours (negative: behind); limits hold \
             (admissions are placed by the stream's timestamps), but check the instances' clocks"
        );
    } else {
        tracing::debug!(shard, offset_ms, "the previous owner's apparent clock offset");
    }
}
