//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, answered from this pod's own
//! buckets: Envoy's `ratelimit` filter asks the agent beside it (a loopback hop), and the agent
//! decides every descriptor of a global limit from the lease it holds, with no network round
//! trip; a per-value descriptor (per user, per address) is asked of the per-key limiter
//! ([`super::per_key`]).
//!
//! Per request, as envoyproxy/ratelimit answers it:
//! * each descriptor is looked up in the configuration ([`RlsConfig::lookup`]); no match, or an
//!   `unlimited` one, is `OK` and counts nothing;
//! * a limit replaced (`replaces`) by another limit matched in the same request is skipped;
//! * each limited descriptor takes its hits (its own `hits_addend`, else the request's, else 1)
//!   from its limit's bucket; `hits_addend` 0 only looks (`OK` while a token is there). Hits
//!   Envoy marks negative (`is_negative_hits`, a refund) are `OK`, take nothing and give nothing
//!   back: a refund could spend quota twice;
//! * a descriptor with a `limit` override (a per-request limit) is decided by the configured
//!   limit it matches; matching none, it is `OVER_LIMIT`: no lease stands behind such a limit;
//! * a descriptor is `OVER_LIMIT` when its bucket denies: empty, no valid lease (starting, or
//!   cut off: failing safe), the limit removed, or more hits than the lease's burst; in
//!   `shadow_mode` it is answered `OK` and counted;
//! * `requests_per_unit: 0` is `OVER_LIMIT` whatever the hits (every request is over it, as in
//!   ratelimit); no lease stands behind it;
//! * the overall code is ratelimit's ([`overall_over_limit`]): `OVER_LIMIT` when any descriptor
//!   not in `quota_mode` is, or when every `quota_mode` descriptor is. Every descriptor is
//!   charged even when another denies the request (ratelimit does the same): waste, never excess;
//! * `response_headers_to_add` carries `RateLimit-Policy` and `RateLimit` (IETF draft) for the
//!   descriptor closest to its limit, and `Retry-After` (whole seconds, at least 1) when over.
//!
//! `limit_remaining` and `RateLimit`'s `r` are this pod's whole tokens (its share of the global
//! limit), `current_limit` is the configuration's `requests_per_unit` per `unit`, and
//! `duration_until_reset` is when the bucket would be full again (over the limit: when the hits
//! would fit). A request with no domain or no descriptor is `INVALID_ARGUMENT`, as in ratelimit.

use super::per_key::{KeyVerdict, KeysClient};
use crate::limiter::{AcquireError, Limiter};
use crate::pod::Pod;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use leasehold_envoy::{overall_over_limit, ConfiguredLimit, DescriptorEntry, RlsConfig, Unit};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// Longest key the per-key limiter takes (`leasehold keys`).
const MAX_KEY_BYTES: usize = 256;

/// Counters of the RLS answers, for `/metrics`.
#[derive(Default, Debug)]
pub struct RlsCounters {
    pub ok: AtomicU64,
    pub over_limit: AtomicU64,
    pub invalid: AtomicU64,
    /// Descriptors a `shadow_mode` limit would have denied.
    pub shadow_denials: AtomicU64,
    /// Descriptors that carried a `limit` override and matched no configured limit: denied.
    pub overrides_refused: AtomicU64,
    /// Per-value descriptors the per-key limiter did not answer (unreachable, too slow, an
    /// unknown tier, a key too long) or answered under another tier or limit: denied.
    pub keys_unanswered: AtomicU64,
}

/// The RLS server: the pod's limiters and the configuration that maps descriptors to them.
#[derive(Clone)]
pub struct RateLimitServer {
    pod: Pod,
    config: Arc<RlsConfig>,
    /// The configured limits' limiters, kept from the start: a request takes no pod-wide lock.
    limiters: Arc<HashMap<String, Limiter>>,
    /// Where per-value descriptors are asked (`None`: the configuration has none).
    keys: Option<KeysClient>,
    pub counters: Arc<RlsCounters>,
}

/// One descriptor's answer, before it is written as the proto's.
struct Answer {
    over: bool,
    /// Its limit is in `quota_mode` (and counted: not `unlimited`, replaced or unmatched).
    quota_mode: bool,
    /// The limit and its pod-local numbers, for a limited descriptor.
    limited: Option<Limited>,
    /// It matched a configured limit (`unlimited` included).
    matched: bool,
}

struct Limited {
    configured: Arc<ConfiguredLimit>,
    per_unit: (u32, Unit),
    remaining: u64,
    until_reset: Duration,
    retry_after: Option<Duration>,
}

