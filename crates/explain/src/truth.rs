//! Ground truth: causes injected at known times (a lab scenario's
//! `[[inject]]`), and how the attribution of the late events that overlap
//! them scores against them, as a confusion matrix (docs/explain.md,
//! "Ground truth").
//!
//! A cell is attributed nanoseconds inside the injection windows over the
//! lateness inside them, summed over the late events whose [planned,
//! actual) overlaps a window, so each row adds up to the lateness it
//! covers: right cause with the right culprit, right cause with another
//! culprit, each other cause, unexplained.

use std::collections::{BTreeMap, HashMap, HashSet};

use ontime_core::late::ProbeEvent;
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

use crate::cause::{BlockedOn, Cause, CauseKind, Explanation, Irq, Side, Who};
use crate::timeline::Timeline;
use ontime_core::late::PathNominal;

/// What was injected: each class has the cause the attribution should
/// find (docs/explain.md's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InjectedClass {
    /// A SCHED_FIFO busy loop on the probe's CPU: the probe waits behind it.
    CpuBurst,
    /// The same loop inside a QEMU tenant's guest, on the probe's guest
    /// CPU: the probe waits behind it in the guest.
    CpuBurstInGuest,
    /// A real-time probe's class throttled on its CPU (a lower real-time
    /// loop used its budget): the probe waits behind the ordinary thread
    /// the injector keeps busy there.
    RtThrottle,
    /// The probe's own work at known times: the events after it are late
    /// by work of its own.
    OwnWork,
    /// A UDP flood received on the probe's CPU: the NET_RX softirq ran
    /// there (in interrupt context, or in ksoftirqd when the kernel handed
    /// it to its thread). The injector's process is not the culprit; the
    /// softirq on the injection's CPU is.
    SoftirqFlood,
    /// The host relay's threads stopped (they hold every frame until the
    /// window ends): requests arrive late at the gateway, and the relay
    /// thread that held them is the culprit.
    RelayStall,
    /// The gateway held every answer due (its own fault injection): the
    /// answers come back late, and the gateway is the culprit.
    GatewayStall,
}

impl InjectedClass {
    /// The cause the attribution should give the injected time.
    pub fn expected(self) -> CauseKind {
        match self {
            InjectedClass::CpuBurst | InjectedClass::CpuBurstInGuest => CauseKind::WaitedForCpu,
            InjectedClass::RtThrottle => CauseKind::Throttled,
            InjectedClass::OwnWork => CauseKind::OwnWork,
            InjectedClass::SoftirqFlood => CauseKind::Interrupts,
            InjectedClass::RelayStall | InjectedClass::GatewayStall => CauseKind::Blocked,
        }
    }

    /// Which of a probe's late events it delays, and so is scored on.
    pub fn scored_on(self) -> ScoredOn {
        match self {
            InjectedClass::RelayStall => ScoredOn::Arrivals,
            InjectedClass::GatewayStall => ScoredOn::Answers,
            _ => ScoredOn::ProbeEvents,
        }
    }

    /// As a scenario names it.
    pub fn label(self) -> String {
        crate::cause::serde_name(&self)
    }
}

/// The late events an injected class is scored on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoredOn {
    /// The probe's own (wake-ups, sends).
    ProbeEvents,
    /// A crawl's requests late at the gateway.
    Arrivals,
    /// A crawl's answers late back.
    Answers,
}

/// One injection as the injector carried it out: the window is when it
/// actually held the cause (CLOCK_MONOTONIC), not when it was planned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injection {
    pub class: InjectedClass,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The process that is the culprit (the injector's); any of its
    /// threads counts as the right culprit.
    pub pid: u32,
    /// The CPU it held, where it held one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u16>,
    /// Held inside this tenant's guest: the window on the guest's clock,
    /// the pid and CPU the guest's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<String>,
}

/// An injector's result file (`inject-N.json` in a lab run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Injections {
    pub injections: Vec<Injection>,
}

impl Injections {
    /// Writes them whole (`inject-N.json`), as an injector does when it
    /// stops.
    pub fn write(&self, path: &std::path::Path) -> anyhow::Result<()> {
        ontime_core::fsio::write_atomic(path, &serde_json::to_vec_pretty(self)?)
    }

