//! Each service of `bench control-plane` on a tokio runtime of its own, with named threads, so
//! that the CPU each one uses can be read per thread group (`/proc/self/task/*/stat`) while they
//! all share one process.

use tokio::runtime::{Builder, Runtime};

/// Worker threads per service (the machine's 2 cores).
const WORKERS: usize = 2;

/// A runtime whose threads are all named `name` (at most 15 bytes: the kernel's `comm`).
pub(super) struct NamedRuntime {
    pub name: String,
    pub rt: Runtime,
}

impl NamedRuntime {
    pub(super) fn new(name: &str) -> Result<Self, String> {
        let rt = Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the {name} runtime: {e}"))?;
        Ok(NamedRuntime { name: name.into(), rt })
    }

    /// User + system CPU seconds its threads have used so far (`None` off Linux).
    pub(super) fn cpu_seconds(&self) -> Option<f64> {
        threads_cpu_seconds(&self.name)
    }

    /// Stop its tasks without waiting (callable from async code, unlike dropping it).
    pub(super) fn stop(self) {
        self.rt.shutdown_background();
    }
}

/// CPU seconds used so far by this process's threads named `name`.
pub(super) fn threads_cpu_seconds(name: &str) -> Option<f64> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        *total.get_or_insert(0.0) += super::cpu::cpu_seconds_of_stat(&stat)?;
    }
    total
}
