//! Wake-ups in detail, by who woke whom onto whom, and where the tracked
//! threads' run-queue waits come from: what `ontime observe report
//! --wakeups` prints. [`crate::wakeups`] counts the totals the simulator
//! is calibrated against; this breaks them down, one streaming pass of
//! its own over the same events ([`WakeDetailCounter`]), holding state per
//! thread and counts per key, never the events:
//!
//! - **placement** by situation: each wake-up of a tracked thread by who
//!   woke it, whether the wake-up came from the CPU it last ran on, what
//!   that CPU and the other CPUs ran, and whether the kernel queued it on
//!   that CPU or on another;
//! - **preemption** pairs: the wake-ups queued behind a busy CPU while
//!   another idled, per (woken, occupant), and how the woken thread got
//!   the CPU (preempting the occupant, the occupant going to sleep, at once
//!   or late, by moving);
//! - **preempted waits**: tracked threads switched out still runnable,
//!   how long until they ran again, per (preempted, preemptor, where);
//! - **queue waits**: the tracked threads' run-queue wait by how it began,
//!   who held the CPU, whether another CPU idled and where it ran next.
//!
//! Threads are named from the recording's thread table: the host I/O
//! path's threads by their group's name, a tenant's by their name (the
//! same vCPU thread of several tenants shares a row), others by their name
//! as well ("other" when the recording has none). The recording holds no
//! scheduling policies, so a CPU is said to run a tenant's thread, the host
//! I/O path's or an untracked one, not a fair or a real-time one; where
//! the run made the host I/O path real-time, "host I/O" is real-time.
//!
//! A CPU not yet seen to switch counts as idle, as one that never switches
//! in the recording is.
use std::collections::HashMap;
use std::hash::Hash;

use ontime_core::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};

use ontime_recording::event::{kind, Event, F_PREV_RUNNABLE};
use ontime_recording::recording::{Group, GroupKind, Recording, ThreadInfo};

use crate::report::share_pct;
use crate::wakeups::WAKE_AT_ONCE_NS;

/// The wake-up tables of one recording (JSON `wake_detail`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WakeDetail {
    /// Wake-ups of tracked threads by situation, most frequent first.
    pub placement: Vec<PlacementRow>,
    /// Wake-ups queued behind a busy CPU while another idled, per pair,
    /// most frequent first.
    pub preemption: Vec<PreemptionPair>,
    /// Tracked threads preempted (switched out still runnable): how long
    /// until they ran again, most frequent first.
    pub preempted_waits: Vec<PreemptedWait>,
    /// Where the tracked threads' run-queue wait came from, most time
    /// first.
    pub queue_waits: Vec<QueueWait>,
    /// From the first event to the last, ns.
    pub span_ns: u64,
    /// The recording names the thread current at each wake-up (older ones
    /// do not: their placement rows say "unknown" for who woke it).
    pub wakers_recorded: bool,
}

/// Wake-ups of tracked threads in one situation, and where the kernel
/// queued them: on the CPU the thread last ran on, or on another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlacementRow {
    /// "tenant" or "host I/O".
    pub woken: String,
    /// The thread current as it was woken: "own tenant", "another tenant",
    /// "host I/O", "none" (an interrupt on an idle CPU), an untracked
    /// thread's name, "other" (one the recording does not name) or
    /// "unknown" (the recording does not say).
    pub by: String,
    /// The wake-up was recorded on the CPU the thread last ran on (else on
    /// another: a waker keeps its CPU while it wakes a thread).
    pub from_last_cpu: bool,
    /// What the CPU it last ran on was running: "idle", "tenant",
    /// "host I/O" or "untracked".
    pub last_cpu_runs: String,
    /// What the other CPUs were running: "idle" when any of them idled,
    /// else what all of them ran ("tenant", "host I/O", "untracked") or
    /// "mixed"; "none" on one CPU.
    pub other_cpus_run: String,
    /// Queued on the CPU it last ran on ...
    pub stayed: u64,
    /// ... or on another.
    pub moved: u64,
}

impl PlacementRow {
    pub fn wakeups(&self) -> u64 {
        self.stayed + self.moved
    }
    /// Share queued on another CPU than the last one, 0..100.
    pub fn moved_pct(&self) -> f64 {
        share_pct(self.moved, self.wakeups())
    }
}

