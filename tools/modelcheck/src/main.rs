//! `leasehold-modelcheck`: explore a model, or replay a trace.

use clap::Parser;
use leasehold_modelcheck::config::ModelConfig;
use leasehold_modelcheck::explore::{explore, Limits};
use leasehold_modelcheck::presets;
use leasehold_modelcheck::trace::{replay, Trace};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "Exhaustive model check of Leasehold's cores on small configurations")]
struct Args {
    /// Named configuration: ci, deep, best-effort, live-lower, older-lease, emergency-quiet,
    /// pod-incarnation, term-from-reply, ttl-lowering.
    #[arg(long, default_value = "ci")]
    preset: String,
    /// A JSON model configuration (overrides --preset).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Turn every bug switch off: check the fixed cores on a negative control's model.
    #[arg(long)]
    fixed: bool,
    /// Stop after this many distinct states.
    #[arg(long, default_value_t = 1_000_000)]
    max_states: usize,
    /// Do not expand states this many actions deep.
    #[arg(long, default_value_t = 10_000)]
    depth: u32,
    /// Override the model's last tick.
    #[arg(long)]
    horizon: Option<u32>,
    /// Keep at most this many whole states queued (about 3 KB each); the rest are recomputed.
    #[arg(long, default_value_t = Limits::DEFAULT_MAX_STORED_STATES)]
    max_stored_states: usize,
    /// Write a counterexample here (JSON, replayable with --replay).
    #[arg(long, default_value = "counterexample.json")]
    trace_out: PathBuf,
    /// Replay this trace step by step instead of exploring.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Seconds between progress lines on stderr.
    #[arg(long, default_value_t = 5)]
    progress_secs: u64,
}

/// `println!` that ends the run quietly (exit 0) when stdout's reader has gone
/// (`leasehold-modelcheck --help | head`), rather than panicking.
macro_rules! say {
    ($($arg:tt)*) => {
        say_line(format_args!($($arg)*))
    };
}

fn say_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            eprintln!("{}", e.to_string().lines().next().unwrap_or("bad arguments"));
            return ExitCode::from(2);
        }
        Err(e) => {
            say!("{}", e.to_string().trim_end());
            return ExitCode::SUCCESS;
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn load_config(args: &Args) -> Result<ModelConfig, String> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => presets::by_name(&args.preset)
            .ok_or_else(|| format!("unknown preset {:?} (one of {})", args.preset, presets::NAMES.join(", ")))?,
    };
    if let Some(h) = args.horizon {
        cfg.horizon_ticks = h;
    }
    if args.fixed {
        cfg = presets::without_bugs(cfg);
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

fn run(args: &Args) -> Result<ExitCode, String> {
    if let Some(path) = &args.replay {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let trace: Trace = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let violation = replay(&trace, |line| say!("{line}"))?;
        return Ok(match violation {
            Some(step) => {
                say!("violation at step {step} of {}", trace.actions.len());
                ExitCode::from(1)
            }
            None => {
                say!("no violation in {} steps", trace.actions.len());
                ExitCode::SUCCESS
            }
        });
    }
    let cfg = load_config(args)?;
    let limits = Limits {
        max_states: args.max_states,
        max_depth: args.depth,
        progress_every: Some(Duration::from_secs(args.progress_secs.max(1))),
        max_stored_states: args.max_stored_states,
    };
    let out = explore(&cfg, &limits)?;
    say!(
        "states explored: {} distinct ({} initial), transitions: {}, max depth: {}, elapsed: {:.1} s, {}",
        out.states,
        out.initial_states,
        out.transitions,
        out.max_depth,
        out.elapsed.as_secs_f64(),
        if out.exhausted { "state space exhausted" } else { "stopped at a bound" }
    );
    let Some(cx) = out.counterexample else {
        say!("violations: 0");
        return Ok(ExitCode::SUCCESS);
    };
    say!("VIOLATION after {} actions: {}", cx.trace.actions.len(), cx.violation);
    let json = serde_json::to_string_pretty(&cx.trace).map_err(|e| e.to_string())?;
    std::fs::write(&args.trace_out, json).map_err(|e| format!("{}: {e}", args.trace_out.display()))?;
    replay(&cx.trace, |line| say!("{line}"))?;
    say!("trace written to {} (replay with --replay {})", args.trace_out.display(), args.trace_out.display());
    Ok(ExitCode::from(1))
}