    /// The windows [start, end) one injector held `class` in, on `cpu`,
    /// its process `pid` the culprit.
    pub fn of_windows(class: InjectedClass, windows: &[(u64, u64)], pid: u32, cpu: Option<u16>) -> Injections {
        Injections {
            injections: windows
                .iter()
                .map(|&(start_ns, end_ns)| Injection {
                    class,
                    start_ns,
                    end_ns,
                    pid,
                    cpu,
                    guest: None,
                })
                .collect(),
        }
    }

    /// Joins threads of this process that held `class` (stopped first)
    /// and writes the windows each held to its file, this process the
    /// culprit.
    pub fn write_held(class: InjectedClass, holders: Vec<Holder>) -> anyhow::Result<()> {
        for (t, file) in holders {
            let windows = t
                .join()
                .map_err(|_| anyhow::anyhow!("the thread holding a {} panicked", class.label()))?;
            Injections::of_windows(class, &windows, std::process::id(), None).write(&file)?;
        }
        Ok(())
    }

    /// These, held inside tenant `name`'s guest.
    pub fn in_guest(mut self, name: Option<String>) -> Injections {
        for i in &mut self.injections {
            i.guest = name.clone();
        }
        self
    }
}

/// A thread that holds a cause (it returns the windows [start, end) it
/// held when joined) and the file those windows go to.
pub type Holder = (std::thread::JoinHandle<Vec<(u64, u64)>>, std::path::PathBuf);

/// One row of the matrix: an injected class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfusionRow {
    /// Injections of this class.
    pub injected: u64,
    /// Late events overlapping one of them.
    pub events: u64,
    /// The late events' lateness inside the windows: the row's 100 %.
    pub lateness_ns: u64,
    /// The expected cause, naming the injector.
    pub right_ns: u64,
    /// The expected cause, naming someone else.
    pub right_cause_other_culprit_ns: u64,
    /// Every other cause but unexplained, by cause.
    pub other_ns: BTreeMap<CauseKind, u64>,
    pub unexplained_ns: u64,
}

impl ConfusionRow {
    fn share(&self, ns: u64) -> Option<f64> {
        (self.lateness_ns > 0).then(|| ns as f64 / self.lateness_ns as f64)
    }

    /// The diagonal: right cause and right culprit, of the lateness.
    pub fn right_share(&self) -> Option<f64> {
        self.share(self.right_ns)
    }

    pub fn unexplained_share(&self) -> Option<f64> {
        self.share(self.unexplained_ns)
    }

    /// The diagonal of the lateness left when the time the hypervisor
    /// beneath the recording machine took its CPU (steal) is set aside: no
    /// injection on that machine can cause steal, nor can anything inside
    /// it prevent it. Shown beside the target's own basis, never for it.
    pub fn right_share_without_steal(&self) -> Option<f64> {
        let steal = self.other_ns.get(&CauseKind::Steal).copied().unwrap_or(0);
        let rest = self.lateness_ns.saturating_sub(steal);
        (rest > 0).then(|| self.right_ns as f64 / rest as f64)
    }

    /// Adds another run's row (the matrix pooled over runs).
    pub fn add(&mut self, o: &ConfusionRow) {
        self.injected += o.injected;
        self.events += o.events;
        self.lateness_ns += o.lateness_ns;
        self.right_ns += o.right_ns;
        self.right_cause_other_culprit_ns += o.right_cause_other_culprit_ns;
        for (k, v) in &o.other_ns {
            *self.other_ns.entry(*k).or_default() += v;
        }
        self.unexplained_ns += o.unexplained_ns;
    }
}

/// The matrix: a row per injected class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confusion {
    pub rows: BTreeMap<InjectedClass, ConfusionRow>,
}

impl Confusion {
    pub fn add(&mut self, o: &Confusion) {
        for (c, r) in &o.rows {
            self.rows.entry(*c).or_default().add(r);
        }
    }
}

