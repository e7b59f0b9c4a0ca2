//! Per-value descriptors (a limit under a bare `key` or a `*` value: per user, per address),
//! asked of the per-key limiter (`leasehold keys`) over HTTP: `POST /v1/check` with the key and
//! the hits (`GET /v1/keys/{key}` for hits 0, which records nothing), the tier in the trusted
//! gateway header the keys instances are configured with (`tier_header`). One network hop per
//! such descriptor: that is the per-key limiter's design. Anything but a `200` or a `429` with
//! its answer (unreachable, too slow, unknown tier, overloaded) is a denial: failing safe. So is
//! an answer decided under another tier or limit than the one asked for: keys instances that do
//! not take the tier header (`tier_header` unset) decide under their default tier, and a tier
//! whose numbers differ from the configuration's would enforce another limit than Envoy's.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How the agent reaches the per-key limiter.
#[derive(Clone, Debug)]
pub struct KeysClient {
    http: reqwest::Client,
    base: reqwest::Url,
    tier_header: reqwest::header::HeaderName,
}

/// The per-key limiter's answer for one descriptor (the default: no answer, denied).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyVerdict {
    pub allowed: bool,
    /// Requests the key has left in its window.
    pub remaining: u64,
    /// When the key's window frees room (over the limit: when the hits would fit).
    pub until_reset: Duration,
    pub retry_after: Option<Duration>,
    /// The limiter answered (a denial without an answer is the agent's, failing safe).
    pub answered: bool,
}

#[derive(Serialize)]
struct CheckBody<'a> {
    key: &'a str,
    cost: u64,
}

/// The fields of `leasehold keys`' answer this needs (on a `200`, and in a `429`'s problem).
#[derive(Deserialize)]
struct Answer {
    allowed: bool,
    tier: String,
    limit: u64,
    window_ms: u64,
    #[serde(default)]
    remaining: u64,
    #[serde(default)]
    reset_ms: u64,
    #[serde(default)]
    retry_after_ms: Option<u64>,
}

/// Why a [`KeysClient`] cannot be made from the settings.
#[derive(Debug, thiserror::Error)]
pub enum KeysClientError {
    #[error("envoy_keys_url {url:?}: {source}")]
    Unparsable {
        url: String,
        #[source]
        source: <reqwest::Url as std::str::FromStr>::Err,
    },
    #[error("envoy_keys_url {0:?}: an http:// or https:// URL is needed")]
    NotHttp(String),
    #[error("envoy_keys_tier_header {header:?}: {source}")]
    BadTierHeader {
        header: String,
        #[source]
        source: reqwest::header::InvalidHeaderName,
    },
    #[error("cannot make the per-key limiter's HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

impl KeysClient {
    /// `base_url` is a keys instance or a balancer in front of them (`http://keys:8090`).
    pub fn new(base_url: &str, tier_header: &str, timeout: Duration) -> Result<KeysClient, KeysClientError> {
        let base = reqwest::Url::parse(base_url)
            .map_err(|source| KeysClientError::Unparsable { url: base_url.into(), source })?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(KeysClientError::NotHttp(base_url.into()));
        }
        let tier_header = reqwest::header::HeaderName::from_bytes(tier_header.as_bytes())
            .map_err(|source| KeysClientError::BadTierHeader { header: tier_header.into(), source })?;
        let http =
            reqwest::Client::builder().timeout(timeout).tcp_nodelay(true).build().map_err(KeysClientError::Client)?;
        Ok(KeysClient { http, base, tier_header })
    }

    fn url(&self, segments: &[&str]) -> reqwest::Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Records `hits` for `key` in `tier`, whose limit is `limit` per `window_ms` (hits 0: only
    /// reads whether one more would be admitted).
    pub async fn check(&self, key: &str, tier: &str, (limit, window_ms): (u64, u64), hits: u64) -> KeyVerdict {
        let request = if hits == 0 {
            self.http.get(self.url(&["v1", "keys", key]))
        } else {
            self.http.post(self.url(&["v1", "check"])).json(&CheckBody { key, cost: hits })
        };
        let denied = KeyVerdict::default();
        let Ok(response) = request.header(&self.tier_header, tier).send().await else { return denied };
        let status = response.status().as_u16();
        if status != 200 && status != 429 {
            tracing::debug!(status, key, tier, "the per-key limiter refused: denying");
            return denied;
        }
        let Ok(answer) = response.json::<Answer>().await else { return denied };
        if (answer.tier.as_str(), answer.limit, answer.window_ms) != (tier, limit, window_ms) {
            tracing::debug!(
                key,
                asked = tier,
                decided = answer.tier,
                limit = answer.limit,
                window_ms = answer.window_ms,
                "the per-key limiter decided under another tier or limit (is its tier_header set?): denying"
            );
            return denied;
        }
        let retry_after = answer.retry_after_ms.map(Duration::from_millis);
        KeyVerdict {
            allowed: status == 200 && answer.allowed,
            remaining: answer.remaining,
            until_reset: Duration::from_millis(answer.reset_ms),
            retry_after,
            answered: true,
        }
    }
}
