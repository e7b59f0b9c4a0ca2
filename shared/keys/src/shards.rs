//! Shard ownership for per-key limits: each of `S` shards is owned by one instance at a time
//! through a fenced lease in a KV bucket. Sans I/O: the driver feeds what the bucket's watch
//! showed and what its writes returned; [`ShardBook::plan`] says what to write next.
//!
//! The safety argument (no two owners answer for a shard at once):
//! * an owner answers for a shard only while its last successful write of the shard's record
//!   was *sent* less than 0.7 · `ttl` ago ([`ShardBook::serving`]); it rewrites it every `ttl`/4,
//!   and every record it writes carries its `ttl` ([`ShardRecord::ttl_ms`]);
//! * another instance claims a shard only after it has seen the record unchanged for 0.9 times
//!   the longer of its own `ttl` and the one the record carries (a record without one: the
//!   longest accepted, [`MAX_SHARD_TTL_MS`]) on its own clock, and the record's revision must
//!   still match (compare-and-set).
//!
//! The claimer's wait starts no earlier than the write it saw landed, which is after the owner
//! sent it, so it ends after the owner stopped answering as long as the two clocks' rates differ
//! by less than 22% (0.7 / 0.9), whatever `ttl` each instance was started with. A crashed owner's shards are claimed within 0.9 · `ttl` of its
//! last renewal, so within one `ttl` of the crash plus a planning pass. A released shard is
//! written with no owner after its owner stopped answering and flushed its state, so it can be
//! claimed at once, by anyone but the instance that gave it back, which leaves it to the others
//! for a claim period (else an uneven split would move a shard back and forth).

use std::collections::BTreeMap;

/// Shards released per planning pass while rebalancing (a joining instance fills up in a few passes).
pub const RELEASES_PER_PASS: usize = 4;

/// Longest `shard_ttl_ms` an instance accepts; a shard record without a TTL (written by an
/// earlier build, or unreadable) counts as written with it.
pub const MAX_SHARD_TTL_MS: u64 = 600_000;

/// The value of `shard.<n>` in the shards bucket (a wire message).
pub use crate::wire::ShardRecord;

/// What the driver should write next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create or take over `shard`: compare-and-set against `expected` (`None`: key absent).
    Claim { shard: u32, expected: Option<u64> },
    /// Rewrite our own record to keep the lease.
    Renew { shard: u32, expected: u64 },
    /// Stop answering, flush the shard's state, then write it with no owner.
    Release { shard: u32, expected: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    revision: u64,
    has_owner: bool,
    changed_at_ms: u64,
    /// The TTL the record's writer answers by.
    ttl_ms: u64,
}

#[derive(Clone, Copy, Debug)]
struct Held {
    revision: u64,
    /// When the last successful write was sent.
    written_at_ms: u64,
    /// State restored from the persistence stream; nothing is answered before.
    restored: bool,
}

#[derive(Clone, Debug)]
pub struct ShardBook {
    me: String,
    shards: u32,
    ttl_ms: u64,
    seen: BTreeMap<u32, Seen>,
    owners: BTreeMap<u32, String>,
    /// Per member: when its record last changed, and the TTL it renews by.
    members: BTreeMap<String, (u64, u64)>,
    held: BTreeMap<u32, Held>,
    in_flight: BTreeMap<u32, u64>,
    /// Shards this instance gave back: (the release's revision, when), left to the others for a
    /// claim period while the record is still that release.
    given_back: BTreeMap<u32, (u64, u64)>,
}