/// The matrix's columns, as a report prints them.
pub const COLUMNS: [&str; 10] = [
    "injected",
    "injections",
    "late events",
    "lateness",
    "right cause, right culprit",
    "right cause, other culprit",
    "other causes",
    "unexplained",
    "target",
    "right, steal set aside",
];

/// The target on every row: this share of the lateness inside the
/// injections on the right cause and culprit, at most `UNEXPLAINED_AT_MOST`
/// unexplained.
pub const RIGHT_AT_LEAST: f64 = 0.95;
pub const UNEXPLAINED_AT_MOST: f64 = 0.05;

impl Confusion {
    /// The runs' matrices added up, and how many runs had one.
    pub fn pooled<'a>(runs: impl Iterator<Item = &'a RunTruth>) -> (usize, Confusion) {
        let mut out = Confusion::default();
        let mut n = 0;
        for t in runs {
            out.add(&t.confusion);
            n += 1;
        }
        (n, out)
    }

    /// What a table of `runs` runs' matrix says.
    pub fn caption(runs: usize) -> String {
        format!(
            "Ground truth, {runs} runs: of the late events' lateness inside the injections, what the attribution \
             gave it (target: right cause and culprit >= {:.0} %, unexplained <= {:.0} %). The last column \
             sets aside the time the hypervisor beneath the recording machine took its CPUs (steal), which no \
             injection causes; the target is judged on all of the lateness.",
            RIGHT_AT_LEAST * 100.0,
            UNEXPLAINED_AT_MOST * 100.0
        )
    }

    /// A row of [`COLUMNS`] per injected class.
    pub fn cells(&self) -> Vec<[String; 10]> {
        let pct = |ns: u64, of: u64| {
            if of == 0 {
                "-".to_string()
            } else {
                format!("{:.1} %", ns as f64 * 100.0 / of as f64)
            }
        };
        self.rows
            .iter()
            .map(|(class, r)| {
                let others: Vec<String> = r
                    .other_ns
                    .iter()
                    .filter(|(_, ns)| **ns > 0)
                    .map(|(k, ns)| format!("{} {}", k.label(), pct(*ns, r.lateness_ns)))
                    .collect();
                let verdict = match (r.right_share(), r.unexplained_share()) {
                    (Some(right), Some(unexplained))
                        if right >= RIGHT_AT_LEAST && unexplained <= UNEXPLAINED_AT_MOST =>
                    {
                        "met"
                    }
                    (Some(_), Some(_)) => "not met",
                    _ => "no late event in an injection",
                };
                [
                    class.label(),
                    r.injected.to_string(),
                    r.events.to_string(),
                    ontime_core::duration::format_ns(r.lateness_ns),
                    pct(r.right_ns, r.lateness_ns),
                    pct(r.right_cause_other_culprit_ns, r.lateness_ns),
                    if others.is_empty() {
                        "-".to_string()
                    } else {
                        others.join(", ")
                    },
                    pct(r.unexplained_ns, r.lateness_ns),
                    verdict.to_string(),
                    r.right_share_without_steal()
                        .map_or("-".to_string(), |s| format!("{:.1} %", s * 100.0)),
                ]
            })
            .collect()
    }
}

/// What the score knows of a culprit thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its process.
    pub tgid: u32,
    /// It is the kernel's softirq thread (ksoftirqd/N).
    pub ksoftirqd: bool,
}

impl Owner {
    pub fn process(tgid: u32) -> Owner {
        Owner { tgid, ksoftirqd: false }
    }
}

/// The softirq vector of network receipt.
const NET_RX: u32 = 3;

/// A segment's cell in an injection's row.
enum Cell {
    Right,
    RightCauseOtherCulprit,
    Other(CauseKind),
    Unexplained,
}

