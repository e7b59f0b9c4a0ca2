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
//! error)` ≈ 0.2 µs within a window, and never across re-anchoring (a new anchor is a fresh
//! `CLOCK_BOOTTIME`, so each thread's readings never go back; an anchor whose two reads were more
//! than 2 µs apart, the thread held up between them, is not kept). Rate error: at most `BIAS_PPM`
//! plus NTP's slew (500 ppm), far inside the 1% `max_drift` every margin already allows. So
//! leases and buckets are judged as on `CLOCK_BOOTTIME`, within 1 µs.
//!
//! **Checked while running.** Every re-anchoring compares what the fast path would have said
//! with `CLOCK_BOOTTIME`: a reading ahead of it (calibration wrong, the TSC's rate changed)
//! turns the fast path off for the process for good ([`ran_ahead`]; each thread stops using it
//! within a window). A TSC that went back
//! (reset by a suspend to RAM) re-anchors at once.
//!
//! **Assumption, and the switch.** The fast path is used only on x86-64 Linux when the kernel
//! itself keeps time on the TSC (`current_clocksource` is `tsc`, so it found the TSC invariant
//! and synchronised across CPUs) and the CPU says `constant_tsc` and `nonstop_tsc`. A suspend
//! either resets the TSC (detected) or lets it run on (counted): a platform that *restored* the
//! TSC to its value before a suspend would let one window of TSC time (100 µs) pass on the old
//! anchor after the resume. `LEASEHOLD_CLOCK=boottime` reads `CLOCK_BOOTTIME` on every call.

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
}

/// What a re-anchoring finds about the anchor it replaces.
#[derive(Debug, PartialEq, Eq)]
enum Judgement {
    Fine,
    /// The TSC is below the anchor's: reset (a suspend to RAM).
    TscWentBack,
    /// Extrapolating from the anchor to the TSC read just before `CLOCK_BOOTTIME` gives more
    /// than `CLOCK_BOOTTIME` said: the fast path runs ahead.
    RanAhead,
}

impl Anchor {
    const NONE: Anchor = Anchor { tsc: 0, ns: 0, window_ticks: 0, ns_per_tick_q32: 0 };

    /// Judge this anchor by a `CLOCK_BOOTTIME` reading `ns` taken just after the TSC read `tsc`.
    fn judge(&self, tsc: u64, ns: u64) -> Judgement {
        if self.window_ticks == 0 {
            Judgement::Fine
        } else if tsc < self.tsc {
            Judgement::TscWentBack
        } else if self.ns.saturating_add(ticks_to_ns(tsc - self.tsc, self.ns_per_tick_q32)) > ns {
            Judgement::RanAhead
        } else {
            Judgement::Fine
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
    if a.window_ticks != 0 {
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
    match ANCHOR.with(Cell::get).judge(before, ns) {
        Judgement::Fine => {}
        Judgement::TscWentBack => _ = TSC_WENT_BACK.fetch_add(1, Relaxed),
        Judgement::RanAhead => {
            // Never again (other threads stop at their next re-anchoring, within a window).
            RAN_AHEAD.store(true, Relaxed);
            WINDOW_TICKS.store(0, Release);
            ANCHOR.with(|a| a.set(Anchor::NONE));
            return ns;
        }
    }
    // The TSC read after the clock: the ticks counted from it are fewer than passed since `ns`.
    // A thread held up between the two reads would start its window behind by as long: such an
    // anchor is not kept (the next reading re-anchors).
    let held_up = after.wrapping_sub(before) > window_ticks / 50;
    let anchor = if held_up { Anchor::NONE } else { Anchor { tsc: after, ns, window_ticks, ns_per_tick_q32 } };
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
            let ns = crate::clock::boottime_ns();
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
        let a = Anchor { tsc: 1_000, ns: 50_000, window_ticks: 100_000, ns_per_tick_q32: 1 << 32 };
        assert_eq!(a.judge(3_000, 52_000), Judgement::Fine, "exactly on time");
        assert_eq!(a.judge(3_000, 52_500), Judgement::Fine, "behind: the safe side");
        assert_eq!(a.judge(3_000, 51_999), Judgement::RanAhead);
        assert_eq!(a.judge(999, 60_000), Judgement::TscWentBack);
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
                        let before = crate::clock::boottime_ns();
                        let fast = now_ns(crate::clock::boottime_ns);
                        let after = crate::clock::boottime_ns();
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

    /// A TSC below the thread's anchor (a reset by suspend) is not extrapolated from: the next
    /// reading is a fresh `CLOCK_BOOTTIME`.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_tsc_below_the_anchor_re_anchors_at_once() {
        if source() != ClockSource::Tsc {
            return;
        }
        now_ns(crate::clock::boottime_ns);
        let went_back = tsc_went_back();
        // An anchor in the TSC's future, at an old time: extrapolating would read far behind.
        let mut a = ANCHOR.with(Cell::get);
        (a.tsc, a.ns) = (u64::MAX - 1, 5);
        ANCHOR.with(|c| c.set(a));
        let before = crate::clock::boottime_ns();
        let reading = now_ns(crate::clock::boottime_ns);
        assert!(reading >= before, "{reading} < {before}: extrapolated from an anchor ahead of the TSC");
        assert_eq!(tsc_went_back(), went_back + 1);
    }
}
