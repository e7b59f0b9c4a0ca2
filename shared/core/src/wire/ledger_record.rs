//! The coordinator's durable ledger record for one limit (`lh_ledger`, one KV key per limit,
//! written only by compare-and-set), apart from the messages it carries.

use super::messages::{check_quota, v1};
use super::{check_id, check_ttl, DcLease, LeaseVersion, WireError, WireMessage, SCHEMA_VERSION};
use crate::quota::Quota;
use serde::{Deserialize, Serialize};

/// The coordinator's durable ledger for one limit: one KV key, written only by compare-and-set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerRecord {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// Leadership epoch of the writer; a new leader writes a higher one.
    pub epoch: u64,
    /// The coordinator instance that wrote the record.
    pub writer: String,
    /// Every DC lease that may still be in use, superseded ones included.
    pub leases: Vec<DcLease>,
    /// Each DC's reserved floor. A DC manager uses no floor but the one named here (a term
    /// that has not read the record yet uses none).
    #[serde(default)]
    pub floors: std::collections::BTreeMap<String, Quota>,
    /// The version of each floor in `floors`: a DC manager takes a floor only from a newer
    /// version than the one it uses (a delayed record never brings an older floor back).
    /// Missing: `(epoch, 0)`.
    #[serde(default)]
    pub floor_versions: std::collections::BTreeMap<String, LeaseVersion>,
    /// What the coordinator reserves for each DC's floor: at least `floors`, and more while the
    /// DC has not confirmed it no longer uses an older, larger floor. Missing: `floors`.
    #[serde(default)]
    pub floors_reserved: std::collections::BTreeMap<String, Quota>,
    /// The writer's capacity (R and B). Missing (older writers): unknown.
    #[serde(default)]
    pub capacity: Option<Quota>,
    /// Per holder, the version below which the writer counted its leases as inherited (cut under
    /// a larger, earlier capacity). A new leader whose capacity is at least `capacity` adopts the
    /// others as lasting; one with a smaller capacity, or reading a record without `capacity`,
    /// adopts every lease as inherited.
    #[serde(default)]
    pub inherited_below: std::collections::BTreeMap<String, LeaseVersion>,
    /// Per DC, the largest floor a lost record may have named (from the fence), reserved apart
    /// from the DC's own floor until the DC confirms a floor named since the loss. Missing: none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lost_floors: std::collections::BTreeMap<String, Quota>,
    /// Set while the writer was still waiting out a lost record's DC leases: the longest TTL it
    /// waits for. A leader resuming from this record waits a full such lifetime from its own
    /// takeover. Missing: no wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_wait_dc_ttl_ms: Option<u64>,
    /// Per DC, the DC-manager replica whose reports the writer last accepted and its
    /// leadership term (`DcReport.term`): a leader resuming from this record refuses reports of
    /// earlier terms, as the writer did. Missing: not known (older writers).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub dc_holders: std::collections::BTreeMap<String, DcHolder>,
    /// Per holder named in `leases`, the holder its leases are counted under when not itself:
    /// a later term of the same DC that answers for it (`DcReport::counts_predecessor`). A
    /// leader resuming from this record counts them there too. Missing: each under its own.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub counted_under: std::collections::BTreeMap<String, String>,
    /// An adaptive limit's effective R (milli-requests/s) when the writer ran it below the
    /// configured R: a leader resuming from this record starts from it rather than from the
    /// configured R. Missing: the configured R.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive_rate_milli_per_s: Option<u64>,
    /// The writer's clock margins: how long it counts a lease past its TTL. A term that must
    /// run the limit from its record alone (its definition unreadable) counts with these.
    /// Missing: not known (older writers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry: Option<crate::expiry::ExpiryPolicy>,
    /// How DC managers split and fail over the limit's pod leases, from its definition
    /// (`split`, `fail_mode`, each DC's `emergency`). Missing: each DC manager's own settings.
    #[serde(default, skip_serializing_if = "crate::dc_manager::PodRules::is_empty")]
    pub pod_rules: crate::dc_manager::PodRules,
}

/// A DC's current DC-manager replica as the coordinator knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DcHolder {
    /// The DC-manager replica's holder id.
    pub holder: String,
    /// Its leadership term (`DcReport.term`).
    pub term: u64,
    /// The newest DC lease of an earlier term moved under it, and that term
    /// (`DcLease::predecessor`). Missing: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessor: Option<(LeaseVersion, u64)>,
}

impl LedgerRecord {
    /// A record of `limit` by `writer` at `epoch` with nothing on it (struct-update syntax fills
    /// in the rest).
    pub fn empty(limit: &str, epoch: u64, writer: &str) -> Self {
        LedgerRecord {
            v: SCHEMA_VERSION,
            limit: limit.into(),
            epoch,
            writer: writer.into(),
            leases: Vec::new(),
            floors: Default::default(),
            floor_versions: Default::default(),
            floors_reserved: Default::default(),
            capacity: None,
            inherited_below: Default::default(),
            lost_floors: Default::default(),
            lost_wait_dc_ttl_ms: None,
            dc_holders: Default::default(),
            counted_under: Default::default(),
            adaptive_rate_milli_per_s: None,
            expiry: None,
            pod_rules: Default::default(),
        }
    }

    /// The holder `holder`'s leases are counted under: a later term that answers for it
    /// (`counted_under`), or itself.
    pub fn counted_holder<'a>(&'a self, holder: &'a str) -> &'a str {
        self.counted_under.get(holder).map_or(holder, String::as_str)
    }

    /// The writer runs the limit retired (removed from `lh_limits`): capacity zero and no floor.
    pub fn limit_removed(&self) -> bool {
        self.capacity == Some(Quota::ZERO) && self.floors.values().all(|f| *f == Quota::ZERO)
    }

    /// DC `dc`'s floor as this record names it, with its version.
    pub fn floor_of(&self, dc: &str) -> Option<(Quota, LeaseVersion)> {
        let floor = *self.floors.get(dc)?;
        Some((floor, self.floor_versions.get(dc).copied().unwrap_or(LeaseVersion::new(self.epoch, 0))))
    }

    /// What the coordinator that wrote this record reserved for DC `dc`'s floor.
    pub fn floor_reserved(&self, dc: &str) -> Option<Quota> {
        let floor = *self.floors.get(dc)?;
        Some(self.floors_reserved.get(dc).map_or(floor, |r| r.max(floor)))
    }
}

impl WireMessage for LedgerRecord {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("writer", &self.writer)?;
        if self.leases.len() > 1_024 {
            return Err(WireError::Invalid { field: "leases", reason: "more than 1024 entries".into() });
        }
        if let Some(ttl_ms) = self.lost_wait_dc_ttl_ms {
            check_ttl(ttl_ms)?;
        }
        for (field, floors) in
            [("floors", &self.floors), ("floors_reserved", &self.floors_reserved), ("lost_floors", &self.lost_floors)]
        {
            floors.iter().try_for_each(|(dc, f)| {
                check_id(field, dc)?;
                check_quota(field, f)
            })?;
        }
        self.floor_versions.keys().try_for_each(|dc| check_id("floor_versions", dc))?;
        self.leases.iter().try_for_each(WireMessage::validate)
    }
}