fn cell(i: &Injection, cause: &Cause, probe: u32, owner: &impl Fn(u32) -> Option<Owner>) -> Cell {
    let kind = cause.kind();
    if kind == CauseKind::Unexplained {
        return Cell::Unexplained;
    }
    if i.class == InjectedClass::GatewayStall {
        // The gateway's part comes from its own stamps: no thread to name.
        return match *cause {
            Cause::Blocked {
                on: BlockedOn::Gateway, ..
            } => Cell::Right,
            Cause::Blocked { .. } => Cell::RightCauseOtherCulprit,
            _ => Cell::Other(kind),
        };
    }
    if i.class == InjectedClass::SoftirqFlood {
        return match *cause {
            Cause::Interrupts { cpu, irq } if irq == Irq::Soft(NET_RX) && Some(cpu) == i.cpu => Cell::Right,
            Cause::Interrupts { .. } => Cell::RightCauseOtherCulprit,
            // The same softirq, run by the kernel's thread for it.
            Cause::WaitedForCpu {
                cpu,
                behind: Who::Thread(t),
                ..
            } if Some(cpu) == i.cpu && owner(t).is_some_and(|o| o.ksoftirqd) => Cell::Right,
            _ => Cell::Other(kind),
        };
    }
    if kind != i.class.expected() {
        return Cell::Other(kind);
    }
    match cause.culprit(probe).0 {
        Some(Who::Thread(t)) if owner(t).map(|o| o.tgid) == Some(i.pid) => Cell::Right,
        _ => Cell::RightCauseOtherCulprit,
    }
}

/// Scores already explained events against the injections; `owner` says
/// whose a culprit thread is.
/// `owner(side, tid)`: whose a thread of that side's recording is.
pub fn score(
    explained: &[Explanation],
    injections: &[Injection],
    owner: impl Fn(Side, u32) -> Option<Owner>,
) -> Confusion {
    let mut out = Confusion::default();
    for i in injections {
        out.rows.entry(i.class).or_default().injected += 1;
    }
    for x in explained {
        let mut counted: HashSet<InjectedClass> = HashSet::new();
        for i in injections {
            let (a, b) = (x.planned_ns.max(i.start_ns), x.actual_ns.min(i.end_ns));
            if a >= b {
                continue;
            }
            let row = out.rows.entry(i.class).or_default();
            if counted.insert(i.class) {
                row.events += 1;
            }
            row.lateness_ns += b - a;
            for s in &x.segments {
                let (sa, sb) = (s.start_ns.max(a), s.end_ns.min(b));
                if sa >= sb {
                    continue;
                }
                let ns = sb - sa;
                // An injector on the host is never a guest's thread, nor
                // one inside a guest the host's, whatever their ids.
                let same_side = (s.side == Side::Guest) == i.guest.is_some();
                let own = |t: u32| if same_side { owner(s.side, t) } else { None };
                let cell = cell(i, &s.cause, x.tid, &own);
                match cell {
                    Cell::Right => row.right_ns += ns,
                    Cell::RightCauseOtherCulprit => row.right_cause_other_culprit_ns += ns,
                    Cell::Other(kind) => *row.other_ns.entry(kind).or_default() += ns,
                    Cell::Unexplained => row.unexplained_ns += ns,
                }
            }
        }
    }
    out
}

/// Explains the late events of `events` that overlap an injection, on
/// `rec`, and scores them.
pub fn check(rec: &Recording, events: &[ProbeEvent], injections: &[Injection]) -> Confusion {
    let tl = Timeline::from_recording(rec, &crate::summary::probe_tids(events));
    check_on(&tl, rec, events, &OnPath::default(), injections)
}

/// A crawl's kept events on the path: the requests late at the gateway,
/// the answers late back, and the path as set up.
#[derive(Clone, Debug, Default)]
pub struct OnPath {
    pub arrivals: Vec<ProbeEvent>,
    pub answers: Vec<ProbeEvent>,
    pub path: PathNominal,
}

