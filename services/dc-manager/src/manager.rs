//! Leadership of the DC (`dc.<dc>` in `lh_leaders`) and the cores' inputs and outputs.
//!
//! * One process serves every limit of its DC (or the one its settings name): a term holds one
//!   [`DcManagerCore`] per limit, each a holder of its own (`<id>-e<epoch>`) on that limit's
//!   ledger. A limit's core is made when the term begins (for every limit whose record names
//!   this DC) or when the limit first shows up (its record, or a pod's report) during the term;
//!   each core waits out earlier terms' pod leases from when it is made.
//! * Terms follow the core's [`Leadership`] rules (acting measured from the send time of the
//!   last landed write; standbys claim only after seeing the key unchanged for a full TTL). Each
//!   term's epoch is the revision of its claim (strictly increasing), so every pod lease of a
//!   newer term is newer to the pods.
//! * A replica that may not act (not leading, or its last landed renewal too old) does nothing
//!   at all: after a long pause it cannot issue from a lease a successor may already be using.
//!   The successor's cores wait a full pod-lease lifetime before they use a floor (see
//!   `DcManagerCore::new`): the longest its predecessor's term record names, whatever its own
//!   settings say (`TermRecords`, written with every claim and renewal of the key), and use only
//!   the floor the coordinator's record names.

use leasehold_core::dc_manager::{DcManagerCore, PodLeaseBounds, RecordRules, TermRecords};
use leasehold_core::leadership::{Leadership, Transition};
use leasehold_core::quota::Quota;
use leasehold_core::readiness::ReplicaView;
use leasehold_core::sorted_map::PlaceHint;
use leasehold_core::subjects::{self, PodChannel};
use leasehold_core::wire::{
    decode, decode_pod_reports_saying_how, LeaseReturns, LeaseVersion, PodReport, ReportsReadBy,
};
use leasehold_process::clock::LeaseClock;
use std::collections::BTreeMap;
use tracing::{debug, info, warn};

use crate::outbox::Outbox;
use crate::settings::Settings;
pub use status::{LimitStatus, Status};

mod floor_confirmations;
mod ledger_reads;
mod records;
mod status;
mod view_places;
use async_nats::jetstream::kv::Store;

pub(crate) struct LimitTerm {
    pub(crate) core: DcManagerCore,
    /// When the last DC lease arrived (this clock, ns).
    pub(crate) last_dc_lease_at_ns: Option<u64>,
    /// Pods' admissions as reported, with when (this clock, ns): the status's used rate.
    pub(crate) admitted_window: Vec<(u64, u64)>,
}

/// The limits a term serves, by name: hashed, as every report item looks its limit up (a
/// `BTreeMap` of 1,000 limits compared ten names a lookup). Nothing reads them in order.
pub(crate) type LimitTerms = std::collections::HashMap<String, LimitTerm, foldhash::fast::FixedState>;

pub(crate) struct Term {
    pub(crate) epoch: u64,
    pub(crate) instance: String,
    pub(crate) limits: LimitTerms,
    /// Whether this term has read every ledger group directly: until then a core uses a floor
    /// only if the DC's floor confirmations vouch for it (`DcManagerCore::await_ledger_read`).
    read_every_group: bool,
    /// When this term last asked for a direct read (this clock, ns), and whether the answer is
    /// still to come.
    read_asked_ns: u64,
    read_in_flight: bool,
    /// Whether a direct read of this term has failed (counted once in `terms_without_ledger`).
    read_failed: bool,
    /// The DC's floor confirmations as last read or written (`None`: unknown; read again).
    confirmed: Option<floor_confirmations::Confirmed>,
}

/// How long after a failed direct read of the ledger (the link to the hub cut or slow) a term
/// asks again.
const LEDGER_RETRY_NS: u64 = 2_000_000_000;