/// Wake-ups of one thread name queued behind a CPU running another while
/// another CPU idled, and how the woken thread got the CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreemptionPair {
    pub woken: String,
    /// What ran on that CPU as it was queued there.
    pub occupant: String,
    /// Ran there within [`WAKE_AT_ONCE_NS`], the occupant switched out
    /// still runnable: it preempted the occupant ...
    pub preempted_at_once: u64,
    /// ... the same, later.
    pub preempted_late: u64,
    /// Ran there within [`WAKE_AT_ONCE_NS`] as the occupant went to sleep
    /// (mostly its waker, after a synchronous wake-up) ...
    pub occupant_slept_at_once: u64,
    /// ... the same, later.
    pub occupant_slept_late: u64,
    /// Ran on another CPU.
    pub moved: u64,
    /// Ran there after another thread than the occupant.
    pub other: u64,
    /// Its wait to run there (all but the moved ones), where the count
    /// supports the percentile.
    pub wait_p50_ns: Option<u64>,
    pub wait_p99_ns: Option<u64>,
}

impl PreemptionPair {
    pub fn wakeups(&self) -> u64 {
        self.preempted_at_once
            + self.preempted_late
            + self.occupant_slept_at_once
            + self.occupant_slept_late
            + self.moved
            + self.other
    }
}

/// Tracked threads of one name switched out still runnable by another
/// thread of one name, and how long until they ran again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PreemptedWait {
    pub preempted: String,
    /// The thread that took its CPU.
    pub by: String,
    /// It ran next on another CPU than the one it was preempted on.
    pub moved: bool,
    pub count: u64,
    /// Where the count supports the percentile.
    pub p50_ns: Option<u64>,
    pub p90_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: u64,
}

/// Run-queue wait of the tracked threads of one name, by how it began.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueWait {
    pub waiting: String,
    /// "woken" (onto a CPU running another thread) or "preempted".
    pub began: String,
    /// What ran on its CPU as the wait began.
    pub held_by: String,
    /// Another CPU idled as the wait began.
    pub idle_elsewhere: bool,
    /// It ran next on another CPU than the one it waited on.
    pub ran_elsewhere: bool,
    pub total_ns: u64,
    pub count: u64,
    /// `total_ns` per second of the recording per tracked thread of that
    /// name, ms/s.
    pub ms_per_s: f64,
}

impl QueueWait {
    pub fn mean_ns(&self) -> u64 {
        self.total_ns / self.count.max(1)
    }
}

/// The wake-up tables of a whole recording.
pub fn of_recording(rec: &Recording) -> WakeDetail {
    let mut c = WakeDetailCounter::new(rec.meta.cpus, &rec.meta.groups, rec.threads.values());
    for e in &rec.events {
        c.feed(e);
    }
    c.finish()
}

/// Keys a table with a histogram per key keeps apart (each histogram
/// holds some 270 KiB); past it, new keys are counted under "other".
const MAX_WAIT_KEYS: usize = 256;

/// Name ids every counter starts with.
const IDLE_NAME: u32 = 0;
const OTHER_NAME: u32 = 1;

/// What a thread is, for the placement table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Role {
    Idle,
    Tenant,
    HostIo,
    Untracked,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Idle => "idle",
            Role::Tenant => "tenant",
            Role::HostIo => "host I/O",
            Role::Untracked => "untracked",
        }
    }
}

/// What the CPUs other than the last one ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Others {
    /// Idle when any of them idled, else what all of them ran.
    All(Role),
    Mixed,
    /// One CPU only.
    NoCpu,
}

impl Others {
    fn label(self) -> &'static str {
        match self {
            Others::All(r) => r.label(),
            Others::Mixed => "mixed",
            Others::NoCpu => "none",
        }
    }
}

