//! Applying and healing scheduled faults: this file finds each fault's victim and hands it to
//! its family ([`pods`], [`network`], [`coordinators`], [`dc_managers`], [`settings`]).

mod coordinators;
mod dc_managers;
mod network;
mod pods;
mod settings;

use super::{Ev, PodState, World, S};
use crate::faults::{Fault, Victim};

/// Whom an applied fault struck: what its healing undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Struck {
    Pod(usize),
    /// Pods that joined, numbered from this one.
    PodsFrom(usize),
    Dc(usize),
    /// DC, manager replica.
    Manager(usize, usize),
    Coordinator(usize),
    Everyone,
}

impl Struck {
    fn pod(self) -> usize {
        match self {
            Struck::Pod(p) | Struck::PodsFrom(p) => p,
            other => panic!("a pod fault struck {other:?}"),
        }
    }

    fn dc(self) -> usize {
        match self {
            Struck::Dc(d) => d,
            other => panic!("a DC fault struck {other:?}"),
        }
    }

    fn manager(self) -> (usize, usize) {
        match self {
            Struck::Manager(d, r) => (d, r),
            other => panic!("a DC-manager fault struck {other:?}"),
        }
    }

    fn coordinator(self) -> usize {
        match self {
            Struck::Coordinator(c) => c,
            other => panic!("a coordinator fault struck {other:?}"),
        }
    }
}

impl World {
    /// Fault `i` starts: it strikes its victim (if it finds one, it is counted and its healing
    /// scheduled).
    pub(super) fn apply_fault(&mut self, i: usize) {
        let f = self.faults[i];
        let heal_at = self.now + (f.duration_s * S as f64) as u64;
        let v = f.victim;
        let struck = match f.fault {
            Fault::PodCrash => self.up_pod(v).map(|p| self.crash_pod(p)),
            Fault::PodCrashLoop => self.up_pod(v).map(|p| self.start_crash_loop(i, p)),
            Fault::PodPause => self.up_pod(v).map(|p| self.pause_pod(p, heal_at)),
            Fault::PodDrain => self.up_pod(v).map(|p| self.drain_pod(p)),
            Fault::PodJoin { pods } => Some(self.join_pods(dc(v), pods)),
            Fault::PartitionDcCoordinator => Some(self.cut_dc(dc(v))),
            Fault::PartitionPodDc => self.up_pod(v).map(|p| self.cut_pod(p)),
            Fault::CoordinatorCrash { ledger } => self.coordinator_leader(v).map(|c| self.crash_coordinator(c, ledger)),
            Fault::CoordinatorPause { after_write } => {
                self.coordinator_leader(v).map(|c| self.freeze_coordinator(c, after_write, heal_at))
            }
            Fault::DcManagerCrash => self.manager_victim(v).map(|(d, r)| self.crash_manager(d, r)),
            Fault::DcManagerPause { after_write } => {
                self.manager_victim(v).map(|(d, r)| self.freeze_manager(d, r, after_write, heal_at))
            }
            Fault::WatchLag => self.lag_watch(dc(v), heal_at),
            Fault::DcManagerReconnect => Some(self.disconnect_managers(dc(v), heal_at)),
            Fault::SlowLeaderReplies { reply_delay_ms } => Some(self.slow_leader_replies(reply_delay_ms)),
            Fault::LedgerWritesUnanswered { late_ms } => Some(self.leave_ledger_writes_unanswered(late_ms)),
            Fault::ConfigChange { ttl_scale, restarted, dc_ttl_only } => {
                Some(self.change_config(ttl_scale, restarted, dc_ttl_only))
            }
            Fault::LimitChange { change, by_restart } => Some(self.change_limit(change, by_restart, true)),
            Fault::MessageLoss { probability } => Some(self.lose_messages(probability)),
            Fault::MessageDuplication { probability } => Some(self.duplicate_messages(probability)),
            Fault::MessageDelay { extra_delay_ms } => Some(self.delay_messages(extra_delay_ms)),
        };
        if let Some(struck) = struck {
            self.struck[i] = Some(struck);
            self.metrics.fault_injected(f.fault.kind());
            self.push(heal_at, Ev::Heal(i));
        }
    }

    /// Fault `i` heals: what it did to whom it struck is undone.
    pub(super) fn heal_fault(&mut self, i: usize) {
        let f = self.faults[i];
        let s = self.struck[i].expect("only an applied fault heals");
        match f.fault {
            Fault::PodCrash => self.start_pod(s.pod()),
            Fault::PodCrashLoop => self.end_crash_loop(s.pod()),
            Fault::PodPause => self.wake_pod(s.pod()),
            Fault::PodDrain => self.replace_drained_pod(s.pod()),
            Fault::PodJoin { pods } => self.drain_joined_pods(s.pod(), pods),
            Fault::PartitionDcCoordinator => self.net.cut_dcs[s.dc()] = false,
            Fault::PartitionPodDc => self.net.cut_pods[s.pod()] = false,
            Fault::CoordinatorCrash { .. } => self.restart_coordinator(s.coordinator()),
            Fault::DcManagerCrash => {
                let (d, r) = s.manager();
                self.restart_mgr(d, r);
            }
            Fault::WatchLag => {
                let (d, r) = s.manager();
                self.end_watch_lag(d, r);
            }
            Fault::DcManagerReconnect => self.reconnect_managers(s.dc()),
            // A pause ends when its time is up; a rolling restart is not undone (the next one
            // brings the settings back).
            Fault::CoordinatorPause { .. } | Fault::DcManagerPause { .. } | Fault::ConfigChange { .. } => {}
            Fault::LimitChange { change, by_restart } => {
                self.change_limit(change, by_restart, false);
            }
            Fault::SlowLeaderReplies { .. } => self.net.faults.slow_leader_replies_ms = 0,
            Fault::LedgerWritesUnanswered { .. } => self.net.faults.unanswered_ledger_writes_ms = 0,
            Fault::MessageLoss { .. } => self.net.faults.loss = 0.0,
            Fault::MessageDuplication { .. } => self.net.faults.duplicate = 0.0,
            Fault::MessageDelay { .. } => self.net.faults.extra_delay_ms = 0,
        }
    }

    /// The pod up now that a [`Victim::PodUp`] picks.
    fn up_pod(&self, v: Victim) -> Option<usize> {
        let Victim::PodUp { pick } = v else { panic!("a pod fault names a pod, not {v:?}") };
        let candidates: Vec<usize> = (0..self.pods.len()).filter(|&p| self.pods[p].state == PodState::Up).collect();
        (!candidates.is_empty()).then(|| candidates[(pick % candidates.len() as u64) as usize])
    }

    /// The leader now, for a [`Victim::CoordinatorLeader`].
    fn coordinator_leader(&self, v: Victim) -> Option<usize> {
        assert_eq!(v, Victim::CoordinatorLeader, "a coordinator fault strikes the leader");
        self.leader()
    }

    /// The leading manager now that a [`Victim::LeadingManager`] names.
    fn manager_victim(&self, v: Victim) -> Option<(usize, usize)> {
        let Victim::LeadingManager { dc } = v else { panic!("a DC-manager fault names a leading manager, not {v:?}") };
        self.any_leading_mgr(dc)
    }
}

/// The DC a [`Victim::Dc`] names.
fn dc(v: Victim) -> usize {
    let Victim::Dc(d) = v else { panic!("this fault names a DC, not {v:?}") };
    d
}
