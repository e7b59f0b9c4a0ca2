//! Pod faults: crashes, crash loops, pauses, drains and joins.

use super::Struck;
use crate::world::{Ev, PodState, World, MS, S};

impl World {
    pub(super) fn crash_pod(&mut self, p: usize) -> Struck {
        self.stop_pod(p);
        Struck::Pod(p)
    }

    /// Fault `i` starts crash-looping pod `p`: it crashes now.
    pub(super) fn start_crash_loop(&mut self, i: usize, p: usize) -> Struck {
        self.struck[i] = Some(Struck::Pod(p));
        self.crash_loop_step(i, true);
        Struck::Pod(p)
    }

    /// One step of a crash loop: the pod dies after a short life, or comes back soon after.
    /// The loop ends (with the pod up) when the fault heals.
    ///
    /// Lives and restart delays are drawn here, as the loop runs, from the world's stream, not
    /// when the schedule is made: they always were, and drawing them elsewhere would change
    /// every run's output.
    pub(in crate::world) fn crash_loop_step(&mut self, i: usize, crash: bool) {
        let f = &self.faults[i];
        let heal_at = ((f.at_s + f.duration_s) * S as f64) as u64;
        let p = self.struck[i].expect("a crash loop has its pod").pod();
        if self.now >= heal_at {
            return;
        }
        if crash && self.pods[p].state == PodState::Up {
            self.stop_pod(p);
            let down_ns = self.rng.range_u64(20, 300) * MS;
            self.push(self.now + down_ns, Ev::CrashLoop(i, false));
        } else if !crash && self.pods[p].state == PodState::Down {
            self.start_pod(p);
            let life_ns = self.rng.range_u64(300, 1_500) * MS;
            self.push(self.now + life_ns, Ev::CrashLoop(i, true));
        }
    }

    pub(super) fn end_crash_loop(&mut self, p: usize) {
        if self.pods[p].state == PodState::Down {
            self.start_pod(p);
        }
    }

    pub(super) fn pause_pod(&mut self, p: usize, until: u64) -> Struck {
        self.pods[p].state = PodState::Paused;
        self.pods[p].paused_until = until;
        if self.sc.clocks_stop_while_suspended {
            self.pods[p].clock.stop(self.now, until);
        }
        Struck::Pod(p)
    }

    pub(super) fn wake_pod(&mut self, p: usize) {
        if self.pods[p].state == PodState::Paused {
            self.pods[p].state = PodState::Up;
            self.drain_queue(p);
        }
    }

    pub(super) fn drain_pod(&mut self, p: usize) -> Struck {
        self.stop_routing(p);
        Struck::Pod(p)
    }

    /// The replacement pod of a rolling deploy (the drained one is gone either way).
    pub(super) fn replace_drained_pod(&mut self, p: usize) {
        if self.pods[p].state != PodState::Up {
            self.stop_pod(p);
            self.start_pod(p);
        }
    }

    /// `pods` new pods join DC `d`.
    pub(super) fn join_pods(&mut self, d: usize, pods: usize) -> Struck {
        let first = self.pods.len();
        for _ in 0..pods {
            let p = self.add_pod_slot(d);
            self.start_pod(p);
        }
        Struck::PodsFrom(first)
    }

    /// The `pods` pods that joined from `first` drain again (scale-down).
    pub(super) fn drain_joined_pods(&mut self, first: usize, pods: usize) {
        for p in first..(first + pods).min(self.pods.len()) {
            if self.pods[p].state == PodState::Up {
                self.stop_routing(p);
            }
        }
    }

    /// Pod `p` drains: no new requests reach it, and those it queued are rejected.
    fn stop_routing(&mut self, p: usize) {
        let slot = &mut self.pods[p];
        slot.state = PodState::Draining;
        slot.routable = false;
        slot.counters.rejected += slot.queue.len() as u64;
        slot.queue.clear();
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
}
