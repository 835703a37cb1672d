//! Scheduler models behind one trait. A model orders the runnable jobs of
//! a global run queue (the first m run on m CPUs) and may give them a time
//! slice; the engine does the rest. Each model says what it leaves out.

use crate::affine::WakeAffine;
use crate::eevdf::Eevdf;
use crate::shares::GroupShares;
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

/// A draw in [0, 1) fixed by the job (its thread and release time), so a
/// run is repeatable and the draw needs no state (splitmix64's finalizer).
fn unit_draw(job: &Job) -> f64 {
    salted_draw(job, 0)
}

/// [`unit_draw`] for another question about the same job: a different
/// `salt` gives an independent draw.
fn salted_draw(job: &Job, salt: u64) -> f64 {
    let mut h = (job.task as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ job.release_ns ^ salt;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
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
    /// A task joining the queue: it may not bank more than half a period
    /// of virtual runtime from sleeping.
    fn place(&mut self, task: usize) {
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

/// A thread's scheduling class on a Linux host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxClass {
    /// SCHED_DEADLINE: `runtime_ns` every `period_ns` (relative deadline =
    /// period).
    Deadline { runtime_ns: u64, period_ns: u64 },
    /// SCHED_FIFO (no slice) or SCHED_RR (with one), priority 1..99.
    RealTime { priority: u32, slice_ns: Option<u64> },
    /// SCHED_OTHER with a CFS weight (1024 = nice 0).
    Fair { weight: u64 },
}

impl LinuxClass {
    fn rank(&self) -> u8 {
        match self {
            LinuxClass::Deadline { .. } => 0,
            LinuxClass::RealTime { .. } => 1,
            LinuxClass::Fair { .. } => 2,
        }
    }
}

/// A Linux host as the lab runs it: every thread in its own class, the
/// classes in the kernel's order (deadline before real-time before fair).
/// SCHED_DEADLINE threads are constant bandwidth servers: a thread waking
/// with more budget left than its bandwidth allows by its deadline gets a
/// fresh budget and deadline (now + period); one that has used its budget
/// is throttled until its deadline, then replenished; among those with
/// budget the earliest deadline runs. Real-time threads run by priority
/// (RR rotating at its slice; with per-CPU queues the slice is counted
/// in 4 ms ticks and kept across sleep, as `task_tick_rt` does).
/// Real-time threads in a cgroup with a real-time budget
/// ([`Linux::with_rt_bandwidth`]) stop at it until the next period.
/// Fair threads run with EEVDF's slice
/// (`base_slice_ns`, 0.75 ms scaled by 1 + log2 of the CPUs up to 8: 1.5
/// ms on 2 CPUs, 3 ms on 8). With per-CPU queues they are ordered and
/// preempt by EEVDF's rules ([`Eevdf`]: lag kept across sleep,
/// eligibility, earliest virtual deadline, run to parity, delayed
/// dequeue), unless the host was measured: then a waking fair thread
/// preempts a fair one with the measured share
/// ([`MeasuredWakeups::preempts`]) and they share as [`Cfs`] (virtual
/// runtime). With one global queue: [`Cfs`] and run to parity. A higher
/// class always preempts.
/// A fair thread woken synchronously by a fair thread on another CPU (a
/// packet handed over, a request written) goes to its waker's CPU as
/// `select_task_rq_fair` decides: unless both switch wakees often
/// (`wake_wide`), when the waker is all its CPU runs, or else when that
/// CPU, the waker's load off and the wakee's on, is less loaded than the
/// wakee's last one (`wake_affine_idle`, `wake_affine_weight`, PELT loads:
/// [`WakeAffine`]). Fair threads may sit in cgroups one level below the
/// root ([`Linux::with_groups`]): the group competes as one entity, on
/// each CPU with its share of the group's weight by its load there
/// ([`GroupShares`], with per-CPU queues and measured wake-ups; under
/// EEVDF's rules each group entity weighs the group's weight).
/// With per-CPU queues a real-time or deadline thread wakes where it last
/// ran unless a thread of its class or above holds that CPU, and one left
/// waiting moves at once to a CPU about to run lower work (push/pull).
/// Leaves out: the root's real-time throttling (`sched_rt_runtime_us`,
/// 95 %) and the fair server that gives fair threads 50 ms a second
/// beside real-time ones (Linux 6.12 on), the
/// deadline class's admission control and GRUB reclaiming, deeper cgroup
/// levels, the cost of a push or pull, and what [`Eevdf`] and [`Cfs`]
/// leave out.
#[derive(Clone, Debug)]
pub struct Linux {
    pub classes: Vec<LinuxClass>,
    /// EEVDF's slice of a fair thread.
    pub fair_slice_ns: u64,
    fair: Cfs,
    /// Per thread, the cgroup it shares in (None: the root).
    group: Vec<Option<usize>>,
    /// The root's fair entities: threads 0..n, then group g's entity on
    /// CPU c at n + g * cpus + c (with one global queue, or EEVDF's rules,
    /// only c = 0: one entity of the group's weight).
    top: Cfs,
    /// Per-CPU shares of the groups' weights, with per-CPU queues and
    /// measured wake-ups (the `top` entities' weights).
    shares: Option<GroupShares>,
    scratch_entered: Vec<usize>,
    scratch_shares: Vec<u64>,
    scratch_top: Vec<Job>,
    /// Per deadline thread: budget left and current absolute deadline.
    dl_left: Vec<u64>,
    dl_deadline: Vec<u64>,
    /// Per RR thread with per-CPU queues: ticks left of its time slice,
    /// kept across sleeps (`p->rt.time_slice` is refilled only when it
    /// runs out).
    rr_ticks_left: Vec<u64>,
    /// Per thread, the cgroup whose real-time bandwidth it draws on.
    rt_group: Vec<Option<usize>>,
    rt_groups: Vec<RtGroup>,
    scratch: Vec<Job>,
    /// Per-CPU run queues (the kernel's); false: one global queue.
    pub per_cpu: bool,
    /// Per thread, where it may run (empty: anywhere).
    pub pinned: Vec<CpuSet>,
    /// Where this host's kernel queues a waking fair thread and whether
    /// it preempts there, as measured (default: the kernel's rules).
    pub wakeups: MeasuredWakeups,
    /// With per-CPU queues: EEVDF's lag, slices and delayed dequeues of
    /// the fair threads, by run queue.
    eevdf: Eevdf,
    /// With per-CPU queues: the threads' wakee flips and runnable
    /// averages, for where a thread woken by another CPU's goes.
    affine: WakeAffine,
    /// Scratch of `wake_affine_weight`: per CPU the root's fair load; per
    /// group queue (`g * cpus + c`) its threads' runnable averages and
    /// their weighted sum.
    scratch_cpu_load: Vec<f64>,
    scratch_group_load: Vec<(f64, f64)>,
}

/// How a measured host's kernel treats waking fair threads (from
/// observe's wake-up placement, pooled by `ontime sim calibrate`); the
/// default is the kernel's rules as written (an idle CPU first, EEVDF's
/// wake-up preemption).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MeasuredWakeups {
    /// Of a fair thread's wake-ups that find its last CPU busy while
    /// another idles, the share queued on that busy CPU all the same (0:
    /// always the idle one, as mainline's `select_idle_sibling` would
    /// within a shared cache). Not a default of the kernel's: the lab
    /// VM's packing kernel keeps about 91 %.
    pub stay_on_busy_prev: f64,
    /// Of fair threads woken onto a CPU running a fair thread, the share
    /// that preempts it at once (the lab VM's 6.18 kernel: about 76 %).
    /// None: not measured; EEVDF decides as written (lag kept across
    /// sleep, eligibility, run to parity, delayed dequeue: [`Eevdf`])
    /// where the model keeps per-CPU queues, else run to parity.
    pub preempts: Option<f64>,
    /// A fair thread waking while its last CPU runs a real-time or
    /// deadline thread goes to a CPU that runs none, idle first, else one
    /// running a fair thread. The lab VM's kernel (`scripts/wake-placement.py`
    /// on two runs of 4 tenants at 100/s, gateway at fifo:95): with the
    /// relay at fifo:90, 741 of 741 crawlers so woken went to the idle
    /// CPU and 1079 of 1235 (87 %) to the one running a crawler; with the
    /// relay fair, 456 of 456 and 203 of 361 (56 %). The model moves all.
    /// false: only to an idle CPU, as `select_idle_sibling` does.
    pub leave_real_time: bool,
}

/// A cgroup's real-time bandwidth under RT group scheduling
/// (`cpu.rt_runtime_us` per `cpu.rt_period_us`): every CPU's run queue
/// of the group may run its real-time threads `runtime_ns` per period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtBandwidth {
    pub runtime_ns: u64,
    pub period_ns: u64,
    /// The CPUs the group's threads may use (its cpuset): with one
    /// global queue the model pools their budgets, as if its threads
    /// spread over them; with per-CPU queues each CPU has `runtime_ns`.
    pub cpus: usize,
    /// When the group's period timer first pays back a budget, a period
    /// after it started (`start_rt_bandwidth` starts it as the group's
    /// first real-time thread is queued); None: one period in.
    pub first_refill_ns: Option<u64>,
}

