//! The live view's picture of the system, built only from what any NATS client may read: the
//! ledger records (`lh_ledger`), the leader keys and the ledger fence (`lh_leaders`), the DC
//! managers' reports (`lh.dc.<dc>.report`) and the pods' reports and leases (`lh.pod.>`).
//!
//! Pure: every input carries `now_ms` on the view's own monotonic clock, so the tests drive it
//! without NATS or a clock. [`View::tick`] samples each DC's demand, allocation and use once a
//! period into a bounded history; [`View::snapshot`] is what the page draws.

use super::snapshot::{DcRow, Event, LimitCard, PodLimitRow, PodRow, Sample, Snapshot};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcReports, LedgerFence, LedgerGroup, LedgerRecord, PodLeases, PodReports};
use std::collections::{BTreeMap, VecDeque};

/// A pod not heard from (report or lease) for this long is forgotten.
pub(super) const FORGET_POD_AFTER_MS: u64 = 30_000;
/// A pod's report older than this no longer counts towards its DC's use.
pub(super) const REPORT_FRESH_MS: u64 = 3_000;
/// Takeovers and fence raises kept for the page.
pub(super) const EVENTS_KEPT: usize = 50;

/// Sizes of what [`View::snapshot`] returns, so the page stays small at 10,000 pods or limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shown {
    pub limits_max: usize,
    pub pods_per_dc_max: usize,
}

