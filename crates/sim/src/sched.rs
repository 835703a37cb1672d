//! Scheduler models behind one trait. A model orders the runnable jobs of
//! a global run queue (the first m run on m CPUs) and may give them a time
//! slice; the engine does the rest. Each model says what it leaves out.

use std::cmp::Ordering;

/// A released job as a scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub task: usize,
    pub release_ns: u64,
    pub abs_deadline_ns: u64,
    pub priority: u32,
    pub remaining_ns: u64,
    /// Position in the run queue: set when the job is released and again
    /// when its time slice runs out (it goes to the back of its level).
    pub queued_seq: u64,
}

/// A scheduling policy over a global run queue.
pub trait Scheduler {
    fn name(&self) -> &'static str;
    /// Which of two runnable jobs runs first.
    fn order(&self, a: &Job, b: &Job) -> Ordering;
    /// How long a job may run before it goes to the back of its level
    /// (None: until it completes or is preempted).
    fn slice_ns(&self) -> Option<u64> {
        None
    }
}

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
    fn slice_ns(&self) -> Option<u64> {
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
