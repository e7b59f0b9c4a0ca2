//! The partner's own, hidden limit (scenario `hidden-drop`): a sliding window whose limit the
//! partner changes over time without telling anyone. It answers 429 to calls over it, and the
//! answers travel back to the pod that made the call, which reports them
//! (`PodReport.upstream_429`). It is not the run's judge: the strict upstream keeps judging every
//! call against the leased limit (see [`crate::upstream`]).

use crate::sliding_window::SlidingWindow;

const S: u64 = 1_000_000_000;

/// The hidden limit over time: `(from_s, calls per window)`, sorted by time.
#[derive(Clone, Debug, PartialEq)]
pub struct HiddenLimit {
    pub window_ms: u64,
    pub steps: Vec<(f64, u64)>,
}

impl HiddenLimit {
    /// Calls per window at simulated second `t`.
    pub fn at(&self, t: f64) -> u64 {
        self.steps.iter().take_while(|(from, _)| *from <= t).last().or(self.steps.first()).map_or(u64::MAX, |s| s.1)
    }
}

pub struct Partner {
    limit: HiddenLimit,
    window: SlidingWindow,
    /// Per pod: when each 429 answer reaches it.
    answers_due_ns: Vec<Vec<u64>>,
    /// Per simulated second: calls received and calls answered 429.
    pub calls_per_s: Vec<u32>,
    pub answered_429_per_s: Vec<u32>,
}

impl Partner {
    pub fn new(limit: HiddenLimit, seconds: usize) -> Self {
        let first = limit.at(0.0);
        Partner {
            window: SlidingWindow::new(first, limit.window_ms),
            limit,
            answers_due_ns: Vec::new(),
            calls_per_s: vec![0; seconds],
            answered_429_per_s: vec![0; seconds],
        }
    }

    pub fn limit(&self) -> &HiddenLimit {
        &self.limit
    }

    /// A call from `pod` arrives at `t_ns`; a 429 reaches the pod `return_ns` later.
    pub fn judge(&mut self, t_ns: u64, pod: usize, return_ns: u64) {
        self.window.set_limit(self.limit.at(t_ns as f64 / S as f64));
        let sec = (t_ns / S) as usize;
        if let Some(c) = self.calls_per_s.get_mut(sec) {
            *c += 1;
        }
        if self.window.call(t_ns) {
            return;
        }
        if let Some(c) = self.answered_429_per_s.get_mut(sec) {
            *c += 1;
        }
        if self.answers_due_ns.len() <= pod {
            self.answers_due_ns.resize(pod + 1, Vec::new());
        }
        self.answers_due_ns[pod].push(t_ns + return_ns);
    }

    /// 429 answers that have reached `pod` by `now_ns` since the last call (they are counted once).
    pub fn take_429s(&mut self, pod: usize, now_ns: u64) -> u64 {
        let Some(due) = self.answers_due_ns.get_mut(pod) else { return 0 };
        let before = due.len();
        due.retain(|&t| t > now_ns);
        (before - due.len()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hidden_limit_changes_over_time_and_answers_reach_the_caller_later() {
        let limit = HiddenLimit { window_ms: 1_000, steps: vec![(0.0, 2), (5.0, 1)] };
        let mut p = Partner::new(limit, 10);
        for t in [0, 1, 2] {
            p.judge(t * 1_000, 0, 50);
        }
        assert_eq!(p.take_429s(0, 2_049), 0, "the answer is still on its way");
        assert_eq!(p.take_429s(0, 2_050), 1);
        assert_eq!(p.take_429s(0, 10_000), 0, "counted once");
        p.judge(5 * S, 3, 0);
        p.judge(5 * S + 1, 3, 0);
        assert_eq!(p.take_429s(3, 5 * S + 1), 1, "one call per window from 5 s");
        assert_eq!((p.calls_per_s[0], p.answered_429_per_s[0], p.answered_429_per_s[5]), (3, 1, 1));
    }
}
