//! The DC manager's way to the ledger: the `lh_ledger` bucket in the coordinators' JetStream
//! domain (the hub's, through the DC's leaf-node link) or in the server's own. A DC manager
//! never creates it (the coordinator does, in its own cluster): it opens the bucket once it
//! exists, watches it, and reads it directly in a task of its own ([`direct_reads`]) so that a
//! slow or cut link to the hub never stalls the DC's own work (leadership, pod leases).

use async_nats::jetstream::kv::{Entry, Operation, Store};
use async_nats::jetstream::{self};
use leasehold_core::subjects;
use leasehold_nats::kv::{open_bucket, KvError};
use leasehold_nats::ledger::LedgerContents;
use leasehold_nats::watch::{watch_once, REOPEN_EVERY};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, OnceCell};
use tracing::{info, warn};

/// How long a direct read of every group may take (its own task: the manager's loop never
/// waits for it). Enough for 64 groups over a link of a few hundred ms round trip.
pub const DIRECT_READ_TIMEOUT: Duration = Duration::from_secs(5);

pub struct LedgerLink {
    js: jetstream::Context,
    store: OnceCell<Store>,
}

impl LedgerLink {
    pub fn new(js: jetstream::Context) -> Arc<Self> {
        Arc::new(LedgerLink { js, store: OnceCell::new() })
    }

    /// The bucket, opened now if it was not yet.
    async fn store(&self) -> Result<&Store, KvError> {
        self.store.get_or_try_init(|| open_bucket(&self.js, subjects::LEDGER_BUCKET)).await
    }

    /// Every group as the bucket holds it now, within [`DIRECT_READ_TIMEOUT`].
    async fn read_all(&self) -> Result<LedgerContents, DirectReadError> {
        let read = async {
            let store = self.store().await?;
            Ok(leasehold_nats::ledger::read_all(store).await?)
        };
        match tokio::time::timeout(DIRECT_READ_TIMEOUT, read).await {
            Ok(r) => r,
            Err(_) => Err(DirectReadError::Timeout(DIRECT_READ_TIMEOUT)),
        }
    }
}

/// Why a direct read of every group failed.
#[derive(Debug, thiserror::Error)]
pub enum DirectReadError {
    #[error(transparent)]
    Open(#[from] KvError),
    #[error(transparent)]
    Read(#[from] leasehold_nats::ledger::LedgerError),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A direct read of every group, asked for by a term (its epoch) and answered with that epoch.
pub type DirectRead = (u64, Result<LedgerContents, DirectReadError>);

/// A task that reads every group when asked (a term's epoch on the returned sender) and answers
/// on the returned receiver, so that a slow or cut link to the hub never holds up the manager's
/// loop (its leadership, its pods' leases).
pub fn direct_reads(ledger: Arc<LedgerLink>) -> (mpsc::Sender<u64>, mpsc::Receiver<DirectRead>) {
    let (ask_tx, mut ask_rx) = mpsc::channel::<u64>(4);
    let (answer_tx, answer_rx) = mpsc::channel(4);
    tokio::spawn(async move {
        while let Some(epoch) = ask_rx.recv().await {
            let answer = ledger.read_all().await;
            if answer_tx.send((epoch, answer)).await.is_err() {
                return;
            }
        }
    });
    (ask_tx, answer_rx)
}

/// Keep a watch on the ledger's groups (`key`: one limit's group, or `>` for every group),
/// opening the bucket once it exists and re-opening the watch whenever it ends or this client
/// reconnects (a server restart: see [`leasehold_nats::watch`]; a cut leaf link is not seen
/// there). Each value comes with its key and revision; each opening delivers every group's
/// newest value again.
pub fn watch_records(ledger: Arc<LedgerLink>, key: String) -> mpsc::Receiver<(String, bytes::Bytes, u64)> {
    let (tx, rx) = mpsc::channel(256);
    let client = ledger.js.client();
    tokio::spawn(async move {
        let mut told = false;
        loop {
            match ledger.store().await {
                Ok(store) => {
                    if told {
                        info!(bucket = subjects::LEDGER_BUCKET, "the ledger bucket is there now");
                        told = false;
                    }
                    let puts = |e: Entry| (e.operation == Operation::Put).then_some((e.key, e.value, e.revision));
                    if !watch_once(&client, store, &key, &tx, puts).await {
                        return;
                    }
                }
                Err(e) if !told => {
                    warn!(cause = %e, "cannot open the ledger yet (the coordinator creates it; check ledger_domain); waiting");
                    told = true;
                }
                Err(_) => {}
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(REOPEN_EVERY).await;
        }
    });
    rx
}
