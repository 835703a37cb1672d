//! A Linux host's scheduling classes as the lab runs them, after
//! kernel/sched/{deadline,rt,fair}.c: deadline servers (CBS), real-time
//! threads with RT group bandwidth, fair threads with EEVDF and one cgroup
//! level, on per-CPU run queues with the kernel's balancing.

use super::fits::{salted_draw, unit_draw, WAKE_PREEMPT_SALT};
use super::{idle_first, Balance, Cfs, CpuSet, CpuView, Job, MeasuredWakeups, Scheduler};
use crate::affine::WakeAffine;
use crate::eevdf::Eevdf;
use crate::shares::GroupShares;
use std::cmp::Ordering;

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
    // The fields not pub are pub(super), not private: `Model` (mod.rs)
    // builds a Linux with struct update syntax, which needs them visible.
    pub classes: Vec<LinuxClass>,
    /// EEVDF's slice of a fair thread.
    pub fair_slice_ns: u64,
    pub(super) fair: Cfs,
    /// Per thread, the cgroup it shares in (None: the root).
    pub(super) group: Vec<Option<usize>>,
    /// The root's fair entities: threads 0..n, then group g's entity on
    /// CPU c at n + g * cpus + c (with one global queue, or EEVDF's rules,
    /// only c = 0: one entity of the group's weight).
    pub(super) top: Cfs,
    /// Per-CPU shares of the groups' weights, with per-CPU queues and
    /// measured wake-ups (the `top` entities' weights).
    pub(super) shares: Option<GroupShares>,
    pub(super) scratch_entered: Vec<usize>,
    pub(super) scratch_shares: Vec<u64>,
    pub(super) scratch_top: Vec<Job>,
    /// Per deadline thread: budget left and current absolute deadline.
    pub(super) dl_left: Vec<u64>,
    pub(super) dl_deadline: Vec<u64>,
    /// Per RR thread with per-CPU queues: ticks left of its time slice,
    /// kept across sleeps (`p->rt.time_slice` is refilled only when it
    /// runs out).
    pub(super) rr_ticks_left: Vec<u64>,
    /// Per thread, the cgroup whose real-time bandwidth it draws on.
    pub(super) rt_group: Vec<Option<usize>>,
    pub(super) rt_groups: Vec<RtGroup>,
    pub(super) scratch: Vec<Job>,
    /// Per-CPU run queues (the kernel's); false: one global queue.
    pub per_cpu: bool,
    /// Per thread, where it may run (empty: anywhere).
    pub pinned: Vec<CpuSet>,
    /// Where this host's kernel queues a waking fair thread and whether
    /// it preempts there, as measured (default: the kernel's rules).
    pub wakeups: MeasuredWakeups,
    /// With per-CPU queues: EEVDF's lag, slices and delayed dequeues of
    /// the fair threads, by run queue.
    pub(super) eevdf: Eevdf,
    /// With per-CPU queues: the threads' wakee flips and runnable
    /// averages, for where a thread woken by another CPU's goes.
    pub(super) affine: WakeAffine,
    /// Scratch of `wake_affine_weight`: per CPU the root's fair load; per
    /// group queue (`g * cpus + c`) its threads' runnable averages and
    /// their weighted sum.
    pub(super) scratch_cpu_load: Vec<f64>,
    pub(super) scratch_group_load: Vec<(f64, f64)>,
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
pub(super) struct RtGroup {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{run, simulate, simulate_jobs};
    use crate::sched::Edf;
    use crate::task::PeriodicTask;
    use crate::testutil::{fifo, job, piece, Scripted, FAIR, MS};

