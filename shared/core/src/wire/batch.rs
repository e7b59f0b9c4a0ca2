//! Protocol v2: every message between a pod and its DC manager, and from a DC manager to the
//! coordinator, is a batch with one item per limit, so messages don't multiply with limits: a
//! pod sends one report per period whatever the number of limits it uses, and gets one lease
//! message per renewal carrying all its leases.
//!
//! The envelope names the sender (and, for pods, the pod): every item must name the same DC and
//! pod, so the per-pod subjects still let NATS permissions confine each pod to its own messages.
//! Items are the v1 messages ([`PodReport`], [`PodLease`], …) unchanged, each written with its
//! own `"v": 1`; at most one item per limit.

use super::fast::json_str::write_json_str;
use super::{
    check_id, DcReport, LeaseReturn, PodLease, PodReport, ReturnAck, WireError, WireMessage, PROTOCOL_VERSION,
    SCHEMA_VERSION,
};
use serde::{Deserialize, Serialize};

/// A set of limit names, hashed: a batch of 1,000 items asks it 1,000 times, and an ordered set
/// compared each name with about ten others. The seed is drawn per set (a pod names the limits
/// in its batch, and with a fixed seed could choose names that collide); only membership is
/// asked, so nothing depends on it.
type NameSet<'a> = std::collections::HashSet<&'a str, foldhash::fast::RandomState>;

/// Most items in one batch: a pod serves at most this many limits, so a pod's batch is one
/// message where the server allows it. Larger sets (a DC manager's report of more limits) are
/// sent as several batches.
pub const MAX_BATCH_ITEMS: usize = 1_000;
/// Largest batch accepted: NATS's default `max_payload` (1 MiB).
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Room kept in a batch for its envelope: `v`, keys, and `dc` and `pod` of up to 128 bytes
/// each, which may double when written (`"` and `\\` are allowed in ids and escaped).
const ENVELOPE_BYTES: usize = 640;

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
    let mut limits = NameSet::with_capacity_and_hasher(items.len(), Default::default());
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
    /// The batch's field that carries these items (`reports`, `leases`, `returns`, `acks`).
    const FIELD: &'static str;
    /// The limit, DC and (pod items) pod the item names.
    fn names(&self) -> (&str, &str, Option<&str>);
    /// The item's schema version (its `v`).
    fn version(&self) -> u32;
    /// Appends the item's JSON to `out`: what `serde_json::to_vec` writes.
    fn write_json(&self, out: &mut Vec<u8>) {
        let start = out.len();
        if serde_json::to_writer(&mut *out, self).is_err() {
            out.truncate(start);
        }
    }
}

impl BatchItem for DcReport {
    const FIELD: &'static str = "reports";
    fn names(&self) -> (&str, &str, Option<&str>) {
        (&self.limit, &self.dc, None)
    }
    fn version(&self) -> u32 {
        self.v
    }
}