/// A group's bandwidth and its use per CPU (`rt_rq->rt_time`,
/// `rt_throttled`; one slot with one global queue).
#[derive(Clone, Debug)]
struct RtGroup {
    bandwidth: RtBandwidth,
    used_ns: Vec<u64>,
    throttled: Vec<bool>,
    next_period_ns: u64,
}

impl RtGroup {
    /// Per CPU its own runtime; with one global queue, the CPUs' pooled.
    fn budget_ns(&self, per_cpu: bool) -> u64 {
        if per_cpu {
            self.bandwidth.runtime_ns
        } else {
            self.bandwidth.runtime_ns * self.bandwidth.cpus.max(1) as u64
        }
    }
}

/// Keeps the wake-up preemption draw apart from the placement draw.
const WAKE_PREEMPT_SALT: u64 = 0x5eed_0f9e_e3b7;

/// EEVDF's base slice before scaling by the CPU count.
pub const EEVDF_BASE_SLICE_NS: u64 = 750_000;

impl Linux {
    /// `cpus` scales the fair slice as the kernel does.
    pub fn new(classes: Vec<LinuxClass>, cpus: usize) -> Linux {
        let factor = 1 + cpus.clamp(1, 8).ilog2() as u64;
        let weights: Vec<u64> = classes
            .iter()
            .map(|c| match c {
                LinuxClass::Fair { weight } => *weight,
                _ => 1024,
            })
            .collect();
        let n = classes.len();
        let fair_slice_ns = EEVDF_BASE_SLICE_NS * factor;
        Linux {
            eevdf: Eevdf::new(&weights, &[], &[], cpus.max(1), fair_slice_ns),
            affine: WakeAffine::new(n, cpus),
            scratch_cpu_load: Vec::new(),
            scratch_group_load: Vec::new(),
            top: Cfs::new(weights.clone()),
            fair: Cfs::new(weights),
            group: vec![None; n],
            shares: None,
            scratch_entered: Vec::new(),
            scratch_shares: Vec::new(),
            scratch_top: Vec::new(),
            fair_slice_ns,
            dl_left: vec![0; n],
            dl_deadline: vec![0; n],
            rr_ticks_left: classes_rr_ticks(&classes),
            rt_group: vec![None; n],
            rt_groups: Vec::new(),
            classes,
            scratch: Vec::new(),
            per_cpu: true,
            pinned: Vec::new(),
            wakeups: MeasuredWakeups::default(),
        }
    }

