//! What a run measured: utilization per second, rebalance times, invariant breaches, faults.

use crate::faults::FaultKind;
use crate::scenario::Scenario;
use crate::upstream::Upstream;
use leasehold_core::allocator::{allocate, AllocMode, Claim};
use std::collections::BTreeMap;

const S: u64 = 1_000_000_000;
/// A rebalance that has not happened after this long is recorded at this value.
pub const REBALANCE_GIVE_UP_S: f64 = 60.0;

struct Tracker {
    dc: usize,
    step_s: f64,
    fair_rate: f64,
}

/// Per-second series for the follow-the-sun chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub demand: Vec<Vec<f64>>,
    pub allocation: Vec<Vec<f64>>,
    pub admitted: Vec<Vec<f64>>,
}

pub struct Metrics {
    sc: Scenario,
    cap_per_s: f64,
    limit_rate: u64,
    floors: Vec<u64>,
    steps_s: Vec<f64>,
    next_step: usize,
    liveness_from_s: Option<u64>,
    offered: Vec<Vec<u32>>,
    admitted: Vec<Vec<u32>>,
    trackers: Vec<Tracker>,
    pub series: Series,
    pub rebalance_s: Vec<f64>,
    pub invariant_breaches: u64,
    pub first_breach: Option<(f64, String)>,
    pub faults_by_kind: BTreeMap<FaultKind, u64>,
    pub takeovers: u64,
    /// DC-manager terms begun (the first per DC included).
    pub dc_takeovers: u64,
    pub fenced_writes: u64,
    /// Ledger writes that went unanswered (`FaultKind::LedgerWritesUnanswered`), those of them
    /// that landed late, and later writes that met one and went on its revision (adopted).
    pub ledger_writes_unresolved: u64,
    pub ledger_writes_landed_late: u64,
    pub ledger_writes_adopted: u64,
    /// Limit changes a leading term applied in place.
    pub live_reconfigurations: u64,
    /// Ledger records lost with a single-replica bucket (the fence survives).
    pub records_lost: u64,
    pub records_rolled_back: u64,
    /// Ledger watches opened again (a manager reconnecting or restarting): the kept history
    /// replayed, oldest first.
    pub record_replays: u64,
    /// DC-manager terms begun while the ledger could not be read (their DC cut off from the
    /// coordinators' side): no floor until they read it.
    pub terms_without_ledger: u64,
    /// Of those, the limit's watched floor vouched for by the DC's floor confirmations (used).
    pub floors_vouched: u64,
    pub lease_rejections: u64,
    pub drains_acked: u64,
    /// Largest amount by which what pods may spend exceeded R and B (best-effort mode only).
    pub overshoot_max: leasehold_core::quota::Quota,
    // Filled by `finish`.
    pub utilization: f64,
    pub liveness_utilization: Option<f64>,
    pub upstream_calls: u64,
    pub upstream_rejections: u64,
    pub max_window_ratio: f64,
    /// The leading coordinator's effective R (per second) at each second (adaptive limits).
    pub effective_rate_per_s: Vec<f64>,
    pub hidden_drop: Option<crate::adaptive_metrics::HiddenDropMetrics>,
}

impl Metrics {
    pub fn new(sc: &Scenario) -> Self {
        let secs = sc.duration_s as usize + 1;
        let n = sc.dcs.len();
        Metrics {
            sc: sc.clone(),
            cap_per_s: sc.hard.sustained_per_s() as f64,
            limit_rate: sc.quota.rate_milli_per_s,
            floors: sc.dcs.iter().map(|d| d.floor.rate_milli_per_s).collect(),
            steps_s: sc.steps_s.clone(),
            next_step: 0,
            liveness_from_s: sc.chaos.then_some(sc.fault_until_s + 3 * sc.dc_ttl_ms / 1_000),
            offered: vec![vec![0; n]; secs],
            admitted: vec![vec![0; n]; secs],
            trackers: Vec::new(),
            series: Series {
                demand: vec![Vec::new(); n],
                allocation: vec![Vec::new(); n],
                admitted: vec![Vec::new(); n],
            },
            rebalance_s: Vec::new(),
            invariant_breaches: 0,
            first_breach: None,
            faults_by_kind: BTreeMap::new(),
            takeovers: 0,
            dc_takeovers: 0,
            fenced_writes: 0,
            ledger_writes_unresolved: 0,
            ledger_writes_landed_late: 0,
            ledger_writes_adopted: 0,
            live_reconfigurations: 0,
            records_lost: 0,
            records_rolled_back: 0,
            record_replays: 0,
            terms_without_ledger: 0,
            floors_vouched: 0,
            lease_rejections: 0,
            drains_acked: 0,
            overshoot_max: leasehold_core::quota::Quota::ZERO,
            utilization: 0.0,
            liveness_utilization: None,
            upstream_calls: 0,
            upstream_rejections: 0,
            max_window_ratio: 0.0,
            effective_rate_per_s: vec![0.0; secs],
            hidden_drop: None,
        }
    }

