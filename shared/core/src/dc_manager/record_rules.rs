//! [`RecordRules`]: what a DC manager takes from each limit's ledger record besides its floor
//! and DC leases (whether the limit was removed, and its pod rules), taken only from a newer
//! revision of the record's key than the one it took them from last.
//!
//! The manager reads a record two ways: its watch (which replays the key's kept history when it
//! is opened again, oldest first) and a direct read when a term starts a limit's core (the
//! newest). Without the revision check an older record read after a newer one brings its rules
//! back: a removed limit's best-effort allowance, say, after its removal.

use super::config::{DcManagerConfig, FailMode, PodRules, SplitMode};
use super::DcManagerCore;
use crate::bugs::KnownBugs;
use crate::wire::LedgerRecord;
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq)]
struct Taken {
    revision: u64,
    removed: bool,
    rules: PodRules,
}

/// The newest removal and pod rules taken per limit from the ledger records, by revision.
#[derive(Clone, Debug, Default)]
pub struct RecordRules {
    limits: BTreeMap<String, Taken>,
    bugs: KnownBugs,
}

impl RecordRules {
    /// With known bugs switched on (negative controls only).
    pub fn with_bugs(bugs: KnownBugs) -> Self {
        RecordRules { limits: BTreeMap::new(), bugs }
    }

    /// Take `rec`'s removal and rules if `revision` (of its key in the ledger bucket) is newer
    /// than the last taken for its limit. Returns whether it was taken.
    pub fn take(&mut self, revision: u64, rec: &LedgerRecord) -> bool {
        let older = self.limits.get(&rec.limit).is_some_and(|t| t.revision >= revision);
        if older && !self.bugs.record_rules_take_any_revision() {
            return false;
        }
        let taken = Taken { revision, removed: rec.limit_removed(), rules: rec.pod_rules.clone() };
        self.limits.insert(rec.limit.clone(), taken);
        true
    }

    /// The newest record taken runs the limit retired (removed from `lh_limits`).
    pub fn removed(&self, limit: &str) -> bool {
        self.limits.get(limit).is_some_and(|t| t.removed)
    }

    /// Run `core` (a term's core of one limit) on what was taken for its limit: removed or not,
    /// and its split and fail mode over the manager's own settings `base` (its DC's).
    pub fn apply(&self, core: &mut DcManagerCore, base: &DcManagerConfig) {
        let limit = core.config().limit.as_str();
        let (removed, (split, fail_mode)) = (self.removed(limit), self.policy(limit, base, &base.dc));
        core.set_limit_removed(removed);
        core.set_policy(split, fail_mode);
    }

    /// `limit`'s split and fail mode at DC `dc`: its record's rules over the manager's own
    /// settings `base`, and strict, whatever anything says, once the limit was removed.
    pub fn policy(&self, limit: &str, base: &DcManagerConfig, dc: &str) -> (SplitMode, FailMode) {
        let taken = self.limits.get(limit).cloned().unwrap_or_default();
        let (split, fail_mode) = taken.rules.apply(base, dc);
        (split, if taken.removed { FailMode::Strict } else { fail_mode })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dc_manager::FailRule;
    use crate::quota::Quota;

    fn best_effort(limit: &str) -> LedgerRecord {
        let emergency = [("bkk".to_string(), Quota::per_s(20, 0))].into();
        LedgerRecord {
            capacity: Some(Quota::per_s(100, 10)),
            pod_rules: PodRules { split: None, fail_mode: Some(FailRule::BestEffort { emergency }) },
            ..LedgerRecord::empty(limit, 1, "c")
        }
    }

    fn removed(limit: &str) -> LedgerRecord {
        LedgerRecord {
            capacity: Some(Quota::ZERO),
            pod_rules: PodRules { split: None, fail_mode: Some(FailRule::Strict) },
            ..LedgerRecord::empty(limit, 1, "c")
        }
    }

    #[test]
    fn an_older_record_read_after_a_newer_one_changes_nothing() {
        // FINDINGS F34: the newest record (the removal) read directly when a core starts,
        // then the watch, opened again, replays the key's history from an older version.
        let base = DcManagerConfig::new("api", "bkk", "m");
        let mut r = RecordRules::default();
        assert!(r.take(9, &removed("api")));
        assert!(!r.take(7, &best_effort("api")), "an older revision is ignored");
        assert!(r.removed("api"));
        assert_eq!(r.policy("api", &base, "bkk").1, FailMode::Strict);
        assert!(!r.take(9, &best_effort("api")), "the same revision again changes nothing");
        assert!(r.take(10, &best_effort("api")), "a newer one is taken");
        assert_eq!(r.policy("api", &base, "bkk").1, FailMode::BestEffort { emergency: Quota::per_s(20, 0) });
        assert_eq!(r.policy("api", &base, "eu").1, FailMode::Strict, "a DC without an allowance runs strict");
    }

    #[test]
    fn a_removed_limit_runs_strict_even_when_its_record_names_no_rules() {
        // A removal written by a coordinator that does not write `pod_rules`, read by a manager
        // whose own settings are best-effort.
        let mut base = DcManagerConfig::new("api", "bkk", "m");
        base.fail_mode = FailMode::BestEffort { emergency: Quota::per_s(25, 0) };
        let mut r = RecordRules::default();
        let old_writer = LedgerRecord { capacity: Some(Quota::ZERO), ..LedgerRecord::empty("api", 1, "c") };
        r.take(3, &old_writer);
        assert_eq!(r.policy("api", &base, "bkk"), (base.split, FailMode::Strict));
        assert_eq!(r.policy("other", &base, "bkk").1, base.fail_mode, "no record: the manager's own");
    }
}
