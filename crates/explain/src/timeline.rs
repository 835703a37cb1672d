//! The scheduling time line an explanation reads, built once from a
//! recording's events (or a flight recorder's ring of them): per CPU, who
//! ran from when (and whether it was real-time) and when interrupt
//! handlers ran; per watched thread (the probes), its states as contiguous
//! spans: running on a CPU, queued on one since a wake-up or a
//! preemption, asleep, blocked. A stretch the events leave open (a lost
//! switch or wake-up, a CPU not yet seen switching) is kept as unknown,
//! never guessed, so an explanation shows it as unexplained.
//!
//! Memory: 16 bytes per switch (the CPU's slice), 24 per interrupt
//! handler run when they are recorded, about 40 per state change of a
//! watched thread, and the thread table; nothing else per event.
//! [`crate::attribute`] reads it by binary search, without allocating.

use std::collections::HashMap;

use ontime_core::BadInput;
use ontime_recording::event::{
    kind, Event, F_IRQ_VECTOR, F_NEXT_RT, F_PREV_RT, F_PREV_RUNNABLE, TASK_DEAD, TASK_UNINTERRUPTIBLE,
};
use ontime_recording::recording::{Group, Recording, ThreadInfo};

use crate::cause::{Irq, Side, UNKNOWN_TID};

/// The idle task's tid on every CPU (swapper).
pub const IDLE_TID: u32 = 0;

/// Interrupts nest (a hard IRQ inside a softirq, a vector inside that);
/// deeper than this, entries or exits went missing.
const IRQ_DEPTH: usize = 4;

/// Who occupied a CPU from `start` until the next slice's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub(crate) start: u64,
    /// [`IDLE_TID`] for the idle task, [`UNKNOWN_TID`] where the events
    /// do not say.
    pub(crate) tid: u32,
    /// The occupant is real-time (from the switch's bit).
    pub(crate) rt: bool,
}

/// Interrupt time on a CPU, [start, end); a CPU's pieces do not overlap
/// (a nested handler cuts the outer one's piece).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IrqPiece {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) irq: Irq,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CpuLine {
    /// In time order; the first starts with the time line.
    pub(crate) slices: Vec<Slice>,
    pub(crate) irqs: Vec<IrqPiece>,
    /// Time taken from this CPU by the hypervisor beneath the recorded
    /// machine, [start, end), in order, not overlapping: each steal
    /// ([`kind::STEAL`]) placed by [`place_steal`].
    pub(crate) stolen: Vec<(u64, u64)>,
}

/// The wake-up that made a thread runnable: `by` was current where it was
/// recorded (its waker, or the thread an interrupt came in on; 0: the CPU
/// idled), on `cpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Wake {
    pub(crate) by: u32,
    pub(crate) cpu: u16,
}

/// A watched thread's state over a span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Before its first event, or where its events contradict each other.
    Unknown,
    Running {
        cpu: u16,
    },
    /// Runnable, not running, queued on `cpu`. `since`: when it became
    /// runnable (a migration starts a new span, not a new wait); `wake`:
    /// None when it was preempted or yielded; `rt`: it is real-time.
    Queued {
        cpu: u16,
        since: u64,
        wake: Option<Wake>,
        rt: bool,
    },
    /// Off the CPU by its own doing; `blocked`: uninterruptibly.
    Asleep {
        blocked: bool,
    },
    Dead,
}

/// A watched thread's state from `start` until the next span's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u64,
    pub(crate) state: State,
}

#[derive(Clone, Debug)]
pub(crate) struct ThreadLine {
    /// In time order (a span may last no time); the first starts with the
    /// time line.
    pub(crate) spans: Vec<Span>,
    /// Real-time as last seen at a switch.
    rt: bool,
}

impl ThreadLine {
    fn current(&self) -> State {
        self.spans.last().map_or(State::Unknown, |s| s.state)
    }

    /// Gives the open span another state (what the events showed it was).
    fn set_current(&mut self, state: State) {
        if let Some(last) = self.spans.last_mut() {
            last.state = state;
        }
    }

    /// Starts a span at `t`. One may start where the last did: a wake-up
    /// stamped with the switch-in it led to still names the waker.
    fn push(&mut self, t: u64, state: State) {
        if self.spans.last().is_some_and(|l| l.state == state) {
            return;
        }
        self.spans.push(Span { start: t, state });
    }
}

