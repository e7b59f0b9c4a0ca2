//! [`LeasePacing`]: when a DC manager sends each pod its leases, so that lease messages don't
//! multiply with limits.
//!
//! Each limit's core renews its pod leases on its own schedule (its renewal pass, its DC lease's
//! arrival, a pod's growth), so with many limits some lease is new at almost every event. The
//! pacing gathers them per pod and sends a pod all of its new leases together, at most once per
//! renew interval, on the manager's tick:
//! * **Paced**: a pod's pending leases go out on the first tick at least `min_gap` after its
//!   last lease message (`min_gap` = renew interval − half a tick, so a tick landing a little
//!   early still counts), or once a lease has waited 16 of the pod's report periods (a pod
//!   applies a lease only while the report it answers is among its last 64).
//! * **At once**: a lease for a holder (pod, limit, incarnation) that holds no lease sent to it
//!   that could still be in force: a new holder's first lease, or one whose lease ran out, waits
//!   for nothing. The pod's other pending leases ride along.
//! * A newer lease for a holder replaces an older one still pending (the issuer counts both
//!   until the pod says it uses the newer, so the older is only waste).
//!
//! Safety does not depend on any of this: a pod lease's expiry is anchored at the pod's own send
//! time of the report it answers, so a lease delivered late is only shorter.

use crate::expiry::NS_PER_MS;
use crate::wire::PodLease;
use compact_str::CompactString;
use smallvec::SmallVec;

/// A hash map with a fixed hasher: the same inputs give the same order on every run. (A DC
/// manager of 1,000 limits looks up 100,000 leases a second here at 100 pods; ordered maps of
/// string keys spent most of that comparing strings. Nothing depends on the order: a pod reads
/// its batch's leases by limit.)
type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// One holder of a limit at a pod (an incarnation of the pod's process).
#[derive(Debug)]
struct HolderMail {
    incarnation: u64,
    /// The newest lease not yet sent.
    pending: Option<PodLease>,
    /// The latest time a lease sent to it could still be in force: send time + TTL (its true
    /// end, from the pod's earlier report, is sooner). None: none sent, or swept once it ended.
    in_force_until_ns: Option<u64>,
}

#[derive(Debug, Default)]
struct PodMail {
    /// Per limit, its holders at this pod (by incarnation: almost always one, kept in the map's
    /// own slot: a flush then reads a pod's thousand holders in one sweep, where a list apart
    /// cost a pointer to follow per holder). Keyed by the limit's name, so a lease is filed under
    /// a holder already known without a new key.
    holders: Map<CompactString, SmallVec<[HolderMail; 1]>>,
    /// Holders with a lease pending.
    pending: usize,
    /// When the last lease message went to this pod (this clock).
    last_sent_ns: Option<u64>,
    /// No holder's `in_force_until_ns` ends before this (`u64::MAX` when there is none): until
    /// then no sweep is needed.
    in_force_sweep_at_ns: u64,
    /// Some pending lease is for a holder with nothing in force (kept as leases are pushed, so a
    /// flush does not look at every pending lease).
    urgent: bool,
    /// Since when a lease has been waiting (first seen at a flush).
    pending_since_ns: Option<u64>,
    /// The pod is listed in [`LeasePacing::touched`].
    touched: bool,
    /// The shortest `interval_ms` in the pod's last report batch: its report period, or up to a
    /// second when every limit in the batch was quiet (each limit's 64 reports then span at
    /// least 16 of them either way).
    report_interval_ms: Option<u64>,
}

/// A pod applies a lease only while the report it answers is among its last
/// [`crate::lease_intake::SentLog::LEN`] (64): no lease waits longer than a quarter of that.
const MAX_HOLD_REPORTS: u64 = crate::lease_intake::SentLog::LEN as u64 / 4;

