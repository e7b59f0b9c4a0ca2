//! Limits as data: the definitions in `lh_limits` this replica follows, and what a leading term
//! does when one changes.
//!
//! * **Changed**: the term takes the new definition in place (`CoordinatorCore::reconfigure`:
//!   a lower R or B shrinks the books at once and the leases already out run out; a raise
//!   applies at once) and writes the record.
//! * **Added**: the term reads the limit's record (normally none), resumes a core from it as a
//!   takeover would (the fence says whether a record was ever written: if so and it is missing,
//!   it was lost and the term waits it out) and writes the first record.
//! * **Removed**: the term runs the limit retired (capacity and floors zero): DC leases end,
//!   floors are named zero, pods deny once what they hold has ended. The record stays, so a
//!   later term finds it and keeps it retired; defining the limit again takes it up from there.
//! * **Refused** (unreadable, or not valid for this coordinator): logged and reported in the
//!   status; the term keeps running what it runs. A term that takes over runs such a limit on
//!   its record's capacity and floors (`LimitConfig::from_record`), never on an older definition
//!   (another replica may have accepted the new one and applied it).
//!
//! A takeover re-reads every definition first ([`Definitions::sync`]): a term never starts from
//! a definition older than one its predecessor applied (the watch may lag).

use super::{resume_logged, Leader};
use crate::settings::{LimitConfigError, Settings};
use leasehold_core::coordinator::{LimitConfig, Stored};
use leasehold_core::wire::LedgerRecord;
use leasehold_nats::limits_store::LimitEvent;
use std::collections::BTreeMap;
use tracing::{info, warn};

/// What a definition event changes.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Defined(Box<LimitConfig>),
    Removed(String),
    Refused(LimitConfigError),
}

/// The definitions this replica follows, with the checks every one passes.
pub struct Definitions {
    settings: Settings,
    defined: BTreeMap<String, LimitConfig>,
    refused: BTreeMap<String, String>,
    /// The newest revision seen per key (a re-opened watch delivers each key again).
    seen: BTreeMap<String, u64>,
}

impl Definitions {
    pub fn new(settings: Settings) -> Self {
        Definitions { settings, defined: BTreeMap::new(), refused: BTreeMap::new(), seen: BTreeMap::new() }
    }

    pub fn names(&self) -> Vec<String> {
        self.defined.keys().cloned().collect()
    }

    pub fn get(&self, limit: &str) -> Option<&LimitConfig> {
        self.defined.get(limit)
    }

    /// The longest DC-lease TTL of any definition (a new term's fence carries it).
    pub fn longest_dc_ttl_ms(&self) -> u64 {
        self.defined.values().map(|l| l.dc_ttl_ms).max().unwrap_or(0)
    }

    /// The shortest renew interval of any definition: how often the leader ticks.
    pub fn tick_ms(&self) -> u64 {
        self.defined.values().map(|l| l.renew_interval_ms).min().unwrap_or(1_000)
    }

    /// What a term runs `limit` on, given its record: its definition; without a usable one, the
    /// record's own capacity and floors (a refused definition), or retired (none: removed).
    pub fn config_for(&self, limit: &str, record: Option<&LedgerRecord>) -> LimitConfig {
        if let Some(cfg) = self.defined.get(limit) {
            return cfg.clone();
        }
        let rec = record.cloned().unwrap_or_else(|| LedgerRecord::empty(limit, 0, ""));
        let held = LimitConfig::from_record(&rec);
        if self.refused.contains_key(limit) {
            held
        } else {
            held.retired()
        }
    }

    /// Take an event in. `None`: nothing new (a revision already seen).
    pub fn apply(&mut self, e: LimitEvent) -> Option<Change> {
        if self.seen.get(&e.key).is_some_and(|r| e.revision <= *r) {
            return None;
        }
        self.seen.insert(e.key.clone(), e.revision);
        let def = match e.def {
            None => {
                self.refused.remove(&e.key);
                return self.defined.remove(&e.key).map(|_| Change::Removed(e.key));
            }
            Some(def) => def,
        };
        match def.map_err(LimitConfigError::from).and_then(|d| self.settings.limit_config(&d)) {
            Ok(cfg) => {
                self.refused.remove(&e.key);
                self.defined.insert(e.key, cfg.clone());
                Some(Change::Defined(Box::new(cfg)))
            }
            Err(cause) => {
                // Not the one before: after a takeover the record's capacity and floors rule
                // (another replica may have accepted and applied it; see `config_for`).
                self.defined.remove(&e.key);
                self.refused.insert(e.key.clone(), cause.to_string());
                Some(Change::Refused(cause))
            }
        }
    }

    /// Take in every definition stored now (a takeover re-reads them all, so that a term never
    /// runs a definition older than one its predecessor applied); a limit defined here but
    /// absent from `stored` was removed.
    pub fn sync(&mut self, stored: Vec<LimitEvent>) {
        let present: std::collections::BTreeSet<String> = stored.iter().map(|e| e.key.clone()).collect();
        self.defined.retain(|k, _| present.contains(k));
        self.refused.retain(|k, _| present.contains(k));
        for e in stored {
            self.apply(e);
        }
    }