/// What a time line could see: causes it cannot see are never attributed,
/// and a report says which.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Interrupt and softirq events were recorded.
    pub irqs: bool,
    /// Switches carry the real-time bits (throttling can be seen).
    pub rt_classes: bool,
    /// The recorder saw a CPU's steal clock move (a KVM guest whose
    /// hypervisor ran something else): steal can be told.
    pub steal: bool,
    /// Contradictions repaired by marking a stretch unknown: a switch on a
    /// CPU by a thread not seen to take it, an interrupt exit without its
    /// entry, nesting deeper than interrupts go.
    pub repaired: u64,
}

/// A probe thread of a [`Timeline`], and the CPUs it may run on; it
/// indexes that time line, so explain it with no other.
#[derive(Clone, Debug)]
pub struct Probe {
    pub(crate) tid: u32,
    pub(crate) line: usize,
    pub(crate) allowed: Vec<bool>,
    /// It waits for messages (a flow's receiver), not for its timer.
    pub(crate) on_message: bool,
}

impl Probe {
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// A thread that waits for a message (a datagram) due at its planned
    /// time, not for its timer: asleep past the planned time, the message
    /// was not in yet, and what woke it (the network's softirq) is what
    /// it was blocked on, not a late timer.
    pub fn on_messages(mut self) -> Probe {
        self.on_message = true;
        self
    }

    /// Limits the CPUs it may run on (its affinity; the recording does not
    /// hold it), which decides whether another CPU idled while it waited.
    /// Every CPU by default.
    pub fn on_cpus(mut self, cpus: &[usize]) -> Result<Probe, BadInput> {
        if cpus.is_empty() {
            return Err(BadInput(format!("thread {}: an empty CPU list", self.tid)));
        }
        if let Some(&c) = cpus.iter().find(|&&c| c >= self.allowed.len()) {
            return Err(BadInput(format!(
                "thread {}: CPU {c} is not in the recording (CPUs 0 to {})",
                self.tid,
                self.allowed.len() - 1
            )));
        }
        self.allowed.iter_mut().for_each(|a| *a = false);
        for &c in cpus {
            self.allowed[c] = true;
        }
        Ok(self)
    }

    pub(crate) fn allows(&self, cpu: usize) -> bool {
        self.allowed.get(cpu).copied().unwrap_or(false)
    }
}

/// Builds a [`Timeline`] from events fed in time order.
pub struct TimelineBuilder {
    start_ns: u64,
    last_ts: u64,
    side: Side,
    cpus: Vec<CpuLine>,
    cpu_state: Vec<CpuState>,
    watched: HashMap<u32, usize>,
    lines: Vec<ThreadLine>,
    threads: HashMap<u32, ThreadInfo>,
    groups: Vec<Group>,
    coverage: Coverage,
    vcpu_samples: HashMap<u32, VcpuSamples>,
}

/// Stack samples of a TCG vCPU thread: at each, whether it ran QEMU's own
/// code (its binary, its libraries, the host kernel for it) or the guest's
/// (TCG's translated blocks, in an anonymous executable mapping). A sample
/// at t stands for the `period_ns` before it.
#[derive(Clone, Debug, Default)]
pub(crate) struct VcpuSamples {
    pub(crate) period_ns: u64,
    /// (time, in QEMU's own code), in time order.
    pub(crate) at: Vec<(u64, bool)>,
}

/// What the builder tracks per CPU besides its line.
#[derive(Clone, Copy, Debug)]
struct CpuState {
    /// It switched: its occupant is known.
    seen: bool,
    occupant: u32,
    /// Handlers running, innermost last.
    irq_stack: [Irq; IRQ_DEPTH],
    depth: usize,
    /// Start of the interrupt piece still open (the innermost handler's).
    irq_since: u64,
    /// The last stretch whose events are missing here: from the switch to
    /// an occupant whose switch-out was never seen to the next switch seen
    /// (some hosts hide the events of their own agents' threads).
    dark: Option<(u64, u64)>,
    /// Its last events' stamps, [`RECENT`] at most, oldest first.
    recent: [u64; RECENT],
    recent_len: usize,
    /// Its steal clock at its last [`kind::STEAL`] (None: none yet).
    steal_clock: Option<u64>,
}

/// Events per CPU a steal is placed among: the kernel updates the steal
/// clock the recorder reads with its run-queue clock (switches, wake-ups,
/// ticks), a few events after the vCPU ran again.
const RECENT: usize = 16;

/// A gap between two events shorter than this is the CPU running between
/// them (inside one handler, say), not the hypervisor's.
const STEAL_GAP_MIN_NS: u64 = 50_000;

