//! Xen's RTDS after xen/common/sched_rt.c: a budget per period for each
//! vCPU, earliest deadline first among those with budget, no extra time.

use super::{Job, Scheduler};
use std::cmp::Ordering;

/// Xen's RTDS (and, per task, Linux SCHED_DEADLINE's server): each vCPU
/// has a budget per period; vCPUs with budget left run by earliest current
/// deadline (the end of their period); a vCPU that used its budget waits
/// for the next period even if a CPU is idle (no extra time).
/// Leaves out: RTDS's extratime flag, its 10 us accounting granularity and
/// per-CPU run queues.
#[derive(Clone, Debug)]
pub struct Rtds {
    /// (budget, period) per task.
    pub servers: Vec<(u64, u64)>,
    left: Vec<u64>,
    deadline: Vec<u64>,
}

impl Rtds {
    pub fn new(servers: Vec<(u64, u64)>) -> Rtds {
        let left = servers.iter().map(|s| s.0).collect();
        let deadline = servers.iter().map(|s| s.1).collect();
        Rtds {
            servers,
            left,
            deadline,
        }
    }
}

impl Scheduler for Rtds {
    fn name(&self) -> &'static str {
        "rtds"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        self.deadline[a.task]
            .cmp(&self.deadline[b.task])
            .then(a.queued_seq.cmp(&b.queued_seq))
    }
    fn slice_ns(&self, job: &Job, _runnable: usize) -> Option<u64> {
        Some(self.left[job.task])
    }
    fn eligible(&self, job: &Job) -> bool {
        self.left[job.task] > 0
    }
    fn charge(&mut self, _cpu: usize, job: &Job, ran_ns: u64) {
        self.left[job.task] = self.left[job.task].saturating_sub(ran_ns);
    }
    fn next_timer_ns(&self) -> Option<u64> {
        self.deadline.iter().copied().min()
    }
    fn on_timer(&mut self, now: u64, _running: &[Option<Job>]) {
        for (i, &(budget, period)) in self.servers.iter().enumerate() {
            while self.deadline[i] <= now {
                self.deadline[i] += period;
                self.left[i] = budget;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::simulate;
    use crate::task::PeriodicTask;
    use crate::testutil::MS;

    /// RTDS gives a busy vCPU exactly its budget per period, even with the
    /// CPU otherwise idle, and runs the earliest deadline first.
    #[test]
    fn rtds_gives_each_vcpu_its_budget_per_period() {
        let hog = |name: &str| PeriodicTask::new(name, 10_000 * MS, 10_000 * MS, 0);
        let mut r = Rtds::new(vec![(2 * MS, 10 * MS), (3 * MS, 5 * MS)]);
        let o = simulate(&[hog("a"), hog("b")], 1, &mut r, 1_000 * MS, 1);
        assert_eq!(o.tasks[0].cpu_ns, 200 * MS, "2 ms every 10 ms");
        assert_eq!(o.tasks[1].cpu_ns, 600 * MS, "3 ms every 5 ms");
        assert_eq!(o.busy_ns, 800 * MS, "no extra time: 20 % of the CPU idles");
    }
}
