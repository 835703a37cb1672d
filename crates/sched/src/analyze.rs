//! Rebuilds, from scheduler events, each thread's on-CPU and runnable-but-
//! waiting intervals, and from them per-window CPU use, run delay (steal),
//! contention episodes and who ran instead.
//!
//! The same streaming [`Analyzer`] serves `observe report` (a whole
//! recording) and `observe top` (batches as they are drained).
//!
//! Window accounting. Time is credited to a group when an on-CPU interval
//! ends, and, for threads still running, at every boundary of the finest
//! window ("tick"). So after a tick at T no credit can start before T, and
//! every window ending at or before T is final; windows are closed lazily,
//! with empty windows counted in bulk. Windows are aligned to the start of
//! the recording and only whole windows count.
//!
//! Whether the host conserved work and where it queued waking threads is
//! counted by this state machine into [`crate::wakeups`]'s counters; the
//! figures [`Analyzer::report`] returns are [`crate::report`]'s types
//! (re-exported here).
//!
//! Memory follows the events, not the threads a recording names or the
//! CPUs it claims: a thread costs about 200 bytes, plus 8 per run-queue
//! wait (up to 4096 of them, then a 270 KiB histogram: `Durations`); a
//! vCPU or host I/O thread about 1 KiB more for its windows once it runs;
//! a group about 400 bytes, and 1 KiB more once it runs. Each window
//! length adds 16 bytes per distinct window usage (up to 512, then a
//! histogram of 100 to 200 KiB) and 8 per window still open (those
//! since the least recent last switch of any CPU: a CPU that runs one
//! task for an hour without a switch keeps an hour of windows open). So
//! under `observe record --all`, where each process is a group, a
//! short-lived process costs about 2.5 KiB; with a histogram per thread
//! and three per group, each of fixed size, it cost some 2 MiB.
use std::collections::HashMap;

use crate::durations::Durations;

use ontime_recording::event::{kind, Event, F_PREV_RUNNABLE, TASK_DEAD, TASK_UNINTERRUPTIBLE};
use ontime_recording::recording::{Group, GroupKind};

pub use crate::report::{Contention, Episodes, GroupReport, Preemptor, ThreadReport, TimeShares};
use crate::wakeups::{PendingWake, WakeOutcome, WakePair};
pub use crate::wakeups::{WakePlacement, WakePreemption, WakePreemptionByKind, WAKE_AT_ONCE_NS};
pub use crate::window::{AboveK, WindowUsage};
use crate::window::{Entity, WindowAcc};

/// Where a tracked thread was during an [`Interval`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// On this CPU.
    Running { cpu: u16 },
    /// Runnable, queued on this CPU while `behind` ran there (run delay,
    /// steal; `u32::MAX` when the occupant is not known yet). A wait behind
    /// several tasks is one interval per task.
    Waiting { cpu: u16, behind: u32 },
    /// Asleep by its own choice (waiting for work).
    Sleeping,
    /// Blocked in the kernel (uninterruptible: typically I/O).
    Blocked,
}

/// One closed stretch of a thread's time line, relative to the start of
/// the recording (ns). A thread's intervals tile its tracked time; profile
/// joins stacks to them and sim produces them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub tid: u32,
    pub group: u32,
    pub place: Place,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// What [`Analyzer::on_interval`] calls.
pub type IntervalSink = Box<dyn FnMut(&Interval)>;

/// Longest gap between consecutive events (or to the end) the analysis
/// accepts: the recording reader refuses a longer one between the last
/// stamp and END, and events that reach the analyzer otherwise (the live
/// view, the simulator) are left out past it.
pub const MAX_EVENT_GAP_NS: u64 = ontime_core::limits::MAX_EVENT_GAP_NS;

#[derive(Clone, Debug)]
pub struct AnalysisOptions {
    /// Window lengths, ns.
    pub windows: Vec<u64>,
    /// Keep per-window series (for plots and --series).
    pub series: bool,
}

