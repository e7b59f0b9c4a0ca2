//! Demand smoothing: an exponentially weighted moving average.
//!
//! `α` applies per *sample* (one demand report). With the default report period of 250 ms and
//! α = 0.3, a step in demand is 90% absorbed after ⌈ln 0.1 / ln 0.7⌉ = 7 samples ≈ 1.75 s.

#[derive(Clone, Debug, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

pub const DEFAULT_ALPHA: f64 = 0.3;

impl Ewma {
    /// `alpha` is clamped into (0, 1].
    pub fn new(alpha: f64) -> Self {
        let alpha = if alpha.is_finite() { alpha.clamp(1e-6, 1.0) } else { DEFAULT_ALPHA };
        Ewma { alpha, value: None }
    }

    /// Feed one sample; the first sample initialises the average.
    pub fn update(&mut self, sample: f64) -> f64 {
        let sample = if sample.is_finite() { sample.max(0.0) } else { 0.0 };
        let next = match self.value {
            None => sample,
            Some(v) => v + self.alpha * (sample - v),
        };
        self.value = Some(next);
        next
    }

    pub fn value(&self) -> f64 {
        self.value.unwrap_or(0.0)
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }
}

impl Default for Ewma {
    fn default() -> Self {
        Ewma::new(DEFAULT_ALPHA)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_response_matches_alpha() {
        let mut e = Ewma::new(0.3);
        e.update(0.0);
        let mut n = 0;
        while e.update(100.0) < 90.0 {
            n += 1;
        }
        assert_eq!(n + 1, 7);
    }

    #[test]
    fn garbage_samples_do_not_poison_the_average() {
        let mut e = Ewma::new(0.5);
        e.update(10.0);
        e.update(f64::NAN);
        e.update(-50.0);
        assert!(e.value().is_finite() && e.value() >= 0.0);
    }
}
