//! The vocabulary of an explanation: the causes a late event's lateness is
//! split into ([`Cause`], each naming its culprit), the time-ordered pieces
//! that carry them ([`Segment`]) and one late event's pieces
//! ([`Explanation`]), whose lengths add up to its lateness exactly. Nothing
//! here reads events: [`crate::attribute`] fills these from a time line,
//! [`crate::report`] names the culprits for the JSON.
//!
//! The types are `Copy` and hold thread ids, not names, so explaining an
//! event allocates nothing beyond the explanation's vector of segments.

use serde::{Deserialize, Serialize};

/// The tid a time line holds where the events do not say who it was.
/// Thread ids stay below 2^22 (the recording refuses larger ones).
pub(crate) const UNKNOWN_TID: u32 = u32::MAX;

/// Whose scheduler saw a piece of time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The machine the recording was made on: a host, or a machine
    /// without guests.
    #[default]
    Host,
    /// Inside a guest, from a recording made there and placed on the
    /// host's clock.
    Guest,
}

/// Who a cause names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Who {
    Thread(u32),
    /// The CPU ran its idle task: a wake-up from an interrupt on an idle
    /// CPU, or an idle CPU slow to pick up a queued thread.
    Idle,
    /// The events do not say.
    Unknown,
}

impl Who {
    /// A tid as the recorder writes it: 0 is the idle task.
    pub fn from_tid(tid: u32) -> Who {
        match tid {
            0 => Who::Idle,
            UNKNOWN_TID => Who::Unknown,
            t => Who::Thread(t),
        }
    }
}

/// An interrupt handler's run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Irq {
    /// A device interrupt's handler, by IRQ number.
    Hard(u32),
    /// An x86 system vector (local timer, reschedule or call-function IPI).
    Vector(u32),
    /// A softirq, by vector (see [`SOFTIRQ_NAMES`]).
    Soft(u32),
}

/// The kernel's softirq vectors, by number.
pub const SOFTIRQ_NAMES: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

impl Irq {
    /// An interrupt that runs expired timers: x86's local timer (hrtimers)
    /// or the TIMER and HRTIMER softirqs. A sleeper woken in one was woken
    /// by its timeout.
    pub fn is_timer(self) -> bool {
        matches!(self, Irq::Vector(0xec) | Irq::Soft(1) | Irq::Soft(8))
    }

    /// As a report names it: `irq 24`, `local timer` (an x86 system
    /// vector by its name, else `vector 240`), `softirq NET_RX`.
    pub fn label(self) -> String {
        match self {
            Irq::Hard(n) => format!("irq {n}"),
            // x86's (arch/x86/include/asm/irq_vectors.h).
            Irq::Vector(0xec) => "local timer".into(),
            Irq::Vector(0xfd) => "reschedule IPI".into(),
            Irq::Vector(0xfc) => "call-function IPI".into(),
            Irq::Vector(0xfb) => "call-function-single IPI".into(),
            Irq::Vector(v) => format!("vector {v}"),
            Irq::Soft(v) => match SOFTIRQ_NAMES.get(v as usize) {
                Some(name) => format!("softirq {name}"),
                None => format!("softirq {v}"),
            },
        }
    }
}

/// What a blocked thread waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockedOn {
    /// Uninterruptible sleep: I/O, or a lock inside the kernel.
    Io,
    /// Asleep after its planned time, woken by another thread: a lock, a
    /// pipe, a futex; the waker is the culprit.
    Thread,
    /// Asleep after its planned time, woken from an interrupt on an idle
    /// CPU: a device or the network.
    Interrupt,
    /// The packet queued in the host I/O path (the relay) beyond its
    /// setting. From the relay's records, not from a time line.
    RelayQueue,
    /// The relay's own thread waited (for a CPU, asleep) while holding the
    /// packet. From the relay's records and its thread's time line.
    RelayWait,
    /// A datagram's sender had not handed it to the network: its thread
    /// ran (the send call, and the softirq that carries the frame on)
    /// from the send stamp on. From the sender's time line.
    Sender,
    /// The emulated WAN held the packet beyond its setting.
    Wan,
    /// The gateway: from its kernel receive stamp to its handler's answer.
    Gateway,
}

/// How a wake-up came late with nothing else to blame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Late {
    /// Still asleep after its planned time, in the sleep it began before:
    /// the timer fired, or its wake-up was delivered, late.
    Timer,
    /// Woken, queued on a CPU running nothing: the CPU was slow to leave
    /// idle (or, in a guest, its vCPU to be run again).
    IdleExit,
}

