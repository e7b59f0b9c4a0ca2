//! What became of a leader's compare-and-set of a ledger group, sans I/O: judged from the
//! write's answer and, when that was not definite, from a read of the group.
//!
//! A write whose answer was lost (a timeout, every NATS server restarting) may land at any later
//! time while the group still has the revision it expected: NATS clients resend what they
//! buffered once they reconnect. So an unknown outcome with the group unreadable, or unchanged,
//! is **unresolved**, not a sign of another leader: the term goes on and counts the write's
//! records as stored (they may be: a limit is left out of its group only if no record of it can
//! exist anywhere), and the next write tells. A conflict with a group this term wrote
//! (every record of it carries this term's epoch and writer: epochs are unique to a term) is the
//! term's own earlier write landing late: the term **adopts** that revision and writes again,
//! but only while the ledger fence (read after the group) still names this term. A store that
//! lost its tail may have gone back to an older record of this term *after* a newer term wrote:
//! the group then looks like this term's late write, and adopting it would let a deposed term
//! write an epoch below the newest on books that miss the newer term's leases (storm seeds 201
//! and 739). Only a group written by someone else ends the term.
//!
//! Why adopting is safe: the late write was built after every write of the term that had landed
//! before it, from the same books, so it names every lease those did (less expired ones); and a
//! DC lease counts down from the send of the report it answers, not from when it was read, so a
//! record stored late stretches nothing. The books of the term count every lease of every write,
//! landed or not.

use crate::wire::{decode, LedgerGroup};

/// The answer to the compare-and-set itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupWriteAnswer {
    /// The write landed.
    Written {
        /// The group's revision it produced.
        revision: u64,
    },
    /// The expected revision did not match.
    Conflict,
    /// No answer (or an error): it may land later.
    Unknown,
}

/// The group as read after a write that was not answered `Written`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupReadBack<'a> {
    /// The read failed too.
    Unreadable,
    /// The group has no value.
    Absent,
    /// The group as stored.
    Stored {
        /// Its revision.
        revision: u64,
        /// Its value.
        bytes: &'a [u8],
    },
}

/// What the leader does about the group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupWrite {
    /// This write is stored at `revision`.
    Landed {
        /// The group's revision.
        revision: u64,
    },
    /// An earlier write of this term is stored at `revision` (not this one): write on it next.
    Adopted {
        /// The group's revision.
        revision: u64,
    },
    /// Not known yet: keep the expected revision, and count the write's records as stored (the
    /// write may land later).
    Unresolved,
    /// Someone else wrote the group (or it was lost under the term): the term ends.
    Lost,
}

/// The write of `ours` on `expected` (None: a create), by the term of `epoch` led by `writer`.
/// `read_back` is only consulted when `answer` is not `Written`; `fence_epoch`, the epoch the
/// ledger fence names as read after the group (None: unreadable), before going on at a revision
/// read back (the same bytes as `ours` may be an older identical record the store went back to).
pub fn judge_group_write(
    answer: GroupWriteAnswer,
    expected: Option<u64>,
    ours: &[u8],
    read_back: GroupReadBack<'_>,
    epoch: u64,
    writer: &str,
    fence_epoch: Option<u64>,
) -> GroupWrite {
    if let GroupWriteAnswer::Written { revision } = answer {
        return GroupWrite::Landed { revision };
    }
    // No newer term has begun: a group of this term read back is this term's own write.
    let fenced = fence_epoch.is_some_and(|f| f <= epoch);
    match read_back {
        GroupReadBack::Unreadable => GroupWrite::Unresolved,
        // Not created yet (or the read lags behind a create it conflicted with): it may land.
        GroupReadBack::Absent if expected.is_none() => GroupWrite::Unresolved,
        // A group this term wrote or read at its takeover is gone: lost under the term.
        GroupReadBack::Absent => GroupWrite::Lost,
        GroupReadBack::Stored { revision, bytes } if bytes == ours && fenced => GroupWrite::Landed { revision },
        // As expected: the write has not landed and may still (or the read lags behind what the
        // write met). The next write tells.
        GroupReadBack::Stored { revision, .. } if Some(revision) == expected => GroupWrite::Unresolved,
        // Newer, and this term's: one of its earlier writes landed late, unless a newer term has
        // raised the fence since (the bucket lost its tail back to this term's older record).
        GroupReadBack::Stored { revision, bytes }
            if expected.is_none_or(|e| revision > e) && written_by(bytes, epoch, writer) && fenced =>
        {
            GroupWrite::Adopted { revision }
        }
        // Someone else's, older than the term last wrote (the bucket lost its tail), or this
        // term's while the fence names a newer term (or cannot be read).
        GroupReadBack::Stored { .. } => GroupWrite::Lost,
    }
}

/// Every record of the stored group was written by this term (and it has at least one).
fn written_by(bytes: &[u8], epoch: u64, writer: &str) -> bool {
    decode::<LedgerGroup>(bytes)
        .is_ok_and(|g| !g.records.is_empty() && g.records.iter().all(|r| r.epoch == epoch && r.writer == writer))
}

#[cfg(test)]
mod tests;
