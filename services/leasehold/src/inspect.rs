//! `leasehold inspect`: the live state from NATS: who leads, and every limit's ledger record
//! (DC leases with epochs, versions, amounts, floors and TTLs). Read-only.

use clap::Args;
use futures::StreamExt;
use leasehold_nats::connect::{connect, jetstream};
use leasehold_nats::kv::{ensure_bucket, read, BucketSpec};
use leasehold_shared::subjects;
use leasehold_shared::wire::{decode, LedgerRecord};
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(Args)]
pub struct InspectArgs {
    /// NATS server to read from.
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Ledger {
    revision: u64,
    #[serde(flatten)]
    record: LedgerRecord,
}

#[derive(Serialize, Default)]
struct State {
    coordinator_leader: Option<String>,
    ledgers: BTreeMap<String, Ledger>,
    /// Keys whose value could not be decoded (reported, never fatal).
    unreadable: Vec<String>,
}

pub fn run(a: InspectArgs) -> Result<ExitCode, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let state = rt.block_on(collect(&a.nats_url))?;
    if a.json {
        println!("{}", serde_json::to_string(&state).map_err(|e| e.to_string())?);
    } else {
        print_text(&state);
    }
    Ok(ExitCode::SUCCESS)
}

async fn collect(url: &str) -> Result<State, String> {
    let client = connect(url, "leasehold-inspect").await.map_err(|e| e.to_string())?;
    let js = jetstream(client);
    // Opening creates nothing new on a running system; on an empty server it creates the
    // (empty) standard buckets, which is harmless.
    let ledger = ensure_bucket(&js, &BucketSpec::new(subjects::LEDGER_BUCKET)).await.map_err(|e| e.to_string())?;
    let leaders = js.get_key_value(subjects::LEADER_BUCKET).await.ok();
    let mut state = State::default();
    if let Some(leaders) = leaders {
        if let Ok(Some((_, id))) = read(&leaders, subjects::COORDINATOR_LEADER_KEY).await {
            state.coordinator_leader = Some(String::from_utf8_lossy(&id).into_owned());
        }
    }
    let mut keys = ledger.keys().await.map_err(|e| format!("cannot list {}: {e}", subjects::LEDGER_BUCKET))?;
    while let Some(key) = keys.next().await {
        let key = key.map_err(|e| e.to_string())?;
        if let Some((revision, bytes)) = read(&ledger, &key).await.map_err(|e| e.to_string())? {
            match decode::<LedgerRecord>(&bytes) {
                Ok(record) => {
                    state.ledgers.insert(key, Ledger { revision, record });
                }
                Err(e) => state.unreadable.push(format!("{key}: {e}")),
            }
        }
    }
    Ok(state)
}

fn print_text(s: &State) {
    println!("coordinator leader: {}", s.coordinator_leader.as_deref().unwrap_or("(none)"));
    if s.ledgers.is_empty() {
        println!("no ledger records");
    }
    for (limit, l) in &s.ledgers {
        let r = &l.record;
        println!(
            "limit {limit}: epoch {}, written by {}, revision {}, {} lease(s)",
            r.epoch,
            r.writer,
            l.revision,
            r.leases.len()
        );
        for d in &r.leases {
            println!(
                "  dc {:<10} holder {:<16} {} rate {:.3}/s burst {:.3} + floor {:.3}/s, ttl {} ms",
                d.dc,
                d.holder,
                d.version,
                d.quota.rate_per_s(),
                d.quota.burst(),
                d.floor.rate_per_s(),
                d.ttl_ms
            );
        }
    }
    for u in &s.unreadable {
        println!("unreadable record {u}");
    }
}
