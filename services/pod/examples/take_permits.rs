//! A service embedding the pod library: it joins the DC `local` of a running stack (`scripts/dev`,
//! docs/INTEGRATING.md), takes permits of `partner-api` as fast as 500 requests a second would
//! ask for them, and prints each second's granted and denied counts; then it returns its lease.
//!
//! ```sh
//! cargo run --release --locked -p leasehold-pod --example take_permits -- "$LEASEHOLD_NATS_URL"
//! ```
//!
//! The NATS URL is the first argument, else `LEASEHOLD_NATS_URL`. The second argument, if any, is
//! how many seconds to run (default 3).
#![allow(clippy::disallowed_methods)] // an example: it measures real time on purpose (clippy.toml)

use leasehold_pod::{Denial, Pod, PodSettings};
use std::time::{Duration, Instant};

const LIMIT: &str = "partner-api";
/// How often the example asks for a permit: 500 a second, five times the stack's limit.
const ASK_EVERY: Duration = Duration::from_millis(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let nats_url = match args.next() {
        Some(url) => url,
        None => std::env::var("LEASEHOLD_NATS_URL")
            .map_err(|_| "give the dev stack's NATS URL as the first argument or in LEASEHOLD_NATS_URL")?,
    };
    let seconds: u64 = args.next().map_or(Ok(3), |s| s.parse()).map_err(|_| "seconds must be a whole number")?;

    // One Pod per process; it serves every limit asked of it, each from its own lease.
    let client = async_nats::connect(&nats_url).await?;
    let settings = PodSettings { nats_url: nats_url.clone(), dc: "local".into(), ..PodSettings::default() };
    let pod = Pod::start(client, &settings);
    let partner = pod.limiter(LIMIT)?;

    // The first lease that grants comes from the DC manager within a renew period or two; until
    // then every request is denied (fail safe). A service would serve anyway and count denials.
    let mut status = partner.status();
    let granting = |s: &leasehold_pod::PodStatus| s.lease.as_ref().is_some_and(|l| l.quota.rate_milli_per_s > 0);
    let quota = tokio::time::timeout(Duration::from_secs(10), status.wait_for(granting))
        .await
        .map_err(|_| "no lease within 10 s: is the dev stack running (scripts/dev)?")??
        .lease
        .as_ref()
        .map(|l| l.quota)
        .ok_or("no lease")?;
    let (rate, burst) = (quota.rate_milli_per_s / 1_000, quota.burst_milli / 1_000);
    println!("pod {} holds a lease of {LIMIT}: {rate}/s, burst {burst}", pod.id);

    let started = Instant::now();
    let (mut granted_total, mut denied_total) = (0u64, 0u64);
    let mut ask = tokio::time::interval(ASK_EVERY);
    for second in 1..=seconds {
        let (mut granted, mut denied, mut retry_after) = (0u64, 0u64, None);
        let until = started + Duration::from_secs(second);
        while Instant::now() < until {
            ask.tick().await;
            // In memory: no network hop. The outer error is a misuse (cost 0, a removed limit).
            match partner.try_acquire(1)? {
                Ok(()) => granted += 1, // call the partner here
                Err(denial) => {
                    denied += 1; // answer 429 here, with denial.retry_after()
                    if let Denial::Empty { retry_after: r } = denial {
                        retry_after = Some(r);
                    }
                }
            }
        }
        let hint =
            retry_after.map_or(String::new(), |r| format!(" (last retry after {:.1} ms)", r.as_secs_f64() * 1e3));
        println!("second {second}: {granted} granted, {denied} denied{hint}");
        granted_total += granted;
        denied_total += denied;
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    println!("total: {granted_total} granted, {denied_total} denied in {elapsed_s:.2} s");
    // A clean exit returns the lease to the DC manager at once (a crash lets it expire).
    let acknowledged = pod.drain().await?;
    println!("drained (acknowledged: {acknowledged})");
    Ok(())
}
