//! Limits as data: a limit's definition written the way people say it (`rate = "30000/min"`,
//! `burst = 6000`, `floor = "50/s"`), stored one key per limit in the `lh_limits` KV bucket and
//! converted to the exact milli-units the ledger and the wire use.
//!
//! * [`rate`]: human rates and token amounts ↔ milli-units (rounding down, never up).
//! * [`definition`]: [`LimitDef`], the stored document, and its conversion to
//!   [`crate::coordinator::LimitConfig`].
//! * [`floor`]: a DC's floor as written, its default burst, and the rule that it can admit a call.
//! * [`pod_rules`]: the `split`, `fail_mode` and `emergency` a definition names, which DC managers
//!   read from the limit's ledger record.
//! * [`diff`]: what changing a definition does, one line per field.
//! * [`sizing`]: the lease that keeps an upstream's hard limit (sliding window or token bucket).

pub mod definition;
pub mod diff;
pub mod floor;
pub mod pod_rules;
pub mod rate;
pub mod sizing;

pub use definition::{DcDef, DefFormat, Floor, LimitDef, LimitDefError, LIMIT_DEF_VERSION};
pub use diff::{diff, diff_defs, lease_lifetime_ms};
pub use pod_rules::FailModeName;
pub use rate::{format_amount, format_rate, parse_amount, parse_rate, Rate, Tokens, ValueError};
