//! The seeded fault schedule: each fault drawn with its victim and parameters when the schedule
//! is made.

use super::{Fault, FaultKind, LedgerFate, LimitEdit, Rollout, ScheduledFault, Victim};
use leasehold_core::rng::SeededRng;

/// How often faults start and how long they last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultPace {
    /// Mean time between two fault onsets (exponential gaps, at least 1 s).
    pub mean_gap_s: f64,
    /// Multiplies every fault's duration range (1.0: the usual ranges).
    pub duration_scale: f64,
}

/// A fault every ~`pace.mean_gap_s` seconds in `[from_s, until_s)` on a world of `dcs` DCs, each
/// lasting `pace.duration_scale` times its kind's usual range, each healed before `until_s`.
/// Short gaps and long faults overlap.
pub fn schedule(rng: &mut SeededRng, dcs: usize, from_s: u64, until_s: u64, pace: FaultPace) -> Vec<ScheduledFault> {
    let mut out = Vec::new();
    let mut t = from_s as f64;
    let kinds = FaultKind::RANDOM_SCHEDULE_KINDS;
    // Every kind once first (in a seeded order), then at random: each run covers all of them.
    let mut first: Vec<FaultKind> = kinds.to_vec();
    for i in (1..first.len()).rev() {
        first.swap(i, rng.range_u64(0, i as u64) as usize);
    }
    loop {
        t += rng.exp(pace.mean_gap_s).max(1.0);
        if t >= until_s as f64 {
            break;
        }
        let kind = first.pop().unwrap_or_else(|| kinds[rng.range_u64(0, kinds.len() as u64 - 1) as usize]);
        let mut draws = Draws { rng: &mut *rng, scale: pace.duration_scale, left_s: until_s as f64 - t, dcs };
        let (duration_s, victim, fault) = draws.fault(kind);
        out.push(ScheduledFault { at_s: t, duration_s, victim, fault });
    }
    out
}

/// Bit 41 of a fault's 64 random bits once asked a limit change to remove the limit. Random
/// schedules never remove it (a DC cut off then keeps spending its floor above a limit of zero:
/// the documented exception; `limit-change` removes it with every DC connected), so the bit is
/// cleared, before anything is read from the bits, as it always was: every pick stays the same.
const CLEARED_BIT: u64 = 1 << 41;
/// Bit 40 of a limit change's random bits: the coordinators restart with the new definition.
const BY_RESTART_BIT: u64 = 1 << 40;

/// The draws of one fault. Every kind draws in the same order, the one the schedule has always
/// used: its own parameter first (if it has one), then its duration, then 64 bits that pick its
/// victim and its variant ([`Draws::duration_then_bits`]).
struct Draws<'a> {
    rng: &'a mut SeededRng,
    /// [`FaultPace::duration_scale`].
    scale: f64,
    /// Seconds from the fault's start to the end of the faults' window: it heals by then.
    left_s: f64,
    dcs: usize,
}

