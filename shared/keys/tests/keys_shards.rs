//! Shard ownership through fenced KV leases, in virtual time: several instances, a KV with
//! compare-and-set, watch events delivered a step late, stalls (GC pauses), crashes and joins.
//! At every step at most one instance may answer for a shard, also when the instances were
//! started with different `shard_ttl_ms` (a rolling restart that changes it).

use leasehold_core::rng::SeededRng;
use leasehold_per_key::shards::{shard_of_action, Action, ShardBook, ShardRecord};
use std::collections::BTreeMap;

const SHARDS: u32 = 64;
const TTL_MS: u64 = 3_000;
const STEP_MS: u64 = 50;

struct Kv {
    revision: u64,
    shards: BTreeMap<u32, (u64, ShardRecord)>,
    /// (deliver at ms, shard, revision, record) for the watch.
    events: Vec<(u64, u32, u64, ShardRecord)>,
}

impl Kv {
    fn cas(&mut self, shard: u32, expected: Option<u64>, record: ShardRecord, now_ms: u64) -> Option<u64> {
        let current = self.shards.get(&shard).map(|(r, _)| *r);
        if current != expected {
            return None;
        }
        self.revision += 1;
        self.shards.insert(shard, (self.revision, record.clone()));
        self.events.push((now_ms + STEP_MS, shard, self.revision, record));
        Some(self.revision)
    }
}

struct Instance {
    book: ShardBook,
    alive: bool,
    stalled_until_ms: u64,
    seen_events: usize,
}

fn instance(id: &str) -> Instance {
    instance_with_ttl(id, TTL_MS)
}

fn instance_with_ttl(id: &str, ttl_ms: u64) -> Instance {
    Instance { book: ShardBook::new(id, SHARDS, ttl_ms), alive: true, stalled_until_ms: 0, seen_events: 0 }
}

/// One step of one instance: watch events, member heartbeats, then its planned writes.
fn step(inst: &mut Instance, kv: &mut Kv, members: &[String], now_ms: u64) {
    if !inst.alive || inst.stalled_until_ms > now_ms {
        return;
    }
    while inst.seen_events < kv.events.len() && kv.events[inst.seen_events].0 <= now_ms {
        let (_, shard, rev, record) = kv.events[inst.seen_events].clone();
        inst.book.observe_shard(shard, rev, Some(&record), now_ms);
        inst.seen_events += 1;
    }
    for m in members {
        inst.book.observe_member(m, Some(TTL_MS), now_ms);
    }
    inst.book.expire_in_flight(now_ms);
    for action in inst.book.plan(now_ms) {
        let record = inst.book.record_for(&action);
        let written = match action {
            Action::Claim { shard, expected } => kv.cas(shard, expected, record, now_ms),
            Action::Renew { shard, expected } | Action::Release { shard, expected } => {
                kv.cas(shard, Some(expected), record, now_ms)
            }
        };
        match written {
            Some(rev) => {
                inst.book.written(&action, rev, now_ms);
                if matches!(action, Action::Claim { .. }) {
                    inst.book.restored(shard_of_action(&action));
                }
            }
            None => inst.book.failed(&action),
        }
    }
}

fn assert_single_owner(instances: &[Instance], now_ms: u64) {
    for shard in 0..SHARDS {
        let serving: Vec<&str> =
            instances.iter().filter(|i| i.alive && i.book.serving(shard, now_ms)).map(|i| i.book.me()).collect();
        assert!(serving.len() <= 1, "shard {shard} answered by {serving:?} at {now_ms} ms");
    }
}

fn served(instances: &[Instance], now_ms: u64) -> Vec<usize> {
    instances.iter().map(|i| (0..SHARDS).filter(|&s| i.alive && i.book.serving(s, now_ms)).count()).collect()
}

