//! NATS subjects, streams and JetStream KV layout: the one place that names them.
//!
//! Every per-pod subject carries the DC and the pod instance, so NATS permissions can let a pod
//! publish only its own reports and read only its own leases. [`SUBJECTS`] and [`KV_KEYS`] list
//! every name with its direction and message; docs/PROTOCOL.md's tables are tested against them
//! (`shared/core/tests/protocol_doc.rs`), so the two cannot drift apart.
//!
//! KV buckets use the standard layout: bucket `B` is stream `KV_B`, keys under `$KV.B.>`.

use crate::wire::{check_id, WireError};

/// The prefix of every subject.
pub const PREFIX: &str = "lh";
/// The KV bucket of the coordinator's ledger groups.
pub const LEDGER_BUCKET: &str = "lh_ledger";
/// The KV bucket of the leader keys (and the ledger fence, the floor confirmations).
pub const LEADER_BUCKET: &str = "lh_leaders";
/// The coordinator's leader key, in [`LEADER_BUCKET`].
pub const COORDINATOR_LEADER_KEY: &str = "coordinator";
/// In the leader bucket (a different stream from the ledger): the highest epoch under which a
/// ledger record may have been written. A missing record below a fence was lost, not never made.
pub const LEDGER_FENCE_KEY: &str = "ledger-fence";

/// Per-key limiter: requests to a shard's owner ([`crate::wire::KeyCheck`]).
pub const KEYS_CHECK_PREFIX: &str = "lh.keys.check";
/// Per-key limiter: the stream of admissions, one subject per shard.
pub const KEYS_ADMISSIONS_STREAM: &str = "LH_KEYS_ADM";
/// Per-key limiter: the admissions' subjects, `<prefix>.<shard>`.
pub const KEYS_ADMISSIONS_PREFIX: &str = "lh.keys.adm";
/// Per-key limiter: shard ownership and members.
pub const KEYS_SHARDS_BUCKET: &str = "lh_keys_shards";
/// Per-key limiter: the cluster's tiers document.
pub const KEYS_CONFIG_BUCKET: &str = "lh_keys_config";
/// Per-key limiter: the tiers document's key, in [`KEYS_CONFIG_BUCKET`].
pub const KEYS_TIERS_KEY: &str = "tiers";
/// Limits as data: one [`crate::limits::LimitDef`] (JSON) per limit, keyed by its name.
pub const LIMITS_BUCKET: &str = "lh_limits";

/// One subject of the protocol: its pattern (placeholders in `<>`), who sends, what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubjectEntry {
    /// The subject, placeholders in `<>`.
    pub pattern: &'static str,
    /// Who sends to whom.
    pub direction: &'static str,
    /// The message it carries.
    pub message: &'static str,
}

/// Every subject the services publish or subscribe to.
pub const SUBJECTS: &[SubjectEntry] = &[
    SubjectEntry { pattern: "lh.pod.<dc>.<pod>.report", direction: "pod → DC manager", message: "PodReports" },
    SubjectEntry { pattern: "lh.pod.<dc>.<pod>.return", direction: "pod → DC manager", message: "LeaseReturns" },
    SubjectEntry { pattern: "lh.pod.<dc>.<pod>.lease", direction: "DC manager → pod", message: "PodLeases" },
    SubjectEntry { pattern: "lh.pod.<dc>.<pod>.ack", direction: "DC manager → pod", message: "ReturnAcks" },
    SubjectEntry { pattern: "lh.dc.<dc>.report", direction: "DC manager → coordinator", message: "DcReports" },
    SubjectEntry {
        pattern: "lh.keys.check.<shard>",
        direction: "any keys instance → the shard's owner (request/reply)",
        message: "KeyCheck; reply KeyAnswer or KeyRefusal",
    },
    SubjectEntry {
        pattern: "lh.keys.adm.<shard>",
        direction: "the shard's owner → stream LH_KEYS_ADM",
        message: "AdmissionBatch",
    },
];