impl Draws<'_> {
    /// A duration in `[lo_s, hi_s)` scaled by the pace and cut to the window, then 64 random bits.
    fn duration_then_bits(&mut self, lo_s: f64, hi_s: f64) -> (f64, u64) {
        let duration_s = ((lo_s + self.rng.next_f64() * (hi_s - lo_s)) * self.scale).min(self.left_s);
        (duration_s, self.rng.next_u64() & !CLEARED_BIT)
    }

    /// A uniform value in `[lo, lo + span)`.
    fn uniform(&mut self, lo: f64, span: f64) -> f64 {
        lo + self.rng.next_f64() * span
    }

    fn dc(&self, bits: u64) -> usize {
        (bits % self.dcs as u64) as usize
    }

    /// A fault of `kind`: its duration, victim and parameters.
    fn fault(&mut self, kind: FaultKind) -> (f64, Victim, Fault) {
        let pod = |pick| Victim::PodUp { pick };
        match kind {
            FaultKind::PodCrash => {
                let (s, bits) = self.duration_then_bits(2.0, 15.0);
                (s, pod(bits), Fault::PodCrash)
            }
            FaultKind::PodCrashLoop => {
                let (s, bits) = self.duration_then_bits(4.0, 12.0);
                (s, pod(bits), Fault::PodCrashLoop)
            }
            FaultKind::PodPause => {
                let (s, bits) = self.duration_then_bits(6.0, 12.0);
                (s, pod(bits), Fault::PodPause)
            }
            FaultKind::PodJoin => {
                let pods = self.rng.range_u64(1, 3) as usize;
                let (s, bits) = self.duration_then_bits(20.0, 60.0);
                (s, Victim::Dc(self.dc(bits)), Fault::PodJoin { pods })
            }
            FaultKind::PodDrain => {
                let (s, bits) = self.duration_then_bits(5.0, 20.0);
                (s, pod(bits), Fault::PodDrain)
            }
            FaultKind::PartitionDcCoordinator => {
                let (s, bits) = self.duration_then_bits(5.0, 25.0);
                (s, Victim::Dc(self.dc(bits)), Fault::PartitionDcCoordinator)
            }
            FaultKind::PartitionPodDc => {
                let (s, bits) = self.duration_then_bits(3.0, 15.0);
                (s, pod(bits), Fault::PartitionPodDc)
            }
            FaultKind::CoordinatorCrash => {
                let (s, bits) = self.duration_then_bits(5.0, 20.0);
                // Bits 8–9 zero (one crash in four): the bucket goes down; bit 10 then says how.
                let ledger = match ((bits >> 8) % 4, (bits >> 10) % 2) {
                    (0, 1) => LedgerFate::RolledBack,
                    (0, _) => LedgerFate::Lost,
                    _ => LedgerFate::Kept,
                };
                (s, Victim::CoordinatorLeader, Fault::CoordinatorCrash { ledger })
            }
            FaultKind::CoordinatorPause => {
                let (s, bits) = self.duration_then_bits(4.0, 8.0);
                (s, Victim::CoordinatorLeader, Fault::CoordinatorPause { after_write: bits % 2 == 1 })
            }
            FaultKind::DcManagerCrash => {
                let (s, bits) = self.duration_then_bits(3.0, 12.0);
                (s, Victim::LeadingManager { dc: self.dc(bits) }, Fault::DcManagerCrash)
            }
            FaultKind::DcManagerPause => {
                let (s, bits) = self.duration_then_bits(4.0, 9.0);
                let after_write = (bits / 7) % 2 == 1;
                (s, Victim::LeadingManager { dc: self.dc(bits) }, Fault::DcManagerPause { after_write })
            }
            FaultKind::DcManagerReconnect => {
                let (s, bits) = self.duration_then_bits(0.5, 4.0);
                (s, Victim::Dc(self.dc(bits)), Fault::DcManagerReconnect)
            }
            FaultKind::SlowLeaderReplies => {
                let reply_delay_ms = self.uniform(300.0, 1_200.0) as u64;
                let (s, _) = self.duration_then_bits(5.0, 20.0);
                (s, Victim::Everyone, Fault::SlowLeaderReplies { reply_delay_ms })
            }
            FaultKind::ConfigChange => {
                let (s, bits) = self.duration_then_bits(3.0, 12.0);
                let restarted = if bits.is_multiple_of(2) { Rollout::Coordinators } else { Rollout::DcManagers };
                let dc_ttl_only = (bits >> 1) % 2 == 1;
                (s, Victim::Everyone, Fault::ConfigChange { ttl_scale: 0.6, restarted, dc_ttl_only })
            }
            FaultKind::LimitChange => {
                let scale = self.uniform(0.6, 0.2);
                let (s, bits) = self.duration_then_bits(3.0, 12.0);
                // The low 3 bits: which parts change (none set: all three); the rest, with the
                // restart bit cleared, the DC that gives up floor.
                let parts = match bits % 8 {
                    0 => 7,
                    p => p,
                };
                let giver = self.dc((bits & !BY_RESTART_BIT) / 8);
                let floor_from = (parts & 4 != 0).then_some(giver);
                let change = LimitEdit::Scale { rate: parts & 1 != 0, burst: parts & 2 != 0, floor_from, scale };
                (s, Victim::Everyone, Fault::LimitChange { change, by_restart: bits & BY_RESTART_BIT != 0 })
            }
            FaultKind::MessageLoss => {
                let probability = self.uniform(0.05, 0.25);
                let (s, _) = self.duration_then_bits(5.0, 30.0);
                (s, Victim::Everyone, Fault::MessageLoss { probability })
            }
            FaultKind::MessageDuplication => {
                let probability = self.uniform(0.05, 0.25);
                let (s, _) = self.duration_then_bits(5.0, 30.0);
                (s, Victim::Everyone, Fault::MessageDuplication { probability })
            }
            FaultKind::MessageDelay => {
                let extra_delay_ms = self.uniform(50.0, 450.0) as u64;
                let (s, _) = self.duration_then_bits(5.0, 30.0);
                (s, Victim::Everyone, Fault::MessageDelay { extra_delay_ms })
            }
            // Not in RANDOM_SCHEDULE_KINDS (scripted paths only), drawn like the others if added.
            FaultKind::WatchLag => {
                let (s, bits) = self.duration_then_bits(5.0, 30.0);
                (s, Victim::Dc(self.dc(bits)), Fault::WatchLag)
            }
            FaultKind::LedgerWritesUnanswered => {
                let late_ms = self.uniform(500.0, 2_500.0) as u64;
                let (s, _) = self.duration_then_bits(5.0, 20.0);
                (s, Victim::Everyone, Fault::LedgerWritesUnanswered { late_ms })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACE: FaultPace = FaultPace { mean_gap_s: 15.0, duration_scale: 1.0 };

    #[test]
    fn schedule_is_seeded_covers_every_kind_and_heals_in_time() {
        let a = schedule(&mut SeededRng::new(3), 2, 20, 540, PACE);
        let b = schedule(&mut SeededRng::new(3), 2, 20, 540, PACE);
        assert_eq!(a, b);
        assert!(a.len() >= 20, "{}", a.len());
        for k in FaultKind::RANDOM_SCHEDULE_KINDS {
            assert!(a.iter().any(|f| f.fault.kind() == k), "{k:?} missing");
        }
        assert!(a.iter().all(|f| f.at_s + f.duration_s <= 540.0));
    }

    /// How many faults are active at time `t`.
    fn active_at(faults: &[ScheduledFault], t: f64) -> usize {
        faults.iter().filter(|f| f.at_s <= t && t < f.at_s + f.duration_s).count()
    }

    #[test]
    fn short_gaps_and_long_faults_overlap() {
        let sparse = schedule(&mut SeededRng::new(3), 2, 20, 540, FaultPace { mean_gap_s: 12.0, duration_scale: 1.0 });
        let dense = schedule(&mut SeededRng::new(3), 2, 20, 540, FaultPace { mean_gap_s: 3.0, duration_scale: 2.0 });
        assert!(dense.len() >= 3 * sparse.len(), "{} vs {}", dense.len(), sparse.len());
        let mean_active =
            |f: &[ScheduledFault]| (20..540).map(|t| active_at(f, t as f64)).sum::<usize>() as f64 / 520.0;
        assert!(mean_active(&dense) >= 4.0, "{}", mean_active(&dense));
        assert!(mean_active(&dense) >= 4.0 * mean_active(&sparse));
        assert!(dense.iter().all(|f| f.at_s + f.duration_s <= 540.0));
    }

    /// Victims and variants are drawn for the world's DCs, and each variant turns up.
    #[test]
    fn victims_name_the_worlds_dcs_and_every_variant_is_drawn() {
        let faults = schedule(&mut SeededRng::new(5), 3, 20, 20_000, PACE);
        let dcs = |f: &ScheduledFault| match f.victim {
            Victim::Dc(d) | Victim::LeadingManager { dc: d } => Some(d),
            _ => None,
        };
        assert!(faults.iter().filter_map(dcs).all(|d| d < 3));
        assert_eq!(faults.iter().filter_map(dcs).max(), Some(2));
        let has = |want: &dyn Fn(&Fault) -> bool| faults.iter().any(|f| want(&f.fault));
        for fate in [LedgerFate::Kept, LedgerFate::Lost, LedgerFate::RolledBack] {
            assert!(has(&|f| *f == Fault::CoordinatorCrash { ledger: fate }), "{fate:?}");
        }
        for after_write in [false, true] {
            assert!(has(&|f| *f == Fault::CoordinatorPause { after_write }));
            assert!(has(&|f| *f == Fault::DcManagerPause { after_write }));
        }
        for rollout in [Rollout::Coordinators, Rollout::DcManagers] {
            assert!(has(&|f| matches!(f, Fault::ConfigChange { restarted, .. } if *restarted == rollout)));
        }
        assert!(has(&|f| matches!(f, Fault::LimitChange { by_restart: true, .. })));
        assert!(has(&|f| matches!(f, Fault::LimitChange { by_restart: false, .. })));
        assert!(!has(&|f| matches!(f, Fault::LimitChange { change: LimitEdit::Remove, .. })));
        let changes_nothing = |f: &Fault| {
            matches!(
                f,
                Fault::LimitChange { change: LimitEdit::Scale { rate: false, burst: false, floor_from: None, .. }, .. }
            )
        };
        assert!(!has(&changes_nothing), "every limit change changes something");
        assert!(has(&|f| matches!(f, Fault::LimitChange { change: LimitEdit::Scale { floor_from: Some(2), .. }, .. })));
    }
}
