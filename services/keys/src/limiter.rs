//! One owner's keys and limits: the pure `KeyTable` behind a lock, the clock read in one place,
//! and tiers that can be replaced while running (a limit change takes effect on the next request).

use leasehold_shared::keys::table::{TableError, Verdict};
use leasehold_shared::keys::{KeyError, KeyTable, Tiers};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

/// A request to record (`POST`) against a key.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    pub key: String,
    #[serde(default = "one")]
    pub cost: u64,
    #[serde(default)]
    pub tier: Option<String>,
}

fn one() -> u64 {
    1
}

/// The answer, as JSON on HTTP and NATS.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Answer {
    pub allowed: bool,
    pub key: String,
    pub tier: String,
    pub limit: u64,
    pub window_ms: u64,
    pub remaining: u64,
    pub reset_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// `GET` only: units counted in the current window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

#[derive(Clone)]
pub struct KeyLimiter {
    origin: Instant,
    table: Arc<Mutex<KeyTable>>,
    tiers: Arc<RwLock<Tiers>>,
}

impl KeyLimiter {
    pub fn new(tiers: Tiers, max_keys: usize) -> Result<Self, KeyError> {
        tiers.validate()?;
        Ok(KeyLimiter {
            origin: Instant::now(),
            table: Arc::new(Mutex::new(KeyTable::new(max_keys))),
            tiers: Arc::new(RwLock::new(tiers)),
        })
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Replace every tier and override; validated first, so a bad set changes nothing.
    pub fn set_tiers(&self, tiers: Tiers) -> Result<(), KeyError> {
        tiers.validate()?;
        *self.tiers.write().unwrap_or_else(|p| p.into_inner()) = tiers;
        Ok(())
    }

    pub fn tiers(&self) -> Tiers {
        self.tiers.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn resolve(&self, key: &str, tier: Option<&str>) -> Result<(String, leasehold_shared::keys::LimitSpec), KeyError> {
        let tiers = self.tiers.read().unwrap_or_else(|p| p.into_inner());
        let spec = tiers.resolve(key, tier)?;
        let name = if tiers.overrides.contains_key(key) {
            "override".into()
        } else {
            tier.unwrap_or(&tiers.default_tier).to_string()
        };
        Ok((name, spec))
    }

    pub fn check(&self, req: &CheckRequest) -> Result<Answer, TableError> {
        leasehold_shared::keys::spec::check_key(&req.key)?;
        let (tier, spec) = self.resolve(&req.key, req.tier.as_deref())?;
        let v = self.table.lock().unwrap_or_else(|p| p.into_inner()).check(&req.key, &spec, req.cost, self.now_ms())?;
        Ok(answer(&req.key, tier, v, None))
    }

    pub fn peek(&self, key: &str, tier: Option<&str>) -> Result<Answer, KeyError> {
        leasehold_shared::keys::spec::check_key(key)?;
        let (tier, spec) = self.resolve(key, tier)?;
        let (count, v) = self.table.lock().unwrap_or_else(|p| p.into_inner()).peek(key, &spec, self.now_ms())?;
        Ok(answer(key, tier, v, Some(count)))
    }

    pub fn keys_tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Keys with at least `min_hits` requests since the last call (hot-key report).
    pub fn take_hot(&self, min_hits: u64) -> Vec<(String, u64)> {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).take_hot(min_hits, 20)
    }
}

fn answer(key: &str, tier: String, v: Verdict, count: Option<u64>) -> Answer {
    Answer {
        allowed: v.allowed,
        key: key.to_string(),
        tier,
        limit: v.limit,
        window_ms: v.window_ms,
        remaining: v.remaining,
        reset_ms: v.reset_ms,
        retry_after_ms: (!v.allowed).then_some(v.retry_after_ms),
        count,
    }
}
