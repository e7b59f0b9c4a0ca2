//! What `/readyz` answers for each service: ready or not, the role, and why, in a sentence an
//! operator can act on. Pure: the services pass what they know and their clock's readings.
//!
//! * **Coordinator**: ready while it leads a term that may act, or while it follows with a fresh
//!   view (it reached the leader key within `max_view_age_ms`: it could take over).
//! * **DC manager**: ready while it leads and every limit it serves holds a valid DC lease (one
//!   running on its floor is not ready: the coordinator is not reaching it), or while it follows
//!   with a fresh view.
//! * **Agent** (pod): ready while it is not draining and its default limit, if it has one, holds
//!   a valid lease. An agent without a default limit asks for leases on first use: ready.
//!
//! `/healthz` says only that the process answers; `/readyz` is what a rolling upgrade waits for.

use crate::leadership::Leadership;
use serde::Serialize;

/// What `/readyz` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Whether the service is ready.
    pub ready: bool,
    /// `leader`, `standby` or `agent`.
    pub role: &'static str,
    /// Why, in words.
    pub reason: String,
}

impl Readiness {
    fn yes(role: &'static str, reason: String) -> Self {
        Readiness { ready: true, role, reason }
    }

    fn no(role: &'static str, reason: String) -> Self {
        Readiness { ready: false, role, reason }
    }
}

/// How a replica of a service with standbys stands at `now_ns` (its clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaView {
    /// The epoch of the term it leads, if it leads one.
    pub epoch: Option<u64>,
    /// Until when that term may act (the term's own rule: its last landed renewal's send time
    /// plus the acting window).
    pub acts_until_ns: Option<u64>,
    /// When it last reached the leader key (a read answered, or a write with a definite outcome).
    pub key_reached_ns: Option<u64>,
}

impl ReplicaView {
    /// The view of a replica that `leadership` drives: its term counts once `taken_over` (the
    /// replica has loaded its state); `key_reached_ns` as its driver last saw the key answer.
    pub fn of(leadership: &Leadership, taken_over: bool, key_reached_ns: Option<u64>) -> Self {
        ReplicaView {
            epoch: leadership.term().filter(|_| taken_over),
            acts_until_ns: leadership.acts_until_ns().filter(|_| taken_over),
            key_reached_ns,
        }
    }

    /// The epoch of a term that may act at `now_ns`.
    fn acting(&self, now_ns: u64) -> Option<u64> {
        self.epoch.filter(|_| self.acts_until_ns.is_some_and(|until| now_ns < until))
    }
}

/// A follower (or a leader whose term may not act now): ready while its view is fresh.
fn standby(view: &ReplicaView, now_ns: u64, max_view_age_ms: u64) -> Readiness {
    match view.key_reached_ns {
        None => Readiness::no("standby", "has not reached the leader key yet".into()),
        Some(at) => {
            let age_ms = now_ns.saturating_sub(at) / 1_000_000;
            if age_ms <= max_view_age_ms {
                Readiness::yes("standby", format!("follows: reached the leader key {age_ms} ms ago"))
            } else {
                Readiness::no(
                    "standby",
                    format!(
                        "last reached the leader key {age_ms} ms ago (over {max_view_age_ms} ms): is NATS reachable?"
                    ),
                )
            }
        }
    }
}

/// The coordinator's readiness.
pub fn coordinator(view: &ReplicaView, now_ns: u64, max_view_age_ms: u64) -> Readiness {
    match view.acting(now_ns) {
        Some(epoch) => Readiness::yes("leader", format!("leads epoch {epoch}")),
        None => standby(view, now_ns, max_view_age_ms),
    }
}

/// The DC manager's readiness: `without_dc_lease` names the limits it serves that hold no valid
/// DC lease now, out of `served`.
pub fn dc_manager(
    view: &ReplicaView,
    now_ns: u64,
    max_view_age_ms: u64,
    served: usize,
    without_dc_lease: &[String],
) -> Readiness {
    match view.acting(now_ns) {
        Some(epoch) if without_dc_lease.is_empty() => {
            Readiness::yes("leader", format!("leads epoch {epoch}; all {served} limits hold a valid DC lease"))
        }
        Some(epoch) => Readiness::no(
            "leader",
            format!(
                "leads epoch {epoch}, but {} of {served} limits hold no valid DC lease (their pods run on the floor): {}",
                without_dc_lease.len(),
                without_dc_lease.join(", ")
            ),
        ),
        None => standby(view, now_ns, max_view_age_ms),
    }
}

/// Whether an agent holds a lease for a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leased {
    /// A valid lease now.
    Now,
    /// It held one since it started, but that has ended (its DC's manager failing over, or the
    /// control plane cut off): the DC's condition, which every agent of the DC shares.
    Lapsed,
    /// Never since it started.
    Never,
}

