//! Leadership of the DC (`dc.<dc>` in `lh_leaders`) and the core's inputs and outputs.
//!
//! * Terms follow the core's [`Leadership`] rules (acting measured from the send time of the
//!   last landed write; standbys claim only after seeing the key unchanged for a full TTL). Each
//!   term's epoch is the revision of its claim (strictly increasing), so every pod lease of a
//!   newer term is newer to the pods.
//! * A replica that may not act (not leading, or its last landed renewal too old) does nothing
//!   at all: after a long pause it cannot issue from a lease a successor may already be using.
//!   The successor's core waits a full pod-lease lifetime before it uses the floor (see
//!   `DcManagerCore::new`), and uses only the floor the coordinator's record names.

use leasehold_process::clock::LeaseClock;
use leasehold_shared::dc_manager::{DcManagerCore, DcOutput};
use leasehold_shared::leadership::{Leadership, LeadershipConfig, Transition};
use leasehold_shared::subjects::{self, PodChannel};
use leasehold_shared::wire::{decode, encode, LeaseReturn, LedgerRecord, PodReport};
use std::time::Duration;
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
    /// When the last DC lease arrived (this clock, ns).
    last_dc_lease_at_ns: Option<u64>,
}

pub struct Manager {
    id: String,
    settings: Settings,
    client: async_nats::Client,
    leaders: Store,
    /// The ledger bucket, read directly when a term begins (the watch may lag).
    ledger: Store,
    clock: LeaseClock,
    leadership: Leadership,
    term: Option<Term>,
    /// The DC's floor in the coordinator's last record and its version (none until one was
    /// read).
    floor: Option<(leasehold_shared::quota::Quota, leasehold_shared::wire::LeaseVersion)>,
    /// Pods' admissions as reported, with when (this clock, ns).
    admitted_window: Vec<(u64, u64)>,
    pub status: Status,
}

const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);

impl Manager {
    pub fn new(
        settings: Settings,
        client: async_nats::Client,
        leaders: Store,
        ledger: Store,
        clock: LeaseClock,
    ) -> Self {
        let id = settings.id();
        let leadership = Leadership::new(&id, LeadershipConfig::new(settings.leader_ttl_ms));
        Manager {
            id,
            settings,
            client,
            leaders,
            ledger,
            clock,
            leadership,
            term: None,
            floor: None,
            admitted_window: Vec::new(),
            status: Status::default(),
        }
    }

    /// The service's one clock (skewed as configured): every decision reads it.
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Leading, and the last landed renewal recent enough to act.
    fn fresh(&self) -> bool {
        self.term.is_some() && self.leadership.acting_epoch(self.now_ns()).is_some()
    }

    /// Every report interval: keep or seek leadership, then run the core's periodic step.
    pub async fn tick(&mut self) {
        let key = subjects::dc_leader_key(&self.settings.manager.dc).expect("validated");
        let clock = self.clock;
        match leasehold_nats::leader_key::step(&mut self.leadership, &self.leaders, &key, move || clock.now_ns()).await
        {
            Some(Transition::Elected { epoch }) => self.take_over(epoch).await,
            Some(Transition::Deposed { reason }) => {
                if self.term.take().is_some() {
                    warn!(id = %self.id, epoch = self.status.epoch, reason, "stepping down");
                    self.status.step_downs += 1;
                }
                self.status.leading = false;
            }
            None => {}
        }
        if !self.fresh() {
            return;
        }
        let now = self.now_ns();
        let out = self.term.as_mut().expect("fresh").core.tick(now);
        self.route(out).await;
        self.refresh_status();
    }

    async fn take_over(&mut self, epoch: u64) {
        let mut cfg = self.settings.manager.clone();
        cfg.epoch = epoch;
        cfg.instance = format!("{}-e{}", self.id, epoch);
        info!(instance = %cfg.instance, epoch, "leading the DC");
        // The record as the bucket holds it now, not only as the watch last delivered it: a term
        // must start from a floor at least as new as any its predecessor used.
        self.read_record_now().await;
        let now = self.now_ns();
        let mut core = DcManagerCore::new(cfg, now);
        let out = self.floor.map(|(f, v)| core.on_floor(f, v, now)).unwrap_or_default();
        self.term = Some(Term { core, last_dc_lease_at_ns: None });
        self.status.leading = true;
        self.status.epoch = epoch;
        self.status.takeovers += 1;
        self.route(out).await;
    }

