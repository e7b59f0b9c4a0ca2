//! The seeded fault schedule.

use leasehold_core::rng::SeededRng;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    PodCrash,
    /// A pod crashes and is restarted under the same id again and again (lives of 0.3–1.5 s,
    /// restarts after 20–300 ms): leases meant for one process reach the next.
    PodCrashLoop,
    PodPause,
    PodJoin,
    PodDrain,
    PartitionDcCoordinator,
    PartitionPodDc,
    /// The coordinator leader dies; one crash in four takes a single-replica ledger bucket down
    /// with it (the record is lost, the fence in the leader bucket is not).
    CoordinatorCrash,
    CoordinatorPause,
    /// A DC's leading manager dies; its standby claims the DC after a leader TTL, and the
    /// dead one comes back as a standby.
    DcManagerCrash,
    /// A DC's leading manager freezes past its leader TTL with pod leases computed but not
    /// sent; on waking it sends them (the GC-pause bug) and finds its term taken.
    DcManagerPause,
    /// A DC's managers lose their NATS connection and reconnect after `duration`: what they
    /// publish meanwhile is buffered by the client and flushed on reconnect (late leases), and
    /// what pods publish to them meanwhile is lost.
    DcManagerReconnect,
    /// Answers from the leader keys come back late (slow compare-and-set replies), by up to
    /// `amount` ms: a leader must time its term from the send. A share of requests is also held
    /// up on its way past the driver's timeout: it lands after the driver gave up on it.
    SlowLeaderReplies,
    /// A rolling restart with new settings: `dc_ttl_ms` and `pod_ttl_ms` shrink to `amount`
    /// (60% in random schedules), or grow back; the coordinator leader and each DC's leading manager restart, so standbys with the
    /// new settings take over.
    ConfigChange,
    /// A rolling restart of the coordinators with a new limit: R and/or B go down to `amount`
    /// (60–80% in random schedules) and/or floor moves from one DC to the next (the giver keeps
    /// `amount` of its floor); when it heals, another rolling restart brings the settings back.
    /// Which parts change: bits of `target` (see `world::limit_change_parts`).
    LimitChange,
    MessageLoss,
    MessageDuplication,
    MessageDelay,
    /// A DC's standby's ledger watch lags: it delivers no record until the fault heals, then
    /// the kept history (scripted paths only: not in random schedules, `ALL`).
    WatchLag,
    /// The coordinator leader's ledger writes go unanswered (a timeout, a server restarting) and
    /// land `amount` ms later if the record still has the revision they expected (a client
    /// resending what it buffered); the leader reads the record unchanged, keeps its term and
    /// counts the write's leases, and its next write meets its own late one
    /// (`judge_group_write`: Unresolved, then Adopted). Scripted paths only, like `WatchLag`.
    LedgerWritesUnanswered,
}

impl FaultKind {
    pub const ALL: [FaultKind; 18] = [
        FaultKind::PodCrash,
        FaultKind::PodCrashLoop,
        FaultKind::PodPause,
        FaultKind::PodJoin,
        FaultKind::PodDrain,
        FaultKind::PartitionDcCoordinator,
        FaultKind::PartitionPodDc,
        FaultKind::CoordinatorCrash,
        FaultKind::CoordinatorPause,
        FaultKind::DcManagerCrash,
        FaultKind::DcManagerPause,
        FaultKind::DcManagerReconnect,
        FaultKind::SlowLeaderReplies,
        FaultKind::ConfigChange,
        FaultKind::LimitChange,
        FaultKind::MessageLoss,
        FaultKind::MessageDuplication,
        FaultKind::MessageDelay,
    ];
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub at_s: f64,
    pub kind: FaultKind,
    /// How long it lasts (pause, partition, network trouble) or until the restart/replacement.
    pub duration_s: f64,
    /// Which DC (partition, join) or a random pick among live pods, by the world.
    pub target: u64,
    /// Loss/duplication probability, or extra delay in ms, or pods to join.
    pub amount: f64,
}

/// How often faults start and how long they last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultPace {
    /// Mean time between two fault onsets (exponential gaps, at least 1 s).
    pub mean_gap_s: f64,
    /// Multiplies every fault's duration range (1.0: the usual ranges).
    pub duration_scale: f64,
}

