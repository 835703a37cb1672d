//! Scheduler models behind one trait. A model orders the runnable jobs of
//! a global run queue (the first m run on m CPUs) and may give them a time
//! slice; the engine does the rest. Each model says what it leaves out.
//!
//! One file per model, as the kernel splits its classes
//! (kernel/sched/{deadline,rt,fair}.c) and Xen its schedulers
//! (xen/common/sched_{credit,credit2,rt}.c): `linux`, `cfs`, `credit`,
//! `credit2`, `rtds`, and the textbook policies in `textbook`; what was
//! fitted to this lab's measured kernel is kept apart from the kernel's
//! rules in `fits`. Here: the trait, the types every model shares, and
//! [`Model`], which builds a model by name.

mod cfs;
mod credit;
mod credit2;
mod fits;
mod linux;
mod rtds;
mod textbook;

pub use cfs::{Cfs, CFS_MIN_SLICE_NS, CFS_PERIOD_NS};
pub use credit::{Credit, CREDIT_BALANCE, CREDIT_RATELIMIT_NS, CREDIT_TICKS_PER_TSLICE};
pub use credit2::{Credit2, CREDIT2_INIT_NS, CREDIT2_MAX_SLICE_NS, CREDIT2_MIN_SLICE_NS};
pub use fits::MeasuredWakeups;
pub use linux::{linux_balance, Linux, LinuxClass, RtBandwidth, EEVDF_BASE_SLICE_NS, LINUX_TICK_NS};
pub use rtds::Rtds;
pub use textbook::{Edf, FixedPriority, RoundRobin};

use ontime_core::duration::format_exact;
use serde::Serialize;
use std::cmp::Ordering;

/// A model that schedules every thread alike, as a hypervisor schedules
/// vCPUs and its I/O domain: chosen by name with its settings (`ontime sim
/// --model`, a plan's host `scheduler`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum Model {
    Cfs,
    Fifo,
    Rr {
        slice_ns: u64,
    },
    Edf,
    /// Xen credit with its time slice (30 ms by default).
    Credit {
        tslice_ns: u64,
    },
    Credit2,
    /// Every thread with this budget per period.
    Rtds {
        budget_ns: u64,
        period_ns: u64,
    },
}

/// A millisecond in ns.
const MS: u64 = 1_000_000;

impl Model {
    /// The model `name` with its settings: the slice of rr (100 ms by
    /// default) and credit (30 ms), the budget and period of rtds (4 ms
    /// every 10 ms).
    pub fn from_name(
        name: &str,
        slice_ns: Option<u64>,
        budget_ns: Option<u64>,
        period_ns: Option<u64>,
    ) -> Result<Model, String> {
        use ontime_core::limits::duration as range;
        let model = match name {
            "cfs" => Model::Cfs,
            "fifo" => Model::Fifo,
            // Linux's sched_rr_timeslice_ms: at least 1 ms.
            "rr" => Model::Rr {
                slice_ns: range("--tslice", slice_ns.unwrap_or(100_000_000), MS, 10_000 * MS)?,
            },
            "edf" => Model::Edf,
            // Xen's credit tslice_ms: 1 .. 1000 (XEN_SYSCTL_CSCHED_TSLICE_MIN/MAX).
            "credit" => Model::Credit {
                tslice_ns: range("--tslice", slice_ns.unwrap_or(30_000_000), MS, 1_000 * MS)?,
            },
            "credit2" => Model::Credit2,
            // Xen's RTDS: period and budget of at least 10 us
            // (RTDS_MIN_PERIOD, RTDS_MIN_BUDGET), budget within the period.
            "rtds" => {
                let period_ns = range("--period", period_ns.unwrap_or(10_000_000), 10_000, 10_000 * MS)?;
                let budget_ns = range("--budget", budget_ns.unwrap_or(4_000_000), 10_000, period_ns)?;
                Model::Rtds { budget_ns, period_ns }
            }
            other => {
                return Err(format!(
                    "--model {other}: use cfs, fifo, rr, edf, credit, credit2 or rtds"
                ))
            }
        };
        let unused = match model {
            Model::Rr { .. } | Model::Credit { .. } => [("--budget", budget_ns), ("--period", period_ns)],
            Model::Rtds { .. } => [("--tslice", slice_ns), ("--tslice", None)],
            _ => [("--tslice", slice_ns), ("--budget", budget_ns.or(period_ns))],
        };
        if let Some((flag, _)) = unused.iter().find(|(_, v)| v.is_some()) {
            return Err(format!("{name}: {flag} does not apply to this model"));
        }
        Ok(model)
    }

