//! The exact sliding-window log (the per-user limiter): a request at `t` is admitted when the
//! admissions in `(t − W, t]`, plus its cost, stay within `N`. Memory: one `u64` per admitted unit
//! still inside the window, so at most `N` (8·N bytes, plus the deque's header) per key.

use std::collections::VecDeque;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowLog {
    /// Admission times (ms), oldest first; a cost-`c` request is `c` entries.
    admitted_ms: VecDeque<u64>,
}

/// The outcome for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogDecision {
    pub allowed: bool,
    /// Units still available in the window after this decision.
    pub remaining: u64,
    /// When the oldest counted admission leaves the window (ms from now; 0 when none).
    pub reset_ms: u64,
    /// Denied: the earliest wait after which this same cost would be admitted.
    pub retry_after_ms: u64,
}

impl WindowLog {
    fn expire(&mut self, now_ms: u64, window_ms: u64) {
        while self.admitted_ms.front().is_some_and(|&t| t + window_ms <= now_ms) {
            self.admitted_ms.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.admitted_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.admitted_ms.is_empty()
    }

    /// Newest admission, for idle eviction.
    pub fn last_ms(&self) -> Option<u64> {
        self.admitted_ms.back().copied()
    }

    fn reset_ms(&self, now_ms: u64, window_ms: u64) -> u64 {
        self.admitted_ms.front().map_or(0, |&t| (t + window_ms).saturating_sub(now_ms))
    }

    /// Admit `cost` units at `now_ms` if `limit` allows (the caller validated `cost ≤ limit`).
    /// Time must not go backwards for one key (the owner's monotonic clock).
    pub fn check(&mut self, limit: u64, window_ms: u64, cost: u64, now_ms: u64) -> LogDecision {
        self.expire(now_ms, window_ms);
        // A lowered limit may leave more entries than it allows: the oldest beyond it stay
        // counted until they expire, so nothing is admitted until the log is back under.
        let used = self.admitted_ms.len() as u64;
        if used + cost <= limit {
            self.admitted_ms.extend(std::iter::repeat_n(now_ms, cost as usize));
            return LogDecision {
                allowed: true,
                remaining: limit - used - cost,
                reset_ms: self.reset_ms(now_ms, window_ms),
                retry_after_ms: 0,
            };
        }
        // Enough units must leave: the (used + cost − limit)-th oldest entry's exit is the wait.
        let must_leave = (used + cost - limit) as usize;
        let exit = self.admitted_ms.get(must_leave - 1).map_or(0, |&t| t + window_ms);
        LogDecision {
            allowed: false,
            remaining: limit.saturating_sub(used),
            reset_ms: self.reset_ms(now_ms, window_ms),
            retry_after_ms: exit.saturating_sub(now_ms),
        }
    }

    /// Record `cost` units admitted at `at_ms` unconditionally (replay); never before the newest.
    pub fn record(&mut self, at_ms: u64, cost: u64) {
        let at_ms = self.last_ms().map_or(at_ms, |last| last.max(at_ms));
        self.admitted_ms.extend(std::iter::repeat_n(at_ms, cost as usize));
    }

    /// Current count and remaining, without recording anything.
    pub fn peek(&mut self, limit: u64, window_ms: u64, now_ms: u64) -> (u64, u64, u64) {
        self.expire(now_ms, window_ms);
        let used = self.admitted_ms.len() as u64;
        (used, limit.saturating_sub(used), self.reset_ms(now_ms, window_ms))
    }

    /// The entries, for persistence (times in ms).
    pub fn entries(&self) -> impl Iterator<Item = u64> + '_ {
        self.admitted_ms.iter().copied()
    }

    pub fn from_entries(mut entries: Vec<u64>) -> Self {
        entries.sort_unstable();
        WindowLog { admitted_ms: entries.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_at_the_window_edges() {
        let mut w = WindowLog::default();
        // 3 per 1000 ms.
        assert!(w.check(3, 1_000, 1, 0).allowed);
        assert!(w.check(3, 1_000, 1, 10).allowed);
        let third = w.check(3, 1_000, 1, 999);
        assert!(third.allowed && third.remaining == 0);
        let d = w.check(3, 1_000, 1, 999);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, 1, "the entry at 0 leaves at 1000");
        // At exactly t = 1000 the entry at 0 is outside (t − W, t].
        assert!(w.check(3, 1_000, 1, 1_000).allowed);
        assert!(!w.check(3, 1_000, 1, 1_009).allowed, "the entry at 10 is still inside at 1009");
        assert!(w.check(3, 1_000, 1, 1_010).allowed);
    }

    #[test]
    fn retry_after_accounts_for_the_cost() {
        let mut w = WindowLog::default();
        for t in [0, 100, 200, 300] {
            assert!(w.check(4, 1_000, 1, t).allowed);
        }
        // Cost 3 at t=500 needs the three oldest gone: the one at 200 leaves at 1200.
        let d = w.check(4, 1_000, 3, 500);
        assert_eq!((d.allowed, d.retry_after_ms, d.reset_ms), (false, 700, 500));
        assert!(!w.check(4, 1_000, 3, 1_199).allowed);
        assert!(w.check(4, 1_000, 3, 1_200).allowed);
    }

    #[test]
    fn a_lowered_limit_counts_what_was_already_admitted() {
        let mut w = WindowLog::default();
        for t in 0..10 {
            assert!(w.check(10, 1_000, 1, t).allowed);
        }
        let d = w.check(5, 1_000, 1, 20);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, 1_005 - 20, "six must leave; the sixth oldest (t=5) leaves at 1005");
    }
}
