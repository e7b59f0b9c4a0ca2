//! The outage bench's load: callers that each ask once per pace, and the record of what was
//! admitted and when.
#![allow(clippy::disallowed_methods)] // a bench measures real time (clippy.toml)

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When each admission was learnt of, since the load started.
#[derive(Clone, Default)]
pub(crate) struct Admissions(Arc<Mutex<Vec<Duration>>>);

impl Admissions {
    pub(crate) fn note(&self, at: Duration) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(at);
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        v.sort();
        v
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Admissions per second in `[from, to)`.
    pub(crate) fn rate_between(&self, from: Duration, to: Duration) -> f64 {
        let n = self.sorted().iter().filter(|t| **t >= from && **t < to).count();
        n as f64 / (to - from).as_secs_f64().max(1e-9)
    }

    /// The most admissions in any window of `width` (sliding over every admission).
    pub(crate) fn max_in_window(&self, width: Duration) -> usize {
        let v = self.sorted();
        let mut first = 0;
        let mut most = 0;
        for (i, t) in v.iter().enumerate() {
            while *t - v[first] >= width {
                first += 1;
            }
            most = most.max(i + 1 - first);
        }
        most
    }

    /// Admissions in each whole second of the run.
    pub(crate) fn per_second(&self, total: Duration) -> Vec<usize> {
        let mut by_s = vec![0; total.as_secs().max(1) as usize];
        for t in self.sorted() {
            if let Some(n) = by_s.get_mut(t.as_secs() as usize) {
                *n += 1;
            }
        }
        by_s
    }
}

/// Run `clients` callers for `total` from `start`, each calling `ask` once per `pace` (a call
/// that takes longer delays only its own caller); every `true` answer is an admission.
pub(super) async fn drive<F, Fut>(clients: usize, pace: Duration, start: Instant, total: Duration, ask: F) -> Admissions
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let admissions = Admissions::default();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (ask, admissions) = (ask.clone(), admissions.clone());
        tasks.push(tokio::spawn(async move {
            // Spread the callers over one pace, so the load is steady rather than in waves.
            let offset = pace.mul_f64(c as f64 / clients as f64);
            let mut next = start + offset;
            loop {
                tokio::time::sleep_until(next.into()).await;
                if start.elapsed() >= total {
                    return;
                }
                if ask().await {
                    admissions.note(start.elapsed());
                }
                next += pace;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    admissions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_window_slides_over_every_admission() {
        let a = Admissions::default();
        for ms in [0, 100, 900, 1_000, 1_050, 1_899, 3_000] {
            a.note(Duration::from_millis(ms));
        }
        // 900, 1000, 1050, 1899: four within one second; 0..=900 is three.
        assert_eq!(a.max_in_window(Duration::from_secs(1)), 4);
        assert_eq!(a.per_second(Duration::from_secs(4)), vec![3, 3, 0, 1]);
        assert!((a.rate_between(Duration::from_secs(1), Duration::from_secs(2)) - 3.0).abs() < 1e-9);
    }
}
