//! A definition's pod-lease rules, as people write them, and their exact form
//! ([`PodRules`], carried to DC managers in the limit's ledger record):
//!
//! ```toml
//! split = "demand"            # equal | weighted | demand
//! fail_mode = "best-effort"   # strict | best-effort
//! [[dcs]]
//! name = "bkk"
//! floor = "50/s"
//! emergency = "20/s"          # best-effort only: beyond the floor, outside the limit
//! emergency_burst = 5
//! ```
//!
//! A rule left out is each DC manager's own setting. With `best-effort`, a DC without an
//! `emergency` runs strict; the limit's documented overshoot is the sum of the allowances.

use super::rate::{Rate, Tokens};
use crate::coordinator::LimitConfig;
use crate::dc_manager::FailRule;
use crate::quota::Quota;
use serde::{Deserialize, Serialize};

/// A definition's `fail_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailModeName {
    /// `strict`: after the DC lease ends, the floor only.
    Strict,
    /// `best-effort`: after the DC lease ends, the floor and the DC's emergency allowance.
    BestEffort,
}

/// `config`'s fail mode as a definition names it.
pub fn fail_mode_name(config: &LimitConfig) -> Option<FailModeName> {
    config.pods.fail_mode.as_ref().map(|f| match f {
        FailRule::Strict => FailModeName::Strict,
        FailRule::BestEffort { .. } => FailModeName::BestEffort,
    })
}

/// DC `dc`'s emergency allowance in `config`, if it has one.
pub fn emergency_of(config: &LimitConfig, dc: &str) -> Option<Quota> {
    match &config.pods.fail_mode {
        Some(FailRule::BestEffort { emergency }) => emergency.get(dc).copied(),
        _ => None,
    }
}

/// `"20/s"` and its burst, for the `--dry-run` lines.
pub fn describe(allowance: Quota) -> String {
    let rate = Rate::from_milli_per_s(allowance.rate_milli_per_s);
    match allowance.burst_milli {
        0 => rate.to_string(),
        b => format!("{rate} burst {}", Tokens { milli: b }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dc_manager::SplitMode;
    use crate::limits::{DefFormat, LimitDef};
    use std::collections::BTreeMap;

    fn parse(text: &str) -> LimitDef {
        LimitDef::parse_file_text(text, DefFormat::Toml).expect("parses").remove(0)
    }

    const BASE: &str = "limit = \"api\"\nrate = \"1000/s\"\nburst = 20\n";

    #[test]
    fn rules_are_read_written_and_survive_a_round_trip() {
        let def = parse(&format!(
            "{BASE}split = \"demand\"\nfail_mode = \"best-effort\"\n[[dcs]]\nname = \"bkk\"\nfloor = \"50/s\"\nemergency = \"20/s\"\nemergency_burst = 5\n[[dcs]]\nname = \"eu\"\n"
        ));
        let config = def.to_config().expect("valid");
        assert_eq!(config.pods.split, Some(SplitMode::Demand));
        let emergency = BTreeMap::from([("bkk".to_string(), Quota::new(20_000, 5_000))]);
        assert_eq!(config.pods.fail_mode, Some(FailRule::BestEffort { emergency }));
        let back = LimitDef::from_config(&config);
        assert_eq!(back.to_config().expect("valid"), config);
        assert_eq!(describe(Quota::new(20_000, 5_000)), "20/s burst 5");
    }

    #[test]
    fn rules_left_out_are_the_dc_managers_own() {
        let config = parse(&format!("{BASE}[[dcs]]\nname = \"bkk\"\n")).to_config().expect("valid");
        assert!(config.pods.is_empty());
        assert!(!String::from_utf8(LimitDef::from_config(&config).to_json()).unwrap().contains("split"));
    }

    #[test]
    fn an_emergency_allowance_needs_best_effort_and_a_rate() {
        for (extra, dc_extra, says) in [
            ("", "emergency = \"20/s\"\n", "goes with fail_mode = \"best-effort\""),
            ("fail_mode = \"strict\"\n", "emergency = \"20/s\"\n", "goes with fail_mode = \"best-effort\""),
            ("fail_mode = \"best-effort\"\n", "emergency_burst = 5\n", "emergency_burst goes with an emergency rate"),
            ("fail_mode = \"best-effort\"\n", "", "needs an emergency allowance"),
        ] {
            let def = parse(&format!("{BASE}{extra}[[dcs]]\nname = \"bkk\"\n{dc_extra}"));
            let e = def.to_config().expect_err(extra).to_string();
            assert!(e.contains(says), "{e}");
        }
        let e = LimitDef::parse_file_text(&format!("{BASE}fail_mode = \"lenient\"\n"), DefFormat::Toml).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }
}
