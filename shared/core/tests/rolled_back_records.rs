//! A ledger record of a term below the fence's is never trusted as the newest, and a term adopts
//! a group read back at a newer revision as its own late write only while the fence still names
//! it: a single-replica ledger bucket may lose its tail back to an earlier term's record
//! (docs/FINDINGS.md#f26, docs/FINDINGS.md#f50). A rollback within the fence's own term is not
//! detectable and is an assumption in docs/ARCHITECTURE.md (docs/FINDINGS.md#f28).
//!
//! Numbers are in whole requests per second (rate) and tokens (burst); times are explicit
//! `now_ns` values on one clock (no skew). The ground truth is what the real pods may spend.

use leasehold_core::bugs::KnownBugs;
use leasehold_core::coordinator::{
    judge_group_write, CoordinatorCore, GroupReadBack, GroupWrite, GroupWriteAnswer, Stored,
};
use leasehold_core::quota::Quota;
use leasehold_core::subjects::ledger_group_of;
use leasehold_core::wire::{encode, LedgerFence, LedgerGroup, LedgerRecord};

use crate::support;
use support::world::{print_run, sample, step_two_dcs, Dc};
use support::{config, config_with_bugs, secs, MS, S};

// -------------------------------------------------------------------------------------------
// A record rolled back behind the fence is trusted as the newest: the leases of the term
// whose writes were lost go uncounted
// -------------------------------------------------------------------------------------------

/// The lost-record rule covers a single-replica ledger bucket that loses the record outright
/// (`Stored::Lost`). The same fault (a single-replica file store acks writes before they reach
/// the disk and the machine dies, or the stream is restored from a snapshot) can just as well
/// lose only the *tail* of the stream: the key is still there, at an older revision. This is
/// outside "KV writes are linearizable compare-and-set", exactly as a lost record is; the design
/// chose to survive the latter. `Stored::classify` looks only at whether a record exists, never
/// at its epoch against the fence's, so an older record is trusted as the whole truth.
///
/// R = 1,000/s, B = 20, no floors. Term 1 (epoch 1) gives BKK (busy; Europe idle) the whole
/// limit: its record at 6 s (`rec1`) names BKK's ~1,000/s DC lease. Term 2 (epoch 2) takes over
/// from it at 6 s and raises the fence to epoch 2; demand moves to Europe, BKK acks smaller
/// leases and Europe's DC lease grows to ~1,000/s (term 2's records name it). At 22 s the ledger
/// stream loses its tail: the key is back at `rec1` (epoch 1, below the fence's epoch 2), and
/// Europe is cut off from the coordinator from then on (its manager keeps spending term 2's DC
/// lease until it ends, ~31 s, as it may). Term 3 takes over: `Stored::classify(Some(rec1),
/// fence)` is `Stored::Record`, so it adopts term 1's BKK lease (claim ~1,000/s, which lets it
/// grant BKK up to that at once: "a renewal") and knows nothing of Europe's. BKK is busy again:
/// its pods get ~1,000/s while Europe's still hold ~1,000/s: ~2,000/s against 1,000/s.
///
/// At fault: `Stored::classify` / `CoordinatorCore::resume` (coordinator/mod.rs): a record whose
/// epoch is below the fence's may be behind records the fence's term wrote and lost.
#[test]
fn a_record_rolled_back_behind_the_fence_is_not_trusted_as_the_newest() {
    let (worst, q) = rolled_back_record(KnownBugs::default());
    assert!(worst.fits_in(&q), "BKK's and Europe's pods held {worst} > {q}");
}

/// Negative control: trusting the older record breaks the limit on this path.
#[test]
fn a_record_rolled_back_behind_the_fence_breaks_the_limit_when_trusted() {
    let (worst, q) = rolled_back_record(KnownBugs { record_behind_fence_trusted: true, ..KnownBugs::default() });
    assert!(!worst.fits_in(&q), "held at most {worst}");
}