impl Default for CpuState {
    fn default() -> Self {
        CpuState {
            seen: false,
            occupant: UNKNOWN_TID,
            irq_stack: [Irq::Hard(0); IRQ_DEPTH],
            depth: 0,
            irq_since: 0,
            dark: None,
            recent: [0; RECENT],
            recent_len: 0,
            steal_clock: None,
        }
    }
}

impl TimelineBuilder {
    /// A time line from `start_ns` (CLOCK_MONOTONIC) over `cpus` CPUs.
    pub fn new(start_ns: u64, cpus: usize) -> TimelineBuilder {
        let cpus = cpus.max(1);
        let line = CpuLine {
            slices: vec![Slice {
                start: start_ns,
                tid: UNKNOWN_TID,
                rt: false,
            }],
            irqs: Vec::new(),
            stolen: Vec::new(),
        };
        TimelineBuilder {
            start_ns,
            last_ts: start_ns,
            side: Side::Host,
            cpus: vec![line; cpus],
            cpu_state: vec![CpuState::default(); cpus],
            watched: HashMap::new(),
            lines: Vec::new(),
            threads: HashMap::new(),
            groups: Vec::new(),
            coverage: Coverage::default(),
            vcpu_samples: HashMap::new(),
        }
    }

    /// A TCG vCPU thread's stack samples, each at (time, in QEMU's own
    /// code), taken every `period_ns` of its CPU time: what tells QEMU's
    /// emulation from the guest's code where the vCPU thread ran.
    pub fn vcpu_samples(&mut self, tid: u32, period_ns: u64, mut at: Vec<(u64, bool)>) {
        at.sort_unstable();
        self.vcpu_samples.insert(tid, VcpuSamples { period_ns, at });
    }

    /// Whose scheduler the events are from (the host's by default).
    pub fn side(mut self, side: Side) -> TimelineBuilder {
        self.side = side;
        self
    }

    /// The thread table and groups that name culprits.
    pub fn names(mut self, threads: HashMap<u32, ThreadInfo>, groups: Vec<Group>) -> TimelineBuilder {
        self.threads = threads;
        self.groups = groups;
        self
    }

    /// Keeps the states of `tid` (a probe thread). Call before its events.
    pub fn watch(&mut self, tid: u32) {
        if tid == IDLE_TID || tid == UNKNOWN_TID || self.watched.contains_key(&tid) {
            return;
        }
        self.watched.insert(tid, self.lines.len());
        self.lines.push(ThreadLine {
            spans: vec![Span {
                start: self.start_ns,
                state: State::Unknown,
            }],
            rt: false,
        });
    }

    pub fn feed(&mut self, e: &Event) {
        // Readers sort events by stamp; one behind the last (rings merged
        // late) is taken at the last, so every line stays in order.
        let t = e.ts.max(self.last_ts);
        self.last_ts = t;
        let cpu = (e.cpu as usize).min(self.cpus.len() - 1);
        match e.kind {
            kind::SWITCH => self.on_switch(t, cpu, e),
            kind::WAKEUP | kind::WAKEUP_NEW => {
                let target = (e.c as usize).min(self.cpus.len() - 1) as u16;
                self.on_wakeup(t, e.a, e.b, target, cpu as u16);
            }
            kind::MIGRATE => {
                let to = (e.c as usize).min(self.cpus.len() - 1) as u16;
                self.on_migrate(t, e.a, to);
            }
            kind::IRQ_ENTRY => {
                let irq = if e.flags & F_IRQ_VECTOR != 0 {
                    Irq::Vector(e.a)
                } else {
                    Irq::Hard(e.a)
                };
                self.irq_enter(t, cpu, irq);
            }
            kind::SOFTIRQ_ENTRY => self.irq_enter(t, cpu, Irq::Soft(e.a)),
            kind::IRQ_EXIT | kind::SOFTIRQ_EXIT => self.irq_exit(t, cpu),
            kind::STEAL => {
                let clock = u64::from(e.a) | u64::from(e.b) << 32;
                self.coverage.steal = true;
                let st = &mut self.cpu_state[cpu];
                // The first only sets where the clock stood.
                let Some(before) = st.steal_clock.replace(clock) else {
                    st.recent_len = 0;
                    return;
                };
                let ns = clock.saturating_sub(before);
                let mut pieces = [(0u64, 0u64); RECENT];
                let n = place_steal(&st.recent[..st.recent_len], t, ns, &mut pieces);
                st.recent_len = 0;
                let stolen = &mut self.cpus[cpu].stolen;
                for &(p, q) in &pieces[..n] {
                    push_stolen(stolen, p.max(self.start_ns), q);
                }
                return;
            }
            _ => {}
        }
        let st = &mut self.cpu_state[cpu];
        if st.recent_len == RECENT {
            st.recent.copy_within(1.., 0);
            st.recent_len -= 1;
        }
        st.recent[st.recent_len] = t;
        st.recent_len += 1;
    }

