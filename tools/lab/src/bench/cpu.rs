//! CPU time by component, for `bench keys`'s cost per decision: where the two cores went.
//! Read from `/proc/<pid>/stat` (user + system time); on other systems every reading is `None`
//! and the bench reports no CPU split.

use serde::Serialize;

/// User + system CPU seconds `pid` has used so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_seconds_of_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// User + system CPU seconds in the text of a `/proc/…/stat` file (a process's or a thread's).
pub fn cpu_seconds_of_stat(stat: &str) -> Option<f64> {
    // Fields after the command (which may hold spaces) closed by the last ')': utime is the 12th.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant of the running system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// The first process whose command name is `comm` (e.g. the machine's `redis-server`).
pub fn pid_named(comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        (name.trim() == comm).then_some(pid)
    })
}

/// Named groups of processes, read at the start and at the end of a load.
pub struct CpuMeter {
    groups: Vec<(&'static str, Vec<u32>, f64)>,
}

/// Microseconds of CPU per answered request, by component.
#[derive(Clone, Debug, Serialize)]
pub struct CpuPerDecision {
    pub component: &'static str,
    pub cpu_us: f64,
}

impl CpuMeter {
    /// Start counting for these groups (a group's processes must outlive the load).
    pub fn start(groups: Vec<(&'static str, Vec<u32>)>) -> Self {
        let total = |pids: &[u32]| pids.iter().filter_map(|&p| cpu_seconds(p)).sum::<f64>();
        CpuMeter { groups: groups.into_iter().map(|(name, pids)| (name, pids.clone(), total(&pids))).collect() }
    }

    /// CPU seconds used since [`CpuMeter::start`], by group.
    pub fn seconds(&self) -> Vec<(&'static str, f64)> {
        let total = |pids: &[u32]| pids.iter().filter_map(|&p| cpu_seconds(p)).sum::<f64>();
        self.groups.iter().map(|(name, pids, before)| (*name, total(pids) - before)).collect()
    }

    /// CPU per decision since [`CpuMeter::start`], by group, and in total.
    pub fn per_decision(&self, decisions: usize) -> Vec<CpuPerDecision> {
        CpuPerDecision::of_seconds(self.seconds(), decisions)
    }
}

impl CpuPerDecision {
    /// CPU seconds by group over `decisions`: microseconds per decision by group, and in total.
    pub fn of_seconds(seconds: impl IntoIterator<Item = (&'static str, f64)>, decisions: usize) -> Vec<CpuPerDecision> {
        let mut out: Vec<CpuPerDecision> = seconds
            .into_iter()
            .map(|(name, used)| CpuPerDecision { component: name, cpu_us: round(used * 1e6 / decisions.max(1) as f64) })
            .collect();
        let total = out.iter().map(|c| c.cpu_us).sum();
        out.push(CpuPerDecision { component: "total", cpu_us: round(total) });
        out
    }
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
