//! The baseline `bench envoy` measures against: a `ShouldRateLimit` server deciding in one
//! central Redis, as envoyproxy/ratelimit does: per limited descriptor, a fixed-window counter
//! `<domain>_<full key>_<window start>` increased by the hits with `INCRBY` and given a TTL of one
//! unit with `EXPIRE`, in one pipeline (one round trip per descriptor), then compared with
//! `requests_per_unit`. The descriptors are looked up in the same configuration the agent reads.
//! Its answer holds what the agent's does (each status's `current_limit`, `limit_remaining` and
//! `duration_until_reset`, as ratelimit's; the `RateLimit-Policy` and `RateLimit` headers of the
//! descriptor closest to its limit, `Retry-After` when over), so Envoy does the same work with
//! either answer.
//! `bench envoy` runs it as a process of its own ([`serve`], the hidden `bench envoy-redis-rls`),
//! as the agent is one: neither shares a runtime with the load, and both answer on one thread.

use super::envoy_servers::serve_rls_on_one_thread;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use leasehold_envoy::{DescriptorEntry, RlsConfig};
use leasehold_pod::envoy::rls::{rate_limit_headers, retry_after_header};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where to serve `ShouldRateLimit` (port 0: one the kernel picks, printed as
    /// `listening on ADDR`).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// The limits: envoyproxy/ratelimit's YAML.
    #[arg(long)]
    config: PathBuf,
}

/// Serve the Redis design's RLS until killed.
pub(super) fn serve(a: ServeArgs) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(&a.config).map_err(|e| format!("cannot read {}: {e}", a.config.display()))?;
    let name = a.config.display().to_string();
    let config = Arc::new(RlsConfig::parse([(name.as_str(), text.as_str())]).map_err(|e| e.to_string())?);
    let redis_url = a.redis_url.clone();
    serve_rls_on_one_thread("the Redis design's RLS", &a.listen, async move {
        Ok(RedisRateLimit::connect(&redis_url, config).await?.service())
    })
}

#[derive(Clone)]
pub(super) struct RedisRateLimit {
    config: Arc<RlsConfig>,
    redis: redis::aio::MultiplexedConnection,
}

impl RedisRateLimit {
    async fn connect(url: &str, config: Arc<RlsConfig>) -> Result<RedisRateLimit, String> {
        let client = redis::Client::open(url).map_err(|e| format!("bad Redis URL {url}: {e}"))?;
        let redis =
            client.get_multiplexed_async_connection().await.map_err(|e| format!("cannot reach Redis at {url}: {e}"))?;
        Ok(RedisRateLimit { config, redis })
    }

    async fn decide(&self, req: &RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut statuses = Vec::with_capacity(req.descriptors.len());
        let mut over = false;
        // The limited descriptor closest to its limit: (remaining, name, limit, window, reset), s.
        let mut closest: Option<(u64, String, u32, u64, u64)> = None;
        for d in &req.descriptors {
            let entries: Vec<DescriptorEntry<'_>> =
                d.entries.iter().map(|e| DescriptorEntry { key: &e.key, value: &e.value }).collect();
            let Some((limit, unit)) = self.config.lookup(&req.domain, &entries).and_then(|l| l.per_unit) else {
                statuses.push(DescriptorStatus { code: Code::Ok as i32, ..Default::default() });
                continue;
            };
            let hits = d.hits_addend.as_ref().map_or(u64::from(req.hits_addend.max(1)), |h| h.value);
            let window_s = unit.seconds();
            let name = descriptor_key(&entries);
            let key = format!("{}_{name}_{}", req.domain, now_s / window_s * window_s);
            let (count,): (u64,) = redis::pipe()
                .incr(&key, hits)
                .expire(&key, window_s as i64)
                .ignore()
                .query_async(&mut self.redis.clone())
                .await
                .map_err(|e| tonic::Status::unavailable(format!("redis: {e}")))?;
            let code = if count > u64::from(limit) { Code::OverLimit } else { Code::Ok };
            over |= code == Code::OverLimit;
            let remaining = u64::from(limit).saturating_sub(count);
            let reset_s = window_s - now_s % window_s;
            if closest.as_ref().is_none_or(|(r, ..)| remaining < *r) {
                closest = Some((remaining, name, limit, window_s, reset_s));
            }
            statuses.push(DescriptorStatus {
                code: code as i32,
                current_limit: Some(RateLimit { name: String::new(), requests_per_unit: limit, unit: unit.proto() }),
                limit_remaining: remaining as u32,
                duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration {
                    seconds: reset_s as i64,
                    nanos: 0,
                }),
                ..Default::default()
            });
        }
        let mut headers = Vec::new();
        if let Some((remaining, name, limit, window_s, reset_s)) = closest {
            headers.extend(rate_limit_headers(&name, limit, window_s, remaining, reset_s));
            if over {
                headers.push(retry_after_header(reset_s));
            }
        }
        let overall_code = if over { Code::OverLimit } else { Code::Ok } as i32;
        Ok(RateLimitResponse { overall_code, statuses, response_headers_to_add: headers, ..Default::default() })
    }

    fn service(self) -> RateLimitServiceServer<RedisRateLimit> {
        RateLimitServiceServer::new(self)
    }
}

fn descriptor_key(entries: &[DescriptorEntry<'_>]) -> String {
    let parts: Vec<String> = entries.iter().map(|e| format!("{}_{}", e.key, e.value)).collect();
    parts.join(".")
}

#[tonic::async_trait]
impl RateLimitService for RedisRateLimit {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        self.decide(request.get_ref()).await.map(tonic::Response::new)
    }
}