impl Limited {
    /// A limited descriptor decided without reading a bucket or an answer: nothing left to say.
    fn nothing_known(configured: &Arc<ConfiguredLimit>, per_unit: (u32, Unit)) -> Limited {
        Limited {
            configured: configured.clone(),
            per_unit,
            remaining: 0,
            until_reset: Duration::ZERO,
            retry_after: None,
        }
    }
}

impl RateLimitServer {
    /// Starts serving every limit the configuration names at once and keeps them (never given
    /// back while idle; `/readyz` waits for their leases), so Envoy's traffic does not wait for a
    /// lease after a quiet spell. A new lease's bucket starts empty and fills at its rate.
    pub fn new(pod: Pod, config: Arc<RlsConfig>, keys: Option<KeysClient>) -> RateLimitServer {
        let mut limiters = HashMap::new();
        for limit in config.limits().keys() {
            match pod.keep(limit) {
                Ok(l) => {
                    limiters.insert(limit.clone(), l);
                }
                Err(e) => tracing::warn!(limit, error = %e, "cannot serve a limit of the Envoy configuration"),
            }
        }
        RateLimitServer { pod, config, limiters: Arc::new(limiters), keys, counters: Arc::default() }
    }

    /// The answer to one `ShouldRateLimit` call.
    pub async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        if req.domain.is_empty() {
            self.counters.invalid.fetch_add(1, Relaxed);
            return Err(tonic::Status::invalid_argument("rate limit domain must not be empty"));
        }
        if req.descriptors.is_empty() {
            self.counters.invalid.fetch_add(1, Relaxed);
            return Err(tonic::Status::invalid_argument("rate limit descriptor list must not be empty"));
        }
        let matched: Vec<Option<&Arc<ConfiguredLimit>>> = req
            .descriptors
            .iter()
            .map(|d| {
                let entries: Vec<DescriptorEntry<'_>> =
                    d.entries.iter().map(|e| DescriptorEntry { key: &e.key, value: &e.value }).collect();
                self.config.lookup(&req.domain, &entries)
            })
            .collect();
        let replaced: HashSet<&str> =
            matched.iter().flatten().flat_map(|l| l.replaces.iter().map(String::as_str)).collect();
        let request_hits = u64::from(req.hits_addend.max(1));
        let mut answers = Vec::with_capacity(req.descriptors.len());
        for (d, m) in req.descriptors.iter().zip(matched) {
            answers.push(match m {
                Some(l) if l.name.as_deref().is_none_or(|n| !replaced.contains(n)) => {
                    self.answer(d, l, request_hits).await
                }
                Some(_) => Answer { over: false, quota_mode: false, limited: None, matched: false },
                None if d.limit.is_some() => {
                    // A per-request limit (Envoy's `limit` override) no lease stands behind:
                    // failing safe rather than letting it through unmetered.
                    self.counters.overrides_refused.fetch_add(1, Relaxed);
                    Answer { over: true, quota_mode: false, limited: None, matched: false }
                }
                None => Answer { over: false, quota_mode: false, limited: None, matched: false },
            });
        }
        let over = overall_over_limit(answers.iter().map(|a| (a.over, a.quota_mode)));
        let counter = if over { &self.counters.over_limit } else { &self.counters.ok };
        counter.fetch_add(1, Relaxed);
        Ok(response(answers, over))
    }

    async fn answer(&self, d: &RateLimitDescriptor, configured: &Arc<ConfiguredLimit>, request_hits: u64) -> Answer {
        let Some(per_unit) = configured.per_unit else {
            return Answer { over: false, quota_mode: false, limited: None, matched: true };
            // unlimited
        };
        if configured.denies_every_request() {
            return self.verdict(configured, true, Limited::nothing_known(configured, per_unit));
        }
        let hits = d.hits_addend.as_ref().map_or(request_hits, |h| h.value);
        let limit = match (configured.limit.as_deref(), configured.tier.as_deref()) {
            (Some(limit), _) => limit,
            (None, Some(tier)) => return self.answer_per_value(d, configured, tier, per_unit, hits).await,
            // Not made by the configuration (counted limits have a limit or a tier): fail safe.
            (None, None) => return self.verdict(configured, true, Limited::nothing_known(configured, per_unit)),
        };
        let limiter = match self.limiters.get(limit) {
            Some(l) => Ok(l.clone()),
            None => self.pod.limiter(limit),
        };
        let Ok(limiter) = limiter else {
            // Draining, or more limits than a pod serves: nothing can be admitted here.
            return self.verdict(configured, true, Limited::nothing_known(configured, per_unit));
        };
        let admitted = match u32::try_from(hits) {
            // A refund takes nothing and gives nothing back: returned tokens could be spent twice.
            _ if d.is_negative_hits => Ok(()),
            Ok(0) => looks_admissible(&limiter),
            Ok(cost) => match limiter.try_acquire(cost) {
                Ok(Ok(())) => Ok(()),
                Ok(Err(denial)) => Err(denial.retry_after()),
                Err(AcquireError::ZeroCost | AcquireError::LimitRemoved(_) | AcquireError::Bucket(_)) => Err(None),
            },
            Err(_) => Err(None), // more hits than any bucket holds
        };
        let (remaining, until_reset) = pod_local(&limiter);
        let over = admitted.is_err();
        let retry_after = admitted.err().map(|r| r.unwrap_or(Duration::from_secs(1)));
        let limited = Limited { configured: configured.clone(), per_unit, remaining, until_reset, retry_after };
        self.verdict(configured, over, limited)
    }

    /// A per-value descriptor: asked of the per-key limiter, its key made of the request's values.
    async fn answer_per_value(
        &self,
        d: &RateLimitDescriptor,
        configured: &Arc<ConfiguredLimit>,
        tier: &str,
        per_unit: (u32, Unit),
        hits: u64,
    ) -> Answer {
        let entries: Vec<DescriptorEntry<'_>> =
            d.entries.iter().map(|e| DescriptorEntry { key: &e.key, value: &e.value }).collect();
        let key = configured.key_for(&entries).filter(|k| k.len() <= MAX_KEY_BYTES);
        let verdict = match (&self.keys, key) {
            // A refund takes nothing and gives nothing back, here too.
            _ if d.is_negative_hits => None,
            (Some(keys), Some(key)) => {
                let limit = (u64::from(per_unit.0), per_unit.1.seconds() * 1_000);
                Some(keys.check(&key, tier, limit, hits).await)
            }
            _ => Some(KeyVerdict::default()),
        };
        let Some(verdict) = verdict else {
            let limited = Limited::nothing_known(configured, per_unit);
            return Answer { over: false, quota_mode: configured.quota_mode, limited: Some(limited), matched: true };
        };
        if !verdict.answered {
            self.counters.keys_unanswered.fetch_add(1, Relaxed);
        }
        let over = !verdict.allowed;
        let retry_after = over.then(|| verdict.retry_after.unwrap_or(Duration::from_secs(1)));
        let limited = Limited {
            configured: configured.clone(),
            per_unit,
            remaining: verdict.remaining,
            until_reset: verdict.until_reset,
            retry_after,
        };
        self.verdict(configured, over, limited)
    }

    fn verdict(&self, configured: &ConfiguredLimit, denied: bool, limited: Limited) -> Answer {
        if denied && configured.shadow_mode {
            self.counters.shadow_denials.fetch_add(1, Relaxed);
            let limited = Some(Limited { retry_after: None, ..limited });
            return Answer { over: false, quota_mode: configured.quota_mode, limited, matched: true };
        }
        Answer { over: denied, quota_mode: configured.quota_mode, limited: Some(limited), matched: true }
    }
}

