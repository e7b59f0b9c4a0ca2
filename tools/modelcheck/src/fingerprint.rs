//! A 128-bit fingerprint of a state's canonical encoding (XXH3-128), for the visited set: a
//! collision would silently prune a state, so the hash is a well-studied one, not a home-made one.
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
        xxhash_rust::xxh3::xxh3_128(buf.as_bytes())
    })
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
