//! JetStream KV with compare-and-set, on every server version we support.
//!
//! `create_key_value` in async-nats ≥ 0.41 fails against nats-server 2.9.10 (it parses account
//! fields 2.9 does not send). [`ensure_bucket`] creates the standard `KV_<bucket>` stream itself
//! and then opens it with `get_key_value`, which works everywhere.
//!
//! Revisions are stream sequence numbers: strictly increasing across the bucket and kept across
//! restarts with file storage, so a revision check fences a deposed writer. A timed-out write
//! **may still be applied later** (the client buffers it across a reconnect): it is reported as
//! [`CasOutcome::Unknown`], and the caller must re-read and check its own writer id.

use async_nats::jetstream::{self, kv, stream};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use std::time::Duration;
use thiserror::Error;

#[derive(Clone, Debug, PartialEq)]
pub struct BucketSpec {
    pub name: String,
    /// Values kept per key.
    pub history: i64,
    pub replicas: usize,
    /// Entries older than this vanish (zero: never). A leader key's bucket uses it as the TTL.
    pub max_age: Duration,
}

impl BucketSpec {
    pub fn new(name: &str) -> Self {
        BucketSpec { name: name.into(), history: 1, replicas: 1, max_age: Duration::ZERO }
    }
}

/// The cause of a [`KvError`]: the client's error of the call that failed.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Error)]
pub enum KvError {
    #[error("cannot create or open stream KV_{bucket}: {source}")]
    Stream {
        bucket: String,
        #[source]
        source: Cause,
    },
    #[error("cannot open KV bucket {bucket}: {source}")]
    Open {
        bucket: String,
        #[source]
        source: Cause,
    },
    #[error("cannot read key {key}: {source}")]
    Read {
        key: String,
        #[source]
        source: Cause,
    },
    #[error("write to key {key} failed: {source}")]
    Write {
        key: String,
        #[source]
        source: Cause,
    },
}