pub struct Manager {
    id: String,
    pub(crate) settings: Settings,
    client: async_nats::Client,
    leaders: Store,
    /// Asks for a direct read of every ledger group (a term's epoch; answered through
    /// [`Manager::on_direct_read`]): each term reads the ledger when it begins (the watch may lag).
    direct_reads: tokio::sync::mpsc::Sender<u64>,
    pub(crate) clock: LeaseClock,
    leadership: Leadership,
    /// What this replica writes in the DC's leader key and what its terms inherit from it.
    records: TermRecords,
    pub(crate) term: Option<Term>,
    /// Per limit, this DC's floor in the coordinator's last record and its version (none until
    /// one was read).
    floors: BTreeMap<String, Option<(Quota, LeaseVersion)>>,
    /// Every limit served whose ledger record the watch has delivered: pods' reports make a core
    /// only for these.
    recorded: std::collections::BTreeSet<String>,
    /// Per limit, whether its newest record runs it retired (removed: pod leases say so) and
    /// its pod rules (split, fail mode), taken only from a newer revision than the last.
    record_rules: RecordRules,
    /// When the status's limits were last refreshed (this clock, ns; see `refresh_status`).
    pub(crate) status_refreshed_ns: Option<u64>,
    /// What the cores said, sent as batches by [`Manager::flush`] (leases paced per pod).
    outbox: Outbox,
    /// Per pod, where its report items found their views last time (`view_places.rs`).
    view_places: view_places::ViewPlaces,
    /// When the inbound queue last dropped a pod's report batch unread: each core hears of it
    /// at its tick (`DcManagerConfig::heartbeat_timeout_after_drops_ms`).
    pub(crate) reports_shed_at_ns: Option<u64>,
    /// The inbound queue has read every batch that arrived before then (`None`: not looked yet):
    /// each core hears of it at its tick ([`DcManagerCore::note_reports_read_through`]).
    pub(crate) reports_read_through_ns: Option<u64>,
    /// A DC lease too short for full pod leases was warned of (once per process).
    short_dc_ttl_warned: bool,
    pub status: Status,
}

impl Manager {
    pub fn new(
        settings: Settings,
        client: async_nats::Client,
        leaders: Store,
        direct_reads: tokio::sync::mpsc::Sender<u64>,
        clock: LeaseClock,
    ) -> Self {
        let id = settings.id();
        let outbox = Outbox::new(settings.manager.renew_interval_ms, settings.report_interval_ms);
        let leadership = Leadership::new(&id, leasehold_nats::leader_key::config(settings.leader_ttl_ms));
        let records =
            TermRecords::new(PodLeaseBounds::of(&settings.manager), settings.leader_ttl_ms, &settings.manager.bugs);
        Manager {
            id,
            settings,
            client,
            leaders,
            direct_reads,
            clock,
            leadership,
            records,
            term: None,
            floors: BTreeMap::new(),
            status_refreshed_ns: None,
            record_rules: RecordRules::default(),
            recorded: Default::default(),
            outbox,
            view_places: Default::default(),
            reports_shed_at_ns: None,
            reports_read_through_ns: None,
            short_dc_ttl_warned: false,
            status: Status::default(),
        }
    }

    /// The service's one clock (skewed as configured): every decision reads it.
    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    fn dc(&self) -> &str {
        &self.settings.manager.dc
    }

    /// Whether this process serves `limit` (every limit, unless its settings name one).
    fn serves(&self, limit: &str) -> bool {
        self.settings.serves(limit)
    }

    /// Leading, and the last landed renewal recent enough to act.
    fn fresh(&self) -> bool {
        self.term.is_some() && self.leadership.acting_epoch(self.now_ns()).is_some()
    }

