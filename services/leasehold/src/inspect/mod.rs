//! `leasehold inspect`: the live state from NATS: who leads (coordinator and each DC), every
//! limit's ledger record (DC leases with epochs, versions, amounts, floors and TTLs), and the pods
//! heard during a short listening window (heartbeats and leases). Read-only.

mod pods;

use clap::Args;
use leasehold_core::subjects;
use leasehold_core::wire::LedgerRecord;
use leasehold_nats::connect::{jetstream, jetstream_in};
use leasehold_nats::kv::{list_keys, open_bucket, read};
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    nats: crate::NatsArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// How long to listen for pod heartbeats and leases (0: skip pods).
    #[arg(long, default_value_t = 1_500)]
    listen_ms: u64,
    /// The JetStream domain of the coordinators' cluster (the hub), when `--nats-url` is a
    /// server of a DC's own cluster: the ledger and the coordinator's leader key are read
    /// there, the DC managers' leader keys in the DC's own domain.
    #[arg(long)]
    ledger_domain: Option<String>,
}

#[derive(Serialize)]
struct Ledger {
    /// The ledger group holding the record (key `group.<n>`), and that group's revision.
    group: u32,
    revision: u64,
    #[serde(flatten)]
    record: LedgerRecord,
}

#[derive(Serialize, Default)]
struct State {
    coordinator_leader: Option<String>,
    /// DC → the DC manager replica leading it.
    dc_leaders: BTreeMap<String, String>,
    ledgers: BTreeMap<String, Ledger>,
    /// Keys whose value could not be decoded (reported, never fatal).
    unreadable: Vec<String>,
    pods: BTreeMap<String, pods::PodView>,
}

pub fn run(a: InspectArgs) -> Result<ExitCode, crate::CommandError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let state =
        rt.block_on(collect(&a.nats, a.ledger_domain.as_deref(), std::time::Duration::from_millis(a.listen_ms)))?;
    if a.json {
        println!("{}", serde_json::to_string(&state)?);
    } else {
        print_text(&state);
    }
    Ok(ExitCode::SUCCESS)
}

async fn collect(
    nats: &crate::NatsArgs,
    ledger_domain: Option<&str>,
    listen: std::time::Duration,
) -> Result<State, crate::CommandError> {
    let client = nats.connect("leasehold-inspect").await?;
    let (own, hub) = (jetstream(client.clone()), jetstream_in(client.clone(), ledger_domain));
    // Read-only: a bucket that does not exist is reported, never created.
    let ledger = open_bucket(&hub, subjects::LEDGER_BUCKET).await.map_err(|e| {
        format!("{e} (is a coordinator running? On a DC's own cluster, name the hub's domain with --ledger-domain)")
    })?;
    let mut state = State::default();
    if let Ok(leaders) = hub.get_key_value(subjects::LEADER_BUCKET).await {
        if let Ok(Some((_, id))) = read(&leaders, subjects::COORDINATOR_LEADER_KEY).await {
            state.coordinator_leader = Some(String::from_utf8_lossy(&id).into_owned());
        }
    }
    // The DC managers' keys: in the DC's own domain (and in the hub's on a single cluster).
    if let Ok(leaders) = own.get_key_value(subjects::LEADER_BUCKET).await {
        if let Ok(keys) = list_keys(&leaders).await {
            for key in keys {
                if let (Some(dc), Ok(Some((_, id)))) = (key.strip_prefix("dc."), read(&leaders, &key).await) {
                    let holder = leasehold_core::dc_manager::TermRecord::holder_of(&id);
                    state.dc_leaders.insert(dc.to_string(), holder);
                }
            }
        }
    }
    let keys = list_keys(&ledger).await.map_err(|e| format!("cannot list {}: {e}", subjects::LEDGER_BUCKET))?;
    for key in keys {
        if subjects::ledger_group_of_key(&key).is_none() {
            state.unreadable.push(format!("{key}: not a ledger group (a per-limit record of an older version)"));
            continue;
        }
        if let Some((revision, bytes)) = read(&ledger, &key).await? {
            match leasehold_nats::ledger::decode_group(&key, &bytes) {
                Ok(group) => {
                    for record in group.records {
                        state.ledgers.insert(record.limit.clone(), Ledger { group: group.group, revision, record });
                    }
                }
                Err(e) => state.unreadable.push(e.to_string()),
            }
        }
    }
    if !listen.is_zero() {
        state.pods = pods::listen(&client, listen).await?;
    }
    Ok(state)
}

fn print_text(s: &State) {
    println!("coordinator leader: {}", s.coordinator_leader.as_deref().unwrap_or("(none)"));
    for (dc, id) in &s.dc_leaders {
        println!("dc {dc} manager leader: {id}");
    }
    if s.ledgers.is_empty() {
        println!("no ledger records");
    }
    for (limit, l) in &s.ledgers {
        let r = &l.record;
        println!(
            "limit {limit}: epoch {}, written by {}, group {} at revision {}, {} lease(s)",
            r.epoch,
            r.writer,
            l.group,
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
    println!("pods:");
    pods::print_text(&s.pods);
}
