//! Per-node clocks: arbitrary offset, bounded rate drift. Nodes only ever see local time.

use leasehold_shared::rng::SeededRng;

/// A node's monotonic clock: `local = base + real · (1 + drift)`.
#[derive(Clone, Copy, Debug)]
pub struct NodeClock {
    base_ns: u64,
    drift: f64,
}

/// All local clocks start far from zero so offsets of ± seconds never underflow.
const BASE_NS: u64 = 1_000_000_000_000;

impl NodeClock {
    pub fn exact() -> Self {
        NodeClock { base_ns: BASE_NS, drift: 0.0 }
    }

    /// Offset uniform in ±`max_offset_ms`, drift uniform in ±`max_drift`.
    pub fn random(rng: &mut SeededRng, max_offset_ms: u64, max_drift: f64) -> Self {
        let offset = rng.range_u64(0, 2 * max_offset_ms * 1_000_000);
        let drift = (rng.next_f64() * 2.0 - 1.0) * max_drift;
        NodeClock { base_ns: BASE_NS - max_offset_ms * 1_000_000 + offset, drift }
    }

    #[inline]
    pub fn local(&self, real_ns: u64) -> u64 {
        self.base_ns + (real_ns as f64 * (1.0 + self.drift)) as u64
    }

    /// Real time that passes while this clock advances `local_ns`.
    pub fn real_span(&self, local_ns: u64) -> u64 {
        (local_ns as f64 / (1.0 + self.drift)).ceil() as u64
    }
}