    /// SCHED_DEADLINE as a constant bandwidth server: a thread that always
    /// wants the CPU gets exactly its runtime per period (throttled the
    /// rest, the fair hog beside it gets the remainder), and a deadline
    /// thread that overruns its runtime cannot make another miss
    /// (bandwidth isolation), where plain EDF lets it.
    #[test]
    fn linux_deadline_threads_get_their_bandwidth_and_no_more() {
        let hog = |name: &str| PeriodicTask::new(name, 10_000 * MS, 10_000 * MS, 0);
        let dl = LinuxClass::Deadline {
            runtime_ns: 2 * MS,
            period_ns: 10 * MS,
        };
        let mut l = Linux::new(vec![dl, FAIR], 1);
        let o = simulate(&[hog("dl"), hog("fair")], 1, &mut l, 1_000 * MS, 1);
        assert_eq!(o.tasks[0].cpu_ns, 200 * MS, "2 ms every 10 ms");
        assert_eq!(o.tasks[1].cpu_ns, 800 * MS);
        // A asks 8 ms per 10 ms with a 3 ms runtime; B 5 ms with 5 ms.
        let ts = vec![
            PeriodicTask::new("a", 8 * MS, 10 * MS, 0),
            PeriodicTask::new("b", 5 * MS, 10 * MS, 0),
        ];
        let server = |r| LinuxClass::Deadline {
            runtime_ns: r * MS,
            period_ns: 10 * MS,
        };
        let o = simulate(&ts, 1, &mut Linux::new(vec![server(3), server(5)], 1), 1_000 * MS, 1);
        assert_eq!(o.tasks[1].deadline_misses, 0, "{:?}", o.tasks[1]);
        assert!(o.tasks[0].deadline_misses > 0);
        let edf = simulate(&ts, 1, &mut Edf, 1_000 * MS, 1);
        assert!(
            edf.tasks[1].deadline_misses > 0,
            "without servers the overrun spills over"
        );
    }

    /// The classes run in the kernel's order: a deadline thread before a
    /// real-time one before a fair one, whatever their arrival.
    #[test]
    fn linux_classes_run_deadline_then_real_time_then_fair() {
        let t = |n: &str, c: u64| PeriodicTask::new(n, c * MS, 100 * MS, 0);
        let ts = vec![t("fair", 10), t("rt", 10), t("dl", 10)];
        let classes = vec![
            FAIR,
            fifo(50),
            LinuxClass::Deadline {
                runtime_ns: 10 * MS,
                period_ns: 100 * MS,
            },
        ];
        let o = simulate(&ts, 1, &mut Linux::new(classes, 1), 100 * MS, 1);
        let done: Vec<u64> = o.tasks.iter().map(|t| t.worst_response_ns).collect();
        assert_eq!(done, vec![30 * MS, 20 * MS, 10 * MS]);
    }

    /// EEVDF's run to parity: a waking fair thread waits for the running
    /// fair thread's slice (1.5 ms with 2 CPUs' scaling) to end; a
    /// real-time thread takes the CPU at once, and so does a fair one on a
    /// host measured to preempt as threads wake (`preempts` 1).
    #[test]
    fn linux_fair_threads_run_to_parity_and_real_time_preempts() {
        let mut light = PeriodicTask::new("light", MS, 100 * MS, 0);
        light.offset_ns = MS / 5;
        let ts = vec![PeriodicTask::new("hog", 10_000 * MS, 10_000 * MS, 0), light];
        let mut l = Linux::new(vec![FAIR, FAIR], 2);
        assert_eq!(l.fair_slice_ns, 1_500_000);
        let o = simulate(&ts, 1, &mut l, 100 * MS, 1);
        assert_eq!(o.tasks[1].worst_response_ns, 1_500_000 - MS / 5 + MS);
        let o = simulate(&ts, 1, &mut Linux::new(vec![FAIR, fifo(1)], 2), 100 * MS, 1);
        assert_eq!(o.tasks[1].worst_response_ns, MS);
        l.wakeups.preempts = Some(1.0);
        let o = simulate(&ts, 1, &mut l, 100 * MS, 1);
        assert_eq!(o.tasks[1].worst_response_ns, MS);
    }

    /// With per-CPU queues an RR slice is counted in ticks (4 ms), as
    /// `task_tick_rt` counts it: a 1 ms slice is one tick, and what is left
    /// of a slice carries over a sleep.
    #[test]
    fn linux_rr_slices_are_counted_in_ticks_and_kept_across_sleep() {
        let rr = |slice_ms: u64| LinuxClass::RealTime {
            priority: 50,
            slice_ns: Some(slice_ms * MS),
        };
        // 1 ms is one tick: a runs to the tick at 4 ms, b to 8, ...
        let mut w = Scripted(vec![piece(0, 0, 10 * MS), piece(1, 0, 10 * MS)]);
        let o = run(&mut w, 1, &mut Linux::new(vec![rr(1), rr(1)], 1), 100 * MS);
        let done: Vec<u64> = o.tasks.iter().map(|t| t.worst_response_ns).collect();
        assert_eq!(done, vec![18 * MS, 20 * MS]);
        // 10 ms is 3 ticks; a used one of them (the tick at 4 ms) before
        // it slept, so at 20 ms it yields to b at the second tick, 28 ms.
        let mut w = Scripted(vec![
            piece(0, 0, 6 * MS),
            piece(0, 20 * MS, 30 * MS),
            piece(1, 20 * MS, 2 * MS),
        ]);
        let o = run(&mut w, 1, &mut Linux::new(vec![rr(10), rr(10)], 1), 100 * MS);
        assert_eq!(o.tasks[1].worst_response_ns, 10 * MS);
    }

