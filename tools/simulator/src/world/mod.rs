//! The discrete-event world: virtual time, one event heap, every node on its own clock.
//!
//! Nodes are the real `leasehold_core` state machines ([`PodCore`], [`DcManagerCore`],
//! [`CoordinatorCore`]); the world only moves messages, keeps the KV register, injects faults,
//! sends admitted calls to the strict upstream and checks invariants after every control step.

mod checks;
mod control;
mod inject;
mod leaders;
mod ledger_writes;
mod live;
mod nodes;
mod requests;
mod term_reads;

use crate::clock::NodeClock;
use crate::faults::ScheduledFault;
use crate::metrics::Metrics;
use crate::net::Network;
use crate::scenario::Scenario;
use crate::upstream::Upstream;
use leasehold_core::bucket::TokenBucket;
use leasehold_core::rng::SeededRng;
use leasehold_core::wire::{DcReport, LeaseReturn, LedgerRecord, PodLease, PodReport, ReturnAck};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::rc::Rc;

pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;

/// Who enforces the limit: Leasehold, or one of the naive baselines the partner API design compares
/// against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Leasehold,
    /// R/2 and B/2 per DC, shared by the DC's pods.
    StaticSplit,
    /// R/n and B/n per pod.
    StaticPerPod,
    /// No limit at all: every pod calls as it likes.
    Uncoordinated,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival(usize),
    PodRetry(usize, u64),
    PodTick(usize, u64),
    /// DC, manager replica, incarnation.
    DcTick(usize, usize, u64),
    CoordTick(usize, u64),
    /// A leadership operation moves (see `leaders`).
    Leader(usize),
    /// The driver stops waiting for a leadership operation that is stuck on its way.
    LeaderTimeout(usize),
    Deliver(usize),
    Fault(usize),
    Heal(usize),
    /// The next crash (`true`) or restart of a crash-looping pod, by fault index.
    CrashLoop(usize, bool),
    /// An unanswered ledger write reaches the store (by index in `Kv::in_flight`).
    LateWrite(usize),
    Sample,
}

enum Msg {
    PodReport(usize, PodReport),
    LeaseReturn(usize, LeaseReturn),
    PodLease(usize, PodLease),
    ReturnAck(usize, ReturnAck),
    DcReport(DcReport),
    /// A ledger record at its revision, from DC `.0`'s watch: to every replica, or only to
    /// replica `.1` (its watch, opened again, replaying the kept history).
    Record(usize, Option<usize>, Rc<LedgerRecord>, u64),
}

use nodes::{CoordSlot, DcSlot, Kv, MgrReplica, PodSlot, PodState};

pub struct World {
    sc: Scenario,
    live: live::LiveConfig,
    policy: Policy,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    msgs: Vec<Option<Msg>>,
    free_msgs: Vec<usize>,
    rng: SeededRng,
    net_rng: SeededRng,
    net: Network,
    pods: Vec<PodSlot>,
    pod_by_instance: HashMap<String, usize>,
    dcs: Vec<DcSlot>,
    coords: Vec<CoordSlot>,
    kv: Kv,
    leader_keys: leaders::LeaderKeys,
    leader_ops: Vec<Option<leaders::LeaderOp>>,
    upstream: Upstream,
    faults: Vec<ScheduledFault>,
    /// Whom each applied fault struck, by fault index (`None`: not applied).
    struck: Vec<Option<inject::Struck>>,
    pub metrics: Metrics,
}

impl World {
    pub fn new(sc: Scenario, policy: Policy, seed: u64) -> Self {
        let mut rng = SeededRng::new(seed);
        let net_rng = rng.fork(1);
        let faults = if !sc.fixed_faults.is_empty() && policy == Policy::Leasehold {
            sc.fixed_faults.clone()
        } else if sc.chaos && policy == Policy::Leasehold {
            crate::faults::schedule(&mut rng.fork(2), sc.dcs.len(), sc.fault_from_s, sc.fault_until_s, sc.fault_pace())
        } else {
            Vec::new()
        };
        let total_pods: usize = sc.dcs.iter().map(|d| d.pods).sum();
        let mut upstream = Upstream::new(sc.judged_limit());
        upstream.partner = sc.hidden.clone().map(|h| crate::partner::Partner::new(h, sc.duration_s as usize + 1));
        let metrics = Metrics::new(&sc);
        let floors = sc.dcs.iter().map(|d| d.floor).collect();
        let live = live::LiveConfig::new(sc.dc_ttl_ms, sc.pod_ttl_ms, sc.emergency_per_dc, sc.quota, floors);
        let mut w = World {
            live,
            net: Network::new(total_pods, sc.dcs.len()),
            policy,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            rng,
            net_rng,
            pods: Vec::new(),
            pod_by_instance: HashMap::new(),
            dcs: Vec::new(),
            coords: Vec::new(),
            kv: Kv::default(),
            leader_keys: Default::default(),
            leader_ops: Vec::new(),
            upstream,
            struck: vec![None; faults.len()],
            faults,
            metrics,
            sc,
        };
        w.build();
        w
    }

    fn clock(&mut self) -> NodeClock {
        NodeClock::random(&mut self.rng, self.sc.max_clock_offset_ms, self.sc.max_clock_drift)
    }

