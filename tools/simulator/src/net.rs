//! The simulated network: per-link latency, and seeded loss, duplication, reordering and delay.

use leasehold_core::rng::SeededRng;

/// Which way a message travels (partitions cut both directions of a link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Pod ↔ its DC manager (index of the pod slot).
    PodDc(usize),
    /// DC manager ↔ coordinator / KV (index of the DC).
    DcCoord(usize),
}

#[derive(Clone, Debug, Default)]
pub struct NetFaults {
    pub loss: f64,
    pub duplicate: f64,
    /// Extra uniformly random delay up to this many ms (reorders messages).
    pub extra_delay_ms: u64,
    /// Extra delay of every answer from the leader keys (slow compare-and-set replies).
    pub slow_leader_replies_ms: u64,
    /// The coordinator's ledger writes go unanswered and land this many ms later (0: answered).
    pub unanswered_ledger_writes_ms: u64,
}

#[derive(Clone, Debug)]
pub struct Network {
    pub pod_dc_ms: (u64, u64),
    pub dc_coord_ms: (u64, u64),
    pub faults: NetFaults,
    pub cut_pods: Vec<bool>,
    pub cut_dcs: Vec<bool>,
    /// Per DC: its managers are disconnected from NATS until this instant (virtual ns).
    pub dc_reconnect_at: Vec<u64>,
}

impl Network {
    pub fn new(pods: usize, dcs: usize) -> Self {
        Network {
            pod_dc_ms: (1, 3),
            dc_coord_ms: (40, 120),
            faults: NetFaults::default(),
            cut_pods: vec![false; pods],
            cut_dcs: vec![false; dcs],
            dc_reconnect_at: vec![0; dcs],
        }
    }

    fn is_cut(&self, link: Link) -> bool {
        match link {
            Link::PodDc(p) => self.cut_pods.get(p).copied().unwrap_or(false),
            Link::DcCoord(d) => self.cut_dcs.get(d).copied().unwrap_or(false),
        }
    }

    /// Delivery delays (ns) for one send: empty when lost or cut, two entries when duplicated.
    pub fn deliveries(&self, link: Link, rng: &mut SeededRng) -> Vec<u64> {
        if self.is_cut(link) || rng.chance(self.faults.loss) {
            return Vec::new();
        }
        let (lo, hi) = match link {
            Link::PodDc(_) => self.pod_dc_ms,
            Link::DcCoord(_) => self.dc_coord_ms,
        };
        let one = |rng: &mut SeededRng| {
            let ms = rng.range_u64(lo, hi) + rng.range_u64(0, self.faults.extra_delay_ms);
            ms * 1_000_000 + rng.range_u64(0, 999_999)
        };
        let mut out = vec![one(rng)];
        if rng.chance(self.faults.duplicate) {
            out.push(one(rng));
        }
        out
    }
}