/// Hits 0: admissible while one whole token is there (in the bucket or a thread's slice);
/// takes nothing.
fn looks_admissible(limiter: &Limiter) -> Result<(), Option<Duration>> {
    let now = limiter.now_ns();
    let bucket = limiter.bucket();
    match bucket.retry_after(1, now) {
        Ok(Some(0)) => Ok(()),
        _ if bucket.slices_spendable(now) > 0 => Ok(()),
        Ok(Some(wait_ns)) => Err(Some(Duration::from_nanos(wait_ns))),
        Ok(None) | Err(_) => Err(None),
    }
}

/// This pod's whole tokens left (the bucket's and its threads' slices'), and when its bucket
/// would be full again.
fn pod_local(limiter: &Limiter) -> (u64, Duration) {
    let now = limiter.now_ns();
    let bucket = limiter.bucket();
    let view = bucket.view(now);
    if view.expires_at_ns <= now {
        return (0, Duration::ZERO);
    }
    let held_milli = view.balance_milli + bucket.slices_spendable(now) * 1_000;
    let missing_milli = view.quota.burst_milli.saturating_sub(held_milli);
    let rate = view.quota.rate_milli_per_s;
    let until_full =
        if rate == 0 { Duration::ZERO } else { Duration::from_secs_f64(missing_milli as f64 / rate as f64) };
    (held_milli / 1_000, until_full)
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue { key: key.into(), value, ..Default::default() }
}