    /// `threads` fair threads at nice 0 (`--model cfs`).
    pub fn fair(threads: usize, cpus: usize) -> Linux {
        Linux::new(vec![LinuxClass::Fair { weight: 1024 }; threads], cpus)
    }

    /// This host's kernel as measured (`ontime sim calibrate`): where it
    /// queues a waking fair thread and whether that preempts.
    pub fn measured(self, wakeups: MeasuredWakeups) -> Linux {
        Linux { wakeups, ..self }
    }

    fn is_fair(&self, task: usize) -> bool {
        matches!(self.classes[task], LinuxClass::Fair { .. })
    }

    /// EEVDF's queues, when they decide: per-CPU queues, and no measured
    /// wake-up preemption share standing in for them.
    fn eevdf_on(&self) -> Option<&Eevdf> {
        (self.per_cpu && self.wakeups.preempts.is_none()).then_some(&self.eevdf)
    }

    /// `wake_affine_weight` for a synchronous wake-up of `wakee` by
    /// `waker` on `this` CPU, `wakee` last on `prev`: whether `this` is
    /// less loaded with the wakee's load moved there and the waker's
    /// taken off (it is about to sleep) than `prev` without the wakee,
    /// `prev` favoured by half the domain's imbalance margin (`WA_BIAS`,
    /// `imbalance_pct` 117). Loads are PELT's: a root thread's weight
    /// times its runnable average; a group's entity on a CPU its share
    /// there times its threads' runnable average there (at most 1), each
    /// of its threads that entity's load by its part of the group's
    /// load there (`task_h_load`).
    fn wake_affine_weight(&mut self, wakee: usize, waker: usize, this: usize, prev: usize, now: u64) -> bool {
        let cpus = self.eevdf.cpus().max(1);
        let n = self.classes.len();
        let groups = self.top.weights.len().saturating_sub(n) / cpus;
        let (mut cpu_load, mut group_load) = (
            std::mem::take(&mut self.scratch_cpu_load),
            std::mem::take(&mut self.scratch_group_load),
        );
        cpu_load.clear();
        cpu_load.resize(cpus, 0.0);
        group_load.clear();
        group_load.resize(groups * cpus, (0.0, 0.0));
        for t in (0..n).filter(|&t| self.is_fair(t)) {
            let (avg, c) = (self.affine.average_at(t, now), self.affine.cpu_of(t).min(cpus - 1));
            let load = self.fair.weights[t] as f64 * avg;
            match self.group.get(t).copied().flatten() {
                Some(g) => {
                    let q = &mut group_load[g * cpus + c];
                    q.0 += avg;
                    q.1 += load;
                }
                None => cpu_load[c] += load,
            }
        }
        let entity = |g: usize, c: usize, q: (f64, f64)| self.top.weights[n + g * cpus + c] as f64 * q.0.min(1.0);
        for g in 0..groups {
            for (c, load) in cpu_load.iter_mut().enumerate() {
                *load += entity(g, c, group_load[g * cpus + c]);
            }
        }
        let h_load = |t: usize| {
            let c = self.affine.cpu_of(t).min(cpus - 1);
            let load = self.fair.weights[t] as f64 * self.affine.average_at(t, now);
            match self.group.get(t).copied().flatten() {
                Some(g) => {
                    let q = group_load[g * cpus + c];
                    if q.1 > 0.0 {
                        entity(g, c, q) * load / q.1
                    } else {
                        0.0
                    }
                }
                None => load,
            }
        };
        let (current, task) = (h_load(waker), h_load(wakee));
        let (this_load, prev_load) = (cpu_load[this], cpu_load[prev]);
        self.scratch_cpu_load = cpu_load;
        self.scratch_group_load = group_load;
        if current > this_load {
            return true;
        }
        let this_eff = (this_load - current + task) * 100.0;
        let prev_eff = (prev_load - task) * f64::from(100 + (117 - 100) / 2) + 1.0;
        this_eff < prev_eff
    }

    /// One global run queue instead of the kernel's per-CPU ones (a
    /// thread never waits while a CPU idles): the simulator before per-CPU
    /// queues, kept to compare against.
    pub fn global(mut self) -> Linux {
        self.per_cpu = false;
        self
    }
}

/// The scheduler tick at Debian's CONFIG_HZ=250.
pub const LINUX_TICK_NS: u64 = 4_000_000;

/// An RR thread's slice in ticks, as `sched_rr_timeslice_ms` sets it
/// (`msecs_to_jiffies` rounds up: 30 ms is 8 ticks, 1 ms one tick of 4 ms).
fn rr_slice_ticks(slice_ns: u64) -> u64 {
    slice_ns.div_ceil(LINUX_TICK_NS).max(1)
}

fn classes_rr_ticks(classes: &[LinuxClass]) -> Vec<u64> {
    classes
        .iter()
        .map(|c| match c {
            LinuxClass::RealTime { slice_ns: Some(s), .. } => rr_slice_ticks(*s),
            _ => 0,
        })
        .collect()
}

/// Linux's balancing between per-CPU run queues (kernel/sched/fair.c):
/// `sysctl_sched_migration_cost` (0.5 ms) gates the new-idle balance
/// (`newidle_balance` gives up when the CPU's `avg_idle` is below it) and
/// makes a thread that ran within it cache-hot (`task_hot`); idle CPUs are
/// otherwise balanced from a busy CPU's tick (`nohz_balancer_kick`), every
/// 4 ms at Debian's CONFIG_HZ=250. Busy CPUs balance between themselves
/// every `sd->min_interval` (a millisecond per CPU of the domain) times
/// `sd->busy_factor` (16): 32 ms on 2 CPUs, 128 ms on 8 (`rebalance_domains`;
/// `get_sd_balance_interval`).
pub fn linux_balance(cpus: usize) -> Balance {
    const BUSY_FACTOR: u64 = 16;
    let busy_ns = cpus.max(1) as u64 * 1_000_000 * BUSY_FACTOR;
    Balance {
        newidle_min_avg_idle_ns: 500_000,
        cache_hot_ns: 500_000,
        tick_ns: Some(LINUX_TICK_NS),
        busy_balance_ticks: Some(busy_ns.div_ceil(LINUX_TICK_NS)),
    }
}

