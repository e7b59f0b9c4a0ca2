//! The `lh_limits` bucket: one [`LimitDef`] (JSON) per limit, keyed by the limit's name.
//!
//! Writes are compare-and-set on the revision the writer read, so a change made from a stale
//! read fails instead of undoing someone else's. An entry that does not read as a definition
//! (written by hand with the `nats` CLI) is reported, never skipped.

use crate::kv::{compare_and_set, ensure_bucket, read, BucketSpec, CasOutcome, KvError};
use async_nats::jetstream::{self, kv};
use leasehold_core::limits::{LimitDef, LimitDefError};
use leasehold_core::subjects::{limits_key, LIMITS_BUCKET};

/// Values kept per limit: the last few definitions, for `nats kv history lh_limits <limit>`.
pub const LIMITS_HISTORY: i64 = 10;

/// One key of the bucket as read.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredLimit {
    /// The key (the limit's name).
    pub key: String,
    pub revision: u64,
    /// The definition, or why the value is not one (including a name that differs from its key).
    pub def: Result<LimitDef, StoredDefError>,
}

/// Why a stored value is not a definition of its key's limit.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StoredDefError {
    #[error(transparent)]
    Definition(#[from] LimitDefError),
    #[error("the key {key} holds a definition of limit {limit}")]
    OtherLimit { key: String, limit: String },
}

/// What a removal did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoveOutcome {
    /// A delete marker is now the key's latest entry.
    Removed,
    /// The key was not at the expected revision: nothing was removed.
    Conflict,
    /// Timed out: it may or may not be applied. Re-read.
    Unknown,
}

/// Open the bucket, creating it (history [`LIMITS_HISTORY`], `replicas` copies) if needed.
pub async fn open(js: &jetstream::Context, replicas: usize) -> Result<kv::Store, KvError> {
    ensure_bucket(js, &BucketSpec { history: LIMITS_HISTORY, replicas, ..BucketSpec::new(LIMITS_BUCKET) }).await
}

fn key_of(name: &str) -> Result<String, KvError> {
    limits_key(name).map_err(|e| KvError::Read { key: name.into(), source: e.into() })
}

fn decode(key: &str, revision: u64, bytes: &[u8]) -> StoredLimit {
    let def = LimitDef::from_json(bytes).map_err(StoredDefError::from).and_then(|def| {
        if def.limit == key {
            Ok(def)
        } else {
            Err(StoredDefError::OtherLimit { key: key.into(), limit: def.limit })
        }
    });
    StoredLimit { key: key.into(), revision, def }
}

/// Every limit in the bucket, sorted by name.
pub async fn list(store: &kv::Store) -> Result<Vec<StoredLimit>, KvError> {
    let names = crate::kv::list_keys(store).await?;
    let mut limits = Vec::with_capacity(names.len());
    for key in names {
        // Removed between listing and reading: not there any more.
        if let Some((revision, bytes)) = read(store, &key).await? {
            limits.push(decode(&key, revision, &bytes));
        }
    }
    Ok(limits)
}

/// One limit, if it has a definition.
pub async fn get(store: &kv::Store, name: &str) -> Result<Option<StoredLimit>, KvError> {
    let key = key_of(name)?;
    Ok(read(store, &key).await?.map(|(revision, bytes)| decode(&key, revision, &bytes)))
}

/// Write `def` if its key is at `expected_revision` (`None`: only if it has no definition, as
/// after a removal). The caller validates first (`LimitDef::to_config`).
pub async fn put(store: &kv::Store, def: &LimitDef, expected_revision: Option<u64>) -> Result<CasOutcome, KvError> {
    let key = key_of(&def.limit)?;
    compare_and_set(store, &key, def.to_json().into(), expected_revision).await
}

/// Remove a limit's definition (a delete marker, kept in its history) if its key is at
/// `expected_revision` (`None`: whatever it holds).
pub async fn remove(store: &kv::Store, name: &str, expected_revision: Option<u64>) -> Result<RemoveOutcome, KvError> {
    let key = key_of(name)?;
    match store.delete_expect_revision(&key, expected_revision).await {
        Ok(()) => Ok(RemoveOutcome::Removed),
        Err(e) => match e.kind() {
            kv::DeleteErrorKind::WrongLastRevision => Ok(RemoveOutcome::Conflict),
            kv::DeleteErrorKind::TimedOut => Ok(RemoveOutcome::Unknown),
            _ => Err(KvError::Write { key, source: e.into() }),
        },
    }
}

/// What [`seed`] did with a file's limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Seeded {
    /// Created: the key never held a definition.
    pub created: Vec<String>,
    /// Left alone: the key was removed (`leasehold limits rm`); a file never brings it back.
    pub removed: Vec<String>,
}

/// Create each limit whose key never held a definition; never overwrite one, and never bring
/// back one that was removed (a file only seeds the bucket).
pub async fn seed(store: &kv::Store, defs: &[LimitDef]) -> Result<Seeded, KvError> {
    let mut seeded = Seeded::default();
    for def in defs {
        let key = key_of(&def.limit)?;
        match store.entry(&key).await {
            Ok(Some(e)) if e.operation != kv::Operation::Put => {
                seeded.removed.push(def.limit.clone());
                continue;
            }
            Ok(Some(_)) => continue,
            Ok(None) => {}
            Err(e) => return Err(KvError::Read { key, source: e.into() }),
        }
        match put(store, def, None).await? {
            CasOutcome::Written { .. } => seeded.created.push(def.limit.clone()),
            CasOutcome::Conflict => {}
            CasOutcome::Unknown => match read(store, &key).await? {
                // Ours if the key now holds exactly what we wrote; another's value stays.
                Some((_, value)) if value == def.to_json() => seeded.created.push(def.limit.clone()),
                Some(_) => {}
                None => {
                    let source = "timed out, and it may still be applied".into();
                    return Err(KvError::Write { key: def.limit.clone(), source });
                }
            },
        }
    }
    Ok(seeded)
}

/// One limit's definition changed (or was there when the watch began).
#[derive(Clone, Debug, PartialEq)]
pub struct LimitEvent {
    pub key: String,
    pub revision: u64,
    /// The definition (or why the value is not one); `None`: removed.
    pub def: Option<Result<LimitDef, StoredDefError>>,
}

impl From<StoredLimit> for LimitEvent {
    fn from(s: StoredLimit) -> Self {
        LimitEvent { key: s.key, revision: s.revision, def: Some(s.def) }
    }
}

/// Follow every limit's definition: first each key's newest value, then every change, for as
/// long as the receiver lives (see [`crate::kv::follow`]; a consumer skips revisions it has seen).
pub fn follow(client: async_nats::Client, store: kv::Store) -> tokio::sync::mpsc::Receiver<LimitEvent> {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    let mut changes = crate::kv::follow(client, store);
    tokio::spawn(async move {
        while let Some(c) = changes.recv().await {
            let def = c.value.map(|v| decode(&c.key, c.revision, &v).def);
            if tx.send(LimitEvent { key: c.key, revision: c.revision, def }).await.is_err() {
                return;
            }
        }
    });
    rx
}
