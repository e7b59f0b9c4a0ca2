//! The baseline: every decision in one central Redis (a sorted set per key and a Lua script),
//! the architecture of envoy's ratelimit service. Same API, same exact sliding-window semantics
//! (an admission at `t` counts while `t + W > now`), so the bench compares like with like.

use leasehold_per_key::table::Verdict;
use leasehold_per_key::{Algorithm, LimitSpec};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// KEYS[1] = key; ARGV = now_ms, window_ms, limit, cost, nonce.
/// Returns {allowed, remaining, reset_ms, retry_after_ms}.
const CHECK: &str = r#"
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local used = redis.call('ZCARD', KEYS[1])
if used + cost <= limit then
  for i = 1, cost do redis.call('ZADD', KEYS[1], now, ARGV[5] .. ':' .. i) end
  redis.call('PEXPIRE', KEYS[1], window)
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {1, limit - used - cost, tonumber(oldest[2]) + window - now, 0}
end
local must = used + cost - limit
local exit = redis.call('ZRANGE', KEYS[1], must - 1, must - 1, 'WITHSCORES')
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local remaining = limit - used
if remaining < 0 then remaining = 0 end
return {0, remaining, tonumber(oldest[2]) + window - now, tonumber(exit[2]) + window - now}
"#;

/// KEYS[1] = key; ARGV = now_ms, window_ms. Returns {count, reset_ms}.
const PEEK: &str = r#"
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local reset = 0
if oldest[2] then reset = tonumber(oldest[2]) + window - now end
return {redis.call('ZCARD', KEYS[1]), reset}
"#;

#[derive(Clone)]
pub struct RedisBackend {
    connection: redis::aio::MultiplexedConnection,
    check: Arc<redis::Script>,
    peek: Arc<redis::Script>,
    nonce_prefix: String,
    nonce: Arc<AtomicU64>,
}

fn now_ms() -> u64 {
    leasehold_process::clock::wall_ms()
}

fn redis_key(key: &str) -> String {
    format!("lh:keys:{key}")
}

/// Why the Redis baseline could not connect or answer.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    #[error("bad Redis URL {url}: {source}")]
    BadUrl {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("cannot connect to Redis at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("the Redis baseline implements the sliding log only")]
    NotSlidingLog,
    #[error("Redis: {0}")]
    Script(#[source] redis::RedisError),
}

impl RedisBackend {
    pub async fn connect(url: &str) -> Result<Self, RedisError> {
        let client = redis::Client::open(url).map_err(|source| RedisError::BadUrl { url: url.into(), source })?;
        let connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|source| RedisError::Connect { url: url.into(), source })?;
        Ok(RedisBackend {
            connection,
            check: Arc::new(redis::Script::new(CHECK)),
            peek: Arc::new(redis::Script::new(PEEK)),
            nonce_prefix: uuid::Uuid::new_v4().simple().to_string(),
            nonce: Arc::default(),
        })
    }

    fn sliding_only(spec: &LimitSpec) -> Result<(), RedisError> {
        match spec.algorithm {
            Algorithm::SlidingLog => Ok(()),
            Algorithm::Gcra => Err(RedisError::NotSlidingLog),
        }
    }

    pub async fn check(&self, key: &str, spec: &LimitSpec, cost: u64) -> Result<Verdict, RedisError> {
        Self::sliding_only(spec)?;
        let nonce = format!("{}-{}", self.nonce_prefix, self.nonce.fetch_add(1, Ordering::Relaxed));
        let mut con = self.connection.clone();
        let r: Vec<i64> = self
            .check
            .key(redis_key(key))
            .arg(now_ms())
            .arg(spec.window_ms)
            .arg(spec.limit)
            .arg(cost)
            .arg(nonce)
            .invoke_async(&mut con)
            .await
            .map_err(RedisError::Script)?;
        let at = |i: usize| r.get(i).copied().unwrap_or(0).max(0) as u64;
        Ok(Verdict {
            allowed: at(0) == 1,
            limit: spec.limit,
            window_ms: spec.window_ms,
            remaining: at(1),
            reset_ms: at(2),
            retry_after_ms: at(3),
        })
    }

    pub async fn peek(&self, key: &str, spec: &LimitSpec) -> Result<(u64, Verdict), RedisError> {
        Self::sliding_only(spec)?;
        let mut con = self.connection.clone();
        let r: Vec<i64> = self
            .peek
            .key(redis_key(key))
            .arg(now_ms())
            .arg(spec.window_ms)
            .invoke_async(&mut con)
            .await
            .map_err(RedisError::Script)?;
        let count = r.first().copied().unwrap_or(0).max(0) as u64;
        let reset_ms = r.get(1).copied().unwrap_or(0).max(0) as u64;
        let v = Verdict {
            allowed: true,
            limit: spec.limit,
            window_ms: spec.window_ms,
            remaining: spec.limit.saturating_sub(count),
            reset_ms,
            retry_after_ms: 0,
        };
        Ok((count, v))
    }
}
