//! `leasehold limits put FILE|NAME`: check, show the difference, write by compare-and-set.

use super::{failed, open, stored_config, Failure};
use leasehold_core::limits::{diff, DcDef, DefFormat, FailModeName, Floor, LimitDef, Rate, Tokens};
use leasehold_nats::kv::CasOutcome;
use leasehold_nats::limits_store::{self, StoredLimit};
use std::path::Path;

#[derive(clap::Args)]
pub(super) struct PutArgs {
    /// A `.toml` or `.json` file of definitions, or the name of the limit the flags define.
    target: String,
    /// R, such as 976/s, 30000/min, 1000/10s (rounded down to milli-tokens per second).
    #[arg(long)]
    rate: Option<String>,
    /// B in tokens, such as 20 or 0.5.
    #[arg(long)]
    burst: Option<String>,
    /// A DC and its floor, such as bkk=50/s (repeat for each DC; a new name adds the DC).
    #[arg(long = "floor", value_name = "DC=RATE")]
    floors: Vec<String>,
    #[arg(long)]
    dc_ttl_ms: Option<u64>,
    /// How each DC manager divides its DC lease among pods: equal, weighted or demand.
    #[arg(long)]
    split: Option<String>,
    /// strict, or best-effort (with an --emergency allowance for at least one DC).
    #[arg(long)]
    fail_mode: Option<String>,
    /// A DC and its best-effort emergency allowance, such as bkk=20/s (repeat for each DC).
    #[arg(long = "emergency", value_name = "DC=RATE")]
    emergencies: Vec<String>,
    /// Print what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
}

impl PutArgs {
    fn has_flags(&self) -> bool {
        self.rate.is_some()
            || self.burst.is_some()
            || !self.floors.is_empty()
            || self.dc_ttl_ms.is_some()
            || self.split.is_some()
            || self.fail_mode.is_some()
            || !self.emergencies.is_empty()
    }
}

pub(super) async fn run(url: &crate::NatsArgs, replicas: usize, a: PutArgs) -> Result<(), Failure> {
    let path = Path::new(&a.target);
    let from_file = DefFormat::from_path(path).map(|format| (path, format));
    // Check what can be checked before connecting: files and flags.
    let file_defs = match from_file {
        Some((path, format)) => {
            if a.has_flags() {
                return Err(Failure::Bad(
                    "put FILE takes no --rate, --burst, --floor, --dc-ttl-ms, --split, --fail-mode or --emergency"
                        .into(),
                ));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| Failure::Bad(format!("cannot read {}: {e}", path.display())))?;
            let defs = LimitDef::parse_file_text(&text, format)
                .map_err(|e| Failure::Bad(format!("{}: {e}", path.display())))?;
            if defs.is_empty() {
                return Err(Failure::Bad(format!("{}: no limits in it", path.display())));
            }
            for def in &defs {
                def.to_config().map_err(|e| Failure::Bad(e.to_string()))?;
            }
            Some(defs)
        }
        None if path.is_file() => {
            return Err(Failure::Bad(format!("{}: a definitions file ends in .toml or .json", a.target)))
        }
        None => {
            leasehold_core::subjects::limits_key(&a.target)
                .map_err(|e| Failure::Bad(format!("limit {}: {e}", a.target)))?;
            if !a.has_flags() {
                return Err(Failure::Bad(format!(
                    "{}: not a .toml or .json file, and no --rate, --burst, --floor or --dc-ttl-ms to set",
                    a.target
                )));
            }
            flag_values(&a)?;
            None
        }
    };
    let store = open(url, replicas).await?;
    let mut plans = Vec::new();
    match file_defs {
        Some(defs) => {
            for def in defs {
                let stored = limits_store::get(&store, &def.limit).await.map_err(failed)?;
                plans.push((def, stored));
            }
        }
        None => {
            let stored = limits_store::get(&store, &a.target).await.map_err(failed)?;
            let base = stored.as_ref().and_then(|s| s.def.as_ref().ok()).cloned();
            let def = with_flags(&a, base)?;
            def.to_config().map_err(|e| Failure::Bad(e.to_string()))?;
            plans.push((def, stored));
        }
    }
    for (def, stored) in &plans {
        show(def, stored.as_ref());
    }
    if a.dry_run {
        println!("dry run: nothing written");
        return Ok(());
    }
    for (def, stored) in &plans {
        if let Some(same) = stored.as_ref().filter(|s| s.def.as_ref().is_ok_and(|d| d.to_json() == def.to_json())) {
            println!("{}: unchanged (revision {})", def.limit, same.revision);
            continue;
        }
        let expected = stored.as_ref().map(|s| s.revision);
        match limits_store::put(&store, def, expected).await.map_err(failed)? {
            CasOutcome::Written { revision } => println!("{}: written revision {revision}", def.limit),
            CasOutcome::Conflict => {
                let read = expected.map_or("was read absent".into(), |r| format!("revision {r} was read"));
                return Err(Failure::Failed(format!(
                    "limit {} changed after {read}: not written; run it again to see the new difference",
                    def.limit
                )));
            }
            CasOutcome::Unknown => {
                return Err(Failure::Failed(format!(
                    "limit {}: the write timed out and may still apply; check with get",
                    def.limit
                )))
            }
        }
    }
    Ok(())
}

