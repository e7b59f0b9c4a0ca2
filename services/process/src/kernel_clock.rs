//! The kernel's clocks, read directly: `CLOCK_BOOTTIME` (and the monotonic clock where it is
//! missing). [`crate::clock`] reads them through [`crate::tsc_clock`], which anchors to them.

/// `CLOCK_BOOTTIME` read from the kernel (its vDSO).
#[cfg(target_os = "linux")]
pub(crate) fn boottime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists since Linux 2.6.39.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // A kernel older than 2.6.39: the monotonic clock is all there is (suspend not counted).
        return monotonic_ns();
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[allow(clippy::disallowed_methods)] // the platform clock, read here only
pub(crate) fn monotonic_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}
