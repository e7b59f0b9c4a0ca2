//! # Leasehold per-key limits (service)
//!
//! Seed 003's half of the product: allow or reject each request against the caller's own limit
//! (per user, per tenant tier), over HTTP ([`http`]) and NATS request/reply ([`nats`]). The
//! decisions are [`leasehold_shared::keys`]' (exact sliding-window log or GCRA); this crate reads
//! the clock and moves requests.
//!
//! Status: one instance owns every shard. Shard ownership through fenced KV leases, persistence
//! to JetStream and the Redis baseline bench are the next steps (issue 5).

pub mod http;
pub mod limiter;
pub mod nats;

pub use limiter::{Answer, CheckRequest, KeyLimiter};

/// Serve HTTP on `listen` (and NATS request/reply when `nats_url` is given) until the process
/// ends. Prints `listening on <addr>` once bound.
pub async fn serve(
    listen: &str,
    nats: Option<async_nats::Client>,
    tiers: leasehold_shared::keys::Tiers,
    max_keys: usize,
) -> Result<(), String> {
    let limiter = KeyLimiter::new(tiers, max_keys).map_err(|e| e.to_string())?;
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    println!("listening on {}", listener.local_addr().map_err(|e| e.to_string())?);
    if let Some(client) = nats {
        let l = limiter.clone();
        tokio::spawn(async move {
            if let Err(e) = nats::serve(client, l).await {
                tracing::warn!(cause = %e, "NATS request/reply stopped");
            }
        });
    }
    axum::serve(listener, http::router(limiter)).await.map_err(|e| e.to_string())
}
