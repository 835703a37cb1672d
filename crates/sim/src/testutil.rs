//! Helpers shared by the engine's tests and the scheduler models' tests:
//! periodic task sets, scripted work, Linux thread classes and a job.

use crate::engine::{Item, Workload};
use crate::sched::LinuxClass;
use crate::task::PeriodicTask;

/// A millisecond in ns.
pub(crate) const MS: u64 = 1_000_000;

/// Periodic tasks `t0`, `t1`, ... of `(wcet, period)` in ms.
pub(crate) fn set(c: &[(u64, u64)]) -> Vec<PeriodicTask> {
    // Rate monotonic: shorter period, higher priority.
    c.iter()
        .enumerate()
        .map(|(i, &(wcet, period))| PeriodicTask::new(&format!("t{i}"), wcet * MS, period * MS, 100 - i as u32))
        .collect()
}

/// Work for scripted threads: each item released at its time.
pub(crate) struct Scripted(pub(crate) Vec<Item>);

impl Workload for Scripted {
    fn threads(&self) -> usize {
        self.0.iter().map(|i| i.thread + 1).max().unwrap_or(0)
    }
    fn next_arrival(&self) -> Option<u64> {
        self.0.iter().map(|i| i.release_ns).min()
    }
    fn arrive(&mut self, now: u64, push: &mut dyn FnMut(Item)) {
        self.0.retain(|i| {
            if i.release_ns <= now {
                push(*i);
            }
            i.release_ns > now
        });
    }
}

/// One piece of work of `cpu_ns` for `thread` at `release_ns`.
pub(crate) fn piece(thread: usize, release_ns: u64, cpu_ns: u64) -> Item {
    Item {
        thread,
        release_ns,
        abs_deadline_ns: u64::MAX,
        priority: 0,
        cpu_ns,
        tag: 0,
        within: 0,
        woken_by: None,
    }
}

/// A SCHED_FIFO thread at `priority`.
pub(crate) fn fifo(priority: u32) -> LinuxClass {
    LinuxClass::RealTime {
        priority,
        slice_ns: None,
    }
}

/// A SCHED_OTHER thread at nice 0.
pub(crate) const FAIR: LinuxClass = LinuxClass::Fair { weight: 1024 };

/// Thread `task`'s running job of 1 ms (no deadline).
pub(crate) fn job(task: usize) -> crate::sched::Job {
    crate::sched::Job {
        task,
        release_ns: 0,
        abs_deadline_ns: u64::MAX,
        priority: 0,
        remaining_ns: MS,
        queued_seq: 0,
        tag: 0,
        within: 0,
        started: true,
        on_cpu_since_ns: 0,
        woken: false,
    }
}
