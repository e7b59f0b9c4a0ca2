//! Wire types: every message on NATS and every record in JetStream KV.
//!
//! All are JSON objects with a schema version field `"v"`. [`decode`] turns untrusted bytes into a
//! message or a [`WireError`]; it never panics, refuses oversized input before parsing, refuses
//! unknown schema versions, and validates field ranges.

mod batch;
mod fence;
mod floor_confirmations;
mod keys;
mod lease_json;
mod ledger_group;
mod messages;

pub use batch::*;
pub use fence::LedgerFence;
pub use floor_confirmations::{ConfirmedFloor, FloorConfirmations};
pub use keys::*;
pub use ledger_group::{FittedGroup, LedgerGroup, FRESH_GROWTH, MAX_LEDGER_GROUP_BYTES};
pub use messages::*;

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use thiserror::Error;

/// The schema version this build writes and accepts for records (ledger, fence, limits) and for
/// the items inside the protocol's batches.
pub const SCHEMA_VERSION: u32 = 1;
/// The version of the messages pods, DC managers and the coordinator exchange on NATS: since 2,
/// every such message is a batch ([`PodReports`], [`PodLeases`], [`LeaseReturns`],
/// [`ReturnAcks`], [`DcReports`]) carrying one item per limit.
pub const PROTOCOL_VERSION: u32 = 2;
/// Largest message accepted by [`decode`]; larger input is rejected unread.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Longest identifier (limit, DC, pod/holder id) accepted, in bytes of UTF-8.
pub const MAX_ID_LEN: usize = 128;
/// Largest pod weight a report may carry.
pub const MAX_POD_WEIGHT: f64 = 1_000.0;
/// Longest lease TTL accepted on the wire (one hour).
pub const MAX_TTL_MS: u64 = 3_600_000;

#[derive(Debug, Error, PartialEq)]
pub enum WireError {
    #[error("message is {len} bytes, more than the {max} allowed")]
    Oversized { len: usize, max: usize },
    #[error("malformed JSON: {0}")]
    Malformed(String),
    #[error("missing schema version field \"v\"")]
    MissingVersion,
    #[error("unsupported schema version {found} (this build speaks {speaks})")]
    UnsupportedVersion { found: u64, speaks: u32 },
    #[error("invalid field {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

/// Implemented by every message: field-range checks run after parsing.
pub trait WireMessage: Serialize + DeserializeOwned {
    /// The `"v"` this message is written with and the only one accepted.
    const VERSION: u32 = SCHEMA_VERSION;
    /// Largest encoding accepted by [`decode`].
    const MAX_BYTES: usize = MAX_MESSAGE_BYTES;
    fn validate(&self) -> Result<(), WireError>;
}

#[derive(Deserialize)]
struct VersionProbe {
    v: Option<serde_json::Value>,
}

/// Decode untrusted bytes into a message.
pub fn decode<T: WireMessage>(bytes: &[u8]) -> Result<T, WireError> {
    decode_within(bytes, T::MAX_BYTES, MissingVersion::Refused)
}

/// What a message without `"v"` is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingVersion {
    Refused,
    /// Messages that predate the field (the per-key ones): version 1.
    ReadAsV1,
}

/// [`decode`] with the caller's size limit and rule for a missing version.
pub(crate) fn decode_within<T: WireMessage>(
    bytes: &[u8],
    max_bytes: usize,
    missing: MissingVersion,
) -> Result<T, WireError> {
    let probe: VersionProbe = parse_within(bytes, max_bytes)?;
    match probe.v {
        None if missing == MissingVersion::ReadAsV1 => {}
        None => return Err(WireError::MissingVersion),
        Some(v) => match v.as_u64() {
            Some(n) if n == T::VERSION as u64 => {}
            Some(n) => return Err(WireError::UnsupportedVersion { found: n, speaks: T::VERSION }),
            None => return Err(WireError::Invalid { field: "v", reason: "not an unsigned integer".into() }),
        },
    }
    let msg: T = parse_within(bytes, max_bytes)?;
    msg.validate()?;
    Ok(msg)
}

/// JSON of at most `max_bytes` (larger input is refused unread).
pub(crate) fn parse_within<T: DeserializeOwned>(bytes: &[u8], max_bytes: usize) -> Result<T, WireError> {
    if bytes.len() > max_bytes {
        return Err(WireError::Oversized { len: bytes.len(), max: max_bytes });
    }
    serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Encode a message (infallible for these types: no maps with non-string keys, no NaN).
pub fn encode<T: WireMessage>(msg: &T) -> Vec<u8> {
    serde_json::to_vec(msg).expect("wire types always serialize")
}

/// Checks an id that becomes a NATS subject token: 1..=[`MAX_ID_LEN`] bytes, no `.`, `*` or `>`,
/// no Unicode whitespace and no control character (category Cc). Anything else passes.
pub fn check_id(field: &'static str, s: &str) -> Result<(), WireError> {
    if s.is_empty() || s.len() > MAX_ID_LEN {
        return Err(WireError::Invalid { field, reason: format!("length {} not in 1..={MAX_ID_LEN}", s.len()) });
    }
    // Ids become NATS subject tokens: no wildcards, separators, whitespace or control characters.
    if let Some(c) = s.chars().find(|c| matches!(c, '.' | '*' | '>') || c.is_whitespace() || c.is_control()) {
        return Err(WireError::Invalid { field, reason: format!("character {c:?} not allowed") });
    }
    Ok(())
}

pub(crate) fn check_ttl(ttl_ms: u64) -> Result<(), WireError> {
    if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
        return Err(WireError::Invalid { field: "ttl_ms", reason: format!("{ttl_ms} not in 1..={MAX_TTL_MS}") });
    }
    Ok(())
}
