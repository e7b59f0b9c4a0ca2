//! Per-key limits (seed 003): millions of low-rate keys (per user, per tenant tier), each with its
//! own limit, decided where the key's state lives. Sans I/O: every call takes `now_ms`.
//!
//! * [`spec`]: a limit (`N` per window `W`, by exact sliding log or GCRA), tiers, overrides, and
//!   input validation.
//! * [`window_log`]: the exact sliding-window log: at most `N` admitted in any window `W`.
//! * [`gcra`]: the smooth alternative: one timestamp per key.
//! * [`table`]: the keys one owner holds, with bounded memory and idle eviction.

pub mod gcra;
pub mod spec;
pub mod table;
pub mod window_log;

pub use spec::{Algorithm, KeyError, LimitSpec, Tiers};
pub use table::{KeyTable, Verdict};
