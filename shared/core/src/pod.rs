//! The pod's side of the protocol, sans I/O: turns leases into bucket parameters and counters
//! into demand reports. The bucket itself is shared (`Arc`) with the request path.

use crate::bucket::TokenBucket;
use crate::expiry::NS_PER_MS;
use crate::lease_intake::{LeaseFence, LeaseRejection, SentLog};
use crate::quota::Quota;
use crate::wire::{HeldLease, LeaseReturn, LeaseVersion, PodLease, PodReport, ReturnAck, SCHEMA_VERSION};
use std::sync::Arc;

/// A pod's settings for one limit.
#[derive(Clone, Debug)]
pub struct PodConfig {
    /// The limit's name.
    pub limit: String,
    /// The pod's DC.
    pub dc: String,
    /// The pod's id (its NATS subjects are named by it).
    pub pod: String,
    /// Drawn at random once per process start (see [`PodReport::incarnation`]).
    pub incarnation: u64,
    /// Capacity weight for weighted splits (1.0 = a standard pod).
    pub weight: f64,
    /// Negative controls only (see [`crate::bugs`]).
    pub bugs: crate::bugs::KnownBugs,
}

/// Counters for one report interval, gathered by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalCounters {
    /// Requests that wanted quota in the interval, whatever became of them.
    pub offered: u64,
    /// Permits granted in the interval.
    pub admitted: u64,
    /// Requests denied in the interval.
    pub rejected: u64,
    /// Requests waiting for a permit when the report is built (a gauge).
    pub queued: u64,
    /// Upstream errors other than 429s the driver counts apart (`upstream_429`).
    pub errors: u64,
    /// Upstream calls answered 429.
    pub upstream_429: u64,
}

/// The lease the bucket currently enforces.
#[derive(Clone, Debug, PartialEq)]
pub struct AppliedLease {
    /// The lease's version.
    pub version: LeaseVersion,
    /// The rate and burst it grants.
    pub quota: Quota,
    /// Pod clock.
    pub expires_at_ns: u64,
    /// The DC manager term that issued it (its holder id).
    pub issuer: String,
    /// The process the lease was addressed to (this one's incarnation, unless a known bug is on):
    /// the issuer counts it under that holder.
    pub incarnation: u64,
    /// The issuer says the limit was removed.
    pub limit_removed: bool,
}

/// Clones share the token bucket (the request path's handle): a model checker that clones whole
/// states must judge them by [`PodCore::applied`], never by the bucket.
#[derive(Clone)]
pub struct PodCore {
    cfg: PodConfig,
    bucket: Arc<TokenBucket>,
    sent: SentLog,
    fence: LeaseFence,
    applied: Option<AppliedLease>,
    draining: bool,
    drained: bool,
    /// Start of the interval the next report covers.
    counting_since_ns: u64,
    /// Reports confirm the lease in force (`lease_in_use`); false once [`never_confirm`](Self::never_confirm).
    confirms: bool,
}

impl PodCore {
    /// Sequence numbers start at 1 for every process: the random `incarnation` in the config
    /// tells this process's reports (and the leases that answer them) from a previous one's.
    /// Counting starts at `now_ns`: the first report's interval runs from then.
    pub fn new(cfg: PodConfig, now_ns: u64) -> Self {
        Self::with_bucket(cfg, now_ns, Arc::new(TokenBucket::new()))
    }

    /// [`PodCore::new`] over `bucket`, the one the pod's requests already read (a limit's loop
    /// starting again as a new holder). The bucket is revoked first: a new holder starts with
    /// no lease and no balance, exactly as with a new bucket.
    pub fn with_bucket(cfg: PodConfig, now_ns: u64, bucket: Arc<TokenBucket>) -> Self {
        bucket.revoke();
        PodCore {
            cfg,
            bucket,
            sent: SentLog::new(1),
            fence: LeaseFence::default(),
            applied: None,
            draining: false,
            drained: false,
            counting_since_ns: now_ns,
            confirms: true,
        }
    }

    /// Reports never confirm the lease in force (`lease_in_use` stays empty), so the DC manager
    /// counts every lease until it expires. For a lease lent out (to Envoy, over RLQS): pieces
    /// cut from an older, larger lease may be spent until they expire, and a confirmation would
    /// let the DC manager stop counting it a report later.
    pub fn never_confirm(&mut self) {
        self.confirms = false;
    }

    /// Its settings.
    pub fn config(&self) -> &PodConfig {
        &self.cfg
    }

    /// The token bucket that enforces the lease.
    pub fn bucket(&self) -> &Arc<TokenBucket> {
        &self.bucket
    }

    /// The lease in force at `now_ns`, if any.
    pub fn applied(&self, now_ns: u64) -> Option<&AppliedLease> {
        self.applied.as_ref().filter(|a| a.expires_at_ns > now_ns)
    }

