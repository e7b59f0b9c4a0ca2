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
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client, ConnectError> {
    async_nats::ConnectOptions::new()
        .name(name)
        .ping_interval(PING_INTERVAL)
        .request_timeout(Some(CONTROL_TIMEOUT))
        .connection_timeout(CONTROL_TIMEOUT)
        .connect(url)
        .await
        .map_err(|source| ConnectError { url: url.to_string(), source })
}

/// [`connect`], retried until `deadline` (a server that just started may not accept yet).
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
