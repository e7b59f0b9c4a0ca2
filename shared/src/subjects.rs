//! NATS subjects and JetStream KV layout: the one place that names them.
//!
//! Every per-pod subject carries the DC and the pod instance, so NATS permissions can let a pod
//! publish only its own reports and read only its own leases:
//!
//! | subject | direction | message |
//! |---|---|---|
//! | `lh.<limit>.pod.<dc>.<pod>.report` | pod → DC manager | [`PodReport`](crate::wire::PodReport) |
//! | `lh.<limit>.pod.<dc>.<pod>.return` | pod → DC manager | [`LeaseReturn`](crate::wire::LeaseReturn) |
//! | `lh.<limit>.pod.<dc>.<pod>.lease` | DC manager → pod | [`PodLease`](crate::wire::PodLease) |
//! | `lh.<limit>.pod.<dc>.<pod>.ack` | DC manager → pod | [`ReturnAck`](crate::wire::ReturnAck) |
//! | `lh.<limit>.dc.<dc>.report` | DC manager → coordinator | [`DcReport`](crate::wire::DcReport) |
//!
//! KV (standard layout: bucket `B` is stream `KV_B`, keys under `$KV.B.>`):
//!
//! | bucket | key | value |
//! |---|---|---|
//! | `lh_ledger` | `<limit>` | [`LedgerRecord`](crate::wire::LedgerRecord), written by compare-and-set only |
//! | `lh_leaders` | `coordinator` or `dc.<dc>` | the current leader's id (no `max_age`: terms never rely on a key expiring) |

use crate::wire::{check_id, WireError};

pub const PREFIX: &str = "lh";
pub const LEDGER_BUCKET: &str = "lh_ledger";
pub const LEADER_BUCKET: &str = "lh_leaders";
pub const COORDINATOR_LEADER_KEY: &str = "coordinator";
/// In the leader bucket (a different stream from the ledger): the highest epoch under which a
/// ledger record may have been written. A missing record below a fence was lost, not never made.
pub const LEDGER_FENCE_KEY: &str = "ledger-fence";

/// Which per-pod subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodChannel {
    Report,
    Return,
    Lease,
    Ack,
}

impl PodChannel {
    fn token(self) -> &'static str {
        match self {
            PodChannel::Report => "report",
            PodChannel::Return => "return",
            PodChannel::Lease => "lease",
            PodChannel::Ack => "ack",
        }
    }
}

/// A subject for one pod. Ids are checked ([`check_id`]): no empty token, no `.`, `*`, `>`,
/// whitespace or control characters.
pub fn pod(limit: &str, dc: &str, pod: &str, channel: PodChannel) -> Result<String, WireError> {
    check_id("limit", limit)?;
    check_id("dc", dc)?;
    check_id("pod", pod)?;
    Ok(format!("{PREFIX}.{limit}.pod.{dc}.{pod}.{}", channel.token()))
}

/// What a DC manager subscribes to for one channel of all its pods.
pub fn pods_wildcard(limit: &str, dc: &str, channel: PodChannel) -> Result<String, WireError> {
    check_id("limit", limit)?;
    check_id("dc", dc)?;
    Ok(format!("{PREFIX}.{limit}.pod.{dc}.*.{}", channel.token()))
}

/// Where a DC manager reports to the coordinator.
pub fn dc_report(limit: &str, dc: &str) -> Result<String, WireError> {
    check_id("limit", limit)?;
    check_id("dc", dc)?;
    Ok(format!("{PREFIX}.{limit}.dc.{dc}.report"))
}

/// What a coordinator subscribes to: every DC's reports for one limit.
pub fn dc_reports_wildcard(limit: &str) -> Result<String, WireError> {
    check_id("limit", limit)?;
    Ok(format!("{PREFIX}.{limit}.dc.*.report"))
}

/// The ledger record's key for a limit.
pub fn ledger_key(limit: &str) -> Result<String, WireError> {
    check_id("limit", limit)?;
    Ok(limit.to_string())
}

/// The leader key of a DC's managers.
pub fn dc_leader_key(dc: &str) -> Result<String, WireError> {
    check_id("dc", dc)?;
    Ok(format!("dc.{dc}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_stable_and_scoped_per_pod() {
        assert_eq!(pod("api", "bkk", "p-1", PodChannel::Lease).unwrap(), "lh.api.pod.bkk.p-1.lease");
        assert_eq!(pods_wildcard("api", "bkk", PodChannel::Report).unwrap(), "lh.api.pod.bkk.*.report");
        assert_eq!(dc_report("api", "eu").unwrap(), "lh.api.dc.eu.report");
        assert_eq!(dc_reports_wildcard("api").unwrap(), "lh.api.dc.*.report");
        assert_eq!(dc_leader_key("eu").unwrap(), "dc.eu");
    }

    #[test]
    fn ids_that_would_escape_their_token_are_refused() {
        for bad in ["", "a.b", "*", ">", "a b"] {
            assert!(pod("api", "bkk", bad, PodChannel::Report).is_err(), "{bad:?}");
            assert!(dc_report("api", bad).is_err(), "{bad:?}");
        }
    }
}