/// `RateLimit-Policy` and `RateLimit` (IETF draft) for the limit `name`: `quota` per `window_s`,
/// `remaining` left, full again (or over, admissible again) in `reset_s` whole seconds.
pub fn rate_limit_headers(name: &str, quota: u32, window_s: u64, remaining: u64, reset_s: u64) -> [HeaderValue; 2] {
    [
        header("RateLimit-Policy", format!("\"{name}\";q={quota};w={window_s}")),
        header("RateLimit", format!("\"{name}\";r={remaining};t={reset_s}")),
    ]
}

/// `Retry-After` in whole seconds.
pub fn retry_after_header(seconds: u64) -> HeaderValue {
    header("Retry-After", seconds.to_string())
}

fn response(answers: Vec<Answer>, over: bool) -> RateLimitResponse {
    // The headers describe the limited descriptor closest to its limit (ratelimit's choice).
    let closest = answers.iter().filter_map(|a| a.limited.as_ref()).min_by_key(|l| l.remaining);
    let mut headers = Vec::new();
    if let Some(l) = closest {
        let (per_unit, unit) = l.per_unit;
        let name = l.configured.limit.as_deref().unwrap_or(&l.configured.full_key);
        let reset_s = l.retry_after.unwrap_or(l.until_reset).as_secs_f64().ceil() as u64;
        headers.extend(rate_limit_headers(name, per_unit, unit.seconds(), l.remaining, reset_s));
    }
    if over {
        let retry = answers.iter().filter(|a| a.over).filter_map(|a| a.limited.as_ref()?.retry_after).max();
        let secs = retry.map_or(1, |d| d.as_secs_f64().ceil() as u64).max(1);
        headers.push(retry_after_header(secs));
    }
    let statuses = answers
        .into_iter()
        .map(|a| {
            let code = if a.over { Code::OverLimit } else { Code::Ok } as i32;
            match a.limited {
                // As ratelimit: `unlimited` has all the room there is, no match none.
                None if a.matched => DescriptorStatus { code, limit_remaining: u32::MAX, ..Default::default() },
                None => DescriptorStatus { code, ..Default::default() },
                Some(l) => DescriptorStatus {
                    code,
                    current_limit: Some(RateLimit {
                        name: l.configured.name.clone().unwrap_or_default(),
                        requests_per_unit: l.per_unit.0,
                        unit: l.per_unit.1.proto(),
                    }),
                    limit_remaining: u32::try_from(l.remaining).unwrap_or(u32::MAX),
                    duration_until_reset: Some(proto_duration(l.retry_after.unwrap_or(l.until_reset))),
                    ..Default::default()
                },
            }
        })
        .collect();
    let overall_code = if over { Code::OverLimit } else { Code::Ok } as i32;
    RateLimitResponse { overall_code, statuses, response_headers_to_add: headers, ..Default::default() }
}

/// The RLS series for the agent's `/metrics`.
pub fn metrics(c: Arc<RlsCounters>) -> Box<dyn prometheus_client::collector::Collector> {
    leasehold_process::metrics::collector(move |m| {
        let codes = [("ok", &c.ok), ("over_limit", &c.over_limit), ("invalid", &c.invalid)];
        let rows = codes.map(|(code, n)| ([("code", code)], n.load(Relaxed)));
        m.counters("leasehold_agent_rls_requests_total", "ShouldRateLimit calls, by overall code.", rows)?;
        let descriptors = [
            (
                "leasehold_agent_rls_overrides_refused_total",
                "Descriptors with a limit override that matched no configured limit (answered OVER_LIMIT).",
                &c.overrides_refused,
            ),
            (
                "leasehold_agent_rls_keys_unanswered_total",
                "Per-value descriptors the per-key limiter did not answer, or answered under another tier or limit (answered OVER_LIMIT).",
                &c.keys_unanswered,
            ),
            (
                "leasehold_agent_rls_shadow_denials_total",
                "Descriptors a shadow_mode limit would have answered OVER_LIMIT.",
                &c.shadow_denials,
            ),
        ];
        super::counters(m, &descriptors)
    })
}

#[tonic::async_trait]
impl RateLimitService for RateLimitServer {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.decide(request.get_ref()).await.map(tonic::Response::new)
    }
}