impl ShardBook {
    pub fn new(me: &str, shards: u32, ttl_ms: u64) -> Self {
        ShardBook {
            me: me.to_string(),
            shards: shards.max(1),
            ttl_ms: ttl_ms.max(1),
            seen: BTreeMap::new(),
            owners: BTreeMap::new(),
            members: BTreeMap::new(),
            held: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            given_back: BTreeMap::new(),
        }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// The watch showed `shard` at `revision` with `record` (`None`: deleted or unreadable, which
    /// counts as ownerless). Returns true when this takes a shard away from us.
    pub fn observe_shard(&mut self, shard: u32, revision: u64, record: Option<&ShardRecord>, now_ms: u64) -> bool {
        let owner = record.and_then(|r| r.owner.clone());
        let has_owner = owner.is_some();
        let ttl_ms = record.and_then(|r| r.ttl_ms).unwrap_or(MAX_SHARD_TTL_MS);
        self.observe(shard, revision, owner, has_owner, ttl_ms, now_ms)
    }

    /// The watch showed `shard` at `revision` with a value this build cannot read (a later
    /// schema): someone may own it, by a TTL unknown here, so it counts as owned by an unknown
    /// instance with [`MAX_SHARD_TTL_MS`]. Returns true when this takes a shard away from us.
    pub fn observe_unreadable_shard(&mut self, shard: u32, revision: u64, now_ms: u64) -> bool {
        self.observe(shard, revision, None, true, MAX_SHARD_TTL_MS, now_ms)
    }

    fn observe(
        &mut self,
        shard: u32,
        revision: u64,
        owner: Option<String>,
        has_owner: bool,
        ttl_ms: u64,
        now_ms: u64,
    ) -> bool {
        if shard >= self.shards || self.seen.get(&shard).is_some_and(|s| s.revision >= revision) {
            return false;
        }
        let owner_is_me = owner.as_deref() == Some(self.me.as_str());
        // Written since our release: whoever gives it back next, it is not ours to leave alone.
        if self.given_back.get(&shard).is_some_and(|(released, _)| revision > *released) {
            self.given_back.remove(&shard);
        }
        self.seen.insert(shard, Seen { revision, has_owner, changed_at_ms: now_ms, ttl_ms });
        match owner {
            Some(o) => self.owners.insert(shard, o),
            None => self.owners.remove(&shard),
        };
        // Someone else wrote after our last write: our lease is gone.
        let lost = self.held.get(&shard).is_some_and(|h| revision > h.revision && !owner_is_me);
        if lost {
            self.held.remove(&shard);
        }
        lost
    }

    /// An instance announced itself (its `member.<id>` record changed) at `now_ms`, with the TTL
    /// it renews by (`None`: an earlier build's record, taken as ours).
    pub fn observe_member(&mut self, id: &str, ttl_ms: Option<u64>, now_ms: u64) {
        self.members.insert(id.to_string(), (now_ms, ttl_ms.unwrap_or(self.ttl_ms)));
    }

    /// An instance left (its member record was deleted).
    pub fn forget_member(&mut self, id: &str) {
        self.members.remove(id);
    }

    /// How long a record written by this instance must stay unchanged before its shard may be
    /// claimed (and how long this instance waits before claiming back what it gave back).
    pub fn claim_after_ms(&self) -> u64 {
        self.claim_after_for(self.ttl_ms)
    }

    /// How long a record written by an instance with `ttl_ms` must stay unchanged before we may
    /// claim its shard (and how long that instance counts as a member after its last heartbeat):
    /// 0.9 of the longer of its TTL and ours.
    pub fn claim_after_for(&self, ttl_ms: u64) -> u64 {
        ttl_ms.max(self.ttl_ms).saturating_mul(9) / 10
    }

    /// Instances heard within [`ShardBook::claim_after_for`] their TTL, always including this one.
    pub fn live_members(&self, now_ms: u64) -> Vec<String> {
        let mut live: Vec<String> = self
            .members
            .iter()
            .filter(|(id, &(at, ttl))| *id == &self.me || at.saturating_add(self.claim_after_for(ttl)) > now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        if !live.contains(&self.me) {
            live.push(self.me.clone());
        }
        live.sort();
        live
    }

    /// A write was sent at `sent_at_ms` and landed at `revision`.
    pub fn written(&mut self, action: &Action, revision: u64, sent_at_ms: u64) {
        self.in_flight.remove(&shard_of_action(action));
        match *action {
            Action::Claim { shard, .. } => {
                self.held.insert(shard, Held { revision, written_at_ms: sent_at_ms, restored: false });
            }
            Action::Renew { shard, .. } => {
                if let Some(h) = self.held.get_mut(&shard) {
                    h.revision = revision;
                    h.written_at_ms = sent_at_ms;
                }
            }
            Action::Release { shard, .. } => {
                self.held.remove(&shard);
                self.given_back.insert(shard, (revision, sent_at_ms));
            }
        }
    }

    /// A write failed, conflicted or has an unknown outcome: the shard is not ours (a renew that
    /// did not land stops answering at once; an unknown claim is retried after the watch shows it).
    pub fn failed(&mut self, action: &Action) {
        let shard = shard_of_action(action);
        self.in_flight.remove(&shard);
        self.held.remove(&shard);
    }

    /// The shard's persisted state is loaded: it may be answered from now on.
    pub fn restored(&mut self, shard: u32) {
        if let Some(h) = self.held.get_mut(&shard) {
            h.restored = true;
        }
    }

    /// Whether this instance may answer for `shard` at `now_ms`.
    pub fn serving(&self, shard: u32, now_ms: u64) -> bool {
        now_ms < self.serving_until_ms(shard)
    }

    /// Until when this instance may answer for `shard` (0: not at all).
    pub fn serving_until_ms(&self, shard: u32) -> u64 {
        self.held.get(&shard).filter(|h| h.restored).map_or(0, |h| h.written_at_ms + self.ttl_ms * 7 / 10)
    }

    /// The revision of our last write of a held shard.
    pub fn held_revision(&self, shard: u32) -> Option<u64> {
        self.held.get(&shard).map(|h| h.revision)
    }

    /// The record to write for `action`.
    pub fn record_for(&self, action: &Action) -> ShardRecord {
        match action {
            Action::Claim { .. } | Action::Renew { .. } => ShardRecord::owned_by(Some(self.me.clone()), self.ttl_ms),
            Action::Release { .. } => ShardRecord::owned_by(None, self.ttl_ms),
        }
    }

    /// Shards held (restored or not).
    pub fn held(&self) -> Vec<u32> {
        self.held.keys().copied().collect()
    }

    /// The owner the watch last showed for `shard`.
    pub fn owner(&self, shard: u32) -> Option<&str> {
        self.owners.get(&shard).map(String::as_str)
    }

    /// Shards each live instance owns, by the watch.
    pub fn counts(&self, now_ms: u64) -> BTreeMap<String, usize> {
        let mut counts: BTreeMap<String, usize> = self.live_members(now_ms).into_iter().map(|m| (m, 0)).collect();
        for o in self.owners.values() {
            if let Some(c) = counts.get_mut(o) {
                *c += 1;
            }
        }
        counts.insert(self.me.clone(), self.held.len());
        counts
    }

    /// The writes to send now: renewals first, then at most one release or a few claims.
    pub fn plan(&mut self, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        for (&shard, h) in &self.held {
            if !self.in_flight.contains_key(&shard) && now_ms.saturating_sub(h.written_at_ms) >= self.ttl_ms / 4 {
                actions.push(Action::Renew { shard, expected: h.revision });
            }
        }
        let counts = self.counts(now_ms);
        let n = counts.len() as u32;
        let floor = (self.shards / n) as usize;
        let ceil = self.shards.div_ceil(n) as usize;
        let mine = self.held.len() + self.in_flight.keys().filter(|s| !self.held.contains_key(s)).count();
        let someone_short = counts.iter().any(|(m, &c)| m != &self.me && c < floor);
        if self.held.len() > ceil || (self.held.len() > floor && someone_short) {
            // Give back the held shards we rank lowest for (a few per pass), so the choice is stable.
            let excess = self.held.len() - if self.held.len() > ceil { ceil } else { floor };
            let mut giving: Vec<(u32, u64)> = self
                .held
                .iter()
                .filter(|(s, h)| !self.in_flight.contains_key(s) && h.restored)
                .filter(|(s, _)| !actions.iter().any(|a| shard_of_action(a) == **s))
                .map(|(&s, h)| (s, h.revision))
                .collect();
            giving.sort_by_key(|(s, _)| rank(&self.me, *s));
            giving.truncate(excess.min(RELEASES_PER_PASS));
            actions.extend(giving.into_iter().map(|(shard, expected)| Action::Release { shard, expected }));
        } else if mine < ceil {
            // What we gave back is the others' for a claim period (unless we are alone): taking it
            // straight back would move it back and forth.
            let claim_after = self.claim_after_ms();
            self.given_back.retain(|_, (_, at)| *at + claim_after > now_ms);
            let alone = n == 1;
            let mut free: Vec<(u32, Option<u64>)> = (0..self.shards)
                .filter(|s| !self.held.contains_key(s) && !self.in_flight.contains_key(s))
                .filter(|s| alone || !self.given_back.contains_key(s))
                .filter_map(|s| match self.seen.get(&s) {
                    None => Some((s, None)),
                    Some(seen) if !seen.has_owner => Some((s, Some(seen.revision))),
                    // Unchanged for its writer's TTL (ours too: a renewal whose answer was lost and
                    // landed late).
                    Some(seen) if seen.changed_at_ms.saturating_add(self.claim_after_for(seen.ttl_ms)) <= now_ms => {
                        Some((s, Some(seen.revision)))
                    }
                    Some(_) => None,
                })
                .collect();
            free.sort_by_key(|(s, _)| std::cmp::Reverse(rank(&self.me, *s)));
            free.truncate(ceil - mine);
            actions.extend(free.into_iter().map(|(shard, expected)| Action::Claim { shard, expected }));
        }
        for a in &actions {
            self.in_flight.insert(shard_of_action(a), now_ms);
        }
        actions
    }

    /// Clear an in-flight mark older than `ttl` (a write whose answer never came).
    pub fn expire_in_flight(&mut self, now_ms: u64) {
        let ttl = self.ttl_ms;
        self.in_flight.retain(|_, at| *at + ttl > now_ms);
    }
}

pub fn shard_of_action(a: &Action) -> u32 {
    match *a {
        Action::Claim { shard, .. } | Action::Renew { shard, .. } | Action::Release { shard, .. } => shard,
    }
}

/// Rendezvous rank of `shard` for `member`: instances prefer different shards, so simultaneous
/// claims rarely collide, and the same instance keeps preferring the same ones.
fn rank(member: &str, shard: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.as_bytes().iter().chain(&shard.to_le_bytes()) {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}