    /// The time line up to `end_ns` (at least the last event).
    pub fn finish(mut self, end_ns: u64) -> Timeline {
        let end = end_ns.max(self.last_ts);
        for (line, st) in self.cpus.iter_mut().zip(&self.cpu_state) {
            if st.depth > 0 {
                close_irq(&mut line.irqs, st.irq_since, end, st.irq_stack[st.depth - 1]);
            }
        }
        Timeline {
            start_ns: self.start_ns,
            end_ns: end,
            side: self.side,
            cpus: self.cpus,
            watched: self.watched,
            lines: self.lines,
            threads: self.threads,
            groups: self.groups,
            coverage: self.coverage,
            vcpu_samples: self.vcpu_samples,
        }
    }

    fn on_switch(&mut self, t: u64, cpu: usize, e: &Event) {
        let (prev, next) = (e.a, e.b);
        let (prev_rt, next_rt) = (e.flags & F_PREV_RT != 0, e.flags & F_NEXT_RT != 0);
        self.coverage.rt_classes |= prev_rt || next_rt;
        let st = &mut self.cpu_state[cpu];
        let line = &mut self.cpus[cpu];
        if st.depth > 0 {
            // No switch happens inside a handler (hard IRQs and softirqs
            // run to their end, in ksoftirqd too, outside PREEMPT_RT): an
            // exit went missing, and the handler was over by now.
            close_irq(&mut line.irqs, st.irq_since, t, st.irq_stack[st.depth - 1]);
            st.depth = 0;
            self.coverage.repaired += 1;
        }
        let first_here = !st.seen;
        if first_here {
            // Whoever leaves has held the CPU since the time line began, as
            // far as the events tell.
            line.slices[0] = Slice {
                start: self.start_ns,
                tid: prev,
                rt: prev_rt,
            };
        } else if st.occupant != prev {
            // A switch here went missing: who held the CPU since the last
            // one is open.
            if let Some(last) = line.slices.last_mut() {
                last.tid = UNKNOWN_TID;
                st.dark = Some((last.start, t));
            }
            self.coverage.repaired += 1;
        }
        st.seen = true;
        st.occupant = next;
        let slice = Slice {
            start: t,
            tid: next,
            rt: next_rt,
        };
        push_slice(&mut line.slices, slice);
        if let Some(&ix) = self.watched.get(&prev) {
            self.thread_out(ix, t, cpu, first_here, prev_rt, e);
        }
        if let Some(&ix) = self.watched.get(&next) {
            self.thread_in(ix, t, cpu, next_rt);
        }
    }

    fn thread_out(&mut self, ix: usize, t: u64, cpu: usize, first_here: bool, rt: bool, e: &Event) {
        let line = &mut self.lines[ix];
        line.rt = rt;
        let ran_here = matches!(line.current(), State::Running { cpu: c } if c as usize == cpu);
        if !ran_here {
            if first_here && line.spans.len() == 1 && line.current() == State::Unknown {
                // Its first event, on this CPU's first switch: it held the
                // CPU since the time line began.
                line.set_current(State::Running { cpu: cpu as u16 });
            } else {
                // Its switch-in here went missing: since its last event it
                // ran here for a while, not known when.
                line.set_current(State::Unknown);
            }
        }
        let state = if e.c & TASK_DEAD != 0 {
            State::Dead
        } else if e.flags & F_PREV_RUNNABLE != 0 {
            State::Queued {
                cpu: cpu as u16,
                since: t,
                wake: None,
                rt,
            }
        } else {
            State::Asleep {
                blocked: e.c & TASK_UNINTERRUPTIBLE != 0,
            }
        };
        line.push(t, state);
    }