/// One KV key: bucket, key pattern, value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvEntry {
    /// The KV bucket.
    pub bucket: &'static str,
    /// The key, placeholders in `<>`.
    pub key: &'static str,
    /// The value it holds.
    pub value: &'static str,
}

/// Every KV key the services write.
pub const KV_KEYS: &[KvEntry] = &[
    KvEntry { bucket: LEDGER_BUCKET, key: "group.<n>", value: "LedgerGroup" },
    KvEntry { bucket: LEADER_BUCKET, key: "coordinator", value: "the leader's id" },
    KvEntry { bucket: LEADER_BUCKET, key: "dc.<dc>", value: "the leader's id" },
    KvEntry { bucket: LEADER_BUCKET, key: LEDGER_FENCE_KEY, value: "LedgerFence" },
    KvEntry { bucket: LEADER_BUCKET, key: "floors.<dc>", value: "FloorConfirmations" },
    KvEntry { bucket: KEYS_SHARDS_BUCKET, key: "shard.<n>", value: "ShardRecord" },
    KvEntry { bucket: KEYS_SHARDS_BUCKET, key: "member.<instance>", value: "MemberRecord" },
    KvEntry { bucket: KEYS_CONFIG_BUCKET, key: KEYS_TIERS_KEY, value: "the tiers document" },
    KvEntry { bucket: LIMITS_BUCKET, key: "<limit>", value: "LimitDef" },
];

/// Where a request for a key in `shard` goes.
pub fn keys_check(shard: u32) -> String {
    format!("{KEYS_CHECK_PREFIX}.{shard}")
}

/// Where a shard's admissions are stored.
pub fn keys_admissions(shard: u32) -> String {
    format!("{KEYS_ADMISSIONS_PREFIX}.{shard}")
}

/// The admissions stream's subjects.
pub fn keys_admissions_wildcard() -> String {
    format!("{KEYS_ADMISSIONS_PREFIX}.*")
}

/// A shard's ownership record.
pub fn keys_shard_key(shard: u32) -> String {
    format!("shard.{shard}")
}

/// The shard a `shard.<n>` key names.
pub fn keys_shard_of_key(key: &str) -> Option<u32> {
    key.strip_prefix("shard.")?.parse().ok()
}

/// A keys instance's member record.
pub fn keys_member_key(instance: &str) -> String {
    format!("member.{instance}")
}

/// The instance a `member.<instance>` key names.
pub fn keys_member_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("member.")
}

/// Which per-pod subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodChannel {
    /// `lh.pod.<dc>.<pod>.report`: pod → DC manager.
    Report,
    /// `lh.pod.<dc>.<pod>.return`: pod → DC manager.
    Return,
    /// `lh.pod.<dc>.<pod>.lease`: DC manager → pod.
    Lease,
    /// `lh.pod.<dc>.<pod>.ack`: DC manager → pod.
    Ack,
}

impl PodChannel {
    fn token(self) -> &'static str {
        match self {
            PodChannel::Report => "report",
            PodChannel::Return => "return",
            PodChannel::Lease => "lease",
            PodChannel::Ack => "ack",
        }
    }
}

/// A subject for one pod: every limit's messages of one channel share it (protocol v2). Ids are
/// checked ([`check_id`]): no empty token, no `.`, `*`, `>`, whitespace or control characters.
pub fn pod(dc: &str, pod: &str, channel: PodChannel) -> Result<String, WireError> {
    check_id("dc", dc)?;
    check_id("pod", pod)?;
    Ok(format!("{PREFIX}.pod.{dc}.{pod}.{}", channel.token()))
}

/// What a DC manager subscribes to for one channel of all its pods.
pub fn pods_wildcard(dc: &str, channel: PodChannel) -> Result<String, WireError> {
    check_id("dc", dc)?;
    Ok(format!("{PREFIX}.pod.{dc}.*.{}", channel.token()))
}

/// Where a DC manager reports to the coordinator (every limit's report in one batch).
pub fn dc_report(dc: &str) -> Result<String, WireError> {
    check_id("dc", dc)?;
    Ok(format!("{PREFIX}.dc.{dc}.report"))
}