    /// A real-time thread in a cgroup with 300 ms of real-time time per
    /// second runs that (and up to the tick that notices it), then the
    /// fair thread has the CPU until the period ends.
    #[test]
    fn a_real_time_group_is_throttled_at_its_budget_until_the_next_period() {
        let rt = fifo(50);
        let fair = FAIR;
        let budget = RtBandwidth {
            runtime_ns: 300 * MS,
            period_ns: 1000 * MS,
            cpus: 1,
            first_refill_ns: None,
        };
        let mut w = Scripted(vec![piece(0, 0, 5000 * MS), piece(1, 0, 5000 * MS)]);
        let mut l = Linux::new(vec![rt, fair], 1).with_rt_bandwidth(vec![Some(0), None], &[budget]);
        let o = run(&mut w, 1, &mut l, 2000 * MS);
        // 0-304 ms (throttled at the tick after 300), then from 1 s until
        // the period's 300 ms less the 4 ms overrun are used again.
        assert_eq!(o.tasks[0].cpu_ns, 604 * MS);
        assert_eq!(o.tasks[1].cpu_ns, 1396 * MS);
        // The period timer started 600 ms before the run (it pays back at
        // 400 ms and 1.4 s): 0-304 ms, 400-700 and 1400-1700.
        let mut w = Scripted(vec![piece(0, 0, 5000 * MS), piece(1, 0, 5000 * MS)]);
        let early = RtBandwidth {
            first_refill_ns: Some(400 * MS),
            ..budget
        };
        let mut l = Linux::new(vec![rt, fair], 1).with_rt_bandwidth(vec![Some(0), None], &[early]);
        let o = run(&mut w, 1, &mut l, 2000 * MS);
        assert_eq!(o.tasks[0].cpu_ns, 904 * MS);
        let mut w = Scripted(vec![piece(0, 0, 5000 * MS), piece(1, 0, 5000 * MS)]);
        let o = run(&mut w, 1, &mut Linux::new(vec![rt, fair], 1), 2000 * MS);
        assert_eq!(o.tasks[0].cpu_ns, 2000 * MS, "without a budget it never yields");
    }

    /// With per-CPU queues the budget is each CPU's own (the kernel's
    /// `rt_rq` per CPU, RT_RUNTIME_SHARE off): a real-time thread that
    /// stays on one CPU gets that CPU's runtime a period, not its group's
    /// CPUs' together; throttled there, it is not pushed to the other CPU,
    /// busy with fair work.
    #[test]
    fn a_real_time_groups_budget_is_per_cpu() {
        use crate::sched::CpuSet;
        let budget = RtBandwidth {
            runtime_ns: 300 * MS,
            period_ns: 1000 * MS,
            cpus: 2,
            first_refill_ns: None,
        };
        let rt_on_cpu0 = |pinned: bool| {
            let mut w = Scripted(vec![
                piece(0, 0, 5000 * MS),
                piece(1, 0, 5000 * MS),
                piece(2, 0, 5000 * MS),
            ]);
            let mut l =
                Linux::new(vec![fifo(50), FAIR, FAIR], 2).with_rt_bandwidth(vec![Some(0), None, None], &[budget]);
            if pinned {
                l.pinned = vec![CpuSet::range(0..1), CpuSet::ALL, CpuSet::ALL];
            }
            run(&mut w, 2, &mut l, 2000 * MS).tasks[0].cpu_ns
        };
        // 300 ms in each of the two periods, up to a tick over (the
        // throttle is noticed at a tick), not 600 ms a period.
        let one_cpus_budget = 600 * MS..=608 * MS;
        let pinned = rt_on_cpu0(true);
        assert!(one_cpus_budget.contains(&pinned), "{pinned}");
        let free = rt_on_cpu0(false);
        assert!(
            one_cpus_budget.contains(&free),
            "throttled on its CPU, it waits there: {free}"
        );
        // One global queue: the group's CPUs' budgets pooled.
        let mut w = Scripted(vec![
            piece(0, 0, 5000 * MS),
            piece(1, 0, 5000 * MS),
            piece(2, 0, 5000 * MS),
        ]);
        let mut l = Linux::new(vec![fifo(50), FAIR, FAIR], 2)
            .global()
            .with_rt_bandwidth(vec![Some(0), None, None], &[budget]);
        assert!(run(&mut w, 2, &mut l, 2000 * MS).tasks[0].cpu_ns > 1000 * MS);
    }