/// As [`check`], on a time line already built from `rec` that watches the
/// events' threads (and the relay's): the probes' own late events against
/// the injections that act on the probes, the arrivals at the gateway and
/// the answers against those that act on the path.
///
/// An event on the path is explained on an axis shifted from the clock (a
/// leg's excess is placed the nominal time of the legs before it earlier,
/// [`crate::attribute::explain_answer`]); an injection acting on a leg is
/// scored with its window shifted alike: a gateway stall by the one way
/// out and the controller's delay.
pub fn check_on(
    tl: &Timeline,
    rec: &Recording,
    events: &[ProbeEvent],
    on_path: &OnPath,
    injections: &[Injection],
) -> Confusion {
    let placed: Vec<Injection> = injections
        .iter()
        .map(|i| {
            let shift = match i.class.scored_on() {
                ScoredOn::Answers => on_path.path.one_way_ns + on_path.path.gateway_ns,
                _ => 0,
            };
            Injection {
                start_ns: i.start_ns.saturating_sub(shift),
                end_ns: i.end_ns.saturating_sub(shift),
                ..i.clone()
            }
        })
        .collect();
    let relay = crate::summary::relay_tid(rec).and_then(|t| tl.probe(t).ok());
    let owners: HashMap<u32, Owner> = rec
        .threads
        .values()
        .map(|t| {
            (
                t.tid,
                Owner {
                    tgid: t.tgid,
                    ksoftirqd: t.comm.starts_with("ksoftirqd/"),
                },
            )
        })
        .collect();
    let owner = |side: Side, tid: u32| (side == Side::Host).then(|| owners.get(&tid).copied()).flatten();
    let mut out = Confusion::default();
    for (on, events) in [
        (ScoredOn::ProbeEvents, events),
        (ScoredOn::Arrivals, &on_path.arrivals[..]),
        (ScoredOn::Answers, &on_path.answers[..]),
    ] {
        let mine: Vec<Injection> = placed.iter().filter(|i| i.class.scored_on() == on).cloned().collect();
        let mut explained = Vec::new();
        for e in events
            .iter()
            .filter(|e| mine.iter().any(|i| e.planned_ns < i.end_ns && e.actual_ns > i.start_ns))
        {
            let Ok(probe) = tl.probe(e.tid) else { continue };
            let x = match on {
                ScoredOn::ProbeEvents => Some(crate::attribute::explain(tl, &probe, e.planned_ns, e.actual_ns)),
                _ => crate::attribute::explain_on_path(tl, &probe, relay.as_ref(), e, on_path.path),
            };
            explained.extend(x);
        }
        out.add(&score(&explained, &mine, owner));
    }
    out
}

/// A lab run's ground truth (`truth.json`): its injections and how the
/// attribution of its tenants' late events scored against them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTruth {
    pub injections: Vec<Injection>,
    pub confusion: Confusion,
}

/// The injectors' results in a lab run's `dir` (`inject-N.json`) against
/// every tenant's kept late events (`tN.json`), on the run's recording;
/// None when nothing was injected.
pub fn check_run(rec: &Recording, dir: &std::path::Path, tenants: usize) -> anyhow::Result<Option<RunTruth>> {
    let late = crate::kept::read_tenants(dir, tenants)?;
    let tl = Timeline::from_recording(rec, &crate::kept::watched(rec, &late));
    check_run_on(&tl, rec, dir, &late)
}

/// A lab run's tenants explained (`explain.json`) and, where causes were
/// injected, scored against them (`truth.json`), on one time line of `rec`
/// watching every tenant's late threads.
pub fn explain_and_check(
    rec: &Recording,
    dir: &std::path::Path,
    tenants: usize,
) -> anyhow::Result<(Option<crate::kept::RunExplanations>, Option<RunTruth>)> {
    let sets = crate::kept::read_tenants(dir, tenants)?;
    let tl = Timeline::from_recording(rec, &crate::kept::watched(rec, &sets));
    let truth = check_run_on(&tl, rec, dir, &sets)?;
    Ok((crate::kept::explain_sets_on(&tl, rec, sets), truth))
}