    /// Read the ledger record directly and keep its floor if it is newer than the cached one.
    /// On failure the cache stays (the watch keeps it current).
    async fn read_record_now(&mut self) {
        let Ok(key) = subjects::ledger_key(&self.settings.manager.limit) else { return };
        match self.ledger.get(&key).await {
            Ok(Some(payload)) => match decode::<LedgerRecord>(&payload) {
                Ok(rec) => self.remember_floor(&rec),
                Err(_) => self.status.messages_malformed += 1,
            },
            Ok(None) => {}
            Err(e) => warn!(cause = %e, "could not read the ledger record at takeover; using the watched one"),
        }
    }

    /// Cache the record's floor for this DC, never going back to an older version.
    fn remember_floor(&mut self, rec: &LedgerRecord) {
        if let Some((f, v)) = rec.floor_of(&self.settings.manager.dc) {
            if self.floor.is_none_or(|(_, cached)| v >= cached) {
                self.floor = Some((f, v));
            }
        }
    }

    /// A new value of the ledger record: apply the newest DC lease addressed to this term.
    pub async fn on_record(&mut self, payload: &[u8]) {
        let rec = match decode::<LedgerRecord>(payload) {
            Ok(r) => r,
            Err(_) => return self.status.messages_malformed += 1,
        };
        self.remember_floor(&rec);
        if !self.fresh() {
            return;
        }
        let now = self.now_ns();
        let term = self.term.as_mut().expect("fresh");
        // Only the floor the coordinator's durable record names (none if it names none), and
        // never one older than the term already uses.
        let out = self.floor.map(|(f, v)| term.core.on_floor(f, v, now)).unwrap_or_default();
        self.route(out).await;
        let term = self.term.as_mut().expect("fresh");
        let instance = term.core.config().instance.clone();
        let Some(lease) = rec.leases.iter().filter(|l| l.holder == instance).max_by_key(|l| l.version) else { return };
        match term.core.on_dc_lease(lease, now) {
            Ok(out) => {
                term.last_dc_lease_at_ns = Some(self.clock.now_ns());
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

    /// Whether `subject` is the one `pod` may publish `channel` messages on: NATS permissions
    /// confine a pod to its own subjects, so a body naming another pod is refused, not obeyed.
    fn sent_by(&self, subject: &str, pod: &str, channel: PodChannel) -> bool {
        let (limit, dc) = (&self.settings.manager.limit, &self.settings.manager.dc);
        subjects::pod(limit, dc, pod, channel).is_ok_and(|own| own == subject)
    }

    pub async fn on_pod_report(&mut self, subject: &str, payload: &[u8]) {
        let r = match decode::<PodReport>(payload) {
            Ok(r) if self.sent_by(subject, &r.pod, PodChannel::Report) => r,
            Ok(r) => {
                warn!(subject, pod = %r.pod, "a report names another pod than its subject; ignored");
                return self.status.messages_malformed += 1;
            }
            Err(_) => return self.status.messages_malformed += 1,
        };
        if !self.fresh() {
            return;
        }
        self.admitted_window.push((self.clock.now_ns(), r.admitted));
        let now = self.now_ns();
        let out = self.term.as_mut().expect("fresh").core.on_pod_report(&r, now);
        self.route(out).await;
    }

    pub async fn on_return(&mut self, subject: &str, payload: &[u8]) {
        let r = match decode::<LeaseReturn>(payload) {
            Ok(r) if self.sent_by(subject, &r.holder, PodChannel::Return) => r,
            Ok(r) => {
                warn!(subject, holder = %r.holder, "a lease return names another pod than its subject; ignored");
                return self.status.messages_malformed += 1;
            }
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
        let now = self.now_ns();
        const HORIZON_NS: u64 = 1_000_000_000;
        self.admitted_window.retain(|(t, _)| now.saturating_sub(*t) < HORIZON_NS);
        let used: u64 = self.admitted_window.iter().map(|(_, a)| a).sum();
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
        s.pods_eligible = term.core.pods_eligible(now);
        s.budget_rate_per_s = term.core.budget(now).0.rate_per_s();
        s.dc_lease_rate_per_s = term.core.current_lease(now).map_or(0.0, |l| l.quota.rate_per_s());
        s.used_rate_per_s = used as f64;
        s.seconds_since_dc_lease = term.last_dc_lease_at_ns.map(|t| self.clock.seconds_since(t));
    }
}
