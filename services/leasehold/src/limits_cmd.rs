//! `leasehold limits`: read and write the limits' definitions in the `lh_limits` bucket, in human
//! units (`--rate 976/s`). Everything is checked before anything is written; `put` and `rm` print
//! what changes, `--dry-run` stops there, and a write is a compare-and-set on the revision read,
//! so the change printed is the change applied. Exit codes: 2 for a bad definition or arguments,
//! 1 when NATS fails or the limit changed in between.

mod put;

use clap::{Args, Subcommand};
use leasehold_core::coordinator::LimitConfig;
use leasehold_core::limits::{diff, format_amount, format_rate};
use leasehold_nats::connect::jetstream;
use leasehold_nats::limits_store::{self, RemoveOutcome, StoredDefError, StoredLimit};
use std::process::ExitCode;

#[derive(Args)]
pub struct LimitsArgs {
    #[command(flatten)]
    nats: crate::NatsArgs,
    /// Copies of the bucket when this creates it (3 on a production JetStream cluster).
    #[arg(long, global = true, default_value_t = 1)]
    replicas: usize,
    #[command(subcommand)]
    command: LimitsCommand,
}

#[derive(Subcommand)]
enum LimitsCommand {
    /// Write definitions from a file (`.toml` or `.json`, one limit or `[[limits]]`), or one limit
    /// from flags: `put NAME --rate 976/s --burst 20 --floor bkk=50/s`.
    Put(put::PutArgs),
    /// Print a limit's definition (TOML, or the stored JSON with --json).
    Get {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// List every limit: name, rate, burst, floors, revision.
    Ls,
    /// Remove a limit's definition.
    Rm {
        name: String,
        /// Print what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Why a command failed: bad input (exit 2) or a failure on the way (exit 1).
#[derive(Debug)]
pub(crate) enum Failure {
    Bad(String),
    Failed(String),
}

pub(crate) fn failed(e: impl std::fmt::Display) -> Failure {
    Failure::Failed(e.to_string())
}

pub fn run(program: &str, a: LimitsArgs) -> ExitCode {
    let url = &a.nats;
    if let Err(e) = url.check() {
        eprintln!("{program}: {e}");
        return ExitCode::from(2);
    }
    let result = crate::block_on(async {
        Ok::<_, crate::CommandError>(match a.command {
            LimitsCommand::Put(p) => put::run(url, a.replicas, p).await,
            LimitsCommand::Get { name, json } => get(url, a.replicas, &name, json).await,
            LimitsCommand::Ls => ls(url, a.replicas).await,
            LimitsCommand::Rm { name, dry_run } => rm(url, a.replicas, &name, dry_run).await,
        })
    });
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(Failure::Bad(e))) => {
            eprintln!("{program}: {e}");
            ExitCode::from(2)
        }
        Ok(Err(Failure::Failed(e))) => {
            eprintln!("{program}: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(1)
        }
    }
}

/// The bucket, opened (created if needed) on the server at `url`.
pub(crate) async fn open(nats: &crate::NatsArgs, replicas: usize) -> Result<async_nats::jetstream::kv::Store, Failure> {
    let client = nats.connect("leasehold-limits").await.map_err(failed)?;
    limits_store::open(&jetstream(client), replicas).await.map_err(failed)
}

/// The stored definition as a configuration, or why it is none.
pub(crate) fn stored_config(stored: &StoredLimit) -> Result<LimitConfig, StoredDefError> {
    stored.def.as_ref().map_err(Clone::clone).and_then(|d| Ok(d.to_config()?))
}

async fn get(url: &crate::NatsArgs, replicas: usize, name: &str, json: bool) -> Result<(), Failure> {
    let store = open(url, replicas).await?;
    let stored = limits_store::get(&store, name).await.map_err(failed)?;
    let stored = stored.ok_or_else(|| Failure::Failed(format!("no limit named {name}")))?;
    let def = stored.def.as_ref().map_err(|e| {
        Failure::Failed(format!("limit {name} (revision {}) is not a definition: {e}", stored.revision))
    })?;
    if json {
        println!("{}", String::from_utf8_lossy(&def.to_json()));
        return Ok(());
    }
    match stored_config(&stored) {
        Ok(c) => println!("# {name}, revision {}: {} (exact)", stored.revision, summary(&c)),
        Err(e) => println!("# {name}, revision {}: does not validate: {e}", stored.revision),
    }
    print!("{}", toml::to_string(def).map_err(failed)?);
    Ok(())
}

/// `rate 976/s, burst 20, floors bkk 50/s, europe 50/s`.
fn summary(c: &LimitConfig) -> String {
    format!(
        "rate {}, burst {}, floors {}",
        format_rate(c.quota.rate_milli_per_s),
        format_amount(c.quota.burst_milli),
        floors(c)
    )
}

fn floors(c: &LimitConfig) -> String {
    let one = |d: &leasehold_core::coordinator::DcSpec| {
        let burst = d.floor.burst_milli;
        let burst = if burst == 0 { String::new() } else { format!(" burst {}", format_amount(burst)) };
        format!("{}={}{burst}", d.name, format_rate(d.floor.rate_milli_per_s))
    };
    c.dcs.iter().map(one).collect::<Vec<_>>().join(" ")
}

async fn ls(url: &crate::NatsArgs, replicas: usize) -> Result<(), Failure> {
    let store = open(url, replicas).await?;
    let limits = limits_store::list(&store).await.map_err(failed)?;
    let rows: Vec<[String; 5]> = limits
        .iter()
        .map(|l| match stored_config(l) {
            Ok(c) => [
                l.key.clone(),
                format_rate(c.quota.rate_milli_per_s),
                format_amount(c.quota.burst_milli),
                floors(&c),
                l.revision.to_string(),
            ],
            Err(e) => [l.key.clone(), "-".into(), "-".into(), format!("unreadable: {e}"), l.revision.to_string()],
        })
        .collect();
    let header = ["LIMIT", "RATE", "BURST", "FLOORS", "REVISION"].map(String::from);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("{}", cells.join("  ").trim_end());
    }
    Ok(())
}

async fn rm(url: &crate::NatsArgs, replicas: usize, name: &str, dry_run: bool) -> Result<(), Failure> {
    leasehold_core::subjects::limits_key(name).map_err(|e| Failure::Bad(format!("limit {name}: {e}")))?;
    let store = open(url, replicas).await?;
    let stored = limits_store::get(&store, name).await.map_err(failed)?;
    let stored = stored.ok_or_else(|| Failure::Failed(format!("no limit named {name}")))?;
    println!("{name}:");
    match stored_config(&stored) {
        Ok(old) => diff(Some(&old), None).iter().for_each(|l| println!("  {l}")),
        Err(e) => println!("  removed (the stored value did not validate: {e})"),
    }
    if dry_run {
        println!("  dry run: nothing written");
        return Ok(());
    }
    match limits_store::remove(&store, name, Some(stored.revision)).await.map_err(failed)? {
        RemoveOutcome::Removed => {
            println!("  removed revision {}", stored.revision);
            Ok(())
        }
        RemoveOutcome::Conflict => Err(Failure::Failed(format!(
            "limit {name} changed after revision {} was read: nothing removed; run it again",
            stored.revision
        ))),
        RemoveOutcome::Unknown => {
            Err(Failure::Failed(format!("limit {name}: the removal timed out and may still apply; check with get")))
        }
    }
}
