//! The strict upstream's sliding-window judge: an exact counter over admitted calls, used by the
//! simulator's upstream (`leasehold-sim`) in virtual time and by the mock upstream
//! (`leasehold-mock-upstream`) in real time. Sans I/O: every call takes `now_ns`. A crate of its
//! own so that the mock upstream needs nothing of the simulator.
//!
//! A call at `t` is admitted when fewer than `limit` calls were admitted in `(t − window, t]`;
//! otherwise it is rejected (and not counted in the window). Memory: one `u64` per call admitted
//! in the last window, so at most `limit` timestamps.

use serde::Serialize;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Every call received.
    pub total: u64,
    pub admitted: u64,
    /// Calls that would have exceeded the hard limit (answered 429).
    pub rejected: u64,
    /// Largest number of admitted calls seen in any window ending at an arrival.
    pub max_window: u64,
}

#[derive(Debug)]
pub struct SlidingWindow {
    limit: u64,
    window_ns: u64,
    admitted_at_ns: VecDeque<u64>,
    counters: Counters,
}

impl SlidingWindow {
    pub fn new(limit: u64, window_ms: u64) -> Self {
        SlidingWindow {
            limit,
            window_ns: window_ms.saturating_mul(1_000_000),
            admitted_at_ns: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Change the limit from the next call on (a partner lowering its limit unannounced).
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Calls admitted in the window ending at the last arrival (its size after that call).
    pub fn in_window(&self) -> u64 {
        self.admitted_at_ns.len() as u64
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ns / 1_000_000
    }

    /// Judge one call arriving at `now_ns` (monotonic). True when admitted.
    pub fn call(&mut self, now_ns: u64) -> bool {
        self.counters.total += 1;
        while self.admitted_at_ns.front().is_some_and(|&t| t + self.window_ns <= now_ns) {
            self.admitted_at_ns.pop_front();
        }
        if self.admitted_at_ns.len() as u64 >= self.limit {
            self.counters.rejected += 1;
            return false;
        }
        self.admitted_at_ns.push_back(now_ns);
        self.counters.admitted += 1;
        self.counters.max_window = self.counters.max_window.max(self.admitted_at_ns.len() as u64);
        true
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MS: u64 = 1_000_000;

    #[test]
    fn the_limit_holds_in_every_window_and_frees_exactly_one_window_later() {
        let mut w = SlidingWindow::new(3, 1_000);
        assert!(w.call(0));
        assert!(w.call(10 * MS));
        assert!(w.call(20 * MS));
        assert!(!w.call(999 * MS), "4th call inside the window");
        assert!(w.call(1_000 * MS), "the first call left the window");
        assert!(!w.call(1_000 * MS));
        assert_eq!(w.in_window(), 3);
        let c = w.counters();
        assert_eq!((c.total, c.admitted, c.rejected, c.max_window), (6, 4, 2, 3));
    }
}
