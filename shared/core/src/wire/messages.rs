use super::{check_id, check_ttl, WireError, WireMessage, SCHEMA_VERSION};
use crate::quota::Quota;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// Total order of leases from one issuer: a new leader's epoch outranks every older lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LeaseVersion {
    /// The issuer's leadership epoch when it cut the lease.
    pub epoch: u64,
    /// Counts the issuer's grants within the epoch.
    pub seq: u64,
}

impl LeaseVersion {
    /// The version `seq` of epoch `epoch`.
    pub const fn new(epoch: u64, seq: u64) -> Self {
        LeaseVersion { epoch, seq }
    }
}

impl std::fmt::Display for LeaseVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "e{}v{}", self.epoch, self.seq)
    }
}

pub(super) fn v1() -> u32 {
    SCHEMA_VERSION
}

/// A DC lease: the coordinator's grant to one DC manager instance (stored in the ledger record).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcLease {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// The DC the lease is for.
    pub dc: String,
    /// The DC manager *instance* that holds it (a restarted manager is a new holder).
    pub holder: String,
    /// The lease's version, from the coordinator's epoch.
    pub version: LeaseVersion,
    /// The lease's id, for logs and audits.
    pub lease_id: String,
    /// Usable while the lease is valid, on top of the DC's reserved floor.
    pub quota: Quota,
    /// Reserved out of the global budget in advance; usable even after expiry (strict mode).
    pub floor: Quota,
    /// Lifetime in milliseconds, counted from the send time of report `basis_seq`.
    pub ttl_ms: u64,
    /// Sequence number of the holder's report this lease answers: the holder's countdown starts
    /// when it sent that report.
    pub basis_seq: u64,
    /// The DC leases of the DC's earlier manager terms that the coordinator now counts under
    /// this holder (it moved them when this term's report said `counts_predecessor`): the term
    /// answers for its predecessor's pod leases within its own DC lease until they have all
    /// expired. Missing: none moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predecessor: Option<PredecessorLeases>,
}

/// What a DC lease says of the earlier term's DC leases moved under its holder
/// ([`DcLease::predecessor`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredecessorLeases {
    /// The largest of them still live (rate and burst).
    pub quota: Quota,
    /// The term (`DcReport.term`, the epoch of its pod leases) of the holder they were moved
    /// from: the pod leases of that term are the ones a continuation may take out of them.
    pub term: u64,
}

/// A pod sub-lease, cut by a DC manager from its DC lease.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodLease {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: CompactString,
    /// The pod's DC.
    pub dc: CompactString,
    /// The pod that holds it.
    pub pod: CompactString,
    /// The pod process (incarnation) it is addressed to: the one whose report it answers.
    pub incarnation: u64,
    /// The DC manager instance that issued it.
    pub issuer: CompactString,
    /// The lease's version: the issuing term's epoch and its count of grants of the limit.
    pub version: LeaseVersion,
    /// The lease's id, `<issuer>-<epoch>-<seq>`, for logs and audits.
    pub lease_id: CompactString,
    /// The rate and burst the pod may use while the lease is valid.
    pub quota: Quota,
    /// Lifetime in milliseconds, counted from the pod's send time of report `basis_seq`.
    pub ttl_ms: u64,
    /// Sequence number of the pod's report this lease answers.
    pub basis_seq: u64,
    /// The limit was removed (`leasehold limits rm`: its record runs retired, capacity zero): the
    /// pod answers its callers that the limit no longer exists instead of "rate limited".
    /// Missing: false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub limit_removed: bool,
    /// A continuation: a new manager term takes over the lease the pod holds from an earlier
    /// term. The pod applies it only while the lease it uses is exactly this version and
    /// unexpired, and then at most that lease's quota and never past its end; otherwise it
    /// refuses it. Sent only to pods whose reports carry `held`. Missing: an ordinary lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<LeaseVersion>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A pod's periodic demand report, which is also its heartbeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PodReport {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// The pod's DC.
    pub dc: String,
    /// The pod's id.
    pub pod: String,
    /// Random number a pod process draws once at start. A pod restarted under the same id is a
    /// new holder: its sequence numbers start again and leases answering the old process's
    /// reports never apply to it. Never derived from a wall clock.
    pub incarnation: u64,
    /// Strictly increasing per incarnation; the manager ignores a report not above the last it
    /// took.
    pub seq: u64,
    /// Length of the interval the counters cover.
    pub interval_ms: u64,
    /// Every request that wanted quota in the interval: admitted, rejected and still queued.
    pub offered: u64,
    /// Permits granted in the interval.
    pub admitted: u64,
    /// Requests denied in the interval.
    pub rejected: u64,
    /// Requests waiting for a permit when the report was built (a gauge).
    pub queued: u64,
    /// Upstream errors seen by the pod (5xx, and 429s an application reports as plain errors).
    pub errors: u64,
    /// Upstream calls answered 429 (Too Many Requests) in the interval, counted apart from
    /// `errors`: the signal adaptive limits follow. Missing (older pods): 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub upstream_429: u64,
    /// The pod's own view of its health: `false` leaves it out of the next split.
    pub healthy: bool,
    /// The pod is draining: `true` leaves it out of the next split.
    pub draining: bool,
    /// Capacity weight for weighted splits (1.0 = a standard pod).
    pub weight: f64,
    /// The newest lease the pod has applied; the issuer may forget all older ones.
    pub lease_in_use: Option<LeaseVersion>,
    /// What the lease in use grants and how long it has left. A pod that says it honours
    /// continuations (`PodLease::continues`); a new manager term continues this lease rather
    /// than waiting it out. Missing: the pod does not (or holds no unexpired lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldLease>,
    /// The pod's report periods this report stands for: 1, or for a quiet limit's report the
    /// periods it left out plus this one (`shared/core/src/quiet_reports.rs`). The DC manager counts
    /// it as that many demand samples and its calls as made over as many periods. Missing: 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub periods: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Most `PodReport::periods`: 600,000 ms of the shortest period, 10 ms.
