//! The Envoy rules' tests, in one binary.

mod shipped_rlqs;