    /// The model for `threads` threads on `cpus` CPUs, equal weights.
    pub fn build(&self, threads: usize, cpus: usize) -> Box<dyn Scheduler + Send> {
        self.build_measured(threads, cpus, MeasuredWakeups::default())
    }

    /// [`Model::build`] for a host whose kernel's wake-ups were measured:
    /// only cfs models a Linux host's wake-up placement, the others keep
    /// their own rules.
    pub fn build_measured(&self, threads: usize, cpus: usize, wakeups: MeasuredWakeups) -> Box<dyn Scheduler + Send> {
        match *self {
            // A Linux host's fair class as the kernel runs it: EEVDF's
            // slice and per-CPU run queues with their balancing.
            Model::Cfs => Box::new(Linux::fair(threads, cpus).measured(wakeups)),
            Model::Fifo => Box::new(FixedPriority),
            Model::Rr { slice_ns } => Box::new(RoundRobin { slice_ns }),
            Model::Edf => Box::new(Edf),
            Model::Credit { tslice_ns } => Box::new(Credit::new(vec![256; threads], cpus, tslice_ns)),
            Model::Credit2 => Box::new(Credit2::new(vec![256; threads])),
            Model::Rtds { budget_ns, period_ns } => Box::new(Rtds::new(vec![(budget_ns, period_ns); threads])),
        }
    }

    /// [`Model::build`] with each thread's hard affinity (`pinned`, one per
    /// thread): only the models with per-CPU run queues (cfs, credit)
    /// honour pinning.
    pub fn build_pinned(&self, pinned: Vec<CpuSet>, cpus: usize) -> Result<Box<dyn Scheduler + Send>, String> {
        self.build_pinned_measured(pinned, cpus, MeasuredWakeups::default())
    }

    /// [`Model::build_pinned`] with [`Model::build_measured`]'s wake-ups.
    pub fn build_pinned_measured(
        &self,
        pinned: Vec<CpuSet>,
        cpus: usize,
        wakeups: MeasuredWakeups,
    ) -> Result<Box<dyn Scheduler + Send>, String> {
        let threads = pinned.len();
        match *self {
            Model::Cfs => Ok(Box::new(Linux {
                pinned,
                ..Linux::fair(threads, cpus).measured(wakeups)
            })),
            Model::Credit { tslice_ns } => Ok(Box::new(Credit {
                pinned,
                ..Credit::new(vec![256; threads], cpus, tslice_ns)
            })),
            other => Err(format!(
                "{other}: pinning needs a model with per-CPU run queues (cfs or credit)"
            )),
        }
    }

    /// [`Model::build`] with each thread's soft affinity (`soft`, one per
    /// thread: where it prefers to run, free to run anywhere): Xen's, so
    /// credit only.
    pub fn build_soft_pinned(&self, soft: Vec<CpuSet>, cpus: usize) -> Result<Box<dyn Scheduler + Send>, String> {
        let threads = soft.len();
        match *self {
            Model::Credit { tslice_ns } => Ok(Box::new(Credit {
                soft,
                ..Credit::new(vec![256; threads], cpus, tslice_ns)
            })),
            other => Err(format!("{other}: soft affinity is Xen's (credit)")),
        }
    }