    fn thread_in(&mut self, ix: usize, t: u64, cpu: usize, rt: bool) {
        let line = &mut self.lines[ix];
        line.rt = rt;
        let asleep_since = line
            .spans
            .last()
            .filter(|s| matches!(s.state, State::Asleep { .. }))
            .map(|s| s.start);
        match (line.current(), asleep_since, self.cpu_state[cpu].dark) {
            // Woken with no wake-up seen, after this CPU went dark since it
            // slept: a wake-up here would have been seen outside the dark
            // stretch, so it came inside it (when, not known), and the
            // thread was queued from the stretch's end. A waker on another
            // CPU whose events were seen is ruled out the same way.
            (State::Asleep { .. }, Some(slept), Some((dark_from, dark_to))) if dark_to > slept && dark_to <= t => {
                line.push(dark_from.max(slept), State::Unknown);
                line.push(
                    dark_to,
                    State::Queued {
                        cpu: cpu as u16,
                        since: dark_to,
                        wake: None,
                        rt,
                    },
                );
            }
            (State::Queued { .. } | State::Unknown, ..) => {}
            // Its wake-up, or its switch-out elsewhere, went missing: the
            // stretch since its last event is open.
            (State::Running { .. } | State::Asleep { .. } | State::Dead, ..) => line.set_current(State::Unknown),
        }
        line.push(t, State::Running { cpu: cpu as u16 });
    }

    fn on_wakeup(&mut self, t: u64, tid: u32, by: u32, target: u16, waker_cpu: u16) {
        let Some(&ix) = self.watched.get(&tid) else { return };
        let line = &mut self.lines[ix];
        // A thread running or queued already starts no new wait.
        if matches!(line.current(), State::Asleep { .. } | State::Unknown | State::Dead) {
            let state = State::Queued {
                cpu: target,
                since: t,
                wake: Some(Wake { by, cpu: waker_cpu }),
                rt: line.rt,
            };
            line.push(t, state);
        }
    }

    fn on_migrate(&mut self, t: u64, tid: u32, to: u16) {
        let Some(&ix) = self.watched.get(&tid) else { return };
        let line = &mut self.lines[ix];
        if let State::Queued { cpu, since, wake, rt } = line.current() {
            if cpu != to {
                line.push(
                    t,
                    State::Queued {
                        cpu: to,
                        since,
                        wake,
                        rt,
                    },
                );
            }
        }
    }

    fn irq_enter(&mut self, t: u64, cpu: usize, irq: Irq) {
        self.coverage.irqs = true;
        let st = &mut self.cpu_state[cpu];
        let irqs = &mut self.cpus[cpu].irqs;
        if st.depth > 0 {
            close_irq(irqs, st.irq_since, t, st.irq_stack[st.depth - 1]);
        }
        // Softirqs do not nest in softirqs, nor hard IRQs in hard IRQs
        // (handlers run with interrupts off): one of the same kind below
        // lost its exit, and it and what it interrupted are over.
        let soft = matches!(irq, Irq::Soft(_));
        if let Some(below) = st.irq_stack[..st.depth]
            .iter()
            .position(|i| matches!(i, Irq::Soft(_)) == soft)
        {
            st.depth = below;
            self.coverage.repaired += 1;
        }
        if st.depth == IRQ_DEPTH {
            // Exits went missing; the handlers below are over by now.
            st.depth = 0;
            self.coverage.repaired += 1;
        }
        st.irq_stack[st.depth] = irq;
        st.depth += 1;
        st.irq_since = t;
    }

    fn irq_exit(&mut self, t: u64, cpu: usize) {
        self.coverage.irqs = true;
        let st = &mut self.cpu_state[cpu];
        if st.depth == 0 {
            // Its entry came before the time line or went missing: how long
            // it ran is not known, so none of it is counted.
            self.coverage.repaired += 1;
            return;
        }
        close_irq(&mut self.cpus[cpu].irqs, st.irq_since, t, st.irq_stack[st.depth - 1]);
        st.depth -= 1;
        st.irq_since = t;
    }
}

fn close_irq(irqs: &mut Vec<IrqPiece>, start: u64, end: u64, irq: Irq) {
    if end <= start {
        return;
    }
    if let Some(last) = irqs.last_mut() {
        if last.end == start && last.irq == irq {
            last.end = end;
            return;
        }
    }
    irqs.push(IrqPiece { start, end, irq });
}