impl PodMail {
    /// File `lease` under its holder: a newer lease replaces an older one still pending.
    fn file(&mut self, lease: PodLease) {
        let holders = match self.holders.get_mut(lease.limit.as_str()) {
            Some(holders) => holders,
            None => self.holders.entry(lease.limit.clone()).or_default(),
        };
        let i = match holders.iter().position(|h| h.incarnation == lease.incarnation) {
            Some(i) => i,
            None => {
                let holder = HolderMail { incarnation: lease.incarnation, pending: None, in_force_until_ns: None };
                holders.push(holder);
                holders.len() - 1
            }
        };
        let holder = &mut holders[i];
        self.urgent |= holder.in_force_until_ns.is_none();
        match &holder.pending {
            None => {
                self.pending += 1;
                holder.pending = Some(lease);
            }
            Some(waiting) if waiting.version <= lease.version => holder.pending = Some(lease),
            Some(_) => {}
        }
    }

    /// Forget what ended before `now_ns`: leases in force, then holders with nothing left.
    fn sweep(&mut self, now_ns: u64) {
        let mut next = u64::MAX;
        let mut urgent = false;
        self.holders.retain(|_, holders| {
            holders.retain(|h| {
                h.in_force_until_ns = h.in_force_until_ns.filter(|&until| until > now_ns);
                next = next.min(h.in_force_until_ns.unwrap_or(u64::MAX));
                urgent |= h.pending.is_some() && h.in_force_until_ns.is_none();
                h.pending.is_some() || h.in_force_until_ns.is_some()
            });
            !holders.is_empty()
        });
        self.in_force_sweep_at_ns = next;
        self.urgent = urgent;
    }

    /// This pod's pending leases, if they are due now (see [`LeasePacing::take_due`]); what is
    /// returned counts as sent at `now_ns`.
    fn take_due(&mut self, now_ns: u64, on_tick: bool, min_gap_ns: u64) -> Option<Vec<PodLease>> {
        if now_ns >= self.in_force_sweep_at_ns {
            self.sweep(now_ns);
        }
        if self.pending == 0 {
            return None;
        }
        let since = *self.pending_since_ns.get_or_insert(now_ns);
        let max_hold_ns = self.report_interval_ms.map_or(u64::MAX, |i| i * MAX_HOLD_REPORTS * NS_PER_MS);
        let held_long = now_ns.saturating_sub(since) >= max_hold_ns;
        let paced = on_tick && (held_long || self.last_sent_ns.is_none_or(|t| now_ns.saturating_sub(t) >= min_gap_ns));
        if !(paced || self.urgent) {
            return None;
        }
        let mut leases = Vec::with_capacity(self.pending);
        for h in self.holders.values_mut().flatten() {
            if let Some(l) = h.pending.take() {
                let until = now_ns.saturating_add(l.ttl_ms.saturating_mul(NS_PER_MS));
                h.in_force_until_ns = Some(until);
                self.in_force_sweep_at_ns = self.in_force_sweep_at_ns.min(until);
                leases.push(l);
            }
        }
        self.pending = 0;
        self.urgent = false;
        self.last_sent_ns = Some(now_ns);
        self.pending_since_ns = None;
        Some(leases)
    }
}

/// When a DC manager sends each pod its new leases: together, at most once per renew interval (see
/// the module docs).
#[derive(Debug)]
pub struct LeasePacing {
    min_gap_ns: u64,
    pods: Map<CompactString, PodMail>,
    /// Pods given a lease since the last [`LeasePacing::take_due`], each once (its mail's
    /// `touched`): the only ones an event's flush looks at (a tick looks at every pod), so an
    /// event costs what it issued, not the number of pods.
    touched: Vec<CompactString>,
}

impl LeasePacing {
    /// Leases renewed every `renew_interval_ms`, on a tick every `tick_interval_ms`.
    pub fn new(renew_interval_ms: u64, tick_interval_ms: u64) -> Self {
        let gap_ms = renew_interval_ms.saturating_sub(tick_interval_ms / 2).max(1);
        LeasePacing { min_gap_ns: gap_ms.saturating_mul(NS_PER_MS), pods: Map::default(), touched: Vec::new() }
    }

