use crate::allocator::AllocMode;
use crate::expiry::ExpiryPolicy;
use crate::quota::Quota;
use crate::InvalidSetting;
use serde::{Deserialize, Serialize};

/// How a DC lease is divided among healthy pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitMode {
    /// Equal shares (the default, as the partner API at 1,000 QPS was designed).
    #[default]
    Equal,
    /// In proportion to each pod's reported capacity weight.
    Weighted,
    /// By each pod's smoothed demand (water-filling).
    Demand,
}

/// What a holder may use once its lease expired and no renewal came.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum FailMode {
    /// Only the floor reserved out of the global budget in advance: never over the limit.
    #[default]
    Strict,
    /// Floor plus an explicit emergency allowance outside the budget; overshoot ≤ Σ allowances.
    BestEffort {
        /// The allowance, used beyond the floor and outside the limit.
        emergency: Quota,
    },
}

/// How a limit's DC managers run its pod leases, as the limit's definition says (`split`,
/// `fail_mode` and each DC's `emergency`). The coordinator writes them into the limit's ledger
/// record, where DC managers read them with the record. What a definition leaves out, each DC
/// manager takes from its own settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodRules {
    /// How to divide the DC lease among the pods. Missing: the DC manager's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitMode>,
    /// What the pods may use once the DC lease ended. Missing: the DC manager's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_mode: Option<FailRule>,
}

/// A limit's fail mode, for every DC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "mode")]
pub enum FailRule {
    /// Every DC: the floor only.
    Strict,
    /// Each listed DC may use its emergency allowance after its DC lease ends; a DC not listed
    /// runs strict.
    BestEffort {
        /// Per DC, its emergency allowance.
        emergency: std::collections::BTreeMap<String, Quota>,
    },
}

impl PodRules {
    /// Whether the definition sets no rule (every DC manager uses its own settings).
    pub fn is_empty(&self) -> bool {
        *self == PodRules::default()
    }

    /// The DC manager settings `base` (its own) with these rules applied for `dc`.
    pub fn apply(&self, base: &DcManagerConfig, dc: &str) -> (SplitMode, FailMode) {
        let split = self.split.unwrap_or(base.split);
        let fail_mode = match &self.fail_mode {
            None => base.fail_mode,
            Some(FailRule::Strict) => FailMode::Strict,
            Some(FailRule::BestEffort { emergency }) => match emergency.get(dc) {
                Some(e) => FailMode::BestEffort { emergency: *e },
                None => FailMode::Strict,
            },
        };
        (split, fail_mode)
    }
}

/// Default `heartbeat_timeout_ms`: a pod not heard from for longer gets no share in a split.
pub const DEFAULT_HEARTBEAT_TIMEOUT_MS: u64 = 1_500;

/// The settings of a DC manager core for one limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DcManagerConfig {
    /// The limit this core serves (a DC manager's settings: the one limit it serves; none or
    /// `"*"`: every limit).
    #[serde(default)]
    pub limit: String,
    /// The DC it manages.
    pub dc: String,
    /// This manager instance (a restart is a new DC-lease holder).
    pub instance: String,
    /// Fencing epoch for pod leases (from the DC's leader election).
    pub epoch: u64,
    /// Lifetime of a pod lease, in milliseconds.
    pub pod_ttl_ms: u64,
    /// How often a pod's lease is renewed, in milliseconds.
    pub renew_interval_ms: u64,
    /// A pod silent for longer is excluded from the next split (its lease is not revoked).
    pub heartbeat_timeout_ms: u64,
    /// The timeout instead (if longer) for a pod the manager last heard before it dropped a
    /// report batch unread (its inbound queue full or too old): that pod's silence may be the
    /// manager's own doing (`Pods::note_reports_dropped`). Without it an overloaded manager took
    /// pods whose reports it dropped for gone, the DC's demand and pod count moved, the
    /// coordinator moved budget and every move re-split every pod: more work, more drops
    /// (`bench control-plane`, 100 pods × 1,000 limits × 2 DCs). Also how far back of the clock a
    /// pod's silence may be counted while the manager reads its reports late
    /// (`Pods::note_reports_read_through`); 0 turns both off.
    #[serde(default = "default_heartbeat_timeout_after_drops_ms")]
    pub heartbeat_timeout_after_drops_ms: u64,
    /// A pod whose upstream errors exceed this share of its admissions is excluded.
    pub max_error_ratio: f64,
    /// How to divide the DC lease among the pods.
    pub split: SplitMode,
    /// Smoothing factor of the pods' demand (EWMA α, in (0, 1]).
    pub ewma_alpha: f64,
    /// The manager's clock margins for pod leases.
    pub expiry: ExpiryPolicy,
    /// What the pods may use once the DC lease ended unrenewed.
    pub fail_mode: FailMode,
    /// Shortest pod lease worth issuing; below it (parent about to expire) pods keep what they have.
    pub min_pod_ttl_ms: u64,
    /// Most pods the manager keeps track of; a new pod beyond them is refused.
    pub max_pods: usize,
    /// Joins and growth are batched: a pod's report triggers a split of its own only if no split
    /// (or growth check) ran in the last `event_pass_gap_ms`; otherwise it waits for the next
    /// report after the gap, or the next tick. A split costs O(pods), so a join storm costs
    /// O(pods) per gap, not per joining pod.
    #[serde(default = "default_event_pass_gap_ms")]
    pub event_pass_gap_ms: u64,
    /// What an earlier term of this DC said bounds its pod leases (its [`super::TermRecord`],
    /// read from the DC's leader key by the driver): a core waits them out, and its own bounds,
    /// before it uses the floor or the emergency allowance. Never an operator setting.
    #[serde(skip)]
    pub inherited: Option<super::PodLeaseBounds>,
    /// Negative controls only: brings back holes listed in docs/FINDINGS.md. Never read from a
    /// file.
    #[serde(skip)]
    pub bugs: crate::bugs::KnownBugs,
}