/// Three instances, then a fourth joining, one stalling and one crashing; `ttls` are the four
/// instances' `shard_ttl_ms`.
fn run(seed: u64, ttls: [u64; 4]) {
    let longest = *ttls.iter().max().unwrap();
    let mut rng = SeededRng::new(seed);
    let mut kv = Kv { revision: 0, shards: BTreeMap::new(), events: Vec::new() };
    let mut instances: Vec<Instance> =
        ["a", "b", "c"].iter().zip(ttls).map(|(id, ttl)| instance_with_ttl(id, ttl)).collect();
    let mut now_ms = 0;
    let mut advance = |instances: &mut Vec<Instance>, kv: &mut Kv, until_ms: u64, now_ms: &mut u64| {
        while *now_ms < until_ms {
            *now_ms += STEP_MS;
            let members: Vec<String> = instances
                .iter()
                .filter(|i| i.alive && i.stalled_until_ms <= *now_ms)
                .map(|i| i.book.me().into())
                .collect();
            let start = rng.range_u64(0, instances.len() as u64) as usize;
            for k in 0..instances.len() {
                let n = instances.len();
                step(&mut instances[(start + k) % n], kv, &members, *now_ms);
            }
            assert_single_owner(instances, *now_ms);
        }
    };

    // Three instances share the 64 shards evenly.
    advance(&mut instances, &mut kv, 10_000, &mut now_ms);
    let counts = served(&instances, now_ms);
    assert_eq!(counts.iter().sum::<usize>(), SHARDS as usize, "seed {seed}: {counts:?}");
    assert!(counts.iter().all(|&c| (21..=22).contains(&c)), "seed {seed}: uneven {counts:?}");

    // A fourth joins: shards move until each has 16.
    instances.push(instance_with_ttl("d", ttls[3]));
    advance(&mut instances, &mut kv, 25_000, &mut now_ms);
    let counts = served(&instances, now_ms);
    assert_eq!(counts, vec![16; 4], "seed {seed}: after a join");

    // One stalls for longer than the TTL (a GC pause): the others take its shards, and when it
    // wakes it answers for none of them (checked at every step by assert_single_owner).
    let victim = (seed % 4) as usize;
    instances[victim].stalled_until_ms = now_ms + 2 * longest;
    advance(&mut instances, &mut kv, now_ms + 2 * longest - STEP_MS, &mut now_ms);
    assert_eq!(served(&instances, now_ms)[victim], 0, "seed {seed}: a stalled owner still answers");
    let others: usize = served(&instances, now_ms).iter().sum();
    assert_eq!(
        others,
        SHARDS as usize,
        "seed {seed}: the stalled owner's shards did not move: {:?}",
        served(&instances, now_ms)
    );
    advance(&mut instances, &mut kv, now_ms + 15_000, &mut now_ms);
    assert_eq!(served(&instances, now_ms), vec![16; 4], "seed {seed}: after the stall");

    // One crashes: within one TTL (the longest of its own and its successors') every shard is
    // answered again.
    let crashed_at = now_ms;
    instances[victim].alive = false;
    let mut all_back_ms = None;
    while now_ms < crashed_at + 3 * longest {
        advance(&mut instances, &mut kv, now_ms + STEP_MS, &mut now_ms);
        if all_back_ms.is_none() && served(&instances, now_ms).iter().sum::<usize>() == SHARDS as usize {
            all_back_ms = Some(now_ms - crashed_at);
        }
    }
    let back = all_back_ms.expect("shards of a crashed owner never moved");
    assert!(back <= longest, "seed {seed}: took {back} ms");
    advance(&mut instances, &mut kv, now_ms + 15_000, &mut now_ms);
    let counts = served(&instances, now_ms);
    assert_eq!(counts.iter().sum::<usize>(), SHARDS as usize);
    assert!(counts.iter().enumerate().all(|(i, &c)| i == victim || (21..=22).contains(&c)), "{counts:?}");
}

#[test]
fn one_owner_per_shard_through_joins_stalls_and_crashes() {
    for seed in 0..20 {
        run(seed, [TTL_MS; 4]);
    }
}

/// Instances started with different `shard_ttl_ms` (a rolling restart that changes it, or one
/// instance configured apart): an owner answers for 0.7 of *its* TTL after each renewal, so a
/// claimer that waited out 0.9 of its *own*, shorter TTL would answer beside it. Each record
/// carries its writer's TTL and a claimer waits out the longer of the two.
#[test]
fn one_owner_per_shard_when_instances_disagree_on_the_shard_ttl() {
    for seed in 0..8 {
        run(seed, [10_000, 2_000, 3_000, 600]);
    }
}