/// Where `ns` stolen, seen at `t`, lay among the CPU's events before it
/// (`recent`, their stamps, oldest first; since the last steal): only in
/// the gaps between events, since a vCPU records nothing while it is not
/// run, and at the end of each gap, where a vCPU halted on an idle CPU
/// became runnable (its timer due) and waited. The latest gaps of at least
/// [`STEAL_GAP_MIN_NS`] are filled first, then shorter ones; what fits in
/// no gap (the steal began before the first event kept) is not placed.
/// Writes the pieces, in time order, into `out`; returns how many.
fn place_steal(recent: &[u64], t: u64, ns: u64, out: &mut [(u64, u64); RECENT]) -> usize {
    let mut left = ns;
    let mut n = 0;
    let mut used = [false; RECENT];
    for pass in 0..2 {
        let mut end = t;
        for (i, &start) in recent.iter().enumerate().rev() {
            let gap = end.saturating_sub(start);
            let fits = pass == 1 || gap >= STEAL_GAP_MIN_NS;
            if left > 0 && gap > 0 && fits && !used[i] && n < RECENT {
                let take = gap.min(left);
                out[n] = (end - take, end);
                n += 1;
                used[i] = true;
                left -= take;
            }
            end = start;
        }
    }
    out[..n].sort_unstable();
    n
}

/// Adds a stolen stretch, keeping the list in order and merged.
fn push_stolen(stolen: &mut Vec<(u64, u64)>, from: u64, to: u64) {
    if to <= from {
        return;
    }
    let i = stolen.partition_point(|s| s.1 < from);
    if stolen.get(i).is_some_and(|s| s.0 <= to) {
        let s = &mut stolen[i];
        s.0 = s.0.min(from);
        s.1 = s.1.max(to);
        return;
    }
    stolen.insert(i, (from, to));
}

/// Appends a CPU's slice; one starting where the last did replaces it.
fn push_slice(slices: &mut Vec<Slice>, slice: Slice) {
    if let Some(last) = slices.last_mut() {
        if last.start >= slice.start {
            *last = slice;
            return;
        }
    }
    slices.push(slice);
}

/// The watched threads that are TCG vCPUs ("CPU n/TCG"), with their
/// samples classified: the leaf in the host kernel or in a file's mapping
/// (QEMU, its libraries) is QEMU's own work; in an anonymous executable
/// mapping, TCG's translated code, the guest's. A leaf in no mapping the
/// recording kept is left out. KVM vCPUs are not: their guest mode is not
/// told apart by the sampler.
fn tcg_samples(rec: &Recording, watch: &[u32]) -> Vec<(u32, Vec<(u64, bool)>)> {
    let tcg: Vec<u32> = watch
        .iter()
        .copied()
        .filter(|t| {
            rec.threads
                .get(t)
                .is_some_and(|i| ontime_recording::groups::matches("CPU */TCG", &i.comm))
        })
        .collect();
    if tcg.is_empty() {
        return Vec::new();
    }
    let mut out: HashMap<u32, Vec<(u64, bool)>> = HashMap::new();
    let batch = &rec.samples;
    for smp in batch.samples.iter().filter(|s| tcg.contains(&s.tid)) {
        let qemu = if smp.kernel > 0 {
            Some(true)
        } else {
            batch.user_frames(smp).first().and_then(|&ip| {
                rec.maps
                    .get(&smp.pid)
                    .and_then(|m| m.find(ip))
                    .map(|m| !m.path.is_empty())
            })
        };
        if let Some(q) = qemu {
            out.entry(smp.tid).or_default().push((smp.ts, q));
        }
    }
    out.into_iter().collect()
}

/// Who ran where and when, and the watched threads' states, over
/// [start, end) on CLOCK_MONOTONIC.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) side: Side,
    pub(crate) cpus: Vec<CpuLine>,
    watched: HashMap<u32, usize>,
    pub(crate) lines: Vec<ThreadLine>,
    threads: HashMap<u32, ThreadInfo>,
    groups: Vec<Group>,
    coverage: Coverage,
    vcpu_samples: HashMap<u32, VcpuSamples>,
}

impl Timeline {
    /// A recording's time line, keeping the states of the `watch` threads
    /// (the probes). It covers the recording from its start to its end (to
    /// its last event when it was cut short).
    pub fn from_recording(rec: &Recording, watch: &[u32]) -> Timeline {
        let mut b =
            TimelineBuilder::new(rec.meta.start_ns, rec.meta.cpus).names(rec.threads.clone(), rec.meta.groups.clone());
        for &tid in watch {
            b.watch(tid);
        }
        for e in &rec.events {
            b.feed(e);
        }
        if let Some(period) = rec.meta.sample_period_ns {
            for (tid, at) in tcg_samples(rec, watch) {
                b.vcpu_samples(tid, period, at);
            }
        }
        let last = rec.events.last().map_or(rec.meta.start_ns, |e| e.ts);
        b.finish(rec.end.as_ref().map_or(last, |end| end.end_ns))
    }