fn default_event_pass_gap_ms() -> u64 {
    100
}

fn default_heartbeat_timeout_after_drops_ms() -> u64 {
    15_000
}

/// A pod silent this long is forgotten (its leases count until they expire).
pub const FORGET_SILENT_AFTER_MS: u64 = 60_000;

impl DcManagerConfig {
    /// Settings for limit `limit` in DC `dc` as instance `instance`, every other setting its
    /// default.
    pub fn new(limit: &str, dc: &str, instance: &str) -> Self {
        DcManagerConfig {
            limit: limit.into(),
            dc: dc.into(),
            instance: instance.into(),
            epoch: 1,
            pod_ttl_ms: 5_000,
            renew_interval_ms: 1_000,
            heartbeat_timeout_ms: DEFAULT_HEARTBEAT_TIMEOUT_MS,
            heartbeat_timeout_after_drops_ms: default_heartbeat_timeout_after_drops_ms(),
            max_error_ratio: 0.5,
            split: SplitMode::Equal,
            ewma_alpha: crate::ewma::DEFAULT_ALPHA,
            expiry: ExpiryPolicy::default(),
            fail_mode: FailMode::Strict,
            min_pod_ttl_ms: 250,
            max_pods: 10_000,
            event_pass_gap_ms: default_event_pass_gap_ms(),
            inherited: None,
            bugs: Default::default(),
        }
    }

    /// How the DC lease is split among pods: always water-fill.
    pub fn alloc_mode(&self) -> AllocMode {
        AllocMode::WaterFill
    }

    /// Checks every rule of the settings.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.expiry.validate()?;
        if self.pod_ttl_ms > super::POD_TTL_MS_MAX {
            return Err(InvalidSetting::PodTtlAboveMax { pod_ttl_ms: self.pod_ttl_ms, max_ms: super::POD_TTL_MS_MAX });
        }
        if self.renew_interval_ms == 0 || self.pod_ttl_ms <= self.renew_interval_ms {
            return Err(InvalidSetting::PodTtlNotAboveRenew {
                pod_ttl_ms: self.pod_ttl_ms,
                renew_interval_ms: self.renew_interval_ms,
            });
        }
        if self.event_pass_gap_ms > self.renew_interval_ms {
            return Err(InvalidSetting::EventPassGapAboveRenew {
                event_pass_gap_ms: self.event_pass_gap_ms,
                renew_interval_ms: self.renew_interval_ms,
            });
        }
        if self.heartbeat_timeout_after_drops_ms > FORGET_SILENT_AFTER_MS {
            return Err(InvalidSetting::HeartbeatAfterDropsAboveMax {
                timeout_ms: self.heartbeat_timeout_after_drops_ms,
                max_ms: FORGET_SILENT_AFTER_MS,
            });
        }
        if !(0.0..=1.0).contains(&self.ewma_alpha) || self.ewma_alpha == 0.0 {
            return Err(InvalidSetting::EwmaAlpha(self.ewma_alpha));
        }
        Ok(())
    }
}