impl Linux {
    /// Puts fair threads into cgroups one level below the root: `group`
    /// per thread (None: the root), `weights` per group (1024 = the
    /// default cpu.shares / cpu.weight 100). At the root a group is one
    /// entity beside the root's threads; its threads share what it gets.
    pub fn with_groups(mut self, group: Vec<Option<usize>>, weights: &[u64]) -> Linux {
        let cpus = self.eevdf.cpus();
        let mut top: Vec<u64> = self.fair.weights.clone();
        for &w in weights {
            top.extend(std::iter::repeat_n(w, cpus));
        }
        self.top = Cfs::new(top);
        self.shares = (!weights.is_empty()).then(|| GroupShares::new(&self.fair.weights, &group, weights, cpus));
        self.eevdf = Eevdf::new(
            &self.fair.weights,
            &group,
            weights,
            self.eevdf.cpus(),
            self.fair_slice_ns,
        );
        self.group = group;
        self
    }

    /// Real-time threads in cgroups with their own bandwidth (RT group
    /// scheduling, cgroup v1's `cpu.rt_runtime_us`): `group[thread]`
    /// indexes `bandwidth`. A group that has run its budget within a
    /// period is throttled, noticed at the next tick or as it stops
    /// (`sched_rt_runtime_exceeded` from `update_curr_rt`), until the
    /// period timer pays back one budget (`do_sched_rt_period_timer`:
    /// `rt_time` drops by the runtime, unused budget is not kept). Runtime
    /// is not borrowed between CPUs (`RT_RUNTIME_SHARE` is off by
    /// default since Linux 5.10, commit 2586af1ac187): with per-CPU queues
    /// each CPU's use is its own, and a thread throttled on its CPU is not
    /// pushed (it waits to be pulled or paid back); with one global queue
    /// the model pools a group's CPUs' budgets.
    pub fn with_rt_bandwidth(mut self, group: Vec<Option<usize>>, bandwidth: &[RtBandwidth]) -> Linux {
        let cpus = self.eevdf.cpus().max(1);
        self.rt_groups = bandwidth
            .iter()
            .map(|&b| RtGroup {
                bandwidth: b,
                used_ns: vec![0; cpus],
                throttled: vec![false; cpus],
                next_period_ns: b.first_refill_ns.unwrap_or(b.period_ns.max(1)),
            })
            .collect();
        self.rt_group = group;
        self.rt_group.resize(self.classes.len(), None);
        self
    }

    /// Where a group's use is counted: per CPU, or once with one global
    /// queue.
    fn rt_slot(&self, cpu: usize) -> usize {
        if self.per_cpu {
            cpu
        } else {
            0
        }
    }

    /// Whether `task`'s real-time group is throttled on `cpu` (None: on
    /// every CPU the thread may use).
    fn rt_throttled(&self, task: usize, cpu: Option<usize>) -> bool {
        let Some(g) = self.rt_group_of(task) else { return false };
        let t = &self.rt_groups[g].throttled;
        let on = |c: usize| t.get(self.rt_slot(c)).copied().unwrap_or(false);
        match cpu {
            Some(c) => on(c),
            None if self.per_cpu => {
                let may = CpuSet::of_thread(&self.pinned, task);
                (0..t.len()).filter(|&c| may.contains(c)).all(on)
            }
            None => on(0),
        }
    }

    /// The real-time bandwidth group of `task`, when it is a real-time
    /// thread in one.
    fn rt_group_of(&self, task: usize) -> Option<usize> {
        match self.classes[task] {
            LinuxClass::RealTime { .. } => self.rt_group.get(task).copied().flatten(),
            _ => None,
        }
    }

    /// Whether groups weigh by per-CPU shares (the `top` CFS decides:
    /// per-CPU queues with measured wake-ups).
    fn per_cpu_shares(&self) -> bool {
        self.per_cpu && self.eevdf_on().is_none() && self.shares.is_some()
    }

    /// The thread's entity at the root (its group's on `cpu`, when given,
    /// else on the CPU it is runnable on or last was: where its load is).
    fn entity_on(&self, j: &Job, cpu: Option<usize>) -> Job {
        match (self.group[j.task], &self.shares) {
            (Some(g), Some(s)) => {
                let c = if self.per_cpu_shares() {
                    cpu.unwrap_or_else(|| s.cpu_of(j.task))
                } else {
                    0
                };
                Job {
                    task: self.classes.len() + g * s.cpus() + c,
                    ..*j
                }
            }
            _ => *j,
        }
    }

    fn entity(&self, j: &Job) -> Job {
        self.entity_on(j, None)
    }
}