    /// Every report interval: keep or seek leadership, then run every core's periodic step.
    pub async fn tick(&mut self) {
        let key = subjects::dc_leader_key(self.dc()).expect("validated");
        let clock = self.clock;
        let mut reached = self.status.replica.key_reached_ns;
        let transition = leasehold_nats::leader_key::step(
            &mut self.leadership,
            &mut self.records,
            &self.leaders,
            &key,
            move || clock.now_ns(),
            &mut reached,
        )
        .await;
        match transition {
            Some(Transition::Elected { epoch }) => self.take_over(epoch).await,
            Some(Transition::Deposed { reason }) => {
                self.outbox.drop_leases();
                if self.term.take().is_some() {
                    warn!(id = %self.id, epoch = self.status.epoch, reason, "stepping down");
                    self.status.step_downs += 1;
                }
                self.status.leading = false;
                self.status.ledger_read = false;
                self.status.limits.clear();
            }
            None => {}
        }
        // What `/readyz` judges.
        self.status.replica = ReplicaView::of(&self.leadership, self.term.is_some(), reached);
        self.retry_direct_read();
        if !self.fresh() {
            // Leases issued while acting are safe to deliver late, but a replica that may not act
            // sends nothing.
            self.outbox.drop_leases();
            return;
        }
        // Floors are written to the DC's confirmations before any report confirms them. The
        // writes take time: a term that lapsed meanwhile sends nothing.
        self.persist_floor_confirmations().await;
        if !self.fresh() {
            self.outbox.drop_leases();
            return;
        }
        let now = self.now_ns();
        let read_through = self.reports_read_through_ns.unwrap_or(now);
        self.status.report_read_lag_ms = now.saturating_sub(read_through) / leasehold_core::expiry::NS_PER_MS;
        let (shed_at, read_through) = (self.reports_shed_at_ns, self.reports_read_through_ns);
        for lt in self.term.iter_mut().flat_map(|t| t.limits.values_mut()) {
            if let Some(at) = shed_at {
                lt.core.note_reports_dropped(at);
            }
            if let Some(at) = read_through {
                lt.core.note_reports_read_through(at);
            }
            self.outbox.push(lt.core.tick(now));
        }
        self.view_places.forget_unheard(now);
        self.refresh_status_when_due();
    }

    async fn take_over(&mut self, epoch: u64) {
        let instance = format!("{}-e{}", self.id, epoch);
        info!(%instance, epoch, "leading the DC");
        self.term = Some(Term {
            epoch,
            instance,
            limits: LimitTerms::default(),
            read_every_group: false,
            read_asked_ns: 0,
            read_in_flight: false,
            read_failed: false,
            confirmed: None,
        });
        self.status.leading = true;
        self.status.ledger_read = false;
        self.status.epoch = epoch;
        self.status.takeovers += 1;
        // Every group once, read directly (by a task of its own: the hub may be slow or cut
        // off): until the answer, each core uses no floor and no emergency allowance unless the
        // DC's floor confirmations (its own JetStream, readable when the hub is not) vouch for
        // the floor its watch delivered (`DcManagerCore::await_ledger_read`).
        self.ask_direct_read();
        let confirmed = self.take_confirmations().await;
        if let Some(t) = self.term.as_mut() {
            t.confirmed = confirmed;
        }
        let known: Vec<String> = self.floors.keys().cloned().collect();
        for limit in known {
            self.ensure_core(&limit).await;
        }
    }

    /// This term's core for `limit`, made now if it has none. It uses the floor the watch
    /// delivered only once the term has read every group directly (a term must start from a
    /// floor at least as new as any its predecessor confirmed), or if the DC's floor
    /// confirmations vouch for it.
    async fn ensure_core(&mut self, limit: &str) {
        let Some(term) = self.term.as_ref() else { return };
        if term.limits.contains_key(limit) || !self.serves(limit) {
            return;
        }
        let mut cfg = self.settings.manager.clone();
        cfg.limit = limit.to_string();
        cfg.epoch = term.epoch;
        cfg.instance = term.instance.clone();
        // Earlier terms' pod leases, as their records bound them (`term_record.rs`).
        cfg.inherited = self.records.inherited();
        let now = self.now_ns();
        let mut core = DcManagerCore::new(cfg, now);
        if let Some(out) = self.prepare_core(limit, &mut core, now) {
            self.status.floors_vouched += 1;
            self.outbox.push(out);
        }
        self.record_rules.apply(&mut core, &self.settings.manager);
        let floor = self.cached_floor(limit);
        let out = floor.map(|(f, v)| core.on_floor(f, v, now)).unwrap_or_default();
        if let Some(t) = self.term.as_mut() {
            t.limits
                .insert(limit.to_string(), LimitTerm { core, last_dc_lease_at_ns: None, admitted_window: Vec::new() });
        }
        info!(limit, "serving the limit");
        self.outbox.push(out);
    }