    /// The stack samples of TCG vCPU thread `tid`, if it has any.
    pub(crate) fn vcpu_samples(&self, tid: u32) -> Option<&VcpuSamples> {
        self.vcpu_samples
            .get(&tid)
            .filter(|s| !s.at.is_empty() && s.period_ns > 0)
    }

    /// As [`Timeline::from_recording`], for a recording made on another
    /// clock (a guest's): every stamp placed `offset_ns` later (reference =
    /// its clock + offset, as `ontime_net::clock` measures it), its
    /// scheduler's causes told as `side`'s.
    pub fn from_recording_placed(rec: &Recording, watch: &[u32], offset_ns: i64, side: Side) -> Timeline {
        let place = |t: u64| t.saturating_add_signed(offset_ns);
        let mut b = TimelineBuilder::new(place(rec.meta.start_ns), rec.meta.cpus)
            .side(side)
            .names(rec.threads.clone(), rec.meta.groups.clone());
        for &tid in watch {
            b.watch(tid);
        }
        for e in &rec.events {
            b.feed(&Event { ts: place(e.ts), ..*e });
        }
        let last = rec.events.last().map_or(rec.meta.start_ns, |e| e.ts);
        b.finish(place(rec.end.as_ref().map_or(last, |end| end.end_ns)))
    }

    /// A watched thread as a probe to explain, on every CPU.
    pub fn probe(&self, tid: u32) -> Result<Probe, BadInput> {
        let Some(&line) = self.watched.get(&tid) else {
            return Err(BadInput(format!(
                "thread {tid} was not among the probe threads the time line was built for"
            )));
        };
        if self.lines[line].spans.iter().all(|s| s.state == State::Unknown) {
            return Err(BadInput(format!(
                "thread {tid}{} has no scheduling event in the recording: was its tenant recorded?",
                self.threads
                    .get(&tid)
                    .map(|t| format!(" ({})", t.comm))
                    .unwrap_or_default()
            )));
        }
        Ok(Probe {
            tid,
            line,
            allowed: vec![true; self.cpus.len()],
            on_message: false,
        })
    }

    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    pub fn end_ns(&self) -> u64 {
        self.end_ns
    }

    pub fn side(&self) -> Side {
        self.side
    }

    /// The interrupt handler running on `cpu` at `t`, if one was.
    pub(crate) fn irq_at(&self, cpu: u16, t: u64) -> Option<Irq> {
        let irqs = &self.cpus.get(usize::from(cpu))?.irqs;
        let i = irqs.partition_point(|p| p.end <= t);
        irqs.get(i).filter(|p| p.start <= t).map(|p| p.irq)
    }

    pub fn cpus(&self) -> usize {
        self.cpus.len()
    }

    pub fn coverage(&self) -> Coverage {
        self.coverage
    }

    pub fn thread(&self, tid: u32) -> Option<&ThreadInfo> {
        self.threads.get(&tid)
    }

    pub fn group(&self, index: u32) -> Option<&Group> {
        self.groups.get(index as usize)
    }

    /// Calls `f(p, q, Some(i))` for each stretch [p, q) of [a, e) within
    /// span `i` of time line `line`, and `f(p, q, None)` for the parts
    /// before or after the recording, in time order; the stretches tile
    /// [a, e).
    pub(crate) fn line_walk(&self, line: usize, a: u64, e: u64, mut f: impl FnMut(u64, u64, Option<usize>)) {
        let mut a = a;
        if a >= e {
            return;
        }
        let from = self.start_ns.min(e);
        if a < from {
            f(a, from, None);
            a = from;
        }
        let to = self.end_ns.min(e).max(a);
        let spans = &self.lines[line].spans;
        let mut i = spans.partition_point(|s| s.start <= a).saturating_sub(1);
        while a < to {
            let end = spans.get(i + 1).map_or(to, |s| s.start).min(to);
            if end > a {
                f(a, end, Some(i));
                a = end;
            }
            i += 1;
        }
        if a < e {
            f(a, e, None);
        }
    }

