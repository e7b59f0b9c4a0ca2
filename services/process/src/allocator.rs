//! The allocator every Leasehold binary declares, and how long it keeps memory it was given back.
//!
//! [`Allocator`] is mimalloc instead of the C library's malloc: a DC manager serving 1,000 limits
//! allocates and frees a batch's items thousands of times a second, and with glibc's malloc it
//! spent about a quarter of its time there and in the kernel zeroing pages it had given back
//! (perf, `bench control-plane`; docs/BENCHMARKS.md, "Control-plane cost").
//!
//! [`keep_freed_memory`]: mimalloc returns freed memory to the kernel once it has been unused for
//! 1 s (its `purge_delay`), and a DC manager frees and allocates its batches on a 1 s rhythm (the
//! renew period): memory returned one second was faulted back in, zeroed by the kernel, the next.
//! At 1,000 limits × 100 pods × 2 DCs `clear_page_erms` was 6.4% of the DC managers' threads
//! (perf), 0.2% with freed memory kept; coordinator and managers took 0.777 and 0.830 cores
//! with it kept 10 s against 0.892 and 0.913 with mimalloc's 1 s (`bench control-plane`,
//! alternating runs). Memory unused for 10 s still goes back. `MIMALLOC_PURGE_DELAY` in the
//! environment overrides it.

pub use mimalloc::MiMalloc as Allocator;

/// How long freed memory stays with the process before mimalloc returns it to the kernel.
pub const FREED_MEMORY_KEPT_MS: i64 = 10_000;

/// mimalloc's `mi_option_purge_delay` (its `mi_option_t` value: the `libmimalloc-sys` crate does
/// not name it; the test below checks it is the option whose default is 1,000 ms).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keep freed memory [`FREED_MEMORY_KEPT_MS`] before returning it to the kernel (unless
/// `MIMALLOC_PURGE_DELAY` says otherwise). Call it first thing in `main`; it changes nothing
/// when mimalloc is not the global allocator but its pages go unused.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options, an integer it reads when it next purges.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, FREED_MEMORY_KEPT_MS as _) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_is_the_option_set() {
        // SAFETY: reads an option.
        let read = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(read(), 1_000, "option {MI_OPTION_PURGE_DELAY} is not mimalloc's purge delay (default 1 s)");
        }
        keep_freed_memory();
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(read(), FREED_MEMORY_KEPT_MS as std::os::raw::c_long);
        }
    }
}