/// An instance giving shards back (a join, or an uneven split) leaves them to the others for a
/// claim period: claiming them straight back would move them back and forth for ever, each move
/// a replay, and this is what a planning pass run at once on every release would do.
#[test]
fn an_instance_leaves_the_shards_it_gave_back_to_the_others() {
    let mut kv = Kv { revision: 0, shards: BTreeMap::new(), events: Vec::new() };
    let mut a = vec![instance("a")];
    let mut now_ms = 0;
    while now_ms < 5_000 {
        now_ms += STEP_MS;
        step(&mut a[0], &mut kv, &["a".into()], now_ms);
    }
    assert_eq!(served(&a, now_ms), vec![SHARDS as usize]);
    // b and c announce themselves but claim nothing yet (starting slowly): a gives back down to
    // its share and no further, and never claims a shard back meanwhile.
    let members: Vec<String> = ["a", "b", "c"].iter().map(|m| m.to_string()).collect();
    let mut counts = Vec::new();
    let given_back_from_ms = now_ms;
    while now_ms < given_back_from_ms + TTL_MS * 8 / 10 {
        now_ms += STEP_MS;
        step(&mut a[0], &mut kv, &members, now_ms);
        counts.push(served(&a, now_ms)[0]);
    }
    assert!(counts.windows(2).all(|w| w[1] <= w[0]), "a claimed shards back: {counts:?}");
    assert_eq!(counts.last(), Some(&21), "{counts:?}");
}

/// What an instance gave back is barred to it only while the record is still its own release:
/// once another instance has owned and released the shard, nothing can ping-pong and the shard
/// must not sit ownerless for a claim period (a joiner that leaves again at once).
#[test]
fn a_shard_given_back_and_owned_by_another_since_can_be_claimed_at_once() {
    let mut a = ShardBook::new("a", 1, TTL_MS);
    let now = 10_000;
    for m in ["a", "b"] {
        a.observe_member(m, Some(TTL_MS), now);
    }
    a.observe_shard(0, 1, Some(&ShardRecord::owned_by(Some("a".into()), TTL_MS)), now);
    a.written(&Action::Claim { shard: 0, expected: None }, 1, now);
    a.written(&Action::Release { shard: 0, expected: 1 }, 2, now);
    a.observe_shard(0, 2, Some(&ShardRecord::owned_by(None, TTL_MS)), now);
    assert_eq!(a.plan(now + 10), vec![], "a claimed straight back what it gave back");
    // b takes it, then gives it back (a joiner that leaves again): the record is no longer a's
    // release, and b leaves it to a.
    a.observe_shard(0, 3, Some(&ShardRecord::owned_by(Some("b".into()), TTL_MS)), now + 20);
    a.observe_shard(0, 4, Some(&ShardRecord::owned_by(None, TTL_MS)), now + 30);
    assert_eq!(a.plan(now + 40), vec![Action::Claim { shard: 0, expected: Some(4) }]);
}

/// A record that does not say its writer's TTL (an earlier build's) or cannot be read (a later
/// schema) is claimed only after the longest TTL an instance accepts: its owner may answer that
/// long. One that says it is claimed after 0.9 of the longer TTL, the writer's or ours.
#[test]
fn a_record_without_its_writers_ttl_waits_out_the_longest_accepted() {
    use leasehold_per_key::shards::MAX_SHARD_TTL_MS;
    let now = 1_000;
    let mut b = ShardBook::new("b", 3, 2_000);
    b.observe_member("b", Some(2_000), now);
    let earlier_build = ShardRecord { v: 1, owner: Some("a".into()), ttl_ms: None };
    b.observe_shard(0, 1, Some(&earlier_build), now);
    b.observe_unreadable_shard(1, 2, now);
    b.observe_shard(2, 3, Some(&ShardRecord::owned_by(Some("a".into()), 10_000)), now);
    let claims = |b: &mut ShardBook, at: u64| {
        let mut shards: Vec<u32> = b.plan(at).iter().map(shard_of_action).collect();
        shards.sort();
        b.expire_in_flight(u64::MAX); // forget the planned claims: each check starts afresh
        shards
    };
    assert_eq!(claims(&mut b, now + 8_999), Vec::<u32>::new());
    assert_eq!(claims(&mut b, now + 9_000), vec![2]);
    assert_eq!(claims(&mut b, now + MAX_SHARD_TTL_MS * 9 / 10 - 1), vec![2]);
    assert_eq!(claims(&mut b, now + MAX_SHARD_TTL_MS * 9 / 10), vec![0, 1, 2]);
}
