//! `CLOCK_BOOTTIME` at the cost of a TSC read: the request path's clock.
//!
//! Reading `CLOCK_BOOTTIME` costs ~16 ns here (vDSO); reading the CPU's time-stamp counter
//! costs ~7 ns. Each thread keeps an *anchor*: a `CLOCK_BOOTTIME` reading and the TSC read just
//! after it. Within [`WINDOW_NS`] of TSC time after its anchor, a reading is the anchor plus the
//! TSC ticks since, converted at a rate calibrated at start and biased [`BIAS_PPM`] low; past
//! the window (or if the TSC went back), the thread reads `CLOCK_BOOTTIME` again and re-anchors.
//!
//! **Bounds.** With the rate biased low, a reading is never ahead of `CLOCK_BOOTTIME` (the
//! anchor was read before its TSC value, and the ticks since are converted to fewer
//! nanoseconds than passed), and behind it by at most `WINDOW_NS · (BIAS_PPM + calibration
//! error)` ≈ 0.2 µs within a window, plus the anchor's own span (its two reads at most 0.5 µs
//! apart: an anchor whose reads were further apart, the thread held up between them, is not
//! kept), so under 1 µs; never across re-anchoring (a new anchor is a fresh `CLOCK_BOOTTIME`, so
//! each thread's readings never go back). Rate error: at most `BIAS_PPM` plus the slew NTP gives
//! `CLOCK_BOOTTIME` (500 ppm with ntpd; chrony may slew faster, and a reading found ahead then
//! turns the fast path off, below), inside the 1% `max_drift` every margin already allows. So
//! leases and buckets are judged as on `CLOCK_BOOTTIME`, within 1 µs.
//!
//! **Checked while running.** Every re-anchoring compares what the fast path would have said
//! with `CLOCK_BOOTTIME`: a reading ahead of it (calibration wrong, the TSC's rate changed)
//! turns the fast path off for the process for good ([`ran_ahead`]; each thread stops using it
//! within a window; logged). A TSC that went back (reset by a suspend to RAM), or a clock found
//! more than 1 ms past it, raises a process-wide generation: every thread's anchor is dropped at
//! its next reading, so a thread idle through the suspend never extrapolates from its old anchor
//! (whose TSC value a reset counter could reach again).
//!
//! **Assumption, and the switch.** The fast path is used only on x86-64 Linux when the kernel
//! itself keeps time on the TSC (`current_clocksource` is `tsc`, so it found the TSC invariant
//! and synchronised across CPUs) and the CPU says `constant_tsc` and `nonstop_tsc`. A suspend
//! either resets the TSC (detected) or lets it run on (counted): a platform that *restored* the
//! TSC to its value before a suspend would let the first thread to read after the resume run on
//! its old anchor for up to one window of TSC time (100 µs); its re-anchoring then finds the jump
//! and drops every other thread's anchor. `LEASEHOLD_CLOCK=boottime` reads `CLOCK_BOOTTIME` on every call.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::Once;

/// TSC time a thread runs on one anchor.
pub const WINDOW_NS: u64 = 100_000;
/// How far below the calibrated TSC rate readings are converted (covers calibration error and
/// NTP slewing `CLOCK_BOOTTIME` by up to 500 ppm after the calibration).
pub const BIAS_PPM: u64 = 2_000;

/// TSC ticks per window; 0 while the fast path is off (not calibrated yet, not available, or
/// turned off).
static WINDOW_TICKS: AtomicU64 = AtomicU64::new(0);
/// Nanoseconds per TSC tick × 2³², biased low.
static NS_PER_TICK_Q32: AtomicU64 = AtomicU64::new(0);
static CALIBRATE: Once = Once::new();
static RAN_AHEAD: AtomicBool = AtomicBool::new(false);
static TSC_WENT_BACK: AtomicU64 = AtomicU64::new(0);
/// Raised when any thread finds the TSC reset or the clock jumped past it (a suspend): every
/// anchor taken before is dropped at its thread's next reading, not only the finder's.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// A re-anchoring that finds `CLOCK_BOOTTIME` this far past what the TSC says (beyond 1% of the
/// ticks' time) takes it for a suspend the TSC did not count.
const JUMP_NS: u64 = 1_000_000;