    /// Whether `subject` is the one `pod` may publish `channel` messages on: NATS permissions
    /// confine a pod to its own subjects, so a batch naming another pod is refused (its items
    /// were checked to name the batch's DC and pod).
    fn sent_by(&self, subject: &str, dc: &str, pod: &str, channel: PodChannel) -> bool {
        dc == self.dc() && subjects::pod(dc, pod, channel).is_ok_and(|own| own == subject)
    }

    /// A pod's reports, one per limit it uses (limits this process doesn't serve are skipped).
    pub async fn on_pod_reports(&mut self, subject: &str, payload: &[u8]) {
        let (decoded, read_by) = decode_pod_reports_saying_how(payload);
        if read_by == ReportsReadBy::Serde && decoded.is_ok() {
            self.status.report_batches_read_by_serde += 1;
        }
        let batch = match decoded {
            Ok(b) if self.sent_by(subject, &b.dc, &b.pod, PodChannel::Report) => b,
            Ok(b) => {
                warn!(subject, pod = %b.pod, "a report batch names another pod or DC than its subject; ignored");
                return self.status.messages_malformed += 1;
            }
            Err(_) => return self.status.messages_malformed += 1,
        };
        if let Some(interval_ms) = batch.reports.iter().map(|r| r.interval_ms).min() {
            self.outbox.note_report_interval(&batch.pod, interval_ms);
        }
        let mut places = self.view_places.take(&batch.pod, batch.reports.len());
        for (r, view_place) in batch.reports.iter().zip(&mut places) {
            if self.serves(&r.limit) {
                self.on_pod_report(r, view_place).await;
            }
        }
        let now = self.now_ns();
        self.view_places.put(&batch.pod, places, now);
    }

    async fn on_pod_report(&mut self, r: &PodReport, view_place: &mut PlaceHint) {
        // The usual case first: a limit this term already serves (its core was made only for a
        // limit with a ledger record, and its floor entry then exists), looked up once.
        if self.fresh() {
            let now = self.now_ns();
            if let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&r.limit)) {
                lt.admitted_window.push((now, r.admitted));
                let out = lt.core.on_pod_report_at(view_place, r, now);
                return self.outbox.push(out);
            }
        }
        if !self.recorded.contains(&r.limit) && !self.floors.contains_key(&r.limit) {
            // No record of it in the ledger (yet): a limit the coordinator does not run makes
            // no core (a pod naming made-up limits must not grow the manager's state).
            return debug!(limit = %r.limit, pod = %r.pod, "a report for a limit with no ledger record; ignored");
        }
        if !self.floors.contains_key(&r.limit) {
            self.floors.insert(r.limit.clone(), None);
        }
        if !self.fresh() {
            return;
        }
        self.ensure_core(&r.limit).await;
        let now = self.now_ns();
        let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&r.limit)) else { return };
        lt.admitted_window.push((now, r.admitted));
        let out = lt.core.on_pod_report_at(view_place, r, now);
        self.outbox.push(out);
    }

    /// A pod's returns, one per limit it gives back.
    pub async fn on_returns(&mut self, subject: &str, payload: &[u8]) {
        let batch = match decode::<LeaseReturns>(payload) {
            Ok(b) if self.sent_by(subject, &b.dc, &b.pod, PodChannel::Return) => b,
            Ok(b) => {
                warn!(subject, pod = %b.pod, "a return batch names another pod or DC than its subject; ignored");
                return self.status.messages_malformed += 1;
            }
            Err(_) => return self.status.messages_malformed += 1,
        };
        if !self.fresh() {
            return;
        }
        let now = self.now_ns();
        for r in &batch.returns {
            if !self.serves(&r.limit) {
                continue;
            }
            let Some(lt) = self.term.as_mut().and_then(|t| t.limits.get_mut(&r.limit)) else { continue };
            let out = lt.core.on_lease_return(r, now);
            self.outbox.push(out);
        }
    }

    /// Send what the cores said: one batch per destination, and each pod's leases when due
    /// (`on_tick`: after [`Manager::tick`]).
    pub async fn flush(&mut self, on_tick: bool) {
        let dc = self.settings.manager.dc.clone();
        let now = self.now_ns();
        self.status.publish_failures += self.outbox.flush(&self.client, &dc, now, on_tick).await;
    }
}
