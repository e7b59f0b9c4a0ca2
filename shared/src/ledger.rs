//! The conservation ledger: every lease a holder may still be using, until it is confirmed
//! superseded, returned, or expired.
//!
//! **Accounting rule.** A holder uses at most one lease at a time: the newest it has applied
//! (holders refuse older versions). So a holder's claim on the limit is the component-wise
//! maximum over its live leases, and the ledger's total is the sum of those maxima. A new grant to
//! holder `h` must satisfy `Σ_{others}(t) + max(h's live leases at t, new) ≤ capacity` at every
//! instant `t` of the new lease's life where it raises `h`'s claim (see [`Ledger::grantable`]),
//! which keeps `Σ rate ≤ R` and `Σ burst ≤ B` at every instant even while old and new leases
//! overlap, and even when the capacity shrank under leases cut from the larger one.
//!
//! Older leases leave the ledger when the holder reports a newer version *in use* (it can never
//! go back), when it returns everything (drain), or when they expire on the issuer's clock
//! ([`ExpiryPolicy::issuer_live_until_ns`](crate::expiry::ExpiryPolicy::issuer_live_until_ns)).
//! Grants carry the issuer's epoch; anything from a lower epoch is refused.

use crate::quota::Quota;
use crate::wire::LeaseVersion;
use std::collections::BTreeMap;
use thiserror::Error;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseEntry {
    pub version: LeaseVersion,
    pub quota: Quota,
    /// Issuer clock: until when the holder may still be using it.
    pub live_until_ns: u64,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LedgerError {
    #[error("epoch {got} is not the ledger's epoch {current}")]
    WrongEpoch { got: u64, current: u64 },
    #[error("version {got} is not above the holder's last version {last}")]
    VersionNotIncreasing { got: LeaseVersion, last: LeaseVersion },
    #[error("grant {wanted} exceeds the headroom {headroom}")]
    ExceedsHeadroom { wanted: Quota, headroom: Quota },
    #[error("holder returned its lease for good")]
    HolderClosed,
    #[error("no lease with version {0} is outstanding")]
    UnknownVersion(LeaseVersion),
}

#[derive(Clone, Debug, Default)]
struct HolderLeases {
    entries: Vec<LeaseEntry>,
    last_version: Option<LeaseVersion>,
    closed_until_ns: Option<u64>,
}

impl HolderLeases {
    fn claim(&self, now_ns: u64) -> Quota {
        self.entries.iter().filter(|e| e.live_until_ns > now_ns).fold(Quota::ZERO, |m, e| m.max(e.quota))
    }
}

#[derive(Clone, Debug)]
pub struct Ledger<H: Ord + Clone> {
    capacity: Quota,
    epoch: u64,
    holders: BTreeMap<H, HolderLeases>,
    /// Extra capacity until an instant (`until_ns`, capacity then): leases cut from a larger,
    /// older parent lease that the parent's issuer still counts until then.
    covers: Vec<(u64, Quota)>,
    known_bug_grant_checked_only_now: bool,
}

impl<H: Ord + Clone> Ledger<H> {
    pub fn new(capacity: Quota, epoch: u64) -> Self {
        Ledger {
            capacity,
            epoch,
            holders: BTreeMap::new(),
            covers: Vec::new(),
            known_bug_grant_checked_only_now: false,
        }
    }

    pub fn capacity(&self) -> Quota {
        self.capacity
    }

    /// Change what the ledger may hand out (a DC manager's budget moves with its DC lease).
    /// Leases already out stay counted; a shrink only blocks growth until they drain.
    pub fn set_capacity(&mut self, capacity: Quota) {
        self.capacity = capacity;
        self.covers.clear();
    }

    /// `capacity` from now on, and at least each cover's capacity until its instant: an issuer
    /// whose own parent lease shrank, while its parent's issuer still counts the older, larger
    /// one (until it ends or is confirmed superseded).
    pub fn set_capacity_profile(&mut self, capacity: Quota, covers: Vec<(u64, Quota)>) {
        self.capacity = capacity;
        self.covers = covers;
    }

    /// The capacity at `t_ns`.
    pub fn capacity_at(&self, t_ns: u64) -> Quota {
        self.covers.iter().filter(|(until, _)| *until > t_ns).fold(self.capacity, |m, (_, q)| m.max(*q))
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Move to a higher epoch (leader change). Outstanding leases keep counting.
    pub fn advance_epoch(&mut self, epoch: u64) -> Result<(), LedgerError> {
        if epoch < self.epoch {
            return Err(LedgerError::WrongEpoch { got: epoch, current: self.epoch });
        }
        self.epoch = epoch;
        Ok(())
    }

    /// Σ over holders of each holder's largest live lease.
    pub fn outstanding(&self, now_ns: u64) -> Quota {
        self.holders.values().fold(Quota::ZERO, |s, h| s.saturating_add(h.claim(now_ns)))
    }

    pub fn holder_claim(&self, holder: &H, now_ns: u64) -> Quota {
        self.holders.get(holder).map(|h| h.claim(now_ns)).unwrap_or_default()
    }

    /// The most `holder` may be granted now: capacity minus everyone else's claims.
    pub fn headroom_for(&self, holder: &H, now_ns: u64) -> Quota {
        let others = self
            .holders
            .iter()
            .filter(|(k, _)| *k != holder)
            .fold(Quota::ZERO, |s, (_, h)| s.saturating_add(h.claim(now_ns)));
        self.capacity.saturating_sub(others)
    }

    /// The most an issuer may grant `holder` towards `target`, as a lease it will count until
    /// `live_until_ns`. At every instant of that life the grant must either stay within the
    /// holder's own claim at that instant (a shrink or a plain renewal) or fit beside everyone
    /// else's claims then. A claim licenses a grant only while it lasts: a lease cut under a
    /// larger, older capacity ends with it and cannot vouch for a longer one.
    pub fn grantable(&self, holder: &H, target: Quota, live_until_ns: u64, now_ns: u64) -> Quota {
        target.min(self.allowed(holder, live_until_ns, now_ns))
    }

    fn allowed(&self, holder: &H, live_until_ns: u64, now_ns: u64) -> Quota {
        // The negative control checks the grant at `now` only (the old rule).
        let until = if self.known_bug_grant_checked_only_now { now_ns + 1 } else { live_until_ns };
        Quota::new(
            self.most_allowed(holder, |q| q.rate_milli_per_s, until, now_ns),
            self.most_allowed(holder, |q| q.burst_milli, until, now_ns),
        )
    }

    /// One component of [`allowed`](Self::allowed). A level `q` is fine iff, from the instant the
    /// holder's own claim falls below `q` (if before `until`), the room left by the others'
    /// claims stays at least `q`. Others' claims only fall over time, so within a stretch of
    /// constant capacity the room only grows: the binding instants are that first one and each
    /// later drop of capacity. The fine levels are `0..=q*`, and `q*` is among the candidates.
    fn most_allowed(&self, holder: &H, get: impl Fn(&Quota) -> u64, until: u64, now: u64) -> u64 {
        let own: &[LeaseEntry] = self.holders.get(holder).map_or(&[], |h| h.entries.as_slice());
        let own: Vec<&LeaseEntry> = own.iter().filter(|e| e.live_until_ns > now).collect();
        let covered_until =
            |q: u64| own.iter().filter(|e| get(&e.quota) >= q).map(|e| e.live_until_ns).max().unwrap_or(now).max(now);
        let room_at = |t: u64| {
            let others = self
                .holders
                .iter()
                .filter(|(k, _)| *k != holder)
                .fold(0u64, |s, (_, h)| s.saturating_add(get(&h.claim(t))));
            get(&self.capacity_at(t)).saturating_sub(others)
        };
        let drops: Vec<u64> = self.covers.iter().map(|(t, _)| *t).filter(|&t| t > now && t < until).collect();
        let fine = |q: u64| {
            let from = covered_until(q);
            from >= until || (q <= room_at(from) && drops.iter().filter(|&&t| t > from).all(|&t| q <= room_at(t)))
        };
        let mut candidates = vec![room_at(now)];
        for e in &own {
            candidates.push(get(&e.quota));
            candidates.push(room_at(e.live_until_ns));
        }
        candidates.extend(drops.iter().map(|&t| room_at(t)));
        candidates.into_iter().filter(|&q| fine(q)).max().unwrap_or(0)
    }

    /// Negative control only (see [`crate::bugs`]): check grants at the instant of granting.
    pub fn set_known_bug_grant_checked_only_now(&mut self, on: bool) {
        self.known_bug_grant_checked_only_now = on;
    }

    /// `holder` is below `target` in some component and the headroom would let it rise there.
    pub fn can_grow(&self, holder: &H, target: Quota, now_ns: u64) -> bool {
        let claim = self.holder_claim(holder, now_ns);
        let room = self.headroom_for(holder, now_ns);
        (target.rate_milli_per_s > claim.rate_milli_per_s && room.rate_milli_per_s > claim.rate_milli_per_s)
            || (target.burst_milli > claim.burst_milli && room.burst_milli > claim.burst_milli)
    }

    /// Record a new lease for `holder`. Fails (and changes nothing) if it would raise the total
    /// above capacity in either component, or if its version/epoch is stale.
    pub fn grant(
        &mut self,
        holder: &H,
        quota: Quota,
        version: LeaseVersion,
        live_until_ns: u64,
        now_ns: u64,
    ) -> Result<(), LedgerError> {
        if version.epoch != self.epoch {
            return Err(LedgerError::WrongEpoch { got: version.epoch, current: self.epoch });
        }
        let state = self.holders.get(holder);
        if let Some(h) = state {
            if h.closed_until_ns.is_some() {
                return Err(LedgerError::HolderClosed);
            }
            if let Some(last) = h.last_version {
                if version <= last {
                    return Err(LedgerError::VersionNotIncreasing { got: version, last });
                }
            }
        }
        let allowed = self.allowed(holder, live_until_ns, now_ns);
        if !quota.fits_in(&allowed) {
            return Err(LedgerError::ExceedsHeadroom { wanted: quota, headroom: allowed });
        }
        let h = self.holders.entry(holder.clone()).or_default();
        h.entries.push(LeaseEntry { version, quota, live_until_ns });
        h.last_version = Some(version);
        Ok(())
    }

    /// Re-enter a lease found in durable state (leader takeover). It is counted whatever the
    /// headroom: it exists, so it must be counted.
    pub fn adopt(&mut self, holder: &H, entry: LeaseEntry) {
        let h = self.holders.entry(holder.clone()).or_default();
        h.last_version = Some(h.last_version.map_or(entry.version, |v| v.max(entry.version)));
        h.entries.push(entry);
    }

    /// The holder applied `version`: it will never use an older lease again. Older leases stop
    /// counting at `release_at_ns` (now, plus the egress spread). Idempotent.
    /// Refused for a version this ledger never issued to that holder.
    pub fn confirm_in_use(
        &mut self,
        holder: &H,
        version: LeaseVersion,
        release_at_ns: u64,
    ) -> Result<bool, LedgerError> {
        let h = self.holders.get_mut(holder).ok_or(LedgerError::UnknownVersion(version))?;
        if !h.entries.iter().any(|e| e.version == version) {
            // Either already superseded (a late duplicate ack) or never issued.
            return if h.entries.iter().all(|e| e.version > version) {
                Ok(false)
            } else {
                Err(LedgerError::UnknownVersion(version))
            };
        }
        let mut changed = false;
        for e in h.entries.iter_mut().filter(|e| e.version < version && e.live_until_ns > release_at_ns) {
            e.live_until_ns = release_at_ns;
            changed = true;
        }
        Ok(changed)
    }

    /// The holder returned everything and will apply nothing more (graceful drain). Its leases
    /// stop counting at `release_at_ns`. Idempotent. `forget_after_ns` bounds how long the closed
    /// marker is kept.
    pub fn close(&mut self, holder: &H, release_at_ns: u64, forget_after_ns: u64) -> bool {
        let h = self.holders.entry(holder.clone()).or_default();
        let mut had = false;
        for e in h.entries.iter_mut().filter(|e| e.live_until_ns > release_at_ns) {
            e.live_until_ns = release_at_ns;
            had = true;
        }
        h.closed_until_ns = Some(h.closed_until_ns.map_or(forget_after_ns, |t| t.max(forget_after_ns)));
        had
    }

    pub fn is_closed(&self, holder: &H) -> bool {
        self.holders.get(holder).is_some_and(|h| h.closed_until_ns.is_some())
    }

    /// Forget leases that have expired on the issuer's clock, and stale closed markers.
    pub fn expire(&mut self, now_ns: u64) {
        self.holders.retain(|_, h| {
            h.entries.retain(|e| e.live_until_ns > now_ns);
            match h.closed_until_ns {
                Some(t) => t > now_ns,
                None => !h.entries.is_empty(),
            }
        });
    }

    /// Every outstanding lease, for durable snapshots and inspection.
    pub fn entries(&self) -> impl Iterator<Item = (&H, &LeaseEntry)> {
        self.holders.iter().flat_map(|(k, h)| h.entries.iter().map(move |e| (k, e)))
    }

    pub fn holders(&self) -> impl Iterator<Item = &H> {
        self.holders.keys()
    }

    /// The conservation invariant at `now_ns` (fixed-capacity issuers).
    pub fn check(&self, now_ns: u64) -> Result<(), String> {
        let out = self.outstanding(now_ns);
        let capacity = self.capacity_at(now_ns);
        if out.fits_in(&capacity) {
            Ok(())
        } else {
            Err(format!("outstanding {out} exceeds capacity {capacity}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const E: u64 = 1;

    fn v(seq: u64) -> LeaseVersion {
        LeaseVersion::new(E, seq)
    }

    #[test]
    fn overlapping_old_and_new_leases_count_once_per_holder_as_the_max() {
        let mut l = Ledger::new(Quota::per_s(1000, 100), E);
        l.grant(&"bkk", Quota::per_s(800, 80), v(1), 100, 0).unwrap();
        l.grant(&"eu", Quota::per_s(200, 20), v(2), 100, 0).unwrap();
        // BKK shrinks to 300: allowed, but its 800 still counts until confirmed.
        l.grant(&"bkk", Quota::per_s(300, 30), v(3), 200, 0).unwrap();
        assert_eq!(l.outstanding(0), Quota::per_s(1000, 100));
        let err = l.grant(&"eu", Quota::per_s(700, 70), v(4), 200, 0).unwrap_err();
        assert!(matches!(err, LedgerError::ExceedsHeadroom { .. }));
        // BKK confirms v3 in use: the 800 lease is gone, EU can grow.
        assert!(l.confirm_in_use(&"bkk", v(3), 0).unwrap());
        assert!(!l.confirm_in_use(&"bkk", v(3), 0).unwrap(), "idempotent");
        l.grant(&"eu", Quota::per_s(700, 70), v(5), 200, 0).unwrap();
        assert_eq!(l.outstanding(0), Quota::per_s(1000, 100));
    }

    #[test]
    fn crashed_holders_share_is_reused_only_after_expiry() {
        let mut l = Ledger::new(Quota::per_s(100, 10), E);
        l.grant(&"p1", Quota::per_s(100, 10), v(1), 5_000, 0).unwrap();
        assert!(l.grant(&"p2", Quota::per_s(1, 0), v(2), 9_000, 4_999).is_err());
        l.expire(5_000);
        l.grant(&"p2", Quota::per_s(100, 10), v(3), 9_000, 5_000).unwrap();
    }

    #[test]
    fn return_is_idempotent_and_frees_at_once() {
        let mut l = Ledger::new(Quota::per_s(100, 10), E);
        l.grant(&"p1", Quota::per_s(100, 10), v(1), 5_000, 0).unwrap();
        assert!(l.close(&"p1", 0, 9_000));
        assert!(!l.close(&"p1", 0, 9_000));
        assert_eq!(l.grant(&"p1", Quota::per_s(1, 1), v(2), 5_000, 0), Err(LedgerError::HolderClosed));
        l.grant(&"p2", Quota::per_s(100, 10), v(3), 5_000, 0).unwrap();
    }

    #[test]
    fn stale_epochs_and_versions_are_refused() {
        let mut l = Ledger::new(Quota::per_s(100, 10), 2);
        assert!(matches!(
            l.grant(&"a", Quota::ZERO, LeaseVersion::new(1, 9), 5, 0),
            Err(LedgerError::WrongEpoch { .. })
        ));
        l.grant(&"a", Quota::ZERO, LeaseVersion::new(2, 5), 5, 0).unwrap();
        assert!(matches!(
            l.grant(&"a", Quota::ZERO, LeaseVersion::new(2, 5), 5, 0),
            Err(LedgerError::VersionNotIncreasing { .. })
        ));
        assert!(l.advance_epoch(1).is_err());
        assert_eq!(
            l.confirm_in_use(&"a", LeaseVersion::new(2, 99), 0),
            Err(LedgerError::UnknownVersion(LeaseVersion::new(2, 99)))
        );
    }

    #[test]
    fn released_leases_keep_counting_for_the_egress_spread() {
        let mut l = Ledger::new(Quota::per_s(100, 10), E);
        l.grant(&"a", Quota::per_s(100, 10), v(1), 10_000, 0).unwrap();
        l.grant(&"a", Quota::per_s(10, 1), v(2), 10_000, 0).unwrap();
        l.confirm_in_use(&"a", v(2), 150).unwrap();
        assert_eq!(l.holder_claim(&"a", 149), Quota::per_s(100, 10));
        assert_eq!(l.holder_claim(&"a", 150), Quota::per_s(10, 1));
        l.close(&"a", 300, 1_000);
        assert_eq!(l.outstanding(299), Quota::per_s(10, 1));
        assert_eq!(l.outstanding(300), Quota::ZERO);
    }

    #[test]
    fn adopted_leases_count_even_over_capacity() {
        let mut l: Ledger<&str> = Ledger::new(Quota::per_s(100, 10), 3);
        l.adopt(&"a", LeaseEntry { version: LeaseVersion::new(2, 1), quota: Quota::per_s(100, 10), live_until_ns: 50 });
        assert_eq!(l.headroom_for(&"b", 0), Quota::ZERO);
        assert!(
            l.grant(&"a", Quota::per_s(100, 10), LeaseVersion::new(3, 1), 60, 0).is_ok(),
            "renewing the same amount is no increase"
        );
    }

    #[test]
    fn a_claim_licenses_a_grant_only_while_it_lasts() {
        // Capacity shrank from 1000 to 200; a (800) and b (200) hold leases cut from the 1000.
        let mut l = Ledger::new(Quota::per_s(1000, 0), E);
        l.grant(&"a", Quota::per_s(800, 0), v(1), 100, 0).unwrap();
        l.grant(&"b", Quota::per_s(200, 0), v(2), 50, 0).unwrap();
        l.set_capacity(Quota::per_s(200, 0));
        // b may renew its 200 only up to when its claim ends (50): beyond, a's 800 is still there.
        assert_eq!(l.grantable(&"b", Quota::per_s(200, 0), 50, 10).rate_milli_per_s, 200_000);
        assert_eq!(l.grantable(&"b", Quota::per_s(200, 0), 150, 10).rate_milli_per_s, 0);
        assert!(l.grant(&"b", Quota::per_s(100, 0), v(3), 150, 10).is_err());
        // With the old, larger capacity still counted until 120 (the parent's older lease), b's
        // claim carries it past 50; from 120 on, only the 200 is there and a's claim has ended.
        l.set_capacity_profile(Quota::per_s(200, 0), vec![(120, Quota::per_s(1000, 0))]);
        assert_eq!(l.grantable(&"b", Quota::per_s(200, 0), 150, 10).rate_milli_per_s, 200_000);
        // But not if a's claim outlived the cover.
        l.grant(&"a", Quota::per_s(100, 0), v(4), 200, 10).unwrap();
        assert_eq!(l.grantable(&"b", Quota::per_s(200, 0), 150, 10).rate_milli_per_s, 100_000);
        assert_eq!(l.check(10), Ok(()));
    }
}