    /// A fair thread woken by a fair thread's work on another CPU, both
    /// CPUs busy, goes to the waker's CPU when the waker is all that CPU
    /// runs (`wake_affine_idle` for a synchronous wake-up); a real-time
    /// waker's CPU, or one the thread may not use, leaves it at its own
    /// previous CPU.
    #[test]
    fn linux_places_a_synchronous_wake_up_at_its_fair_wakers_cpu() {
        use crate::sched::{CpuSet, CpuView, Job, Scheduler};
        let fair = FAIR;
        let rt = fifo(50);
        let mut l = Linux::new(vec![fair, fair, rt, fair], 2);
        let woken = Job {
            started: false,
            woken: true,
            ..job(0)
        };
        let view = |on_1: usize| {
            [
                CpuView {
                    running: Some(job(3)),
                    waiting: 0,
                },
                CpuView {
                    running: Some(job(on_1)),
                    waiting: 0,
                },
            ]
        };
        assert_eq!(l.affine_target(&woken, 0, 1, 1, &view(1)), 1, "a fair waker's CPU");
        assert_eq!(l.affine_target(&woken, 0, 2, 1, &view(2)), 0, "not a real-time waker's");
        l.pinned = vec![CpuSet::of([0]), CpuSet::ALL, CpuSet::ALL, CpuSet::ALL];
        assert_eq!(l.affine_target(&woken, 0, 1, 1, &view(1)), 0, "not outside its cpuset");
    }

    /// With more than the waker to run on its CPU the kernel weighs the
    /// two CPUs' PELT loads (`wake_affine_weight`): a wakee whose own load
    /// makes most of its last CPU's stays there; one with little load of
    /// its own goes to the waker's CPU, the waker's load taken off (it is
    /// about to sleep).
    #[test]
    fn linux_weighs_both_cpus_loads_when_the_wakers_cpu_has_more_to_run() {
        use crate::sched::{CpuView, Job, Scheduler};
        const S: u64 = 1_000_000_000;
        // Waker 0 and 1 on CPU 0, 3 on CPU 1 where the wakee 2 last ran.
        let run = |wakee_busy: bool| {
            let mut l = Linux::new(vec![FAIR; 4], 2);
            let mut now = 0;
            while now < S {
                let wakee = (wakee_busy || now % (20 * MS) == 0).then_some(1);
                l.runnable_on(&[Some(0), Some(0), wakee, Some(1)], now);
                l.runnable_on(&[Some(0), Some(0), None, Some(1)], now + MS / 2);
                now += MS;
            }
            let view = [
                CpuView {
                    running: Some(job(0)),
                    waiting: 1,
                },
                CpuView {
                    running: Some(job(3)),
                    waiting: 0,
                },
            ];
            let woken = Job {
                release_ns: now,
                started: false,
                woken: true,
                ..job(2)
            };
            l.affine_target(&woken, 1, 0, 0, &view)
        };
        assert_eq!(run(true), 1, "a wakee with half its CPU's load stays");
        assert_eq!(run(false), 0, "a light wakee goes to its waker's CPU");
    }

