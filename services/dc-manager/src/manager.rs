//! Leadership of the DC (`dc.<dc>` in `lh_leaders`) and the core's inputs and outputs.
//!
//! * A replica leads while it holds the key; each term gets epoch = the key's KV revision
//!   (strictly increasing), so every pod lease of a newer term is newer to the pods.
//! * A leader whose last successful renewal is older than 80% of the TTL (its own monotonic
//!   clock) does nothing at all until it renews: after a long pause it cannot issue from a lease
//!   a successor may already be using. The successor's core waits a full pod-lease lifetime
//!   before it uses the floor (see `DcManagerCore::new`).

use bytes::Bytes;
use leasehold_nats::kv::{compare_and_set, CasOutcome};
use leasehold_shared::dc_manager::{DcManagerCore, DcOutput};
use leasehold_shared::subjects::{self, PodChannel};
use leasehold_shared::wire::{decode, encode, LeaseReturn, LedgerRecord, PodReport};
use std::time::{Duration, Instant};
use tracing::{info, warn};

use crate::config::Settings;
use async_nats::jetstream::kv::Store;

/// What the manager is doing, for tests, metrics and `inspect`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub leading: bool,
    pub epoch: u64,
    pub instance: String,
    pub takeovers: u64,
    pub step_downs: u64,
    pub pods_eligible: u32,
    pub pods_known: u32,
    pub pod_leases_issued: u64,
    pub passes_full: u64,
    pub passes_growth: u64,
    pub dc_leases_applied: u64,
    pub dc_leases_refused: u64,
    pub messages_malformed: u64,
    pub reports_stale: u64,
    pub returns: u64,
    pub publish_failures: u64,
    /// Budget the pods share now: floor + DC lease (rate per second).
    pub budget_rate_per_s: f64,
    pub dc_lease_rate_per_s: f64,
    /// Σ admitted rate of the last report round (per second).
    pub used_rate_per_s: f64,
    pub seconds_since_dc_lease: Option<f64>,
}

struct Term {
    core: DcManagerCore,
    leader_rev: u64,
    renewed_at: Instant,
    last_dc_lease_at: Option<Instant>,
}

pub struct Manager {
    id: String,
    settings: Settings,
    client: async_nats::Client,
    leaders: Store,
    origin: Instant,
    term: Option<Term>,
    last_renew_try: Option<Instant>,
    admitted_window: Vec<(Instant, u64)>,
    pub status: Status,
}

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

impl Manager {
    pub fn new(settings: Settings, client: async_nats::Client, leaders: Store) -> Self {
        let id = settings.id();
        Manager {
            id,
            settings,
            client,
            leaders,
            origin: Instant::now(),
            term: None,
            last_renew_try: None,
            admitted_window: Vec::new(),
            status: Status::default(),
        }
    }