/// A thread's anchor: everything its fast path reads, so that it reads no shared memory.
#[derive(Clone, Copy)]
struct Anchor {
    /// The TSC read just after `ns`.
    tsc: u64,
    /// A `CLOCK_BOOTTIME` reading.
    ns: u64,
    /// TSC ticks this anchor serves; 0: none (re-anchor at the next reading).
    window_ticks: u64,
    ns_per_tick_q32: u64,
    /// [`GENERATION`] when it was taken.
    generation: u64,
}

/// What a re-anchoring finds about the anchor it replaces.
#[derive(Debug, PartialEq, Eq)]
enum Judgement {
    Fine,
    /// The TSC is below the anchor's: reset (a suspend to RAM).
    TscWentBack,
    /// `CLOCK_BOOTTIME` is more than [`JUMP_NS`] (plus 1% of the time the ticks say) past what
    /// the TSC says: time passed that the TSC did not count (a suspend that restored it).
    Jumped,
    /// Extrapolating from the anchor to the TSC read just before `CLOCK_BOOTTIME` gives more
    /// than `CLOCK_BOOTTIME` said: the fast path runs ahead.
    RanAhead,
}

impl Anchor {
    const NONE: Anchor = Anchor { tsc: 0, ns: 0, window_ticks: 0, ns_per_tick_q32: 0, generation: 0 };

    /// Judge this anchor by a `CLOCK_BOOTTIME` reading `ns` taken just after the TSC read `tsc`.
    fn judge(&self, tsc: u64, ns: u64) -> Judgement {
        if self.window_ticks == 0 {
            Judgement::Fine
        } else if tsc < self.tsc {
            Judgement::TscWentBack
        } else {
            let elapsed_ns = ticks_to_ns(tsc - self.tsc, self.ns_per_tick_q32);
            let predicted = self.ns.saturating_add(elapsed_ns);
            if predicted > ns {
                Judgement::RanAhead
            } else if ns - predicted > JUMP_NS + elapsed_ns / 100 {
                Judgement::Jumped
            } else {
                Judgement::Fine
            }
        }
    }
}

thread_local! {
    static ANCHOR: Cell<Anchor> = const { Cell::new(Anchor::NONE) };
}

/// Which clock readings come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// The TSC, anchored to `CLOCK_BOOTTIME` (see the module docs).
    Tsc,
    /// `CLOCK_BOOTTIME` on every reading.
    Boottime,
}

/// The source in use (calibrating first if no reading was taken yet).
pub fn source() -> ClockSource {
    CALIBRATE.call_once(calibrate);
    if WINDOW_TICKS.load(Acquire) == 0 {
        ClockSource::Boottime
    } else {
        ClockSource::Tsc
    }
}

/// Whether a re-anchoring ever found the fast path ahead of `CLOCK_BOOTTIME` (it is then off).
pub fn ran_ahead() -> bool {
    RAN_AHEAD.load(Relaxed)
}

/// How many times a thread found the TSC below its anchor (a suspend that reset it).
pub fn tsc_went_back() -> u64 {
    TSC_WENT_BACK.load(Relaxed)
}

/// Now on `CLOCK_BOOTTIME`'s time base (see the module docs for the bounds); `boottime` reads
/// that clock.
#[inline]
pub(crate) fn now_ns(boottime: fn() -> u64) -> u64 {
    let a = ANCHOR.with(Cell::get);
    if a.window_ticks != 0 && a.generation == GENERATION.load(Relaxed) {
        // A TSC below the anchor wraps to a huge difference: re-anchor.
        let ticks = rdtsc().wrapping_sub(a.tsc);
        if ticks < a.window_ticks {
            return a.ns + ticks_to_ns(ticks, a.ns_per_tick_q32);
        }
    }
    reanchor(boottime)
}

