//! The global coordinator, sans I/O: splits R and B among DCs into fenced DC leases.
//!
//! Every output is a new [`LedgerRecord`] to be written with compare-and-set; a lease exists only
//! once that write succeeded, and a deposed leader's write fails. A new leader
//! [`resume`](CoordinatorCore::resume)s from the last record with a higher epoch and keeps counting
//! every lease in it as live for a full stretched TTL from the takeover (it cannot trust the old
//! leader's clock).
//!
//! **Reconfiguration never creates quota.** A new term may run with a lower R or B, or with floor
//! moved between DCs. Its ledger's capacity is the new R and B; the leases it adopts keep
//! counting until they expire (they are *inherited*, see [`crate::ledger`]), and every grant
//! fits the new capacity together with what lasts. Floors are holders on the same books
//! (`floors.rs`): a lowered floor counts until its DC confirms it no longer uses the old one, a
//! raised one waits for headroom. A raised R or B applies at once.

mod adaptive_limit;
mod config;
mod floors;
mod group_write;
mod reconfigure;
mod succession;
pub use succession::InheritedDemand;
mod takeover;

pub use config::{DcSpec, LimitConfig};
pub use floors::floor_holder;
pub use group_write::{judge_group_write, GroupReadBack, GroupWrite, GroupWriteAnswer};
pub use reconfigure::ReconfigureError;
pub use takeover::{next_epoch, Stored};

use crate::allocator::{allocate, Claim, Rebalancer};
use crate::expiry::NS_PER_MS;
use crate::ledger::{LeaseEntry, Ledger};
use crate::quota::Quota;
use crate::wire::{DcHolder, DcLease, DcReport, LeaseVersion, LedgerRecord, SCHEMA_VERSION};
use std::collections::BTreeMap;

/// What the coordinator knows of one DC.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DcView {
    /// The DC-manager replica whose reports it accepts (none before the first).
    pub holder: Option<String>,
    /// The leadership term of `holder` (its reports' `term`).
    pub holder_term: u64,
    /// The DC's demand rate from its last report, in milli-requests per second.
    pub demand_milli: u64,
    /// How many of the DC's pods are healthy, from its last report.
    pub pods_healthy: u32,
    /// When its last report was accepted, on the coordinator's clock in nanoseconds.
    pub last_report_ns: Option<u64>,
    /// The `seq` of its last accepted report.
    pub last_seq: u64,
    /// Current target after hysteresis.
    pub target: Quota,
    /// The newest DC lease of an earlier manager term moved under `holder` (its report said
    /// `counts_predecessor`), and that term: while any lease up to it is live, the DC's leases
    /// say how much (`DcLease::predecessor`).
    pub predecessor: Option<(LeaseVersion, u64)>,
    /// A term that answers for its predecessor has not heard its pods yet when it takes over:
    /// the predecessor's last demand and pods stand as a floor under its reports' until this
    /// instant (two renew intervals after the takeover; [`CoordinatorCore::heard_demand`]).
    pub inherited: Option<InheritedDemand>,
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorCounters {
    /// DC leases issued.
    pub leases_issued: u64,
    /// DC reports refused: of another limit or an unknown DC, duplicates, or of an earlier manager
    /// term.
    pub reports_rejected: u64,
    /// Reports whose `lease_in_use` the ledger could not confirm.
    pub acks_unknown: u64,
}

/// The coordinator's state for one limit, sans I/O: takes DC reports, issues DC leases, keeps the
/// ledger.
#[derive(Clone)]
pub struct CoordinatorCore {
    cfg: LimitConfig,
    writer: String,
    ledger: Ledger<String>,
    /// Full lease records by (holder, version), for the durable snapshot.
    leases: BTreeMap<(String, LeaseVersion), DcLease>,
    dcs: BTreeMap<String, DcView>,
    rate_split: Rebalancer,
    burst_split: Rebalancer,
    next_seq: u64,
    /// No DC lease is issued before then (this leader's clock): see [`CoordinatorCore::resume`].
    issue_from_ns: u64,
    /// While waiting out a lost record's DC leases: the longest TTL waited for (the record
    /// carries it, so a next leader waits too).
    lost_wait_dc_ttl_ms: Option<u64>,
    counters: CoordinatorCounters,
    /// An adaptive limit's state (`cfg.adaptive`).
    adaptive: Option<adaptive_limit::Adaptive>,
}