/// Runs the scenario above with `bugs`. Returns the most the pods ever held, and the limit.
fn rolled_back_record(bugs: KnownBugs) -> (Quota, Quota) {
    let q = Quota::per_s(1_000, 20);
    let cfg = || config_with_bugs(q, 0, 0, bugs);
    let mut log = Vec::new();
    let mut coord = CoordinatorCore::new(cfg(), "coord1", 1);
    let mut fence = LedgerFence::raised(None, 1, 10_000);
    if let Some(f) = fence.covering(&coord.record()) {
        fence = f;
    }
    let mut bkk = Dc::with_bugs("bkk", "bkk-mgr-a", 1, 0, bugs);
    let mut eu = Dc::with_bugs("eu", "eu-mgr-a", 1, 0, bugs);
    eu.offer(0);
    bkk.on_record(&coord, 0);
    eu.on_record(&coord, 0);
    let (takeover, rollback, end) = (6 * S, 22 * S, 36 * S);
    let mut rec1 = None;
    let (mut t, mut worst) = (0u64, Quota::ZERO);
    while t < end {
        if t == takeover {
            let r1 = coord.record();
            log.push(format!(
                "{:6.3}s term 1's record (epoch {}) names {:?}",
                secs(t),
                r1.epoch,
                r1.leases.iter().map(|l| format!("{} {} {}", l.dc, l.version, l.quota)).collect::<Vec<_>>()
            ));
            coord = CoordinatorCore::resume(cfg(), "coord2", 2, Stored::Record(&r1), t);
            fence = LedgerFence::raised(Some(&fence), 2, 10_000);
            rec1 = Some(r1);
            bkk.offer(0);
            eu.offer(2_000);
            log.push(format!(
                "{:6.3}s term 2 (epoch 2) takes over; fence epoch {}; demand moves to europe",
                secs(t),
                fence.epoch
            ));
        }
        if t == rollback {
            let r2 = coord.record();
            log.push(format!(
                "{:6.3}s term 2's last record (epoch {}) names {:?}; the stream loses its tail",
                secs(t),
                r2.epoch,
                r2.leases.iter().map(|l| format!("{} {} {}", l.dc, l.version, l.quota)).collect::<Vec<_>>()
            ));
            let r1 = rec1.as_ref().expect("written before");
            log.push(format!(
                "{:6.3}s the key is back at a record of epoch {} (fence epoch {}) naming {:?}",
                secs(t),
                r1.epoch,
                fence.epoch,
                r1.leases.iter().map(|l| format!("{} {} {}", l.dc, l.version, l.quota)).collect::<Vec<_>>()
            ));
            let stored = Stored::classify("api", Some(r1), Some(&fence));
            log.push(format!(
                "{:6.3}s term 3: Stored::classify says Record (trusted as the newest): {}",
                secs(t),
                matches!(stored, Stored::Record(_))
            ));
            coord = CoordinatorCore::resume(cfg(), "coord3", 3, stored, t);
            fence = LedgerFence::raised(Some(&fence), 3, 10_000);
            log.push(format!(
                "{:6.3}s term 3 issues from {:.3}s; europe cut off from now on; bkk busy again; europe's DC lease {:?}",
                secs(t),
                secs(coord.issues_from_ns()),
                eu.mgr.current_lease(t).map(|l| (l.version.to_string(), l.quota.to_string(), secs(l.expires_at_ns)))
            ));
            bkk.offer(2_000);
        }
        for l in step_two_dcs(&mut coord, &mut bkk, &mut eu, t >= rollback, t) {
            log.push(format!("{:6.3}s {} gets DC lease {} {}", secs(t), l.dc, l.version, l.quota));
        }
        sample(&bkk, &eu, t, q, &mut worst, &mut log);
        t += 250 * MS;
    }
    print_run(&log, worst, q);
    (worst, q)
}

// -------------------------------------------------------------------------------------------
// A deposed term that adopts a group of its own term read back after the ledger bucket lost its
// tail, and writes on it
// -------------------------------------------------------------------------------------------

/// The ledger bucket as a single-replica server keeps it: the record by revision, the newest
/// epoch ever stored, and (the fence lives in another bucket) the fence.
#[derive(Default)]
struct Store {
    record: Option<(u64, LedgerRecord)>,
    revision: u64,
    max_epoch: u64,
    fence: Option<LedgerFence>,
    /// Epochs stored below one stored before (what the simulator flags).
    went_back: Vec<(u64, u64)>,
}

fn bytes(record: &LedgerRecord) -> Vec<u8> {
    encode(&LedgerGroup::new(ledger_group_of(&record.limit), vec![record.clone()]))
}

impl Store {
    fn store(&mut self, record: LedgerRecord) -> u64 {
        if record.epoch < self.max_epoch {
            self.went_back.push((self.max_epoch, record.epoch));
        }
        self.max_epoch = self.max_epoch.max(record.epoch);
        self.revision += 1;
        self.record = Some((self.revision, record));
        self.revision
    }

    /// The server dies and comes back without its tail: the record an earlier term wrote, at a
    /// new revision.
    fn lose_tail_back_to(&mut self, earlier: LedgerRecord) {
        self.revision += 1;
        self.record = Some((self.revision, earlier));
    }