    fn build(&mut self) {
        for d in 0..self.sc.dcs.len() {
            let clock = self.clock();
            let static_bucket = (self.policy == Policy::StaticSplit).then(|| {
                let n = self.sc.dcs.len() as u64;
                let b = TokenBucket::new();
                let q = self.sc.quota;
                let share = leasehold_core::quota::Quota::new(q.rate_milli_per_s / n, q.burst_milli / n);
                b.apply_lease(share, clock.local(0) + 36_000 * S, clock.local(0)).expect("static lease fits");
                b
            });
            self.dcs.push(DcSlot {
                clock,
                mgrs: Vec::new(),
                static_bucket,
                newest_record_rev: 0,
                removed_since: None,
                confirmed: None,
            });
            for _ in 0..self.sc.dcs[d].pods {
                let p = self.add_pod_slot(d);
                self.start_pod(p);
            }
            self.schedule_arrival(d);
            if self.policy == Policy::Leasehold {
                for r in 0..2 {
                    let clock = self.clock();
                    let id = format!("{}-mgr{r}", self.sc.dcs[d].name);
                    let election = leaders::election(&id, self.sc.leader_ttl_ms, &self.sc.bugs);
                    let records = self.term_records(d, r);
                    self.dcs[d].mgrs.push(MgrReplica {
                        clock,
                        election,
                        records,
                        core: None,
                        alive: true,
                        paused_until: 0,
                        incarnation: 0,
                        send_on_wake: Vec::new(),
                        pause_after_write_ns: None,
                        record_rules: leasehold_core::dc_manager::RecordRules::with_bugs(self.sc.bugs),
                        watched_floor: None,
                        watch_lag_until: 0,
                    });
                    let first = self.rng.range_u64(0, 250) * MS;
                    self.push(first, Ev::DcTick(d, r, 0));
                }
            }
        }
        if self.policy == Policy::Leasehold {
            for i in 0..2 {
                let clock = self.clock();
                let id = format!("coord-{i}");
                let election = leaders::election(&id, self.sc.leader_ttl_ms, &self.sc.bugs);
                self.coords.push(CoordSlot {
                    id,
                    election,
                    clock,
                    alive: true,
                    paused_until: 0,
                    incarnation: 0,
                    core: None,
                    record_rev: 0,
                    write_on_wake: false,
                    change_on_wake: None,
                    pause_after_write_ns: None,
                });
                self.push(i as u64 * 300 * MS, Ev::CoordTick(i, 0));
            }
        }
        for i in 0..self.faults.len() {
            self.push((self.faults[i].at_s * S as f64) as u64, Ev::Fault(i));
        }
        self.push(100 * MS, Ev::Sample);
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, ev)));
    }

    fn send(&mut self, link: crate::net::Link, msg: impl Fn() -> Msg) {
        self.send_after(link, 0, msg)
    }

    /// As [`send`](Self::send), leaving `held_ns` later (a client's buffer flushed on reconnect).
    fn send_after(&mut self, link: crate::net::Link, held_ns: u64, msg: impl Fn() -> Msg) {
        for delay in self.net.deliveries(link, &mut self.net_rng) {
            let delay = delay + held_ns;
            let m = msg();
            let idx = match self.free_msgs.pop() {
                Some(i) => {
                    self.msgs[i] = Some(m);
                    i
                }
                None => {
                    self.msgs.push(Some(m));
                    self.msgs.len() - 1
                }
            };
            self.push(self.now + delay, Ev::Deliver(idx));
        }
    }

    /// Run to the end. Returns the number of events processed.
    pub fn run(&mut self) -> u64 {
        let end = self.sc.duration_s * S;
        let mut events = 0u64;
        while let Some(Reverse((t, _, ev))) = self.heap.pop() {
            if t > end {
                break;
            }
            self.now = t;
            events += 1;
            match ev {
                Ev::Arrival(d) => self.on_arrival(d),
                Ev::PodRetry(p, inc) => self.on_pod_retry(p, inc),
                Ev::PodTick(p, inc) => {
                    self.on_pod_tick(p, inc);
                    self.check();
                }
                Ev::DcTick(d, r, inc) => {
                    self.on_dc_tick(d, r, inc);
                    self.check();
                }
                Ev::Leader(i) => {
                    self.on_leader_op(i);
                    self.check();
                }
                Ev::LeaderTimeout(i) => {
                    self.on_leader_timeout(i);
                    self.check();
                }
                Ev::CoordTick(c, inc) => {
                    self.on_coord_tick(c, inc);
                    self.check();
                }
                Ev::Deliver(i) => {
                    let m = self.msgs[i].take().expect("message delivered once");
                    self.free_msgs.push(i);
                    self.on_message(m);
                    self.check();
                }
                Ev::Fault(i) => {
                    self.apply_fault(i);
                    self.check();
                }
                Ev::Heal(i) => {
                    self.heal_fault(i);
                    self.check();
                }
                Ev::CrashLoop(i, crash) => {
                    self.crash_loop_step(i, crash);
                    self.check();
                }
                Ev::LateWrite(i) => {
                    self.land_late_write(i);
                    self.check();
                }
                Ev::Sample => self.on_sample(),
            }
        }
        self.upstream.advance(u64::MAX);
        self.metrics.finish(&self.upstream);
        events
    }

    pub fn faults(&self) -> &[ScheduledFault] {
        &self.faults
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }
}