impl CoordinatorCore {
    /// A leader starting from an empty ledger at `epoch`: every DC's configured floor is
    /// reserved at once.
    pub fn new(cfg: LimitConfig, writer: &str, epoch: u64) -> Self {
        let mut c = CoordinatorCore::empty(cfg, writer, epoch, None);
        c.settle_floors(0);
        c
    }

    /// Books with nothing on them, floors included; an adaptive limit at `adaptive_rate_milli`
    /// if given (clamped), else at its configured R.
    fn empty(cfg: LimitConfig, writer: &str, epoch: u64, adaptive_rate_milli: Option<u64>) -> Self {
        let dcs = cfg.dcs.iter().map(|d| (d.name.clone(), DcView::default())).collect();
        let interval = cfg.min_realloc_interval_ms * NS_PER_MS;
        let adaptive = adaptive_limit::Adaptive::for_config(&cfg, adaptive_rate_milli);
        let capacity = adaptive.as_ref().map_or(cfg.quota, |a| a.capacity(cfg.quota));
        CoordinatorCore {
            rate_split: Rebalancer::new(cfg.hysteresis, interval),
            burst_split: Rebalancer::new(cfg.hysteresis, interval),
            ledger: Ledger::new(capacity, epoch).with_bugs(&cfg.bugs),
            leases: BTreeMap::new(),
            dcs,
            writer: writer.into(),
            cfg,
            next_seq: 0,
            issue_from_ns: 0,
            lost_wait_dc_ttl_ms: None,
            counters: CoordinatorCounters::default(),
            adaptive,
        }
    }

    /// Take over from the durable state with a higher `epoch`. Every lease in the record is
    /// counted until `now + ttl·(1+drift) + grace` on this leader's clock.
    ///
    /// A record that is missing although the fence says one was written ([`Stored::Lost`]: a
    /// single-replica bucket whose server died) may have named DC leases that are still live:
    /// the leader issues nothing for one full lifetime of the longest DC lease any term may
    /// have issued (the fence's `dc_ttl_ms_max`, or its own `dc_ttl_ms` if longer; stretched), so
    /// any such lease has expired first. The largest floor the fence says any record named for
    /// a DC counts apart from the DC's own floor until the DC confirms a floor named since, and
    /// every floor is named zero until the wait is over. The record carries both (a leader
    /// resuming from a record written during the wait waits in full from its own takeover).
    /// A record of a term below the fence's ([`Stored::Behind`]) is treated the same way: newer
    /// records may have been lost after it, and the fence bounds them too.
    ///
    /// The floors a record names or reserves keep counting; the configured ones are then
    /// approached as `floors.rs` describes. An adaptive limit resumes from the effective R the
    /// record names (before the record's leases are adopted: they are compared with it).
    pub fn resume(cfg: LimitConfig, writer: &str, epoch: u64, stored: Stored<'_>, now_ns: u64) -> Self {
        let adaptive_rate = match stored {
            Stored::Record(r) | Stored::Behind(r, _) => r.adaptive_rate_milli_per_s,
            Stored::Fresh | Stored::Lost(_) => None,
        };
        let mut c = CoordinatorCore::empty(cfg, writer, epoch, adaptive_rate);
        let record = match stored {
            Stored::Record(r) => Some(r),
            Stored::Fresh => None,
            Stored::Lost(fence) => {
                c.wait_out_fenced_records(fence, now_ns);
                None
            }
            // Nothing in it can be trusted to be the newest: as for a lost record.
            Stored::Behind(_, fence) if !c.cfg.bugs.record_behind_fence_trusted() => {
                c.wait_out_fenced_records(fence, now_ns);
                None
            }
            Stored::Behind(r, _) => Some(r),
        };
        if let Some(rec) = record {
            // The writer was still waiting out a lost record: so does this leader, in full.
            if let Some(ttl_ms) = rec.lost_wait_dc_ttl_ms {
                c.wait_out_lost_record(ttl_ms, now_ns);
            }
            c.adopt_lost_floors(&rec.lost_floors);
        }
        if let Some(rec) = record {
            // Leases the writer counted as lasting stay lasting under a capacity at least as
            // large; under a smaller one (or an unknown one) every lease is inherited.
            let kept = rec.capacity.is_some_and(|cap| cap.fits_in(&c.ledger.capacity()));
            for l in &rec.leases {
                let live_until_ns = c.cfg.expiry.issuer_live_until_ns(now_ns, l.ttl_ms);
                // Under the later term that answers for it, if the writer moved it there.
                let counted = rec.counted_holder(&l.holder).to_string();
                let inherited = !kept || rec.inherited_below.get(&counted).is_some_and(|b| l.version < *b);
                let entry = LeaseEntry { version: l.version, quota: l.quota, live_until_ns };
                c.ledger.adopt_as(&counted, entry, inherited);
                c.leases.insert((counted, l.version), l.clone());
                if let Some(v) = c.dcs.get_mut(&l.dc) {
                    v.holder = Some(l.holder.clone());
                }
            }
            c.adopt_floors(rec);
            c.adopt_dc_holders(rec);
        }
        c.settle_floors(now_ns);
        c
    }