    /// Whether the pod has started draining ([`Self::drain`]): it applies no more leases.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Whether the issuer confirmed the pod's return: the pod may exit.
    pub fn is_drained(&self) -> bool {
        self.drained
    }

    /// Apply a lease message. The countdown starts when the report it answers was sent. A
    /// continuation ([`PodLease::continues`]) applies only while the lease it continues is the
    /// one in use and unexpired, and then at most that lease's quota and never past its end.
    pub fn on_lease(&mut self, lease: &PodLease, now_ns: u64) -> Result<(), LeaseRejection> {
        if lease.pod != self.cfg.pod
            || (lease.incarnation != self.cfg.incarnation && !self.cfg.bugs.pod_ignores_incarnation())
            || lease.dc != self.cfg.dc
            || lease.limit != self.cfg.limit
        {
            return Err(LeaseRejection::NotMine);
        }
        if self.draining {
            return Err(LeaseRejection::Draining);
        }
        self.fence.check(lease.version)?;
        let sent_ns = self.sent.sent_at(lease.basis_seq).ok_or(LeaseRejection::UnknownBasis(lease.basis_seq))?;
        let expires_at_ns = sent_ns.saturating_add(lease.ttl_ms.saturating_mul(NS_PER_MS));
        if expires_at_ns <= now_ns {
            return Err(LeaseRejection::AlreadyExpired);
        }
        let (quota, expires_at_ns) = match lease.continues {
            None => (lease.quota, expires_at_ns),
            Some(v) => {
                let held = self.applied(now_ns).filter(|a| a.version == v && self.confirms);
                let held = held.ok_or(LeaseRejection::NotContinued(v))?;
                (lease.quota.min(held.quota), expires_at_ns.min(held.expires_at_ns))
            }
        };
        self.bucket.apply_lease(quota, expires_at_ns, now_ns).map_err(|e| LeaseRejection::Unusable(e.to_string()))?;
        self.fence.accept(lease.version);
        self.applied = Some(AppliedLease {
            version: lease.version,
            quota,
            expires_at_ns,
            issuer: lease.issuer.to_string(),
            incarnation: lease.incarnation,
            limit_removed: lease.limit_removed,
        });
        Ok(())
    }

    /// What the next report would put in `lease_in_use`: the newest version applied, unless
    /// this pod [never confirms](Self::never_confirm).
    pub fn lease_in_use(&self) -> Option<LeaseVersion> {
        self.fence.current().filter(|_| self.confirms)
    }

    /// Start of the interval the next report covers (the previous report's send time).
    pub fn counting_since_ns(&self) -> u64 {
        self.counting_since_ns
    }

    /// Build the next demand report/heartbeat and remember when it was sent.
    pub fn report(&mut self, now_ns: u64, c: IntervalCounters, healthy: bool) -> PodReport {
        let interval_ms = (now_ns.saturating_sub(self.counting_since_ns) / NS_PER_MS).clamp(1, 600_000);
        self.counting_since_ns = now_ns;
        let seq = self.sent.record(now_ns);
        PodReport {
            v: SCHEMA_VERSION,
            limit: self.cfg.limit.clone(),
            dc: self.cfg.dc.clone(),
            pod: self.cfg.pod.clone(),
            incarnation: self.cfg.incarnation,
            seq,
            interval_ms,
            offered: c.offered,
            admitted: c.admitted,
            rejected: c.rejected,
            queued: c.queued,
            errors: c.errors,
            upstream_429: c.upstream_429,
            healthy,
            draining: self.draining,
            weight: self.cfg.weight,
            lease_in_use: self.lease_in_use(),
            held: self.held(now_ns),
            periods: 1,
        }
    }

    /// What the next report would put in `held`: the lease in use and its time left, unless
    /// this pod never confirms (a lease lent out is not one a new term may continue).
    pub fn held(&self, now_ns: u64) -> Option<HeldLease> {
        let a = self.applied(now_ns).filter(|_| self.confirms)?;
        Some(HeldLease { quota: a.quota, left_ms: (a.expires_at_ns - now_ns) / NS_PER_MS })
    }

    /// Stop spending at once and give the lease back. Call again to resend until acknowledged.
    pub fn drain(&mut self) -> LeaseReturn {
        self.draining = true;
        self.bucket.revoke();
        self.applied = None;
        LeaseReturn {
            v: SCHEMA_VERSION,
            limit: self.cfg.limit.clone(),
            dc: self.cfg.dc.clone(),
            holder: self.cfg.pod.clone(),
            incarnation: self.cfg.incarnation,
            last_version: self.fence.current(),
        }
    }

    /// True once the issuer confirmed the return: the pod may exit.
    pub fn on_return_ack(&mut self, ack: &ReturnAck) -> bool {
        let mine = ack.holder == self.cfg.pod
            && ack.incarnation == self.cfg.incarnation
            && ack.dc == self.cfg.dc
            && ack.limit == self.cfg.limit;
        if self.draining && mine {
            self.drained = true;
        }
        self.drained
    }
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
