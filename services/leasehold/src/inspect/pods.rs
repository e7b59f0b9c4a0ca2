//! The pods part of `inspect`: listen to pod reports (heartbeats) and leases for a moment.
//! Pods keep no state on the server, so this is what any NATS client can see: `nats sub 'lh.pod.>'`.
//! Each message is a batch (protocol v2) covering every limit the pod uses.

use futures::StreamExt;
use leasehold_core::subjects;
use leasehold_core::wire::{decode, decode_pod_reports, LeaseVersion, PodLeases};
use leasehold_process::clock::LeaseClock;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Serialize, Default, Clone)]
pub(super) struct PodView {
    pub dc: String,
    /// Milliseconds since its last heartbeat, at the end of the listening window.
    pub last_heartbeat_ms_ago: Option<u64>,
    /// Every limit the pod reported or was leased, by name.
    pub limits: BTreeMap<String, PodLimitView>,
}

#[derive(Serialize, Default, Clone)]
pub(super) struct PodLimitView {
    pub healthy: Option<bool>,
    pub draining: Option<bool>,
    /// Requests offered and admitted per second, from its last report.
    pub offered_per_s: Option<f64>,
    pub admitted_per_s: Option<f64>,
    pub lease_in_use: Option<LeaseVersion>,
    pub last_lease: Option<LeaseSeen>,
}

#[derive(Serialize, Clone)]
pub(super) struct LeaseSeen {
    pub version: LeaseVersion,
    pub issuer: String,
    pub rate_per_s: f64,
    pub burst: f64,
    pub ttl_ms: u64,
}

/// Pods seen on `lh.pod.>` during `listen`, keyed by pod id.
pub(super) async fn listen(
    client: &async_nats::Client,
    listen: Duration,
) -> Result<BTreeMap<String, PodView>, crate::CommandError> {
    let subject = format!("{}.pod.>", subjects::PREFIX);
    let mut sub = client.subscribe(subject.clone()).await.map_err(|e| format!("cannot subscribe to {subject}: {e}"))?;
    // Each pod with when its last report arrived (ns on this command's clock).
    let mut pods: BTreeMap<String, (PodView, Option<u64>)> = BTreeMap::new();
    let clock = LeaseClock::start();
    let end_ns = clock.now_ns().saturating_add(listen.as_nanos() as u64);
    let left = || Duration::from_nanos(end_ns.saturating_sub(clock.now_ns()));
    while let Ok(Some(msg)) = tokio::time::timeout(left(), sub.next()).await {
        if msg.subject.ends_with(".report") {
            let Ok(batch) = decode_pod_reports(&msg.payload) else { continue };
            let (v, seen) = pods.entry(batch.pod.clone()).or_default();
            v.dc = batch.dc.clone();
            *seen = Some(clock.now_ns());
            for r in batch.reports {
                let per_s = |n: u64| n as f64 * 1_000.0 / r.interval_ms.max(1) as f64;
                let l = v.limits.entry(r.limit.clone()).or_default();
                l.healthy = Some(r.healthy);
                l.draining = Some(r.draining);
                l.offered_per_s = Some(per_s(r.offered));
                l.admitted_per_s = Some(per_s(r.admitted));
                l.lease_in_use = r.lease_in_use;
            }
        } else if msg.subject.ends_with(".lease") {
            let Ok(batch) = decode::<PodLeases>(&msg.payload) else { continue };
            let (v, _) = pods.entry(batch.pod.clone()).or_default();
            v.dc = batch.dc.clone();
            for l in batch.leases {
                v.limits.entry(l.limit.to_string()).or_default().last_lease = Some(LeaseSeen {
                    version: l.version,
                    issuer: l.issuer.to_string(),
                    rate_per_s: l.quota.rate_per_s(),
                    burst: l.quota.burst(),
                    ttl_ms: l.ttl_ms,
                });
            }
        }
    }
    Ok(pods
        .into_iter()
        .map(|(k, (mut v, seen))| {
            v.last_heartbeat_ms_ago = seen.map(|t| clock.now_ns().saturating_sub(t) / 1_000_000);
            (k, v)
        })
        .collect())
}

pub(super) fn print_text(pods: &BTreeMap<String, PodView>) {
    if pods.is_empty() {
        println!("no pods heard");
    }
    for (id, p) in pods {
        let hb = p.last_heartbeat_ms_ago.map_or("no heartbeat".to_string(), |ms| format!("heartbeat {ms} ms ago"));
        println!("  pod {id:<24} {} {hb}", p.dc);
        for (limit, l) in &p.limits {
            let lease = l.last_lease.as_ref().map_or("no lease seen".to_string(), |l| {
                format!(
                    "lease {} from {} rate {:.3}/s burst {:.3} ttl {} ms",
                    l.version, l.issuer, l.rate_per_s, l.burst, l.ttl_ms
                )
            });
            println!(
                "    {limit:<24} admitted {:.1}/s of {:.1}/s offered{}; {lease}",
                l.admitted_per_s.unwrap_or(0.0),
                l.offered_per_s.unwrap_or(0.0),
                if l.draining == Some(true) { ", draining" } else { "" }
            );
        }
    }
}