    /// The leadership epoch it writes under.
    pub fn epoch(&self) -> u64 {
        self.ledger.epoch()
    }

    /// The limit's configuration.
    pub fn config(&self) -> &LimitConfig {
        &self.cfg
    }

    /// Its books of DC leases, by holder.
    pub fn ledger(&self) -> &Ledger<String> {
        &self.ledger
    }

    /// What it knows of each DC, by name.
    pub fn dcs(&self) -> &BTreeMap<String, DcView> {
        &self.dcs
    }

    /// Its counters.
    pub fn counters(&self) -> &CoordinatorCounters {
        &self.counters
    }

    /// DC leases on the books (superseded ones that may still be in use included).
    pub fn dc_leases(&self) -> usize {
        self.leases.len()
    }

    /// The record to write after this step: every lease still outstanding, and every DC's newest
    /// floor with what is reserved for it.
    pub fn record(&self) -> LedgerRecord {
        let mut rec = LedgerRecord {
            v: SCHEMA_VERSION,
            limit: self.cfg.limit.clone(),
            epoch: self.epoch(),
            writer: self.writer.clone(),
            leases: self.leases.values().cloned().collect(),
            floors: Default::default(),
            floor_versions: Default::default(),
            floors_reserved: Default::default(),
            capacity: Some(self.ledger.capacity()),
            inherited_below: self.ledger.inherited_below().map(|(h, v)| (h.clone(), v)).collect(),
            lost_floors: self.lost_floors(),
            lost_wait_dc_ttl_ms: self.lost_wait_dc_ttl_ms,
            dc_holders: self
                .dcs
                .iter()
                .filter_map(|(dc, v)| {
                    let holder =
                        DcHolder { holder: v.holder.clone()?, term: v.holder_term, predecessor: v.predecessor };
                    Some((dc.clone(), holder))
                })
                .collect(),
            counted_under: self
                .leases
                .iter()
                .filter(|((counted, _), l)| *counted != l.holder)
                .map(|((counted, _), l)| (l.holder.clone(), counted.clone()))
                .collect(),
            adaptive_rate_milli_per_s: self.adaptive_record(),
            expiry: Some(self.cfg.expiry),
            pod_rules: self.cfg.pods.clone(),
        };
        for dc in self.floor_dcs() {
            let Some((floor, version)) = self.floor_named(&dc) else { continue };
            // Reserved for good (the egress hold of a confirmed release may still run).
            let reserved =
                self.ledger.entries().filter(|(h, _)| **h == floor_holder(&dc)).fold(floor, |m, (_, e)| m.max(e.quota));
            rec.floors.insert(dc.clone(), floor);
            rec.floor_versions.insert(dc.clone(), version);
            rec.floors_reserved.insert(dc, reserved);
        }
        rec
    }