/// Who was current as a tracked thread was woken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum By {
    /// No thread: an interrupt on an idle CPU (or, in a recording that
    /// names no wakers, not known).
    Nobody,
    OwnTenant,
    AnotherTenant,
    HostIo,
    /// An untracked thread, by name id.
    Thread(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PlacementKey {
    woken: Role,
    by: By,
    from_last: bool,
    last_runs: Role,
    others: Others,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Began {
    Woken,
    Preempted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct QueueKey {
    waiting: u32,
    began: Began,
    held_by: u32,
    idle_elsewhere: bool,
    ran_elsewhere: bool,
}

/// Where a tracked thread is, as far as this pass needs to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Not seen yet.
    Unknown,
    Running,
    /// Runnable, not running.
    Queued,
    /// Off the CPU and not runnable (asleep, blocked, dead).
    Asleep,
}

#[derive(Clone, Copy, Debug)]
struct Tracked {
    st: St,
    /// The CPU it last ran on.
    last: Option<u16>,
}

/// A thread woken behind a busy CPU while another idled, not yet run.
#[derive(Clone, Copy, Debug)]
struct Pending {
    t: u64,
    cpu: u16,
    occupant: u32,
}

#[derive(Default)]
struct PairCounts {
    preempted_at_once: u64,
    preempted_late: u64,
    occupant_slept_at_once: u64,
    occupant_slept_late: u64,
    moved: u64,
    other: u64,
    waits: LatencyHistogram,
}

/// A tracked thread's run-queue wait, begun and not yet ended.
#[derive(Clone, Copy, Debug)]
struct QueueStart {
    t: u64,
    began: Began,
    cpu: u16,
    held_by: u32,
    idle_elsewhere: bool,
}

/// A preempted tracked thread, not yet run again: since when, by whom,
/// on which CPU.
#[derive(Clone, Copy, Debug)]
struct OutSince {
    t: u64,
    by: u32,
    cpu: u16,
}

/// Counts [`WakeDetail`] from events in time order (`feed`), then
/// [`finish`](WakeDetailCounter::finish). Memory grows with the threads
/// and the keys, not the events.
pub struct WakeDetailCounter {
    cpus: usize,
    kinds: Vec<GroupKind>,
    /// Name ids: `names[id]`.
    names: Vec<String>,
    ids: HashMap<String, u32>,
    /// Every thread the thread table names: its name id and group.
    known: HashMap<u32, (u32, Option<u32>)>,
    /// Tracked threads (those in a group) per name id.
    threads_named: HashMap<u32, u64>,
    tracked: HashMap<u32, Tracked>,
    /// Who is on each CPU (idle until its first switch).
    occupant: Vec<u32>,
    wakers_seen: bool,
    first_ts: Option<u64>,
    last_ts: u64,
    /// [stayed, moved] per situation.
    placement: HashMap<PlacementKey, [u64; 2]>,
    pending: HashMap<u32, Pending>,
    pairs: HashMap<(u32, u32), PairCounts>,
    out_since: HashMap<u32, OutSince>,
    preempted: HashMap<(u32, u32, bool), LatencyHistogram>,
    queued: HashMap<u32, QueueStart>,
    /// (total ns, count) per key.
    queue_waits: HashMap<QueueKey, (u64, u64)>,
}

/// A thread's name as the recording has it, unless it has none ("tid N"
/// is the recorder's stand-in).
fn usable(comm: &str) -> Option<&str> {
    (!comm.is_empty() && !comm.starts_with("tid ")).then_some(comm)
}

/// The entry of `key`, or of `fold` once the map holds [`MAX_WAIT_KEYS`].
fn capped<K: Eq + Hash, V: Default>(map: &mut HashMap<K, V>, key: K, fold: K) -> &mut V {
    let key = if map.len() >= MAX_WAIT_KEYS && !map.contains_key(&key) {
        fold
    } else {
        key
    };
    map.entry(key).or_default()
}

impl WakeDetailCounter {
    /// On `cpus` CPUs, with the recording's groups and thread table
    /// (threads in a group are tracked).
    pub fn new<'a>(
        cpus: usize,
        groups: &[Group],
        threads: impl IntoIterator<Item = &'a ThreadInfo>,
    ) -> WakeDetailCounter {
        let cpus = cpus.max(1);
        let mut c = WakeDetailCounter {
            cpus,
            kinds: groups.iter().map(|g| g.kind).collect(),
            names: Vec::new(),
            ids: HashMap::new(),
            known: HashMap::new(),
            threads_named: HashMap::new(),
            tracked: HashMap::new(),
            occupant: vec![0; cpus],
            wakers_seen: false,
            first_ts: None,
            last_ts: 0,
            placement: HashMap::new(),
            pending: HashMap::new(),
            pairs: HashMap::new(),
            out_since: HashMap::new(),
            preempted: HashMap::new(),
            queued: HashMap::new(),
            queue_waits: HashMap::new(),
        };
        let idle = c.intern("idle");
        let other = c.intern("other");
        debug_assert_eq!((idle, other), (IDLE_NAME, OTHER_NAME));
        for t in threads {
            if t.tid == 0 {
                continue;
            }
            let group = t.group.filter(|&g| (g as usize) < groups.len());
            let comm = usable(&t.comm);
            let name = match group.map(|g| &groups[g as usize]) {
                Some(g) if g.kind == GroupKind::HostIo => g.name.as_str(),
                Some(g) => comm.unwrap_or(g.name.as_str()),
                None => comm.unwrap_or("other"),
            };
            let name = c.intern(name);
            c.known.insert(t.tid, (name, group));
            if group.is_some() {
                *c.threads_named.entry(name).or_insert(0) += 1;
                c.tracked.insert(
                    t.tid,
                    Tracked {
                        st: St::Unknown,
                        last: None,
                    },
                );
            }
        }
        c
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn name(&self, tid: u32) -> u32 {
        if tid == 0 {
            IDLE_NAME
        } else {
            self.known.get(&tid).map_or(OTHER_NAME, |&(name, _)| name)
        }
    }

    fn group(&self, tid: u32) -> Option<u32> {
        self.known.get(&tid).and_then(|&(_, group)| group)
    }

    fn role(&self, tid: u32) -> Role {
        if tid == 0 {
            return Role::Idle;
        }
        match self.group(tid).map(|g| self.kinds[g as usize]) {
            Some(GroupKind::Tenant) => Role::Tenant,
            Some(GroupKind::HostIo) => Role::HostIo,
            None => Role::Untracked,
        }
    }

    fn idle_elsewhere(&self, cpu: usize) -> bool {
        self.occupant.iter().enumerate().any(|(c, &o)| c != cpu && o == 0)
    }

    fn others(&self, cpu: usize) -> Others {
        let mut all: Option<Role> = None;
        let mut mixed = false;
        for (c, &o) in self.occupant.iter().enumerate() {
            if c == cpu {
                continue;
            }
            let r = self.role(o);
            if r == Role::Idle {
                return Others::All(Role::Idle);
            }
            match all {
                None => all = Some(r),
                Some(a) if a != r => mixed = true,
                Some(_) => {}
            }
        }
        match all {
            None => Others::NoCpu,
            Some(_) if mixed => Others::Mixed,
            Some(r) => Others::All(r),
        }
    }

    fn by(&self, woken: u32, waker: u32) -> By {
        if waker == 0 {
            return By::Nobody;
        }
        match self.group(waker) {
            Some(g) => match self.kinds[g as usize] {
                GroupKind::HostIo => By::HostIo,
                GroupKind::Tenant if self.group(woken) == Some(g) => By::OwnTenant,
                GroupKind::Tenant => By::AnotherTenant,
            },
            None => By::Thread(self.name(waker)),
        }
    }

    pub fn feed(&mut self, e: &Event) {
        if self.first_ts.is_none() {
            self.first_ts = Some(e.ts);
        }
        self.last_ts = self.last_ts.max(e.ts);
        let cpu = (e.cpu as usize).min(self.cpus - 1);
        match e.kind {
            kind::SWITCH => self.on_switch(e.ts, cpu, e.a, e.b, e.flags & F_PREV_RUNNABLE != 0),
            kind::WAKEUP | kind::WAKEUP_NEW => {
                let target = (e.c as usize).min(self.cpus - 1);
                self.on_wakeup(e.ts, e.a, e.b, target, cpu);
            }
            _ => {}
        }
    }

    /// `tid` woken by `waker` (0: none) onto `target`, the wake-up recorded
    /// on `waker_cpu`.
    fn on_wakeup(&mut self, t: u64, tid: u32, waker: u32, target: usize, waker_cpu: usize) {
        self.wakers_seen |= waker != 0;
        let Some(&th) = self.tracked.get(&tid) else { return };
        // A thread running or queued already starts no new wait.
        if !matches!(th.st, St::Unknown | St::Asleep) {
            return;
        }
        if let Some(th) = self.tracked.get_mut(&tid) {
            th.st = St::Queued;
        }
        if let Some(last) = th.last.map(|c| (c as usize).min(self.cpus - 1)) {
            let key = PlacementKey {
                woken: self.role(tid),
                by: self.by(tid, waker),
                from_last: waker_cpu == last,
                last_runs: self.role(self.occupant[last]),
                others: self.others(last),
            };
            self.placement.entry(key).or_insert([0, 0])[usize::from(target != last)] += 1;
        }
        let occupant = self.occupant[target];
        let idle_elsewhere = self.idle_elsewhere(target);
        if occupant != 0 && idle_elsewhere {
            let p = Pending {
                t,
                cpu: target as u16,
                occupant,
            };
            self.pending.insert(tid, p);
        } else {
            self.pending.remove(&tid);
        }
        if occupant != 0 {
            let q = QueueStart {
                t,
                began: Began::Woken,
                cpu: target as u16,
                held_by: occupant,
                idle_elsewhere,
            };
            self.queued.insert(tid, q);
        } else {
            self.queued.remove(&tid);
        }
    }

    fn on_switch(&mut self, t: u64, cpu: usize, prev: u32, next: u32, prev_runnable: bool) {
        // The first run of a thread woken behind a busy CPU while another
        // idled: how it got the CPU.
        if let Some(w) = self.pending.remove(&next) {
            let wait = t.saturating_sub(w.t);
            let at_once = wait <= WAKE_AT_ONCE_NS;
            let key = (self.name(next), self.name(w.occupant));
            let p = capped(&mut self.pairs, key, (OTHER_NAME, OTHER_NAME));
            if w.cpu as usize != cpu {
                p.moved += 1;
            } else {
                if prev == w.occupant && prev_runnable {
                    if at_once {
                        p.preempted_at_once += 1;
                    } else {
                        p.preempted_late += 1;
                    }
                } else if prev == w.occupant {
                    if at_once {
                        p.occupant_slept_at_once += 1;
                    } else {
                        p.occupant_slept_late += 1;
                    }
                } else {
                    p.other += 1;
                }
                p.waits.record(wait);
            }
        }
        // A preempted thread runs again.
        if let Some(o) = self.out_since.remove(&next) {
            let moved = o.cpu as usize != cpu;
            let key = (self.name(next), self.name(o.by), moved);
            capped(&mut self.preempted, key, (OTHER_NAME, OTHER_NAME, moved)).record(t.saturating_sub(o.t));
        }
        // A run-queue wait ends.
        if let Some(q) = self.queued.remove(&next) {
            let key = QueueKey {
                waiting: self.name(next),
                began: q.began,
                held_by: self.name(q.held_by),
                idle_elsewhere: q.idle_elsewhere,
                ran_elsewhere: q.cpu as usize != cpu,
            };
            let v = self.queue_waits.entry(key).or_insert((0, 0));
            v.0 += t.saturating_sub(q.t);
            v.1 += 1;
        }
        if self.tracked.contains_key(&prev) {
            // It ran, so a wake-up still pending lost its switch-in.
            self.pending.remove(&prev);
            if prev_runnable {
                let idle_elsewhere = self.idle_elsewhere(cpu);
                let o = OutSince {
                    t,
                    by: next,
                    cpu: cpu as u16,
                };
                self.out_since.insert(prev, o);
                let q = QueueStart {
                    t,
                    began: Began::Preempted,
                    cpu: cpu as u16,
                    held_by: next,
                    idle_elsewhere,
                };
                self.queued.insert(prev, q);
            } else {
                self.out_since.remove(&prev);
                self.queued.remove(&prev);
            }
            if let Some(th) = self.tracked.get_mut(&prev) {
                th.st = if prev_runnable { St::Queued } else { St::Asleep };
            }
        }
        self.occupant[cpu] = next;
        if let Some(th) = self.tracked.get_mut(&next) {
            th.st = St::Running;
            th.last = Some(cpu as u16);
        }
    }

    /// From the first event fed to the last, ns.
    pub fn span_ns(&self) -> u64 {
        self.first_ts.map_or(0, |f| self.last_ts.saturating_sub(f))
    }

    /// The tables so far.
    pub fn finish(&self) -> WakeDetail {
        let name = |id: u32| self.names[id as usize].clone();
        let by = |b: By| match b {
            By::Nobody if !self.wakers_seen => "unknown".to_string(),
            By::Nobody => "none".to_string(),
            By::OwnTenant => "own tenant".to_string(),
            By::AnotherTenant => "another tenant".to_string(),
            By::HostIo => Role::HostIo.label().to_string(),
            By::Thread(id) => name(id),
        };
        let mut placement: Vec<PlacementRow> = self
            .placement
            .iter()
            .map(|(k, &[stayed, moved])| PlacementRow {
                woken: k.woken.label().to_string(),
                by: by(k.by),
                from_last_cpu: k.from_last,
                last_cpu_runs: k.last_runs.label().to_string(),
                other_cpus_run: k.others.label().to_string(),
                stayed,
                moved,
            })
            .collect();
        placement.sort_by(|a, b| {
            b.wakeups().cmp(&a.wakeups()).then_with(|| {
                (&a.woken, &a.by, a.from_last_cpu, &a.last_cpu_runs, &a.other_cpus_run).cmp(&(
                    &b.woken,
                    &b.by,
                    b.from_last_cpu,
                    &b.last_cpu_runs,
                    &b.other_cpus_run,
                ))
            })
        });
        let mut preemption: Vec<PreemptionPair> = self
            .pairs
            .iter()
            .map(|(&(woken, occupant), p)| PreemptionPair {
                woken: name(woken),
                occupant: name(occupant),
                preempted_at_once: p.preempted_at_once,
                preempted_late: p.preempted_late,
                occupant_slept_at_once: p.occupant_slept_at_once,
                occupant_slept_late: p.occupant_slept_late,
                moved: p.moved,
                other: p.other,
                wait_p50_ns: p.waits.percentile(50.0),
                wait_p99_ns: p.waits.percentile(99.0),
            })
            .collect();
        preemption.sort_by(|a, b| {
            b.wakeups()
                .cmp(&a.wakeups())
                .then_with(|| (&a.woken, &a.occupant).cmp(&(&b.woken, &b.occupant)))
        });
        let mut preempted_waits: Vec<PreemptedWait> = self
            .preempted
            .iter()
            .map(|(&(preempted, by, moved), h)| PreemptedWait {
                preempted: name(preempted),
                by: name(by),
                moved,
                count: h.len(),
                p50_ns: h.percentile(50.0),
                p90_ns: h.percentile(90.0),
                p99_ns: h.percentile(99.0),
                max_ns: h.max(),
            })
            .collect();
        preempted_waits.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| (&a.preempted, &a.by, a.moved).cmp(&(&b.preempted, &b.by, b.moved)))
        });
        let seconds = self.span_ns() as f64 / 1e9;
        let mut queue_waits: Vec<QueueWait> = self
            .queue_waits
            .iter()
            .map(|(k, &(total_ns, count))| {
                let threads = self.threads_named.get(&k.waiting).copied().unwrap_or(1).max(1);
                QueueWait {
                    waiting: name(k.waiting),
                    began: match k.began {
                        Began::Woken => "woken",
                        Began::Preempted => "preempted",
                    }
                    .to_string(),
                    held_by: name(k.held_by),
                    idle_elsewhere: k.idle_elsewhere,
                    ran_elsewhere: k.ran_elsewhere,
                    total_ns,
                    count,
                    ms_per_s: if seconds > 0.0 {
                        total_ns as f64 / 1e6 / (seconds * threads as f64)
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        queue_waits.sort_by(|a, b| {
            b.total_ns.cmp(&a.total_ns).then_with(|| {
                (&a.waiting, &a.began, &a.held_by, a.idle_elsewhere, a.ran_elsewhere).cmp(&(
                    &b.waiting,
                    &b.began,
                    &b.held_by,
                    b.idle_elsewhere,
                    b.ran_elsewhere,
                ))
            })
        });
        WakeDetail {
            placement,
            preemption,
            preempted_waits,
            queue_waits,
            span_ns: self.span_ns(),
            wakers_recorded: self.wakers_seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::tests::switch;

    /// Tenants "t" (10 and 11) and "u" (12, named as 10), the host I/O
    /// path (20, "relay"), and two untracked threads the recording names
    /// (30 "gw-worker", 31 "kworker"); 99 it does not name.
    fn counter(cpus: usize) -> WakeDetailCounter {
        let group = |name: &str, kind| Group {
            name: name.into(),
            kind,
            source: vec![],
            vcpu_names: false,
        };
        let groups = [
            group("t", GroupKind::Tenant),
            group("u", GroupKind::Tenant),
            group("host-io", GroupKind::HostIo),
        ];
        let thread = |tid: u32, comm: &str, group: Option<u32>| ThreadInfo {
            tid,
            tgid: tid,
            comm: comm.into(),
            group,
        };
        let threads = [
            thread(10, "crawl-vcpu0", Some(0)),
            thread(11, "crawl-vcpu1", Some(0)),
            thread(12, "crawl-vcpu0", Some(1)),
            thread(20, "relay", Some(2)),
            thread(30, "gw-worker", None),
            thread(31, "kworker", None),
        ];
        WakeDetailCounter::new(cpus, &groups, threads.iter())
    }

    /// `tid` woken by `waker` onto `target`, recorded on `cpu`.
    fn wake(ts: u64, tid: u32, waker: u32, target: u32, cpu: u16) -> Event {
        Event {
            ts,
            a: tid,
            b: waker,
            c: target,
            cpu,
            kind: kind::WAKEUP,
            flags: 0,
        }
    }

    fn feed(c: &mut WakeDetailCounter, events: &[Event]) {
        for e in events {
            c.feed(e);
        }
    }

    fn row<'a>(d: &'a WakeDetail, by: &str, from_last_cpu: bool, last: &str, others: &str) -> &'a PlacementRow {
        d.placement
            .iter()
            .find(|r| {
                r.by == by && r.from_last_cpu == from_last_cpu && r.last_cpu_runs == last && r.other_cpus_run == others
            })
            .unwrap_or_else(|| panic!("no row {by} {from_last_cpu} {last} {others}: {:?}", d.placement))
    }

    /// Each wake-up of a tracked thread that ran before is counted by who
    /// woke it, where from, what its last CPU and the other ran, and
    /// whether it stayed on its last CPU.
    #[test]
    fn placement_is_counted_by_situation() {
        let mut c = counter(2);
        feed(
            &mut c,
            &[
                // 10 runs on CPU 0 and sleeps; 30 takes CPU 0, CPU 1 idles.
                switch(0, 0, 0, 10, 0),
                switch(1_000_000, 0, 10, 30, 0),
                // 30 wakes it from CPU 0: queued on idle CPU 1 (moved).
                wake(2_000_000, 10, 30, 1, 0),
                switch(2_000_000, 1, 0, 10, 0),
                switch(3_000_000, 1, 10, 0, 0),
                // An interrupt on idle CPU 1 wakes it there (stayed).
                wake(4_000_000, 10, 0, 1, 1),
                switch(4_000_000, 1, 0, 10, 0),
                // It sleeps and the relay takes CPU 1; the relay wakes it
                // there, CPU 0 running 30 (stayed) ...
                switch(5_000_000, 1, 10, 20, 0),
                wake(6_000_000, 10, 20, 1, 1),
                // ... and a wake-up while queued starts nothing.
                wake(6_100_000, 10, 20, 1, 1),
                switch(6_500_000, 1, 20, 10, 0),
                // It sleeps, CPU 1 idles; 11 (its own tenant) wakes it
                // from CPU 0, where it was put (moved).
                switch(7_000_000, 1, 10, 0, 0),
                switch(7_000_000, 0, 30, 11, 0),
                wake(8_000_000, 10, 11, 0, 0),
                // 12, woken by a thread the recording does not name,
                // never ran: no last CPU, not counted.
                wake(9_000_000, 12, 99, 1, 0),
            ],
        );
        let d = c.finish();
        assert!(d.wakers_recorded);
        assert_eq!(d.placement.len(), 4, "{:?}", d.placement);
        let r = row(&d, "gw-worker", true, "untracked", "idle");
        assert_eq!((r.woken.as_str(), r.stayed, r.moved), ("tenant", 0, 1));
        let r = row(&d, "none", true, "idle", "untracked");
        assert_eq!((r.stayed, r.moved), (1, 0));
        let r = row(&d, "host I/O", true, "host I/O", "untracked");
        assert_eq!((r.stayed, r.moved), (1, 0));
        let r = row(&d, "own tenant", false, "idle", "tenant");
        assert_eq!((r.stayed, r.moved, r.moved_pct()), (0, 1, 100.0));
    }

    /// A recording that names no waker says so rather than "none".
    #[test]
    fn placement_without_wakers_says_unknown() {
        let mut c = counter(2);
        feed(
            &mut c,
            &[
                switch(0, 0, 0, 10, 0),
                switch(1_000_000, 0, 10, 0, 0),
                wake(2_000_000, 10, 0, 0, 0),
            ],
        );
        let d = c.finish();
        assert!(!d.wakers_recorded);
        let r = row(&d, "unknown", true, "idle", "idle");
        assert_eq!((r.stayed, r.moved), (1, 0));
    }

    /// Wake-ups behind a busy CPU while another idles, per pair: how the
    /// woken thread got the CPU, and its wait; one with no idle CPU is
    /// not counted.
    #[test]
    fn preemption_pairs_count_how_the_cpu_was_got() {
        let mut c = counter(2);
        feed(
            &mut c,
            &[
                // 30 runs on CPU 0, CPU 1 idles; 10 has run and sleeps.
                switch(0, 0, 0, 10, 0),
                switch(100_000, 0, 10, 30, 0),
                // Preempts 30 within 10 us.
                wake(1_000_000, 10, 0, 0, 0),
                switch(1_010_000, 0, 30, 10, F_PREV_RUNNABLE),
                switch(1_050_000, 0, 10, 30, 0),
                // Preempts 30 after 100 us.
                wake(2_000_000, 10, 0, 0, 0),
                switch(2_100_000, 0, 30, 10, F_PREV_RUNNABLE),
                switch(2_150_000, 0, 10, 30, 0),
                // 30 sleeps within 20 us.
                wake(3_000_000, 10, 30, 0, 0),
                switch(3_020_000, 0, 30, 10, 0),
                switch(3_050_000, 0, 10, 30, 0),
                // 30 sleeps after 500 us.
                wake(4_000_000, 10, 30, 0, 0),
                switch(4_500_000, 0, 30, 10, 0),
                switch(4_550_000, 0, 10, 30, 0),
                // Runs on CPU 1 instead.
                wake(5_000_000, 10, 0, 0, 0),
                switch(5_300_000, 1, 0, 10, 0),
                switch(5_350_000, 1, 10, 0, 0),
                // 31 runs between 30 and 10, 100 us after the wake-up.
                wake(6_000_000, 10, 0, 0, 0),
                switch(6_050_000, 0, 30, 31, F_PREV_RUNNABLE),
                switch(6_100_000, 0, 31, 10, F_PREV_RUNNABLE),
                switch(6_150_000, 0, 10, 30, 0),
                // CPU 1 busy: no CPU idles, not counted.
                switch(7_000_000, 1, 0, 99, 0),
                wake(7_100_000, 10, 0, 0, 0),
                switch(7_200_000, 0, 30, 10, F_PREV_RUNNABLE),
            ],
        );
        let d = c.finish();
        assert_eq!(d.preemption.len(), 1, "{:?}", d.preemption);
        let p = &d.preemption[0];
        assert_eq!((p.woken.as_str(), p.occupant.as_str()), ("crawl-vcpu0", "gw-worker"));
        assert_eq!(
            (
                p.preempted_at_once,
                p.preempted_late,
                p.occupant_slept_at_once,
                p.occupant_slept_late,
                p.moved,
                p.other
            ),
            (1, 1, 1, 1, 1, 1)
        );
        assert_eq!(p.wakeups(), 6);
        // Waits 10, 20, 100, 100 and 500 us (not the moved one's): the
        // median is 100 us; five waits do not support a p99.
        let p50 = p.wait_p50_ns.expect("five waits support a median");
        assert!(p50.abs_diff(100_000) < 1_000, "{p50}");
        assert_eq!(p.wait_p99_ns, None);
    }

    /// A tracked thread switched out still runnable: how long until it ran
    /// again, by who took its CPU and whether it ran next elsewhere; an
    /// untracked thread's preemption is not counted.
    #[test]
    fn preempted_waits_are_counted_by_preemptor_and_place() {
        let mut c = counter(2);
        feed(
            &mut c,
            &[
                switch(0, 0, 0, 10, 0),
                // The relay preempts it for 200 us, on the same CPU ...
                switch(1_000_000, 0, 10, 20, F_PREV_RUNNABLE),
                switch(1_200_000, 0, 20, 10, 0),
                // ... then for 300 us, and it runs next on CPU 1.
                switch(2_000_000, 0, 10, 20, F_PREV_RUNNABLE),
                switch(2_300_000, 1, 0, 10, 0),
                // 30 preempts it for 50 us; 30 leaves runnable itself.
                switch(3_000_000, 1, 10, 30, F_PREV_RUNNABLE),
                switch(3_050_000, 1, 30, 10, F_PREV_RUNNABLE),
            ],
        );
        let d = c.finish();
        let w: Vec<(&str, &str, bool, u64, u64)> = d
            .preempted_waits
            .iter()
            .map(|w| (w.preempted.as_str(), w.by.as_str(), w.moved, w.count, w.max_ns))
            .collect();
        assert_eq!(w.len(), 3, "{w:?}");
        for want in [
            ("crawl-vcpu0", "host-io", false, 1, 200_000),
            ("crawl-vcpu0", "host-io", true, 1, 300_000),
            ("crawl-vcpu0", "gw-worker", false, 1, 50_000),
        ] {
            assert!(w.contains(&want), "{want:?} in {w:?}");
        }
    }

    /// Run-queue waits by how they began, who held the CPU, whether
    /// another CPU idled and where the thread ran next, in ms per second
    /// per thread of the name (two threads are named crawl-vcpu0).
    #[test]
    fn queue_waits_are_counted_by_how_they_began() {
        let mut c = counter(2);
        feed(
            &mut c,
            &[
                switch(0, 0, 0, 30, 0),
                // 10, asleep, is woken onto CPU 0 (30) while CPU 1 idles:
                // waits 400 us there.
                wake(1_000_000, 10, 0, 0, 0),
                switch(1_400_000, 0, 30, 10, F_PREV_RUNNABLE),
                // The relay preempts it, CPU 1 idle: it waits 600 us and
                // runs on CPU 1.
                switch(2_000_000, 0, 10, 20, F_PREV_RUNNABLE),
                switch(2_600_000, 1, 0, 10, 0),
                // Woken onto idle CPU 1: no wait.
                switch(3_000_000, 1, 10, 0, 0),
                wake(4_000_000, 10, 0, 1, 1),
                switch(4_000_000, 1, 0, 10, 0),
                switch(10_000_000, 1, 10, 0, 0),
            ],
        );
        let d = c.finish();
        assert_eq!(d.span_ns, 10_000_000);
        let q: Vec<(&str, &str, &str, bool, bool, u64, u64)> = d
            .queue_waits
            .iter()
            .map(|q| {
                (
                    q.waiting.as_str(),
                    q.began.as_str(),
                    q.held_by.as_str(),
                    q.idle_elsewhere,
                    q.ran_elsewhere,
                    q.total_ns,
                    q.count,
                )
            })
            .collect();
        assert_eq!(
            q,
            vec![
                ("crawl-vcpu0", "preempted", "host-io", true, true, 600_000, 1),
                ("crawl-vcpu0", "woken", "gw-worker", true, false, 400_000, 1),
            ]
        );
        // 0.6 ms over 10 ms of two threads' time: 30 ms/s.
        assert!((d.queue_waits[0].ms_per_s - 30.0).abs() < 1e-9);
        assert!((d.queue_waits[1].ms_per_s - 20.0).abs() < 1e-9);
    }

    /// Analyses written before the tables read, and the tables round-trip.
    #[test]
    fn the_tables_read_back_and_default_when_absent() {
        let d: WakeDetail = serde_json::from_str("{}").expect("empty object reads");
        assert_eq!(d, WakeDetail::default());
        let mut c = counter(2);
        feed(
            &mut c,
            &[
                switch(0, 0, 0, 10, 0),
                switch(1_000_000, 0, 10, 30, 0),
                wake(2_000_000, 10, 30, 0, 1),
            ],
        );
        let d = c.finish();
        let back: WakeDetail = serde_json::from_str(&serde_json::to_string(&d).expect("serialises")).expect("reads");
        assert_eq!(back, d);
    }
}
