//! A DC manager whose pods the test plays by hand (no `PodCore`): their reports are written from
//! counters, and the newest pod lease sent to each is kept as what it holds.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::dc_manager::{DcManagerConfig, DcManagerCore, DcOutput, FailMode};
use leasehold_core::lease_intake::LeaseRejection;
use leasehold_core::quota::Quota;
use leasehold_core::wire::{DcLease, LeaseVersion, PodLease, PodReport};
use std::collections::BTreeMap;

use super::MS;

/// A hand-written report of pod `pod` of BKK (limit `api`, 250 ms interval, weight 1): it offered
/// `offered` and admitted `admitted` of it (the rest rejected), and acks `ack`.
pub(crate) fn pod_report(
    pod: &str,
    incarnation: u64,
    seq: u64,
    (offered, admitted): (u64, u64),
    healthy: bool,
    ack: Option<LeaseVersion>,
) -> PodReport {
    PodReport {
        v: 1,
        limit: "api".into(),
        dc: "bkk".into(),
        pod: pod.into(),
        incarnation,
        seq,
        interval_ms: 250,
        offered,
        admitted,
        rejected: offered - admitted,
        queued: 0,
        errors: 0,
        upstream_429: 0,
        healthy,
        draining: false,
        weight: 1.0,
        lease_in_use: ack,
        periods: 1,
        held: None,
    }
}

/// The sequence number of the manager's report among `out`, if it sent one.
pub(crate) fn report_seq_of(out: &[DcOutput]) -> Option<u64> {
    out.iter().find_map(|o| match o {
        DcOutput::Report(r) => Some(r.seq),
        _ => None,
    })
}

/// BKK's manager (configured by `cfg`, limit `api`) and its scripted pods.
pub(crate) struct ScriptedDc {
    pub core: DcManagerCore,
    /// The floor it read at its start (version e1v0), carried by the DC leases it is given.
    pub floor: Quota,
    /// The pods' incarnation, and what each of their reports says it offered and admitted.
    pub incarnation: u64,
    pub counters: (u64, u64),
    /// The last report sequence number of each pod.
    pub pod_seq: BTreeMap<String, u64>,
    /// The newest lease sent to each pod.
    pub held: BTreeMap<String, PodLease>,
    /// How many DC leases it was given.
    pub dc_leases: u64,
}

impl ScriptedDc {
    pub(crate) fn new(cfg: DcManagerConfig, floor: Quota, now: u64, incarnation: u64, counters: (u64, u64)) -> Self {
        let mut core = DcManagerCore::new(cfg, now);
        core.on_floor(floor, LeaseVersion::new(1, 0), now);
        ScriptedDc { core, floor, incarnation, counters, pod_seq: BTreeMap::new(), held: BTreeMap::new(), dc_leases: 0 }
    }

    /// Give the manager a DC lease of `quota` for `ttl_ms`, answering its report `basis_seq`.
    pub(crate) fn dc_lease(
        &mut self,
        quota: Quota,
        ttl_ms: u64,
        version: LeaseVersion,
        basis_seq: u64,
        now: u64,
    ) -> Result<(), LeaseRejection> {
        self.dc_leases += 1;
        let lease = DcLease {
            v: 1,
            limit: "api".into(),
            dc: "bkk".into(),
            holder: self.core.config().instance.clone(),
            version,
            lease_id: format!("l{}", self.dc_leases),
            quota,
            floor: self.floor,
            ttl_ms,
            basis_seq,
            predecessor: None,
        };
        let out = self.core.on_dc_lease(&lease, now)?;
        self.absorb(out);
        Ok(())
    }

    /// Keep the pod leases among `out` as what their pods hold.
    pub(crate) fn absorb(&mut self, out: Vec<DcOutput>) {
        for o in out {
            if let DcOutput::PodLease(l) = o {
                self.held.insert(l.pod.to_string(), l);
            }
        }
    }

    /// Pod `pod` reports at `now`; `ack`: it reports the newest lease it holds as in use.
    pub(crate) fn report(&mut self, pod: &str, now: u64, healthy: bool, ack: bool) {
        let seq = self.pod_seq.entry(pod.into()).or_default();
        *seq += 1;
        let in_use = if ack { self.held.get(pod).map(|l| l.version) } else { None };
        let r = pod_report(pod, self.incarnation, *seq, self.counters, healthy, in_use);
        let out = self.core.on_pod_report(&r, now);
        self.absorb(out);
    }
}

/// BKK's manager `instance` (pod leases of 2 s) that has read `floor`, with scripted pods that
/// report every 250 ms (offered 500, admitted 100) and keep the newest lease they were sent.
pub(crate) fn bkk_with_scripted_pods(
    mode: FailMode,
    floor: Quota,
    instance: &str,
    now: u64,
    bugs: KnownBugs,
) -> ScriptedDc {
    let mut cfg = DcManagerConfig::new("api", "bkk", instance);
    cfg.fail_mode = mode;
    cfg.bugs = bugs;
    cfg.pod_ttl_ms = 2_000;
    ScriptedDc::new(cfg, floor, now, 7, (500, 100))
}

/// The two pods the [`Drive`] tests run.
pub(crate) const PODS: [&str; 2] = ["p1", "p2"];

/// How the tests drive a [`ScriptedDc`] through time.
pub(crate) trait Drive {
    /// The manager's report to the coordinator at `now`: its sequence number.
    fn report_seq(&mut self, now: u64) -> u64;
    /// Σ of the pod leases issued at or after `since` (what pods may spend after that instant).
    fn issued_since(&self, since: u64, issued_at: &BTreeMap<String, u64>) -> Quota;
    /// Run pods and ticks from `from` to `to`; returns the largest Σ of leases issued after `since`.
    fn run(&mut self, pods: &[&str], from: u64, to: u64, since: u64) -> Quota;
}

impl Drive for ScriptedDc {
    fn report_seq(&mut self, now: u64) -> u64 {
        let out = self.core.tick(now);
        let seq = report_seq_of(&out);
        self.absorb(out);
        seq.expect("a tick always reports")
    }

    fn issued_since(&self, since: u64, issued_at: &BTreeMap<String, u64>) -> Quota {
        self.held
            .iter()
            .filter(|(p, _)| issued_at.get(*p).is_some_and(|t| *t >= since))
            .fold(Quota::ZERO, |s, (_, l)| s.saturating_add(l.quota))
    }

    fn run(&mut self, pods: &[&str], from: u64, to: u64, since: u64) -> Quota {
        let mut issued_at: BTreeMap<String, u64> = BTreeMap::new();
        let mut worst = Quota::ZERO;
        let mut t = from;
        while t < to {
            let before: BTreeMap<String, LeaseVersion> =
                self.held.iter().map(|(p, l)| (p.clone(), l.version)).collect();
            for pod in pods {
                self.report(pod, t, true, true);
            }
            let out = self.core.tick(t);
            self.absorb(out);
            for (p, l) in &self.held {
                if before.get(p) != Some(&l.version) {
                    issued_at.insert(p.clone(), t);
                }
            }
            worst = worst.max(self.issued_since(since, &issued_at));
            t += 250 * MS;
        }
        worst
    }
}