impl Scheduler for Linux {
    fn name(&self) -> &'static str {
        "linux"
    }
    fn balance(&self) -> Option<Balance> {
        self.per_cpu.then(|| linux_balance(self.eevdf.cpus()))
    }
    fn select_cpu(&self, job: &Job, prev: usize, cpus: &[CpuView]) -> usize {
        let allowed = self.affinity(job.task);
        let first_allowed = idle_first(prev, cpus, allowed);
        if self.is_fair(job.task) {
            // Still queued as a delayed dequeue: it wakes where it is
            // (`ttwu_runnable` requeues it without choosing a CPU).
            if let Some((cpu, true)) = self.eevdf_on().and_then(|e| e.queued_on(job.task)) {
                if allowed.contains(cpu) {
                    return cpu;
                }
            }
            let real_time_on = |c: usize| cpus[c].running.is_some_and(|r| !self.is_fair(r.task));
            if allowed.contains(prev) && real_time_on(prev) {
                // Not kept behind a real-time thread by the measured share
                // of wake-ups that stay on a busy CPU.
                if cpus[first_allowed].idle() || !self.wakeups.leave_real_time {
                    return first_allowed;
                }
                let m = cpus.len();
                return (1..m)
                    .map(|i| (prev + i) % m)
                    .find(|&c| allowed.contains(c) && !real_time_on(c))
                    .unwrap_or(prev);
            }
            if first_allowed != prev && allowed.contains(prev) && unit_draw(job) < self.wakeups.stay_on_busy_prev {
                return prev;
            }
            return first_allowed;
        }
        // Real-time and deadline threads wake where they last ran unless
        // a thread of their own class or above holds that CPU
        // (`select_task_rq_rt` looks further only when the current task
        // there is real-time, `select_task_rq_dl` when it is deadline):
        // a fair thread there is preempted though another CPU idles.
        if allowed.contains(prev) && cpus[prev].running.is_none_or(|r| self.is_fair(r.task)) {
            return prev;
        }
        // Else where they run soonest (`find_lowest_rq`, `find_later_rq`):
        // an idle CPU, else the one whose current job the newcomer
        // precedes by the most.
        if cpus[first_allowed].idle() {
            return first_allowed;
        }
        (0..cpus.len())
            .filter(|&c| allowed.contains(c))
            .filter_map(|c| cpus[c].running.map(|r| (c, r)))
            .filter(|(_, r)| self.order(job, r).is_lt())
            .max_by(|a, b| self.order(&a.1, &b.1))
            .map_or(first_allowed, |(c, _)| c)
    }
    fn affine_target(&mut self, job: &Job, prev: usize, waker: usize, waker_cpu: usize, cpus: &[CpuView]) -> usize {
        if !self.is_fair(job.task) {
            return prev;
        }
        // `select_task_rq_fair` (kernel/sched/fair.c) counts every fair
        // wake-up against the thread current as it happens
        // (`record_wakee`; the model's timer wake-ups are not counted,
        // see `place` in the engine) ...
        let now = job.release_ns;
        self.affine.record_wakee(waker, job.task, now);
        // ... and looks at the waker's CPU only when that is another one
        // it may use, and not both threads switch wakees often, one
        // `sd_llc_size` times as often as the other (`wake_wide`: a
        // thread that serves many, or that many serve, stays put). The
        // model's CPUs share one cache. `wake_affine_weight` weighs
        // CPUs by their capacity left after real-time work, so a waker's
        // CPU busy with a real-time thread is not chosen: only fair
        // wakers count.
        if waker_cpu == prev
            || !self.is_fair(waker)
            || !self.affinity(job.task).contains(waker_cpu)
            || self.affine.wide(waker, job.task, cpus.len())
        {
            return prev;
        }
        // `wake_affine_idle`, for a synchronous wake-up (a packet handed
        // over, a request written: WF_SYNC): an idle waker's CPU unless
        // the previous one idles too; the waker's CPU when the waker is
        // all it runs; an idle previous CPU.
        let (this, there) = (&cpus[waker_cpu], &cpus[prev]);
        if this.idle() {
            return if there.idle() { prev } else { waker_cpu };
        }
        if usize::from(this.running.is_some()) + this.waiting == 1 {
            return waker_cpu;
        }
        if there.idle() {
            return prev;
        }
        if self.wake_affine_weight(job.task, waker, waker_cpu, prev, now) {
            waker_cpu
        } else {
            prev
        }
    }
    fn affinity(&self, task: usize) -> CpuSet {
        CpuSet::of_thread(&self.pinned, task)
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        let (ca, cb) = (&self.classes[a.task], &self.classes[b.task]);
        ca.rank().cmp(&cb.rank()).then_with(|| match (ca, cb) {
            (LinuxClass::Deadline { .. }, _) => self.dl_deadline[a.task]
                .cmp(&self.dl_deadline[b.task])
                .then(a.queued_seq.cmp(&b.queued_seq)),
            (LinuxClass::RealTime { priority: pa, .. }, LinuxClass::RealTime { priority: pb, .. }) => {
                pb.cmp(pa).then(a.queued_seq.cmp(&b.queued_seq))
            }
            _ => {
                if let Some(e) = self.eevdf_on() {
                    if let (Some(ka), Some(kb)) = (e.key(a.task, b.task), e.key(b.task, a.task)) {
                        return ka.cmp(&kb).then(a.queued_seq.cmp(&b.queued_seq));
                    }
                }
                let (ea, eb) = (self.entity(a), self.entity(b));
                if ea.task == eb.task {
                    self.fair.order(a, b)
                } else {
                    self.top.order(&ea, &eb)
                }
            }
        })
    }
    fn slice_ns(&self, job: &Job, _runnable: usize) -> Option<u64> {
        // EEVDF's slice does not shrink with the runnable count (CFS's did).
        match self.classes[job.task] {
            LinuxClass::Deadline { .. } => Some(self.dl_left[job.task]),
            // With per-CPU queues an RR slice is counted in ticks.
            LinuxClass::RealTime { slice_ns, .. } => slice_ns.filter(|_| !self.per_cpu),
            LinuxClass::Fair { .. } => Some(self.fair_slice_ns),
        }
    }
    fn tick_expires(&mut self, cpu: usize, job: &Job) -> bool {
        if self.rt_throttled(job.task, Some(cpu)) {
            return true;
        }
        let LinuxClass::RealTime { slice_ns: Some(s), .. } = self.classes[job.task] else {
            return false;
        };
        let left = &mut self.rr_ticks_left[job.task];
        *left = left.saturating_sub(1);
        if *left > 0 {
            return false;
        }
        *left = rr_slice_ticks(s);
        true
    }
    fn preempts(&self, newcomer: &Job, running: &Job, _now: u64) -> bool {
        if !(self.is_fair(newcomer.task) && self.is_fair(running.task)) {
            return true;
        }
        // A fair thread only displaces a fair one as it wakes: as often
        // as the host was measured to, else by EEVDF's rules (with
        // per-CPU queues; run to parity with one global queue).
        if !newcomer.woken {
            return false;
        }
        match (self.wakeups.preempts, self.eevdf_on()) {
            (Some(share), _) => salted_draw(newcomer, WAKE_PREEMPT_SALT) < share,
            (None, Some(e)) => e.wakeup_preempts(newcomer.task, running.task),
            (None, None) => false,
        }
    }
    fn eligible(&self, job: &Job) -> bool {
        match self.classes[job.task] {
            LinuxClass::Deadline { .. } => self.dl_left[job.task] > 0,
            LinuxClass::RealTime { .. } => !self.rt_throttled(job.task, None),
            LinuxClass::Fair { .. } => true,
        }
    }
    fn eligible_on(&self, job: &Job, cpu: usize) -> bool {
        match self.classes[job.task] {
            LinuxClass::RealTime { .. } => !self.rt_throttled(job.task, Some(cpu)),
            _ => self.eligible(job),
        }
    }
    fn balances_load(&self, job: &Job) -> bool {
        self.is_fair(job.task)
    }
    fn pushes(&self, waiting: &Job, there: Option<&Job>) -> bool {
        !self.is_fair(waiting.task) && there.is_none_or(|t| self.order(waiting, t).is_lt())
    }
    fn dispatched(&mut self) {
        if self.eevdf_on().is_some() {
            self.eevdf.dispatched();
        }
    }
    fn runnable_on(&mut self, homes: &[Option<usize>], now: u64) {
        self.affine.sync(homes, now);
        if self.eevdf_on().is_some() {
            let classes = &self.classes;
            self.eevdf
                .sync(homes, |t| matches!(classes.get(t), Some(LinuxClass::Fair { .. })));
        }
        if !self.per_cpu_shares() {
            return;
        }
        let Some(shares) = self.shares.as_mut() else {
            return;
        };
        // A group's queue on a CPU that gets its first runnable thread
        // enqueues the group's entity there (`place_entity`).
        self.scratch_entered.clear();
        shares.sync(homes, now, &mut self.scratch_entered);
        let n = self.classes.len();
        for &e in &self.scratch_entered {
            self.top.place(n + e);
        }
        // Its weight follows the group's load (`update_cfs_group`).
        let cpus = shares.cpus();
        self.scratch_shares.resize(cpus, 0);
        for g in 0..shares.groups() {
            if !shares.due(g, now, LINUX_TICK_NS) {
                continue;
            }
            shares.shares(g, now, &mut self.scratch_shares);
            self.top.weights[n + g * cpus..n + (g + 1) * cpus].copy_from_slice(&self.scratch_shares);
        }
    }
    fn before_dispatch(&mut self, runnable: &[Job]) {
        self.scratch.clear();
        let classes = &self.classes;
        self.scratch.extend(
            runnable
                .iter()
                .filter(|j| matches!(classes[j.task], LinuxClass::Fair { .. })),
        );
        self.fair.before_dispatch(&self.scratch);
        let mut top = std::mem::take(&mut self.scratch_top);
        top.clear();
        top.extend(self.scratch.iter().map(|j| self.entity(j)));
        self.top.before_dispatch(&top);
        self.scratch_top = top;
    }
    fn wake(&mut self, job: &Job) {
        match self.classes[job.task] {
            LinuxClass::Deadline { runtime_ns, period_ns } => {
                // CBS wake-up rule: keep (budget, deadline) only if the
                // budget fits the bandwidth in the time left.
                let now = job.release_ns;
                let (left, dl) = (self.dl_left[job.task], self.dl_deadline[job.task]);
                let overflow =
                    dl <= now || (left as u128) * (period_ns as u128) > ((dl - now) as u128) * (runtime_ns as u128);
                if overflow {
                    self.dl_left[job.task] = runtime_ns;
                    self.dl_deadline[job.task] = now + period_ns;
                }
            }
            LinuxClass::Fair { .. } => {
                self.fair.wake(job);
                // With per-CPU shares the group's entity is placed as its
                // queue on the thread's CPU gets it (`runnable_on`).
                if !(self.per_cpu_shares() && self.group[job.task].is_some()) {
                    let e = self.entity(job);
                    self.top.wake(&e);
                }
            }
            LinuxClass::RealTime { .. } => {}
        }
    }
    fn charge(&mut self, cpu: usize, job: &Job, ran_ns: u64) {
        if ran_ns > 0 && self.eevdf_on().is_some() {
            if self.is_fair(job.task) {
                self.eevdf.ran(cpu, job.task, ran_ns);
            } else {
                self.eevdf.other_ran(cpu);
            }
        }
        match self.classes[job.task] {
            LinuxClass::Deadline { .. } => self.dl_left[job.task] = self.dl_left[job.task].saturating_sub(ran_ns),
            LinuxClass::Fair { .. } => {
                self.fair.charge(cpu, job, ran_ns);
                let e = self.entity_on(job, Some(cpu));
                self.top.charge(cpu, &e, ran_ns);
            }
            LinuxClass::RealTime { .. } => {
                if let Some(g) = self.rt_group_of(job.task) {
                    let (slot, per_cpu) = (self.rt_slot(cpu), self.per_cpu);
                    let group = &mut self.rt_groups[g];
                    let budget = group.budget_ns(per_cpu);
                    if let (Some(used), Some(throttled)) = (group.used_ns.get_mut(slot), group.throttled.get_mut(slot))
                    {
                        *used += ran_ns;
                        *throttled |= *used > budget;
                    }
                }
            }
        }
    }
    fn next_timer_ns(&self) -> Option<u64> {
        // The real-time groups' period timers, while they have used time.
        let rt = self
            .rt_groups
            .iter()
            .filter(|g| g.used_ns.iter().any(|&u| u > 0))
            .map(|g| g.next_period_ns)
            .min();
        // Replenishment of throttled deadline threads.
        self.classes
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                matches!(c, LinuxClass::Deadline { .. }) && self.dl_left[*i] == 0 && self.dl_deadline[*i] > 0
            })
            .map(|(i, _)| self.dl_deadline[i])
            .chain(rt)
            .min()
    }
    fn on_timer(&mut self, now: u64, _running: &[Option<Job>]) {
        let per_cpu = self.per_cpu;
        for g in self.rt_groups.iter_mut().filter(|g| g.next_period_ns <= now) {
            let period = g.bandwidth.period_ns.max(1);
            let overrun = (now - g.next_period_ns) / period + 1;
            g.next_period_ns += overrun * period;
            let budget = g.budget_ns(per_cpu);
            for (used, throttled) in g.used_ns.iter_mut().zip(g.throttled.iter_mut()) {
                *used -= (*used).min(overrun.saturating_mul(budget));
                *throttled &= *used >= budget;
            }
        }
        for (i, c) in self.classes.iter().enumerate() {
            if let LinuxClass::Deadline { runtime_ns, period_ns } = *c {
                if self.dl_left[i] == 0 && self.dl_deadline[i] > 0 && self.dl_deadline[i] <= now {
                    while self.dl_deadline[i] <= now {
                        self.dl_deadline[i] += period_ns;
                    }
                    self.dl_left[i] = runtime_ns;
                }
            }
        }
    }
}

