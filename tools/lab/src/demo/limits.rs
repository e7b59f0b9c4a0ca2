//! The demo's two limits, served by the same agents and DC managers: the partner API (seeded from
//! the coordinators' TOML) and a search API (written with `leasehold limits put` before the load
//! starts), each with its own strict upstream, and the lowering of the partner API's limit that
//! the demo applies live. Definitions are written the way people say them (`rate = "612/s"`).

use super::{DCS, DC_TTL_MS, HARD_WINDOW_MS, JITTER_BUDGET_MS};
use leasehold_core::limits::{lease_lifetime_ms, DefFormat, LimitDef};
use std::path::Path;
use std::time::Instant;

/// Pods' clocks may run this fast (1%, the limits' `max_drift`), in parts per million.
const MAX_DRIFT_PPM: u64 = 10_000;

/// One limit of the demo: its partner's hard limit, its lease terms and its share of the load.
#[derive(Clone, Copy, Debug)]
pub struct DemoLimit {
    pub name: &'static str,
    /// The upstream's hard limit: calls in any sliding window of `HARD_WINDOW_MS`.
    pub hard_calls: u64,
    /// B, in tokens.
    pub burst: u64,
    /// Reserved for each DC at all times, per second.
    pub floor_per_s: u64,
    /// The load offered to it, as a multiple of the simulator's diurnal demand.
    pub demand_share: f64,
}

impl DemoLimit {
    /// The leased R for `hard_calls`: see [`rate_for`].
    pub fn rate_per_s(&self) -> u64 {
        rate_for(self.hard_calls, self.burst)
    }
}

/// The partner API (the coordinators' TOML seeds it), at 1,000 calls per second.
pub const PARTNER: DemoLimit = DemoLimit {
    name: super::LIMIT,
    hard_calls: super::HARD_CALLS,
    burst: super::BURST,
    floor_per_s: 50,
    demand_share: 1.0,
};
/// The search API (the demo writes it with `leasehold limits put`), at 400 calls per second, with
/// half the partner API's demand: it binds around the middle of the day.
pub const SEARCH: DemoLimit =
    DemoLimit { name: "search-api", hard_calls: 400, burst: 10, floor_per_s: 20, demand_share: 0.5 };
pub const LIMITS: [DemoLimit; 2] = [PARTNER, SEARCH];
/// The partner API's hard limit after it lowers it during the demo.
pub const PARTNER_LOWERED_CALLS: u64 = 700;

/// The leased rate for a hard limit of `hard_calls` per window W: any true window W sees at most
/// `R·(W·(1 + δ) + J) + B` calls, with pods' clocks up to δ fast (1%) and J the jitter budget
/// (`JITTER_BUDGET_MS`), so R = (L − B) / (W·(1 + δ) + J), rounded down.
pub fn rate_for(hard_calls: u64, burst: u64) -> u64 {
    let max_drift = MAX_DRIFT_PPM as f64 / 1_000_000.0;
    leasehold_core::limits::sizing::sliding_window_rate_per_s(
        hard_calls,
        HARD_WINDOW_MS,
        burst,
        max_drift,
        JITTER_BUDGET_MS,
    )
}

/// W·(1 + δ) + J: how long the calls of one window W may have been permitted over.
pub fn window_on_fast_clocks_plus_jitter_ms() -> u64 {
    HARD_WINDOW_MS + HARD_WINDOW_MS * MAX_DRIFT_PPM / 1_000_000 + JITTER_BUDGET_MS
}

/// The lease terms every demo limit shares (the coordinators' TOML says the same).
fn expiry_toml() -> String {
    format!("{{ max_drift = 0.01, grace_ms = 100, egress_spread_ms = {JITTER_BUDGET_MS} }}")
}

/// A `leasehold limits put` file for `l` at `rate_per_s`, in human units.
pub fn definition_toml(l: &DemoLimit, rate_per_s: u64) -> String {
    let mut s = format!(
        "# Written by leasehold-lab demo.\nlimit = \"{}\"\nrate = \"{rate_per_s}/s\"\nburst = {}\n\
         dc_ttl_ms = {DC_TTL_MS}\nrenew_interval_ms = 1000\nexpiry = {}\n",
        l.name,
        l.burst,
        expiry_toml()
    );
    for dc in DCS {
        s.push_str(&format!("\n[[dcs]]\nname = \"{dc}\"\nfloor = \"{}/s\"\n", l.floor_per_s));
    }
    s
}