    /// A DC manager's report. Returns new leases when an ack freed capacity a DC is waiting for.
    pub fn on_dc_report(&mut self, r: &DcReport, now_ns: u64) -> Vec<DcLease> {
        let Some(view) = self.dcs.get_mut(&r.dc).filter(|_| r.limit == self.cfg.limit) else {
            // A DC dropped from the configuration still confirms the zero floor it is named
            // (a floor version taken after the drop), so its old floor stops counting.
            if let (true, Some(f), Some(_)) = (r.limit == self.cfg.limit, r.floor_in_use, self.floor_named(&r.dc)) {
                self.confirm_floor(&r.dc, f, r.floor_version, now_ns);
                return self.grow_starved(now_ns);
            }
            self.counters.reports_rejected += 1;
            return Vec::new();
        };
        let same_holder = view.holder.as_deref() == Some(r.holder.as_str());
        let stale =
            if same_holder { r.seq <= view.last_seq } else { view.holder.is_some() && r.term < view.holder_term };
        if stale {
            // A duplicate, or a delayed report of an earlier manager term: counting it would send
            // the next lease to a holder that is gone (waste for a whole TTL).
            self.counters.reports_rejected += 1;
            return Vec::new();
        }
        let previous_report_ns = view.last_report_ns;
        // A newer term that answers for its predecessor's pod leases takes its DC leases over.
        let old_term = view.holder_term;
        let succeeded = view.holder.take().filter(|_| !same_holder && r.counts_predecessor && r.term > old_term);
        if succeeded.is_some() {
            let until_ns = now_ns.saturating_add(2 * self.cfg.renew_interval_ms * NS_PER_MS);
            let (demand_milli, pods_healthy) = (view.demand_milli, view.pods_healthy);
            view.inherited = Some(InheritedDemand { demand_milli, pods_healthy, until_ns });
        } else if !same_holder {
            view.inherited = None;
        }
        view.holder = Some(r.holder.clone());
        view.holder_term = r.term;
        (view.demand_milli, view.pods_healthy) = Self::heard_demand(view, r, now_ns);
        view.last_report_ns = Some(now_ns);
        view.last_seq = r.seq;
        let succeeded = succeeded.map(|old| self.move_leases(&r.dc, &old, old_term, &r.holder)).is_some();
        if let Some(v) = r.lease_in_use {
            if self.ledger.confirm_in_use(&r.holder, v, self.cfg.expiry.released_until_ns(now_ns)).is_err() {
                self.counters.acks_unknown += 1;
            }
        }
        if let Some(f) = r.floor_in_use {
            self.confirm_floor(&r.dc, f, r.floor_version, now_ns);
        }
        self.note_upstream(r, previous_report_ns, now_ns);
        let mut leases = self.grow_starved(now_ns);
        // A term that took its predecessor's leases over holds none of its own yet: it gets one
        // now rather than at the next tick (its pods' leases run out meanwhile).
        if succeeded && !leases.iter().any(|l| l.dc == r.dc) {
            leases.extend(self.issue(&r.dc, now_ns));
        }
        leases
    }

    fn prune_leases(&mut self) {
        let live: std::collections::BTreeSet<(String, LeaseVersion)> =
            self.ledger.entries().map(|(h, e)| (h.clone(), e.version)).collect();
        self.leases.retain(|k, _| live.contains(k));
    }

