//! What the demo watches while it runs: the DC allocations (from the ledger record in KV), the
//! coordinator leader, the upstream's counters; the live table and the summary's statistics.

use async_nats::jetstream::kv::Store;
use leasehold_core::subjects;

use serde::Deserialize;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default, Deserialize)]
pub struct UpstreamStats {
    /// The hard limit in force now.
    #[serde(default)]
    pub limit: u64,
    pub total: u64,
    pub rejected: u64,
    pub max_window: u64,
    pub max_window_ratio: f64,
    /// Times the limit changed, and the largest window at a call admitted since the last change.
    #[serde(default)]
    pub limit_changes: u64,
    #[serde(default)]
    pub max_window_since_change: u64,
}

pub async fn upstream_stats(client: &reqwest::Client, upstream: &str) -> Option<UpstreamStats> {
    let r = client.get(format!("http://{upstream}/stats")).send().await.ok()?;
    r.json().await.ok()
}

/// Floor + newest DC lease per DC (requests per second), in `dcs` order.
pub async fn allocations(ledger: &Store, limit: &str, dcs: &[&str]) -> Option<(Vec<f64>, u64)> {
    let rec = leasehold_nats::ledger::read_record(ledger, limit).await.ok()?.1?;
    let per_dc = dcs
        .iter()
        .map(|dc| {
            let newest = rec.leases.iter().filter(|l| l.dc == *dc).max_by_key(|l| l.version);
            newest.map_or(0.0, |l| l.quota.rate_per_s() + l.floor.rate_per_s())
        })
        .collect();
    Some((per_dc, rec.epoch))
}

/// The rate R (per second) of the capacity the ledger record of `limit` was last written with.
pub async fn capacity_per_s(ledger: &Store, limit: &str) -> Option<f64> {
    let rec = leasehold_nats::ledger::read_record(ledger, limit).await.ok()?.1?;
    rec.capacity.map(|q| q.rate_per_s())
}

/// Σ of the rates (per second) of the leases of `limit` the agents at `addrs` hold now (a pod
/// without one adds 0); None when an agent did not answer.
pub async fn pods_leased_per_s(http: &reqwest::Client, addrs: &[String], limit: &str) -> Option<f64> {
    let mut sum = 0.0;
    for addr in addrs {
        let r = http.get(format!("http://{addr}/v1/status?limit={limit}")).send().await.ok()?;
        let v: serde_json::Value = r.json().await.ok()?;
        sum += v["lease"]["quota"]["rate_milli_per_s"].as_f64().unwrap_or(0.0) / 1_000.0;
    }
    Some(sum)
}

pub async fn leader(leaders: &Store) -> Option<String> {
    let v = leaders.get(subjects::COORDINATOR_LEADER_KEY).await.ok()??;
    Some(String::from_utf8_lossy(&v).into_owned())
}

/// Poll the agent's status until it holds a lease for some limit (true) or `deadline` passes
/// (false).
pub async fn wait_for_lease(http: &reqwest::Client, addr: &str, deadline: Instant) -> bool {
    wait_for_lease_of(http, addr, None, deadline).await
}

/// Ask the agent at `addr` for one permit of `limit` without waiting: an agent serves a limit
/// from its first request. True when it answered (a permit or a denial).
pub async fn start_serving(http: &reqwest::Client, addr: &str, limit: &str) -> bool {
    let url = format!("http://{addr}/v1/acquire?limit={limit}&max_wait_ms=0");
    http.post(url).send().await.is_ok_and(|r| r.status().is_success() || r.status().as_u16() == 429)
}

/// Poll the agent's status until it holds a lease for `limit` (any limit with None): true, or
/// false once `deadline` passes.
pub async fn wait_for_lease_of(http: &reqwest::Client, addr: &str, limit: Option<&str>, deadline: Instant) -> bool {
    loop {
        let st: Option<serde_json::Value> = match http.get(format!("http://{addr}/v1/status")).send().await {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        let leased = |v: serde_json::Value| {
            v["limits"].as_object().is_some_and(|ls| {
                ls.iter().any(|(name, l)| (limit.is_none() || limit == Some(name.as_str())) && !l["lease"].is_null())
            })
        };
        if st.is_some_and(leased) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Let in-flight calls land: wait until the upstream's count stops moving (bounded).
pub async fn settle(http: &reqwest::Client, upstream: &str) -> Option<UpstreamStats> {
    let until = Instant::now() + Duration::from_secs(5);
    let mut last = upstream_stats(http, upstream).await.map(|s| s.total);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = upstream_stats(http, upstream).await.map(|s| s.total);
        if now == last {
            break;
        }
        last = now;
    }
    upstream_stats(http, upstream).await
}

/// Pearson correlation of two equally long series (None when either is constant).
pub fn correlation(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len()) as f64;
    if n < 3.0 {
        return None;
    }
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}
