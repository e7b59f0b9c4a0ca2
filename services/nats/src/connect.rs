//! Connection defaults for Leasehold's control plane.

use async_nats::jetstream;
use std::time::Duration;
use thiserror::Error;

/// How long a control-plane request or JetStream call may take before its outcome is unknown.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// Ping interval: a silent partition is noticed within ~2 of these.
pub const PING_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, Error)]
#[error("cannot connect to NATS at {url}: {source}")]
pub struct ConnectError {
    pub url: String,
    #[source]
    pub source: async_nats::ConnectError,
}

/// Connect with control-plane defaults: short request and connect timeouts, frequent pings,
/// unlimited reconnects.
///
/// Credentials may be given in the URL (`nats://user:password@host:port`, as the production
/// accounts in `nats/prod/` expect); errors never show the password. Several servers of one
/// cluster may be given, comma-separated (the credentials of the first apply).
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client, ConnectError> {
    let first = url.split(',').next().unwrap_or(url);
    let options = match split_credentials(first) {
        Some((user, password, _)) => async_nats::ConnectOptions::with_user_and_password(user, password),
        None => async_nats::ConnectOptions::new(),
    };
    let shown = redact(url);
    let mut servers = Vec::new();
    for one in url.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let bare = split_credentials(one).map_or_else(|| one.to_string(), |(_, _, bare)| bare);
        let addr = bare.parse::<async_nats::ServerAddr>().map_err(|e| ConnectError {
            url: shown.clone(),
            source: async_nats::ConnectError::with_source(async_nats::ConnectErrorKind::ServerParse, e),
        })?;
        servers.push(addr);
    }
    options
        .name(name)
        .ping_interval(PING_INTERVAL)
        .request_timeout(Some(CONTROL_TIMEOUT))
        .connection_timeout(CONTROL_TIMEOUT)
        .reconnect_delay_callback(reconnect_delay)
        .connect(servers)
        .await
        .map_err(|source| ConnectError { url: shown, source })
}

/// Back-off between reconnect attempts: 0, 100, 200 … ms, at most [`MAX_RECONNECT_DELAY`], so a
/// healed partition or a restarted server is back within about a second (the client library's
/// default grows to several seconds, which a lease TTL of a few seconds cannot afford).
fn reconnect_delay(attempts: usize) -> Duration {
    (Duration::from_millis(100) * attempts.saturating_sub(1) as u32).min(MAX_RECONNECT_DELAY)
}

pub const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(1_000);

/// [`connect`], retried until `deadline` (a server that just started may not accept yet).
#[allow(clippy::disallowed_methods)] // tools' and tests' deadline, not a lease decision
pub async fn connect_until(
    url: &str,
    name: &str,
    deadline: std::time::Instant,
) -> Result<async_nats::Client, ConnectError> {
    loop {
        match connect(url, name).await {
            Ok(c) => return Ok(c),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::task::yield_now().await,
        }
    }
}

/// A JetStream context whose calls time out after [`CONTROL_TIMEOUT`].
pub fn jetstream(client: async_nats::Client) -> jetstream::Context {
    let mut js = jetstream::new(client);
    js.set_timeout(CONTROL_TIMEOUT);
    js
}

/// `nats://user:pw@host:port` → (user, pw, `nats://host:port`).
fn split_credentials(url: &str) -> Option<(String, String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let (userinfo, host) = rest.split_once('@')?;
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    Some((user.to_string(), password.to_string(), format!("{scheme}://{host}")))
}

/// The URL with its password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    let one = |u: &str| match split_credentials(u) {
        Some((user, _, bare)) => bare.replacen("://", &format!("://{user}:***@"), 1),
        None => u.to_string(),
    };
    url.split(',').map(one).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_split_from_the_url_and_never_shown() {
        assert_eq!(
            split_credentials("nats://bkk-pod1:s3cret@127.0.0.1:4222"),
            Some(("bkk-pod1".into(), "s3cret".into(), "nats://127.0.0.1:4222".into()))
        );
        assert_eq!(split_credentials("nats://127.0.0.1:4222"), None);
        assert_eq!(redact("nats://u:s3cret@h:1"), "nats://u:***@h:1");
        assert_eq!(redact("nats://u:s3cret@h:1,nats://u:s3cret@h:2"), "nats://u:***@h:1,nats://u:***@h:2");
    }
}
