//! A 128-bit fingerprint of a state's canonical encoding, for the visited set.
//!
//! The cores keep some fields private; the encoding uses what they expose (ledgers, views,
//! applied leases, records; the whole `Leadership` state through its `Debug`) plus the driver's
//! [`Shadow`](crate::state::Shadow) of what it saw them do (send times, accepted DC leases, acks)
//! and what it holds for them (armed faults, held answers). Two states with equal fingerprints are treated as
//! one: a coarser encoding could only merge states, never report a false violation.

use crate::config::ModelConfig;
use crate::model;
use crate::state::State;
use std::cell::RefCell;
use std::fmt::{self, Write};

thread_local! {
    static BUFFER: RefCell<String> = RefCell::new(String::with_capacity(16 * 1024));
}

pub fn fingerprint(cfg: &ModelConfig, s: &State) -> u128 {
    BUFFER.with(|b| {
        let mut buf = b.borrow_mut();
        buf.clear();
        encode(cfg, s, &mut *buf).expect("writing to a String never fails");
        hash128(buf.as_bytes())
    })
}

/// Two independent 64-bit multiply-xorshift streams over 8-byte words (fast, well mixed).
fn hash128(bytes: &[u8]) -> u128 {
    const K1: u64 = 0x9e37_79b9_7f4a_7c15;
    const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let (mut a, mut b) = (0x243f_6a88_85a3_08d3u64 ^ bytes.len() as u64, 0x1319_8a2e_0370_7344u64);
    let mix = |h: u64, w: u64, k: u64| {
        let x = (h ^ w).wrapping_mul(k);
        x ^ (x >> 29)
    };
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        a = mix(a, w, K1);
        b = mix(b.rotate_left(23), w, K2);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    let w = u64::from_le_bytes(tail);
    a = mix(mix(a, w, K1), 0, K2);
    b = mix(mix(b, w, K2), 0, K1);
    ((a as u128) << 64) | b as u128
}

fn encode(cfg: &ModelConfig, s: &State, w: &mut dyn Write) -> fmt::Result {
    let real = s.real_ns(cfg.tick_ms);
    write!(
        w,
        "t{}|{:?}|{}|{:?}|{}|{:?}|",
        s.tick, s.budget, s.config_changed, s.limit_lowered_at_ns, s.demand_shifted, s.kv
    )?;
    for p in &s.pods {
        write!(w, "P{}:{:?}:{:?}:{:?}:", p.restarts, p.clock, p.paused_until, p.shadow)?;
        model::write_pod_view(&p.core, w)?;
    }
    for m in &s.managers {
        write!(w, "M{}:{}:{:?}:{}:{:?}:", m.alive, m.rolled, m.clock, m.term_started_ns, m.shadow)?;
        if m.alive {
            write!(w, "{:?}:", m.elector)?;
        }
        if let Some(core) = &m.core {
            model::write_manager_view(core, m.clock.local(real), w)?;
        }
    }
    for c in &s.coords {
        write!(w, "C{}:{:?}:{}:{}:{:?}:", c.alive, c.paused_until, c.write_on_wake, c.record_rev, c.clock)?;
        if c.alive {
            write!(w, "{:?}:", c.elector)?;
        }
        if let Some(core) = &c.core {
            model::write_coordinator_view(core, w)?;
        }
    }
    for m in &s.net {
        write!(w, "N{m:?}")?;
    }
    Ok(())
}