    pub fn refused(&self) -> &BTreeMap<String, String> {
        &self.refused
    }
}

impl Leader {
    /// A definition changed in `lh_limits` (or was there when the watch began).
    pub async fn on_limit(&mut self, event: LimitEvent) {
        let key = event.key.clone();
        let Some(change) = self.definitions.apply(event) else { return };
        self.left_out.remove(&key); // a new definition is tried again
        self.refresh_refused();
        let cfg = match change {
            Change::Refused(cause) => {
                warn!(limit = %key, %cause, "definition refused; the limit runs on as it does");
                return;
            }
            Change::Defined(cfg) => *cfg,
            Change::Removed(_) => {
                info!(limit = %key, "limit removed: it runs retired until its leases end");
                match self.leadership.as_ref().and_then(|t| t.limits.get(&key)) {
                    Some(s) => s.core.config().retired(),
                    None => return,
                }
            }
        };
        self.status.definition_changes += 1;
        if self.leadership.is_none() {
            return; // a later term reads it
        }
        let now = self.now_ns();
        match self.leadership.as_mut().and_then(|t| t.limits.get_mut(&key)) {
            Some(state) => {
                info!(limit = %key, rate_per_s = cfg.quota.rate_per_s(), burst = cfg.quota.burst(), "definition applied");
                state.core.reconfigure(cfg, now).expect("the same limit");
            }
            None => {
                if !self.add_to_term(cfg).await {
                    return;
                }
            }
        }
        if self.acting() {
            self.write(&key).await;
        }
        self.refresh_books();
    }

    /// A limit this term has no books for: resume them from its record, as a takeover would.
    /// False if the record cannot be read, or its group was written by someone else (the term
    /// steps down rather than lead without it).
    async fn add_to_term(&mut self, cfg: LimitConfig) -> bool {
        let limit = cfg.limit.clone();
        let rec = match self.read_record(&limit).await {
            Ok(found) => found,
            Err(e) => {
                warn!(cause = %e, "cannot add the limit");
                self.step_down("a ledger record cannot be read");
                return false;
            }
        };
        let Some(term) = self.leadership.as_ref() else { return false };
        let stored = Stored::classify(&limit, rec.as_ref(), Some(&term.fence.1));
        let epoch = self.status.epoch;
        let state = resume_logged(cfg, &self.id, epoch, stored, self.now_ns());
        info!(limit = %limit, "limit added");
        if let Some(t) = self.leadership.as_mut() {
            t.limits.insert(limit, state);
        }
        true
    }

    /// The status's definitions and refusals: those this replica cannot run, and those its
    /// term left out of a full ledger group.
    pub(crate) fn refresh_refused(&mut self) {
        self.status.definitions = self.definitions.names().len();
        let mut refused = self.definitions.refused().clone();
        refused.extend(self.left_out.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.status.definitions_refused = refused;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::limits::LimitDef;
    use leasehold_core::quota::Quota;

    fn event(key: &str, revision: u64, rate_per_s: u64) -> LimitEvent {
        let cfg = LimitConfig::new(key, Quota::per_s(rate_per_s, 10), &[("bkk", Quota::per_s(5, 0))]);
        LimitEvent { key: key.into(), revision, def: Some(Ok(LimitDef::from_config(&cfg))) }
    }

    /// FINDINGS F33: a refused definition left the one before in force, so a
    /// replica that refused a lowered limit (its own `leader_ttl_ms` makes it invalid) could take
    /// over and grant the old, higher limit for good.
    #[test]
    fn a_refused_definition_runs_the_limit_on_its_record_never_on_the_one_before() {
        let mut d = Definitions::new(Settings::default());
        assert!(matches!(d.apply(event("api", 1, 1_000)), Some(Change::Defined(_))));
        let mut bad = event("api", 2, 400);
        if let Some(Ok(def)) = bad.def.as_mut() {
            def.dc_ttl_ms = 1_000; // below twice the default leader_ttl_ms: refused here
        }
        assert!(matches!(d.apply(bad), Some(Change::Refused(_))));
        let mut rec = LedgerRecord::empty("api", 3, "coord-a");
        rec.capacity = Some(Quota::per_s(400, 10));
        let cfg = d.config_for("api", Some(&rec));
        assert_eq!(cfg.quota, Quota::per_s(400, 10), "the record's capacity, not the older 1,000/s");
        assert!(!cfg.is_retired());
    }

    #[test]
    fn a_takeover_sync_drops_what_was_removed_and_skips_revisions_already_seen() {
        let mut d = Definitions::new(Settings::default());
        d.apply(event("api", 1, 1_000));
        d.apply(event("gone", 2, 10));
        d.sync(vec![event("api", 5, 600)]);
        assert_eq!(d.names(), vec!["api".to_string()], "gone was removed while the watch lagged");
        assert_eq!(d.get("api").map(|c| c.quota), Some(Quota::per_s(600, 10)), "the newer definition");
        assert_eq!(d.apply(event("api", 5, 600)), None, "the watch delivering it again changes nothing");
        assert!(d.config_for("gone", None).is_retired());
    }
}
