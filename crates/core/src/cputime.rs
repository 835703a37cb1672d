//! The whole host's CPU time from the "cpu" line of /proc/stat (all CPUs
//! summed, ns; the kernel counts in ticks of 1/USER_HZ s), read in one
//! place for the lab's run record, the scheduler recorder's host-busy
//! figure and the observe accuracy test.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuTimes {
    /// user + nice.
    pub user_ns: u64,
    pub system_ns: u64,
    pub irq_ns: u64,
    pub softirq_ns: u64,
    /// Time the hypervisor ran something else while a vCPU wanted to run.
    pub steal_ns: u64,
    /// idle + iowait.
    pub idle_ns: u64,
}

impl CpuTimes {
    /// Now, or None where /proc/stat cannot be read.
    pub fn now() -> Option<CpuTimes> {
        CpuTimes::of_line("cpu")
    }

    /// One CPU's times now (its `cpuN` line of /proc/stat).
    pub fn of_cpu(cpu: usize) -> Option<CpuTimes> {
        CpuTimes::of_line(&format!("cpu{cpu}"))
    }

    fn of_line(name: &str) -> Option<CpuTimes> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(name))?;
        let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let ns = |i: usize| v.get(i).copied().unwrap_or(0) * 1_000_000_000 / hz;
        Some(CpuTimes {
            user_ns: ns(0) + ns(1),
            system_ns: ns(2),
            idle_ns: ns(3) + ns(4),
            irq_ns: ns(5),
            softirq_ns: ns(6),
            steal_ns: ns(7),
        })
    }

    /// CPU time spent running anything on this host (user, system,
    /// interrupts); steal is not counted.
    pub fn busy_ns(&self) -> u64 {
        self.user_ns + self.system_ns + self.irq_ns + self.softirq_ns
    }

    /// What was spent between `self` (earlier) and `later`.
    pub fn until(&self, later: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_ns: later.user_ns.saturating_sub(self.user_ns),
            system_ns: later.system_ns.saturating_sub(self.system_ns),
            irq_ns: later.irq_ns.saturating_sub(self.irq_ns),
            softirq_ns: later.softirq_ns.saturating_sub(self.softirq_ns),
            steal_ns: later.steal_ns.saturating_sub(self.steal_ns),
            idle_ns: later.idle_ns.saturating_sub(self.idle_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_only_grows() {
        let a = CpuTimes::now().expect("/proc/stat on Linux");
        let b = CpuTimes::now().unwrap();
        let d = a.until(&b);
        assert!(b.busy_ns() + b.idle_ns >= a.busy_ns() + a.idle_ns);
        assert!(d.busy_ns() <= b.busy_ns());
    }
}