/// Xen's credit scheduler (credit1) as xen/common/sched_credit.c of Xen
/// 4.6-4.8 implements it (document 000 ran 4.6):
/// - Accounting (`csched_acct`) every time slice (`tslice_ms`, 30 ms by
///   default; 1 ms the document's tuned value): the pCPUs' slice worth of
///   credit (`credits_per_tslice` x pCPUs, plus the system's negative
///   balance) is shared among the *active* vCPUs by weight, none getting
///   more than one slice worth unless the balance is negative; what a
///   capped vCPU does not take goes to the rest. A vCPU left with credit
///   is UNDER, one without is OVER (floored at minus one slice); an UNDER
///   vCPU above one slice worth stops being active and keeps half.
/// - A vCPU becomes active, and loses its BOOST, only when a pCPU's tick
///   (`csched_tick`, three per slice: 10 ms, or one per slice below 3 ms)
///   finds it running (`csched_vcpu_acct`); running is charged exactly
///   (`burn_credits`), but priorities change only at ticks and accounting.
/// - A vCPU waking UNDER is BOOSTed (`csched_vcpu_wake`) and runs before
///   UNDER and OVER; one that blocks before a tick finds it stays BOOST.
/// - A running vCPU is not preempted within the rate limit
///   (`sched_ratelimit_us`, 1 ms by default, at most the slice).
/// - Per-pCPU run queues: a waking vCPU goes to an idle pCPU if there is
///   one (`__runq_tickle`, `csched_cpu_pick`); a pCPU whose next is OVER or
///   idle steals a better vCPU waiting on a busy peer
///   (`csched_load_balance`; `vcpu_migration_delay` 0: nothing cache-hot).
///
/// Weights are per vCPU here: a domain's weight counts once per active
/// vCPU in `csched_acct`, so splitting a domain's credit among its active
/// vCPUs gives each what a one-vCPU domain of that weight gets.
/// Leaves out: caps (parking), yield, SMT-aware placement, the migration
/// of a running vCPU at its tick, and credits in whole units (10 per ms;
/// here to the nanosecond).
#[derive(Clone, Debug)]
pub struct Credit {
    pub weights: Vec<u64>,
    pub tslice_ns: u64,
    pub cpus: usize,
    credit: Vec<i64>,
    pri: Vec<CreditPri>,
    active: Vec<bool>,
    /// The sum of the active vCPUs' credit at the last accounting.
    balance: i64,
    next_acct: u64,
    /// Per pCPU, its next tick: each pCPU has its own ticker, started as
    /// it came up, so the ticks are spread over the tick period.
    next_tick: Vec<u64>,
    /// Per-pCPU run queues (Xen's); false: one global queue.
    pub per_cpu: bool,
    /// Per vCPU, its hard affinity (`xl vcpu-pin`; empty: anywhere).
    pub pinned: Vec<CpuSet>,
    /// Per vCPU, its soft affinity (`xl vcpu-pin VM V HARD SOFT`; empty:
    /// none): where it prefers to run, within its hard affinity.
    pub soft: Vec<CpuSet>,
}