#[cold]
fn reanchor(boottime: fn() -> u64) -> u64 {
    if !CALIBRATE.is_completed() {
        CALIBRATE.call_once(calibrate);
    }
    let window_ticks = WINDOW_TICKS.load(Acquire);
    if window_ticks == 0 {
        ANCHOR.with(|a| a.set(Anchor::NONE));
        return boottime();
    }
    let ns_per_tick_q32 = NS_PER_TICK_Q32.load(Relaxed);
    let before = rdtsc();
    let ns = boottime();
    let after = rdtsc();
    // A thread held up between its two TSC reads would start its window behind by as long: such
    // an anchor is not kept (the next reading re-anchors), and the delay is no jump.
    let held_up = after.wrapping_sub(before) > window_ticks / 200;
    let judged = match ANCHOR.with(Cell::get).judge(before, ns) {
        Judgement::Jumped if held_up => Judgement::Fine,
        judged => judged,
    };
    match judged {
        Judgement::Fine => {}
        Judgement::TscWentBack | Judgement::Jumped => {
            TSC_WENT_BACK.fetch_add(1, Relaxed);
            GENERATION.fetch_add(1, Relaxed);
            tracing::warn!(?judged, "lease clock: a suspend the TSC did not count; every thread re-anchors");
        }
        Judgement::RanAhead => {
            // Never again (other threads stop at their next re-anchoring, within a window).
            RAN_AHEAD.store(true, Relaxed);
            WINDOW_TICKS.store(0, Release);
            GENERATION.fetch_add(1, Relaxed);
            ANCHOR.with(|a| a.set(Anchor::NONE));
            tracing::warn!("lease clock: the TSC reading ran ahead of CLOCK_BOOTTIME; reading CLOCK_BOOTTIME every time from now on");
            return ns;
        }
    }
    let generation = GENERATION.load(Relaxed);
    // The TSC read after the clock: the ticks counted from it are fewer than passed since `ns`.
    let anchor =
        if held_up { Anchor::NONE } else { Anchor { tsc: after, ns, window_ticks, ns_per_tick_q32, generation } };
    ANCHOR.with(|a| a.set(anchor));
    ns
}

#[inline]
fn ticks_to_ns(ticks: u64, ns_per_tick_q32: u64) -> u64 {
    ((ticks as u128 * ns_per_tick_q32 as u128) >> 32) as u64
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn rdtsc() -> u64 {
    0 // never called: `calibrate` leaves the fast path off
}

/// Whether this machine's TSC may stand in for `CLOCK_BOOTTIME` (see the module docs).
fn qualifies() -> bool {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return false;
    }
    if std::env::var("LEASEHOLD_CLOCK").is_ok_and(|v| v.trim().eq_ignore_ascii_case("boottime")) {
        return false;
    }
    let source = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    if source.map(|s| s.trim() != "tsc").unwrap_or(true) {
        return false;
    }
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else { return false };
    let Some(flags) = cpuinfo.lines().find(|l| l.starts_with("flags")) else { return false };
    let has = |f: &str| flags.split_whitespace().any(|x| x == f);
    has("constant_tsc") && has("nonstop_tsc")
}

/// A `CLOCK_BOOTTIME` reading bracketed by two TSC reads, the tightest of a few tries.
#[cfg(target_os = "linux")]
fn bracketed() -> (u64, u64, u64) {
    (0..50)
        .map(|_| {
            let before = rdtsc();
            let ns = crate::kernel_clock::boottime_ns();
            (before, ns, rdtsc())
        })
        .min_by_key(|(before, _, after)| after.wrapping_sub(*before))
        .unwrap_or((0, 0, 0))
}

