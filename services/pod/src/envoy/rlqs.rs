//! `envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`: the agent
//! lends its pod's lease of a limit to the Envoys that stream to it, as `TokenBucket` quota
//! assignments Envoy enforces itself (no hop per request). Every rule of how much may be lent,
//! and when, is [`RlqsPool`]'s; this file moves messages.
//!
//! * A bucket's limit is the value of `envoy_rlqs_bucket_key` (default `limit`) in the
//!   `bucket_id` Envoy reports; a limit not in `envoy_rlqs_limits` gets `DENY_ALL`.
//! * Each stream is its own Envoy: a reconnect or a hot restart is a new one.
//! * The limit's lease is kept and lent whole ([`Pod::lend`]): nothing else in the agent takes
//!   from it, and it is never returned (it expires), since Envoy may hold pieces of it.
//! * Reported usage (allowed + denied) is the limit's demand in the pod's reports.
//! * A response that waited in the agent longer than half the delivery margin is not sent:
//!   the stream ends instead (Envoy opens a new one at its next report), since an assignment
//!   delivered late could outlive what the pool counts. This bounds only the agent's own queue:
//!   once tonic has taken a response, HTTP/2 and TCP buffers and Envoy's main thread may still
//!   hold it, and the other half of the margin (with Envoy's worker lag) is an assumption.

use crate::limiter::Limiter;
use crate::pod::Pod;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use leasehold_envoy::{Assignment, BucketRef, RlqsPool, RlqsTiming};
use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the pools decide what to send.
const TICK: Duration = Duration::from_millis(20);
/// Responses a stream may have waiting; more end the stream.
const QUEUE: usize = 256;
/// Envoy buckets one lent limit tracks (bucket ids can carry request values, per user: unbounded);
/// more are answered `DENY_ALL`. Each tick's work grows with their square.
pub const MAX_BUCKETS_PER_LIMIT: usize = 1_000;

/// Counters for `/metrics`.
#[derive(Default, Debug)]
pub struct RlqsCounters {
    pub streams_opened: AtomicU64,
    pub streams_open: AtomicU64,
    pub token_buckets_sent: AtomicU64,
    pub deny_all_sent: AtomicU64,
    /// Streams ended by the agent because a response waited too long to be sent.
    pub streams_ended_late: AtomicU64,
    /// Buckets reported with no limit the agent lends (answered `DENY_ALL`).
    pub unknown_buckets: AtomicU64,
    /// Buckets refused because their limit already tracks [`MAX_BUCKETS_PER_LIMIT`] (`DENY_ALL`).
    pub buckets_over_cap: AtomicU64,
    /// Ticks at which a limit's lease was too short to lend from (the DC manager's
    /// `pod_ttl_ms` below the assignment TTL plus the delivery margin): Envoy denies.
    pub lease_too_short: AtomicU64,
}

struct Lent {
    limiter: Limiter,
    pool: RlqsPool,
    /// Requests Envoy reported (allowed, denied), not yet counted as the limit's demand.
    unreported: (u64, u64),
}

struct StreamOut {
    tx: mpsc::Sender<(u64, RateLimitQuotaResponse)>,
    /// Each bucket's `bucket_id` as Envoy sent it (echoed back exactly), by canonical key.
    ids: HashMap<String, BucketId>,
}

struct State {
    lent: BTreeMap<String, Lent>,
    streams: HashMap<u64, StreamOut>,
}

struct Shared {
    pod: Pod,
    bucket_key: String,
    timing: RlqsTiming,
    state: Mutex<State>,
    next_stream: AtomicU64,
    counters: Arc<RlqsCounters>,
}

/// A limit of `envoy_rlqs_limits` that cannot be lent to Envoy.
#[derive(Debug, thiserror::Error)]
#[error("envoy_rlqs_limits: {0}")]
pub struct LendError(#[source] pub crate::LimitError);

/// The RLQS service; cheap to clone.
#[derive(Clone)]
pub struct RlqsServer {
    shared: Arc<Shared>,
    pub counters: Arc<RlqsCounters>,
}

impl RlqsServer {
    /// Lends `limits` (kept from now on, [`Pod::lend`]) and starts deciding every [`TICK`].
    pub fn new(pod: Pod, limits: &[String], bucket_key: &str, timing: RlqsTiming) -> Result<RlqsServer, LendError> {
        let now = pod.now_ns();
        let mut lent = BTreeMap::new();
        for limit in limits {
            let limiter = pod.lend(limit).map_err(LendError)?;
            let pool = RlqsPool::new(timing, Default::default(), now);
            lent.insert(limit.clone(), Lent { limiter, pool, unreported: (0, 0) });
        }
        let counters = Arc::new(RlqsCounters::default());
        let shared = Arc::new(Shared {
            pod,
            bucket_key: bucket_key.to_string(),
            timing,
            state: Mutex::new(State { lent, streams: HashMap::new() }),
            next_stream: AtomicU64::new(0),
            counters: counters.clone(),
        });
        let weak = Arc::downgrade(&shared);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(TICK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                let ticked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.tick()));
                if ticked.is_err() {
                    // Envoy's buckets run out within their TTL and Envoy denies: waste, not excess.
                    tracing::error!("the RLQS pools stopped on a bug: nothing more is lent to Envoy");
                    return;
                }
            }
        });
        Ok(RlqsServer { shared, counters })
    }
}