/// credit1's priorities, best first (`CSCHED_PRI_TS_BOOST`, `_UNDER`,
/// `_OVER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum CreditPri {
    Boost,
    Under,
    Over,
}

/// credit1's balancing: each pCPU has its own run queue; a waking vCPU
/// goes to an idle pCPU when there is one (`csched_cpu_pick`,
/// `__runq_tickle`) and a pCPU with nothing better to run steals from its
/// peers at once (`csched_load_balance`; `vcpu_migration_delay` is 0 by
/// default, so nothing is cache-hot). No periodic balancing.
pub const CREDIT_BALANCE: Balance = Balance {
    newidle_min_avg_idle_ns: 0,
    cache_hot_ns: 0,
    tick_ns: None,
    busy_balance_ticks: None,
};

/// credit1's ticks per slice (`CSCHED_TICKS_PER_TSLICE`) and its default
/// rate limit (`SCHED_DEFAULT_RATELIMIT_US`).
pub const CREDIT_TICKS_PER_TSLICE: u64 = 3;
pub const CREDIT_RATELIMIT_NS: u64 = 1_000_000;

impl Credit {
    pub fn new(weights: Vec<u64>, cpus: usize, tslice_ns: u64) -> Credit {
        let n = weights.len();
        let mut c = Credit {
            weights,
            tslice_ns,
            cpus,
            credit: vec![0; n],
            pri: vec![CreditPri::Under; n],
            active: vec![false; n],
            balance: 0,
            next_acct: tslice_ns,
            next_tick: Vec::new(),
            per_cpu: true,
            pinned: Vec::new(),
            soft: Vec::new(),
        };
        let (tick, m) = (c.tick_ns(), cpus.max(1) as u64);
        c.next_tick = (0..m).map(|p| tick + tick * p / m).collect();
        c
    }

