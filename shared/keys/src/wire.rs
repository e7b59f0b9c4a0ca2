//! The per-key limiter's messages (`leasehold keys`): requests between instances, their answers,
//! shard records in KV and admission batches in the admissions stream.
//!
//! These messages predate the `"v"` field: a reader takes one without it as version 1, so a
//! shard record or admission batch written by an earlier build still counts after an upgrade.

use crate::spec::check_key;
use leasehold_core::wire::{decode_within, parse_within, MissingVersion, WireError, WireMessage, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

fn v1() -> u32 {
    SCHEMA_VERSION
}

fn one() -> u64 {
    1
}

/// Largest admission batch accepted, below NATS's default 1 MiB payload limit;
/// [`AdmissionBatch::chunks`] cuts every flush into batches below it.
pub const MAX_ADMISSION_BATCH_BYTES: usize = 900 * 1024;

/// A request on `lh.keys.check.<shard>`: record `cost` against `key`, or read its count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCheck {
    #[serde(default = "v1")]
    pub v: u32,
    pub key: String,
    #[serde(default = "one")]
    pub cost: u64,
    /// The tier the sending instance decided under its own trust settings (`None`: the tiers
    /// document's); the owner takes it as it is, so only trusted senders may publish here.
    #[serde(default)]
    pub tier: Option<String>,
    /// Read the key's count instead of recording.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read: bool,
}

impl KeyCheck {
    /// A request to record `cost` against `key`.
    pub fn new(key: impl Into<String>, cost: u64, tier: Option<String>) -> Self {
        KeyCheck { v: SCHEMA_VERSION, key: key.into(), cost, tier, read: false }
    }
}

/// The owner's answer (also the body of the HTTP API's answers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyAnswer {
    #[serde(default = "v1")]
    pub v: u32,
    pub allowed: bool,
    pub key: String,
    pub tier: String,
    pub limit: u64,
    pub window_ms: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Reads only: units counted in the current window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// The owner's refusal: `status` is 400 (bad input), 429 (shed) or 503 (no owner can answer).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRefusal {
    #[serde(default = "v1")]
    pub v: u32,
    pub error: String,
    pub status: u16,
}

/// The value of `shard.<n>` in `lh_keys_shards`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    #[serde(default = "v1")]
    pub v: u32,
    /// The owning instance, or `None` once released.
    pub owner: Option<String>,
    /// The writer's `shard_ttl_ms`: it answers for the shard until 0.7 of it after each write,
    /// so another instance claims the shard only after the record stayed unchanged for 0.9 of
    /// the longer of this and its own. Absent (earlier builds): the longest an instance accepts
    /// ([`crate::shards::MAX_SHARD_TTL_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

impl ShardRecord {
    /// A record written by an instance whose `shard_ttl_ms` is `ttl_ms`.
    pub fn owned_by(owner: Option<String>, ttl_ms: u64) -> Self {
        ShardRecord { v: SCHEMA_VERSION, owner, ttl_ms: Some(ttl_ms) }
    }
}

/// The value of `member.<instance>` in `lh_keys_shards`: where the instance's HTTP API listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    #[serde(default = "v1")]
    pub v: u32,
    pub http: String,
    /// The instance's `shard_ttl_ms` (it rewrites this record every quarter of it), so others
    /// count it a member for 0.9 of the longer of this and their own. Absent (earlier builds):
    /// the reader's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// One admission: key, time (ms since the Unix epoch), cost, and the tier the caller named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission(pub String, pub u64, pub u64, pub Option<String>);

/// One message on `lh.keys.adm.<shard>`: admissions in the order they were made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionBatch {
    #[serde(default = "v1")]
    pub v: u32,
    pub admissions: Vec<Admission>,
}

impl AdmissionBatch {
    /// The messages that carry `admissions`, in order, each below the batch size limit.
    pub fn chunks(admissions: &[Admission]) -> Vec<AdmissionBatch> {
        // An admission's JSON is at most twice its strings' bytes (escapes) plus its numbers.
        let most_bytes = |a: &Admission| 2 * (a.0.len() + a.3.as_ref().map_or(0, String::len)) + 64;
        let mut batches = Vec::new();
        let (mut start, mut bytes) = (0, 64);
        for (i, a) in admissions.iter().enumerate() {
            if i > start && bytes + most_bytes(a) > MAX_ADMISSION_BATCH_BYTES {
                batches.push(AdmissionBatch { v: SCHEMA_VERSION, admissions: admissions[start..i].to_vec() });
                (start, bytes) = (i, 64);
            }
            bytes += most_bytes(a);
        }
        if start < admissions.len() {
            batches.push(AdmissionBatch { v: SCHEMA_VERSION, admissions: admissions[start..].to_vec() });
        }
        batches
    }

    /// A stored batch: this build's object, or the bare array earlier builds wrote.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.first() == Some(&b'[') {
            let admissions = parse_within::<Vec<Admission>>(bytes, MAX_ADMISSION_BATCH_BYTES)?;
            let batch = AdmissionBatch { v: SCHEMA_VERSION, admissions };
            batch.validate()?;
            return Ok(batch);
        }
        decode_keys_message(bytes, MAX_ADMISSION_BATCH_BYTES)
    }
}

/// Decode a per-key message: like [`leasehold_core::wire::decode`], except that a missing `"v"` is version 1
/// (see the module docs) and the size limit is the caller's.
pub fn decode_keys_message<T: WireMessage>(bytes: &[u8], max_bytes: usize) -> Result<T, WireError> {
    decode_within(bytes, max_bytes, MissingVersion::ReadAsV1)
}

fn check_key_field(field: &'static str, key: &str) -> Result<(), WireError> {
    check_key(key).map_err(|e| WireError::Invalid { field, reason: e.to_string() })
}

impl WireMessage for KeyCheck {
    fn validate(&self) -> Result<(), WireError> {
        check_key_field("key", &self.key)
    }
}

impl WireMessage for KeyAnswer {
    fn validate(&self) -> Result<(), WireError> {
        check_key_field("key", &self.key)
    }
}

impl WireMessage for KeyRefusal {
    fn validate(&self) -> Result<(), WireError> {
        Ok(())
    }
}

impl WireMessage for ShardRecord {
    fn validate(&self) -> Result<(), WireError> {
        self.owner.as_deref().map_or(Ok(()), |o| leasehold_core::wire::check_id("owner", o))
    }
}

impl WireMessage for MemberRecord {
    fn validate(&self) -> Result<(), WireError> {
        Ok(())
    }
}

impl WireMessage for AdmissionBatch {
    fn validate(&self) -> Result<(), WireError> {
        self.admissions.iter().try_for_each(|a| check_key_field("admissions", &a.0))
    }
}
