//! Xen's credit2 reduced to its defining rules, after
//! xen/common/sched_credit2.c of Xen 4.6: credit burnt by weight, richest
//! first, a fresh allowance for all when the next to run has none.

use super::{Job, Scheduler};
use std::cmp::Ordering;

/// Xen's credit2, reduced to its defining rules: vCPUs run in order of
/// credit left (most first); running burns credit faster the lower the
/// weight (at the rate max weight / weight); when the vCPU about to run has
/// none left, every vCPU gets a fresh allowance (credit is not discarded
/// below it, unlike credit1); a slice lasts as long as the runner's credit
/// (credit2 ends it where the runner would fall below the next vCPU),
/// between 0.5 ms and 2 ms (`CSCHED2_MIN_TIMER`, `CSCHED2_MAX_TIMER` of
/// Xen 4.6, which document 000 ran and quotes; Xen 4.8+ raised the
/// maximum to 10 ms and added a rate limit, which 4.6 does not have). A
/// waking vCPU with more credit than a running one preempts it.
/// Leaves out: migration resistance and load balancing between run queues
/// (one queue per socket in Xen; one global queue here), and credit2's
/// cap on what a reset may carry over (here credit is topped up to the
/// allowance).
#[derive(Clone, Debug)]
pub struct Credit2 {
    pub weights: Vec<u64>,
    credit: Vec<i64>,
}

/// credit2's allowance per reset and its slice bounds.
pub const CREDIT2_INIT_NS: i64 = 10_000_000;
pub const CREDIT2_MIN_SLICE_NS: u64 = 500_000;
pub const CREDIT2_MAX_SLICE_NS: u64 = 2_000_000;

impl Credit2 {
    pub fn new(weights: Vec<u64>) -> Credit2 {
        let n = weights.len();
        Credit2 {
            weights,
            credit: vec![CREDIT2_INIT_NS; n],
        }
    }

    fn burn_rate(&self, task: usize) -> u64 {
        let max = self.weights.iter().copied().max().unwrap_or(1).max(1);
        max * 1024 / self.weights[task].max(1)
    }
}

impl Scheduler for Credit2 {
    fn name(&self) -> &'static str {
        "credit2"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        self.credit[b.task]
            .cmp(&self.credit[a.task])
            .then(a.queued_seq.cmp(&b.queued_seq))
    }
    fn slice_ns(&self, job: &Job, _runnable: usize) -> Option<u64> {
        // As long as its credit lasts (credit2: until it would fall below
        // the next vCPU's), within the bounds.
        let own = self.credit[job.task].max(0) as u64 * 1024 / self.burn_rate(job.task);
        Some(own.clamp(CREDIT2_MIN_SLICE_NS, CREDIT2_MAX_SLICE_NS))
    }
    fn charge(&mut self, _cpu: usize, job: &Job, ran_ns: u64) {
        let burn = ran_ns * self.burn_rate(job.task) / 1024;
        self.credit[job.task] -= burn as i64;
    }
    fn before_dispatch(&mut self, runnable: &[Job]) {
        let best = runnable.iter().map(|j| self.credit[j.task]).max();
        if best.is_some_and(|c| c <= 0) {
            for c in &mut self.credit {
                *c = (*c + CREDIT2_INIT_NS).min(CREDIT2_INIT_NS);
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

    /// credit2 shares by weight without discarding credit, and a waking
    /// vCPU with more credit than a hog runs at once.
    #[test]
    fn credit2_shares_by_weight_and_runs_the_richer_vcpu_first() {
        let hog = |name: &str| PeriodicTask::new(name, 10_000 * MS, 10_000 * MS, 0);
        let o = simulate(
            &[hog("a"), hog("b")],
            1,
            &mut Credit2::new(vec![256, 512]),
            3_000 * MS,
            1,
        );
        let (a, b) = (o.tasks[0].cpu_ns as f64, o.tasks[1].cpu_ns as f64);
        assert!((b / (a + b) - 2.0 / 3.0).abs() < 0.03, "b got {:.4}", b / (a + b));
        let ts = vec![PeriodicTask::new("light", MS, 20 * MS, 0), hog("hog")];
        let o = simulate(&ts, 1, &mut Credit2::new(vec![256, 256]), 3_000 * MS, 1);
        assert_eq!(o.tasks[0].deadline_misses, 0);
        assert!(
            o.tasks[0].worst_response_ns <= 2 * MS,
            "{}",
            o.tasks[0].worst_response_ns
        );
    }
}
