//! The one clock every lease, term and bucket is judged by: time since this process started,
//! **including time the machine spent suspended**.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, which stops while the machine is suspended
//! (rust-lang/rust#87906). A pod or leader suspended with such a clock wakes believing that no
//! time passed: its lease or term looks as fresh as before, although its issuer (whose clock kept
//! running) has counted it expired and re-granted it. `CLOCK_BOOTTIME` keeps counting through a
//! suspend; elsewhere the platform's monotonic clock is used (Windows' and macOS's `Instant`
//! already count sleep on the platforms we know of; see docs/ARCHITECTURE.md, assumptions).

/// Nanoseconds since [`LeaseClock::start`], counting suspension. Copy it freely: every copy
/// reads the same time base.
#[derive(Clone, Copy, Debug)]
pub struct LeaseClock {
    origin_ns: u64,
}

impl LeaseClock {
    pub fn start() -> Self {
        LeaseClock { origin_ns: raw_ns() }
    }

    pub fn elapsed_ns(&self) -> u64 {
        raw_ns().saturating_sub(self.origin_ns)
    }
}

#[cfg(target_os = "linux")]
fn raw_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists since Linux 2.6.39.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // A kernel older than 2.6.39: the monotonic clock is all there is (suspend not counted).
        return monotonic_ns();
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(not(target_os = "linux"))]
fn raw_ns() -> u64 {
    monotonic_ns()
}

fn monotonic_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn it_never_goes_back_and_runs_at_the_rate_of_instant_while_awake() {
        let clock = LeaseClock::start();
        let started = Instant::now();
        let mut last = clock.elapsed_ns();
        while started.elapsed() < Duration::from_millis(30) {
            let now = clock.elapsed_ns();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        let before = clock.elapsed_ns();
        let span = started.elapsed().as_nanos() as u64;
        let after = clock.elapsed_ns();
        // Bracketed: the clock's reading before and after an Instant measurement of the same span.
        assert!(before <= span + 1_000_000, "clock {before} ns ahead of Instant's {span} ns");
        assert!(after + 1_000_000 >= span, "clock {after} ns behind Instant's {span} ns");
    }
}
