//! The request path: arrivals, the pod's bounded wait queue, admission and the upstream call.

use super::{Ev, PodState, Policy, World, MS, S};
use leasehold_core::bucket::Decision;

enum Try {
    Admitted,
    /// Not now; try again after this many local ns (`None`: no token is coming under this lease).
    Wait(Option<u64>),
}

impl World {
    /// Schedule DC `d`'s next arrival at its demand now; returns that demand (requests/s). At zero
    /// demand the next event is only a look, 100 ms on, at whether demand has started.
    pub(super) fn schedule_arrival(&mut self, d: usize) -> f64 {
        let rate = self.sc.demand(d, self.now as f64 / S as f64);
        let gap = if rate > 0.0 { (self.rng.exp(1.0 / rate) * S as f64) as u64 } else { 100 * MS };
        self.push(self.now + gap.max(1), Ev::Arrival(d));
        rate
    }

    /// One request arrives at DC `d`; the load balancer picks a routable pod at random.
    pub(super) fn on_arrival(&mut self, d: usize) {
        if self.schedule_arrival(d) <= 0.0 {
            return; // no demand now: this was only a look at whether it has started
        }
        let sec = (self.now / S) as usize;
        self.metrics.offered(sec, d);
        let routable: usize = self.pods.iter().filter(|p| p.dc == d && p.routable).count();
        if routable == 0 {
            return; // nobody to serve it: offered, not admitted
        }
        let mut k = self.rng.range_u64(0, routable as u64 - 1) as usize;
        let p = self
            .pods
            .iter()
            .position(|s| {
                if s.dc == d && s.routable {
                    if k == 0 {
                        return true;
                    }
                    k -= 1;
                }
                false
            })
            .expect("counted above");
        let slot = &mut self.pods[p];
        slot.counters.offered += 1;
        if slot.state != PodState::Up {
            slot.counters.rejected += 1; // frozen pod: the request times out
            return;
        }
        let local = slot.clock.local(self.now);
        if slot.queue.is_empty() {
            match self.try_take(p) {
                Try::Admitted => return self.admit(p),
                Try::Wait(None) => {
                    self.pods[p].counters.rejected += 1;
                    return;
                }
                Try::Wait(Some(wait)) if wait > self.sc.queue_wait_ms * MS => {
                    self.pods[p].counters.rejected += 1;
                    return;
                }
                Try::Wait(Some(wait)) => {
                    self.pods[p].queue.push_back(local + self.sc.queue_wait_ms * MS);
                    self.arm_retry(p, wait);
                    return;
                }
            }
        }
        let slot = &mut self.pods[p];
        if slot.queue.len() >= self.sc.queue_cap {
            slot.counters.rejected += 1;
        } else {
            slot.queue.push_back(local + self.sc.queue_wait_ms * MS);
        }
    }

    fn try_take(&mut self, p: usize) -> Try {
        let slot = &self.pods[p];
        let local = slot.clock.local(self.now);
        let decision = match self.policy {
            Policy::Uncoordinated => return Try::Admitted,
            Policy::Leasehold => slot.core.as_ref().map(|c| c.bucket().try_acquire(1, local)),
            Policy::StaticPerPod => slot.static_bucket.as_ref().map(|b| b.try_acquire(1, local)),
            Policy::StaticSplit => {
                let dc = &self.dcs[slot.dc];
                dc.static_bucket.as_ref().map(|b| b.try_acquire(1, dc.clock.local(self.now)))
            }
        };
        match decision {
            Some(Ok(Decision::Granted)) => Try::Admitted,
            Some(Ok(Decision::Denied { retry_after_ns, .. })) => Try::Wait(retry_after_ns),
            // No lease yet or a capacity below one token: wait for the next lease.
            Some(Err(_)) | None => Try::Wait(None),
        }
    }

    fn arm_retry(&mut self, p: usize, wait_local_ns: u64) {
        let slot = &mut self.pods[p];
        let at = self.now + slot.clock.real_span(wait_local_ns).max(10_000);
        if slot.retry_at.is_none_or(|r| r > at) {
            slot.retry_at = Some(at);
            let inc = slot.incarnation;
            self.push(at, Ev::PodRetry(p, inc));
        }
    }

    /// Serve the queue head(s) of pod `p` until a token is missing.
    pub(super) fn on_pod_retry(&mut self, p: usize, inc: u64) {
        if self.pods[p].incarnation != inc || self.pods[p].retry_at != Some(self.now) {
            return;
        }
        self.pods[p].retry_at = None;
        self.drain_queue(p);
    }

    pub(super) fn drain_queue(&mut self, p: usize) {
        if self.pods[p].state != PodState::Up {
            return;
        }
        while let Some(&deadline) = self.pods[p].queue.front() {
            let local = self.pods[p].clock.local(self.now);
            if deadline <= local {
                self.pods[p].queue.pop_front();
                self.pods[p].counters.rejected += 1;
                continue;
            }
            match self.try_take(p) {
                Try::Admitted => {
                    self.pods[p].queue.pop_front();
                    self.admit(p);
                }
                Try::Wait(Some(wait)) if local + wait < deadline => return self.arm_retry(p, wait),
                Try::Wait(_) => {
                    // Nothing before the head's deadline: wake up then to time it out.
                    let left = deadline - local;
                    return self.arm_retry(p, left);
                }
            }
        }
    }

    fn admit(&mut self, p: usize) {
        let slot = &mut self.pods[p];
        slot.counters.admitted += 1;
        let d = slot.dc;
        let sec = (self.now / S) as usize;
        self.metrics.admitted(sec, d);
        let jitter = self.rng.range_u64(0, self.sc.jitter_ms * MS);
        let latency = self.sc.dcs[d].upstream_latency_ms * MS;
        self.upstream.send(self.now + latency + jitter, p, latency);
    }

    /// A pod whose queue holds requests but whose bucket just changed: serve them.
    pub(super) fn kick_queue(&mut self, p: usize) {
        if !self.pods[p].queue.is_empty() {
            self.pods[p].retry_at = None;
            self.drain_queue(p);
        }
    }
}
