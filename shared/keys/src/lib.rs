//! Per-key limits (the per-user limiter): millions of low-rate keys (per user, per tenant tier),
//! each with its own limit, decided where the key's state lives. Sans I/O: every call takes
//! `now_ms`.
//!
//! * [`spec`]: a limit (`N` per window `W`, by exact sliding log or GCRA), tiers, overrides, and
//!   input validation.
//! * [`window_log`]: the exact sliding-window log: at most `N` admitted in any window `W`.
//! * [`gcra`]: the smooth alternative: one timestamp per key.
//! * [`table`]: the keys one owner holds, with bounded memory and idle eviction.
//! * [`shards`]: which instance owns which shard, through fenced leases in a KV bucket.
//! * [`store_clock`]: where a new owner places replayed admissions: by the stream's timestamps,
//!   converted to its own clock.
//! * [`wire`]: the per-key messages and records (versioned JSON, as the lease core's).

pub mod gcra;
pub mod shards;
pub mod spec;
pub mod store_clock;
pub mod table;
pub mod window_log;
pub mod wire;

pub use spec::{Algorithm, KeyError, LimitSpec, Tiers};
pub use table::{KeyTable, Verdict};

/// The shard a key belongs to (FNV-1a, stable across versions and languages).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % shards.max(1) as u64) as u32
}
