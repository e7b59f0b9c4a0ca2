//! `leasehold-lab simulate`: run a scenario over many seeds and print one JSON summary line.

use clap::Args;
use leasehold_sim::{chart, run_many, RunOptions, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct SimulateArgs {
    /// diurnal | overload | tenant-shift | chaos | storm | rolling-restart | limit-change | ttl-lowering |
    /// hidden-drop | tenants
    #[arg(long)]
    scenario: String,
    /// Number of seeds to run.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// First seed (a failing seed replays with `--first-seed N --seeds 1`).
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Worker threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// How many seeds also run the naive baselines (static split, static per pod, uncoordinated).
    #[arg(long, default_value_t = 3)]
    baseline_seeds: u64,
    /// Write the follow-the-sun chart of the first seed to this SVG file.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Also print one JSON line per seed before the summary.
    #[arg(long)]
    per_seed: bool,
    /// Best-effort mode: requests/s each DC may use beyond its floor once its lease expired
    /// (its emergency allowance E). The overshoot bound Σ E is reported. 0 = strict mode.
    #[arg(long, default_value_t = 0)]
    emergency_per_dc: u64,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

pub fn run(a: SimulateArgs) -> Result<ExitCode, String> {
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    if threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    let opts = RunOptions {
        scenario: a.scenario.clone(),
        seeds: a.seeds,
        first_seed: a.first_seed,
        threads,
        baseline_seeds: a.baseline_seeds,
        progress: !a.quiet,
        emergency_per_dc: leasehold_core::quota::Quota::per_s(a.emergency_per_dc, 0),
    };
    let (summary, results) = run_many(&opts)?;
    if a.per_seed {
        for r in &results {
            println!("{}", serde_json::to_string(r).map_err(|e| e.to_string())?);
        }
    }
    if let Some(path) = &a.chart {
        let sc = Scenario::by_name(&a.scenario, a.first_seed).expect("validated by run_many");
        let names: Vec<String> = sc.dcs.iter().map(|d| d.name.clone()).collect();
        let title = format!("Leasehold {}: allocation follows demand (seed {})", sc.name, a.first_seed);
        let doc = chart::svg(&title, &names, &results[0].series, sc.quota.rate_per_s());
        std::fs::write(path, doc).map_err(|e| format!("cannot write chart {}: {e}", path.display()))?;
        eprintln!("chart written to {}", path.display());
    }
    println!("{}", serde_json::to_string(&summary).map_err(|e| e.to_string())?);
    if let Some(warning) = summary.teeth_warning() {
        eprintln!("WARNING: {warning}");
    }
    Ok(if summary.violations == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