/// The agent's readiness: `kept_limits` are the limits it keeps (its default limit, and those of
/// Envoy's configuration), each with whether it holds a lease. An agent is ready once each has
/// been leased: a lease that lapsed later is the DC's condition (a manager failover, a cut), not
/// this agent's, and taking every agent of a DC out of service at once for it would turn a gap
/// the system rides out into an outage. The agent denies calls with `Retry-After` meanwhile.
pub fn agent(draining: bool, kept_limits: &[(&str, Leased)], limits_served: usize) -> Readiness {
    if draining {
        return Readiness::no("agent", "draining: its leases are being given back".into());
    }
    let with =
        |want: Leased| -> Vec<&str> { kept_limits.iter().filter(|(_, l)| *l == want).map(|(l, _)| *l).collect() };
    let (never, lapsed) = (with(Leased::Never), with(Leased::Lapsed));
    match (kept_limits, never.as_slice()) {
        ([], _) => Readiness::yes("agent", format!("serves {limits_served} limits, each leased on first use")),
        (_, [limit]) => Readiness::no("agent", format!("holds no valid lease for {limit} yet")),
        (_, [limit, ..]) => {
            Readiness::no("agent", format!("holds no valid lease for {limit} and {} other limits yet", never.len() - 1))
        }
        (_, []) if !lapsed.is_empty() => Readiness::yes(
            "agent",
            format!("its lease for {} lapsed: calls are denied until its DC manager leases again", lapsed.join(", ")),
        ),
        ([(limit, _)], []) => Readiness::yes("agent", format!("holds a valid lease for {limit}")),
        (_, []) => Readiness::yes("agent", format!("holds a valid lease for each of its {} limits", kept_limits.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_replica_is_ready_while_its_term_may_act_or_its_view_of_the_key_is_fresh() {
        let leader = ReplicaView { epoch: Some(4), acts_until_ns: Some(1_000 * MS), key_reached_ns: Some(900 * MS) };
        assert_eq!(coordinator(&leader, 999 * MS, 3_000), Readiness::yes("leader", "leads epoch 4".into()));
        // Past its acting window the leader is judged as a standby: fresh enough here.
        assert!(coordinator(&leader, 1_000 * MS, 3_000).ready);
        assert_eq!(coordinator(&leader, 1_000 * MS, 3_000).role, "standby");
        let stale = coordinator(&leader, 5_000 * MS, 3_000);
        assert!(!stale.ready && stale.reason.contains("4100 ms ago"), "{stale:?}");
        let new = ReplicaView::default();
        assert!(!coordinator(&new, 0, 3_000).ready, "never reached the key: not ready");
    }

    #[test]
    fn a_leading_dc_manager_with_a_limit_on_its_floor_is_not_ready() {
        let leader = ReplicaView { epoch: Some(2), acts_until_ns: Some(10 * MS), key_reached_ns: Some(MS) };
        assert!(dc_manager(&leader, 5 * MS, 3_000, 2, &[]).ready);
        let floor = dc_manager(&leader, 5 * MS, 3_000, 2, &["search-api".into()]);
        assert!(!floor.ready && floor.reason.contains("1 of 2 limits") && floor.reason.contains("search-api"));
        let standby = ReplicaView { epoch: None, acts_until_ns: None, key_reached_ns: Some(4 * MS) };
        assert!(dc_manager(&standby, 5 * MS, 3_000, 0, &[]).ready, "a standby with a fresh view is ready");
    }

    #[test]
    fn an_agent_is_ready_with_a_lease_for_its_default_limit_and_not_while_draining() {
        use Leased::{Never, Now};
        assert!(agent(false, &[("partner-api", Now)], 1).ready);
        assert!(!agent(false, &[("partner-api", Never)], 1).ready);
        assert!(!agent(true, &[("partner-api", Now)], 1).ready);
        assert!(agent(false, &[], 3).ready);
        // Every kept limit (the default and those Envoy's configuration names) must be leased.
        assert!(agent(false, &[("a", Now), ("b", Now)], 2).ready);
        let one_missing = agent(false, &[("a", Now), ("b", Never)], 2);
        assert_eq!((one_missing.ready, one_missing.reason.as_str()), (false, "holds no valid lease for b yet"));
        let two_missing = agent(false, &[("a", Never), ("b", Never), ("c", Now)], 3);
        assert!(!two_missing.ready && two_missing.reason.contains("a and 1 other"), "{two_missing:?}");
    }

    /// A manager failover lets every agent's lease of a DC lapse together for a few seconds: the
    /// agents stay in service (denying with Retry-After), rather than all leaving it at once.
    #[test]
    fn an_agent_whose_lease_lapsed_stays_ready_and_says_so() {
        let r = agent(false, &[("partner-api", Leased::Lapsed)], 1);
        assert!(r.ready && r.reason.contains("partner-api lapsed"), "{r:?}");
        assert!(!agent(true, &[("partner-api", Leased::Lapsed)], 1).ready, "draining still is not");
    }
}