    fn now_ns(&self) -> u64 {
        let elapsed = self.origin.elapsed().as_nanos() as u64;
        let s = &self.settings;
        leasehold_shared::expiry::skewed_ns(elapsed, s.clock_offset_ms * 1_000_000, s.clock_drift_ppm)
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.settings.leader_ttl_ms)
    }

    /// Leading, and renewed recently enough to act.
    fn fresh(&self) -> bool {
        self.term.as_ref().is_some_and(|t| t.renewed_at.elapsed() < self.ttl().mul_f64(0.8))
    }

    fn step_down(&mut self, why: &str) {
        if self.term.take().is_some() {
            warn!(id = %self.id, epoch = self.status.epoch, reason = why, "stepping down");
            self.status.step_downs += 1;
        }
        self.status.leading = false;
    }

    /// Every report interval: keep or seek leadership, then run the core's periodic step.
    pub async fn tick(&mut self) {
        let key = subjects::dc_leader_key(&self.settings.manager.dc).expect("validated");
        let renew_due = self.last_renew_try.is_none_or(|t| t.elapsed() >= self.ttl() / 4);
        if renew_due {
            self.last_renew_try = Some(Instant::now());
            let expected = self.term.as_ref().map(|t| t.leader_rev);
            match compare_and_set(&self.leaders, &key, Bytes::from(self.id.clone()), expected).await {
                Ok(CasOutcome::Written { revision }) => match self.term.as_mut() {
                    Some(t) => {
                        t.leader_rev = revision;
                        t.renewed_at = Instant::now();
                    }
                    None => self.take_over(revision),
                },
                Ok(CasOutcome::Conflict) => self.step_down("leader key taken"),
                Ok(CasOutcome::Unknown) | Err(_) => {}
            }
        }
        if !self.fresh() {
            if self.term.as_ref().is_some_and(|t| t.renewed_at.elapsed() > self.ttl()) {
                self.step_down("cannot renew the leader key");
            }
            return;
        }
        let now = self.now_ns();
        let out = self.term.as_mut().expect("fresh").core.tick(now);
        self.route(out).await;
        self.refresh_status();
    }

    fn take_over(&mut self, revision: u64) {
        let mut cfg = self.settings.manager.clone();
        cfg.epoch = revision;
        cfg.instance = format!("{}-e{}", self.id, revision);
        info!(instance = %cfg.instance, epoch = revision, "leading the DC");
        let core = DcManagerCore::new(cfg, self.settings.floor, self.now_ns());
        self.term = Some(Term { core, leader_rev: revision, renewed_at: Instant::now(), last_dc_lease_at: None });
        self.status.leading = true;
        self.status.epoch = revision;
        self.status.takeovers += 1;
    }

    /// A new value of the ledger record: apply the newest DC lease addressed to this term.
    pub async fn on_record(&mut self, payload: &[u8]) {
        let rec = match decode::<LedgerRecord>(payload) {
            Ok(r) => r,
            Err(_) => return self.status.messages_malformed += 1,
        };
        if !self.fresh() {
            return;
        }
        let now = self.now_ns();
        let term = self.term.as_mut().expect("fresh");
        let instance = term.core.config().instance.clone();
        let Some(lease) = rec.leases.iter().filter(|l| l.holder == instance).max_by_key(|l| l.version) else { return };
        match term.core.on_dc_lease(lease, now) {
            Ok(out) => {
                term.last_dc_lease_at = Some(Instant::now());
                self.status.dc_leases_applied += 1;
                self.route(out).await;
            }
            // The watch re-delivers the whole record: an already-applied lease is normal.
            Err(leasehold_shared::holder::LeaseRejection::NotNewer { .. }) => {}
            Err(e) => {
                self.status.dc_leases_refused += 1;
                warn!(cause = %e, "DC lease refused");
            }
        }
        self.refresh_status();
    }

    pub async fn on_pod_report(&mut self, payload: &[u8]) {
        let r = match decode::<PodReport>(payload) {
            Ok(r) => r,
            Err(_) => return self.status.messages_malformed += 1,
        };
        if !self.fresh() {
            return;
        }
        self.admitted_window.push((Instant::now(), r.admitted));
        let now = self.now_ns();
        let out = self.term.as_mut().expect("fresh").core.on_pod_report(&r, now);
        self.route(out).await;
    }

    pub async fn on_return(&mut self, payload: &[u8]) {
        let r = match decode::<LeaseReturn>(payload) {
            Ok(r) => r,
            Err(_) => return self.status.messages_malformed += 1,
        };
        if !self.fresh() {
            return;
        }
        let now = self.now_ns();
        let out = self.term.as_mut().expect("fresh").core.on_lease_return(&r, now);
        self.route(out).await;
    }

    async fn route(&mut self, out: Vec<DcOutput>) {
        let (limit, dc) = (&self.settings.manager.limit, &self.settings.manager.dc);
        for o in out {
            let (subject, payload) = match &o {
                DcOutput::PodLease(l) => (subjects::pod(limit, dc, &l.pod, PodChannel::Lease), encode(l)),
                DcOutput::ReturnAck(a) => (subjects::pod(limit, dc, &a.holder, PodChannel::Ack), encode(a)),
                DcOutput::Report(r) => (subjects::dc_report(limit, dc), encode(r)),
            };
            let Ok(subject) = subject else { continue };
            // While disconnected publishes buffer and may block: never stall the loop on them.
            let sent = tokio::time::timeout(PUBLISH_TIMEOUT, self.client.publish(subject, payload.into())).await;
            if !matches!(sent, Ok(Ok(()))) {
                self.status.publish_failures += 1;
            }
        }
    }

    fn refresh_status(&mut self) {
        let horizon = Duration::from_secs(1);
        self.admitted_window.retain(|(t, _)| t.elapsed() < horizon);
        let used: u64 = self.admitted_window.iter().map(|(_, a)| a).sum();
        let now = self.now_ns();
        let Some(term) = self.term.as_ref() else { return };
        let s = &mut self.status;
        let c = term.core.counters();
        s.instance = term.core.config().instance.clone();
        s.pod_leases_issued = c.pod_leases_issued;
        s.passes_full = c.passes_full;
        s.passes_growth = c.passes_growth;
        s.reports_stale = c.reports_stale + c.reports_foreign;
        s.returns = c.returns;
        s.pods_known = term.core.pods().count() as u32;
        s.pods_eligible = term.core.pods().filter(|(_, v)| v.healthy && !v.draining).count() as u32;
        s.budget_rate_per_s = term.core.budget(now).0.rate_per_s();
        s.dc_lease_rate_per_s = term.core.current_lease(now).map_or(0.0, |l| l.quota.rate_per_s());
        s.used_rate_per_s = used as f64;
        s.seconds_since_dc_lease = term.last_dc_lease_at.map(|t| t.elapsed().as_secs_f64());
    }
}
