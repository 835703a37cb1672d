//! Linux's fair class as CFS defined it before EEVDF (kernel/sched/fair.c
//! up to 6.5): least virtual runtime first. The Linux model orders fair
//! threads and cgroup entities by it where EEVDF does not decide.

use super::{Job, Scheduler};
use std::cmp::Ordering;

/// Linux's fair class as CFS defined it: the runnable task with the least
/// virtual runtime (CPU time scaled by 1024 / weight) runs, for a slice of
/// the scheduling period (6 ms, or 0.75 ms per task when more are
/// runnable) shared by the runnable tasks; a waking task is placed no
/// further back than half a period behind the least virtual runtime.
/// Leaves out: EEVDF's lag and virtual deadlines (Linux 6.6+ picks by
/// eligibility and deadline; over whole slices both share by weight),
/// wake-up preemption granularity, cgroup hierarchies, per-CPU run queues
/// and load balancing (the run queue here is global).
#[derive(Clone, Debug)]
pub struct Cfs {
    /// Weight per task (1024 = nice 0).
    pub weights: Vec<u64>,
    vruntime: Vec<u64>,
    min_vruntime: u64,
}

/// The scheduling period and the least slice of CFS's defaults (for a
/// 2-CPU host the kernel scales them by 1 + log2(CPUs): 12 ms and 1.5 ms;
/// the simulator keeps the base values unless told).
pub const CFS_PERIOD_NS: u64 = 6_000_000;
pub const CFS_MIN_SLICE_NS: u64 = 750_000;

impl Cfs {
    /// A task joining the queue: it may not bank more than half a period
    /// of virtual runtime from sleeping.
    pub(super) fn place(&mut self, task: usize) {
        let floor = self.min_vruntime.saturating_sub(CFS_PERIOD_NS / 2);
        let v = &mut self.vruntime[task];
        *v = (*v).max(floor);
    }

    pub fn new(weights: Vec<u64>) -> Cfs {
        let n = weights.len();
        Cfs {
            weights,
            vruntime: vec![0; n],
            min_vruntime: 0,
        }
    }
}

impl Scheduler for Cfs {
    fn name(&self) -> &'static str {
        "cfs"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        self.vruntime[a.task]
            .cmp(&self.vruntime[b.task])
            .then(a.queued_seq.cmp(&b.queued_seq))
    }
    fn slice_ns(&self, _job: &Job, runnable: usize) -> Option<u64> {
        Some((CFS_PERIOD_NS / runnable.max(1) as u64).max(CFS_MIN_SLICE_NS))
    }
    fn wake(&mut self, job: &Job) {
        self.place(job.task);
    }
    fn charge(&mut self, _cpu: usize, job: &Job, ran_ns: u64) {
        let w = self.weights[job.task].max(1);
        self.vruntime[job.task] += ran_ns * 1024 / w;
    }
    fn before_dispatch(&mut self, runnable: &[Job]) {
        // The least virtual runtime of the runnable tasks, and it only
        // moves forward: a sleeper cannot bank CPU time it did not use.
        if let Some(least) = runnable.iter().map(|j| self.vruntime[j.task]).min() {
            self.min_vruntime = self.min_vruntime.max(least);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::simulate;
    use crate::task::PeriodicTask;
    use crate::testutil::MS;

    /// CFS shares a CPU by weight: two always-runnable tasks of weight
    /// 1024 and 2048 get a third and two thirds of it.
    #[test]
    fn cfs_shares_a_cpu_by_weight() {
        let hog = |name: &str| PeriodicTask::new(name, 10_000 * MS, 10_000 * MS, 0);
        let ts = vec![hog("light"), hog("heavy")];
        let mut cfs = Cfs::new(vec![1024, 2048]);
        let o = simulate(&ts, 1, &mut cfs, 3_000 * MS, 1);
        let (a, b) = (o.tasks[0].cpu_ns as f64, o.tasks[1].cpu_ns as f64);
        assert_eq!(o.busy_ns, 3_000 * MS);
        assert!((b / (a + b) - 2.0 / 3.0).abs() < 0.01, "heavy got {:.4}", b / (a + b));
        // Equal weights on two CPUs with three tasks: a third of 2 CPUs each.
        let ts = vec![hog("x"), hog("y"), hog("z")];
        let o = simulate(&ts, 2, &mut Cfs::new(vec![1024; 3]), 3_000 * MS, 1);
        for t in &o.tasks {
            let share = t.cpu_ns as f64 / (3_000 * MS) as f64;
            assert!((share - 2.0 / 3.0).abs() < 0.02, "{share}");
        }
    }
}