    /// Calls `f(p, q, stolen)` for each stretch of [a, e) over which
    /// `cpu` was taken from the recorded machine by the hypervisor beneath
    /// it (`stolen`) or not, in time order; the stretches tile [a, e).
    pub(crate) fn stolen_walk(&self, cpu: u16, a: u64, e: u64, mut f: impl FnMut(u64, u64, bool)) {
        let stolen = &self.cpus[(cpu as usize).min(self.cpus.len() - 1)].stolen;
        let mut t = a;
        for &(p, q) in &stolen[stolen.partition_point(|s| s.1 <= a)..] {
            if p >= e {
                break;
            }
            if p > t {
                f(t, p, false);
            }
            let q = q.min(e);
            f(p.max(t), q, true);
            t = q;
        }
        if t < e {
            f(t, e, false);
        }
    }

    /// Calls `f` for each stretch of [a, e) on `cpu` over which its
    /// occupant and its interrupt state do not change, in time order; the
    /// stretches tile [a, e).
    pub(crate) fn cpu_walk(&self, cpu: u16, a: u64, e: u64, mut f: impl FnMut(u64, u64, Slice, Option<Irq>)) {
        let line = &self.cpus[(cpu as usize).min(self.cpus.len() - 1)];
        let slices = &line.slices;
        let mut si = slices.partition_point(|s| s.start <= a).saturating_sub(1);
        let mut ii = line.irqs.partition_point(|p| p.end <= a);
        let mut t = a;
        while t < e {
            let slice = slices[si];
            let slice_end = slices.get(si + 1).map_or(u64::MAX, |s| s.start);
            let (irq, irq_bound) = match line.irqs.get(ii) {
                Some(p) if p.start <= t => (Some(p.irq), p.end),
                Some(p) => (None, p.start),
                None => (None, u64::MAX),
            };
            let q = slice_end.min(irq_bound).min(e);
            f(t, q, slice, irq);
            t = q;
            while slices.get(si + 1).is_some_and(|s| s.start <= t) {
                si += 1;
            }
            while line.irqs.get(ii).is_some_and(|p| p.end <= t) {
                ii += 1;
            }
        }
    }

    /// The real-time thread that ran longest on `cpu` in the real-time
    /// class's period before `at` (Linux's default, 1 s: the recording does
    /// not carry the host's setting): whose use of the class's budget got
    /// it throttled there. Unknown when no real-time thread ran.
    pub(crate) fn rt_budget_user(&self, cpu: u16, at: u64) -> u32 {
        const RT_PERIOD_NS: u64 = 1_000_000_000;
        // A few real-time threads share a CPU's budget at once; past this
        // many, the rest are not weighed.
        const MAX_THREADS: usize = 16;
        let line = &self.cpus[(cpu as usize).min(self.cpus.len() - 1)];
        let from = at.saturating_sub(RT_PERIOD_NS);
        let first = line.slices.partition_point(|s| s.start <= from).saturating_sub(1);
        let mut used = [(UNKNOWN_TID, 0u64); MAX_THREADS];
        let mut n = 0;
        for (i, s) in line.slices.iter().enumerate().skip(first) {
            if s.start >= at {
                break;
            }
            if !s.rt || s.tid == UNKNOWN_TID || s.tid == IDLE_TID {
                continue;
            }
            let end = line.slices.get(i + 1).map_or(at, |n| n.start).min(at);
            let ns = end.saturating_sub(s.start.max(from));
            match used[..n].iter_mut().find(|(t, _)| *t == s.tid) {
                Some(u) => u.1 += ns,
                None if n < MAX_THREADS => {
                    used[n] = (s.tid, ns);
                    n += 1;
                }
                None => {}
            }
        }
        used[..n]
            .iter()
            .filter(|(_, ns)| *ns > 0)
            .max_by_key(|(_, ns)| *ns)
            .map_or(UNKNOWN_TID, |(t, _)| *t)
    }

    /// Of [a, e), the time during which at least one CPU other than `cpu`
    /// that `probe` may run on ran its idle task. A CPU whose occupant is
    /// unknown counts as busy. Costs a binary search per CPU per switch on
    /// those CPUs within [a, e).
    pub(crate) fn idle_elsewhere(&self, probe: &Probe, cpu: u16, a: u64, e: u64) -> u64 {
        let mut idle = 0;
        let mut t = a;
        while t < e {
            let mut next = e;
            let mut any = false;
            for (c, line) in self.cpus.iter().enumerate() {
                if c == cpu as usize || !probe.allows(c) {
                    continue;
                }
                let i = line.slices.partition_point(|s| s.start <= t).saturating_sub(1);
                any |= line.slices[i].tid == IDLE_TID;
                if let Some(n) = line.slices.get(i + 1) {
                    next = next.min(n.start);
                }
            }
            if any {
                idle += next - t;
            }
            t = next;
        }
        idle
    }
}
