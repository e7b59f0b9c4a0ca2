//! Protocol v2: every message between a pod and its DC manager, and from a DC manager to the
//! coordinator, is a batch with one item per limit, so messages don't multiply with limits: a
//! pod sends one report per period whatever the number of limits it uses, and gets one lease
//! message per renewal carrying all its leases.
//!
//! The envelope names the sender (and, for pods, the pod): every item must name the same DC and
//! pod, so the per-pod subjects still let NATS permissions confine each pod to its own messages.
//! Items are the v1 messages ([`PodReport`], [`PodLease`], …) unchanged, each written with its
//! own `"v": 1`; at most one item per limit.

use super::{
    check_id, DcReport, LeaseReturn, PodLease, PodReport, ReturnAck, WireError, WireMessage, PROTOCOL_VERSION,
    SCHEMA_VERSION,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Most items in one batch: a pod serves at most this many limits, so a pod's batch is one
/// message where the server allows it. Larger sets (a DC manager's report of more limits) are
/// sent as several batches.
pub const MAX_BATCH_ITEMS: usize = 1_000;
/// Largest batch accepted: NATS's default `max_payload` (1 MiB).
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Room kept in a batch for its envelope (`v`, `dc`, `pod` of up to 128 bytes each, keys).
const ENVELOPE_BYTES: usize = 512;

fn v2() -> u32 {
    PROTOCOL_VERSION
}

/// Checks a batch's items: at most [`MAX_BATCH_ITEMS`], each valid, each naming the envelope's
/// DC (and pod), no limit twice.
fn check_items<T: BatchItem>(field: &'static str, items: &[T], dc: &str, pod: Option<&str>) -> Result<(), WireError> {
    if let Some(item) = items.iter().find(|i| i.version() != SCHEMA_VERSION) {
        let reason = format!("an item of schema version {} (items are {SCHEMA_VERSION})", item.version());
        return Err(WireError::Invalid { field, reason });
    }
    if items.len() > MAX_BATCH_ITEMS {
        return Err(WireError::Invalid {
            field,
            reason: format!("{} items, more than {MAX_BATCH_ITEMS}", items.len()),
        });
    }
    let mut limits = BTreeSet::new();
    for item in items {
        item.validate()?;
        let (limit, item_dc, item_pod) = item.names();
        if item_dc != dc || item_pod != pod {
            let reason = format!("an item for limit {limit:?} names another DC or pod than the batch");
            return Err(WireError::Invalid { field, reason });
        }
        if !limits.insert(limit) {
            return Err(WireError::Invalid { field, reason: format!("limit {limit:?} appears twice") });
        }
    }
    Ok(())
}

/// What a batch checks of its items: the limit, DC and (pod items) pod each names.
pub trait BatchItem: WireMessage {
    fn names(&self) -> (&str, &str, Option<&str>);
    fn version(&self) -> u32;
}

impl BatchItem for DcReport {
    fn names(&self) -> (&str, &str, Option<&str>) {
        (&self.limit, &self.dc, None)
    }
    fn version(&self) -> u32 {
        self.v
    }
}

macro_rules! pod_batch {
    ($(#[$doc:meta])* $name:ident, $items:ident: $item:ty, $pod_field:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            #[serde(default = "v2")]
            pub v: u32,
            pub dc: String,
            pub pod: String,
            pub $items: Vec<$item>,
        }

        impl $name {
            pub fn new(dc: &str, pod: &str, $items: Vec<$item>) -> Self {
                $name { v: PROTOCOL_VERSION, dc: dc.into(), pod: pod.into(), $items }
            }
        }

        impl BatchItem for $item {
            fn names(&self) -> (&str, &str, Option<&str>) {
                (&self.limit, &self.dc, Some(&self.$pod_field))
            }
            fn version(&self) -> u32 {
                self.v
            }
        }

        impl WireMessage for $name {
            const VERSION: u32 = PROTOCOL_VERSION;
            const MAX_BYTES: usize = MAX_BATCH_BYTES;
            fn validate(&self) -> Result<(), WireError> {
                check_id("dc", &self.dc)?;
                check_id("pod", &self.pod)?;
                check_items(stringify!($items), &self.$items, &self.dc, Some(&self.pod))
            }
        }
    };
}

pod_batch!(
    /// Pod → DC manager, every report period: a report (the heartbeat) for every limit the pod
    /// serves. Subject `lh.pod.<dc>.<pod>.report`.
    PodReports, reports: PodReport, pod
);
pod_batch!(
    /// DC manager → pod: the pod's new leases, one per limit, sent together. Subject
    /// `lh.pod.<dc>.<pod>.lease`.
    PodLeases, leases: PodLease, pod
);
pod_batch!(
    /// Pod → DC manager: leases given back (idle limits, or all of them when draining). Subject
    /// `lh.pod.<dc>.<pod>.return`.
    LeaseReturns, returns: LeaseReturn, holder
);
pod_batch!(
    /// DC manager → pod: the confirmations of returns. Subject `lh.pod.<dc>.<pod>.ack`.
    ReturnAcks, acks: ReturnAck, holder
);

/// DC manager → coordinator, every DC report period: a report for every limit the manager
/// serves (several batches when more than [`MAX_BATCH_ITEMS`]). Subject `lh.dc.<dc>.report`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcReports {
    #[serde(default = "v2")]
    pub v: u32,
    pub dc: String,
    pub reports: Vec<DcReport>,
}

impl DcReports {
    pub fn new(dc: &str, reports: Vec<DcReport>) -> Self {
        DcReports { v: PROTOCOL_VERSION, dc: dc.into(), reports }
    }
}

impl WireMessage for DcReports {
    const VERSION: u32 = PROTOCOL_VERSION;
    const MAX_BYTES: usize = MAX_BATCH_BYTES;
    fn validate(&self) -> Result<(), WireError> {
        check_id("dc", &self.dc)?;
        check_items("reports", &self.reports, &self.dc, None)
    }
}

/// `items` cut into batches that each fit: at most [`MAX_BATCH_ITEMS`] items, no limit twice
/// (a second item of a limit, e.g. for another holder of it, goes into a later batch), and an
/// encoding of at most `max_bytes` (the server's `max_payload`, capped at [`MAX_BATCH_BYTES`]).
/// None when there are no items. An item too large for any batch is sent alone (and refused by
/// the server, which the sender counts as a failed publish).
pub fn batches<T: BatchItem + Clone>(items: &[T], max_bytes: usize) -> Vec<Vec<T>> {
    let budget = max_bytes.min(MAX_BATCH_BYTES).saturating_sub(ENVELOPE_BYTES);
    let mut out: Vec<(Vec<T>, usize, BTreeSet<String>)> = Vec::new();
    for item in items {
        let size = serde_json::to_vec(item).map_or(budget, |b| b.len() + 1);
        let limit = item.names().0;
        let fits = |b: &(Vec<T>, usize, BTreeSet<String>)| {
            b.0.len() < MAX_BATCH_ITEMS && b.1 + size <= budget && !b.2.contains(limit)
        };
        match out.iter_mut().find(|b| fits(b)) {
            Some((batch, bytes, limits)) => {
                batch.push(item.clone());
                *bytes += size;
                limits.insert(limit.to_string());
            }
            None => out.push((vec![item.clone()], size, BTreeSet::from([limit.to_string()]))),
        }
    }
    out.into_iter().map(|(batch, _, _)| batch).collect()
}
