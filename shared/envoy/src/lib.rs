//! Envoy's rate limit APIs, the parts that are rules rather than I/O.
//!
//! * [`rls_config`]: envoyproxy/ratelimit's YAML configuration (domains, nested descriptors,
//!   `rate_limit`), read as that service reads it, and the lookup of a request's descriptor to
//!   the Leasehold limit that answers it.
//! * [`rlqs_pool`]: a pod's lease lent to Envoy instances as RLQS `TokenBucket` assignments,
//!   counted so that what Envoy admits stays within the lease.

mod rlqs_live;
pub mod rlqs_pool;
mod rlqs_timing;
pub mod rls_config;
mod rls_error;
mod rls_id;
mod rls_unit;
mod rls_yaml;

pub use rlqs_pool::{Assignment, BucketRef, EnvoyTokenBucket, RlqsPool, RlqsTiming};
pub use rlqs_timing::{least_drift_percent, RlqsTimingError};
pub use rls_config::{
    overall_over_limit, ConfiguredLimit, DescriptorEntry, LoadOptions, RlsConfig, RlsConfigError, RlsRule, Unit,
};