/// Why a piece of lateness cannot be explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gap {
    /// Outside the recording, or before the probe thread's first event.
    NotRecorded,
    /// The probe thread's events contradict each other: one went missing
    /// (a switch-in with no wake-up, a switch-out from a CPU it was not
    /// seen to take).
    MissingEvent,
    /// Queued on a CPU whose occupant is not known: a switch there went
    /// missing, or the CPU had not switched yet.
    UnknownOccupant,
}

/// One cause of lateness with its culprit. CPUs are the recording's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Runnable, not running: queued on `cpu` while `behind` ran there.
    /// `idle_elsewhere_ns`: of this time, how much another CPU the probe
    /// may run on idled (the scheduler did not conserve work).
    WaitedForCpu {
        cpu: u16,
        behind: Who,
        idle_elsewhere_ns: u64,
    },
    /// Interrupt handlers ran on `cpu` while the probe ran or was queued
    /// there.
    Interrupts { cpu: u16, irq: Irq },
    /// A real-time probe queued behind a non-real-time occupant (or an
    /// idle CPU) longer than a wake-up preemption takes: its class was
    /// throttled. `budget`: the real-time thread that used most of the
    /// class's budget on `cpu` in the period before, the culprit; `behind`
    /// ran meanwhile. Seen only where switches carry the real-time bits.
    Throttled { cpu: u16, behind: Who, budget: Who },
    /// The probe ran: its own work outlasted its slack.
    OwnWork { cpu: u16 },
    /// Asleep on something other than its timer; `by` woke it, on `cpu`;
    /// from inside `irq` when the wake-up came in an interrupt handler's
    /// run (a device, the network's softirq), whoever it interrupted.
    Blocked {
        on: BlockedOn,
        by: Who,
        cpu: Option<u16>,
        irq: Option<Irq>,
    },
    /// Late with nothing runnable in the way. [`Late::Timer`]: `by` was
    /// current where the wake-up came, on `cpu`; [`Late::IdleExit`]: `cpu`
    /// idled (`by` is [`Who::Idle`]).
    LateTimer { how: Late, by: Who, cpu: Option<u16> },
    /// Host side of a guest's lateness: the vCPU thread `vcpu` ran on `cpu`
    /// while the guest did not progress: a TCG vCPU in QEMU's own code (its
    /// stack samples) while the guest's CPU had nothing to run. KVM exits
    /// are not told apart yet.
    Emulation { cpu: u16, vcpu: u32 },
    /// The recorded machine is itself a virtual machine, and its
    /// hypervisor took `cpu` (a vCPU of it) away: nothing on it ran, the
    /// probe and its timer included. From the CPU's steal clock (KVM's),
    /// which the recorder reads at each event.
    Stolen { cpu: u16 },
    /// The events do not account for this time.
    Unexplained { why: Gap },
}

/// The causes without their culprits: what shares are summed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    WaitedForCpu,
    Interrupts,
    Throttled,
    OwnWork,
    Blocked,
    LateTimer,
    Emulation,
    Steal,
    Unexplained,
}

impl CauseKind {
    pub const COUNT: usize = 9;
    pub const ALL: [CauseKind; CauseKind::COUNT] = [
        CauseKind::WaitedForCpu,
        CauseKind::Interrupts,
        CauseKind::Throttled,
        CauseKind::OwnWork,
        CauseKind::Blocked,
        CauseKind::LateTimer,
        CauseKind::Emulation,
        CauseKind::Steal,
        CauseKind::Unexplained,
    ];

    /// The name the JSON uses, for text.
    pub fn label(self) -> String {
        serde_name(&self)
    }
}

/// A unit variant's name as serde writes it: text takes its names from the
/// JSON's so that the two cannot drift apart.
pub(crate) fn serde_name<T: Serialize + std::fmt::Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => format!("{v:?}"),
    }
}

/// The variant of a cause, as the JSON names it (`detail`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detail {
    Hardirq,
    Vector,
    Softirq,
    Io,
    Thread,
    Interrupt,
    RelayQueue,
    RelayWait,
    Sender,
    Wan,
    Gateway,
    Timer,
    IdleExit,
    NotRecorded,
    MissingEvent,
    UnknownOccupant,
}

impl Detail {
    /// The name the JSON uses, for text.
    pub fn label(self) -> String {
        serde_name(&self)
    }
}

impl Cause {
    pub fn kind(&self) -> CauseKind {
        match self {
            Cause::WaitedForCpu { .. } => CauseKind::WaitedForCpu,
            Cause::Interrupts { .. } => CauseKind::Interrupts,
            Cause::Throttled { .. } => CauseKind::Throttled,
            Cause::OwnWork { .. } => CauseKind::OwnWork,
            Cause::Blocked { .. } => CauseKind::Blocked,
            Cause::LateTimer { .. } => CauseKind::LateTimer,
            Cause::Emulation { .. } => CauseKind::Emulation,
            Cause::Stolen { .. } => CauseKind::Steal,
            Cause::Unexplained { .. } => CauseKind::Unexplained,
        }
    }