/// A `bucket_id` as one string: its entries sorted, `key=value` joined by `,` (escaped).
fn canonical(id: &BucketId) -> String {
    let mut entries: Vec<(&String, &String)> = id.bucket.iter().collect();
    entries.sort();
    let esc = |s: &str| s.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=");
    entries.iter().map(|(k, v)| format!("{}={}", esc(k), esc(v))).collect::<Vec<_>>().join(",")
}

fn action(id: BucketId, a: Assignment) -> BucketAction {
    let ttl = |s: u32| Some(ProtoDuration { seconds: s as i64, nanos: 0 });
    let (strategy, ttl_s) = match a {
        Assignment::TokenBucket { bucket, ttl_s } => (
            Strategy::TokenBucket(TokenBucket {
                max_tokens: bucket.max_tokens,
                tokens_per_fill: Some(UInt32Value { value: bucket.tokens_per_fill }),
                fill_interval: Some(ProtoDuration { seconds: 1, nanos: 0 }),
            }),
            ttl_s,
        ),
        Assignment::DenyAll { ttl_s } => (Strategy::BlanketRule(BlanketRule::DenyAll as i32), ttl_s),
    };
    BucketAction {
        bucket_id: Some(id),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: ttl(ttl_s),
            rate_limit_strategy: Some(RateLimitStrategy { strategy: Some(strategy) }),
        })),
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn on_reports(&self, stream: u64, reports: RateLimitQuotaUsageReports) {
        let now = self.pod.now_ns();
        let mut st = self.lock();
        let State { lent, streams } = &mut *st;
        let Some(out) = streams.get_mut(&stream) else { return };
        let mut denied = Vec::new();
        for usage in reports.bucket_quota_usages {
            let Some(id) = usage.bucket_id else { continue };
            let key = canonical(&id);
            let limit = id.bucket.get(&self.bucket_key).and_then(|l| lent.get_mut(l));
            let bucket = BucketRef { stream, bucket: key };
            let full =
                limit.as_ref().is_some_and(|l| l.pool.buckets() >= MAX_BUCKETS_PER_LIMIT && !l.pool.tracks(&bucket));
            if full {
                self.counters.buckets_over_cap.fetch_add(1, Relaxed);
                denied.push(action(id, Assignment::DenyAll { ttl_s: self.timing.ttl_s }));
                continue;
            }
            out.ids.insert(bucket.bucket.clone(), id.clone());
            match limit {
                Some(l) => {
                    l.pool.report(bucket, usage.num_requests_allowed, usage.num_requests_denied, now);
                    l.unreported.0 += usage.num_requests_allowed;
                    l.unreported.1 += usage.num_requests_denied;
                }
                None => {
                    out.ids.remove(&bucket.bucket);
                    self.counters.unknown_buckets.fetch_add(1, Relaxed);
                    denied.push(action(id, Assignment::DenyAll { ttl_s: self.timing.ttl_s }));
                }
            }
        }
        if !denied.is_empty() {
            self.counters.deny_all_sent.fetch_add(denied.len() as u64, Relaxed);
            let _ = out.tx.try_send((now, RateLimitQuotaResponse { bucket_action: denied }));
        }
    }

    fn on_close(&self, stream: u64) {
        let mut st = self.lock();
        for l in st.lent.values_mut() {
            l.pool.close_stream(stream);
        }
        if st.streams.remove(&stream).is_some() {
            self.counters.streams_open.fetch_sub(1, Relaxed);
        }
    }

    /// Follow each limit's lease, count Envoy's demand, and send what the pools decide.
    fn tick(&self) {
        let now = self.pod.now_ns();
        let mut st = self.lock();
        let State { lent, streams } = &mut *st;
        let mut per_stream: HashMap<u64, Vec<BucketAction>> = HashMap::new();
        for l in lent.values_mut() {
            let status = l.limiter.status();
            let lease = status.borrow().lease.clone();
            let lease = lease.filter(|a| !a.limit_removed).map(|a| (a.quota, a.expires_at_ns));
            let had_lease = lease.is_some();
            l.pool.set_lease(lease, now);
            if had_lease && !l.pool.lendable(now) && self.counters.lease_too_short.fetch_add(1, Relaxed) == 0 {
                tracing::warn!(
                    limit = l.limiter.limit(),
                    "the pod's lease is too short to lend to Envoy: the DC manager's pod_ttl_ms must exceed envoy_rlqs.ttl_s plus delivery_margin_ms"
                );
            }
            let (allowed, denied) = std::mem::take(&mut l.unreported);
            if allowed + denied > 0 {
                l.limiter.count_decided_elsewhere(allowed, denied);
            }
            for (bucket, a) in l.pool.tick(now) {
                let Some(id) = streams.get(&bucket.stream).and_then(|s| s.ids.get(&bucket.bucket)) else { continue };
                match a {
                    Assignment::TokenBucket { .. } => self.counters.token_buckets_sent.fetch_add(1, Relaxed),
                    Assignment::DenyAll { .. } => self.counters.deny_all_sent.fetch_add(1, Relaxed),
                };
                per_stream.entry(bucket.stream).or_default().push(action(id.clone(), a));
            }
        }
        let mut ended = Vec::new();
        for (stream, actions) in per_stream {
            if let Some(out) = streams.get(&stream) {
                // A full queue: the stream is not being read; it ends (the pool counted it all).
                if out.tx.try_send((now, RateLimitQuotaResponse { bucket_action: actions })).is_err() {
                    self.counters.streams_ended_late.fetch_add(1, Relaxed);
                    ended.push(stream);
                }
            }
        }
        drop(st);
        for stream in ended {
            self.on_close(stream);
        }
    }
}

