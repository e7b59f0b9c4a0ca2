//! GCRA for one key: a single "theoretical arrival time" in microseconds. `limit` per
//! `window_ms` as a steady rate, with `burst` extra requests allowed at once. 8 bytes per key.

/// The key's state: when the bucket would be empty again (µs, the owner's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gcra {
    pub tat_us: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraDecision {
    pub allowed: bool,
    pub remaining: u64,
    /// Until the bucket is full again (ms).
    pub reset_ms: u64,
    pub retry_after_ms: u64,
}

/// Microseconds per unit, rounded up: never faster than the limit.
pub fn interval_us(limit: u64, window_ms: u64) -> u64 {
    (window_ms * 1_000).div_ceil(limit.max(1)).max(1)
}

impl Gcra {
    pub fn check(&mut self, limit: u64, window_ms: u64, burst: u64, cost: u64, now_ms: u64) -> GcraDecision {
        let t = interval_us(limit, window_ms);
        let now = now_ms * 1_000;
        let capacity_us = (burst + 1) * t;
        let base = self.tat_us.max(now);
        let new_tat = base + cost * t;
        if new_tat - now <= capacity_us {
            self.tat_us = new_tat;
            return GcraDecision {
                allowed: true,
                remaining: (capacity_us - (new_tat - now)) / t,
                reset_ms: (new_tat - now).div_ceil(1_000),
                retry_after_ms: 0,
            };
        }
        GcraDecision {
            allowed: false,
            remaining: capacity_us.saturating_sub(base - now) / t,
            reset_ms: (base - now).div_ceil(1_000),
            retry_after_ms: (new_tat - now - capacity_us).div_ceil(1_000),
        }
    }

    /// (units in use, remaining, reset ms) without recording anything.
    pub fn peek(&self, limit: u64, window_ms: u64, burst: u64, now_ms: u64) -> (u64, u64, u64) {
        let t = interval_us(limit, window_ms);
        let debt = self.tat_us.saturating_sub(now_ms * 1_000);
        let capacity = burst + 1;
        let used = debt.div_ceil(t).min(capacity);
        (used, capacity - used, debt.div_ceil(1_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_rate_with_a_burst() {
        // 10 per 1000 ms (one per 100 ms), burst 2: three at once, then one per 100 ms.
        let mut g = Gcra::default();
        for _ in 0..3 {
            assert!(g.check(10, 1_000, 2, 1, 1_000).allowed);
        }
        let d = g.check(10, 1_000, 2, 1, 1_000);
        assert_eq!((d.allowed, d.retry_after_ms), (false, 100));
        assert!(!g.check(10, 1_000, 2, 1, 1_099).allowed);
        assert!(g.check(10, 1_000, 2, 1, 1_100).allowed);
        assert_eq!(g.peek(10, 1_000, 2, 1_100).1, 0);
        assert_eq!(g.peek(10, 1_000, 2, 10_000), (0, 3, 0));
    }

    #[test]
    fn a_cost_above_the_capacity_is_never_admitted_but_fits_exactly() {
        let mut g = Gcra::default();
        assert!(!g.check(10, 1_000, 2, 4, 0).allowed);
        assert!(g.check(10, 1_000, 2, 3, 0).allowed);
    }
}