macro_rules! pod_batch {
    ($(#[$doc:meta])* $name:ident, $items:ident: $item:ty, $pod_field:ident $(, written by $writer:ident)?) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct $name {
            /// Protocol version: 2.
            #[serde(default = "v2")]
            pub v: u32,
            /// The DC of every item.
            pub dc: String,
            /// The pod of every item.
            pub pod: String,
            /// The items, one per limit.
            pub $items: Vec<$item>,
        }

        impl $name {
            /// A batch of `dc`'s pod `pod` carrying the items, at the current protocol version.
            pub fn new(dc: &str, pod: &str, $items: Vec<$item>) -> Self {
                $name { v: PROTOCOL_VERSION, dc: dc.into(), pod: pod.into(), $items }
            }
        }

        impl BatchItem for $item {
            const FIELD: &'static str = stringify!($items);
            fn names(&self) -> (&str, &str, Option<&str>) {
                (&self.limit, &self.dc, Some(&self.$pod_field))
            }
            fn version(&self) -> u32 {
                self.v
            }
            $(
                fn write_json(&self, out: &mut Vec<u8>) {
                    self.$writer(out)
                }
            )?
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
    PodLeases, leases: PodLease, pod, written by encode_json_into
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
    /// Protocol version: 2.
    #[serde(default = "v2")]
    pub v: u32,
    /// The manager's DC.
    pub dc: String,
    /// The reports, one per limit.
    pub reports: Vec<DcReport>,
}

impl DcReports {
    /// A batch of `dc`'s reports at the current protocol version.
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
    let sizes: Vec<usize> = items.iter().map(|i| serde_json::to_vec(i).map_or(usize::MAX, |b| b.len())).collect();
    cut(items, &sizes, max_bytes)
        .into_iter()
        .map(|batch| batch.into_iter().map(|i| items[i].clone()).collect())
        .collect()
}

/// `items` cut as [`batches`] cuts them, each batch encoded: per batch, its payload and the
/// indices of the items it carries. Every item is serialized once, and its bytes are both what
/// the cut measures and what the batch carries (a DC manager sends 1,000 limits' leases to each
/// pod every second: serializing each twice, and growing the buffer as it goes, was a fifth of
/// its time). The payload is byte for byte what [`super::encode`] writes for the batch type: its
/// field is `T::FIELD`, its `dc` and `pod` those the items name (a batch's items name the same
/// ones, or the receiver refuses it).
pub fn encode_batches<T: BatchItem>(items: &[T], max_bytes: usize) -> Vec<(Vec<u8>, Vec<usize>)> {
    // Every item into one buffer (an allocation per item was a tenth of the work), each at
    // `ends[i - 1]..ends[i]`.
    let mut encoded = Vec::with_capacity(items.len().saturating_mul(ITEM_BYTES_GUESS));
    let ends: Vec<usize> = items
        .iter()
        .map(|i| {
            i.write_json(&mut encoded);
            encoded.len()
        })
        .collect();
    let item = |i: usize| &encoded[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
    let sizes: Vec<usize> = (0..items.len()).map(|i| item(i).len()).collect();
    cut(items, &sizes, max_bytes)
        .into_iter()
        .map(|batch| {
            let bytes: usize = batch.iter().map(|&i| sizes[i] + 1).sum();
            let (_, dc, pod) = items[batch[0]].names();
            let mut out = Vec::with_capacity(ENVELOPE_BYTES + bytes);
            out.extend_from_slice(format!("{{\"v\":{PROTOCOL_VERSION},\"dc\":").as_bytes());
            write_json_str(&mut out, dc);
            if let Some(pod) = pod {
                out.extend_from_slice(b",\"pod\":");
                write_json_str(&mut out, pod);
            }
            out.push(b',');
            write_json_str(&mut out, T::FIELD);
            out.extend_from_slice(b":[");
            for (n, &i) in batch.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(item(i));
            }
            out.extend_from_slice(b"]}");
            (out, batch)
        })
        .collect()
}

/// About what an item takes written (a pod lease: 250–300 bytes): the buffer is sized once.
const ITEM_BYTES_GUESS: usize = 288;

/// The cut of [`batches`] over items of the given encoded sizes: each batch as item indices.
fn cut<T: BatchItem>(items: &[T], sizes: &[usize], max_bytes: usize) -> Vec<Vec<usize>> {
    let budget = max_bytes.min(MAX_BATCH_BYTES).saturating_sub(ENVELOPE_BYTES);
    let mut out: Vec<(Vec<usize>, usize, NameSet<'_>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let size = sizes[i].saturating_add(1).min(budget);
        let limit = item.names().0;
        let fits = |b: &(Vec<usize>, usize, NameSet<'_>)| {
            b.0.len() < MAX_BATCH_ITEMS && b.1 + size <= budget && !b.2.contains(limit)
        };
        match out.iter_mut().find(|b| fits(b)) {
            Some((batch, bytes, limits)) => {
                batch.push(i);
                *bytes += size;
                limits.insert(limit);
            }
            None => {
                // Sized for the rest (most sends are one batch): growing it rehashed every name.
                let room = (items.len() - i).min(MAX_BATCH_ITEMS);
                let mut limits = NameSet::with_capacity_and_hasher(room, Default::default());
                limits.insert(limit);
                out.push((vec![i], size, limits));
            }
        }
    }
    out.into_iter().map(|(batch, _, _)| batch).collect()
}