    #[inline]
    pub fn offered(&mut self, sec: usize, dc: usize) {
        if let Some(row) = self.offered.get_mut(sec) {
            row[dc] += 1;
        }
    }

    #[inline]
    pub fn admitted(&mut self, sec: usize, dc: usize) {
        if let Some(row) = self.admitted.get_mut(sec) {
            row[dc] += 1;
        }
    }

    pub fn invariant(&mut self, now_ns: u64, msg: String) {
        self.invariant_breaches += 1;
        self.first_breach.get_or_insert((now_ns as f64 / S as f64, msg));
    }

    pub fn overshoot(&mut self, over: leasehold_core::quota::Quota) {
        self.overshoot_max = self.overshoot_max.max(over);
    }

    pub fn fault_injected(&mut self, kind: FaultKind) {
        *self.faults_by_kind.entry(kind).or_default() += 1;
    }

    pub fn faults_injected(&self) -> u64 {
        self.faults_by_kind.values().sum()
    }

    fn fair_rates(&self, demand: &[f64]) -> Vec<f64> {
        let claims: Vec<Claim> = demand
            .iter()
            .zip(&self.floors)
            .map(|(d, f)| Claim { demand_milli: (d * 1_000.0) as u64, weight: 1.0, floor_milli: *f })
            .collect();
        allocate(self.limit_rate, 0.0, &claims, AllocMode::WaterFill).iter().map(|m| *m as f64 / 1_000.0).collect()
    }

    /// Every 100 ms: rebalance tracking, and once a second the chart series.
    pub fn sample(&mut self, now_ns: u64, demand: &[f64], allocation: &[f64]) {
        let t = now_ns as f64 / S as f64;
        while self.next_step < self.steps_s.len() && self.steps_s[self.next_step] <= t {
            let step = self.steps_s[self.next_step];
            self.next_step += 1;
            // Demand just before and just after the step: only the curve, not the samples.
            let at = |t: f64| (0..demand.len()).map(|d| self.sc.demand(d, t)).collect::<Vec<_>>();
            let before = self.fair_rates(&at(step - 1e-3));
            let after = self.fair_rates(&at(step + 1e-3));
            let limit = self.limit_rate as f64 / 1_000.0;
            for dc in 0..demand.len() {
                if after[dc] - before[dc] >= 0.1 * limit {
                    self.trackers.push(Tracker { dc, step_s: step, fair_rate: after[dc] });
                }
            }
        }
        let mut open = Vec::new();
        for tr in self.trackers.drain(..) {
            if allocation[tr.dc] >= 0.9 * tr.fair_rate {
                self.rebalance_s.push(((t - tr.step_s) * 1_000.0).round() / 1_000.0);
            } else if t - tr.step_s >= REBALANCE_GIVE_UP_S {
                self.rebalance_s.push(REBALANCE_GIVE_UP_S);
            } else {
                open.push(tr);
            }
        }
        self.trackers = open;
        if now_ns % S < 100_000_000 {
            for dc in 0..demand.len() {
                self.series.demand[dc].push(demand[dc]);
                self.series.allocation[dc].push(allocation[dc]);
            }
        }
    }

    pub fn finish(&mut self, upstream: &Upstream) {
        let ratio = |rows: &[Vec<u32>], adm: &[Vec<u32>], cap: f64| {
            let (mut a, mut o) = (0.0, 0.0);
            for (ro, ra) in rows.iter().zip(adm) {
                o += (ro.iter().sum::<u32>() as f64).min(cap);
                a += ra.iter().sum::<u32>() as f64;
            }
            if o > 0.0 {
                (a / o).min(1.0)
            } else {
                1.0
            }
        };
        self.utilization = ratio(&self.offered, &self.admitted, self.cap_per_s);
        if let Some(from) = self.liveness_from_s {
            let from = from as usize;
            if from < self.offered.len() {
                self.liveness_utilization = Some(ratio(&self.offered[from..], &self.admitted[from..], self.cap_per_s));
            }
        }
        for dc in 0..self.series.admitted.len() {
            self.series.admitted[dc] = self.admitted.iter().map(|r| r[dc] as f64).collect();
        }
        self.upstream_calls = upstream.calls;
        self.upstream_rejections = upstream.rejected;
        self.max_window_ratio = upstream.max_1s_calls as f64 / self.sc.hard.per_second() as f64;
        if let Some(partner) = upstream.partner.as_ref() {
            let admitted: Vec<u64> = self.admitted.iter().map(|r| r.iter().map(|&a| a as u64).sum()).collect();
            let (r, renew_s) = (self.sc.quota.rate_per_s(), self.sc.renew_ms as f64 / 1_000.0);
            self.hidden_drop = crate::adaptive_metrics::hidden_drop_metrics(
                partner,
                &admitted,
                &self.effective_rate_per_s,
                r,
                renew_s,
            );
        }
    }
}
