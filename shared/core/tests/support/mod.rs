//! Pieces the rule tests share: time units, a hand-driven DC's newest lease, real pods
//! and DC managers as the services configure them, a world of them (`world`) and a manager with
//! scripted pods (`scripted`). Each test file uses what it needs.
#![allow(dead_code)]

pub(crate) mod scripted;
pub(crate) mod world;

use leasehold_core::bugs::KnownBugs;
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore};
use leasehold_core::pod::{PodConfig, PodCore};
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, DcReport, LeaseVersion};

pub(crate) const MS: u64 = 1_000_000;
pub(crate) const S: u64 = 1_000_000_000;

/// A report from `<dc>-mgr` (term 1, 4 healthy pods) asking `demand_per_s`, bound by `ack`, and
/// confirming `floor` (the floor its pods may still spend under, and the newest floor's version).
pub(crate) fn dc_report_asking(
    dc: &str,
    seq: u64,
    ack: Option<LeaseVersion>,
    floor: Option<(Quota, LeaseVersion)>,
    demand_per_s: u64,
) -> DcReport {
    DcReport {
        pods_healthy: 4,
        lease_in_use: ack,
        floor_in_use: floor.map(|(f, _)| f),
        floor_version: floor.map(|(_, v)| v),
        ..DcReport::new("api", dc, &format!("{dc}-mgr"), 1, seq, Quota::per_s(demand_per_s, 0))
    }
}

/// [`dc_report_asking`] 2,000/s: more than any DC gets.
pub(crate) fn dc_report(
    dc: &str,
    seq: u64,
    ack: Option<LeaseVersion>,
    floor: Option<(Quota, LeaseVersion)>,
) -> DcReport {
    dc_report_asking(dc, seq, ack, floor, 2_000)
}

pub(crate) fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The newest DC lease a hand-driven DC received, and the send time of the report it answers
/// (the holder's countdown starts there; no skew: one clock).
#[derive(Default, Clone)]
pub(crate) struct Newest(pub Option<(DcLease, u64)>);

impl Newest {
    pub(crate) fn absorb(&mut self, dc: &str, leases: &[DcLease], basis_sent_at: u64) {
        for l in leases.iter().filter(|l| l.dc == dc) {
            if self.0.as_ref().is_none_or(|(o, _)| l.version > o.version) {
                self.0 = Some((l.clone(), basis_sent_at));
            }
        }
    }

    pub(crate) fn version(&self) -> Option<LeaseVersion> {
        self.0.as_ref().map(|(l, _)| l.version)
    }

    /// What the DC may spend under its newest DC lease at `now` (holder's countdown).
    pub(crate) fn spendable(&self, now: u64) -> Quota {
        match &self.0 {
            Some((l, sent)) if sent + l.ttl_ms * MS > now => l.quota,
            _ => Quota::ZERO,
        }
    }
}

/// A real pod of limit `api` in DC `dc`.
pub(crate) fn pod(dc: &str, name: &str) -> PodCore {
    let cfg = PodConfig {
        limit: "api".into(),
        dc: dc.into(),
        pod: name.into(),
        incarnation: 7,
        weight: 1.0,
        bugs: Default::default(),
    };
    PodCore::new(cfg, 0)
}

/// A real DC manager term of limit `api`.
pub(crate) fn manager(dc: &str, instance: &str, epoch: u64, now: u64) -> DcManagerCore {
    manager_with_bugs(dc, instance, epoch, now, KnownBugs::default())
}

/// As [`manager`], with holes of docs/FINDINGS.md brought back (negative controls).
pub(crate) fn manager_with_bugs(dc: &str, instance: &str, epoch: u64, now: u64, bugs: KnownBugs) -> DcManagerCore {
    let mut cfg = DcManagerConfig::new("api", dc, instance);
    cfg.bugs = bugs;
    cfg.epoch = epoch;
    cfg.expiry.egress_spread_ms = 150;
    cfg.validate().expect("valid");
    DcManagerCore::new(cfg, now)
}

/// The DC leases the coordinator still counts for DC `dc` at `t`, for a test's log.
pub(crate) fn counted_dc_leases(coord: &leasehold_core::coordinator::CoordinatorCore, dc: &str, t: u64) -> Vec<String> {
    let prefix = format!("{dc}-");
    coord
        .ledger()
        .entries()
        .filter(|(h, e)| h.starts_with(&prefix) && e.live_until_ns > t)
        .map(|(_, e)| {
            format!("{} {}/s until {:.2}s", e.version, e.quota.rate_milli_per_s / 1_000, secs(e.live_until_ns))
        })
        .collect()
}