/// What a coordinator subscribes to: every DC's reports.
pub fn dc_reports_wildcard() -> String {
    format!("{PREFIX}.dc.*.report")
}

/// The DC a `lh.dc.<dc>.report` subject names.
pub fn dc_of_report_subject(subject: &str) -> Option<&str> {
    subject.strip_prefix(PREFIX)?.strip_prefix(".dc.")?.strip_suffix(".report").filter(|dc| check_id("dc", dc).is_ok())
}

/// How many keys the ledger's records are spread over: a limit's record lives in the
/// [`crate::wire::LedgerGroup`] at [`ledger_group_key`]`(`[`ledger_group_of`]`(limit))`, so the
/// coordinator's writes per renewal (and every DC manager's watch) grow with this, not with the
/// number of limits. Fixed: every reader and writer must agree on it.
pub const LEDGER_GROUPS: u32 = 64;

/// The group of `limit`'s ledger record: the 32-bit FNV-1a hash of its name's UTF-8 bytes,
/// modulo [`LEDGER_GROUPS`] (stable across builds and languages).
pub fn ledger_group_of(limit: &str) -> u32 {
    let hash = limit.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    hash % LEDGER_GROUPS
}

/// A ledger group's key in [`LEDGER_BUCKET`].
pub fn ledger_group_key(group: u32) -> String {
    format!("group.{group}")
}

/// The group a `group.<n>` key names (`None` for any other key, or a group out of range).
pub fn ledger_group_of_key(key: &str) -> Option<u32> {
    key.strip_prefix("group.")?.parse().ok().filter(|g| *g < LEDGER_GROUPS)
}

/// The key holding `limit`'s ledger record (its group's).
pub fn ledger_key(limit: &str) -> Result<String, WireError> {
    check_id("limit", limit)?;
    Ok(ledger_group_key(ledger_group_of(limit)))
}

/// A limit's definition's key in [`LIMITS_BUCKET`]: its name.
pub fn limits_key(limit: &str) -> Result<String, WireError> {
    check_id("limit", limit)?;
    Ok(limit.to_string())
}

/// The leader key of a DC's managers.
pub fn dc_leader_key(dc: &str) -> Result<String, WireError> {
    check_id("dc", dc)?;
    Ok(format!("dc.{dc}"))
}

