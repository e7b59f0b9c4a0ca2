//! Reading the `lh_ledger` bucket: limits' records kept in groups
//! ([`leasehold_core::wire::LedgerGroup`], key `group.<n>`), several limits per key.
//!
//! A record's revision is its group's: revisions are the bucket stream's sequence numbers, so
//! they grow across keys too and order any two values of one limit's record.

use crate::kv::{read, KvError};
use async_nats::jetstream::kv::Store;
use leasehold_core::subjects::{self, ledger_group_key, ledger_group_of, ledger_group_of_key};
use leasehold_core::wire::{check_id, decode, LedgerGroup, LedgerRecord};
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LedgerError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error("cannot list {bucket}: {0}", bucket = subjects::LEDGER_BUCKET)]
    List(#[source] KvError),
    #[error("ledger key {key} is unreadable: {source}")]
    Unreadable {
        key: String,
        #[source]
        source: leasehold_core::wire::WireError,
    },
    #[error("ledger key {key} is unreadable: it holds group {group}")]
    OtherGroup { key: String, group: u32 },
}

/// Everything in the bucket: each group with its revision, the records of a version that kept
/// one key per limit (keyed by the limit's name), and any other key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LedgerContents {
    pub groups: BTreeMap<u32, (u64, LedgerGroup)>,
    /// Per-limit records of an older version, by limit, with their revisions.
    pub legacy: BTreeMap<String, (u64, LedgerRecord)>,
    pub other_keys: Vec<String>,
}

impl LedgerContents {
    /// Every record with its group's revision, by limit.
    pub fn records(&self) -> BTreeMap<&str, (u64, &LedgerRecord)> {
        self.groups.values().flat_map(|(rev, g)| g.records.iter().map(move |r| (r.limit.as_str(), (*rev, r)))).collect()
    }
}

/// Decode a group read from `key`.
pub fn decode_group(key: &str, bytes: &[u8]) -> Result<LedgerGroup, LedgerError> {
    let group = decode::<LedgerGroup>(bytes).map_err(|source| LedgerError::Unreadable { key: key.into(), source })?;
    if ledger_group_of_key(key) != Some(group.group) {
        return Err(LedgerError::OtherGroup { key: key.into(), group: group.group });
    }
    Ok(group)
}

/// Group `group` and its revision, if written.
pub async fn read_group(store: &Store, group: u32) -> Result<Option<(u64, LedgerGroup)>, LedgerError> {
    let key = ledger_group_key(group);
    match read(store, &key).await? {
        None => Ok(None),
        Some((rev, bytes)) => Ok(Some((rev, decode_group(&key, &bytes)?))),
    }
}

/// `limit`'s group's revision (if the group is written) and `limit`'s record in it (if any).
pub async fn read_record(store: &Store, limit: &str) -> Result<(Option<u64>, Option<LedgerRecord>), LedgerError> {
    Ok(match read_group(store, ledger_group_of(limit)).await? {
        None => (None, None),
        Some((rev, group)) => (Some(rev), group.record(limit).cloned()),
    })
}

/// A key's revision and value.
type Entry = (u64, bytes::Bytes);

/// Reads [`read_all`] keeps in flight at once: a reader far from the ledger's stream leader
/// (a DC's manager reading the hub's ledger) spends a few round trips on 64 groups, not 64.
const READ_ALL_CONCURRENCY: usize = 16;

/// Every group in the bucket, and every per-limit record of an older version (an unreadable
/// one is an error: never act on a ledger read in part).
pub async fn read_all(store: &Store) -> Result<LedgerContents, LedgerError> {
    use futures::StreamExt;
    let keys = crate::kv::list_keys(store).await.map_err(LedgerError::List)?;
    let mut contents = LedgerContents::default();
    let (wanted, other): (Vec<String>, Vec<String>) =
        keys.into_iter().partition(|k| ledger_group_of_key(k).is_some() || check_id("limit", k).is_ok());
    contents.other_keys = other;
    let reads: Vec<(String, Result<Option<Entry>, KvError>)> = futures::stream::iter(wanted)
        .map(|key| async move {
            let got = read(store, &key).await;
            (key, got)
        })
        .buffered(READ_ALL_CONCURRENCY)
        .collect()
        .await;
    for (key, got) in reads {
        let Some((rev, bytes)) = got? else { continue };
        match ledger_group_of_key(&key) {
            Some(group) => {
                contents.groups.insert(group, (rev, decode_group(&key, &bytes)?));
            }
            None => {
                let rec = decode::<LedgerRecord>(&bytes)
                    .map_err(|source| LedgerError::Unreadable { key: key.clone(), source })?;
                contents.legacy.insert(key, (rev, rec));
            }
        }
    }
    Ok(contents)
}