/// What each pod may spend at `t` ("-": nothing), for a test's log.
pub(crate) fn pods_applied(pods: &[PodCore], t: u64) -> Vec<String> {
    pods.iter()
        .map(|p| {
            p.applied(t).map_or("-".into(), |a| {
                format!("{}/s {} until {:.2}s", a.quota.rate_milli_per_s / 1_000, a.version, secs(a.expires_at_ns))
            })
        })
        .collect()
}

/// Limit `api` over BKK and Europe with these floors (rate/s), egress spread 150 ms.
pub(crate) fn config(quota: Quota, bkk_floor: u64, eu_floor: u64) -> leasehold_core::coordinator::LimitConfig {
    config_with_bugs(quota, bkk_floor, eu_floor, KnownBugs::default())
}

/// As [`config`], with DC leases of `dc_ttl_ms`.
pub(crate) fn config_with_dc_ttl(
    quota: Quota,
    bkk_floor: u64,
    eu_floor: u64,
    dc_ttl_ms: u64,
) -> leasehold_core::coordinator::LimitConfig {
    let mut c = config(quota, bkk_floor, eu_floor);
    c.dc_ttl_ms = dc_ttl_ms;
    c.validate().expect("a valid configuration");
    c
}

/// `config` with DC `dc`'s floor holding `tokens` of burst (one per pod that serves on it: a
/// pod lease cut from a floor without a whole token admits nothing, so the DC manager cuts none).
pub(crate) fn floor_burst(
    mut config: leasehold_core::coordinator::LimitConfig,
    dc: &str,
    tokens: u64,
) -> leasehold_core::coordinator::LimitConfig {
    let spec = config.dcs.iter_mut().find(|d| d.name == dc).expect("the DC is listed");
    spec.floor.burst_milli = tokens * leasehold_core::quota::MILLI;
    config.validate().expect("a valid configuration");
    config
}

/// As [`config`], with holes of docs/FINDINGS.md brought back.
pub(crate) fn config_with_bugs(
    quota: Quota,
    bkk_floor: u64,
    eu_floor: u64,
    bugs: KnownBugs,
) -> leasehold_core::coordinator::LimitConfig {
    let floors = [("bkk", Quota::per_s(bkk_floor, 0)), ("eu", Quota::per_s(eu_floor, 0))];
    let mut c = leasehold_core::coordinator::LimitConfig::new("api", quota, &floors);
    c.expiry.egress_spread_ms = 150;
    c.bugs = bugs;
    c.validate().expect("a valid configuration");
    c
}

/// The newest lease each DC received, and when.
#[derive(Default)]
pub(crate) struct Held(pub std::collections::BTreeMap<String, (DcLease, u64)>);

impl Held {
    pub(crate) fn absorb(&mut self, leases: Vec<DcLease>, now: u64) {
        for l in leases {
            self.0.insert(l.dc.clone(), (l, now));
        }
    }

    pub(crate) fn version(&self, dc: &str) -> Option<LeaseVersion> {
        self.0.get(dc).map(|(l, _)| l.version)
    }

    /// Σ of the newest lease each DC holds at `now` (unexpired: countdown from the grant).
    pub(crate) fn spendable(&self, now: u64) -> Quota {
        self.0
            .values()
            .filter(|(l, at)| at + l.ttl_ms * MS > now)
            .fold(Quota::ZERO, |s, (l, _)| s.saturating_add(l.quota))
    }
}

/// Limit `api` of `rate` per second (burst 20) over BKK and Europe without floors, with DC leases
/// of `dc_ttl_ms`.
pub(crate) fn api_limit(rate: u64, dc_ttl_ms: u64) -> leasehold_core::coordinator::LimitConfig {
    config_with_dc_ttl(Quota::per_s(rate, 20), 0, 0, dc_ttl_ms)
}

/// A first leader with `before`, both DCs asking for everything; the record it leaves behind.
pub(crate) fn first_term(before: leasehold_core::coordinator::LimitConfig) -> leasehold_core::wire::LedgerRecord {
    let mut a = leasehold_core::coordinator::CoordinatorCore::new(before, "coord-a", 1);
    a.on_dc_report(&dc_report("bkk", 1, None, None), 0);
    a.on_dc_report(&dc_report("eu", 1, None, None), 0);
    assert_eq!(a.tick(0).len(), 2);
    a.record()
}

/// The floor `rec` names for `dc` and its version, for a test's log.
pub(crate) fn named_floor(rec: &leasehold_core::wire::LedgerRecord, dc: &str) -> Option<(String, String)> {
    rec.floor_of(dc).map(|(f, v)| (f.to_string(), v.to_string()))
}
