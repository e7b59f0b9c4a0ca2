//! Connection defaults for Leasehold's control plane.

use async_nats::jetstream;
use backon::{ConstantBuilder, Retryable};
use std::path::Path;
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
/// Credentials may be given in the URL (`nats://user:password@host:port`); errors never show the
/// password. Several servers of one cluster may be given, comma-separated (the credentials of the
/// first apply). For a `.creds` file (the production topology, `leasehold auth`), see
/// [`connect_with_creds`].
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client, ConnectError> {
    connect_with_creds(url, None, name).await
}

/// [`connect`] as the user of a `.creds` file (a NATS user JWT and its nkey seed), if given.
pub async fn connect_with_creds(
    url: &str,
    creds_file: Option<&Path>,
    name: &str,
) -> Result<async_nats::Client, ConnectError> {
    let first = url.split(',').next().unwrap_or(url);
    let shown = redact(url);
    let options = match (creds_file, split_credentials(first)) {
        (Some(path), _) => {
            let creds = std::fs::read_to_string(path).map_err(|e| credentials_error(&shown, path, e))?;
            async_nats::ConnectOptions::with_credentials(&creds).map_err(|e| credentials_error(&shown, path, e))?
        }
        (None, Some((user, password, _))) => async_nats::ConnectOptions::with_user_and_password(user, password),
        (None, None) => async_nats::ConnectOptions::new(),
    };
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

fn credentials_error(url: &str, path: &Path, e: std::io::Error) -> ConnectError {
    let reason = format!("the credentials file {}: {e}", path.display());
    ConnectError {
        url: url.to_string(),
        source: async_nats::ConnectError::with_source(async_nats::ConnectErrorKind::Authentication, reason),
    }
}

/// Back-off between reconnect attempts: 0, 100, 200 … ms, at most [`MAX_RECONNECT_DELAY`], so a
/// healed partition or a restarted server is back within about a second (the client library's
/// default grows to several seconds, which a lease TTL of a few seconds cannot afford).
fn reconnect_delay(attempts: usize) -> Duration {
    (Duration::from_millis(100) * attempts.saturating_sub(1) as u32).min(MAX_RECONNECT_DELAY)
}

pub const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(1_000);

/// [`connect`], retried every [`CONNECT_RETRY_DELAY`] until `deadline` (a server that just
/// started may not accept yet); after it, the last attempt's error.
pub async fn connect_until(
    url: &str,
    name: &str,
    deadline: std::time::Instant,
) -> Result<async_nats::Client, ConnectError> {
    connect_until_with_creds(url, None, name, deadline).await
}

/// [`connect_until`] as the user of a `.creds` file, if given.
pub async fn connect_until_with_creds(
    url: &str,
    creds_file: Option<&Path>,
    name: &str,
    deadline: std::time::Instant,
) -> Result<async_nats::Client, ConnectError> {
    let mut last = None;
    let attempts = (|| connect_with_creds(url, creds_file, name))
        .retry(ConstantBuilder::new().with_delay(CONNECT_RETRY_DELAY).without_max_times())
        .notify(|e: &ConnectError, _| last = Some(e.source.kind()));
    match tokio::time::timeout_at(deadline.into(), attempts).await {
        Ok(result) => result,
        Err(_) => Err(ConnectError {
            url: redact(url),
            source: async_nats::ConnectError::new(last.unwrap_or(async_nats::ConnectErrorKind::TimedOut)),
        }),
    }
}

/// Pause between the attempts of [`connect_until`].
pub const CONNECT_RETRY_DELAY: Duration = Duration::from_millis(20);

/// A JetStream context whose calls time out after [`CONTROL_TIMEOUT`].
pub fn jetstream(client: async_nats::Client) -> jetstream::Context {
    let mut js = jetstream::new(client);
    js.set_timeout(CONTROL_TIMEOUT);
    js
}

/// JetStream of `domain` (the hub's, seen from a DC's own cluster through its leaf-node link),
/// or of the server's own domain when `None`.
pub fn jetstream_in(client: async_nats::Client, domain: Option<&str>) -> jetstream::Context {
    let Some(domain) = domain else { return jetstream(client) };
    let mut js = jetstream::with_domain(client, domain);
    js.set_timeout(CONTROL_TIMEOUT);
    js
}

/// `nats://user:pw@host:port` → (user, pw, `nats://host:port`); `None` without credentials (or
/// for an address that is not a URL, such as `host:port`).
fn split_credentials(url: &str) -> Option<(String, String, String)> {
    let mut parsed = url::Url::parse(url).ok()?;
    if parsed.username().is_empty() && parsed.password().is_none() {
        return None;
    }
    let (user, password) = (parsed.username().to_string(), parsed.password().unwrap_or("").to_string());
    parsed.set_username("").ok()?;
    parsed.set_password(None).ok()?;
    Some((user, password, parsed.to_string()))
}

/// The URL with its password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    let one = |u: &str| match url::Url::parse(u) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => u.to_string(),
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
        assert_eq!(split_credentials("127.0.0.1:4222"), None, "not a URL: used as it is");
        assert_eq!(split_credentials("nats://u@h:1"), Some(("u".into(), String::new(), "nats://h:1".into())));
        assert_eq!(redact("nats://u@h:1"), "nats://u:***@h:1");
        assert_eq!(redact("nats://h:1"), "nats://h:1");
        assert_eq!(redact("nats://u:s3cret@h:1"), "nats://u:***@h:1");
        assert_eq!(redact("nats://u:s3cret@h:1,nats://u:s3cret@h:2"), "nats://u:***@h:1,nats://u:***@h:2");
    }
}