    pub fn detail(&self) -> Option<Detail> {
        match *self {
            Cause::Interrupts { irq, .. } => Some(match irq {
                Irq::Hard(_) => Detail::Hardirq,
                Irq::Vector(_) => Detail::Vector,
                Irq::Soft(_) => Detail::Softirq,
            }),
            Cause::Blocked { on, .. } => Some(match on {
                BlockedOn::Io => Detail::Io,
                BlockedOn::Thread => Detail::Thread,
                BlockedOn::Interrupt => Detail::Interrupt,
                BlockedOn::RelayQueue => Detail::RelayQueue,
                BlockedOn::RelayWait => Detail::RelayWait,
                BlockedOn::Sender => Detail::Sender,
                BlockedOn::Wan => Detail::Wan,
                BlockedOn::Gateway => Detail::Gateway,
            }),
            Cause::LateTimer { how, .. } => Some(match how {
                Late::Timer => Detail::Timer,
                Late::IdleExit => Detail::IdleExit,
            }),
            Cause::Unexplained { why } => Some(match why {
                Gap::NotRecorded => Detail::NotRecorded,
                Gap::MissingEvent => Detail::MissingEvent,
                Gap::UnknownOccupant => Detail::UnknownOccupant,
            }),
            Cause::WaitedForCpu { .. }
            | Cause::Throttled { .. }
            | Cause::OwnWork { .. }
            | Cause::Emulation { .. }
            | Cause::Stolen { .. } => None,
        }
    }

    /// Who is to blame, on which CPU, by which interrupt (`probe`: the
    /// probe thread, the culprit of its own work).
    pub fn culprit(&self, probe: u32) -> (Option<Who>, Option<u16>, Option<Irq>) {
        match *self {
            Cause::WaitedForCpu { cpu, behind, .. } => (Some(behind), Some(cpu), None),
            // Who used the budget throttled it, not who ran meanwhile.
            Cause::Throttled { cpu, budget, .. } => (Some(budget), Some(cpu), None),
            Cause::Interrupts { cpu, irq } => (None, Some(cpu), Some(irq)),
            Cause::OwnWork { cpu } => (Some(Who::Thread(probe)), Some(cpu), None),
            Cause::Blocked { by, cpu, irq, .. } => (Some(by), cpu, irq),
            Cause::LateTimer { by, cpu, .. } => (Some(by), cpu, None),
            Cause::Emulation { cpu, vcpu } => (Some(Who::Thread(vcpu)), Some(cpu), None),
            Cause::Stolen { cpu } => (None, Some(cpu), None),
            Cause::Unexplained { .. } => (None, None, None),
        }
    }

    /// `self` and `next` as one cause when they differ in nothing but the
    /// time they cover (so adjacent pieces make one segment).
    fn merged(self, next: Cause) -> Option<Cause> {
        match (self, next) {
            (
                Cause::WaitedForCpu {
                    cpu,
                    behind,
                    idle_elsewhere_ns: a,
                },
                Cause::WaitedForCpu {
                    cpu: cpu2,
                    behind: behind2,
                    idle_elsewhere_ns: b,
                },
            ) if cpu == cpu2 && behind == behind2 => Some(Cause::WaitedForCpu {
                cpu,
                behind,
                idle_elsewhere_ns: a + b,
            }),
            (a, b) if a == b => Some(a),
            _ => None,
        }
    }
}

/// A stretch of a late event's lateness and its cause: [start, end) on
/// CLOCK_MONOTONIC, ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start_ns: u64,
    pub end_ns: u64,
    pub side: Side,
    pub cause: Cause,
}

impl Segment {
    pub fn len_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// One late event explained: segments in time order that tile [planned,
/// actual) without gap or overlap, so their lengths add up to the
/// lateness exactly; what the events do not account for is an
/// [`Cause::Unexplained`] segment, never folded into another cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explanation {
    /// The probe thread.
    pub tid: u32,
    pub planned_ns: u64,
    pub actual_ns: u64,
    pub segments: Vec<Segment>,
}

impl Explanation {
    pub fn lateness_ns(&self) -> u64 {
        self.actual_ns.saturating_sub(self.planned_ns)
    }

    /// Time of each cause, indexed like [`CauseKind::ALL`]; adds up to the
    /// lateness.
    pub fn by_kind(&self) -> [u64; CauseKind::COUNT] {
        let mut out = [0u64; CauseKind::COUNT];
        for s in &self.segments {
            out[s.cause.kind() as usize] += s.len_ns();
        }
        out
    }