pub const MAX_REPORT_PERIODS: u32 = 60_000;

/// The lease a pod uses, as its report describes it ([`PodReport::held`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldLease {
    /// The rate and burst it grants.
    pub quota: Quota,
    /// Its time left when the report was sent (pod clock), in milliseconds.
    pub left_ms: u64,
}

/// A DC manager's report to the coordinator (demand + heartbeat + lease ack).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcReport {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// The manager's DC.
    pub dc: String,
    /// The DC manager term's holder id.
    pub holder: String,
    /// The epoch of the manager's leadership term: a report from an older term than the one the
    /// coordinator already heard (a delayed message) never changes the DC's holder back.
    #[serde(default)]
    pub term: u64,
    /// The report's sequence number: a DC lease answering it names it as `basis_seq`.
    pub seq: u64,
    /// EWMA-smoothed offered demand of the DC's healthy pods.
    pub demand: Quota,
    /// Number of the DC's pods the manager counts as healthy.
    pub pods_healthy: u32,
    /// The newest DC lease the manager is bound by; older ones may be forgotten by the issuer.
    pub lease_in_use: Option<LeaseVersion>,
    /// The largest floor the DC's pods may still be spending under, once the manager knows it
    /// (none before every pod lease of earlier terms has expired). Once it fits the newest floor
    /// the coordinator named, the coordinator stops reserving older, larger ones.
    #[serde(default)]
    pub floor_in_use: Option<Quota>,
    /// The version of the newest floor the manager has taken (it never takes an older one). The
    /// coordinator stops reserving older, larger floors only once this is at least the version
    /// of the floor it names: a manager that has not yet read the newest floor may still move
    /// to an older one it has not seen either. Missing: never confirms.
    #[serde(default)]
    pub floor_version: Option<LeaseVersion>,
    /// Upstream calls (the pods' `admitted`) in the pod reports taken since the manager's last
    /// DC report. Missing (older managers): 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub upstream_calls: u64,
    /// Of those, calls answered 429 (the pods' `upstream_429`). Missing: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub upstream_429: u64,
    /// The term answers for its predecessors' pod leases (it counts them within its own DC
    /// lease and continues them): the coordinator may move the DC's earlier terms' DC leases
    /// under this holder (`DcLease::predecessor`). Missing: false (they stay counted
    /// apart until they expire).
    #[serde(default, skip_serializing_if = "is_false")]
    pub counts_predecessor: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DcReport {
    /// A report of `demand` from `holder`'s term `term` with one healthy pod and nothing in use or
    /// confirmed yet (struct-update syntax fills in the rest).
    pub fn new(limit: &str, dc: &str, holder: &str, term: u64, seq: u64, demand: Quota) -> Self {
        DcReport {
            v: SCHEMA_VERSION,
            limit: limit.into(),
            dc: dc.into(),
            holder: holder.into(),
            term,
            seq,
            demand,
            pods_healthy: 1,
            lease_in_use: None,
            floor_in_use: None,
            floor_version: None,
            upstream_calls: 0,
            upstream_429: 0,
            counts_predecessor: false,
        }
    }
}