/// The difference `def` makes to what is stored, one line each, under the limit's name.
fn show(def: &LimitDef, stored: Option<&StoredLimit>) {
    println!("{}:", def.limit);
    let new = def.to_config().ok();
    let old = match stored.map(|s| (s.revision, stored_config(s))) {
        None => None,
        Some((_, Ok(old))) => Some(old),
        Some((revision, Err(e))) => {
            println!("  replaces revision {revision}, which is not a valid definition: {e}");
            None
        }
    };
    let lines = diff(old.as_ref(), new.as_ref());
    if lines.is_empty() {
        println!("  no change in effect");
    }
    for line in lines {
        println!("  {line}");
    }
}

/// The flags' values, parsed: rate, burst, floors, in that order.
type FlagValues = (Option<Rate>, Option<Tokens>, Vec<(String, Rate)>);

fn bad_flag(a: &PutArgs, what: &str, e: &dyn std::fmt::Display) -> Failure {
    Failure::Bad(format!("limit {}: {what}: {e}", a.target))
}

/// `DC=RATE` pairs of a repeated flag.
fn dc_rates(a: &PutArgs, flag: &str, values: &[String]) -> Result<Vec<(String, Rate)>, Failure> {
    let mut pairs = Vec::new();
    for v in values {
        let (dc, rate) = v.split_once('=').ok_or_else(|| bad_flag(a, flag, &format!("{v:?} is not DC=RATE")))?;
        pairs.push((dc.trim().to_string(), Rate::parse(rate).map_err(|e| bad_flag(a, flag, &e))?));
    }
    Ok(pairs)
}

/// A kebab-case name of one of `T`'s variants (`--split demand`, `--fail-mode best-effort`).
fn named<T: serde::de::DeserializeOwned>(a: &PutArgs, flag: &str, value: &str, names: &str) -> Result<T, Failure> {
    serde_json::from_value(serde_json::Value::String(value.to_string()))
        .map_err(|_| bad_flag(a, flag, &format!("{value:?} is not one of {names}")))
}

fn flag_values(a: &PutArgs) -> Result<FlagValues, Failure> {
    let rate = a.rate.as_deref().map(Rate::parse).transpose().map_err(|e| bad_flag(a, "--rate", &e))?;
    let burst = a.burst.as_deref().map(Tokens::parse).transpose().map_err(|e| bad_flag(a, "--burst", &e))?;
    Ok((rate, burst, dc_rates(a, "--floor", &a.floors)?))
}

/// `--split`, `--fail-mode` and `--emergency` applied to `def` (checked with the rest by
/// `LimitDef::to_config`: an allowance goes with best-effort).
fn with_pod_rules(a: &PutArgs, def: &mut LimitDef) -> Result<(), Failure> {
    if let Some(split) = &a.split {
        def.split = Some(named(a, "--split", split, "equal, weighted, demand")?);
    }
    if let Some(mode) = &a.fail_mode {
        def.fail_mode = Some(named::<FailModeName>(a, "--fail-mode", mode, "strict, best-effort")?);
    }
    for (name, rate) in dc_rates(a, "--emergency", &a.emergencies)? {
        let dc = def.dcs.iter_mut().find(|d| d.name == name);
        let dc =
            dc.ok_or_else(|| bad_flag(a, "--emergency", &format!("no DC {name} (add it with --floor {name}=RATE)")))?;
        dc.emergency = Some(rate);
    }
    Ok(())
}

/// The stored definition (if it reads) with the flags applied; without one, the flags alone.
fn with_flags(a: &PutArgs, base: Option<LimitDef>) -> Result<LimitDef, Failure> {
    let (rate, burst, floors) = flag_values(a)?;
    let mut def = match base {
        Some(def) => def,
        None => {
            let missing = |what: &str| Failure::Bad(format!("limit {}: is new, so {what} is needed", a.target));
            let rate = rate.clone().ok_or_else(|| missing("--rate"))?;
            let burst = burst.ok_or_else(|| missing("--burst"))?;
            LimitDef::new(&a.target, rate, burst)
        }
    };
    if rate.is_some() || burst.is_some() {
        // A stored legacy quota becomes rate and burst, so one of them can change alone.
        if let Some(q) = def.quota.take() {
            def.rate = Some(Rate::from_milli_per_s(q.rate_milli_per_s));
            def.burst = Some(Tokens { milli: q.burst_milli });
        }
        def.rate = rate.or(def.rate);
        def.burst = burst.or(def.burst);
    }
    for (name, rate) in floors {
        match def.dcs.iter_mut().find(|d| d.name == name) {
            Some(dc) => {
                if let Floor::Exact(q) = dc.floor {
                    dc.floor_burst = (q.burst_milli > 0).then_some(Tokens { milli: q.burst_milli });
                }
                dc.floor = Floor::Rate(rate);
            }
            None => def.dcs.push(DcDef {
                name,
                floor: Floor::Rate(rate),
                floor_burst: None,
                weight: 1.0,
                emergency: None,
                emergency_burst: None,
            }),
        }
    }
    if let Some(ttl) = a.dc_ttl_ms {
        def.dc_ttl_ms = ttl;
    }
    with_pod_rules(a, &mut def)?;
    Ok(def)
}