/// The key of DC `dc`'s [`FloorConfirmations`](crate::wire::FloorConfirmations), in the DC's own
/// leader bucket.
pub fn dc_floors_key(dc: &str) -> Result<String, WireError> {
    check_id("dc", dc)?;
    Ok(format!("floors.{dc}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_stable_and_scoped_per_pod() {
        assert_eq!(pod("bkk", "p-1", PodChannel::Lease).unwrap(), "lh.pod.bkk.p-1.lease");
        assert_eq!(pods_wildcard("bkk", PodChannel::Report).unwrap(), "lh.pod.bkk.*.report");
        assert_eq!(dc_report("eu").unwrap(), "lh.dc.eu.report");
        assert_eq!(dc_reports_wildcard(), "lh.dc.*.report");
        assert_eq!(dc_of_report_subject("lh.dc.eu.report"), Some("eu"));
        assert_eq!(dc_of_report_subject("lh.dc.e.u.report"), None);
        assert_eq!(dc_of_report_subject("lh.pod.eu.report"), None);
        assert_eq!(dc_leader_key("eu").unwrap(), "dc.eu");
        assert_eq!(keys_check(17), "lh.keys.check.17");
        assert_eq!(keys_admissions(17), "lh.keys.adm.17");
        assert_eq!(keys_admissions_wildcard(), "lh.keys.adm.*");
        assert_eq!(keys_shard_key(17), "shard.17");
        assert_eq!(keys_shard_of_key("shard.17"), Some(17));
        assert_eq!(keys_shard_of_key("member.keys-1"), None);
        assert_eq!(keys_member_key("keys-1"), "member.keys-1");
        assert_eq!(keys_member_of_key("member.keys-1"), Some("keys-1"));
    }

    /// Other languages compute the same group: FNV-1a 32 of the name (test vectors from the
    /// FNV reference: "" → 0x811c9dc5, "a" → 0xe40c292c, "foobar" → 0xbf9cf968).
    #[test]
    fn a_limit_s_ledger_group_is_fnv_1a_of_its_name_modulo_the_groups() {
        assert_eq!(ledger_group_of("a"), 0xe40c_292c % LEDGER_GROUPS);
        assert_eq!(ledger_group_of("foobar"), 0xbf9c_f968 % LEDGER_GROUPS);
        assert_eq!(ledger_group_of("partner-api"), 20, "docs/PROTOCOL.md's example");
        assert_eq!(ledger_key("foobar").unwrap(), format!("group.{}", 0xbf9c_f968_u32 % 64));
        assert_eq!(ledger_group_of_key("group.63"), Some(63));
        assert_eq!(ledger_group_of_key("group.64"), None);
        assert_eq!(ledger_group_of_key("partner-api"), None);
        assert!(ledger_key("a.b").is_err());
        // Spread: 1,000 names fill every group, none with more than three times its share.
        let mut counts = [0u32; LEDGER_GROUPS as usize];
        for i in 0..1_000 {
            counts[ledger_group_of(&format!("tenant-{i}")) as usize] += 1;
        }
        assert!(counts.iter().all(|c| *c > 0 && *c <= 3 * 1_000 / LEDGER_GROUPS), "{counts:?}");
    }

    /// Each builder's output fits its table pattern, so the table names what the code sends.
    #[test]
    fn the_table_patterns_match_what_the_builders_make() {
        let fits = |pattern: &str, subject: &str| {
            let p: Vec<&str> = pattern.split('.').collect();
            let s: Vec<&str> = subject.split('.').collect();
            p.len() == s.len() && p.iter().zip(&s).all(|(p, s)| p.starts_with('<') || p == s)
        };
        let made = [
            pod("bkk", "p", PodChannel::Report).unwrap(),
            pod("bkk", "p", PodChannel::Return).unwrap(),
            pod("bkk", "p", PodChannel::Lease).unwrap(),
            pod("bkk", "p", PodChannel::Ack).unwrap(),
            dc_report("bkk").unwrap(),
            keys_check(3),
            keys_admissions(3),
        ];
        assert_eq!(made.len(), SUBJECTS.len());
        for (entry, subject) in SUBJECTS.iter().zip(&made) {
            assert!(fits(entry.pattern, subject), "{subject} does not fit {}", entry.pattern);
        }
        let keys = [
            (LEDGER_BUCKET, ledger_key("api").unwrap()),
            (LEADER_BUCKET, COORDINATOR_LEADER_KEY.to_string()),
            (LEADER_BUCKET, dc_leader_key("bkk").unwrap()),
            (LEADER_BUCKET, LEDGER_FENCE_KEY.to_string()),
            (LEADER_BUCKET, dc_floors_key("bkk").unwrap()),
            (KEYS_SHARDS_BUCKET, keys_shard_key(3)),
            (KEYS_SHARDS_BUCKET, keys_member_key("keys-1")),
            (KEYS_CONFIG_BUCKET, KEYS_TIERS_KEY.to_string()),
            (LIMITS_BUCKET, limits_key("api").unwrap()),
        ];
        assert_eq!(keys.len(), KV_KEYS.len());
        for (entry, (bucket, key)) in KV_KEYS.iter().zip(&keys) {
            assert_eq!(entry.bucket, *bucket);
            assert!(fits(entry.key, key), "{key} does not fit {}", entry.key);
        }
    }

    #[test]
    fn ids_that_would_escape_their_token_are_refused() {
        for bad in ["", "a.b", "*", ">", "a b"] {
            assert!(pod("bkk", bad, PodChannel::Report).is_err(), "{bad:?}");
            assert!(dc_report(bad).is_err(), "{bad:?}");
            assert!(limits_key(bad).is_err(), "{bad:?}");
        }
    }
}
