//! Wire types: every message on NATS and every record in JetStream KV.
//!
//! All are JSON objects with a schema version field `"v"`. [`decode`] turns untrusted bytes into a
//! message or a [`WireError`]; it never panics, refuses oversized input before parsing, refuses
//! unknown schema versions, and validates field ranges.

mod batch;
mod fast;
mod fence;
mod floor_confirmations;
mod ledger_group;
mod ledger_record;
mod messages;

pub use batch::*;
pub use fast::report_json::{decode_pod_reports, decode_pod_reports_saying_how, ReportsReadBy};
pub use fence::LedgerFence;
pub use floor_confirmations::{ConfirmedFloor, FloorConfirmations};
pub use ledger_group::{FittedGroup, LedgerGroup, FRESH_GROWTH, MAX_LEDGER_GROUP_BYTES};
pub use ledger_record::{DcHolder, LedgerRecord};
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

/// Why bytes were refused as a message.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum WireError {
    #[error("message is {len} bytes, more than the {max} allowed")]
    /// The message is larger than allowed.
    Oversized {
        /// Its length, in bytes.
        len: usize,
        /// The most allowed, in bytes.
        max: usize,
    },
    /// The bytes are not JSON of the message's shape (serde's error).
    #[error("malformed JSON: {0}")]
    Malformed(String),
    /// The message has no `"v"` field.
    #[error("missing schema version field \"v\"")]
    MissingVersion,
    #[error("unsupported schema version {found} (this build speaks {speaks})")]
    /// The message's `"v"` is not the one this build speaks.
    UnsupportedVersion {
        /// The version found.
        found: u64,
        /// The version this build speaks.
        speaks: u32,
    },
    #[error("invalid field {field}: {reason}")]
    /// A field breaks its rules.
    Invalid {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Implemented by every message: field-range checks run after parsing.
pub trait WireMessage: Serialize + DeserializeOwned {
    /// The `"v"` this message is written with and the only one accepted.
    const VERSION: u32 = SCHEMA_VERSION;
    /// Largest encoding accepted by [`decode`].
    const MAX_BYTES: usize = MAX_MESSAGE_BYTES;
    /// Checks the fields' ranges after parsing.
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
pub enum MissingVersion {
    /// Refused as malformed.
    Refused,
    /// Messages that predate the field (the per-key ones): version 1.
    ReadAsV1,
}

/// [`decode`] with the caller's size limit and rule for a missing version.
pub fn decode_within<T: WireMessage>(bytes: &[u8], max_bytes: usize, missing: MissingVersion) -> Result<T, WireError> {
    if bytes.len() > max_bytes {
        return Err(WireError::Oversized { len: bytes.len(), max: max_bytes });
    }
    if leading_version(bytes) != Some(u64::from(T::VERSION)) {
        check_version::<T>(bytes, max_bytes, missing)?;
    }
    let msg: T = parse_within(bytes, max_bytes)?;
    msg.validate()?;
    Ok(msg)
}

/// The version a message states as its first key, when it is written the way every encoder here
/// writes it (`{"v":` and a JSON integer, then `,` or `}`), read without parsing the rest; `None`
/// for anything else. Every [`WireMessage`] has a `v` field, so the full parse that follows still
/// refuses a second `"v"` and invalid JSON, as the probe would (oversized input is refused before
/// either): this refuses what the probe refused and accepts what it accepted (a malformed
/// message's text may name another of its faults), and parses a message once instead of twice.
fn leading_version(bytes: &[u8]) -> Option<u64> {
    let rest = bytes.strip_prefix(br#"{"v":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let leading_zero = digits > 1 && rest[0] == b'0';
    if digits == 0 || leading_zero || !matches!(rest.get(digits), Some(b',' | b'}')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The version check on a message whose version is not read at a glance: a whole parse that
/// looks only at `"v"`, so an unsupported version is refused as such, not as malformed.
fn check_version<T: WireMessage>(bytes: &[u8], max_bytes: usize, missing: MissingVersion) -> Result<(), WireError> {
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
    Ok(())
}

/// JSON of at most `max_bytes` (larger input is refused unread).
pub fn parse_within<T: DeserializeOwned>(bytes: &[u8], max_bytes: usize) -> Result<T, WireError> {
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
    // The usual id, printable ASCII without a wildcard or separator, a byte at a time (the
    // check below walks characters: every id of every batch item passes here).
    if s.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'.' | b'*' | b'>')) {
        return Ok(());
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

#[cfg(test)]
mod leading_version_tests {
    use super::*;
    use proptest::prelude::*;

    /// What [`decode_within`] did before it read the version at a glance.
    fn decode_probing_first<T: WireMessage>(bytes: &[u8], missing: MissingVersion) -> Result<T, WireError> {
        check_version::<T>(bytes, T::MAX_BYTES, missing)?;
        let msg: T = parse_within(bytes, T::MAX_BYTES)?;
        msg.validate()?;
        Ok(msg)
    }

    fn same_answer<T: WireMessage + PartialEq + std::fmt::Debug>(bytes: &[u8], missing: MissingVersion) {
        let fast = decode_within::<T>(bytes, T::MAX_BYTES, missing);
        let probed = decode_probing_first::<T>(bytes, missing);
        match (&fast, &probed) {
            (Err(WireError::Malformed(_)), Err(WireError::Malformed(_))) => {}
            _ => assert_eq!(fast, probed, "{:?}", String::from_utf8_lossy(bytes)),
        }
    }

    const REPORT: &str = r#"{"v":1,"limit":"api","dc":"bkk","pod":"p1","incarnation":7,"seq":3,"interval_ms":250,"offered":4,"admitted":4,"rejected":0,"queued":0,"errors":0,"healthy":true,"draining":false,"weight":1.0,"lease_in_use":{"epoch":1,"seq":2}}"#;

    fn report_batch() -> Vec<u8> {
        format!(r#"{{"v":2,"dc":"bkk","pod":"p1","reports":[{REPORT}]}}"#).into_bytes()
    }

    fn spliced(mut bytes: Vec<u8>, cut: usize, len: usize, splice: &str) -> Vec<u8> {
        let at = cut.min(bytes.len());
        let end = (at + len).min(bytes.len());
        bytes.splice(at..end, splice.bytes());
        bytes
    }

    #[test]
    fn the_version_read_at_a_glance_is_only_a_json_integer_first() {
        assert_eq!(leading_version(br#"{"v":2,"dc":"x"}"#), Some(2));
        assert_eq!(leading_version(br#"{"v":0}"#), Some(0));
        for other in [
            &br#"{"v":02,"#[..],
            br#"{"v":2.0,"#,
            br#"{"v":-2,"#,
            br#"{"v": 2,"#,
            br#" {"v":2,"#,
            br#"{"v":2 ,"#,
            br#"{"v":"2","#,
            br#"{"v":99999999999999999999,"#,
            br#"{"v":"#,
        ] {
            assert_eq!(leading_version(other), None, "{}", String::from_utf8_lossy(other));
        }
        assert!(decode::<PodReports>(&report_batch()).is_ok() && decode::<PodReport>(REPORT.as_bytes()).is_ok());
        // Another version, read at a glance or not, is refused as such; a missing one too.
        let batch = String::from_utf8(report_batch()).unwrap();
        for (v, other) in [(3, r#"{"v":3,"#), (1, r#"{"v":1,"#), (3, r#"{ "v":3,"#)] {
            let other = batch.replacen(r#"{"v":2,"#, other, 1);
            assert_eq!(
                decode::<PodReports>(other.as_bytes()),
                Err(WireError::UnsupportedVersion { found: v, speaks: PROTOCOL_VERSION })
            );
        }
        let without = batch.replacen(r#""v":2,"#, "", 1);
        assert_eq!(decode::<PodReports>(without.as_bytes()), Err(WireError::MissingVersion));
        // Oversized input is refused before anything is read, the version included.
        let long = format!(r#"{{"v":{}}}"#, "2".repeat(PodReports::MAX_BYTES));
        assert!(matches!(decode::<PodReports>(long.as_bytes()), Err(WireError::Oversized { .. })));
        let twice = String::from_utf8(report_batch()).unwrap().replacen(r#""dc""#, r#""v":3,"dc""#, 1);
        assert!(matches!(decode::<PodReports>(twice.as_bytes()), Err(WireError::Malformed(_))));
    }

    proptest! {
        /// Cut, spliced and edited messages get the answer the probe gave them.
        #[test]
        fn reading_the_version_at_a_glance_changes_no_answer(
            cut in 0usize..400,
            len in 0usize..12,
            splice in prop_oneof![
                Just(String::new()), Just(r#""v":2,"#.to_string()), Just(r#","v":3"#.to_string()),
                Just(r#"{"v":2,"#.to_string()), Just(r#"{"v":1,"#.to_string()), Just("02".to_string()),
                Just(" ".to_string()), Just("}".to_string()), Just("\"".to_string()), "\\PC{0,6}",
            ],
        ) {
            let batch = spliced(report_batch(), cut, len, &splice);
            same_answer::<PodReports>(&batch, MissingVersion::Refused);
            same_answer::<PodReports>(&batch, MissingVersion::ReadAsV1);
            same_answer::<PodReport>(&spliced(REPORT.as_bytes().to_vec(), cut / 2, len, &splice), MissingVersion::Refused);
        }
    }
}