/// Create the bucket's stream if it does not exist, then open the bucket.
pub async fn ensure_bucket(js: &jetstream::Context, spec: &BucketSpec) -> Result<kv::Store, KvError> {
    let config = stream::Config {
        name: format!("KV_{}", spec.name),
        subjects: vec![format!("$KV.{}.>", spec.name)],
        max_messages_per_subject: spec.history,
        max_age: spec.max_age,
        num_replicas: spec.replicas,
        allow_rollup: true,
        deny_delete: true,
        // Reads answered by the stream leader only: a direct get may come from a lagging
        // replica, and a DC manager starting a term must not take a floor already given away.
        allow_direct: false,
        discard: stream::DiscardPolicy::New,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    with_retries(|| async {
        let stream_error = |source: Cause| KvError::Stream { bucket: spec.name.clone(), source };
        let stream = js.get_or_create_stream(config.clone()).await.map_err(|e| stream_error(e.into()))?;
        // A bucket created by an earlier version (or by hand) may allow direct gets: turn them off.
        if stream.cached_info().config.allow_direct {
            let mut updated = stream.cached_info().config.clone();
            updated.allow_direct = false;
            js.update_stream(updated)
                .await
                .map_err(|e| stream_error(format!("turning direct gets off: {e}").into()))?;
        }
        js.get_key_value(spec.name.clone())
            .await
            .map_err(|e| KvError::Open { bucket: spec.name.clone(), source: e.into() })
    })
    .await
}

/// Open a bucket someone else creates (the coordinator creates the ledger in its own cluster):
/// once, without creating it or retrying.
pub async fn open_bucket(js: &jetstream::Context, bucket: &str) -> Result<kv::Store, KvError> {
    js.get_key_value(bucket).await.map_err(|e| KvError::Open { bucket: bucket.into(), source: e.into() })
}

/// Create the stream if it does not exist (retried like [`ensure_bucket`]).
pub async fn ensure_stream(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<(), jetstream::context::CreateStreamError> {
    with_retries(|| async { js.get_or_create_stream(config.clone()).await.map(|_| ()) }).await
}

/// A server that just started (or a busy one) may time out or not have JetStream ready yet: try
/// a few times before giving up, so services started together come up together.
async fn with_retries<T, E, F, Fut>(attempt_once: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    attempt_once.retry(ENSURE_BACKOFF).await
}

/// Back-off of [`ensure_bucket`] and [`ensure_stream`]: 6 tries, 250 ms to 1.6 s apart (about 4 s
/// in all) before they report the error.
const ENSURE_BACKOFF: ExponentialBuilder =
    ExponentialBuilder::new().with_min_delay(Duration::from_millis(250)).with_factor(1.6).with_max_times(5);

/// What a compare-and-set did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// Written; the key is now at `revision`.
    Written { revision: u64 },
    /// Someone else wrote first (or, for a create, the key exists): nothing was written.
    Conflict,
    /// Timed out: it may or may not be applied, now or later. Re-read and check the writer id.
    Unknown,
}

/// The value and revision of `key`, if it has one.
pub async fn read(store: &kv::Store, key: &str) -> Result<Option<(u64, Bytes)>, KvError> {
    match store.entry(key).await {
        Ok(Some(e)) if e.operation == kv::Operation::Put => Ok(Some((e.revision, e.value))),
        Ok(_) => Ok(None),
        Err(e) => Err(KvError::Read { key: key.into(), source: e.into() }),
    }
}

/// Every key of `store` that holds a message, sorted (a deleted key too: [`read`] then finds no
/// value). One request, answered by the stream's leader (stream info with a subject filter),
/// not a consumer: the listing of `async-nats` (`Store::keys`) creates an ordered push consumer
/// before it subscribes to its deliveries, and through a gateway its first message came in
/// three times and the listing never ended (`leasehold inspect` against the other cluster).
pub async fn list_keys(store: &kv::Store) -> Result<Vec<String>, KvError> {
    use futures::TryStreamExt;
    let failed = |source: Cause| KvError::Read { key: format!("{} (listing keys)", store.name), source };
    let subjects = store.stream.info_with_subjects(format!("{}>", store.prefix)).await.map_err(|e| failed(e.into()))?;
    let mut keys: Vec<String> = subjects
        .map_ok(|(subject, _)| subject.strip_prefix(store.prefix.as_str()).map(str::to_string))
        .try_filter_map(|key| async move { Ok(key) })
        .try_collect()
        .await
        .map_err(|e| failed(e.into()))?;
    keys.sort();
    Ok(keys)
}

/// Write `value` to `key` only if the key is at `expected` (`None`: only if it does not exist).
pub async fn compare_and_set(
    store: &kv::Store,
    key: &str,
    value: Bytes,
    expected: Option<u64>,
) -> Result<CasOutcome, KvError> {
    match expected {
        None => match store.create(key, value).await {
            Ok(revision) => Ok(CasOutcome::Written { revision }),
            Err(e) => match e.kind() {
                kv::CreateErrorKind::AlreadyExists => Ok(CasOutcome::Conflict),
                kv::CreateErrorKind::Publish | kv::CreateErrorKind::Ack => Ok(CasOutcome::Unknown),
                _ => Err(KvError::Write { key: key.into(), source: e.into() }),
            },
        },
        Some(revision) => match store.update(key, value, revision).await {
            Ok(revision) => Ok(CasOutcome::Written { revision }),
            Err(e) => match e.kind() {
                kv::UpdateErrorKind::WrongLastRevision => Ok(CasOutcome::Conflict),
                kv::UpdateErrorKind::TimedOut => Ok(CasOutcome::Unknown),
                _ => Err(KvError::Write { key: key.into(), source: e.into() }),
            },
        },
    }
}

/// One key of a bucket changed: its newest value, or `None` when deleted or purged.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyChange {
    pub key: String,
    pub revision: u64,
    pub value: Option<Bytes>,
}

/// Follow every key of `store`: first each key's newest value, then every change, for as long
/// as the receiver lives. The watch is opened again whenever it ends or `client` connects again
/// ([`crate::watch`]); each re-opening delivers every key's newest value again, so a consumer
/// skips revisions it has seen.
pub fn follow(client: async_nats::Client, store: kv::Store) -> tokio::sync::mpsc::Receiver<KeyChange> {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(crate::watch::keep_watching(client, store, ">".into(), tx, |e| {
        let value = match e.operation {
            kv::Operation::Put => Some(e.value),
            kv::Operation::Delete | kv::Operation::Purge => None,
        };
        Some(KeyChange { key: e.key, revision: e.revision, value })
    }));
    rx
}