    /// A fair thread whose last CPU is busy while another idles goes to
    /// the idle one, unless the host's measured share keeps it there: by
    /// a draw fixed per job, about that share of wake-ups stay.
    #[test]
    fn linux_keeps_the_measured_share_of_wake_ups_on_a_busy_last_cpu() {
        use crate::sched::{CpuView, Job, Scheduler};
        let fair = FAIR;
        let mut l = Linux::new(vec![fair, fair], 2);
        let other = job(1);
        let busy_then_idle = [
            CpuView {
                running: Some(other),
                waiting: 0,
            },
            CpuView {
                running: None,
                waiting: 0,
            },
        ];
        let waking = |k: u64| Job {
            task: 0,
            release_ns: k * 1_000_003,
            started: false,
            ..other
        };
        let stays = |l: &Linux| {
            (0..10_000)
                .filter(|&k| l.select_cpu(&waking(k), 0, &busy_then_idle) == 0)
                .count()
        };
        assert_eq!(stays(&l), 0);
        l.wakeups.stay_on_busy_prev = 1.0;
        assert_eq!(stays(&l), 10_000);
        l.wakeups.stay_on_busy_prev = 0.91;
        assert!((8_900..=9_300).contains(&stays(&l)), "{}", stays(&l));
        // An idle last CPU is always kept.
        assert_eq!(l.select_cpu(&waking(1), 1, &busy_then_idle), 1);
    }

    /// A cgroup is one entity at the root: three hogs in a group beside
    /// one hog at the root get half the CPU together, the lone hog the
    /// other half.
    #[test]
    fn linux_cgroups_share_as_one_entity() {
        let hog = |name: &str| PeriodicTask::new(name, 10_000 * MS, 10_000 * MS, 0);
        let ts = vec![hog("a"), hog("b"), hog("c"), hog("root")];
        let fair = FAIR;
        let mut l = Linux::new(vec![fair; 4], 1).with_groups(vec![Some(0), Some(0), Some(0), None], &[1024]);
        let o = simulate(&ts, 1, &mut l, 3_000 * MS, 1);
        let share = |i: usize| o.tasks[i].cpu_ns as f64 / (3_000 * MS) as f64;
        assert!((share(3) - 0.5).abs() < 0.02, "root hog {}", share(3));
        for i in 0..3 {
            assert!((share(i) - 1.0 / 6.0).abs() < 0.02, "grouped hog {i}: {}", share(i));
        }
    }

    /// With per-CPU queues a group weighs on each CPU by that CPU's part
    /// of the group's load (`calc_group_shares`): a grouped hog beside a
    /// root hog on CPU 0, while the group's other thread runs 5 ms of
    /// every 10 on CPU 1, weighs 1024 / (1 + 0.5) and gets about 40 % of
    /// CPU 0 (one entity charged with both threads' time would give it
    /// 25 %).
    #[test]
    fn linux_groups_weigh_by_their_load_on_each_cpu() {
        let hog = |name: &str| PeriodicTask::new(name, 10_000 * MS, 10_000 * MS, 0);
        let ts = vec![
            hog("grouped"),
            hog("root"),
            PeriodicTask::new("half", 5 * MS, 10 * MS, 0),
        ];
        let fair = FAIR;
        let mut l = Linux::new(vec![fair; 3], 2).with_groups(vec![Some(0), None, Some(0)], &[1024]);
        l.wakeups.preempts = Some(0.5);
        l.pinned = vec![
            crate::sched::CpuSet::of([0]),
            crate::sched::CpuSet::of([0]),
            crate::sched::CpuSet::of([1]),
        ];
        let o = simulate(&ts, 2, &mut l, 3_000 * MS, 1);
        let share = |i: usize| o.tasks[i].cpu_ns as f64 / (3_000 * MS) as f64;
        assert!((share(2) - 0.5).abs() < 0.01, "half {}", share(2));
        assert!((share(0) - 0.4).abs() < 0.03, "grouped hog {}", share(0));
        assert!((share(1) - 0.6).abs() < 0.03, "root hog {}", share(1));
    }

    /// Uncalibrated, Linux's fair class follows EEVDF through the engine:
    /// a short thread woken behind a long one with no lag to spend waits
    /// for it (the long one is eligible and within its slice), earns lag
    /// while it waits, sleeps with it, and next time preempts at once.
    #[test]
    fn linux_fair_wake_ups_preempt_with_the_lag_they_earned() {
        let long = PeriodicTask::new("long", 1_400_000, 10 * MS, 1);
        let mut short = PeriodicTask::new("short", 10_000, 10 * MS, 1);
        short.offset_ns = MS / 5;
        let responses = |preempts: Option<f64>| {
            let mut done = Vec::new();
            let mut l = Linux::new(vec![FAIR; 2], 2);
            l.wakeups.preempts = preempts;
            simulate_jobs(
                &[long.clone(), short.clone()],
                1,
                &mut l,
                20 * MS,
                1,
                &mut |task, release, end| {
                    if task == 1 {
                        done.push(end - release);
                    }
                },
            );
            done
        };
        assert_eq!(responses(None), vec![1_210_000, 10_000]);
        // A host measured never to preempt waits both times.
        assert_eq!(responses(Some(0.0)), vec![1_210_000, 1_210_000]);
    }