    /// A term's compare-and-set on `expected`, judged as the service judges it when it is not
    /// answered `Written`. Returns the revision the term writes on next (None: it stepped down).
    fn write(&mut self, core: &CoordinatorCore, expected: u64, writer: &str, bugs: KnownBugs) -> Option<u64> {
        let ours = core.record();
        if self.record.as_ref().map_or(0, |(r, _)| *r) == expected {
            return Some(self.store(ours));
        }
        let stored = self.record.as_ref().map(|(r, rec)| (*r, bytes(rec)));
        let read_back = match &stored {
            Some((revision, b)) => GroupReadBack::Stored { revision: *revision, bytes: b },
            None => GroupReadBack::Absent,
        };
        // The fence as read after the group (the known bug: not asked, taken as this term's).
        let fence = if bugs.adoption_ignores_fence { Some(ours.epoch) } else { self.fence.as_ref().map(|f| f.epoch) };
        let answer = GroupWriteAnswer::Conflict;
        match judge_group_write(answer, Some(expected), &bytes(&ours), read_back, ours.epoch, writer, fence) {
            GroupWrite::Landed { revision } | GroupWrite::Adopted { revision } => Some(revision),
            GroupWrite::Unresolved => Some(expected),
            GroupWrite::Lost => None,
        }
    }
}

/// A term taking over: the fence goes up first, then it resumes from what is stored.
fn take_over(store: &mut Store, writer: &str, epoch: u64, now: u64) -> CoordinatorCore {
    let cfg = config(Quota::per_s(1_000, 100), 200, 200);
    let fence = store.fence.clone();
    let stored = Stored::classify("api", store.record.as_ref().map(|(_, r)| r), fence.as_ref());
    let core = CoordinatorCore::resume(cfg.clone(), writer, epoch, stored, now);
    store.fence = Some(LedgerFence::raised(fence.as_ref(), epoch, cfg.dc_ttl_ms));
    core
}

fn deposed_term_writes_after_a_tail_loss(bugs: KnownBugs) -> Store {
    let mut store = Store::default();
    // Term 1267 (coord-1) leads and writes; then it freezes between checking its leadership
    // and writing (a GC pause).
    let old = take_over(&mut store, "coord-1", 1267, 0);
    let old_rev = store.write(&old, 0, "coord-1", bugs).expect("the first write lands");
    let old_record = store.record.as_ref().expect("stored").1.clone();
    // Term 1328 (coord-0) takes over and writes twice.
    let new = take_over(&mut store, "coord-0", 1328, 6 * S);
    let mut rev = store.write(&new, old_rev, "coord-0", bugs).expect("lands");
    rev = store.write(&new, rev, "coord-0", bugs).expect("lands");
    assert!(rev > old_rev);
    // coord-0 dies, and the single-replica ledger bucket loses its tail with it: the record is
    // term 1267's last one again, at a new revision.
    store.lose_tail_back_to(old_record);
    // coord-1 wakes and finishes the write it was about to make, then writes again on whatever
    // it was told to write on.
    if let Some(next) = store.write(&old, old_rev, "coord-1", bugs) {
        store.write(&old, next, "coord-1", bugs);
    }
    store
}

/// Storm seeds 739 and 201 (us-eu-ap; FINDINGS F50): a coordinator term frozen past its leader
/// TTL, a successor that took over and wrote, and the successor's crash taking the
/// single-replica ledger bucket's tail with it, back to the frozen term's last record at a new
/// revision. On waking, the frozen term's compare-and-set conflicts and its read-back shows a
/// group its own term wrote at a revision newer than it expected: it judged that its own late
/// write and adopted it, then wrote on it: epoch 1267 stored after 1328 (and DC leases cut on
/// books that miss everything the successor granted). A group of this term at a newer revision
/// is its own only while the fence still names this term.
#[test]
fn a_deposed_coordinator_never_writes_a_ledger_epoch_below_the_newest() {
    let store = deposed_term_writes_after_a_tail_loss(KnownBugs::default());
    assert!(store.went_back.is_empty(), "ledger epoch went back (from, to): {:?}", store.went_back);
}

/// Negative control: with the fence not asked, the deposed term writes epoch 1267 after 1328.
#[test]
fn a_deposed_coordinator_that_adopts_without_the_fence_writes_an_epoch_below_the_newest() {
    let bugs = KnownBugs { adoption_ignores_fence: true, ..KnownBugs::default() };
    let store = deposed_term_writes_after_a_tail_loss(bugs);
    assert_eq!(store.went_back, vec![(1328, 1267)]);
}