/// A fault every ~`pace.mean_gap_s` seconds in `[from_s, until_s)`, each lasting
/// `pace.duration_scale` times its kind's usual range, each healed before `until_s`. Short gaps
/// and long faults overlap.
pub fn schedule(rng: &mut SeededRng, from_s: u64, until_s: u64, pace: FaultPace) -> Vec<Fault> {
    let mut out = Vec::new();
    let mut t = from_s as f64;
    // Every kind once first (in a seeded order), then at random: each run covers all of them.
    let mut first: Vec<FaultKind> = FaultKind::ALL.to_vec();
    for i in (1..first.len()).rev() {
        first.swap(i, rng.range_u64(0, i as u64) as usize);
    }
    loop {
        t += rng.exp(pace.mean_gap_s).max(1.0);
        if t >= until_s as f64 {
            break;
        }
        let kind =
            first.pop().unwrap_or_else(|| FaultKind::ALL[rng.range_u64(0, FaultKind::ALL.len() as u64 - 1) as usize]);
        let (lo, hi, amount) = match kind {
            FaultKind::PodCrash => (2.0, 15.0, 0.0),
            FaultKind::PodCrashLoop => (4.0, 12.0, 0.0),
            FaultKind::PodPause => (6.0, 12.0, 0.0),
            FaultKind::PodJoin => (20.0, 60.0, rng.range_u64(1, 3) as f64),
            FaultKind::PodDrain => (5.0, 20.0, 0.0),
            FaultKind::PartitionDcCoordinator => (5.0, 25.0, 0.0),
            FaultKind::PartitionPodDc => (3.0, 15.0, 0.0),
            FaultKind::CoordinatorCrash => (5.0, 20.0, 0.0),
            FaultKind::CoordinatorPause => (4.0, 8.0, 0.0),
            FaultKind::DcManagerCrash => (3.0, 12.0, 0.0),
            FaultKind::DcManagerPause => (4.0, 9.0, 0.0),
            FaultKind::DcManagerReconnect => (0.5, 4.0, 0.0),
            FaultKind::ConfigChange => (3.0, 12.0, 0.6),
            FaultKind::LimitChange => (3.0, 12.0, 0.6 + rng.next_f64() * 0.2),
            FaultKind::SlowLeaderReplies => (5.0, 20.0, 300.0 + rng.next_f64() * 1_200.0),
            FaultKind::MessageLoss => (5.0, 30.0, 0.05 + rng.next_f64() * 0.25),
            FaultKind::MessageDuplication => (5.0, 30.0, 0.05 + rng.next_f64() * 0.25),
            FaultKind::MessageDelay => (5.0, 30.0, 50.0 + rng.next_f64() * 450.0),
            FaultKind::WatchLag => (5.0, 30.0, 0.0),
            FaultKind::LedgerWritesUnanswered => (5.0, 20.0, 500.0 + rng.next_f64() * 2_500.0),
        };
        let duration_s = ((lo + rng.next_f64() * (hi - lo)) * pace.duration_scale).min(until_s as f64 - t);
        // A random limit change never removes the limit: a DC cut off then keeps spending its
        // floor above a limit of zero (the documented exception); `limit-change` removes it
        // with every DC connected.
        let target = rng.next_u64() & !crate::world::CHANGE_REMOVE;
        out.push(Fault { at_s: t, kind, duration_s, target, amount });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_seeded_covers_every_kind_and_heals_in_time() {
        let a = schedule(&mut SeededRng::new(3), 20, 540, FaultPace { mean_gap_s: 15.0, duration_scale: 1.0 });
        let b = schedule(&mut SeededRng::new(3), 20, 540, FaultPace { mean_gap_s: 15.0, duration_scale: 1.0 });
        assert_eq!(a, b);
        assert!(a.len() >= 20, "{}", a.len());
        for k in FaultKind::ALL {
            assert!(a.iter().any(|f| f.kind == k), "{k:?} missing");
        }
        assert!(a.iter().all(|f| f.at_s + f.duration_s <= 540.0));
    }

    /// How many faults are active at time `t`.
    fn active_at(faults: &[Fault], t: f64) -> usize {
        faults.iter().filter(|f| f.at_s <= t && t < f.at_s + f.duration_s).count()
    }

    #[test]
    fn short_gaps_and_long_faults_overlap() {
        let sparse = schedule(&mut SeededRng::new(3), 20, 540, FaultPace { mean_gap_s: 12.0, duration_scale: 1.0 });
        let dense = schedule(&mut SeededRng::new(3), 20, 540, FaultPace { mean_gap_s: 3.0, duration_scale: 2.0 });
        assert!(dense.len() >= 3 * sparse.len(), "{} vs {}", dense.len(), sparse.len());
        let mean_active = |f: &[Fault]| (20..540).map(|t| active_at(f, t as f64)).sum::<usize>() as f64 / 520.0;
        assert!(mean_active(&dense) >= 4.0, "{}", mean_active(&dense));
        assert!(mean_active(&dense) >= 4.0 * mean_active(&sparse));
        assert!(dense.iter().all(|f| f.at_s + f.duration_s <= 540.0));
    }
}