#[derive(Clone, Debug)]
struct DcHeard {
    demand: Quota,
    pods_healthy: u32,
    holder: String,
    at_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct PodLimit {
    admitted_per_s: f64,
    offered_per_s: f64,
    reported_at_ms: Option<u64>,
    lease: Option<(Quota, String, u64)>,
    lease_at_ms: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct Pod {
    dc: String,
    heard_at_ms: u64,
    limits: BTreeMap<String, PodLimit>,
}

/// Everything heard so far. See the module docs.
#[derive(Debug)]
pub(super) struct View {
    history_len: usize,
    coordinator_leader: Option<String>,
    dc_leaders: BTreeMap<String, String>,
    fence_epoch: Option<u64>,
    /// Limit → (its ledger group, its record).
    records: BTreeMap<String, (u32, LedgerRecord)>,
    /// (limit, DC) → the DC manager's last report.
    dcs: BTreeMap<(String, String), DcHeard>,
    pods: BTreeMap<String, Pod>,
    history: BTreeMap<(String, String), VecDeque<Sample>>,
    events: VecDeque<Event>,
}

impl View {
    /// An empty view keeping `history_len` samples per limit and DC.
    pub(super) fn new(history_len: usize) -> Self {
        View {
            history_len: history_len.max(1),
            coordinator_leader: None,
            dc_leaders: BTreeMap::new(),
            fence_epoch: None,
            records: BTreeMap::new(),
            dcs: BTreeMap::new(),
            pods: BTreeMap::new(),
            history: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    fn event(&mut self, at_ms: u64, text: String) {
        if self.events.len() == EVENTS_KEPT {
            self.events.pop_front();
        }
        self.events.push_back(Event { at_ms, text });
    }

    /// A key of `lh_leaders` was written (`value`) or deleted (`None`).
    pub(super) fn on_leader_key(&mut self, key: &str, value: Option<&[u8]>, now_ms: u64) {
        use leasehold_core::subjects::{COORDINATOR_LEADER_KEY, LEDGER_FENCE_KEY};
        let id = value.map(|v| String::from_utf8_lossy(v).into_owned());
        if key == LEDGER_FENCE_KEY {
            let Some(Ok(fence)) = value.map(LedgerFence::parse) else { return };
            if self.fence_epoch.is_some_and(|e| e < fence.epoch) {
                self.event(now_ms, format!("ledger fence raised to epoch {} (a new coordinator term)", fence.epoch));
            }
            self.fence_epoch = Some(fence.epoch);
        } else if key == COORDINATOR_LEADER_KEY {
            if id != self.coordinator_leader {
                self.event(now_ms, leader_text("coordinator", self.coordinator_leader.as_deref(), id.as_deref()));
            }
            self.coordinator_leader = id;
        } else if let Some(dc) = key.strip_prefix("dc.") {
            let id = value.map(leasehold_core::dc_manager::TermRecord::holder_of);
            let before = self.dc_leaders.get(dc).cloned();
            if id != before {
                self.event(now_ms, leader_text(&format!("DC {dc} manager"), before.as_deref(), id.as_deref()));
            }
            match id {
                Some(id) => self.dc_leaders.insert(dc.to_string(), id),
                None => self.dc_leaders.remove(dc),
            };
        }
    }

    /// Ledger group `group` now holds `records` (`None`: the group's key was deleted).
    pub(super) fn on_ledger_group(&mut self, group: u32, records: Option<LedgerGroup>, now_ms: u64) {
        let mut fresh: BTreeMap<String, LedgerRecord> =
            records.map(|g| g.records.into_iter().map(|r| (r.limit.clone(), r)).collect()).unwrap_or_default();
        let gone: Vec<String> = self
            .records
            .iter()
            .filter(|(l, (g, _))| *g == group && !fresh.contains_key(*l))
            .map(|(l, _)| l.clone())
            .collect();
        for limit in gone {
            self.records.remove(&limit);
            self.event(now_ms, format!("limit {limit}: its ledger record was removed"));
        }
        for (limit, record) in std::mem::take(&mut fresh) {
            let before = self.records.get(&limit).map(|(_, r)| (r.epoch, r.writer.clone()));
            if let Some((epoch, writer)) = before.filter(|(e, w)| *e != record.epoch || *w != record.writer) {
                self.event(
                    now_ms,
                    format!(
                        "limit {limit}: ledger written by {} at epoch {} (was {writer} at epoch {epoch})",
                        record.writer, record.epoch
                    ),
                );
            }
            self.records.insert(limit, (group, record));
        }
    }

    pub(super) fn on_dc_reports(&mut self, batch: &DcReports, now_ms: u64) {
        for r in &batch.reports {
            let heard =
                DcHeard { demand: r.demand, pods_healthy: r.pods_healthy, holder: r.holder.clone(), at_ms: now_ms };
            self.dcs.insert((r.limit.clone(), r.dc.clone()), heard);
        }
    }

    pub(super) fn on_pod_reports(&mut self, batch: &PodReports, now_ms: u64) {
        let pod = self.pods.entry(batch.pod.clone()).or_default();
        pod.dc = batch.dc.clone();
        pod.heard_at_ms = now_ms;
        for r in &batch.reports {
            let per_s = |n: u64| n as f64 * 1_000.0 / r.interval_ms.max(1) as f64;
            let l = pod.limits.entry(r.limit.clone()).or_default();
            l.admitted_per_s = per_s(r.admitted);
            l.offered_per_s = per_s(r.offered);
            l.reported_at_ms = Some(now_ms);
        }
    }

    pub(super) fn on_pod_leases(&mut self, batch: &PodLeases, now_ms: u64) {
        let pod = self.pods.entry(batch.pod.clone()).or_default();
        pod.dc = batch.dc.clone();
        pod.heard_at_ms = now_ms;
        for lease in &batch.leases {
            let l = pod.limits.entry(lease.limit.to_string()).or_default();
            l.lease = Some((lease.quota, lease.version.to_string(), lease.ttl_ms));
            l.lease_at_ms = Some(now_ms);
        }
    }

    /// Forget silent pods and take one [`Sample`] of every limit and DC.
    pub(super) fn tick(&mut self, now_ms: u64) {
        self.pods.retain(|_, p| now_ms.saturating_sub(p.heard_at_ms) < FORGET_POD_AFTER_MS);
        let mut keys: Vec<(String, String)> = self.dcs.keys().cloned().collect();
        for (limit, (_, record)) in &self.records {
            keys.extend(record.leases.iter().map(|l| (limit.clone(), l.dc.clone())));
        }
        keys.sort();
        keys.dedup();
        for (limit, dc) in keys {
            let sample = Sample {
                at_ms: now_ms,
                demand_per_s: self.dcs.get(&(limit.clone(), dc.clone())).map_or(0.0, |d| d.demand.rate_per_s()),
                allocated_per_s: self.allocated(&limit, &dc).rate_per_s(),
                used_per_s: self.used_per_s(&limit, &dc, now_ms),
            };
            let h = self.history.entry((limit, dc)).or_default();
            if h.len() == self.history_len {
                h.pop_front();
            }
            h.push_back(sample);
        }
    }

    /// What the ledger lets `dc` use of `limit` now: its newest DC lease plus its floor.
    fn allocated(&self, limit: &str, dc: &str) -> Quota {
        let Some((_, record)) = self.records.get(limit) else { return Quota::ZERO };
        let lease =
            record.leases.iter().filter(|l| l.dc == dc).max_by_key(|l| l.version).map_or(Quota::ZERO, |l| l.quota);
        lease.saturating_add(record.floors.get(dc).copied().unwrap_or_default())
    }

    fn used_per_s(&self, limit: &str, dc: &str, now_ms: u64) -> f64 {
        let fresh = |l: &&PodLimit| l.reported_at_ms.is_some_and(|t| now_ms.saturating_sub(t) <= REPORT_FRESH_MS);
        self.pods
            .values()
            .filter(|p| p.dc == dc)
            .filter_map(|p| p.limits.get(limit))
            .filter(fresh)
            .map(|l| l.admitted_per_s)
            .sum()
    }

    /// The picture the page draws, `shown` bounding its size.
    pub(super) fn snapshot(&self, now_ms: u64, shown: Shown) -> Snapshot {
        let ago = |t: Option<u64>| t.map(|t| now_ms.saturating_sub(t) as f64 / 1_000.0);
        let mut limits: Vec<LimitCard> = Vec::new();
        let mut names: Vec<&String> = self.records.keys().collect();
        names.extend(self.dcs.keys().map(|(l, _)| l));
        names.sort();
        names.dedup();
        for limit in names.iter().take(shown.limits_max) {
            let record = self.records.get(*limit).map(|(_, r)| r);
            let mut dcs: Vec<&str> = self.dcs.keys().filter(|(l, _)| l == *limit).map(|(_, d)| d.as_str()).collect();
            dcs.extend(record.iter().flat_map(|r| r.leases.iter().map(|l| l.dc.as_str())));
            dcs.sort();
            dcs.dedup();
            let rows = dcs.into_iter().map(|dc| self.dc_row(limit, dc, record, now_ms)).collect();
            let (sum, capacity) = record.map_or((None, None), |r| (Some(on_record(r)), r.capacity));
            limits.push(LimitCard {
                name: (*limit).clone(),
                rate_per_s: capacity.map(|c| c.rate_per_s()),
                burst: capacity.map(|c| c.burst()),
                outstanding_rate_per_s: sum.map(|s| s.rate_per_s()),
                outstanding_burst: sum.map(|s| s.burst()),
                epoch: record.map(|r| r.epoch),
                writer: record.map(|r| r.writer.clone()),
                dcs: rows,
            });
        }
        let mut pods_by_dc: BTreeMap<String, Vec<PodRow>> = BTreeMap::new();
        for (id, p) in &self.pods {
            let limits = p
                .limits
                .iter()
                .map(|(limit, l)| PodLimitRow {
                    limit: limit.clone(),
                    rate_per_s: l.lease.as_ref().map(|(q, _, _)| q.rate_per_s()),
                    burst: l.lease.as_ref().map(|(q, _, _)| q.burst()),
                    version: l.lease.as_ref().map(|(_, v, _)| v.clone()),
                    ttl_ms: l.lease.as_ref().map(|(_, _, t)| *t),
                    since_renewal_s: ago(l.lease_at_ms),
                    admitted_per_s: l.admitted_per_s,
                    offered_per_s: l.offered_per_s,
                })
                .collect();
            let row = PodRow { id: id.clone(), since_heard_s: ago(Some(p.heard_at_ms)).unwrap_or(0.0), limits };
            pods_by_dc.entry(p.dc.clone()).or_default().push(row);
        }
        let pods_total = pods_by_dc.iter().map(|(dc, rows)| (dc.clone(), rows.len())).collect();
        for rows in pods_by_dc.values_mut() {
            // The stalest renewals first: those are the ones an operator looks for.
            let stalest =
                |r: &PodRow| r.limits.iter().filter_map(|l| l.since_renewal_s).fold(r.since_heard_s, f64::max);
            rows.sort_by(|a, b| stalest(b).total_cmp(&stalest(a)).then_with(|| a.id.cmp(&b.id)));
            rows.truncate(shown.pods_per_dc_max);
        }
        Snapshot {
            coordinator_leader: self.coordinator_leader.clone(),
            fence_epoch: self.fence_epoch,
            dc_leaders: self.dc_leaders.clone(),
            limits_total: names.len(),
            limits,
            pods_total,
            pods: pods_by_dc,
            events: self.events.iter().rev().map(|e| Event { at_ms: e.at_ms, text: e.text.clone() }).collect(),
            now_ms,
        }
    }

    fn dc_row(&self, limit: &str, dc: &str, record: Option<&LedgerRecord>, now_ms: u64) -> DcRow {
        let heard = self.dcs.get(&(limit.to_string(), dc.to_string()));
        let newest = record.and_then(|r| r.leases.iter().filter(|l| l.dc == dc).max_by_key(|l| l.version));
        let history = self.history.get(&(limit.to_string(), dc.to_string()));
        DcRow {
            dc: dc.to_string(),
            leader: self.dc_leaders.get(dc).cloned(),
            demand_per_s: heard.map_or(0.0, |h| h.demand.rate_per_s()),
            allocated_per_s: self.allocated(limit, dc).rate_per_s(),
            floor_per_s: record.and_then(|r| r.floors.get(dc)).map_or(0.0, |f| f.rate_per_s()),
            used_per_s: self.used_per_s(limit, dc, now_ms),
            pods_healthy: heard.map(|h| h.pods_healthy),
            holder: newest.map(|l| l.holder.clone()).or_else(|| heard.map(|h| h.holder.clone())),
            lease_version: newest.map(|l| l.version.to_string()),
            lease_ttl_ms: newest.map(|l| l.ttl_ms),
            since_report_s: heard.map(|h| now_ms.saturating_sub(h.at_ms) as f64 / 1_000.0),
            history: history.map(|h| h.iter().copied().collect()).unwrap_or_default(),
        }
    }
}

fn leader_text(role: &str, before: Option<&str>, now: Option<&str>) -> String {
    match (before, now) {
        (None, Some(id)) => format!("{role}: {id} leads"),
        (Some(old), Some(id)) => format!("{role} takeover: {id} leads (was {old})"),
        (Some(old), None) => format!("{role}: {old} stepped down; no leader"),
        (None, None) => format!("{role}: no leader"),
    }
}

/// Σ of what a record counts: each holder's largest DC lease, and each DC's reserved floor
/// (what a coordinator taking over from this record counts from its first instant).
pub(super) fn on_record(record: &LedgerRecord) -> Quota {
    let mut per_holder: BTreeMap<&str, Quota> = BTreeMap::new();
    for l in &record.leases {
        // A lease moved to a later term of its DC counts under it (`counted_under`).
        let q = per_holder.entry(record.counted_holder(&l.holder)).or_default();
        *q = q.max(l.quota);
    }
    // Per DC the larger of the floor named and the floor reserved (missing: the one named).
    let mut floors: BTreeMap<&str, Quota> = BTreeMap::new();
    for (dc, f) in record.floors.iter().chain(&record.floors_reserved) {
        let q = floors.entry(dc.as_str()).or_default();
        *q = q.max(*f);
    }
    per_holder.values().chain(floors.values()).fold(Quota::ZERO, |s, q| s.saturating_add(*q))
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
