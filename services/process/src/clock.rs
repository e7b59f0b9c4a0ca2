//! The one clock every lease, term and bucket is judged by: time since this process started,
//! **including time the machine spent suspended**.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, which stops while the machine is suspended
//! (rust-lang/rust#87906). A pod or leader suspended with such a clock wakes believing that no
//! time passed: its lease or term looks as fresh as before, although its issuer (whose clock kept
//! running) has counted it expired and re-granted it. `CLOCK_BOOTTIME` keeps counting through a
//! suspend; elsewhere the platform's monotonic clock is used (Windows' and macOS's `Instant`
//! already count sleep on the platforms we know of; see docs/ARCHITECTURE.md, assumptions).

/// This process's clock: nanoseconds since [`LeaseClock::start`], counting suspension, skewed as
/// configured (`clock_offset_ms`, `clock_drift_ppm`: tests and the chaos harness give a process a
/// wrong clock on purpose). Each service makes one at start and passes copies to everything that
/// judges time; nothing else in `services/` or `shared/` reads a clock (clippy's
/// `disallowed-methods`, clippy.toml, enforces it). Copies read the same time base.
#[derive(Clone, Copy, Debug)]
pub struct LeaseClock {
    origin_ns: u64,
    offset_ns: u64,
    drift_ppm: i64,
    /// The machine's wall clock when this clock started (ms since the Unix epoch), shifted by
    /// the configured offset: [`LeaseClock::wall_ms`] counts on from it.
    wall_origin_ms: i64,
}

impl LeaseClock {
    /// A true clock (no skew).
    pub fn start() -> Self {
        Self::start_skewed(0, 0)
    }

    /// A clock `offset_ms` ahead (behind, if negative) and running `drift_ppm` parts per million
    /// fast (or slow, if negative; clamped to ±10%). The monotonic reading ([`now_ns`]) counts
    /// from this process's start, so only an offset ahead shifts it (a clock cannot read before
    /// its start; its origin means nothing outside the process anyway); the wall reading
    /// ([`wall_ms`]) is shifted by the whole offset, either way.
    ///
    /// [`now_ns`]: LeaseClock::now_ns
    /// [`wall_ms`]: LeaseClock::wall_ms
    pub fn start_skewed(offset_ms: i64, drift_ppm: i64) -> Self {
        let ahead_ms = offset_ms.max(0).unsigned_abs();
        LeaseClock {
            origin_ns: raw_ns(),
            offset_ns: ahead_ms.saturating_mul(1_000_000),
            drift_ppm,
            wall_origin_ms: (wall_ms() as i64).saturating_add(offset_ms),
        }
    }

    /// Milliseconds since the Unix epoch on this clock: the machine's wall clock read once, when
    /// this clock started (plus the configured offset), advanced since by this clock's monotonic
    /// time (which counts suspension and runs at its drift). So it never steps while the process
    /// runs, whatever NTP or an operator does to the wall clock meanwhile: a step forward would
    /// otherwise age every admission in a per-key window at once. Only for timestamps that stay
    /// meaningful in this process; nothing another machine decides with may depend on it (the
    /// per-key limiter's new owner places stored admissions by the stream's own timestamps).
    pub fn wall_ms(&self) -> u64 {
        let elapsed_ms = self.now_ns().saturating_sub(self.offset_ns) / 1_000_000;
        self.wall_origin_ms.saturating_add(elapsed_ms as i64).max(0) as u64
    }

    /// Now, in nanoseconds of this process's time base.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        leasehold_core::expiry::skewed_ns(raw_ns().saturating_sub(self.origin_ns), self.offset_ns, self.drift_ppm)
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ns() / 1_000_000
    }

    /// Seconds from `earlier_ns` (a reading of this clock) to now.
    pub fn seconds_since(&self, earlier_ns: u64) -> f64 {
        self.now_ns().saturating_sub(earlier_ns) as f64 / 1e9
    }
}

/// Milliseconds since the Unix epoch, from the machine's wall clock as it is now: the origin of
/// [`LeaseClock::wall_ms`], the Redis baseline's scores and a credential's issue time; never for
/// a lease or a term. 0 if the wall clock is before 1970.
#[allow(clippy::disallowed_methods)] // the one wall-clock reading
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `CLOCK_BOOTTIME`, through the TSC where it may stand in for it ([`crate::tsc_clock`]).
#[cfg(target_os = "linux")]
#[inline]
fn raw_ns() -> u64 {
    crate::tsc_clock::now_ns(crate::kernel_clock::boottime_ns)
}

#[cfg(not(target_os = "linux"))]
fn raw_ns() -> u64 {
    crate::kernel_clock::monotonic_ns()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    #[allow(clippy::disallowed_methods)] // compared against Instant on purpose
    fn it_never_goes_back_and_runs_at_the_rate_of_instant_while_awake() {
        let clock = LeaseClock::start();
        let started = Instant::now();
        let mut last = clock.now_ns();
        while started.elapsed() < Duration::from_millis(30) {
            let now = clock.now_ns();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        let before = clock.now_ns();
        let span = started.elapsed().as_nanos() as u64;
        let after = clock.now_ns();
        // Bracketed: the clock's reading before and after an Instant measurement of the same span.
        assert!(before <= span + 1_000_000, "clock {before} ns ahead of Instant's {span} ns");
        assert!(after + 1_000_000 >= span, "clock {after} ns behind Instant's {span} ns");
    }

    #[test]
    fn a_skewed_clock_starts_at_its_offset_and_runs_at_its_drift() {
        let (skewed, true_clock) = (LeaseClock::start_skewed(5_000, 100_000), LeaseClock::start());
        let first = skewed.now_ns();
        assert!(first >= 5_000_000_000, "{first}");
        let deadline = true_clock.now_ns() + 20_000_000;
        while true_clock.now_ns() < deadline {}
        let (ran_skewed, ran_true) = (skewed.now_ns() - 5_000_000_000, true_clock.now_ns());
        // 10% fast: after 20 ms of true time, at least 21.5 ms of skewed time (readings race by < 0.5 ms).
        assert!(ran_skewed * 1_000 >= ran_true * 1_075, "skewed {ran_skewed} ns vs true {ran_true} ns");
    }

    #[test]
    fn the_wall_reading_is_offset_either_way_and_advances_with_the_clock() {
        for offset_ms in [-5_000_i64, 0, 5_000] {
            let clock = LeaseClock::start_skewed(offset_ms, 0);
            let (before, read, after) = (wall_ms() as i64, clock.wall_ms() as i64, wall_ms() as i64);
            assert!(read >= before + offset_ms - 1 && read <= after + offset_ms + 1, "{offset_ms}: {read} vs {before}");
            let (mono_start, wall_start) = (clock.now_ns(), clock.wall_ms());
            while clock.now_ns() < mono_start + 20_000_000 {}
            let (wall_end, mono_end) = (clock.wall_ms(), clock.now_ns());
            // Bracketed by the monotonic readings (each wall reading floors to a millisecond).
            let (advanced_ms, mono_ms) = (wall_end - wall_start, (mono_end - mono_start) / 1_000_000);
            assert!(advanced_ms >= 19 && advanced_ms <= mono_ms + 1, "{offset_ms}: {advanced_ms} ms vs {mono_ms} ms");
        }
        // Behind: the monotonic reading still starts at 0, never before its start.
        assert!(LeaseClock::start_skewed(-5_000, 0).now_ns() < 1_000_000_000);
    }
}