    /// A real-time or deadline thread wakes on the CPU it last ran on
    /// when a fair thread holds it, though the other CPU idles
    /// (`select_task_rq_rt` and `select_task_rq_dl` look further only
    /// past a thread of their own class); behind a real-time thread it
    /// does not precede it takes the idle CPU.
    #[test]
    fn linux_real_time_threads_wake_where_they_ran_over_a_fair_thread() {
        use crate::sched::CpuView;
        let classes = vec![
            FAIR,
            fifo(50),
            LinuxClass::Deadline {
                runtime_ns: MS,
                period_ns: 10 * MS,
            },
            fifo(90),
        ];
        let l = Linux::new(classes, 2);
        let over = |task: usize| {
            [
                CpuView {
                    running: Some(job(task)),
                    waiting: 0,
                },
                CpuView::default(),
            ]
        };
        assert_eq!(l.select_cpu(&job(1), 0, &over(0)), 0, "real-time over fair");
        assert_eq!(l.select_cpu(&job(2), 0, &over(0)), 0, "deadline over fair");
        assert_eq!(
            l.select_cpu(&job(1), 0, &over(3)),
            1,
            "behind a better real-time thread"
        );
    }

    /// A real-time thread queued behind its betters moves as soon as a
    /// CPU drops to fair work (`pull_rt_task`; `push_rt_task` the other
    /// way), without waiting for that CPU to idle or tick: two fifo:90
    /// threads hold both CPUs when a fifo:50 one wakes at 1 ms; the first
    /// stops at 2 ms with a fair hog queued behind it.
    #[test]
    fn a_waiting_real_time_thread_moves_to_a_cpu_that_drops_to_fair_work() {
        let classes = vec![fifo(90), fifo(90), FAIR, fifo(50)];
        // Threads start on CPU (thread mod 2): the fifo:50 one behind the
        // 5 ms fifo:90 one on CPU 1, the hog behind the 2 ms one on CPU 0.
        let mut w = Scripted(vec![
            piece(0, 0, 2 * MS),
            piece(1, 0, 5 * MS),
            piece(2, 0, 100 * MS),
            piece(3, MS, MS),
        ]);
        let o = run(&mut w, 2, &mut Linux::new(classes, 2), 50 * MS);
        assert_eq!(o.tasks[3].worst_response_ns, 2 * MS, "ran 2-3 ms on CPU 0");
    }

    /// On a host measured to leave a CPU running a real-time thread
    /// (`MeasuredWakeups::leave_real_time`), a fair thread waking there
    /// goes to the CPU running a fair thread and waits its turn there;
    /// with the kernel's rules as written it stays behind the real-time one.
    #[test]
    fn a_measured_host_moves_a_waking_fair_thread_off_a_real_time_cpu() {
        use crate::sched::{CpuView, MeasuredWakeups};
        let classes = vec![fifo(90), FAIR, FAIR];
        let cpus = [
            CpuView {
                running: Some(job(0)),
                waiting: 0,
            },
            CpuView {
                running: Some(job(1)),
                waiting: 0,
            },
        ];
        let written = Linux::new(classes.clone(), 2);
        assert_eq!(
            written.select_cpu(&job(2), 0, &cpus),
            0,
            "as written: no idle CPU, stays"
        );
        let l = Linux::new(classes, 2).measured(MeasuredWakeups {
            stay_on_busy_prev: 0.91,
            preempts: Some(0.76),
            leave_real_time: true,
        });
        assert_eq!(l.select_cpu(&job(2), 0, &cpus), 1, "measured: leaves the real-time CPU");
        // An idle CPU is taken before a busy one, and the measured share
        // that stays on a busy CPU does not keep it behind real-time work.
        let idle = [cpus[0], CpuView::default()];
        for release_ns in 0..64 {
            let j = crate::sched::Job { release_ns, ..job(2) };
            assert_eq!(l.select_cpu(&j, 0, &idle), 1);
        }
    }
}