/// The live lowering: the partner API's R goes down with `leasehold limits put`, and the partner
/// enforces its lower hard limit once the guarantee covers every window it judges.
#[derive(Clone, Debug)]
pub struct Lowering {
    pub limit: DemoLimit,
    pub rate_before_per_s: u64,
    pub rate_after_per_s: u64,
    pub hard_calls_after: u64,
    /// One DC-lease lifetime of the old definition: `dc_ttl_ms·(1+max_drift) + grace_ms +
    /// egress_spread_ms`, computed by the same function `leasehold limits put` prints it with.
    pub lease_lifetime_ms: u64,
}

impl Lowering {
    pub fn partner() -> Lowering {
        let def = parse(&definition_toml(&PARTNER, PARTNER.rate_per_s())).expect("the demo's definition reads");
        let config = def.to_config().expect("the demo's definition is valid");
        Lowering {
            limit: PARTNER,
            rate_before_per_s: PARTNER.rate_per_s(),
            rate_after_per_s: rate_for(PARTNER_LOWERED_CALLS, PARTNER.burst),
            hard_calls_after: PARTNER_LOWERED_CALLS,
            lease_lifetime_ms: lease_lifetime_ms(&config),
        }
    }

    /// The definition file `leasehold limits put` writes: the seeded one with the lower rate.
    pub fn definition_toml(&self) -> String {
        definition_toml(&self.limit, self.rate_after_per_s)
    }

    /// How long after the coordinator applied the change the upstream may enforce the lower limit.
    ///
    /// From one DC-lease lifetime after the change no instant sees Σ leases above the new R
    /// (docs/PROTOCOL.md, "Limits as data"). A window the upstream judges at `t` holds the calls
    /// that arrived in `(t − W, t]`, permitted up to J earlier, over at most W·(1 + δ) on a fast
    /// pod clock. So when `t − W·(1 + δ) − J` is past that lifetime, every call in the window was
    /// permitted under the new R, and the window holds at most `R·(W·(1+δ)+J) + B ≤ L`.
    pub fn upstream_delay_ms(&self) -> u64 {
        self.lease_lifetime_ms + window_on_fast_clocks_plus_jitter_ms()
    }
}

/// One limit of a definitions file (TOML).
pub fn parse(text: &str) -> Option<LimitDef> {
    LimitDef::parse_file_text(text, DefFormat::Toml).ok()?.into_iter().next()
}

/// What one run of `leasehold limits put FILE` did.
#[derive(Clone, Debug)]
pub struct PutRun {
    pub exit_code: Option<i32>,
    pub took_ms: u64,
    /// What it printed (the difference it applied, `written revision N`), one line each.
    pub printed: Vec<String>,
}

/// Write `definition` to `dir/<file_name>` and run `leasehold limits put` on it (this binary's
/// `limits put`, the same command as the production binary's) against `nats_url`. Its output also
/// goes to `log_dir/limits-put-<file_name>.log`.
pub async fn put_with_cli(
    dir: &Path,
    log_dir: &Path,
    file_name: &str,
    definition: &str,
    nats_url: &str,
) -> Result<PutRun, String> {
    let file = dir.join(file_name);
    std::fs::write(&file, definition).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let started = Instant::now();
    let out = tokio::process::Command::new(exe)
        .args(["limits", "put"])
        .arg(&file)
        .args(["--nats-url", nats_url])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run limits put: {e}"))?;
    let took_ms = started.elapsed().as_millis() as u64;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let log = log_dir.join(format!("limits-put-{file_name}.log"));
    std::fs::write(&log, &text).map_err(|e| format!("cannot write {}: {e}", log.display()))?;
    let printed = text.lines().map(String::from).collect();
    Ok(PutRun { exit_code: out.status.code(), took_ms, printed })
}
