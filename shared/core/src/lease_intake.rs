//! What a lease *holder* (pod, or DC manager towards the coordinator) keeps to apply leases safely:
//! when it sent each report (its countdown starts there) and the newest version it accepted.

use crate::wire::LeaseVersion;
use thiserror::Error;

/// Why a holder ignored a lease message. Every rejection is counted by the drivers.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum LeaseRejection {
    /// The lease names another holder, limit or DC.
    #[error("addressed to another holder, limit or DC")]
    NotMine,
    #[error("epoch {got} is below the highest seen {seen}")]
    /// The lease's epoch is below the highest seen.
    StaleEpoch {
        /// The lease's epoch.
        got: u64,
        /// The highest epoch seen.
        seen: u64,
    },
    #[error("version {got} is not newer than {current}")]
    /// The lease's version is not newer than the current one.
    NotNewer {
        /// The lease's version.
        got: LeaseVersion,
        /// The current version.
        current: LeaseVersion,
    },
    /// The lease answers a report (by sequence number) this holder did not send recently.
    #[error("answers report {0}, which this holder did not send recently")]
    UnknownBasis(u64),
    /// The lease had already expired when it arrived.
    #[error("already expired on arrival")]
    AlreadyExpired,
    /// The holder is draining and applies no more leases.
    #[error("holder is draining and applies no more leases")]
    Draining,
    /// A continuation of a lease the holder no longer uses (or never confirms leases).
    #[error("continues lease {0}, which is not the lease in use")]
    NotContinued(LeaseVersion),
    /// The bucket refused the lease's parameters (its reason).
    #[error("lease parameters rejected by the bucket: {0}")]
    Unusable(String),
}

/// Ring of recent report send times, by sequence number.
#[derive(Clone, Debug)]
pub struct SentLog {
    times_ns: [u64; Self::LEN],
    seqs: [u64; Self::LEN],
    next_seq: u64,
}

impl SentLog {
    /// How many sends the ring keeps.
    pub const LEN: usize = 64;

    /// `first_seq` lets a restarted holder avoid reusing sequence numbers it may have sent.
    pub fn new(first_seq: u64) -> Self {
        SentLog { times_ns: [0; Self::LEN], seqs: [u64::MAX; Self::LEN], next_seq: first_seq.max(1) }
    }

    /// Record a send at `now_ns` and return its sequence number.
    pub fn record(&mut self, now_ns: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let i = (seq % Self::LEN as u64) as usize;
        self.seqs[i] = seq;
        self.times_ns[i] = now_ns;
        seq
    }

    /// When report `seq` was sent, in nanoseconds on the holder's clock, if it is still in the
    /// ring.
    pub fn sent_at(&self, seq: u64) -> Option<u64> {
        let i = (seq % Self::LEN as u64) as usize;
        (self.seqs[i] == seq).then_some(self.times_ns[i])
    }

    /// The last sequence number recorded (one below the first before any send).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }
}

/// Versions and epochs only move forward.
#[derive(Clone, Debug, Default)]
pub struct LeaseFence {
    highest_epoch: u64,
    current: Option<LeaseVersion>,
}

impl LeaseFence {
    /// Whether lease version `v` passes the fence: its epoch not below the highest seen, and newer
    /// than the current.
    pub fn check(&self, v: LeaseVersion) -> Result<(), LeaseRejection> {
        if v.epoch < self.highest_epoch {
            return Err(LeaseRejection::StaleEpoch { got: v.epoch, seen: self.highest_epoch });
        }
        match self.current {
            Some(cur) if v <= cur => Err(LeaseRejection::NotNewer { got: v, current: cur }),
            _ => Ok(()),
        }
    }

    /// Takes version `v`: raises the highest epoch seen and the current version.
    pub fn accept(&mut self, v: LeaseVersion) {
        self.highest_epoch = self.highest_epoch.max(v.epoch);
        self.current = Some(self.current.map_or(v, |c| c.max(v)));
    }

    /// The newest version accepted.
    pub fn current(&self) -> Option<LeaseVersion> {
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sent_log_forgets_old_sequences() {
        let mut s = SentLog::new(1);
        let first = s.record(10);
        assert_eq!(s.sent_at(first), Some(10));
        for t in 0..SentLog::LEN as u64 {
            s.record(100 + t);
        }
        assert_eq!(s.sent_at(first), None);
        assert_eq!(s.sent_at(999), None);
    }

    #[test]
    fn fence_refuses_replays_and_old_epochs() {
        let mut f = LeaseFence::default();
        f.accept(LeaseVersion::new(2, 5));
        assert!(f.check(LeaseVersion::new(2, 5)).is_err());
        assert!(f.check(LeaseVersion::new(1, 99)).is_err());
        assert!(f.check(LeaseVersion::new(3, 1)).is_ok());
    }
}