/// A holder gives back its lease for good (graceful drain). Idempotent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LeaseReturn {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// The holder's DC.
    pub dc: String,
    /// The holder that gives its leases back.
    pub holder: String,
    /// The holder process (the pod's `incarnation`) that gives its leases back.
    pub incarnation: u64,
    /// The holder has stopped using every lease and will apply no further one.
    pub last_version: Option<LeaseVersion>,
}

/// The issuer's confirmation of a [`LeaseReturn`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReturnAck {
    /// Schema version: 1.
    #[serde(default = "v1")]
    pub v: u32,
    /// The limit's name.
    pub limit: String,
    /// The holder's DC.
    pub dc: String,
    /// The holder whose return is confirmed.
    pub holder: String,
    /// The holder process (incarnation) whose return is confirmed.
    pub incarnation: u64,
}

pub(super) fn check_quota(field: &'static str, q: &Quota) -> Result<(), WireError> {
    // 10^12 milli = 10^9 requests/s: far beyond any real limit, keeps sums overflow-free.
    const MAX: u64 = 1_000_000_000_000;
    if q.rate_milli_per_s > MAX || q.burst_milli > MAX {
        return Err(WireError::Invalid { field, reason: "amount above 10^9".into() });
    }
    Ok(())
}

impl WireMessage for DcLease {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("dc", &self.dc)?;
        check_id("holder", &self.holder)?;
        check_id("lease_id", &self.lease_id)?;
        check_quota("quota", &self.quota)?;
        check_quota("floor", &self.floor)?;
        check_ttl(self.ttl_ms)
    }
}

impl WireMessage for PodLease {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("dc", &self.dc)?;
        check_id("pod", &self.pod)?;
        check_id("issuer", &self.issuer)?;
        check_id("lease_id", &self.lease_id)?;
        check_quota("quota", &self.quota)?;
        check_ttl(self.ttl_ms)
    }
}

impl WireMessage for PodReport {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("dc", &self.dc)?;
        check_id("pod", &self.pod)?;
        if self.interval_ms == 0 || self.interval_ms > 600_000 {
            return Err(WireError::Invalid {
                field: "interval_ms",
                reason: format!("{} not in 1..=600000", self.interval_ms),
            });
        }
        if self.periods == 0 || self.periods > MAX_REPORT_PERIODS {
            let reason = format!("{} not in 1..={MAX_REPORT_PERIODS}", self.periods);
            return Err(WireError::Invalid { field: "periods", reason });
        }
        if !(self.weight.is_finite() && self.weight > 0.0 && self.weight <= super::MAX_POD_WEIGHT) {
            let reason = format!("{} not in (0, {}]", self.weight, super::MAX_POD_WEIGHT);
            return Err(WireError::Invalid { field: "weight", reason });
        }
        // Counters are per interval; anything claiming more than 10^9 requests/s is not real.
        let cap = self.interval_ms.saturating_mul(1_000_000);
        let counters = [
            ("offered", self.offered),
            ("admitted", self.admitted),
            ("rejected", self.rejected),
            ("upstream_429", self.upstream_429),
        ];
        for (field, n) in counters {
            if n > cap {
                return Err(WireError::Invalid { field, reason: format!("{n} is above 10^9/s") });
            }
        }
        Ok(())
    }
}

impl WireMessage for DcReport {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("dc", &self.dc)?;
        check_id("holder", &self.holder)?;
        check_quota("demand", &self.demand)?;
        self.floor_in_use.as_ref().map_or(Ok(()), |f| check_quota("floor_in_use", f))
    }
}

impl WireMessage for LeaseReturn {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("dc", &self.dc)?;
        check_id("holder", &self.holder)
    }
}

impl WireMessage for ReturnAck {
    fn validate(&self) -> Result<(), WireError> {
        check_id("limit", &self.limit)?;
        check_id("dc", &self.dc)?;
        check_id("holder", &self.holder)
    }
}