/// Measure the TSC's rate against `CLOCK_BOOTTIME` over 20 ms (a lower bound on nanoseconds per
/// tick: the widest TSC span over the clock's span), bias it low, and turn the fast path on.
fn calibrate() {
    #[cfg(target_os = "linux")]
    {
        if !qualifies() {
            return;
        }
        let (a_before, a_ns, _) = bracketed();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (_, b_ns, b_after) = bracketed();
        let (ticks, ns) = (b_after.saturating_sub(a_before), b_ns.saturating_sub(a_ns));
        if ticks == 0 || ns < 10_000_000 {
            return;
        }
        let q32 = ((ns as u128) << 32) / ticks as u128;
        let biased = q32 - q32 * BIAS_PPM as u128 / 1_000_000;
        let window = ((WINDOW_NS as u128) << 32) / biased.max(1);
        if biased == 0 || window == 0 || biased > u64::MAX as u128 {
            return;
        }
        NS_PER_TICK_Q32.store(biased as u64, Relaxed);
        WINDOW_TICKS.store(window.min(u64::MAX as u128) as u64, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_at_the_given_rate() {
        assert_eq!(ticks_to_ns(1_000, 1 << 32), 1_000);
        assert_eq!(ticks_to_ns(3_000, 1 << 31), 1_500);
        assert_eq!(ticks_to_ns(u64::MAX / 2, 1 << 33), u64::MAX - 1);
    }

    #[test]
    fn a_re_anchoring_finds_a_fast_path_ahead_of_the_true_clock_or_a_tsc_that_went_back() {
        // One tick per ns, anchored at TSC 1,000 = 50,000 ns.
        let a = Anchor { tsc: 1_000, ns: 50_000, window_ticks: 100_000, ns_per_tick_q32: 1 << 32, generation: 0 };
        assert_eq!(a.judge(3_000, 52_000), Judgement::Fine, "exactly on time");
        assert_eq!(a.judge(3_000, 52_500), Judgement::Fine, "behind: the safe side");
        assert_eq!(a.judge(3_000, 51_999), Judgement::RanAhead);
        assert_eq!(a.judge(999, 60_000), Judgement::TscWentBack);
        // 2,000 ns of ticks: a lag up to JUMP_NS + 1% of them (20 ns) is no jump.
        assert_eq!(a.judge(3_000, 52_020 + JUMP_NS), Judgement::Fine, "a lag within the jump bound");
        assert_eq!(a.judge(3_000, 52_021 + JUMP_NS), Judgement::Jumped, "a suspend the TSC did not count");
        assert_eq!(Anchor::NONE.judge(5, 0), Judgement::Fine, "no anchor: nothing to judge");
    }

    /// On every thread, every fast reading lies between two `CLOCK_BOOTTIME` readings taken
    /// around it: never ahead, behind by less than a microsecond.
    #[test]
    #[cfg(target_os = "linux")]
    fn readings_stay_between_boottime_readings_taken_around_them_on_every_thread() {
        let source = source();
        println!("clock source: {source:?}");
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let mut last = 0;
                    for i in 0..2_000_000u64 {
                        let before = crate::kernel_clock::boottime_ns();
                        let fast = now_ns(crate::kernel_clock::boottime_ns);
                        let after = crate::kernel_clock::boottime_ns();
                        assert!(fast <= after, "reading {i}: {fast} ahead of CLOCK_BOOTTIME {after}");
                        assert!(fast + 1_000 >= before, "reading {i}: {fast} more than 1 µs behind {before}");
                        assert!(fast >= last, "reading {i}: went back from {last} to {fast}");
                        last = fast;
                    }
                });
            }
        });
        assert!(!ran_ahead());
    }

    /// Anchor this thread (a real anchoring), then move its anchor to `tsc` and `ns`.
    #[cfg(target_os = "linux")]
    fn set_anchor(tsc: u64, ns: u64) {
        now_ns(crate::kernel_clock::boottime_ns);
        let mut a = ANCHOR.with(Cell::get);
        (a.tsc, a.ns) = (tsc, ns);
        ANCHOR.with(|c| c.set(a));
    }

    /// A TSC below the thread's anchor (a reset by suspend) is not extrapolated from: the next
    /// reading is a fresh `CLOCK_BOOTTIME`.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_tsc_below_the_anchor_re_anchors_at_once() {
        if source() != ClockSource::Tsc {
            return;
        }
        let went_back = tsc_went_back();
        // An anchor in the TSC's future, at an old time: extrapolating would read far behind.
        set_anchor(u64::MAX - 1, 5);
        let before = crate::kernel_clock::boottime_ns();
        let reading = now_ns(crate::kernel_clock::boottime_ns);
        assert!(reading >= before, "{reading} < {before}: extrapolated from an anchor ahead of the TSC");
        assert_eq!(tsc_went_back(), went_back + 1);
    }

    /// A thread whose anchor is still in its window, but older than the process's generation
    /// (another thread found a suspend), reads `CLOCK_BOOTTIME` afresh.
    #[test]
    #[cfg(target_os = "linux")]
    fn an_anchor_of_an_older_generation_is_never_extrapolated_from() {
        if source() != ClockSource::Tsc {
            return;
        }
        // The anchor as a thread idle through a suspend holds it: in its window, its time long past.
        set_anchor(rdtsc(), 5);
        GENERATION.fetch_add(1, Relaxed);
        let before = crate::kernel_clock::boottime_ns();
        let reading = now_ns(crate::kernel_clock::boottime_ns);
        assert!(reading >= before, "{reading} < {before}: extrapolated from an anchor of an older generation");
    }
}