    /// One global run queue instead of per-pCPU ones.
    /// The vCPU's soft affinity within its hard one, when it says anything
    /// (`has_soft_affinity`: not empty there, and not all of it).
    fn useful_soft(&self, task: usize) -> Option<CpuSet> {
        let hard = self.affinity(task);
        let soft = self.soft.get(task)?.and(hard);
        (!soft.is_empty() && !soft.covers(hard)).then_some(soft)
    }

    pub fn global(mut self) -> Credit {
        self.per_cpu = false;
        self
    }

    /// `__csched_set_tslice`: three ticks per slice, one below 3 ms.
    pub fn tick_ns(&self) -> u64 {
        if self.tslice_ns < CREDIT_TICKS_PER_TSLICE * 1_000_000 {
            self.tslice_ns
        } else {
            self.tslice_ns / CREDIT_TICKS_PER_TSLICE
        }
    }

    /// `csched_acct`.
    fn account(&mut self) {
        let per_slice = self.tslice_ns as i64;
        let weight_total: i64 = (0..self.weights.len())
            .filter(|&v| self.active[v])
            .map(|v| self.weights[v].max(1) as i64)
            .sum();
        if weight_total == 0 {
            self.balance = 0;
            return;
        }
        let mut credit_total = per_slice * self.cpus as i64;
        if self.balance < 0 {
            credit_total -= self.balance;
        }
        let mut weight_left = weight_total;
        let mut balance = 0;
        for v in 0..self.weights.len() {
            if !self.active[v] {
                continue;
            }
            let w = self.weights[v].max(1) as i64;
            weight_left -= w;
            let mut peak = per_slice;
            if self.balance < 0 {
                peak += (-self.balance * w + weight_total - 1) / weight_total;
            }
            let mut fair = (credit_total * w + weight_total - 1) / weight_total;
            if fair >= peak {
                // Give the others what this vCPU cannot take.
                if weight_left > 0 {
                    credit_total += ((fair - peak) * weight_total + weight_left - 1) / weight_left;
                }
                fair = peak;
            }
            self.credit[v] += fair;
            if self.credit[v] < 0 {
                self.pri[v] = CreditPri::Over;
                self.credit[v] = self.credit[v].max(-per_slice);
            } else {
                self.pri[v] = CreditPri::Under;
                if self.credit[v] > per_slice {
                    self.active[v] = false;
                    self.credit[v] /= 2;
                }
            }
            balance += self.credit[v];
        }
        self.balance = balance;
    }
}

impl Scheduler for Credit {
    fn name(&self) -> &'static str {
        "credit"
    }
    fn balance(&self) -> Option<Balance> {
        self.per_cpu.then_some(CREDIT_BALANCE)
    }
    fn order(&self, a: &Job, b: &Job) -> Ordering {
        self.pri[a.task]
            .cmp(&self.pri[b.task])
            .then(a.queued_seq.cmp(&b.queued_seq))
    }
    fn slice_ns(&self, _job: &Job, _runnable: usize) -> Option<u64> {
        Some(self.tslice_ns)
    }
    fn preempts(&self, _newcomer: &Job, running: &Job, now: u64) -> bool {
        now >= running.on_cpu_since_ns + self.ratelimit_ns()
    }
    fn ratelimit_ns(&self) -> u64 {
        // Xen refuses a rate limit above the slice and uses the slice.
        CREDIT_RATELIMIT_NS.min(self.tslice_ns)
    }
    fn steals_for(&self, next: &Job) -> bool {
        self.pri[next.task] == CreditPri::Over
    }
    fn affinity(&self, task: usize) -> CpuSet {
        CpuSet::of_thread(&self.pinned, task)
    }
    fn soft_affinity(&self, task: usize) -> CpuSet {
        self.useful_soft(task).unwrap_or(CpuSet::ALL)
    }
    fn select_cpu(&self, job: &Job, prev: usize, cpus: &[CpuView]) -> usize {
        // `_csched_cpu_pick` and `__runq_tickle` run a soft affinity step
        // before the hard one (`for_each_affinity_balance_step`): an idle
        // pCPU the vCPU prefers, else any idle one it may use, else the
        // one it ran on.
        let hard = self.affinity(job.task);
        if let Some(soft) = self.useful_soft(job.task) {
            let c = idle_first(prev, cpus, soft);
            if soft.contains(c) && cpus[c].idle() {
                return c;
            }
        }
        idle_first(prev, cpus, hard)
    }
    fn wake(&mut self, job: &Job) {
        if self.pri[job.task] == CreditPri::Under {
            self.pri[job.task] = CreditPri::Boost;
        }
    }
    fn charge(&mut self, _cpu: usize, job: &Job, ran_ns: u64) {
        self.credit[job.task] -= ran_ns as i64;
    }
    fn next_timer_ns(&self) -> Option<u64> {
        Some(self.next_tick.iter().fold(self.next_acct, |a, &t| a.min(t)))
    }
    fn on_timer(&mut self, now: u64, running: &[Option<Job>]) {
        let tick = self.tick_ns();
        for (p, next) in self.next_tick.iter_mut().enumerate() {
            if *next > now {
                continue;
            }
            while *next <= now {
                *next += tick;
            }
            // `csched_tick` -> `csched_vcpu_acct` on what this pCPU runs.
            if let Some(j) = running.get(p).copied().flatten() {
                let v = j.task;
                if self.pri[v] == CreditPri::Boost {
                    self.pri[v] = CreditPri::Under;
                }
                self.active[v] = true;
            }
        }
        while self.next_acct <= now {
            self.account();
            self.next_acct += self.tslice_ns;
        }
    }
}

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
