//! Envoy's rate limit APIs, the parts that are rules rather than I/O.
//!
//! * [`rls_config`]: envoyproxy/ratelimit's YAML configuration (domains, nested descriptors,
//!   `rate_limit`), read as that service reads it, and the lookup of a request's descriptor to
//!   the Leasehold limit that answers it.

pub mod rls_config;

pub use rls_config::{ConfiguredLimit, DescriptorEntry, RlsConfig, RlsConfigError, Unit};
