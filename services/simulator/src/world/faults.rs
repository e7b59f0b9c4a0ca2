//! Applying and healing scheduled faults.

use super::{Ev, PodState, World, S};
use crate::faults::FaultKind;

impl World {
    fn pick_pod(&self, target: u64, want: impl Fn(PodState) -> bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.pods.len()).filter(|&p| want(self.pods[p].state)).collect();
        (!candidates.is_empty()).then(|| candidates[(target % candidates.len() as u64) as usize])
    }

    fn leader(&self) -> Option<usize> {
        (0..self.coords.len()).find(|&c| self.coords[c].core.is_some() && self.coords[c].alive)
    }

    pub(super) fn apply_fault(&mut self, i: usize) {
        let f = self.faults[i].clone();
        let heal_at = self.now + (f.duration_s * S as f64) as u64;
        let applied = match f.kind {
            FaultKind::PodCrash => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.stop_pod(p);
                self.faults[i].target = p as u64;
            }),
            FaultKind::PodPause => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.pods[p].state = PodState::Paused;
                self.pods[p].paused_until = heal_at;
                self.faults[i].target = p as u64;
            }),
            FaultKind::PodDrain => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                let slot = &mut self.pods[p];
                slot.state = PodState::Draining;
                slot.routable = false;
                slot.counters.rejected += slot.queue.len() as u64;
                slot.queue.clear();
                self.faults[i].target = p as u64;
            }),
            FaultKind::PodJoin => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                let first = self.pods.len();
                for _ in 0..f.amount as usize {
                    let p = self.add_pod_slot(d);
                    self.start_pod(p);
                }
                self.faults[i].target = first as u64;
                Some(())
            }
            FaultKind::PartitionDcCoordinator => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                self.net.cut_dcs[d] = true;
                self.faults[i].target = d as u64;
                Some(())
            }
            FaultKind::PartitionPodDc => self.pick_pod(f.target, |s| s == PodState::Up).map(|p| {
                self.net.cut_pods[p] = true;
                self.faults[i].target = p as u64;
            }),
            FaultKind::CoordinatorCrash => self.leader().map(|c| {
                self.coords[c].alive = false;
                self.coords[c].core = None;
                self.coords[c].incarnation += 1;
                self.faults[i].target = c as u64;
            }),
            FaultKind::CoordinatorPause => self.leader().map(|c| {
                self.coords[c].paused_until = heal_at;
                self.coords[c].write_on_wake = true;
                self.faults[i].target = c as u64;
            }),
            FaultKind::DcManagerCrash => {
                let d = (f.target % self.dcs.len() as u64) as usize;
                (!self.dcs[d].down).then(|| {
                    self.dcs[d].down = true;
                    self.faults[i].target = d as u64;
                })
            }
            FaultKind::MessageLoss => {
                self.net.faults.loss = f.amount;
                Some(())
            }
            FaultKind::MessageDuplication => {
                self.net.faults.duplicate = f.amount;
                Some(())
            }
            FaultKind::MessageDelay => {
                self.net.faults.extra_delay_ms = f.amount as u64;
                Some(())
            }
        };
        if applied.is_some() {
            self.metrics.fault_injected(f.kind);
            self.push(heal_at, Ev::Heal(i));
        }
    }

    pub(super) fn stop_pod(&mut self, p: usize) {
        let slot = &mut self.pods[p];
        slot.state = PodState::Down;
        slot.routable = false;
        slot.core = None;
        slot.incarnation += 1;
        slot.counters.rejected += slot.queue.len() as u64;
        slot.queue.clear();
    }

    pub(super) fn heal_fault(&mut self, i: usize) {
        let f = self.faults[i].clone();
        let t = f.target as usize;
        match f.kind {
            FaultKind::PodCrash => self.start_pod(t),
            FaultKind::PodPause => {
                if self.pods[t].state == PodState::Paused {
                    self.pods[t].state = PodState::Up;
                    self.drain_queue(t);
                }
            }
            FaultKind::PodDrain => {
                // The replacement pod of a rolling deploy (the drained one is gone either way).
                if self.pods[t].state != PodState::Up {
                    self.stop_pod(t);
                    self.start_pod(t);
                }
            }
            FaultKind::PodJoin => {
                // The extra pods drain again (scale-down).
                for p in t..(t + f.amount as usize).min(self.pods.len()) {
                    if self.pods[p].state == PodState::Up {
                        self.pods[p].state = PodState::Draining;
                        self.pods[p].routable = false;
                        self.pods[p].counters.rejected += self.pods[p].queue.len() as u64;
                        self.pods[p].queue.clear();
                    }
                }
            }
            FaultKind::PartitionDcCoordinator => self.net.cut_dcs[t] = false,
            FaultKind::PartitionPodDc => self.net.cut_pods[t] = false,
            FaultKind::CoordinatorCrash => {
                // Comes back as a standby.
                self.coords[t].alive = true;
                let inc = self.coords[t].incarnation;
                self.push(self.now, Ev::CoordTick(t, inc));
            }
            FaultKind::CoordinatorPause => {}
            FaultKind::DcManagerCrash => self.dc_takeover(t),
            FaultKind::MessageLoss => self.net.faults.loss = 0.0,
            FaultKind::MessageDuplication => self.net.faults.duplicate = 0.0,
            FaultKind::MessageDelay => self.net.faults.extra_delay_ms = 0,
        }
    }
}