    fn reporting(&self, now_ns: u64) -> Vec<String> {
        let timeout = self.cfg.report_timeout_ms * NS_PER_MS;
        self.dcs
            .iter()
            .filter(|(_, v)| {
                v.holder.is_some() && v.last_report_ns.is_some_and(|t| now_ns.saturating_sub(t) <= timeout)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn recompute_targets(&mut self, now_ns: u64) {
        let dcs = self.reporting(now_ns);
        // Split the whole limit with each reporting DC's floor served first, then lease out the
        // part above the floor (floors are reserved for every DC, reporting or not). A floor
        // counts at its configured value, or more while more is reserved for it.
        let mut floor_dcs: Vec<String> = self.cfg.dcs.iter().map(|d| d.name.clone()).collect();
        floor_dcs.extend(self.floor_dcs());
        floor_dcs.sort_unstable();
        floor_dcs.dedup();
        let silent_floors = floor_dcs
            .iter()
            .filter(|d| !dcs.contains(d))
            .fold(Quota::ZERO, |s, d| s.saturating_add(self.floor_set_aside(d, now_ns)));
        let total = self.ledger.capacity().saturating_sub(silent_floors);
        let floors: Vec<Quota> = dcs.iter().map(|d| self.floor_set_aside(d, now_ns)).collect();
        let rate_claims: Vec<Claim> = dcs
            .iter()
            .zip(&floors)
            .map(|(d, f)| Claim {
                demand_milli: self.dcs[d].demand_milli,
                weight: self.weight(d),
                floor_milli: f.rate_milli_per_s,
            })
            .collect();
        let burst_claims: Vec<Claim> = dcs
            .iter()
            .zip(&floors)
            .map(|(d, f)| Claim {
                demand_milli: self.dcs[d].demand_milli,
                weight: self.weight(d),
                floor_milli: f.burst_milli.max(self.dcs[d].pods_healthy as u64 * self.cfg.min_burst_per_pod_milli),
            })
            .collect();
        let rates = allocate(total.rate_milli_per_s, self.cfg.reserve, &rate_claims, self.cfg.alloc_mode);
        let bursts = allocate(total.burst_milli, self.cfg.reserve, &burst_claims, self.cfg.alloc_mode);
        let rates = self.rate_split.settle(rates, total.rate_milli_per_s, now_ns).to_vec();
        let bursts = self.burst_split.settle(bursts, total.burst_milli, now_ns).to_vec();
        for v in self.dcs.values_mut() {
            v.target = Quota::ZERO;
        }
        for (((d, r), b), f) in dcs.iter().zip(rates).zip(bursts).zip(floors) {
            let above_floor = Quota::new(r, b).saturating_sub(f);
            self.dcs.get_mut(d).expect("listed").target = above_floor;
        }
    }

    fn weight(&self, dc: &str) -> f64 {
        self.cfg.dcs.iter().find(|d| d.name == dc).map_or(1.0, |d| d.weight)
    }

    /// Periodic step (every renew interval): re-split and renew every reporting DC.
    pub fn tick(&mut self, now_ns: u64) -> Vec<DcLease> {
        if now_ns >= self.issue_from_ns {
            self.lost_wait_dc_ttl_ms = None; // the lost record's leases have all expired
        }
        self.ledger.expire(now_ns);
        self.prune_leases();
        self.settle_floors(now_ns);
        self.adapt(now_ns);
        self.recompute_targets(now_ns);
        let mut dcs: Vec<String> = self.reporting(now_ns);
        // Shrinking DCs first: their reduction must be on record before anyone grows.
        dcs.sort_by_key(|d| {
            let v = &self.dcs[d];
            let claim = self.ledger.holder_claim(v.holder.as_ref().expect("reporting"), now_ns);
            v.target.rate_milli_per_s as i128 - claim.rate_milli_per_s as i128
        });
        dcs.iter().filter_map(|d| self.issue(d, now_ns)).collect()
    }

    /// Event step: give DCs below target what acks and releases have freed.
    fn grow_starved(&mut self, now_ns: u64) -> Vec<DcLease> {
        self.ledger.expire(now_ns);
        self.prune_leases();
        // Floors first: a raised floor waits for exactly this room.
        self.settle_floors(now_ns);
        let starved: Vec<String> = self
            .reporting(now_ns)
            .into_iter()
            .filter(|d| {
                let v = &self.dcs[d];
                self.ledger.can_grow(v.holder.as_ref().expect("reporting"), v.target, now_ns)
            })
            .collect();
        starved.iter().filter_map(|d| self.issue(d, now_ns)).collect()
    }

    /// When this leader may issue its first DC lease (its clock).
    pub fn issues_from_ns(&self) -> u64 {
        self.issue_from_ns
    }

    fn issue(&mut self, dc: &str, now_ns: u64) -> Option<DcLease> {
        if now_ns < self.issue_from_ns {
            return None;
        }
        let v = &self.dcs[dc];
        let holder = v.holder.clone()?;
        let quota = self.ledger.grantable(&holder, v.target, now_ns);
        self.next_seq += 1;
        let version = LeaseVersion::new(self.epoch(), self.next_seq);
        let live_until = self.cfg.expiry.issuer_live_until_ns(now_ns, self.cfg.dc_ttl_ms);
        self.ledger.grant(&holder, quota, version, live_until, now_ns).ok()?;
        let floor = self.floor_named(dc).map_or(Quota::ZERO, |(f, _)| f);
        let lease = DcLease {
            v: SCHEMA_VERSION,
            limit: self.cfg.limit.clone(),
            dc: dc.to_string(),
            holder: holder.clone(),
            version,
            lease_id: format!("{}-{}-{}", self.writer, version.epoch, version.seq),
            quota,
            floor,
            ttl_ms: self.cfg.dc_ttl_ms,
            basis_seq: v.last_seq,
            predecessor: self.predecessor_of(dc, now_ns),
        };
        self.counters.leases_issued += 1;
        self.leases.insert((holder, version), lease.clone());
        Some(lease)
    }
}