/// As [`check_run`], on a time line already built from `rec` that watches
/// the threads of `events` (the tenants' kept late events).
pub fn check_run_on(
    tl: &Timeline,
    rec: &Recording,
    dir: &std::path::Path,
    tenants: &[crate::kept::TenantLate],
) -> anyhow::Result<Option<RunTruth>> {
    let mut injections = Vec::new();
    // Every injector's file, a missing one (an injector that could not
    // write) skipped rather than ending the list.
    let mut files: Vec<(usize, std::path::PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: usize = name.strip_prefix("inject-")?.strip_suffix(".json")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    for (_, file) in files {
        let text = ontime_core::fsio::read_text_capped(&file, "injector result", 64 << 20)?;
        let got: Injections = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not an injector's result: {e}", file.display()))?;
        injections.extend(got.injections);
    }
    if injections.is_empty() {
        return Ok(None);
    }
    // A guest's events are on its clock and its threads: not scored here.
    let events: Vec<ProbeEvent> = tenants
        .iter()
        .filter(|t| t.guest.is_none())
        .flat_map(|t| t.late.events.iter().copied())
        .collect();
    let on_path = OnPath {
        arrivals: tenants
            .iter()
            .flat_map(|t| t.arrivals.iter().flat_map(|a| a.set.events.iter().copied()))
            .collect(),
        answers: tenants
            .iter()
            .flat_map(|t| t.answers.iter().flat_map(|a| a.set.events.iter().copied()))
            .collect(),
        // One relay and gateway for the lab: every tenant's path is alike.
        path: tenants.iter().find_map(|t| t.path()).unwrap_or_default(),
    };
    // Injections inside a guest are on its clock: only its events see them.
    let on_host: Vec<Injection> = injections.iter().filter(|i| i.guest.is_none()).cloned().collect();
    let mut confusion = check_on(tl, rec, &events, &on_path, &on_host);
    confusion.add(&check_guests(tl, rec, tenants, &injections)?);
    Ok(Some(RunTruth { injections, confusion }))
}

/// The guests' probes' late events that overlap an injection acting on
/// probes, explained in the guest and split by the host
/// ([`crate::summary::GuestExplainer`]), scored against them: the host's
/// injections (counted by [`check_on`]) and those inside the tenant's own
/// guest, placed on the host's clock by its offset (counted here), each
/// culprit looked up in its side's recording.
fn check_guests(
    tl: &Timeline,
    rec: &Recording,
    tenants: &[crate::kept::TenantLate],
    injections: &[Injection],
) -> anyhow::Result<Confusion> {
    let mut out = Confusion::default();
    for t in tenants {
        let Some(g) = &t.guest else { continue };
        let place = |ns: u64| ns.saturating_add_signed(g.offset_ns);
        let mine: Vec<Injection> = injections
            .iter()
            .filter(|i| i.class.scored_on() == ScoredOn::ProbeEvents)
            .filter(|i| i.guest.is_none() || i.guest.as_deref() == Some(t.name.as_str()))
            .map(|i| match i.guest {
                Some(_) => Injection {
                    start_ns: place(i.start_ns),
                    end_ns: place(i.end_ns),
                    ..i.clone()
                },
                None => i.clone(),
            })
            .collect();
        if mine.is_empty() {
            continue;
        }
        // One guest's unreadable recording costs its score, not the run's.
        let guest = match Recording::read(&g.recording) {
            Ok(r) => r,
            Err(e) => {
                ontime_core::errln!("{}: not scored: its guest's recording: {e:#}", t.name);
                continue;
            }
        };
        let vcpus = crate::summary::vcpu_threads(rec, &t.name);
        let explainer = crate::summary::GuestExplainer::new(
            tl,
            &guest,
            g.offset_ns,
            &vcpus,
            &crate::summary::probe_tids(&t.late.events),
        );
        let explained: Vec<Explanation> = t
            .late
            .events
            .iter()
            .filter(|e| {
                mine.iter()
                    .any(|i| place(e.planned_ns) < i.end_ns && place(e.actual_ns) > i.start_ns)
            })
            .filter_map(|e| explainer.explain(e).ok())
            .collect();
        let owner = |side: Side, tid: u32| {
            let threads = match side {
                Side::Host => &rec.threads,
                Side::Guest => &guest.threads,
            };
            threads.get(&tid).map(|t| Owner {
                tgid: t.tgid,
                ksoftirqd: t.comm.starts_with("ksoftirqd/"),
            })
        };
        let mut scored = score(&explained, &mine, owner);
        // The host's injections were counted with the host's events.
        for (class, row) in scored.rows.iter_mut() {
            row.injected = mine.iter().filter(|i| i.class == *class && i.guest.is_some()).count() as u64;
        }
        out.add(&scored);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cause::{Cause, Gap, Segment, Side};

    fn seg(start_ns: u64, end_ns: u64, cause: Cause) -> Segment {
        Segment {
            start_ns,
            end_ns,
            side: Side::Host,
            cause,
        }
    }

    fn behind(tid: u32) -> Cause {
        Cause::WaitedForCpu {
            cpu: 1,
            behind: Who::Thread(tid),
            idle_elsewhere_ns: 0,
        }
    }

    /// pid 500 held CPU 1 from 5 to 95.
    fn burst_5_to_95() -> Injection {
        Injection {
            class: InjectedClass::CpuBurst,
            start_ns: 5,
            end_ns: 95,
            pid: 500,
            cpu: Some(1),
            guest: None,
        }
    }

    #[test]
    fn a_burst_scores_its_window_only_by_cause_and_culprit() {
        // Planned at 0, done at 100: 10 ms own work, 60 behind the
        // injector (tid 501 of pid 500), 20 behind another thread, 10
        // unexplained; the burst held the CPU from 5 to 95.
        let x = Explanation {
            tid: 7,
            planned_ns: 0,
            actual_ns: 100,
            segments: vec![
                seg(0, 10, Cause::OwnWork { cpu: 1 }),
                seg(10, 70, behind(501)),
                seg(70, 90, behind(900)),
                seg(90, 100, Cause::Unexplained { why: Gap::NotRecorded }),
            ],
        };
        let inj = burst_5_to_95();
        let m = score(&[x], &[inj], |_, t| {
            Some(Owner::process(if t == 501 { 500 } else { t }))
        });
        let r = &m.rows[&InjectedClass::CpuBurst];
        assert_eq!((r.injected, r.events, r.lateness_ns), (1, 1, 90));
        assert_eq!(r.right_ns, 60);
        assert_eq!(r.right_cause_other_culprit_ns, 20);
        assert_eq!(r.other_ns[&CauseKind::OwnWork], 5);
        assert_eq!(r.unexplained_ns, 5);
        let sum = r.right_ns + r.right_cause_other_culprit_ns + r.other_ns.values().sum::<u64>() + r.unexplained_ns;
        assert_eq!(sum, r.lateness_ns, "a row adds up to its lateness");
    }

    #[test]
    fn an_event_outside_every_window_scores_nothing() {
        let x = Explanation {
            tid: 7,
            planned_ns: 200,
            actual_ns: 300,
            segments: vec![seg(200, 300, behind(501))],
        };
        let inj = burst_5_to_95();
        let m = score(&[x], &[inj], |_, _| Some(Owner::process(500)));
        let r = &m.rows[&InjectedClass::CpuBurst];
        assert_eq!((r.injected, r.events, r.lateness_ns), (1, 0, 0));
        assert_eq!(r.right_share(), None);
    }

    /// A flood is right as NET_RX softirq time on the injection's CPU, or
    /// as waiting behind that CPU's ksoftirqd; other interrupts are the
    /// right cause with another culprit; the flooder itself is not it.
    /// A gateway stall's right cell is the gateway's part (no thread to
    /// name); the relay's part of the same answer is the right cause with
    /// another culprit.
    #[test]
    fn a_gateway_stall_is_charged_to_the_gateway() {
        let stall = Injection {
            class: InjectedClass::GatewayStall,
            cpu: None,
            ..burst_5_to_95()
        };
        let blocked = |on| Cause::Blocked {
            on,
            by: Who::Unknown,
            cpu: None,
            irq: None,
        };
        let x = Explanation {
            tid: 7,
            planned_ns: 0,
            actual_ns: 100,
            segments: vec![
                seg(0, 10, Cause::OwnWork { cpu: 1 }),
                seg(10, 80, blocked(BlockedOn::Gateway)),
                seg(80, 90, blocked(BlockedOn::RelayQueue)),
                seg(90, 100, behind(501)),
            ],
        };
        let m = score(&[x], &[stall], |_, _| None);
        let r = &m.rows[&InjectedClass::GatewayStall];
        assert_eq!(r.lateness_ns, 90);
        assert_eq!(r.right_ns, 70);
        assert_eq!(r.right_cause_other_culprit_ns, 10);
        assert_eq!(r.other_ns[&CauseKind::OwnWork], 5);
        assert_eq!(r.other_ns[&CauseKind::WaitedForCpu], 5);
        assert_eq!(InjectedClass::GatewayStall.scored_on(), ScoredOn::Answers);
    }

    #[test]
    fn a_flood_is_charged_to_net_rx_on_its_cpu_or_to_ksoftirqd() {
        let flood = Injection {
            class: InjectedClass::SoftirqFlood,
            ..burst_5_to_95()
        };
        let irq = |cpu, v| Cause::Interrupts { cpu, irq: Irq::Soft(v) };
        let x = Explanation {
            tid: 7,
            planned_ns: 0,
            actual_ns: 100,
            segments: vec![
                seg(0, 30, irq(1, NET_RX)),
                seg(30, 50, behind(33)),
                seg(50, 60, irq(1, 1)),
                seg(60, 70, irq(0, NET_RX)),
                seg(70, 90, behind(501)),
                seg(90, 100, Cause::OwnWork { cpu: 1 }),
            ],
        };
        // 33 is ksoftirqd/1; 501 the flooder (pid 500).
        let m = score(&[x], &[flood], |_, t| {
            Some(Owner {
                tgid: if t == 501 { 500 } else { t },
                ksoftirqd: t == 33,
            })
        });
        let r = &m.rows[&InjectedClass::SoftirqFlood];
        assert_eq!(r.lateness_ns, 90);
        assert_eq!(r.right_ns, 25 + 20, "NET_RX on CPU 1 and ksoftirqd");
        assert_eq!(r.right_cause_other_culprit_ns, 10 + 10, "another softirq, another CPU");
        assert_eq!(
            r.other_ns[&CauseKind::WaitedForCpu],
            20,
            "the flooder is not the culprit"
        );
        assert_eq!(r.other_ns[&CauseKind::OwnWork], 5);
    }

    /// Own work is right when the probe's own process injected it;
    /// throttling when the injector used the class's budget, whoever ran
    /// meanwhile.
    #[test]
    fn own_work_and_throttling_score_their_own_culprits() {
        let own = Injection {
            class: InjectedClass::OwnWork,
            pid: 70,
            ..burst_5_to_95()
        };
        let throttle = Injection {
            class: InjectedClass::RtThrottle,
            start_ns: 200,
            end_ns: 300,
            ..burst_5_to_95()
        };
        let x = Explanation {
            tid: 7,
            planned_ns: 0,
            actual_ns: 100,
            segments: vec![seg(0, 100, Cause::OwnWork { cpu: 1 })],
        };
        let y = Explanation {
            tid: 7,
            planned_ns: 200,
            actual_ns: 300,
            segments: vec![
                seg(
                    200,
                    260,
                    Cause::Throttled {
                        cpu: 1,
                        behind: Who::Idle,
                        budget: Who::Thread(501),
                    },
                ),
                seg(
                    260,
                    300,
                    Cause::Throttled {
                        cpu: 1,
                        behind: Who::Thread(501),
                        budget: Who::Thread(900),
                    },
                ),
            ],
        };
        // The probe thread 7 is of pid 70; 501 of the injector, 500.
        let m = score(&[x, y], &[own, throttle], |_, t| {
            Some(Owner::process(match t {
                7 => 70,
                501 => 500,
                other => other,
            }))
        });
        let r = &m.rows[&InjectedClass::OwnWork];
        assert_eq!((r.lateness_ns, r.right_ns), (90, 90));
        let r = &m.rows[&InjectedClass::RtThrottle];
        assert_eq!(
            (r.lateness_ns, r.right_ns, r.right_cause_other_culprit_ns),
            (100, 60, 40)
        );
    }
}
