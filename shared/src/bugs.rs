//! Behaviours that once broke the limit, kept behind switches so that negative-control tests can
//! show the regression tests, the simulator and the model checker each catch them.
//!
//! Every switch is off by default and is not part of any configuration file (`serde(skip)` where
//! it sits in a config): only tests turn them on.

/// One switch per hole an outside audit found (issue "Earn the guarantee").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KnownBugs {
    /// Hole 1: a DC manager spends under its newest *unexpired* DC lease, so when a newer lease
    /// expires first it goes back to an older, larger one it has already reported superseded.
    pub dc_falls_back_to_older_lease: bool,
    /// Hole 2: a new best-effort term hands out the emergency allowance before the previous
    /// term's pod leases (which may include it) have expired.
    pub emergency_before_quiet_period: bool,
    /// Hole 3: a pod applies leases addressed to another process with its id (no incarnation).
    pub pod_ignores_incarnation: bool,
    /// Hole 4: a leader's freshness is measured from when its renewal's reply arrived, not from
    /// when the renewal was sent.
    pub leader_fresh_from_reply: bool,
    /// Hole 8 (found by the simulator, storm seed 23 at b92f8eb): a DC manager's ledger lets a
    /// pod's claim cut under a larger, older DC lease license a share of the smaller, newer one
    /// that outlives that claim; once the coordinator stops counting the old DC lease, the pods
    /// hold more than the DC's lease.
    pub grant_checked_only_now: bool,
}