/// A stream's responses, each sent only if it has not waited too long.
pub struct Responses {
    rx: mpsc::Receiver<(u64, RateLimitQuotaResponse)>,
    shared: Arc<Shared>,
    stream: u64,
    max_wait_ns: u64,
    counters: Arc<RlqsCounters>,
    ended: bool,
}

impl tonic::codegen::tokio_stream::Stream for Responses {
    type Item = Result<RateLimitQuotaResponse, tonic::Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some((queued_ns, response))) => {
                if self.shared.pod.now_ns().saturating_sub(queued_ns) > self.max_wait_ns {
                    self.ended = true;
                    self.counters.streams_ended_late.fetch_add(1, Relaxed);
                    // Its buckets get nothing more: they count until they end, as on any close.
                    self.shared.on_close(self.stream);
                    return Poll::Ready(Some(Err(tonic::Status::unavailable(
                        "an assignment waited too long to be sent; open a new stream",
                    ))));
                }
                Poll::Ready(Some(Ok(response)))
            }
            other => other.map(|o| o.map(|(_, r)| Ok(r))),
        }
    }
}

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsServer {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: tonic::Request<tonic::Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<tonic::Response<Responses>, tonic::Status> {
        if self.shared.pod.draining() {
            return Err(tonic::Status::unavailable("the agent is draining"));
        }
        let mut inbound = request.into_inner();
        let stream = self.shared.next_stream.fetch_add(1, Relaxed) + 1;
        let (tx, rx) = mpsc::channel(QUEUE);
        self.shared.lock().streams.insert(stream, StreamOut { tx, ids: HashMap::new() });
        self.counters.streams_opened.fetch_add(1, Relaxed);
        self.counters.streams_open.fetch_add(1, Relaxed);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            while let Ok(Some(reports)) = inbound.message().await {
                shared.on_reports(stream, reports);
            }
            shared.on_close(stream);
        });
        let max_wait_ns = self.shared.timing.delivery_margin_ms * 1_000_000 / 2;
        let (shared, counters) = (self.shared.clone(), self.counters.clone());
        Ok(tonic::Response::new(Responses { rx, shared, stream, max_wait_ns, counters, ended: false }))
    }
}

/// The RLQS series for `/metrics`.
pub fn metrics(c: Arc<RlqsCounters>) -> Box<dyn prometheus_client::collector::Collector> {
    leasehold_process::metrics::collector(move |m| {
        let rows = [
            ("leasehold_agent_rlqs_streams_opened_total", "RLQS streams Envoy opened.", &c.streams_opened),
            (
                "leasehold_agent_rlqs_token_buckets_sent_total",
                "TokenBucket assignments sent (new, changed or renewed).",
                &c.token_buckets_sent,
            ),
            ("leasehold_agent_rlqs_deny_all_sent_total", "DENY_ALL assignments sent.", &c.deny_all_sent),
            (
                "leasehold_agent_rlqs_streams_ended_late_total",
                "Streams the agent ended because an assignment waited too long to be sent.",
                &c.streams_ended_late,
            ),
            (
                "leasehold_agent_rlqs_unknown_buckets_total",
                "Reported buckets naming no limit the agent lends (answered DENY_ALL).",
                &c.unknown_buckets,
            ),
            (
                "leasehold_agent_rlqs_buckets_over_cap_total",
                "Reported buckets refused (DENY_ALL) because their limit already tracks 1,000.",
                &c.buckets_over_cap,
            ),
            (
                "leasehold_agent_rlqs_lease_too_short_total",
                "Ticks at which a lent limit's lease was too short to lend from (Envoy denies).",
                &c.lease_too_short,
            ),
        ];
        super::counters(m, &rows)?;
        m.gauge(
            "leasehold_agent_rlqs_streams_open",
            "RLQS streams open now.",
            leasehold_process::metrics::NO_LABELS,
            c.streams_open.load(Relaxed) as f64,
        )
    })
}
