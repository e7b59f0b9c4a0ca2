//! A model of Envoy's `rate_limit_quota` filter for the pool's tests (see `rlqs_pool_tests.rs`).

use super::super::*;
use leasehold_core::rng::SeededRng;
use std::collections::{HashMap, VecDeque};

#[derive(Clone, Debug)]
pub(super) struct Object {
    pub(super) level: f64,
    pub(super) rate: f64,
    pub(super) burst: f64,
    pub(super) at_ns: u64,
}

impl Object {
    pub(super) fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.at_ns) as f64 / 1e9;
        self.level = (self.level + self.rate * dt).min(self.burst);
        self.at_ns = now_ns;
    }
}

#[derive(Default)]
pub(super) struct EnvoyBucket {
    /// The token bucket in force and when its TTL runs out (real time).
    pub(super) current: Option<(usize, EnvoyTokenBucket, u64)>,
    /// Replaced or expired objects lagging workers may still drain, until then.
    pub(super) lagging: Vec<(usize, u64)>,
}

/// One Envoy process: its buckets and the stream it talks on now.
pub(super) struct Envoy {
    pub(super) stream: u64,
    /// Its clock runs this much faster (>1) or slower than the agent's.
    pub(super) clock_rate: f64,
    pub(super) buckets: HashMap<String, EnvoyBucket>,
    pub(super) inbox: VecDeque<(u64, String, Assignment)>,
    pub(super) last_apply_ns: u64,
    /// Takes tokens while `now < busy_until_ns` (idle envoys' buckets fill up).
    pub(super) busy_until_ns: u64,
    pub(super) demand_per_s: f64,
}

pub(super) struct Model {
    pub(super) rng: SeededRng,
    pub(super) objects: Vec<Object>,
    pub(super) envoys: Vec<Envoy>,
    pub(super) next_stream: u64,
    pub(super) delay_max_ns: u64,
    pub(super) lag_max_ns: u64,
    pub(super) consume: Consume,
}

/// When an Envoy takes every whole token it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Consume {
    Always,
    /// In busy spells that start with reports.
    Spells,
    /// Only while a replaced object may still be drained: the adversary of a change.
    DuringChanges,
}

impl Model {
    pub(super) fn lag(&mut self, now_ns: u64) -> u64 {
        now_ns + self.rng.range_u64(0, self.lag_max_ns)
    }

    pub(super) fn apply(&mut self, e: usize, bucket: String, a: Assignment, now_ns: u64) {
        let lag_until = self.lag(now_ns);
        let envoy = &mut self.envoys[e];
        let b = envoy.buckets.entry(bucket).or_default();
        let old = b.current.take();
        match a {
            Assignment::DenyAll { .. } => {
                if let Some((obj, _, _)) = old {
                    b.lagging.push((obj, lag_until));
                }
            }
            Assignment::TokenBucket { bucket: tb, ttl_s } => {
                let expires = now_ns + (ttl_s as f64 * 1e9 / envoy.clock_rate) as u64;
                let obj = match old {
                    // The same bucket: the object (and its level) carries over.
                    Some((obj, have, _)) if have == tb => obj,
                    _ => {
                        let level = match old {
                            Some((obj, _, _)) => {
                                self.objects[obj].refill(now_ns);
                                let o = &self.objects[obj];
                                tb.max_tokens as f64 * o.level / o.burst
                            }
                            None => tb.max_tokens as f64,
                        };
                        if let Some((obj, _, _)) = old {
                            b.lagging.push((obj, lag_until));
                        }
                        self.objects.push(Object {
                            level,
                            rate: tb.tokens_per_fill as f64,
                            burst: tb.max_tokens as f64,
                            at_ns: now_ns,
                        });
                        self.objects.len() - 1
                    }
                };
                b.current = Some((obj, tb, expires));
            }
        }
    }

    /// One step of every Envoy: expiries, deliveries, then every whole token taken.
    pub(super) fn step(&mut self, now_ns: u64) -> u64 {
        let mut admitted = 0;
        for e in 0..self.envoys.len() {
            let lag_until = self.lag(now_ns);
            for b in self.envoys[e].buckets.values_mut() {
                if let Some((obj, _, expires)) = b.current {
                    if now_ns >= expires {
                        b.current = None;
                        b.lagging.push((obj, lag_until));
                    }
                }
                b.lagging.retain(|&(_, until)| now_ns < until);
            }
            while self.envoys[e].inbox.front().is_some_and(|m| m.0 <= now_ns) {
                let (_, bucket, a) = self.envoys[e].inbox.pop_front().unwrap();
                self.apply(e, bucket, a, now_ns);
            }
            let busy = match self.consume {
                Consume::Always => true,
                Consume::Spells => now_ns < self.envoys[e].busy_until_ns,
                Consume::DuringChanges => self.envoys[e].buckets.values().any(|b| !b.lagging.is_empty()),
            };
            if !busy {
                continue;
            }
            let held: Vec<usize> = self.envoys[e]
                .buckets
                .values()
                .flat_map(|b| b.current.iter().map(|c| c.0).chain(b.lagging.iter().map(|l| l.0)))
                .collect();
            for obj in held {
                let o = &mut self.objects[obj];
                o.refill(now_ns);
                let take = o.level.floor();
                o.level -= take;
                admitted += take as u64;
            }
        }
        admitted
    }

    pub(super) fn send(&mut self, stream: u64, bucket: String, a: Assignment, now_ns: u64) {
        let delay = self.rng.range_u64(0, self.delay_max_ns);
        if let Some(e) = self.envoys.iter_mut().find(|e| e.stream == stream) {
            // One stream delivers in order.
            let at = (now_ns + delay).max(e.last_apply_ns);
            e.last_apply_ns = at;
            e.inbox.push_back((at, bucket, a));
        }
    }
}
