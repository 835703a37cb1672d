//! The textbook policies on one global run queue: SCHED_FIFO and SCHED_RR
//! (fixed priorities, as kernel/sched/rt.c picks) and global EDF
//! (SCHED_DEADLINE's dispatch rule, kernel/sched/deadline.c, without its
//! server): what response-time and utilisation analysis reason about.

use super::{Job, Scheduler};
use std::cmp::Ordering;

/// SCHED_FIFO: the highest priority runs, first come first served within
/// a priority; a preempted job keeps its place at the head of its level.
/// Leaves out: Linux's real-time throttling (95 % by default) and push/pull
/// migration costs.
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedPriority;

impl Scheduler for FixedPriority {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        b.priority.cmp(&a.priority).then(a.queued_seq.cmp(&b.queued_seq))
    }
}

/// SCHED_RR: fixed priorities with a time slice within a priority
/// (`sched_rr_timeslice_ms`, 100 ms by default; the lab sets it per run).
/// Leaves out the same as [`FixedPriority`].
#[derive(Clone, Copy, Debug)]
pub struct RoundRobin {
    pub slice_ns: u64,
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        FixedPriority.order(a, b)
    }
    fn slice_ns(&self, _job: &Job, _runnable: usize) -> Option<u64> {
        Some(self.slice_ns)
    }
}

/// Earliest deadline first (SCHED_DEADLINE's dispatch rule, Xen RTDS's
/// ordering), global on m CPUs. Leaves out SCHED_DEADLINE's constant
/// bandwidth server (budget enforcement and throttling) and its admission
/// test.
#[derive(Clone, Copy, Debug, Default)]
pub struct Edf;

impl Scheduler for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        a.abs_deadline_ns
            .cmp(&b.abs_deadline_ns)
            .then(a.queued_seq.cmp(&b.queued_seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::simulate;
    use crate::task::{hyperperiod, response_time, PeriodicTask};
    use crate::testutil::{set, MS};

    /// With synchronous releases (the critical instant) the worst response
    /// of every task under fixed priorities is exactly what response-time
    /// analysis predicts.
    #[test]
    fn fixed_priority_responses_equal_response_time_analysis() {
        let ts = set(&[(1, 4), (2, 6), (3, 12)]);
        let o = simulate(&ts, 1, &mut FixedPriority, 10 * hyperperiod(&ts), 1);
        for (i, t) in o.tasks.iter().enumerate() {
            assert_eq!(Some(t.worst_response_ns), response_time(&ts, i), "task {i}");
            assert_eq!(t.deadline_misses, 0);
            assert_eq!(t.completed, t.released);
        }
    }

    /// EDF meets every deadline of an implicit-deadline set up to
    /// utilisation 1 on one CPU, and misses once it is exceeded.
    #[test]
    fn edf_meets_every_deadline_up_to_utilisation_one() {
        let full = set(&[(1, 4), (2, 6), (5, 12)]);
        let u: f64 = full.iter().map(|t| t.utilisation()).sum();
        assert!((u - 1.0).abs() < 1e-12);
        let h = 20 * hyperperiod(&full);
        let o = simulate(&full, 1, &mut Edf, h, 1);
        assert!(o.tasks.iter().all(|t| t.deadline_misses == 0), "{:?}", o.tasks);
        assert_eq!(o.busy_ns, h, "U = 1 keeps the CPU busy all along");
        let over = set(&[(1, 4), (2, 6), (6, 12)]);
        let o = simulate(&over, 1, &mut Edf, h, 1);
        assert!(o.tasks.iter().map(|t| t.deadline_misses).sum::<u64>() > 0);
    }

    /// Within one priority, SCHED_RR hands the CPU over at every slice end;
    /// SCHED_FIFO lets the first job finish.
    #[test]
    fn round_robin_rotates_at_slice_ends_and_fifo_does_not() {
        let two = vec![
            PeriodicTask::new("a", 30 * MS, 1000 * MS, 1),
            PeriodicTask::new("b", 30 * MS, 1000 * MS, 1),
        ];
        let rr = simulate(&two, 1, &mut RoundRobin { slice_ns: 10 * MS }, 1000 * MS, 1);
        let done: Vec<u64> = rr.tasks.iter().map(|t| t.worst_response_ns).collect();
        assert_eq!(done, vec![50 * MS, 60 * MS], "a, b, a, b, a (done), b (done)");
        let fifo = simulate(&two, 1, &mut FixedPriority, 1000 * MS, 1);
        let done: Vec<u64> = fifo.tasks.iter().map(|t| t.worst_response_ns).collect();
        assert_eq!(done, vec![30 * MS, 60 * MS]);
    }
}