impl Default for AnalysisOptions {
    fn default() -> Self {
        AnalysisOptions {
            windows: vec![1_000_000, 10_000_000, 100_000_000, 1_000_000_000],
            series: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Not seen yet: before its first event we cannot tell.
    Unknown,
    Running,
    Waiting,
    /// Asleep by its own choice (interruptible: waiting for work).
    Sleeping,
    /// Blocked in the kernel (uninterruptible: typically I/O).
    Blocked,
    Dead,
}

impl St {
    /// Off the CPU and not runnable, for whatever reason.
    fn asleep(self) -> bool {
        matches!(self, St::Sleeping | St::Blocked)
    }
}

pub(crate) struct ThreadState {
    pub(crate) group: u32,
    /// Whether it keeps windows of its own (a vCPU, a host I/O thread).
    windows: bool,
    /// Its windows, once it has been credited time.
    entity: Option<usize>,
    vcpu: bool,
    st: St,
    cpu: u16,
    /// The CPU it last ran on (`cpu` follows migrations, which the kernel
    /// reports before the wake-up that caused them).
    ran_on: Option<u16>,
    /// Times it ran on another CPU than the one it last ran on.
    migrations: u64,
    /// Start of the stretch not yet credited (on-CPU time is credited at
    /// ticks, so for a running thread this moves forward).
    since: u64,
    /// When it entered its current state: the start of its open interval.
    entered: u64,
    on_cpu_ns: u64,
    wait_ns: u64,
    waits: Durations,
    /// Time asleep (interruptible) and blocked (uninterruptible), closed
    /// intervals only.
    sleep_ns: u64,
    blocked_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contend {
    None,
    /// Some vCPUs wait, none runs, others are blocked.
    Partial,
    /// Every vCPU waits.
    Full,
    /// Some run while others wait.
    Hazard,
}

pub(crate) struct GroupState {
    pub(crate) group: Group,
    /// Its windows, once it has been credited time.
    entity: Option<usize>,
    threads: u32,
    vcpus: u32,
    running: u32,
    waiting: u32,
    contend: Contend,
    contend_since: u64,
    any_since: Option<u64>,
    full: Durations,
    partial: Durations,
    any: Durations,
    /// Time with any vCPU waiting since `stats_from`, episodes still open
    /// not included.
    any_ns: u64,
    hazard_ns: u64,
    on_cpu_ns: u64,
    wait_ns: u64,
    /// Time its waiting vCPUs spent behind each occupant tid.
    preempted_by: HashMap<u32, u64>,
}

/// The idle task's tid on every CPU (swapper).
pub(crate) const IDLE_TID: u32 = 0;

/// Streams events into window usage, run delay and contention.
pub struct Analyzer {
    /// Receives every closed interval of every tracked thread's time line.
    intervals: Option<IntervalSink>,
    start: u64,
    cpus: usize,
    windows: Vec<u64>,
    tick: u64,
    next_tick: u64,
    series: bool,
    pub(crate) groups: Vec<GroupState>,
    entities: Vec<Entity>,
    /// Where the window statistics start (the last `reset_stats`): an
    /// entity made later counts its windows from there.
    stats_horizon: u64,
    /// Up to where `advance` last closed every entity's windows.
    closed_to: u64,
    /// Windows ending by this time get no more credit (see `do_tick`).
    closable: u64,
    pub(crate) threads: HashMap<u32, ThreadState>,
    /// Who is on each CPU (u32::MAX until its first switch).
    pub(crate) occupant: Vec<u32>,
    /// Tracked thread running on each CPU (for tick crediting).
    running_on: Vec<Option<u32>>,
    /// Waiting vCPU threads queued on each CPU: (group, count).
    pub(crate) queued: Vec<Vec<(u32, u32)>>,
    charged_at: Vec<u64>,
    last_switch: Vec<u64>,
    /// CPUs that have not switched yet hold finalisation back.
    cpus_unseen: usize,
    horizon: u64,
    last_ts: u64,
    /// Where the statistics restarted (`reset_stats`), relative ns.
    stats_from: u64,
    pub events: u64,
    /// Events out of time order by more than a tick (clock trouble).
    pub disorder: u64,
    /// Events left out: timestamps more than [`MAX_EVENT_GAP_NS`] past the
    /// previous event (corrupt).
    pub rejected: u64,
    /// A thread left a CPU we did not see it take (an event went missing).
    pub anomalies: u64,
    /// Switches in whose switch-out never came: another task left that CPU
    /// next. Seen on paravirtualised kernels, where some threads are
    /// switched in and leave through a path without the tracepoint.
    pub vanished: u64,
    /// CPU time credited to such threads between their switch-in and the
    /// next switch on that CPU: an upper bound of the error they cause.
    pub vanished_ns: u64,
    /// Time whose owner the missing events leave open (a switch-in that
    /// never came is placed at the CPU's previous switch; a thread that
    /// appears elsewhere is credited here up to then): with `vanished_ns`,
    /// the most the on-CPU figures can be off by.
    pub uncertain_ns: u64,
    /// vCPU time spent waiting behind a busy CPU, since `stats_from`.
    pub queued_ns: u64,
    /// Of that, while another CPU was idle: the host's scheduler did not
    /// conserve work (per-CPU run queues balance late). A simulator with
    /// one global run queue has none of it.
    pub queued_while_idle_ns: u64,
    /// Up to where `queued_ns` is accounted.
    pub(crate) queued_at: u64,
    /// Where waking threads were queued, since `stats_from`.
    pub wake_placement: WakePlacement,
    /// Per thread woken onto a busy CPU, counted in [`WakePlacement`]
    /// (another CPU idled) or its pairs, and not yet run.
    pub(crate) woken_behind: HashMap<u32, PendingWake>,
}

impl Analyzer {
    /// Hands every closed interval of every tracked thread to `sink`
    /// (running on which CPU, waiting on which, sleeping, blocked), as the
    /// analysis meets it.
    pub fn on_interval(&mut self, sink: impl FnMut(&Interval) + 'static) {
        self.intervals = Some(Box::new(sink));
    }

    pub fn new(start_ns: u64, cpus: usize, groups: &[Group], opts: &AnalysisOptions) -> Analyzer {
        let mut windows = opts.windows.clone();
        windows.sort_unstable();
        windows.dedup();
        let tick = windows.first().copied().unwrap_or(1_000_000).max(1);
        let mut a = Analyzer {
            start: start_ns,
            cpus: cpus.max(1),
            windows,
            tick,
            next_tick: tick,
            series: opts.series,
            groups: Vec::new(),
            entities: Vec::new(),
            stats_horizon: 0,
            closed_to: 0,
            closable: 0,
            threads: HashMap::new(),
            occupant: vec![u32::MAX; cpus.max(1)],
            running_on: vec![None; cpus.max(1)],
            queued: vec![Vec::new(); cpus.max(1)],
            charged_at: vec![0; cpus.max(1)],
            last_switch: vec![0; cpus.max(1)],
            cpus_unseen: cpus.max(1),
            horizon: 0,
            last_ts: 0,
            stats_from: 0,
            events: 0,
            disorder: 0,
            rejected: 0,
            anomalies: 0,
            vanished: 0,
            queued_ns: 0,
            queued_while_idle_ns: 0,
            queued_at: 0,
            wake_placement: WakePlacement::default(),
            woken_behind: HashMap::new(),
            vanished_ns: 0,
            uncertain_ns: 0,
            intervals: None,
        };
        for g in groups {
            a.groups.push(GroupState {
                group: g.clone(),
                entity: None,
                threads: 0,
                vcpus: 0,
                running: 0,
                waiting: 0,
                contend: Contend::None,
                contend_since: 0,
                any_since: None,
                full: Durations::default(),
                partial: Durations::default(),
                any: Durations::default(),
                any_ns: 0,
                hazard_ns: 0,
                on_cpu_ns: 0,
                wait_ns: 0,
                preempted_by: HashMap::new(),
            });
        }
        a
    }

    /// Windows for a group (with the series, when asked) or a thread.
    fn new_entity(&mut self, series: bool) -> usize {
        let accs = self
            .windows
            .iter()
            .map(|&w| WindowAcc::new(w, self.cpus, series, self.stats_horizon))
            .collect();
        self.entities.push(Entity { accs });
        self.entities.len() - 1
    }

    /// What windows an entity made now would report: all empty (a group
    /// or thread never credited keeps none until it is).
    fn empty_usage(&self, series: bool) -> Vec<WindowUsage> {
        self.windows
            .iter()
            .map(|&w| {
                let mut acc = WindowAcc::new(w, self.cpus, series, self.stats_horizon);
                acc.close_until(self.closed_to);
                acc.report()
            })
            .collect()
    }

    /// Declares a thread of a group. `vcpu`: it counts towards contention
    /// and gets its own windows. Call before its events, or as soon as its
    /// group is known (live view).
    pub fn set_thread(&mut self, tid: u32, group: u32, vcpu: bool) {
        if tid == 0 || (group as usize) >= self.groups.len() || self.threads.contains_key(&tid) {
            return;
        }
        let host_io = self.groups[group as usize].group.kind == GroupKind::HostIo;
        let g = &mut self.groups[group as usize];
        g.threads += 1;
        if vcpu {
            g.vcpus += 1;
        }
        self.threads.insert(
            tid,
            ThreadState {
                group,
                windows: vcpu || host_io,
                entity: None,
                vcpu,
                st: St::Unknown,
                cpu: 0,
                since: 0,
                entered: 0,
                on_cpu_ns: 0,
                wait_ns: 0,
                waits: Durations::default(),
                sleep_ns: 0,
                blocked_ns: 0,
                ran_on: None,
                migrations: 0,
            },
        );
    }

    /// Relative time of an event (the recording starts at 0).
    fn rel(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.start)
    }

    pub fn feed(&mut self, e: &Event) {
        let t = self.rel(e.ts);
        if t > self.last_ts.saturating_add(MAX_EVENT_GAP_NS) {
            self.rejected += 1;
            return;
        }
        if t + self.tick < self.last_ts {
            self.disorder += 1;
        }
        let t = t.max(self.horizon);
        self.last_ts = self.last_ts.max(t);
        self.events += 1;
        while t >= self.next_tick {
            let at = self.next_tick;
            self.do_tick(at);
            self.next_tick += self.tick;
        }
        self.account_queued(t);
        let cpu = (e.cpu as usize).min(self.cpus - 1);
        match e.kind {
            kind::SWITCH => self.on_switch(
                t,
                cpu,
                e.a,
                e.b,
                e.flags & F_PREV_RUNNABLE != 0,
                e.c & TASK_DEAD != 0,
                e.c & TASK_UNINTERRUPTIBLE != 0,
            ),
            kind::WAKEUP | kind::WAKEUP_NEW => self.on_wakeup(t, e.a, (e.c as usize).min(self.cpus - 1), cpu),
            kind::MIGRATE => self.on_migrate(t, e.a, (e.c as usize).min(self.cpus - 1)),
            _ => {}
        }
    }

    /// Credits running threads up to `at` and closes the windows before it.
    fn do_tick(&mut self, at: u64) {
        // No credit starts before the horizon, nor before a CPU's last
        // switch (where time placed by inference starts when a switch-in
        // went missing): windows ending by then are final and can close.
        let last_switch = self.last_switch.iter().copied().min().unwrap_or(0);
        self.closable = self.horizon.min(last_switch);
        for cpu in 0..self.cpus {
            if let Some(tid) = self.running_on[cpu] {
                self.credit_running(tid, at);
            }
        }
        if self.cpus_unseen == 0 {
            self.horizon = at;
        }
    }

    fn credit_running(&mut self, tid: u32, upto: u64) {
        let Some(th) = self.threads.get_mut(&tid) else { return };
        if th.st != St::Running || upto <= th.since {
            return;
        }
        let (a, b) = (th.since, upto);
        th.since = upto;
        th.on_cpu_ns += b - a;
        let (group, entity, windows) = (th.group, th.entity, th.windows);
        self.groups[group as usize].on_cpu_ns += b - a;
        let horizon = self.closable;
        let ge = match self.groups[group as usize].entity {
            Some(e) => e,
            None => {
                let e = self.new_entity(self.series);
                self.groups[group as usize].entity = Some(e);
                e
            }
        };
        self.entities[ge].add(a, b, horizon);
        if windows {
            let e = match entity {
                Some(e) => e,
                None => {
                    let e = self.new_entity(false);
                    if let Some(th) = self.threads.get_mut(&tid) {
                        th.entity = Some(e);
                    }
                    e
                }
            };
            self.entities[e].add(a, b, horizon);
        }
    }

    /// Charges the time since the last change on `cpu` to its occupant,
    /// for every vCPU waiting there.
    fn charge(&mut self, cpu: usize, t: u64) {
        let dt = t.saturating_sub(self.charged_at[cpu]);
        self.charged_at[cpu] = t;
        if dt == 0 || self.queued[cpu].is_empty() {
            return;
        }
        let occ = self.occupant[cpu];
        for &(g, n) in &self.queued[cpu] {
            *self.groups[g as usize].preempted_by.entry(occ).or_insert(0) += dt * n as u64;
        }
    }

    fn queue(&mut self, cpu: usize, group: u32, delta: i32) {
        let q = &mut self.queued[cpu];
        if let Some(pos) = q.iter().position(|&(g, _)| g == group) {
            let n = q[pos].1 as i32 + delta;
            if n <= 0 {
                q.swap_remove(pos);
            } else {
                q[pos].1 = n as u32;
            }
        } else if delta > 0 {
            q.push((group, delta as u32));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_switch(
        &mut self,
        t: u64,
        cpu: usize,
        prev: u32,
        next: u32,
        prev_runnable: bool,
        prev_dead: bool,
        prev_blocked: bool,
    ) {
        let first_here = self.occupant[cpu] == u32::MAX;
        if first_here {
            self.cpus_unseen = self.cpus_unseen.saturating_sub(1);
        }
        self.charge(cpu, t);
        if let Some(occ) = self.running_on[cpu].filter(|&o| o != prev) {
            // The thread we saw switched in here is not the one leaving: its
            // switch-out never came. It left at some point since its
            // switch-in; close it now, at the first evidence, so the error
            // stays within this span instead of running on to its next
            // appearance, and report the span.
            if self.threads.get(&occ).is_some_and(|th| th.st == St::Running) {
                self.vanished += 1;
                self.vanished_ns += t.saturating_sub(self.last_switch[cpu]);
                self.credit_running(occ, t);
                self.transition(occ, t, St::Sleeping, cpu);
            }
        }
        // Waits on this CPU so far were behind the task now leaving.
        self.split_waits(cpu, t);
        self.occupant[cpu] = next;
        self.running_on[cpu] = None;
        if self.threads.contains_key(&prev) {
            let was = self.threads[&prev].st;
            if was == St::Unknown {
                // It was running when recording began; on a CPU seen
                // switching before, its switch-in went missing, and it ran
                // since that CPU's last switch at the most.
                let from = if first_here { 0 } else { self.last_switch[cpu] };
                let th = self.threads.get_mut(&prev).expect("checked above");
                th.st = St::Running;
                th.since = from;
                th.entered = from;
                th.cpu = cpu as u16;
                let g = th.group;
                self.set_counts(g, t, 1, 0);
            }
            if self.threads[&prev].st == St::Waiting || self.threads[&prev].st.asleep() {
                // Its switch-in went missing (the kernel skips a BPF run now
                // and then): it ran here since this CPU's last switch.
                self.anomalies += 1;
                let at = self.last_switch[cpu];
                let th = self.threads.get_mut(&prev).expect("checked above");
                if th.st.asleep() {
                    th.st = St::Waiting;
                    th.since = at;
                    th.entered = at;
                    th.cpu = cpu as u16;
                    let (g, vcpu) = (th.group, th.vcpu);
                    if vcpu {
                        self.queue(cpu, g, 1);
                        self.set_counts(g, at, 0, 1);
                    }
                }
                let at = at.max(self.threads[&prev].since);
                self.uncertain_ns += t.saturating_sub(at);
                self.transition(prev, at, St::Running, cpu);
            }
            if self.threads[&prev].st == St::Running {
                self.credit_running(prev, t);
                let new = if prev_dead {
                    St::Dead
                } else if prev_runnable {
                    St::Waiting
                } else if prev_blocked {
                    St::Blocked
                } else {
                    St::Sleeping
                };
                self.transition(prev, t, new, cpu);
            }
        }
        self.last_switch[cpu] = t;
        if self.threads.contains_key(&next) {
            if self.threads[&next].st == St::Running {
                // Its switch-out elsewhere went missing: it no longer runs
                // there, so that CPU's next switch must not close it again.
                self.anomalies += 1;
                self.uncertain_ns += t.saturating_sub(self.threads[&next].since);
                self.credit_running(next, t);
                let old = self.threads[&next].cpu as usize;
                if self.running_on.get(old) == Some(&Some(next)) {
                    self.running_on[old] = None;
                }
            }
            self.transition(next, t, St::Running, cpu);
            self.running_on[cpu] = Some(next);
            if let Some(th) = self.threads.get_mut(&next) {
                if th.ran_on.is_some_and(|c| c as usize != cpu) {
                    th.migrations += 1;
                }
                th.ran_on = Some(cpu as u16);
            }
            self.count_wake_outcome(next, cpu, t, prev_runnable);
        }
    }

    /// `tid` queued on `cpu` by a wake-up recorded on `waker_cpu` (the CPU
    /// of the thread or interrupt that woke it).
    fn on_wakeup(&mut self, t: u64, tid: u32, cpu: usize, waker_cpu: usize) {
        let Some(th) = self.threads.get(&tid) else { return };
        if th.st.asleep() || th.st == St::Unknown {
            // Where it last ran (known only for a thread seen asleep).
            let last = th.ran_on.filter(|_| th.st.asleep()).map(usize::from);
            self.charge(cpu, t);
            self.transition(tid, t, St::Waiting, cpu);
            self.count_wakeup(t, tid, cpu, waker_cpu, last);
        }
    }

    /// With an interval sink: closes the wait of every thread queued on
    /// `cpu` at `t` (behind its occupant so far), so the next piece names
    /// the next occupant. Costs a pass over the threads, only when asked.
    fn split_waits(&mut self, cpu: usize, t: u64) {
        let Some(sink) = self.intervals.as_mut() else { return };
        let behind = self.occupant[cpu];
        for (&tid, th) in self.threads.iter_mut() {
            if th.st == St::Waiting && th.cpu as usize == cpu && t > th.entered {
                sink(&Interval {
                    tid,
                    group: th.group,
                    place: Place::Waiting { cpu: th.cpu, behind },
                    start_ns: th.entered,
                    end_ns: t,
                });
                th.entered = t;
            }
        }
    }

    fn on_migrate(&mut self, t: u64, tid: u32, to: usize) {
        let Some(th) = self.threads.get(&tid) else { return };
        if th.st == St::Waiting && th.cpu as usize != to && self.intervals.is_some() {
            // The piece queued on the old CPU ends here.
            let (from, group, entered) = (th.cpu as usize, th.group, th.entered);
            let behind = self.occupant[from];
            if let Some(sink) = self.intervals.as_mut().filter(|_| t > entered) {
                sink(&Interval {
                    tid,
                    group,
                    place: Place::Waiting {
                        cpu: from as u16,
                        behind,
                    },
                    start_ns: entered,
                    end_ns: t,
                });
            }
            if let Some(th) = self.threads.get_mut(&tid) {
                th.entered = t;
            }
        }
        let Some(th) = self.threads.get(&tid) else { return };
        if th.st == St::Waiting && th.cpu as usize != to {
            let (from, group, vcpu) = (th.cpu as usize, th.group, th.vcpu);
            self.charge(from, t);
            self.charge(to, t);
            if vcpu {
                self.queue(from, group, -1);
                self.queue(to, group, 1);
            }
        }
        if let Some(th) = self.threads.get_mut(&tid) {
            th.cpu = to as u16;
        }
    }

    /// Moves a tracked thread to a new state at `t`, keeping wait totals,
    /// run queues and its group's contention in step, and hands the interval
    /// it closes to the interval sink.
    fn transition(&mut self, tid: u32, t: u64, new: St, cpu: usize) {
        let Some(th) = self.threads.get_mut(&tid) else { return };
        let old = th.st;
        let old_cpu = th.cpu as usize;
        let (group, vcpu) = (th.group, th.vcpu);
        if let Some(sink) = self.intervals.as_mut() {
            let place = match old {
                St::Running => Some(Place::Running { cpu: th.cpu }),
                St::Waiting => Some(Place::Waiting {
                    cpu: th.cpu,
                    behind: self.occupant.get(old_cpu).copied().unwrap_or(u32::MAX),
                }),
                St::Sleeping => Some(Place::Sleeping),
                St::Blocked => Some(Place::Blocked),
                St::Unknown | St::Dead => None,
            };
            if let Some(place) = place.filter(|_| t > th.entered) {
                sink(&Interval {
                    tid,
                    group,
                    place,
                    start_ns: th.entered,
                    end_ns: t,
                });
            }
        }
        match old {
            St::Sleeping => th.sleep_ns += t.saturating_sub(th.since),
            St::Blocked => th.blocked_ns += t.saturating_sub(th.since),
            _ => {}
        }
        if old == St::Waiting {
            let d = t.saturating_sub(th.since);
            th.wait_ns += d;
            th.waits.record(d);
            self.groups[group as usize].wait_ns += d;
            if vcpu {
                self.charge(old_cpu, t);
                self.queue(old_cpu, group, -1);
            }
        }
        let th = self.threads.get_mut(&tid).expect("present");
        th.st = new;
        th.since = t;
        th.entered = t;
        th.cpu = cpu as u16;
        if new == St::Waiting && vcpu {
            self.queue(cpu, group, 1);
        }
        if !vcpu {
            return;
        }
        let d_run = (new == St::Running) as i32 - (old == St::Running) as i32;
        let d_wait = (new == St::Waiting) as i32 - (old == St::Waiting) as i32;
        self.set_counts(group, t, d_run, d_wait);
    }

    fn set_counts(&mut self, group: u32, t: u64, d_run: i32, d_wait: i32) {
        let stats_from = self.stats_from;
        let g = &mut self.groups[group as usize];
        g.running = (g.running as i32 + d_run).max(0) as u32;
        g.waiting = (g.waiting as i32 + d_wait).max(0) as u32;
        let c = if g.waiting == 0 {
            Contend::None
        } else if g.running > 0 {
            Contend::Hazard
        } else if g.waiting >= g.vcpus {
            Contend::Full
        } else {
            Contend::Partial
        };
        if c != g.contend {
            let d = t.saturating_sub(g.contend_since);
            match g.contend {
                Contend::Full => g.full.record(d),
                Contend::Partial => g.partial.record(d),
                Contend::Hazard => g.hazard_ns += d,
                Contend::None => {}
            }
            g.contend = c;
            g.contend_since = t;
        }
        match (g.any_since, g.waiting > 0) {
            (None, true) => g.any_since = Some(t),
            (Some(s), false) => {
                g.any.record(t.saturating_sub(s));
                g.any_ns += t.saturating_sub(s.max(stats_from));
                g.any_since = None;
            }
            _ => {}
        }
    }

    /// Brings every window up to `now_ns` (absolute), e.g. once a second
    /// in the live view, or at the end of a recording.
    pub fn advance(&mut self, now_ns: u64) {
        // A corrupt end time is clamped like a corrupt event.
        let t = self
            .rel(now_ns)
            .max(self.last_ts)
            .min(self.last_ts.saturating_add(MAX_EVENT_GAP_NS));
        // A CPU that has not switched within a second is idle in no-tick
        // mode or runs one task throughout: stop waiting for it.
        if t >= 1_000_000_000 {
            self.cpus_unseen = 0;
        }
        self.account_queued(t);
        while t >= self.next_tick {
            let at = self.next_tick;
            self.do_tick(at);
            self.next_tick += self.tick;
        }
        for cpu in 0..self.cpus {
            if let Some(tid) = self.running_on[cpu] {
                self.credit_running(tid, t);
            }
            self.charge(cpu, t);
        }
        self.horizon = self.horizon.max(if self.cpus_unseen == 0 { t } else { self.horizon });
        let h = self.horizon;
        for e in &mut self.entities {
            e.close_until(h);
        }
        self.closed_to = h;
        self.last_ts = t;
    }

    /// The stretch the statistics cover: since the start or the last
    /// `reset_stats`, up to the last event or `advance`.
    pub fn stats_span_ns(&self) -> u64 {
        self.last_ts.saturating_sub(self.stats_from)
    }

    /// Starts a new interval for the live view: totals, window statistics,
    /// episodes and preemptors restart; thread states carry on.
    pub fn reset_stats(&mut self) {
        self.queued_ns = 0;
        self.queued_while_idle_ns = 0;
        self.wake_placement = WakePlacement::default();
        for e in &mut self.entities {
            e.reset_stats();
        }
        self.stats_horizon = self.closed_to;
        for g in &mut self.groups {
            g.on_cpu_ns = 0;
            g.wait_ns = 0;
            g.full.reset();
            g.partial.reset();
            g.any.reset();
            g.any_ns = 0;
            g.hazard_ns = 0;
            g.preempted_by.clear();
        }
        self.stats_from = self.last_ts;
        for th in self.threads.values_mut() {
            th.on_cpu_ns = 0;
            th.wait_ns = 0;
            th.waits.reset();
            th.sleep_ns = 0;
            th.blocked_ns = 0;
        }
    }

    /// Closes the analysis at the end of a recording.
    pub fn finish(&mut self, end_ns: u64) {
        self.cpus_unseen = 0;
        self.advance(end_ns);
        // The interval sink gets each thread's last, still open stretch.
        let t = self.last_ts;
        if let Some(sink) = self.intervals.as_mut() {
            let mut open: Vec<Interval> = Vec::new();
            for (&tid, th) in self.threads.iter_mut() {
                let place = match th.st {
                    St::Running => Place::Running { cpu: th.cpu },
                    St::Waiting => Place::Waiting {
                        cpu: th.cpu,
                        behind: self.occupant.get(th.cpu as usize).copied().unwrap_or(u32::MAX),
                    },
                    St::Sleeping => Place::Sleeping,
                    St::Blocked => Place::Blocked,
                    St::Unknown | St::Dead => continue,
                };
                if t > th.entered {
                    open.push(Interval {
                        tid,
                        group: th.group,
                        place,
                        start_ns: th.entered,
                        end_ns: t,
                    });
                    th.entered = t;
                }
            }
            open.sort_by_key(|i| i.tid);
            for i in &open {
                sink(i);
            }
        }
    }

    /// Relative time of the last event or advance.
    pub fn now_rel(&self) -> u64 {
        self.last_ts
    }

    /// The report so far. `name_of(tid)` names occupants that are not in a group.
    pub fn report(&self, name_of: &dyn Fn(u32) -> String) -> Vec<GroupReport> {
        let mut out = Vec::new();
        // One pass over the threads, not one per group: under `--all`
        // every process is a group.
        let mut of_group: Vec<Vec<(u32, &ThreadState)>> = (0..self.groups.len()).map(|_| Vec::new()).collect();
        for (&tid, th) in &self.threads {
            if let Some(list) = of_group.get_mut(th.group as usize) {
                list.push((tid, th));
            }
        }
        for (g, members) in self.groups.iter().zip(&of_group) {
            let usage = match g.entity {
                Some(e) => self.entities[e].accs.iter().map(|a| a.report()).collect(),
                None => self.empty_usage(self.series),
            };
            let mut threads: Vec<ThreadReport> = members
                .iter()
                .map(|&(tid, th)| ThreadReport {
                    tid,
                    name: name_of(tid),
                    vcpu: th.vcpu,
                    on_cpu_ns: th.on_cpu_ns,
                    // Open intervals count up to now.
                    run_delay_ns: th.wait_ns
                        + if th.st == St::Waiting {
                            self.last_ts.saturating_sub(th.since)
                        } else {
                            0
                        },
                    sleep_ns: th.sleep_ns
                        + if th.st == St::Sleeping {
                            self.last_ts.saturating_sub(th.since)
                        } else {
                            0
                        },
                    blocked_ns: th.blocked_ns
                        + if th.st == St::Blocked {
                            self.last_ts.saturating_sub(th.since)
                        } else {
                            0
                        },
                    waits: th.waits.len(),
                    migrations: th.migrations,
                    wait_p99_ns: th.waits.percentile(99.0),
                    wait_max_ns: (!th.waits.is_empty()).then(|| th.waits.max()),
                    usage: match (th.windows, th.entity) {
                        (_, Some(e)) => self.entities[e]
                            .accs
                            .iter()
                            .map(|a| WindowUsage {
                                series: None,
                                ..a.report()
                            })
                            .collect(),
                        (true, None) => self.empty_usage(false),
                        (false, None) => Vec::new(),
                    },
                })
                .collect();
            threads.sort_by(|a, b| (!a.vcpu, &a.name, a.tid).cmp(&(!b.vcpu, &b.name, b.tid)));
            // Who ran while this group's vCPUs waited, by group or thread name.
            let mut by_name: HashMap<(String, &'static str), u64> = HashMap::new();
            let total_pre: u64 = g.preempted_by.values().sum();
            for (&occ, &ns) in &g.preempted_by {
                let key = if occ == IDLE_TID {
                    ("idle (wake-up latency)".to_string(), "idle")
                } else if occ == u32::MAX {
                    ("unknown".to_string(), "thread")
                } else if let Some(th) = self.threads.get(&occ) {
                    let og = &self.groups[th.group as usize].group;
                    (
                        og.name.clone(),
                        if og.kind == GroupKind::HostIo {
                            "host-io"
                        } else {
                            "tenant"
                        },
                    )
                } else {
                    (name_of(occ), "thread")
                };
                *by_name.entry(key).or_insert(0) += ns;
            }
            let mut preemptors: Vec<Preemptor> = by_name
                .into_iter()
                .map(|((name, kind), ns)| Preemptor {
                    name,
                    kind: kind.to_string(),
                    ns,
                    share: ns as f64 / total_pre.max(1) as f64,
                })
                .collect();
            preemptors.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.name.cmp(&b.name)));
            preemptors.truncate(10);
            let span = self.stats_span_ns().max(1);
            let open = g.any_since.map(|s| self.last_ts.saturating_sub(s.max(self.stats_from)));
            let any_ns = g.any_ns + open.unwrap_or(0);
            out.push(GroupReport {
                name: g.group.name.clone(),
                kind: g.group.kind,
                thread_count: g.threads,
                vcpus: g.vcpus,
                on_cpu_ns: g.on_cpu_ns,
                run_delay_ns: g.wait_ns,
                wait_share_pct: if g.on_cpu_ns + g.wait_ns > 0 {
                    g.wait_ns as f64 * 100.0 / (g.on_cpu_ns + g.wait_ns) as f64
                } else {
                    0.0
                },
                time_shares: TimeShares::of_vcpus(&threads),
                usage,
                contention: Contention {
                    any: Episodes::of(&g.any),
                    partial: Episodes::of(&g.partial),
                    full: Episodes::of(&g.full),
                    hazard_ns: g.hazard_ns,
                    any_ns,
                    any_pct: any_ns as f64 * 100.0 / span as f64,
                },
                preemptors,
                threads,
            });
        }
        out
    }
}

/// The wake-up counters of [`crate::wakeups`], fed from the state machine.
impl Analyzer {
    /// vCPU waits behind busy CPUs up to `t`, and those while a CPU idled
    /// (the state is constant between events, so this runs before each).
    pub(crate) fn account_queued(&mut self, t: u64) {
        let dt = t.saturating_sub(self.queued_at);
        self.queued_at = self.queued_at.max(t);
        if dt == 0 {
            return;
        }
        let behind_busy: u64 = self
            .queued
            .iter()
            .zip(&self.occupant)
            .filter(|(_, &occ)| occ != IDLE_TID)
            .map(|(q, _)| q.iter().map(|&(_, n)| n as u64).sum::<u64>())
            .sum();
        if behind_busy == 0 {
            return;
        }
        self.queued_ns += dt * behind_busy;
        if self.occupant.contains(&IDLE_TID) {
            self.queued_while_idle_ns += dt * behind_busy;
        }
    }

    /// Counts the wake-up of `tid`, just queued on `cpu` by a wake-up
    /// recorded on `waker_cpu`; `last` is where it last ran (known only for
    /// a thread seen asleep).
    pub(crate) fn count_wakeup(&mut self, t: u64, tid: u32, cpu: usize, waker_cpu: usize, last: Option<usize>) {
        self.wake_placement.wakeups += 1;
        let idle_at = |c: usize| self.occupant.get(c) == Some(&IDLE_TID);
        let busy_at = |c: usize| self.occupant.get(c).is_some_and(|&o| o != IDLE_TID && o != u32::MAX);
        // One pass over the CPUs per wake-up, for both questions.
        let idle_cpus = self.occupant.iter().filter(|&&o| o == IDLE_TID).count();
        let idle_besides = |c: usize| idle_cpus > usize::from(idle_at(c));
        if let Some(last) = last.filter(|&l| busy_at(l) && idle_besides(l)) {
            self.wake_placement.prev_busy_while_idle += 1;
            if last == cpu {
                self.wake_placement.stayed_on_busy_prev += 1;
            }
        }
        if last.is_some_and(|l| l != waker_cpu && busy_at(l) && busy_at(waker_cpu)) {
            self.wake_placement.waker_elsewhere_both_busy += 1;
            if cpu == waker_cpu {
                self.wake_placement.pulled_to_waker += 1;
            }
        }
        let busy = busy_at(cpu);
        let while_idle = busy && idle_besides(cpu);
        let pair = busy.then(|| self.wake_pair(tid, self.occupant[cpu])).flatten();
        if while_idle {
            self.wake_placement.onto_busy_while_idle += 1;
        }
        if let Some(pair) = pair {
            self.wake_placement.by_kind.slot(pair).wakeups += 1;
        }
        if while_idle || pair.is_some() {
            let w = PendingWake {
                woke_ns: t,
                on: cpu as u16,
                while_idle,
                pair,
            };
            self.woken_behind.insert(tid, w);
        } else {
            self.woken_behind.remove(&tid);
        }
    }

    /// Which of [`WakePreemptionByKind`]'s pairs `woken` waking onto a CPU
    /// running `occupant` is, if any.
    fn wake_pair(&self, woken: u32, occupant: u32) -> Option<WakePair> {
        let kind = |tid: u32| {
            self.threads
                .get(&tid)
                .map(|th| self.groups[th.group as usize].group.kind)
        };
        match (kind(woken)?, kind(occupant)) {
            (GroupKind::HostIo, Some(GroupKind::Tenant)) => Some(WakePair::HostIoOntoTenant),
            (GroupKind::Tenant, Some(GroupKind::Tenant)) => Some(WakePair::TenantOntoTenant),
            (GroupKind::Tenant, Some(GroupKind::HostIo)) => Some(WakePair::TenantOntoHostIo),
            (GroupKind::Tenant, None) => Some(WakePair::TenantOntoOther),
            _ => None,
        }
    }

    /// `next` switched in on `cpu` at `t`, the thread it replaced leaving
    /// runnable or not: what became of its wake-up onto a busy CPU, if one
    /// is pending.
    pub(crate) fn count_wake_outcome(&mut self, next: u32, cpu: usize, t: u64, prev_runnable: bool) {
        if let Some(w) = self.woken_behind.remove(&next) {
            let outcome = if w.on as usize != cpu {
                WakeOutcome::Moved
            } else if t.saturating_sub(w.woke_ns) > WAKE_AT_ONCE_NS {
                WakeOutcome::Waited
            } else if prev_runnable {
                WakeOutcome::PreemptedAtOnce
            } else {
                WakeOutcome::OccupantSleptAtOnce
            };
            let p = &mut self.wake_placement;
            if w.while_idle {
                p.count(outcome);
            }
            if let Some(pair) = w.pair {
                p.by_kind.slot(pair).count(outcome);
            }
        }
    }
}

/// Also the test helpers of [`crate::wakeups`] and [`crate::report`].
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ontime_recording::recording::{Group, GroupKind};

    pub(crate) fn switch(ts: u64, cpu: u16, prev: u32, next: u32, flags: u8) -> Event {
        Event {
            ts,
            a: prev,
            b: next,
            c: 0,
            cpu,
            kind: kind::SWITCH,
            flags,
        }
    }

    pub(crate) fn analyzer() -> Analyzer {
        analyzer_on(1)
    }

    /// One tenant "t" whose thread 10 is a vCPU, on `cpus` CPUs, 1 ms windows.
    pub(crate) fn analyzer_on(cpus: usize) -> Analyzer {
        let groups = [Group {
            name: "t".into(),
            kind: GroupKind::Tenant,
            source: vec![],
            vcpu_names: false,
        }];
        let mut a = Analyzer::new(
            0,
            cpus,
            &groups,
            &AnalysisOptions {
                windows: vec![1_000_000],
                series: false,
            },
        );
        a.set_thread(10, 0, true);
        a
    }

    /// A thread's intervals tile its time line: running, waiting, asleep,
    /// each closed where the next begins.
    #[test]
    fn intervals_tile_a_threads_time_line() {
        use std::cell::RefCell;
        use std::rc::Rc;
        let mut a = analyzer();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let s = seen.clone();
        a.on_interval(move |i| s.borrow_mut().push(*i));
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        a.feed(&switch(3_000_000, 0, 10, 0, F_PREV_RUNNABLE));
        a.feed(&switch(4_000_000, 0, 0, 10, 0));
        a.feed(&switch(6_000_000, 0, 10, 0, 0));
        let seen = seen.borrow();
        let places: Vec<(Place, u64, u64)> = seen.iter().map(|i| (i.place, i.start_ns, i.end_ns)).collect();
        assert_eq!(
            places,
            vec![
                (Place::Running { cpu: 0 }, 1_000_000, 3_000_000),
                (Place::Waiting { cpu: 0, behind: 0 }, 3_000_000, 4_000_000),
                (Place::Running { cpu: 0 }, 4_000_000, 6_000_000),
            ]
        );
    }

    /// A thread that runs on another CPU than the one it last ran on has
    /// moved, whether it moved while asleep (a wake-up elsewhere) or while
    /// it waited; running again where it ran is no move.
    #[test]
    fn a_thread_is_counted_each_time_it_runs_on_another_cpu() {
        let mut a = analyzer_on(2);
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        a.feed(&switch(2_000_000, 0, 10, 0, 0));
        a.feed(&switch(3_000_000, 0, 0, 10, 0));
        a.feed(&switch(4_000_000, 0, 10, 0, F_PREV_RUNNABLE));
        a.feed(&switch(5_000_000, 1, 0, 10, 0));
        a.feed(&switch(6_000_000, 1, 10, 0, 0));
        a.feed(&switch(7_000_000, 0, 0, 10, 0));
        a.finish(8_000_000);
        let th = &a.report(&|t| t.to_string())[0].threads[0];
        assert_eq!(th.migrations, 2, "{th:?}");
    }

    /// A wait behind several tasks is one interval per task, naming it.
    #[test]
    fn a_waiting_interval_names_whom_it_waited_behind() {
        use std::cell::RefCell;
        use std::rc::Rc;
        let mut a = analyzer();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let s = seen.clone();
        a.on_interval(move |i| s.borrow_mut().push(*i));
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        // Preempted by 11 (untracked), then 12 runs, then 10 again.
        a.feed(&switch(2_000_000, 0, 10, 11, F_PREV_RUNNABLE));
        a.feed(&switch(3_000_000, 0, 11, 12, 0));
        a.feed(&switch(5_000_000, 0, 12, 10, 0));
        let waits: Vec<(Place, u64, u64)> = seen
            .borrow()
            .iter()
            .filter(|i| matches!(i.place, Place::Waiting { .. }))
            .map(|i| (i.place, i.start_ns, i.end_ns))
            .collect();
        assert_eq!(
            waits,
            vec![
                (Place::Waiting { cpu: 0, behind: 11 }, 2_000_000, 3_000_000),
                (Place::Waiting { cpu: 0, behind: 12 }, 3_000_000, 5_000_000),
            ]
        );
    }

    /// The time line tells a voluntary sleep from a block in the kernel
    /// (uninterruptible: typically I/O), from the state the switch-out
    /// reports; the interval still open at the end counts to the last event.
    #[test]
    fn sleeping_and_blocked_on_io_are_told_apart() {
        let mut a = analyzer();
        let out = |ts, state| Event {
            ts,
            a: 10,
            b: 0,
            c: state,
            cpu: 0,
            kind: kind::SWITCH,
            flags: 0,
        };
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        a.feed(&out(2_000_000, 0x01)); // S: sleeps 3 ms
        a.feed(&Event {
            ts: 5_000_000,
            a: 10,
            c: 0,
            kind: kind::WAKEUP,
            ..Default::default()
        });
        a.feed(&switch(5_000_000, 0, 0, 10, 0));
        a.feed(&out(6_000_000, TASK_UNINTERRUPTIBLE)); // D: blocked 4 ms
        a.feed(&Event {
            ts: 10_000_000,
            a: 10,
            c: 0,
            kind: kind::WAKEUP,
            ..Default::default()
        });
        a.feed(&switch(10_000_000, 0, 0, 10, 0));
        a.feed(&out(11_000_000, 0x01)); // S again, open until the end
        a.finish(13_000_000);
        let th = &a.report(&|t| t.to_string())[0].threads[0];
        assert_eq!(th.on_cpu_ns, 3_000_000);
        assert_eq!(th.blocked_ns, 4_000_000);
        assert_eq!(th.sleep_ns, 3_000_000 + 2_000_000);
    }

    /// A garbage timestamp (a corrupt recording) is left out and counted,
    /// not walked to one millisecond at a time.
    #[test]
    fn a_far_future_timestamp_is_rejected_not_ticked_through() {
        let mut a = analyzer();
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        a.feed(&switch(u64::MAX / 2, 0, 10, 0, 0));
        a.feed(&switch(3_000_000, 0, 10, 0, 0));
        a.finish(u64::MAX);
        assert_eq!(a.rejected, 1);
        let g = &a.report(&|t| t.to_string())[0];
        assert_eq!(g.on_cpu_ns, 2_000_000);
    }

    #[test]
    fn a_running_thread_is_credited_until_it_switches_out() {
        let mut a = analyzer();
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        a.feed(&switch(4_000_000, 0, 10, 0, F_PREV_RUNNABLE));
        a.feed(&switch(6_000_000, 0, 0, 10, 0));
        a.feed(&switch(7_000_000, 0, 10, 0, 0));
        a.finish(10_000_000);
        let g = &a.report(&|t| t.to_string())[0];
        assert_eq!(g.on_cpu_ns, 4_000_000);
        assert_eq!(g.run_delay_ns, 2_000_000);
        assert_eq!(a.vanished, 0);
    }

    #[test]
    fn a_switch_out_that_never_came_is_closed_at_the_next_switch_on_that_cpu() {
        let mut a = analyzer();
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        // The idle task leaves CPU 0: thread 10 must have left it before.
        a.feed(&switch(3_000_000, 0, 0, 20, 0));
        a.feed(&switch(3_500_000, 0, 20, 0, 0));
        // Seen again two seconds later.
        a.feed(&switch(2_000_000_000, 0, 0, 10, 0));
        a.feed(&switch(2_001_000_000, 0, 10, 0, 0));
        a.finish(2_002_000_000);
        let g = &a.report(&|t| t.to_string())[0];
        assert_eq!(a.vanished, 1);
        assert_eq!(a.vanished_ns, 2_000_000);
        // At most the span to the next switch, not the two seconds.
        assert_eq!(g.on_cpu_ns, 2_000_000 + 1_000_000);
    }

    #[test]
    fn an_episode_still_open_counts_in_each_live_interval() {
        let mut a = analyzer();
        a.feed(&switch(0, 0, 0, 20, 0));
        a.feed(&Event {
            ts: 1_000_000,
            a: 10,
            c: 0,
            kind: kind::WAKEUP,
            ..Event::default()
        });
        a.advance(10_000_000);
        let g = &a.report(&|t| t.to_string())[0];
        assert_eq!(g.contention.any_ns, 9_000_000);
        assert_eq!(g.contention.any.count, 0, "no episode has ended");
        a.reset_stats();
        a.advance(20_000_000);
        assert_eq!(a.stats_span_ns(), 10_000_000);
        let g = &a.report(&|t| t.to_string())[0];
        assert_eq!(g.contention.any_ns, 10_000_000);
        assert!((g.contention.any_pct - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_thread_seen_on_another_cpu_leaves_the_first_one() {
        let mut a = analyzer_on(2);
        a.feed(&switch(1_000_000, 0, 0, 10, 0));
        // Its switch-out on CPU 0 never came; it shows up on CPU 1.
        a.feed(&switch(3_000_000, 1, 0, 10, 0));
        // CPU 0 moves on: thread 10 is not the one that left it.
        a.feed(&switch(5_000_000, 0, 0, 20, 0));
        a.feed(&switch(8_000_000, 1, 10, 0, 0));
        a.finish(10_000_000);
        let g = &a.report(&|t| t.to_string())[0];
        assert_eq!(g.on_cpu_ns, 7_000_000);
        assert_eq!(a.anomalies, 1);
        assert_eq!(a.vanished, 0, "CPU 0's switch must not close it a second time");
    }
}