    pub fn ns_of(&self, kind: CauseKind) -> u64 {
        self.by_kind()[kind as usize]
    }

    /// Starts over for another event, keeping the vector's room.
    pub(crate) fn reset(&mut self, tid: u32, planned_ns: u64, actual_ns: u64) {
        self.tid = tid;
        self.planned_ns = planned_ns;
        self.actual_ns = actual_ns;
        self.segments.clear();
    }

    /// Appends [start, end) (which must begin where the last segment
    /// ends), merged into the last segment when the cause is the same.
    pub(crate) fn push(&mut self, start_ns: u64, end_ns: u64, side: Side, cause: Cause) {
        if end_ns <= start_ns {
            return;
        }
        if let Some(last) = self.segments.last_mut() {
            debug_assert_eq!(last.end_ns, start_ns, "segments must tile the lateness");
            if last.end_ns == start_ns && last.side == side {
                if let Some(m) = last.cause.merged(cause) {
                    last.cause = m;
                    last.end_ns = end_ns;
                    return;
                }
            }
        }
        self.segments.push(Segment {
            start_ns,
            end_ns,
            side,
            cause,
        });
    }

    /// Gives the unexplained time within [start, end) to `cause`: what
    /// another record accounts for (the relay's for a packet it held, a
    /// guest's for its vCPU). Explained time is left as it is, so the sum
    /// still equals the lateness.
    pub fn refine(&mut self, start_ns: u64, end_ns: u64, side: Side, cause: Cause) {
        let (lo, hi) = (start_ns.max(self.planned_ns), end_ns.min(self.actual_ns));
        if lo >= hi {
            return;
        }
        let old = std::mem::take(&mut self.segments);
        self.segments.reserve(old.len() + 2);
        for s in old {
            let open = matches!(s.cause, Cause::Unexplained { .. });
            if !open || s.end_ns <= lo || s.start_ns >= hi {
                self.push(s.start_ns, s.end_ns, s.side, s.cause);
                continue;
            }
            let (a, b) = (s.start_ns.max(lo), s.end_ns.min(hi));
            self.push(s.start_ns, a, s.side, s.cause);
            self.push(a, b, side, cause);
            self.push(b, s.end_ns, s.side, s.cause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_index_all() {
        for (i, k) in CauseKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
    }

    #[test]
    fn adjacent_waits_behind_one_thread_merge() {
        let mut x = Explanation::default();
        x.reset(7, 0, 30);
        let wait = |idle| Cause::WaitedForCpu {
            cpu: 1,
            behind: Who::Thread(9),
            idle_elsewhere_ns: idle,
        };
        x.push(0, 10, Side::Host, wait(2));
        x.push(10, 20, Side::Host, wait(3));
        x.push(20, 30, Side::Host, Cause::OwnWork { cpu: 1 });
        assert_eq!(x.segments.len(), 2);
        assert_eq!(x.segments[0].cause, wait(5));
        assert_eq!(x.segments[0].end_ns, 20);
    }

    #[test]
    fn refine_fills_only_unexplained_time() {
        let mut x = Explanation::default();
        x.reset(7, 100, 200);
        let gap = Cause::Unexplained { why: Gap::NotRecorded };
        x.push(100, 150, Side::Host, Cause::OwnWork { cpu: 0 });
        x.push(150, 200, Side::Host, gap);
        let relay = Cause::Blocked {
            on: BlockedOn::RelayQueue,
            by: Who::Thread(33),
            cpu: None,
            irq: None,
        };
        x.refine(120, 180, Side::Host, relay);
        let pieces: Vec<(u64, u64, CauseKind)> = x
            .segments
            .iter()
            .map(|s| (s.start_ns, s.end_ns, s.cause.kind()))
            .collect();
        assert_eq!(
            pieces,
            vec![
                (100, 150, CauseKind::OwnWork),
                (150, 180, CauseKind::Blocked),
                (180, 200, CauseKind::Unexplained)
            ]
        );
        assert_eq!(x.by_kind().iter().sum::<u64>(), x.lateness_ns());
    }

    /// Interrupts as reports name them: x86's system vectors by name.
    #[test]
    fn interrupts_are_named_as_a_person_reads_them() {
        assert_eq!(Irq::Hard(24).label(), "irq 24");
        assert_eq!(Irq::Vector(0xec).label(), "local timer");
        assert_eq!(Irq::Vector(0xfd).label(), "reschedule IPI");
        assert_eq!(Irq::Vector(240).label(), "vector 240");
        assert_eq!(Irq::Soft(3).label(), "softirq NET_RX");
    }
}