    /// A lease a core issued: it waits here until [`LeasePacing::take_due`] sends it.
    /// (A DC manager of 1,000 limits pushes 100,000 a second at 100 pods: one lookup of the pod
    /// and one of the limit, by name, with no new key unless the holder is new.)
    pub fn push(&mut self, lease: PodLease) {
        let mail = match self.pods.get_mut(lease.pod.as_str()) {
            Some(mail) => mail,
            None => self
                .pods
                .entry(lease.pod.clone())
                .or_insert_with(|| PodMail { in_force_sweep_at_ns: u64::MAX, ..PodMail::default() }),
        };
        if !mail.touched {
            mail.touched = true;
            self.touched.push(lease.pod.clone());
        }
        mail.file(lease);
    }

    /// Whether any lease waits.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.pods.values().all(|m| m.pending == 0)
    }

    /// The leases to send now, per pod: every pod given a lease since the last call that has a
    /// lease for a holder with none in force, and, on a tick, every pod whose last lease message
    /// is at least the gap old. What is returned counts as sent at `now_ns`.
    pub fn take_due(&mut self, now_ns: u64, on_tick: bool) -> Vec<(CompactString, Vec<PodLease>)> {
        let touched = std::mem::take(&mut self.touched);
        let min_gap_ns = self.min_gap_ns;
        let mut due = Vec::new();
        if on_tick {
            for (pod, mail) in self.pods.iter_mut() {
                mail.touched = false;
                if let Some(leases) = mail.take_due(now_ns, on_tick, min_gap_ns) {
                    due.push((pod.clone(), leases));
                }
            }
            // Forget pods with nothing pending and nothing in force (departed, or idle).
            self.pods.retain(|_, m| !m.holders.is_empty());
        } else {
            for pod in touched {
                let Some(mail) = self.pods.get_mut(&pod) else { continue };
                mail.touched = false;
                if let Some(leases) = mail.take_due(now_ns, on_tick, min_gap_ns) {
                    due.push((pod, leases));
                }
            }
        }
        due
    }

    /// The pod's report period (the shortest `PodReport.interval_ms` of a batch): no lease waits
    /// longer than 16 of them.
    /// Kept while the pod has a lease pending or in force (its reports say it again).
    pub fn note_report_interval(&mut self, pod: &str, interval_ms: u64) {
        if let Some(mail) = self.pods.get_mut(pod) {
            mail.report_interval_ms = Some(interval_ms);
        }
    }

    /// Drop every pending lease (the term that issued them ended).
    pub fn clear(&mut self) {
        self.pods.clear();
        self.touched.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;
    use crate::wire::LeaseVersion;

    const MS: u64 = NS_PER_MS;

    fn lease(pod: &str, limit: &str, version: u64) -> PodLease {
        PodLease {
            v: 1,
            limit: limit.into(),
            dc: "bkk".into(),
            pod: pod.into(),
            incarnation: 1,
            issuer: "m-e1".into(),
            version: LeaseVersion { epoch: 1, seq: version },
            lease_id: format!("{limit}-{version}").into(),
            quota: Quota::new(1_000, 1_000),
            ttl_ms: 5_000,
            basis_seq: 1,
            limit_removed: false,
            continues: None,
        }
    }

    #[test]
    fn a_first_lease_goes_at_once_and_renewals_wait_for_the_pods_next_paced_tick() {
        let mut p = LeasePacing::new(1_000, 250);
        p.push(lease("p1", "a", 1));
        let sent = p.take_due(10 * MS, false);
        assert_eq!(sent.len(), 1, "a holder with no lease in force is served at once");
        // Renewals of "a" and a first lease of "b" at different times.
        p.push(lease("p1", "a", 2));
        assert!(p.take_due(300 * MS, false).is_empty(), "a renewal waits");
        assert!(p.take_due(500 * MS, true).is_empty(), "a tick before the gap sends nothing");
        p.push(lease("p1", "b", 1));
        let sent = p.take_due(600 * MS, false);
        assert_eq!(sent[0].1.len(), 2, "the first lease of b takes a's pending renewal along");
        p.push(lease("p1", "a", 3));
        p.push(lease("p1", "b", 2));
        assert!(p.take_due(1_400 * MS, true).is_empty(), "gap measured from the last message");
        let sent = p.take_due(1_500 * MS, true);
        assert_eq!(sent.len(), 1);
        let mut newest: Vec<(&str, u64)> = sent[0].1.iter().map(|l| (l.limit.as_str(), l.version.seq)).collect();
        newest.sort();
        assert_eq!(newest, vec![("a", 3), ("b", 2)], "each limit's newest lease, in no particular order");
    }

    /// A tick clears the pods' touched marks with the list: a pod that had a paced renewal
    /// waiting at a tick is looked at again by the next event that gives it a first lease.
    /// (Found by a review: nothing failed with the tick's reset removed.)
    #[test]
    fn after_a_tick_a_new_first_lease_is_still_sent_at_the_next_event() {
        let mut p = LeasePacing::new(1_000, 250);
        p.push(lease("p1", "a", 1));
        assert_eq!(p.take_due(0, false).len(), 1, "a first lease goes at once");
        p.push(lease("p1", "a", 2));
        assert!(p.take_due(250 * MS, true).is_empty(), "a renewal waits for the gap, past this tick");
        p.push(lease("p1", "b", 1));
        let sent = p.take_due(260 * MS, false);
        assert_eq!(sent.len(), 1, "b's first lease goes at once, with a's renewal");
        assert_eq!(sent[0].1.len(), 2);
    }

    #[test]
    fn many_limits_renewed_at_every_event_make_one_message_per_renew_interval() {
        let mut p = LeasePacing::new(1_000, 250);
        for limit in 0..100 {
            p.push(lease("p1", &format!("l{limit}"), 1));
        }
        let mut messages = p.take_due(0, true).len();
        let mut version = 1;
        // 10 s: every 10 ms some limit renews; a tick every 250 ms.
        for t_ms in (10..10_000).step_by(10) {
            version += 1;
            p.push(lease("p1", &format!("l{}", version % 100), version));
            messages += p.take_due(t_ms * MS, t_ms % 250 == 0).len();
        }
        assert_eq!(messages, 10, "one lease message per pod per renew interval, over 10 s");
    }

    #[test]
    fn a_holder_whose_lease_ran_out_is_served_at_once_and_departed_pods_are_forgotten() {
        let mut p = LeasePacing::new(1_000, 250);
        p.push(lease("p1", "a", 1));
        assert_eq!(p.take_due(0, false).len(), 1);
        p.push(lease("p1", "a", 2));
        assert!(p.take_due(4_000 * MS, false).is_empty(), "still in force: waits for a tick");
        p.push(lease("p1", "a", 3));
        let sent = p.take_due(5_000 * MS, false);
        assert_eq!(sent[0].1[0].version.seq, 3, "ran out: the newest, at once");
        assert!(p.take_due(10_001 * MS, true).is_empty());
        assert!(p.pods.is_empty(), "nothing pending, nothing in force: forgotten");
    }

    #[test]
    fn a_pod_that_reports_fast_never_waits_past_its_report_history() {
        // Found by review: a pod reporting every 10 ms keeps 640 ms of report history; a lease
        // held for the whole gap answered a report it no longer knew, was refused, and the
        // pacing counted it in force: the pod starved.
        let mut p = LeasePacing::new(1_000, 250);
        p.push(lease("p1", "a", 1));
        assert_eq!(p.take_due(0, false).len(), 1);
        p.note_report_interval("p1", 10);
        p.push(lease("p1", "a", 2));
        assert!(p.take_due(100 * MS, false).is_empty(), "pending since 100 ms");
        assert!(p.take_due(250 * MS, true).is_empty(), "held 150 ms: under 16 report periods");
        assert_eq!(p.take_due(500 * MS, true).len(), 1, "held 400 ms ≥ 160 ms: sent at the tick");
    }

    #[test]
    fn a_newer_lease_replaces_an_older_pending_one() {
        let mut p = LeasePacing::new(1_000, 250);
        p.push(lease("p1", "a", 2));
        p.push(lease("p1", "a", 1));
        let sent = p.take_due(0, false);
        assert_eq!(sent[0].1.len(), 1);
        assert_eq!(sent[0].1[0].version.seq, 2);
        assert!(p.is_empty());
    }
}
