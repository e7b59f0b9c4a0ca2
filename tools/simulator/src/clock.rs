//! Per-node clocks: arbitrary offset, bounded rate drift. Nodes only ever see local time.

use leasehold_core::rng::SeededRng;

/// A node's monotonic clock: `local = base + (real − stopped) · (1 + drift)`, where `stopped` is
/// the real time it did not count (only with a clock that stops while the machine is suspended,
/// as `CLOCK_MONOTONIC` does: a negative control; Leasehold's services read `CLOCK_BOOTTIME`).
#[derive(Clone, Copy, Debug)]
pub struct NodeClock {
    base_ns: u64,
    drift: f64,
    /// Real ns not counted by stops that have ended before `stop.0`.
    stopped_before_ns: u64,
    /// The latest stop: real `[from, until)`.
    stop: (u64, u64),
}

/// All local clocks start far from zero so offsets of ± seconds never underflow.
const BASE_NS: u64 = 1_000_000_000_000;

impl NodeClock {
    pub fn exact() -> Self {
        NodeClock { base_ns: BASE_NS, drift: 0.0, stopped_before_ns: 0, stop: (0, 0) }
    }

    /// Offset uniform in ±`max_offset_ms`, drift uniform in ±`max_drift`.
    pub fn random(rng: &mut SeededRng, max_offset_ms: u64, max_drift: f64) -> Self {
        let offset = rng.range_u64(0, 2 * max_offset_ms * 1_000_000);
        let drift = (rng.next_f64() * 2.0 - 1.0) * max_drift;
        NodeClock { base_ns: BASE_NS - max_offset_ms * 1_000_000 + offset, drift, stopped_before_ns: 0, stop: (0, 0) }
    }

    #[inline]
    pub fn local(&self, real_ns: u64) -> u64 {
        let (from, until) = self.stop;
        let stopped = self.stopped_before_ns + real_ns.clamp(from, until) - from;
        self.base_ns + ((real_ns - stopped.min(real_ns)) as f64 * (1.0 + self.drift)) as u64
    }

    /// The clock stops for real `[from_ns, until_ns)` (a suspend it does not count). `from_ns`
    /// must not be before an earlier stop's start.
    pub fn stop(&mut self, from_ns: u64, until_ns: u64) {
        let (f, u) = self.stop;
        self.stopped_before_ns += from_ns.clamp(f, u) - f;
        self.stop = (from_ns, until_ns.max(from_ns));
    }

    /// Real time that passes while this clock advances `local_ns`.
    pub fn real_span(&self, local_ns: u64) -> u64 {
        (local_ns as f64 / (1.0 + self.drift)).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_clock_stands_still_then_runs_on_from_where_it_stood() {
        let mut c = NodeClock::exact();
        c.stop(10, 20);
        assert_eq!(c.local(15) - c.local(10), 0);
        assert_eq!(c.local(25) - c.local(10), 5);
        c.stop(30, 40);
        assert_eq!(c.local(35) - c.local(0), 20);
        assert_eq!(c.local(50) - c.local(0), 30);
        // Never backwards.
        assert!((0..60).all(|t| c.local(t + 1) >= c.local(t)));
    }
}
