//! A limit's definition changed while this term leads it (limits as data, adaptive R, a limit
//! removed): the same books take the new definition in place.
//!
//! **Never creates quota.** A lower R or B shrinks the ledger's capacity at once
//! ([`Ledger::set_capacity`](crate::ledger::Ledger::set_capacity)): every DC lease already out
//! is *inherited* and keeps counting until it is released or expires, and every grant from then
//! on fits the new capacity with what was granted since. So no instant sees Σ above the old
//! limit, and from one DC-lease lifetime after the change (`dc_ttl_ms·(1+max_drift) + grace +
//! egress spread`, the old lifetime if the change shortened it) none sees Σ above the new one.
//! A raise applies at once. Floors move as in `floors.rs`: a lowered floor keeps counting until
//! its DC confirms it, a raised one waits for headroom. A lease's version keeps rising across
//! the change (same epoch, the sequence goes on), so DC managers take the leases cut under it.
//!
//! A changed expiry policy (drift, grace, egress spread) changes how long the leases already out
//! may be spent by the rules the change asserts: each is then counted for a full lifetime under
//! the new policy from now, as a new leader counts what it adopts (waste, never excess), and so
//! is a lost record's wait, if one is running.
//!
//! A **removed** limit runs on as [`LimitConfig::retired`]: capacity zero, every floor zero, so
//! DC leases end, floors are named zero, and pods deny once what they hold has ended.

use super::{CoordinatorCore, LimitConfig};
use crate::allocator::Rebalancer;
use crate::expiry::NS_PER_MS;
use crate::quota::Quota;

/// Why a definition cannot replace the one a term runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReconfigureError {
    #[error("definition of limit {got} given to the books of limit {limit}")]
    /// The definition is of another limit.
    OtherLimit {
        /// The limit the term runs.
        limit: String,
        /// The limit the definition names.
        got: String,
    },
}

impl LimitConfig {
    /// What a removed limit runs on until its leases have ended: nothing to grant, every floor
    /// zero (its DCs drop what they hold and confirm), the same timings and DCs.
    pub fn retired(&self) -> LimitConfig {
        let mut c = self.clone();
        c.quota = Quota::ZERO;
        c.dcs.iter_mut().for_each(|d| d.floor = Quota::ZERO);
        // No emergency allowance either: a removed limit admits nothing once its leases end.
        c.pods.fail_mode = Some(crate::dc_manager::FailRule::Strict);
        c
    }

    /// What a term runs a limit on when it finds the limit's record but no definition it can
    /// use (an unreadable or refused one in `lh_limits`): the record's capacity and floors, its
    /// DCs, its longest DC-lease TTL and its writer's expiry policy (wide margins if the record
    /// predates it). Never more than the record's writer ran with.
    pub fn from_record(rec: &crate::wire::LedgerRecord) -> LimitConfig {
        let mut dcs: Vec<&String> =
            rec.floors.keys().chain(rec.leases.iter().map(|l| &l.dc)).chain(rec.dc_holders.keys()).collect();
        dcs.sort_unstable();
        dcs.dedup();
        let floors: Vec<(&str, Quota)> =
            dcs.iter().map(|dc| (dc.as_str(), rec.floors.get(*dc).copied().unwrap_or(Quota::ZERO))).collect();
        let mut c = LimitConfig::new(&rec.limit, rec.capacity.unwrap_or(Quota::ZERO), &floors);
        c.dc_ttl_ms = rec.leases.iter().map(|l| l.ttl_ms).max().unwrap_or(c.dc_ttl_ms).max(c.dc_ttl_ms);
        // The writer's policy; a record without one (an older writer) gets wide margins.
        let wide = crate::expiry::ExpiryPolicy { max_drift: 0.05, grace_ms: 1_000, egress_spread_ms: 1_000 };
        c.expiry = rec.expiry.unwrap_or(wide);
        c.pods = rec.pod_rules.clone();
        c
    }

    /// True for [`LimitConfig::retired`]'s result: nothing may be granted or reserved.
    pub fn is_retired(&self) -> bool {
        self.quota == Quota::ZERO && self.floors() == Quota::ZERO
    }
}

impl CoordinatorCore {
    /// Take `cfg` as this limit's definition from `now_ns` on, in this term (see the module
    /// docs). Returns whether the books' capacity shrank (a record should be written at once).
    pub fn reconfigure(&mut self, cfg: LimitConfig, now_ns: u64) -> Result<bool, ReconfigureError> {
        if cfg.limit != self.cfg.limit {
            return Err(ReconfigureError::OtherLimit { limit: self.cfg.limit.clone(), got: cfg.limit });
        }
        let adaptive = super::adaptive_limit::Adaptive::reconfigured(self.adaptive.as_ref(), &cfg);
        let before = self.effective_quota();
        let shrank = !self.cfg.quota.fits_in(&cfg.quota);
        self.ledger.expire(now_ns);
        self.prune_leases();
        if cfg.expiry != self.cfg.expiry {
            self.recount_under(&cfg, now_ns);
            // A lost record's leases are not on the books: wait them out under the new policy
            // too, from now (FINDINGS F32: a wider drift bound did not lengthen the wait).
            if let Some(ttl_ms) = self.lost_wait_dc_ttl_ms.filter(|_| now_ns < self.issue_from_ns) {
                self.issue_from_ns = self.issue_from_ns.max(cfg.expiry.issuer_live_until_ns(now_ns, ttl_ms));
            }
        }
        if shrank && cfg.bugs.reconfigure_forgets_leases() {
            self.ledger = crate::ledger::Ledger::new(cfg.quota, self.epoch());
            self.leases.clear();
        }
        // DCs added get a view; DCs dropped are no longer heard (their leases count until they
        // end, their floors stay reserved: they cannot confirm a lower one).
        let mut dcs = std::mem::take(&mut self.dcs);
        self.dcs = cfg.dcs.iter().map(|d| (d.name.clone(), dcs.remove(&d.name).unwrap_or_default())).collect();
        self.cfg = cfg;
        self.adaptive = adaptive;
        let capacity = self.effective_quota();
        self.take_capacity(capacity, now_ns);
        Ok(shrank || !before.fits_in(&capacity))
    }

    /// Run the books with `capacity` from `now_ns` on: the one safe path of a limit changed live
    /// and of an adaptive limit's effective R. A smaller capacity shrinks the books at once (every
    /// lease out is inherited and counts until it ends, grants fit the new capacity with what was
    /// granted since), a larger one applies at once; the split starts afresh (the old one may
    /// not fit), and floors move towards the configured ones.
    pub(super) fn take_capacity(&mut self, capacity: Quota, now_ns: u64) {
        self.ledger.set_capacity(capacity);
        let interval = self.cfg.min_realloc_interval_ms * NS_PER_MS;
        self.rate_split = Rebalancer::new(self.cfg.hysteresis, interval);
        self.burst_split = Rebalancer::new(self.cfg.hysteresis, interval);
        self.settle_floors(now_ns);
    }

    /// Count every lease out for a full lifetime under `cfg`'s expiry policy from now (if longer
    /// than it is counted already), as a leader counts what it adopts.
    fn recount_under(&mut self, cfg: &LimitConfig, now_ns: u64) {
        // By the holder each is counted under (a later term's, for a lease moved to it).
        for ((counted, version), l) in &self.leases {
            let until = cfg.expiry.issuer_live_until_ns(now_ns, l.ttl_ms);
            self.ledger.count_until(counted, *version, until);
        }
    }
}