    /// A short name for run directories.
    pub fn label(&self) -> String {
        match self {
            Model::Rr { slice_ns } => format!("rr-{}", format_exact(*slice_ns)),
            Model::Credit { tslice_ns } => format!("credit-{}", format_exact(*tslice_ns)),
            Model::Rtds { budget_ns, period_ns } => {
                format!("rtds-{}-{}", format_exact(*budget_ns), format_exact(*period_ns))
            }
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Model::Cfs => write!(f, "cfs"),
            Model::Fifo => write!(f, "fifo"),
            Model::Rr { slice_ns } => write!(f, "rr (slice {})", format_exact(*slice_ns)),
            Model::Edf => write!(f, "edf"),
            Model::Credit { tslice_ns } => write!(f, "credit (tslice {})", format_exact(*tslice_ns)),
            Model::Credit2 => write!(f, "credit2"),
            Model::Rtds { budget_ns, period_ns } => {
                write!(f, "rtds ({} / {})", format_exact(*budget_ns), format_exact(*period_ns))
            }
        }
    }
}

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
    /// Order among its thread's ready jobs (lower first), before release
    /// order: the crawler sends due polls before it reads answers.
    pub within: u8,
    /// It has had a CPU: a thread does not leave work it started for
    /// another of its jobs.
    pub started: bool,
    /// When it last got a CPU (a rate limit protects it for a while).
    pub on_cpu_since_ns: u64,
    /// Its thread woke for it (it had nothing to do) and has not run
    /// since: what a model's wake-up preemption asks about.
    pub woken: bool,
}

/// A scheduling policy over a global run queue.
/// How a model with per-CPU run queues places and balances threads;
/// [`Scheduler::balance`] gives None for one global run queue (the first
/// m of the order run on m CPUs: global EDF, fixed priorities, RTDS,
/// credit2's one queue per socket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Balance {
    /// A CPU going idle pulls a waiting thread from a busy CPU's queue only
    /// when its average idle time (an 1/8 EWMA of its idle periods, as
    /// Linux's `rq->avg_idle`) is at least this; 0: always, and at once
    /// (credit1: an idle pCPU steals in `csched_load_balance`).
    pub newidle_min_avg_idle_ns: u64,
    /// A waiting thread that ran within this time is cache-hot and is not
    /// pulled when a CPU goes idle (Linux's `task_hot`).
    pub cache_hot_ns: u64,
    /// Every this long idle CPUs pull from busy ones regardless (Linux: a
    /// busy CPU's tick kicks the idle balance, `nohz_balancer_kick`); None:
    /// no periodic balance.
    pub tick_ns: Option<u64>,
    /// Every this many balancing ticks busy CPUs balance too: while one
    /// CPU has at least two more runnable threads of the kinds the model
    /// balances by count ([`Scheduler::balances_load`]) than another, a
    /// waiting one moves (Linux's periodic `load_balance` from a busy
    /// CPU). None: only idle CPUs pull.
    pub busy_balance_ticks: Option<u64>,
}

/// What a model sees of one CPU when it places a waking thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuView {
    pub running: Option<Job>,
    /// Threads waiting in its queue.
    pub waiting: usize,
}

impl CpuView {
    pub fn idle(&self) -> bool {
        self.running.is_none() && self.waiting == 0
    }
}

/// The CPUs a thread may run on (its hard affinity: `taskset`,
/// `sched_setaffinity`, Xen's `vcpu-pin`), up to 256 CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSet([u64; 4]);

impl CpuSet {
    pub const ALL: CpuSet = CpuSet([u64::MAX; 4]);

    /// CPUs `range.start` up to (not including) `range.end`.
    pub fn range(range: std::ops::Range<usize>) -> CpuSet {
        CpuSet::of(range)
    }

    /// These CPUs (a cpuset's list).
    pub fn of(cpus: impl IntoIterator<Item = usize>) -> CpuSet {
        let mut s = CpuSet([0; 4]);
        for c in cpus.into_iter().filter(|&c| c < 256) {
            s.0[c / 64] |= 1 << (c % 64);
        }
        s
    }

    /// Where thread `task` may run, from per-thread sets (none: anywhere).
    fn of_thread(pinned: &[CpuSet], task: usize) -> CpuSet {
        pinned.get(task).copied().unwrap_or(CpuSet::ALL)
    }

