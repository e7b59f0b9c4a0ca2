//! Settings a rolling restart may change while the world runs, and the limit in force.
//!
//! New terms pick the settings up; the invariant checks read the limit in force from here.

use leasehold_core::quota::Quota;

#[derive(Clone, Debug)]
pub(super) struct LiveConfig {
    pub dc_ttl_ms: u64,
    pub pod_ttl_ms: u64,
    pub pod_ttl_ms_max: u64,
    /// The DC managers' emergency allowance now (best-effort mode; a rolling restart that lowers
    /// the TTLs lowers it too).
    pub emergency_per_dc: Quota,
    /// TTL changes so far.
    pub changes: u64,
    /// R and B the coordinators run with now.
    pub quota: Quota,
    /// Each DC's configured floor now.
    pub floors: Vec<Quota>,
    /// Limits replaced by a lower one, each in force until the end of its transition window
    /// (virtual ns): leases cut under it may still be spent until then.
    superseded: Vec<(u64, Quota)>,
}

impl LiveConfig {
    pub(super) fn new(
        dc_ttl_ms: u64,
        pod_ttl_ms: u64,
        emergency_per_dc: Quota,
        quota: Quota,
        floors: Vec<Quota>,
    ) -> Self {
        LiveConfig {
            dc_ttl_ms,
            pod_ttl_ms,
            pod_ttl_ms_max: pod_ttl_ms,
            emergency_per_dc,
            changes: 0,
            quota,
            floors,
            superseded: Vec::new(),
        }
    }

    /// The limit no instant may see exceeded: the current R and B, or any larger one replaced
    /// less than one transition window ago.
    pub(super) fn limit_in_force(&self, now_ns: u64) -> Quota {
        self.superseded.iter().filter(|(until, _)| *until > now_ns).fold(self.quota, |m, (_, q)| m.max(*q))
    }

    /// Run with R and B = `quota` from `now_ns`. A raise holds at once; the limit in force until
    /// now (the old R and B, or a larger one still in its window) stays in force until
    /// `window_end_ns` (one DC-lease lifetime, stretched) when any part goes down. Back-to-back
    /// changes each restart the window: the new leader inherits every lease still out, those cut
    /// under a limit whose own window has not ended included.
    pub(super) fn set_quota(&mut self, quota: Quota, now_ns: u64, window_end_ns: u64) {
        let in_force = self.limit_in_force(now_ns);
        self.superseded.retain(|(until, _)| *until > now_ns);
        if !in_force.fits_in(&quota) {
            self.superseded.push((window_end_ns, in_force));
        }
        self.quota = quota;
    }

    /// Keep `quota` in force until `until_ns` (a leader that applied a lower limit late may have
    /// cut leases under the old one until it did).
    pub(super) fn hold_until(&mut self, quota: Quota, until_ns: u64) {
        if !quota.fits_in(&self.quota) {
            self.superseded.push((until_ns, quota));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_limit_holds_after_its_window_and_a_higher_one_at_once() {
        let mut l = LiveConfig::new(10_000, 5_000, Quota::ZERO, Quota::per_s(100, 10), vec![]);
        l.set_quota(Quota::per_s(60, 10), 1_000, 11_000);
        assert_eq!(l.limit_in_force(10_999), Quota::per_s(100, 10));
        assert_eq!(l.limit_in_force(11_000), Quota::per_s(60, 10));
        l.set_quota(Quota::per_s(100, 6), 12_000, 22_000);
        assert_eq!(l.limit_in_force(12_000), Quota::per_s(100, 10), "B went down: the old B holds");
        assert_eq!(l.limit_in_force(22_000), Quota::per_s(100, 6));
    }

    #[test]
    fn a_change_inside_another_ones_window_carries_the_larger_limit_to_its_own_window_end() {
        let mut l = LiveConfig::new(10_000, 5_000, Quota::ZERO, Quota::per_s(100, 20), vec![]);
        l.set_quota(Quota::per_s(100, 12), 1_000, 11_000);
        l.set_quota(Quota::per_s(100, 14), 3_000, 13_000); // a raise, but B 20 is still in force
        assert_eq!(l.limit_in_force(12_000), Quota::per_s(100, 20));
        assert_eq!(l.limit_in_force(13_000), Quota::per_s(100, 14));
    }
}
