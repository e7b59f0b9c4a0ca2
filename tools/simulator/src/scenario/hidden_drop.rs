//! `hidden-drop`: the partner lowers its limit without telling anyone, and later raises it again.
//! The limit opts in to adapting (`LimitConfig.adaptive`, the defaults), so the coordinator
//! follows the 429s the pods report.

use super::{Demand, Scenario};
use crate::partner::HiddenLimit;
use leasehold_core::aimd::AdaptiveConfig;

/// When the partner's real limit falls from 1,000 to [`HIDDEN_LOW`] calls/s, and when it returns.
pub const HIDDEN_DROP_S: f64 = 60.0;
pub const HIDDEN_RETURN_S: f64 = 240.0;
pub const HIDDEN_HIGH: u64 = 1_000;
pub const HIDDEN_LOW: u64 = 600;

impl Scenario {
    /// The partner API's topology, both DCs offering 700/s (1,400/s in all, above the limit)
    /// for 300 s; the partner's real limit is 1,000/s until 60 s, 600/s until 240 s, then 1,000/s
    /// again. The leased limit (what the checks and the strict upstream judge) stays the
    /// configured one throughout.
    pub fn hidden_drop() -> Self {
        let demand = || Demand::Steps(vec![(0.0, 700.0)]);
        let mut s = Scenario::bkk_and_europe("hidden-drop", demand(), demand(), 300);
        s.hidden = Some(HiddenLimit {
            window_ms: 1_000,
            steps: vec![(0.0, HIDDEN_HIGH), (HIDDEN_DROP_S, HIDDEN_LOW), (HIDDEN_RETURN_S, HIDDEN_HIGH)],
        });
        s.adaptive = Some(AdaptiveConfig::default());
        s.overloaded = true;
        s
    }
}