    pub fn contains(&self, cpu: usize) -> bool {
        cpu < 256 && self.0[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// The CPUs in both.
    pub fn and(&self, other: CpuSet) -> CpuSet {
        CpuSet(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// Whether every CPU of `other` is in this set.
    pub fn covers(&self, other: CpuSet) -> bool {
        (0..4).all(|i| other.0[i] & !self.0[i] == 0)
    }

    /// How many of CPUs 0..host it holds.
    pub fn count(&self, host: usize) -> usize {
        (0..host.min(256)).filter(|&c| self.contains(c)).count()
    }

    /// Whether it holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

/// The previous CPU if idle, else the first idle one after it, else the
/// previous (Linux's `select_idle_sibling` within one cache domain; Xen
/// credit1's `csched_cpu_pick`, which prefers idle pCPUs); only CPUs in
/// `allowed`, and the first allowed one after the previous when the
/// previous is not.
pub fn idle_first(prev: usize, cpus: &[CpuView], allowed: CpuSet) -> usize {
    let m = cpus.len();
    let mut after = (0..m).map(|i| (prev + i) % m).filter(|&c| allowed.contains(c));
    let first = after.clone().next().unwrap_or(prev);
    after.find(|&c| cpus[c].idle()).unwrap_or(first)
}

pub trait Scheduler {
    fn name(&self) -> &'static str;
    /// Per-CPU run queues and how they balance (None: one global queue).
    fn balance(&self) -> Option<Balance> {
        None
    }
    /// With per-CPU run queues: the CPU whose queue `job`'s thread joins
    /// as it wakes, from `prev`, the CPU it last ran on.
    fn select_cpu(&self, job: &Job, prev: usize, cpus: &[CpuView]) -> usize {
        idle_first(prev, cpus, self.affinity(job.task))
    }
    /// Where `task` may run (models with per-CPU queues honour it).
    fn affinity(&self, _task: usize) -> CpuSet {
        CpuSet::ALL
    }
    /// Where `task` prefers to run, within its affinity (Xen's soft
    /// affinity): a CPU going idle steals among the threads that prefer
    /// it first. ALL: no preference.
    fn soft_affinity(&self, _task: usize) -> CpuSet {
        CpuSet::ALL
    }
    /// Which of two runnable jobs runs first.
    fn order(&self, a: &Job, b: &Job) -> Ordering;
    /// How long `job`, being dispatched, may run before it goes to the
    /// back of its level (None: until it completes or is preempted), with
    /// `runnable` jobs runnable or running.
    fn slice_ns(&self, _job: &Job, _runnable: usize) -> Option<u64> {
        None
    }
    /// With per-CPU queues, at a scheduler tick: whether `job`, running
    /// then, has used up its time slice and goes to the back of its level
    /// (Linux's `task_tick_rt` counts an RR thread's slice in ticks).
    fn tick_expires(&mut self, _cpu: usize, _job: &Job) -> bool {
        false
    }
    /// Whether `job` may run now at all (a depleted RTDS budget may not).
    fn eligible(&self, _job: &Job) -> bool {
        true
    }
    /// Whether `job` may run on `cpu` now (a real-time group's budget is
    /// per CPU).
    fn eligible_on(&self, job: &Job, _cpu: usize) -> bool {
        self.eligible(job)
    }
    /// Whether `newcomer`, ahead in the order, may take the CPU of
    /// `running` at `now`, before `running`'s slice ends (EEVDF's
    /// run-to-parity says no between fair tasks; Xen's rate limit says no
    /// within its first ms).
    fn preempts(&self, _newcomer: &Job, _running: &Job, _now: u64) -> bool {
        true
    }
    /// Where a synchronous wake-up looks first: the CPU to treat as the
    /// woken thread's previous one, given its own `prev`, the thread whose
    /// work woke it and that thread's CPU, with the CPUs as they are
    /// (default: its own; Linux's fair class: the waker's when
    /// `wake_wide` and `wake_affine` say so).
    fn affine_target(&mut self, _job: &Job, prev: usize, _waker: usize, _waker_cpu: usize, _cpus: &[CpuView]) -> usize {
        prev
    }
    /// A job that got a CPU keeps it at least this long against any
    /// newcomer (Xen's `sched_ratelimit_us`); the engine looks again when
    /// it ends.
    fn ratelimit_ns(&self) -> u64 {
        0
    }
    /// With per-CPU queues: whether a CPU about to run `next` looks on
    /// other CPUs' queues for a job ahead of it (credit1 steals when its
    /// own next is OVER, `csched_load_balance`).
    fn steals_for(&self, _next: &Job) -> bool {
        false
    }
    /// With per-CPU queues: whether `waiting`, queued on another CPU,
    /// moves at once to a CPU about to run `there` (None: nothing),
    /// without the idle balance's gates (Linux pushes and pulls its
    /// real-time and deadline threads to CPUs running lower work:
    /// `push_rt_task`, `pull_rt_task`, `push_dl_task`, `pull_dl_task`).
    fn pushes(&self, _waiting: &Job, _there: Option<&Job>) -> bool {
        false
    }
    /// With per-CPU queues and [`Balance::busy_balance_ticks`]: whether
    /// the periodic balance between busy CPUs counts and moves `job`'s
    /// thread (Linux's `load_balance` moves fair threads only).
    fn balances_load(&self, _job: &Job) -> bool {
        false
    }
    /// Called with every runnable or running job before they are ordered
    /// (credit2 resets credits here).
    fn before_dispatch(&mut self, _runnable: &[Job]) {}
    /// With per-CPU queues: where every thread is runnable now (its CPU;
    /// None: nothing to run), before each dispatch and after one that
    /// moved a thread, so a model
    /// that keeps per-CPU queue state (Linux's EEVDF) follows wake-ups,
    /// sleeps and migrations.
    fn runnable_on(&mut self, _homes: &[Option<usize>], _now: u64) {}
    /// With per-CPU queues: a dispatch is done.
    fn dispatched(&mut self) {}
    /// `job.task` woke up: its job was released while it had nothing to
    /// run.
    fn wake(&mut self, _job: &Job) {}
    /// `ran_ns` of CPU `cpu` went to `job` (virtual runtime, credit; the
    /// CPU for models with per-CPU queue state, Linux's EEVDF).
    fn charge(&mut self, _cpu: usize, _job: &Job, _ran_ns: u64) {}
    /// When the model wants [`Scheduler::on_timer`] called (its accounting
    /// period), if ever.
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    /// Its timer fired at `now`, with `running` on the CPUs (credit1's
    /// tick accounts the vCPU it finds running).
    fn on_timer(&mut self, _now: u64, _running: &[Option<Job>]) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::simulate;
    use crate::task::PeriodicTask;

    /// Hard affinity: three hogs pinned to CPU 0 of two share it (one CPU
    /// busy in all), unpinned they fill both; a light task pinned to the
    /// idle CPU 1 never waits behind them.
    #[test]
    fn pinned_threads_stay_on_their_cpus() {
        use crate::sched::{CpuSet, Model};
        let hog = |n: &str| PeriodicTask::new(n, 10_000 * MS, 10_000 * MS, 0);
        let light = PeriodicTask::new("light", MS, 10 * MS, 0);
        let ts = vec![hog("a"), hog("b"), hog("c"), light];
        let zero = CpuSet::range(0..1);
        for model in [Model::Cfs, Model::Credit { tslice_ns: 30 * MS }] {
            let mut s = model
                .build_pinned(vec![zero, zero, zero, CpuSet::range(1..2)], 2)
                .unwrap();
            let o = simulate(&ts, 2, s.as_mut(), 1_000 * MS, 1);
            let hogs: u64 = o.tasks[..3].iter().map(|t| t.cpu_ns).sum();
            assert_eq!(hogs, 1_000 * MS, "{model}: hogs on one CPU");
            assert_eq!(
                o.tasks[3].worst_response_ns, MS,
                "{model}: the light task alone on CPU 1"
            );
            let mut free = model.build(4, 2);
            let o = simulate(&ts, 2, free.as_mut(), 1_000 * MS, 1);
            let hogs: u64 = o.tasks[..3].iter().map(|t| t.cpu_ns).sum();
            assert!(hogs > 1_800 * MS, "{model}: unpinned hogs use both CPUs ({hogs})");
        }
        assert!(Model::Credit2.build_pinned(vec![zero; 2], 2).is_err());
    }
}
