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
    /// The workload's name for it.
    pub tag: u64,
}

/// A scheduling policy over a global run queue.
pub trait Scheduler {
    fn name(&self) -> &'static str;
    /// Which of two runnable jobs runs first.
    fn order(&self, a: &Job, b: &Job) -> Ordering;
    /// How long `job`, being dispatched, may run before it goes to the
    /// back of its level (None: until it completes or is preempted), with
    /// `runnable` jobs runnable or running.
    fn slice_ns(&self, _job: &Job, _runnable: usize) -> Option<u64> {
        None
    }
    /// Whether `job` may run now at all (a depleted RTDS budget may not).
    fn eligible(&self, _job: &Job) -> bool {
        true
    }
    /// Called with every runnable or running job before they are ordered
    /// (credit2 resets credits here).
    fn before_dispatch(&mut self, _runnable: &[Job]) {}
    /// A job of `job.task` was released (the task woke up).
    fn wake(&mut self, _job: &Job) {}
    /// `ran_ns` of CPU went to `job` (virtual runtime, credit).
    fn charge(&mut self, _job: &Job, _ran_ns: u64) {}
    /// When the model wants [`Scheduler::on_timer`] called (its accounting
    /// period), if ever.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    /// Its timer fired at `now`.
    fn on_timer(&mut self, _now: u64) {}
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
        let floor = self.min_vruntime.saturating_sub(CFS_PERIOD_NS / 2);
        let v = &mut self.vruntime[job.task];
        *v = (*v).max(floor);
    }
    fn charge(&mut self, job: &Job, ran_ns: u64) {
        let w = self.weights[job.task].max(1);
        self.vruntime[job.task] += ran_ns * 1024 / w;
        // The least virtual runtime only moves forward.
        let least = self.vruntime.iter().copied().min().unwrap_or(0);
        self.min_vruntime = self.min_vruntime.max(least);
    }
}

/// Xen's credit scheduler (credit1, Xen 4.x), reduced to its defining
/// rules: every accounting period (30 ms) each vCPU earns credit in
/// proportion to its weight (a period's worth of every pCPU in all), and
/// is charged what it runs; credit above one period's worth is discarded
/// (credit1 does not bank it, credit2 does). A vCPU with credit left is
/// UNDER, one without is OVER; UNDER runs before OVER, first come first
/// served within a level, for at most a time slice (`tslice`, 30 ms by
/// default, 1 ms the document's tuned value). A vCPU that wakes UNDER is
/// BOOSTed above both and preempts, for its first tick (10 ms) of running.
/// Leaves out: the rate limit (a vCPU runs 1 ms before BOOST may preempt
/// it), caps, per-pCPU run queues with work stealing, and credit debited
/// in whole ticks (here to the nanosecond).
#[derive(Clone, Debug)]
pub struct Credit {
    pub weights: Vec<u64>,
    pub tslice_ns: u64,
    pub cpus: usize,
    credit: Vec<i64>,
    /// Running time left at BOOST per vCPU (0: not boosted).
    boost_left: Vec<u64>,
    next_acct: u64,
}

/// Credit's accounting period and tick.
pub const CREDIT_ACCT_NS: u64 = 30_000_000;
pub const CREDIT_TICK_NS: u64 = 10_000_000;

impl Credit {
    pub fn new(weights: Vec<u64>, cpus: usize, tslice_ns: u64) -> Credit {
        let n = weights.len();
        Credit {
            weights,
            tslice_ns,
            cpus,
            credit: vec![0; n],
            boost_left: vec![0; n],
            next_acct: 0,
        }
    }

    /// 0 BOOST, 1 UNDER, 2 OVER.
    fn level(&self, task: usize) -> u8 {
        if self.boost_left[task] > 0 {
            0
        } else if self.credit[task] > 0 {
            1
        } else {
            2
        }
    }
}

impl Scheduler for Credit {
    fn name(&self) -> &'static str {
        "credit"
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        self.level(a.task)
            .cmp(&self.level(b.task))
            .then(a.queued_seq.cmp(&b.queued_seq))
    }
    fn slice_ns(&self, _job: &Job, _runnable: usize) -> Option<u64> {
        Some(self.tslice_ns)
    }
    fn wake(&mut self, job: &Job) {
        if self.credit[job.task] > 0 {
            self.boost_left[job.task] = CREDIT_TICK_NS;
        }
    }
    fn charge(&mut self, job: &Job, ran_ns: u64) {
        let t = job.task;
        self.credit[t] -= ran_ns as i64;
        self.boost_left[t] = self.boost_left[t].saturating_sub(ran_ns);
    }
    fn next_timer_ns(&self) -> Option<u64> {
        Some(self.next_acct)
    }
    fn on_timer(&mut self, now: u64) {
        while self.next_acct <= now {
            let total: u64 = self.weights.iter().sum::<u64>().max(1);
            let pool = (CREDIT_ACCT_NS * self.cpus as u64) as i64;
            let cap = CREDIT_ACCT_NS as i64;
            for (c, w) in self.credit.iter_mut().zip(&self.weights) {
                *c = (*c + pool * *w as i64 / total as i64).clamp(-cap, cap);
            }
            self.next_acct += CREDIT_ACCT_NS;
        }
    }
}

/// Xen's credit2, reduced to its defining rules: vCPUs run in order of
/// credit left (most first); running burns credit faster the lower the
/// weight (at the rate max weight / weight); when the vCPU about to run has
/// none left, every vCPU gets a fresh allowance (credit is not discarded
/// below it, unlike credit1); a slice lasts as long as the runner's credit
/// (credit2 ends it where the runner would fall below the next vCPU),
/// between 0.5 ms and 10 ms. A waking vCPU with more credit than a running
/// one preempts it.
/// Leaves out: the rate limit, migration resistance and load balancing
/// between run queues (one global queue here), and credit2's cap on what a
/// reset may carry over (here credit is topped up to the allowance).
#[derive(Clone, Debug)]
pub struct Credit2 {
    pub weights: Vec<u64>,
    credit: Vec<i64>,
}

/// credit2's allowance per reset and its slice bounds.
pub const CREDIT2_INIT_NS: i64 = 10_000_000;
pub const CREDIT2_MIN_SLICE_NS: u64 = 500_000;
pub const CREDIT2_MAX_SLICE_NS: u64 = 10_000_000;

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
    fn charge(&mut self, job: &Job, ran_ns: u64) {
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
    fn charge(&mut self, job: &Job, ran_ns: u64) {
        self.left[job.task] = self.left[job.task].saturating_sub(ran_ns);
    }
    fn next_timer_ns(&self) -> Option<u64> {
        self.deadline.iter().copied().min()
    }
    fn on_timer(&mut self, now: u64) {
        for (i, &(budget, period)) in self.servers.iter().enumerate() {
            while self.deadline[i] <= now {
                self.deadline[i] += period;
                self.left[i] = budget;
            }
        }
    }
}
