//! Many late events of one run explained together: which causes and
//! culprits account for how much of their summed lateness, the worst
//! events with their own breakdowns, and what the recording could not see.
//! This is what `--explain` prints and keeps in a probe's JSON result.

use std::collections::HashSet;

use ontime_core::late::{LateAnswers, LateArrivals, LateSet, PathNominal, ProbeEvent};
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

use crate::cause::{CauseKind, Detail, Side};
use crate::report::{Culprit, LateEvent};
use crate::timeline::Timeline;
use ontime_recording::recording::GroupKind;

/// The explanation of a run's late events (docs/explain.md, "The JSON of
/// a run's explanation").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunExplanation {
    /// Events later than this are late.
    pub threshold_ns: u64,
    /// How the threshold was chosen ("--explain-over", "p99.9 of the run").
    pub threshold_from: String,
    /// Late events in the run (over the threshold), as far as the probe
    /// kept count.
    pub late: u64,
    /// Of those, the ones explained (the worst, up to the probe's bound).
    pub explained: u64,
    /// Their lateness summed; the causes' `ns` add up to it.
    pub lateness_ns: u64,
    /// Summed over the explained events by cause, detail, side and
    /// culprit (threads of one process together), largest first.
    pub causes: Vec<CauseTotal>,
    /// The worst events, each with its own causes, worst first.
    pub worst: Vec<LateEvent>,
    /// Causes this recording could not see (no interrupt or real-time
    /// events): time they took shows as another cause.
    pub unseen: Vec<String>,
    /// Events that could not be explained and why (their probe thread had
    /// no event in the recording).
    pub notes: Vec<String>,
    /// The explained lateness over the run by cause: the events grouped by
    /// their planned time into at most [`TIME_BUCKETS`] equal stretches.
    #[serde(default)]
    pub over_time: Vec<TimeBucket>,
}

/// The explained events planned in [start_ns, start_ns + width): their
/// lateness summed by cause, in [`CauseKind::ALL`]'s order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeBucket {
    pub start_ns: u64,
    pub width_ns: u64,
    pub events: u64,
    #[serde(deserialize_with = "by_cause_then_or_now")]
    pub ns_by_cause: [u64; CauseKind::COUNT],
}

/// `ns_by_cause` as written now, or as written before [`CauseKind::Steal`]
/// was a cause (one fewer, no steal), so results made then still read.
fn by_cause_then_or_now<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u64; CauseKind::COUNT], D::Error> {
    let v: Vec<u64> = Deserialize::deserialize(d)?;
    let mut out = [0u64; CauseKind::COUNT];
    let steal = CauseKind::Steal as usize;
    match v.len() {
        CauseKind::COUNT => out.copy_from_slice(&v),
        n if n == CauseKind::COUNT - 1 => {
            out[..steal].copy_from_slice(&v[..steal]);
            out[steal + 1..].copy_from_slice(&v[steal..]);
        }
        n => {
            return Err(serde::de::Error::custom(format!(
                "ns_by_cause has {n} causes, where {} are known",
                CauseKind::COUNT
            )))
        }
    }
    Ok(out)
}

/// Stretches of [`RunExplanation::over_time`] at most.
pub const TIME_BUCKETS: u64 = 100;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CauseTotal {
    pub cause: CauseKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Detail>,
    pub side: Side,
    pub ns: u64,
    /// ns / the explained events' summed lateness.
    pub share: f64,
    /// Explained events this cause took part in.
    pub events: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprit: Option<Culprit>,
}

impl CauseTotal {
    /// This total is the one a piece of `cause` (`detail`, on `side`,
    /// naming `culprit`) adds to: what shares are summed by.
    fn sums(&self, cause: CauseKind, detail: Option<Detail>, side: Side, culprit: &Option<Culprit>) -> bool {
        self.cause == cause && self.detail == detail && self.side == side && &self.culprit == culprit
    }
}

/// The worst events a result lists one by one.
pub const WORST_LISTED: usize = 20;

/// The probe threads of `events`, each once, in order of first mention.
pub fn probe_tids(events: &[ProbeEvent]) -> Vec<u32> {
    let mut seen = HashSet::new();
    events.iter().map(|e| e.tid).filter(|t| seen.insert(*t)).collect()
}

/// The host relay's thread in `rec` (the lab's `ontime-relay0`, the first
/// when it has several: frames of one tenant go through one, not known
/// which); None when it is not recorded.
pub fn relay_tid(rec: &Recording) -> Option<u32> {
    rec.threads
        .values()
        .filter(|t| t.comm.starts_with("ontime-relay"))
        .map(|t| t.tid)
        .min()
}

/// The relay thread's part of real-time channels' deadline misses: each
/// stretch [from, to) a miss's overrun put on it (waiting to be read,
/// or to be handed over with the link free) explained as a late event of
/// the relay's thread on `rec`: queued behind whom, running (busy with
/// other frames: `own_work`), asleep past its timer. None when the
/// relay's thread is not in the recording.
pub fn explain_relay_stretches(rec: &Recording, stretches: &[(u64, u64)]) -> Option<RunExplanation> {
    let tid = relay_tid(rec)?;
    let mut events: Vec<ProbeEvent> = stretches
        .iter()
        .filter(|(a, e)| e > a)
        .map(|&(planned_ns, actual_ns)| ProbeEvent {
            tid,
            planned_ns,
            actual_ns,
            sent_ns: None,
            gateway: None,
            received_ns: None,
        })
        .collect();
    events.sort_by_key(|e| std::cmp::Reverse(e.actual_ns - e.planned_ns));
    let n = events.len() as u64;
    Some(explain_run(rec, &events, n, 0, "the relay's part of the worst misses"))
}

/// A crawl's requests late at the gateway, explained on a time line of
/// `rec` that watches their threads and the relay's.
pub fn explain_arrivals_on(tl: &Timeline, rec: &Recording, arrivals: &LateArrivals) -> RunExplanation {
    let set = &arrivals.set;
    let mut parts = Parts::default();
    let relay = relay_tid(rec).and_then(|t| tl.probe(t).ok());
    parts.explain_path_on(tl, rec, &set.events, relay.as_ref(), arrivals.path());
    parts.summarize(set.late, set.threshold_ns, &set.threshold_from)
}

/// A crawl's requests whose answers came back late, explained on a time
/// line of `rec` that watches their threads and the relay's.
pub fn explain_answers_on(tl: &Timeline, rec: &Recording, answers: &LateAnswers) -> RunExplanation {
    let set = &answers.set;
    let mut parts = Parts::default();
    let relay = relay_tid(rec).and_then(|t| tl.probe(t).ok());
    parts.explain_path_on(tl, rec, &set.events, relay.as_ref(), answers.path);
    parts.summarize(set.late, set.threshold_ns, &set.threshold_from)
}

/// The host threads of a recorded guest's vCPUs, by guest CPU: QEMU names
/// them `CPU n/KVM` or `CPU n/TCG`, in the guest's group (`group`, its
/// tenant's name).
pub fn vcpu_threads(rec: &Recording, group: &str) -> Vec<(u16, u32)> {
    let Some(g) = rec.meta.groups.iter().position(|g| g.name == group) else {
        return Vec::new();
    };
    vcpus_where(rec, |t| t.group == Some(g as u32))
}

/// The vCPU threads of QEMU process `pid` (its tgid), by guest CPU.
pub fn vcpu_threads_of_process(rec: &Recording, pid: u32) -> Vec<(u16, u32)> {
    vcpus_where(rec, |t| t.tgid == pid)
}

/// The processes in `rec` with vCPU threads (QEMU guests), lowest first.
pub fn vm_processes(rec: &Recording) -> Vec<u32> {
    let mut out: Vec<u32> = rec
        .threads
        .values()
        .filter(|t| vcpu_index(&t.comm).is_some() && t.tgid != 0 && t.tgid != u32::MAX)
        .map(|t| t.tgid)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Guest CPU n of a thread QEMU named `CPU n/KVM` or `CPU n/TCG`.
fn vcpu_index(comm: &str) -> Option<u16> {
    let (n, accel) = comm.strip_prefix("CPU ")?.split_once('/')?;
    matches!(accel, "KVM" | "TCG").then_some(())?;
    n.parse().ok()
}

fn vcpus_where(rec: &Recording, keep: impl Fn(&ontime_recording::recording::ThreadInfo) -> bool) -> Vec<(u16, u32)> {
    let mut out: Vec<(u16, u32)> = rec
        .threads
        .values()
        .filter(|t| keep(t))
        .filter_map(|t| Some((vcpu_index(&t.comm)?, t.tid)))
        .collect();
    out.sort_unstable();
    out
}

/// Every host thread in a guest's group (its QEMU's): the vCPU threads
/// and the threads that wake them.
pub fn guest_threads(rec: &Recording, group: &str) -> Vec<u32> {
    let Some(g) = rec.meta.groups.iter().position(|g| g.name == group) else {
        return Vec::new();
    };
    threads_where(rec, |t| t.group == Some(g as u32))
}

/// Every thread of process `pid` (its tgid) in `rec`: a QEMU's vCPU
/// threads and the threads that wake them, when it is in no group.
pub fn threads_of_process(rec: &Recording, pid: u32) -> Vec<u32> {
    threads_where(rec, |t| t.tgid == pid)
}

fn threads_where(rec: &Recording, keep: impl Fn(&ontime_recording::recording::ThreadInfo) -> bool) -> Vec<u32> {
    let mut out: Vec<u32> = rec.threads.values().filter(|t| keep(t)).map(|t| t.tid).collect();
    out.sort_unstable();
    out
}

/// A guest probe's late events explained: on the guest's recording placed
/// on the host's clock, each split by the host's time line of the guest's
/// vCPU threads ([`crate::attribute::split_by_host`]; a receiver's by
/// [`crate::attribute::split_by_host_waiting`]).
pub struct GuestExplainer<'a> {
    pub guest: Timeline,
    host: &'a Timeline,
    /// Host clock = guest clock + this.
    offset_ns: i64,
    /// Guest CPU, its vCPU thread on the host.
    vcpus: Vec<(u16, crate::timeline::Probe)>,
    /// The guest's threads wait for messages ([`crate::Probe::on_messages`]).
    on_message: bool,
}

impl<'a> GuestExplainer<'a> {
    /// `guest`: the recording made inside the guest; `vcpus`: guest CPU,
    /// host tid (watched by `host`); `tids`: the guest's probe threads.
    pub fn new(host: &'a Timeline, guest: &Recording, offset_ns: i64, vcpus: &[(u16, u32)], tids: &[u32]) -> Self {
        GuestExplainer {
            guest: Timeline::from_recording_placed(guest, tids, offset_ns, Side::Guest),
            host,
            offset_ns,
            vcpus: vcpus
                .iter()
                .filter_map(|&(cpu, tid)| Some((cpu, host.probe(tid).ok()?)))
                .collect(),
            on_message: false,
        }
    }

    /// Its threads wait for messages (a flow's receiver in the guest), not
    /// for their timers.
    pub fn on_messages(mut self) -> Self {
        self.on_message = true;
        self
    }

    /// Whether a vCPU thread of the guest is on the host's time line.
    pub fn has_vcpus(&self) -> bool {
        !self.vcpus.is_empty()
    }

    /// `e` (on the guest's clock) explained on the host's clock.
    pub fn explain(&self, e: &ProbeEvent) -> Result<crate::cause::Explanation, ontime_core::BadInput> {
        let mut probe = self.guest.probe(e.tid)?;
        if self.on_message {
            probe = probe.on_messages();
        }
        let place = |t: u64| t.saturating_add_signed(self.offset_ns);
        let x = crate::attribute::explain(&self.guest, &probe, place(e.planned_ns), place(e.actual_ns));
        let vcpu_of = |cpu| self.vcpus.iter().find(|(c, _)| *c == cpu).map(|(_, p)| p.clone());
        Ok(if self.on_message {
            crate::attribute::split_by_host_waiting(&x, self.host, Some(&self.guest), vcpu_of)
        } else {
            crate::attribute::split_by_host(&x, self.host, Some(&self.guest), vcpu_of)
        })
    }
}

/// A guest probe's late events (`set`, on the guest's clock) explained
/// by a [`GuestExplainer`] on `guest`, the recording made inside the
/// guest, and reported on the host's clock.
pub fn explain_guest_on(
    host: &Timeline,
    host_rec: &Recording,
    guest: &Recording,
    offset_ns: i64,
    vcpus: &[(u16, u32)],
    set: &LateSet,
) -> RunExplanation {
    explain_in_guest(host, host_rec, guest, (offset_ns, vcpus), set, false)
}

/// A flow receiver's late datagrams in a guest (`set`, on the guest's
/// clock), explained as [`explain_guest_on`] explains a probe's, the
/// receiving thread waiting for messages: on the guest's time line,
/// asleep past the deadline is the datagram not in yet, queued or
/// running after is the receiver's; each split by the host at the vCPU
/// threads, the wait for the datagram too where the vCPU was held on the
/// host ([`crate::attribute::split_by_host_waiting`]). Where the vCPU
/// slept, the sender's, the relay's and the virtual NIC's parts are not
/// told apart.
pub fn explain_guest_datagrams_on(
    host: &Timeline,
    host_rec: &Recording,
    guest: &Recording,
    offset_ns: i64,
    vcpus: &[(u16, u32)],
    set: &LateSet,
) -> RunExplanation {
    explain_in_guest(host, host_rec, guest, (offset_ns, vcpus), set, true)
}

fn explain_in_guest(
    host: &Timeline,
    host_rec: &Recording,
    guest: &Recording,
    (offset_ns, vcpus): (i64, &[(u16, u32)]),
    set: &LateSet,
    on_message: bool,
) -> RunExplanation {
    let mut parts = Parts::default();
    let mut g = GuestExplainer::new(host, guest, offset_ns, vcpus, &probe_tids(&set.events));
    if on_message {
        g = g.on_messages();
    }
    parts.end_ns = g.guest.end_ns();
    if !g.has_vcpus() {
        parts
            .notes
            .push("the guest's vCPU threads are not in the host's recording: only the guest's side is told".into());
    }
    for e in &set.events {
        match g.explain(e) {
            Ok(x) => parts.reports.push(x.report_sides(host, Some(&g.guest))),
            Err(err) => {
                let note = format!("{err} (the guest's recording): its late events are not explained");
                if !parts.notes.contains(&note) {
                    parts.notes.push(note);
                }
            }
        }
    }
    parts.note_coverage(&g.guest, guest);
    parts.note_coverage(host, host_rec);
    parts.summarize(set.late, set.threshold_ns, &set.threshold_from)
}

/// What a flow's late datagrams are explained along: its sending thread
/// (None: not known) and the path's set one-way delay (the lab relay's
/// `relay_delay`; 0 elsewhere).
#[derive(Clone, Copy, Debug, Default)]
pub struct DatagramPath {
    pub sender_tid: Option<u32>,
    pub nominal_ns: u64,
}

/// A flow receiver's late datagrams (`set`), each an event of the
/// receiving thread planned at its send time plus the deadline, explained
/// on `rec`: along its path ([`crate::attribute::explain_datagram`]: the
/// sender's thread, the relay's, the receiver's) where the event has its
/// send time and the receiver's kernel stamp of it, else on the
/// receiver's time line alone as a thread waiting for messages
/// ([`crate::Probe::on_messages`]).
pub fn explain_datagrams(rec: &Recording, set: &LateSet, path: DatagramPath) -> RunExplanation {
    let mut parts = Parts::default();
    parts.explain_datagrams(rec, &set.events, path);
    parts.note_outside(rec, &set.events);
    parts.summarize(set.late, set.threshold_ns, &set.threshold_from)
}

/// Explains `events` (already the late ones, worst first) on `rec`.
pub fn explain_run(
    rec: &Recording,
    events: &[ProbeEvent],
    late: u64,
    threshold_ns: u64,
    threshold_from: &str,
) -> RunExplanation {
    let tl = Timeline::from_recording(rec, &probe_tids(events));
    explain_run_on(&tl, rec, events, late, threshold_ns, threshold_from)
}

/// As [`explain_run`], on a time line already built from `rec` that
/// watches the events' threads (one time line for several probes).
pub fn explain_run_on(
    tl: &Timeline,
    rec: &Recording,
    events: &[ProbeEvent],
    late: u64,
    threshold_ns: u64,
    threshold_from: &str,
) -> RunExplanation {
    explain_events_on(tl, rec, events, (late, threshold_ns, threshold_from), false)
}

/// [`explain_run_on`]; `on_message`: the threads wait for messages, not
/// timers ([`crate::Probe::on_messages`]). `over`: late, threshold and
/// what chose it.
fn explain_events_on(
    tl: &Timeline,
    rec: &Recording,
    events: &[ProbeEvent],
    (late, threshold_ns, threshold_from): (u64, u64, &str),
    on_message: bool,
) -> RunExplanation {
    let mut parts = Parts::default();
    parts.explain_on(tl, rec, events, on_message);
    parts.note_outside(rec, events);
    parts.summarize(late, threshold_ns, threshold_from)
}

/// Windows read as one recording at most: a stretch longer than this is
/// read in overlapping pieces, so memory stays that of a few minutes of
/// recording whatever a flight recorder kept.
const PIECE_WINDOWS: usize = 300;
/// Windows two consecutive pieces share: an event that starts near a
/// piece's end is explained on the next, with time before it.
const PIECE_OVERLAP: usize = 10;

/// A set of late events to explain on a flight recorder's windows: a
/// probe's own, a crawl's requests on their way (its arrivals at the
/// gateway or its answers back), which the relay's time line explains
/// too, or a flow's datagrams along their path.
#[derive(Clone, Copy)]
pub struct StretchSet<'a> {
    pub set: &'a LateSet,
    pub along: Along,
}

/// What a [`StretchSet`]'s events are explained along.
#[derive(Clone, Copy)]
pub enum Along {
    /// The probe's own time line.
    Probe,
    /// A crawl's requests over the host I/O path.
    Path(PathNominal),
    /// A flow's datagrams: sender, relay, receiver.
    Datagrams(DatagramPath),
}

impl<'a> StretchSet<'a> {
    pub fn probe(set: &'a LateSet) -> Self {
        StretchSet {
            set,
            along: Along::Probe,
        }
    }

    pub fn arrivals(a: &'a LateArrivals) -> Self {
        StretchSet {
            set: &a.set,
            along: Along::Path(a.path()),
        }
    }

    pub fn answers(a: &'a LateAnswers) -> Self {
        StretchSet {
            set: &a.set,
            along: Along::Path(a.path),
        }
    }

    pub fn datagrams(set: &'a LateSet, path: DatagramPath) -> Self {
        StretchSet {
            set,
            along: Along::Datagrams(path),
        }
    }

    /// The first time an event's explanation reads: a datagram's send
    /// time, else its planned time.
    fn from(&self, e: &ProbeEvent) -> u64 {
        match self.along {
            Along::Datagrams(_) => e.sent_ns.unwrap_or(e.planned_ns).min(e.planned_ns),
            _ => e.planned_ns,
        }
    }

    /// The last time an event's explanation reads. An arrival's
    /// `actual_ns` is its receive stamp less one way, read to the stamp;
    /// an answer's is its return less the round trip and the gateway's
    /// delay, read to its return. Arrivals carry no gateway delay
    /// (`LateArrivals::path`), so one way it is.
    fn reach(&self, e: &ProbeEvent) -> u64 {
        match self.along {
            Along::Path(p) => {
                let back = if e.gateway.is_some() { p.one_way_ns } else { 0 };
                e.actual_ns
                    .saturating_add(p.one_way_ns)
                    .saturating_add(back)
                    .saturating_add(p.gateway_ns)
            }
            Along::Probe | Along::Datagrams(_) => e.actual_ns,
        }
    }
}

/// Explains each set of late events (`sets`) on the stretches of
/// recording a flight recorder kept: each stretch its contiguous windows,
/// in time order, read once (in pieces of at most [`PIECE_WINDOWS`]). An
/// event is explained on the first piece that holds all it reads (its
/// planned time, a datagram's send time, to its actual one, and a
/// request's way on the path); the
/// events none holds are counted in a note, not explained. A piece that
/// cannot be read is noted and skipped.
pub fn explain_stretches(stretches: &[Vec<std::path::PathBuf>], sets: &[StretchSet]) -> Vec<RunExplanation> {
    let mut parts: Vec<Parts> = sets.iter().map(|_| Parts::default()).collect();
    let mut placed: Vec<Vec<bool>> = sets.iter().map(|s| vec![false; s.set.events.len()]).collect();
    let mut unreadable = Vec::new();
    for files in stretches {
        let mut at = 0;
        while at < files.len() {
            let piece = &files[at..(at + PIECE_WINDOWS).min(files.len())];
            at = if at + PIECE_WINDOWS >= files.len() {
                files.len()
            } else {
                at + PIECE_WINDOWS - PIECE_OVERLAP
            };
            let rec = match read_stretch(piece) {
                Ok(r) => r,
                Err(e) => {
                    unreadable.push(format!("{e:#}"));
                    continue;
                }
            };
            let (start, end) = (rec.meta.start_ns, rec.end.as_ref().map_or(0, |e| e.end_ns));
            for ((set, placed), part) in sets.iter().zip(&mut placed).zip(&mut parts) {
                let mine: Vec<ProbeEvent> = set
                    .set
                    .events
                    .iter()
                    .zip(placed.iter_mut())
                    .filter(|(e, done)| !**done && set.from(e) >= start && set.reach(e) <= end)
                    .map(|(e, done)| {
                        *done = true;
                        *e
                    })
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                match set.along {
                    Along::Probe => part.explain(&rec, &mine),
                    Along::Datagrams(path) => part.explain_datagrams(&rec, &mine, path),
                    Along::Path(path) => {
                        let relay = relay_tid(&rec);
                        let mut tids = probe_tids(&mine);
                        tids.extend(relay);
                        let tl = Timeline::from_recording(&rec, &tids);
                        let relay = relay.and_then(|t| tl.probe(t).ok());
                        part.explain_path_on(&tl, &rec, &mine, relay.as_ref(), path);
                    }
                }
            }
        }
    }
    sets.iter()
        .zip(placed)
        .zip(parts)
        .map(|((set, placed), mut part)| {
            for e in &unreadable {
                part.notes
                    .push(format!("a stretch of kept windows could not be read: {e}"));
            }
            let outside = placed.iter().filter(|p| !**p).count();
            if outside > 0 {
                part.notes.push(format!(
                    "{outside} of {} late events fall outside the windows the flight recorder kept: not explained",
                    set.set.events.len()
                ));
            }
            part.summarize(set.set.late, set.set.threshold_ns, &set.set.threshold_from)
        })
        .collect()
}

/// One stretch of contiguous window files as one recording.
pub fn read_stretch(files: &[std::path::PathBuf]) -> anyhow::Result<Recording> {
    let parts = files
        .iter()
        .map(|f| Recording::read(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Recording::concat(parts)
}

/// The explained events of one or more recordings, and what those
/// recordings could not see.
#[derive(Default)]
struct Parts {
    reports: Vec<LateEvent>,
    notes: Vec<String>,
    /// Some recording had interrupt events, real-time classes.
    irqs: bool,
    rt_classes: bool,
    /// Some recording was made by perf, which records no steal clock.
    no_steal_clock: bool,
    /// Whether any recording was explained on.
    any: bool,
    repaired: u64,
    /// Events the recorders said they lost (ring full, program skipped).
    lost: u64,
    end_ns: u64,
    process_comm: ProcessNames,
}

/// Processes' names by the side whose scheduler saw them and their pid (a
/// guest's pids are its own).
pub type ProcessNames = std::collections::HashMap<(Side, u32), String>;

impl Parts {
    fn explain(&mut self, rec: &Recording, events: &[ProbeEvent]) {
        let tl = Timeline::from_recording(rec, &probe_tids(events));
        self.explain_on(&tl, rec, events, false);
    }

    /// On a time line already built from `rec` that watches the events'
    /// threads (among others); `on_message`: the threads wait for
    /// messages, not timers ([`crate::Probe::on_messages`]).
    fn explain_on(&mut self, tl: &Timeline, rec: &Recording, events: &[ProbeEvent], on_message: bool) {
        let tids = probe_tids(events);
        self.end_ns = tl.end_ns();
        for &tid in &tids {
            if let Err(e) = tl.probe(tid) {
                let note = format!("{e}: its late events are not explained");
                if !self.notes.contains(&note) {
                    self.notes.push(note);
                }
            }
        }
        let mut out = crate::cause::Explanation::default();
        for e in events {
            let Ok(mut probe) = tl.probe(e.tid) else { continue };
            if on_message {
                probe = probe.on_messages();
            }
            crate::attribute::explain_into(tl, &probe, e.planned_ns, e.actual_ns, &mut out);
            self.reports.push(out.report(tl));
        }
        self.note_coverage(tl, rec);
    }

    /// A flow receiver's late datagrams ([`explain_datagrams`]).
    fn explain_datagrams(&mut self, rec: &Recording, events: &[ProbeEvent], path: DatagramPath) {
        let relay = relay_tid(rec);
        let mut tids = probe_tids(events);
        tids.extend(path.sender_tid.iter().chain(relay.iter()));
        let tl = Timeline::from_recording(rec, &tids);
        let (along, alone): (Vec<ProbeEvent>, Vec<ProbeEvent>) = events
            .iter()
            .partition(|e| e.sent_ns.is_some() && e.received_ns.is_some());
        if !alone.is_empty() {
            // Its notes and the recording's coverage too.
            self.explain_on(&tl, rec, &alone, true);
        }
        if along.is_empty() {
            return;
        }
        let sender = path.sender_tid.and_then(|t| tl.probe(t).ok());
        let relay = relay.and_then(|t| tl.probe(t).ok());
        let mut note = |n: String| {
            if !self.notes.contains(&n) {
                self.notes.push(n);
            }
        };
        let unplaced = "where the relay slept the datagram may not have reached it yet: unexplained";
        match (path.sender_tid, &sender) {
            (None, _) => note(format!("no sending thread given: {unplaced}")),
            (Some(t), None) => note(format!("the sending thread {t} is not in the recording: {unplaced}")),
            _ => {}
        }
        if relay.is_none() {
            note("the relay's thread is not in the recording: the path's part is unexplained".into());
        }
        for &tid in &probe_tids(&along) {
            if let Err(e) = tl.probe(tid) {
                note(format!("{e}: its late events are not explained"));
            }
        }
        self.end_ns = tl.end_ns();
        for e in &along {
            let Ok(receiver) = tl.probe(e.tid) else { continue };
            let (Some(sent), Some(received)) = (e.sent_ns, e.received_ns) else {
                continue;
            };
            let x = crate::attribute::explain_datagram(
                &tl,
                &receiver.on_messages(),
                sender.as_ref(),
                relay.as_ref(),
                e.planned_ns,
                sent,
                received,
                e.actual_ns,
                path.nominal_ns,
            );
            self.reports.push(x.report(&tl));
        }
        if alone.is_empty() {
            self.note_coverage(&tl, rec);
        }
    }

    /// Says how many of `events` fall outside the recording.
    fn note_outside(&mut self, rec: &Recording, events: &[ProbeEvent]) {
        let outside = events
            .iter()
            .filter(|e| e.actual_ns <= rec.meta.start_ns || e.planned_ns >= self.end_ns)
            .count();
        if outside > 0 {
            self.notes.push(format!(
                "{outside} of {} late events fall outside the recording: was it made during this run?",
                events.len()
            ));
        }
    }

    /// What the time line could see, and the processes' names.
    fn note_coverage(&mut self, tl: &Timeline, rec: &Recording) {
        let coverage = tl.coverage();
        self.any = true;
        self.irqs |= coverage.irqs;
        self.rt_classes |= coverage.rt_classes;
        self.no_steal_clock |= rec.meta.mechanism == "perf";
        self.repaired += coverage.repaired;
        self.lost += rec.end.as_ref().map_or(0, |e| e.lost);
        let side = tl.side();
        self.process_comm.extend(
            rec.threads
                .values()
                .filter(|t| t.tid == t.tgid && !t.comm.is_empty())
                .map(|t| ((side, t.tgid), t.comm.clone())),
        );
    }

    /// Arrivals at the gateway (events with a sent time) on a time line
    /// that watches their threads and `relay`.
    fn explain_path_on(
        &mut self,
        tl: &Timeline,
        rec: &Recording,
        events: &[ProbeEvent],
        relay: Option<&crate::timeline::Probe>,
        path: PathNominal,
    ) {
        self.end_ns = tl.end_ns();
        let note = "the relay's thread is not in the recording: the path's part is unexplained";
        if relay.is_none() && !self.notes.iter().any(|n| n == note) {
            self.notes.push(note.into());
        }
        for e in events {
            let Ok(probe) = tl.probe(e.tid) else { continue };
            if let Some(x) = crate::attribute::explain_on_path(tl, &probe, relay, e, path) {
                self.reports.push(x.report(tl));
            }
        }
        self.note_coverage(tl, rec);
    }

    fn summarize(mut self, late: u64, threshold_ns: u64, threshold_from: &str) -> RunExplanation {
        let mut unseen = Vec::new();
        if self.any && !self.irqs {
            unseen.push("interrupts: their time shows as waiting behind the occupant or as own work".to_string());
        }
        if self.any && !self.rt_classes {
            unseen
                .push("throttling: a throttled real-time probe shows as waiting behind the fair occupant".to_string());
        }
        if self.no_steal_clock {
            unseen.push(
                "steal (perf records no steal clock): on a VM, time its hypervisor took a CPU shows as the cause current then"
                    .to_string(),
            );
        }
        if self.repaired > 0 {
            // Which it was tells a full ring from events never emitted.
            self.notes.push(format!(
                "{} contradictions in the recording (lost events; the recorder counted {} lost) were marked unknown",
                self.repaired, self.lost
            ));
        } else if self.lost > 0 {
            self.notes.push(format!(
                "the recorder lost {} events; none contradicted the rest",
                self.lost
            ));
        }
        // Stretches are explained in time order; the worst come first.
        self.reports
            .sort_by(|a, b| b.lateness_ns.cmp(&a.lateness_ns).then(a.planned_ns.cmp(&b.planned_ns)));
        summarize(
            self.reports,
            &self.process_comm,
            late,
            threshold_ns,
            threshold_from,
            unseen,
            self.notes,
        )
    }
}

/// Sums explained events into a run's explanation.
pub fn summarize(
    reports: Vec<LateEvent>,
    process_comm: &ProcessNames,
    late: u64,
    threshold_ns: u64,
    threshold_from: &str,
    unseen: Vec<String>,
    notes: Vec<String>,
) -> RunExplanation {
    let lateness_ns: u64 = reports.iter().map(|r| r.lateness_ns).sum();
    let mut totals: Vec<CauseTotal> = Vec::new();
    // The event each total last counted, so an event counts once per total.
    let mut counted: Vec<usize> = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        for c in &r.causes {
            // Threads of one process are one culprit in the sum, whatever
            // their names (QEMU's vCPU threads): the process is.
            let culprit = c.culprit.clone().map(|mut k| {
                if k.pid.is_some() {
                    k.tid = None;
                    k.comm = k.pid.and_then(|p| process_comm.get(&(c.side, p)).cloned()).or(k.comm);
                }
                k
            });
            match totals.iter().position(|t| t.sums(c.cause, c.detail, c.side, &culprit)) {
                Some(at) => {
                    let t = &mut totals[at];
                    t.ns += c.ns;
                    if c.ns > 0 && counted[at] != i + 1 {
                        t.events += 1;
                        counted[at] = i + 1;
                    }
                }
                None => {
                    totals.push(CauseTotal {
                        cause: c.cause,
                        detail: c.detail,
                        side: c.side,
                        ns: c.ns,
                        share: 0.0,
                        events: u64::from(c.ns > 0),
                        culprit,
                    });
                    counted.push(if c.ns > 0 { i + 1 } else { 0 });
                }
            }
        }
    }
    totals.retain(|t| t.ns > 0 || t.cause == CauseKind::Unexplained);
    if !totals.iter().any(|t| t.cause == CauseKind::Unexplained) {
        totals.push(CauseTotal {
            cause: CauseKind::Unexplained,
            detail: None,
            side: Side::Host,
            ns: 0,
            share: 0.0,
            events: 0,
            culprit: None,
        });
    }
    for t in &mut totals {
        t.share = if lateness_ns == 0 {
            0.0
        } else {
            t.ns as f64 / lateness_ns as f64
        };
    }
    totals.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.cause.cmp(&b.cause)));
    let over_time = buckets(&reports);
    let explained = reports.len() as u64;
    let mut worst = reports;
    worst.truncate(WORST_LISTED);
    RunExplanation {
        threshold_ns,
        threshold_from: threshold_from.to_string(),
        late,
        explained,
        lateness_ns,
        causes: totals,
        worst,
        unseen,
        notes,
        over_time,
    }
}

/// The events' lateness by cause in equal stretches of planned time (whole
/// milliseconds wide, at most [`TIME_BUCKETS`]).
fn buckets(reports: &[LateEvent]) -> Vec<TimeBucket> {
    let (Some(first), Some(last)) = (
        reports.iter().map(|r| r.planned_ns).min(),
        reports.iter().map(|r| r.planned_ns).max(),
    ) else {
        return Vec::new();
    };
    let span = last - first + 1;
    let width = span.div_ceil(TIME_BUCKETS).div_ceil(1_000_000).max(1) * 1_000_000;
    let n = span.div_ceil(width) as usize;
    let mut out: Vec<TimeBucket> = (0..n as u64)
        .map(|i| TimeBucket {
            start_ns: first + i * width,
            width_ns: width,
            events: 0,
            ns_by_cause: [0; CauseKind::COUNT],
        })
        .collect();
    for r in reports {
        let b = &mut out[((r.planned_ns - first) / width) as usize];
        b.events += 1;
        for c in &r.causes {
            if let Some(k) = CauseKind::ALL.iter().position(|k| *k == c.cause) {
                b.ns_by_cause[k] += c.ns;
            }
        }
    }
    out
}

/// "waiting for CPU 1 behind stress-ng (pid 4242, host)".
pub fn describe(cause: CauseKind, detail: Option<Detail>, side: Side, who: Option<&Culprit>) -> String {
    let name = |c: &Culprit| -> String {
        if c.idle {
            return "the idle task".into();
        }
        let mut s = c.comm.clone().unwrap_or_else(|| "an unknown thread".into());
        let mut tags = Vec::new();
        match (c.pid, c.tid) {
            (Some(p), _) => tags.push(format!("pid {p}")),
            (None, Some(t)) => tags.push(format!("tid {t}")),
            _ => {}
        }
        if let Some(g) = &c.group {
            tags.push(g.clone());
        }
        if !tags.is_empty() {
            s += &format!(" ({})", tags.join(", "));
        }
        s
    };
    let cpu = who.and_then(|c| c.cpu).map(|c| format!("CPU {c}"));
    let side = match side {
        Side::Host => "",
        Side::Guest => " in the guest",
    };
    let text = match cause {
        CauseKind::WaitedForCpu => format!(
            "waiting for {} behind {}",
            cpu.unwrap_or_else(|| "a CPU".into()),
            who.map(name).unwrap_or_else(|| "another thread".into())
        ),
        CauseKind::Interrupts => format!(
            "in {}{}",
            who.and_then(|c| c.irq.clone()).unwrap_or_else(|| "interrupts".into()),
            cpu.map(|c| format!(" on {c}")).unwrap_or_default()
        ),
        CauseKind::Throttled => format!(
            "throttled (real-time) on {}, its budget used by {}",
            cpu.unwrap_or_else(|| "its CPU".into()),
            who.map(name).unwrap_or_else(|| "real-time work".into())
        ),
        CauseKind::OwnWork => "running its own work".into(),
        // The host I/O path: the frame, not the probe, was held.
        CauseKind::Blocked if detail == Some(Detail::RelayWait) => format!(
            "held in the relay while {} slept",
            who.map(name).unwrap_or_else(|| "its thread".into())
        ),
        CauseKind::Blocked if detail == Some(Detail::RelayQueue) => format!(
            "queued in the relay while {} carried other frames{}",
            who.map(name).unwrap_or_else(|| "its thread".into()),
            cpu.as_ref().map(|c| format!(" on {c}")).unwrap_or_default()
        ),
        CauseKind::Blocked if detail == Some(Detail::Sender) => format!(
            "not yet sent while {} ran its send",
            who.map(name).unwrap_or_else(|| "the sender".into())
        ),
        // The gateway's own stamps say how long it held the answer, not why.
        CauseKind::Blocked if detail == Some(Detail::Gateway) => "held by the gateway before it answered".into(),
        CauseKind::Blocked => format!(
            "blocked{}{}",
            detail.map(|d| format!(" ({})", d.label())).unwrap_or_default(),
            match who {
                // Woken from an interrupt handler: it is the culprit.
                Some(Culprit { irq: Some(irq), .. }) => {
                    format!(
                        ", woken in {irq}{}",
                        cpu.map(|c| format!(" on {c}")).unwrap_or_default()
                    )
                }
                Some(c) if c.tid.is_some() || c.comm.is_some() || c.idle => format!(
                    ", woken by {}{}",
                    name(c),
                    cpu.as_ref().map(|c| format!(" on {c}")).unwrap_or_default()
                ),
                _ => String::new(),
            }
        ),
        CauseKind::LateTimer => format!(
            "a late timer{}{}",
            detail.map(|d| format!(" ({})", d.label())).unwrap_or_default(),
            cpu.map(|c| format!(" on {c}")).unwrap_or_default()
        ),
        CauseKind::Emulation => format!(
            "its vCPU emulating{}",
            who.map(|c| format!(" ({})", name(c))).unwrap_or_default()
        ),
        CauseKind::Steal => format!(
            "stolen from {} by the hypervisor beneath",
            cpu.unwrap_or_else(|| "its CPU".into())
        ),
        CauseKind::Unexplained => format!(
            "unexplained{}",
            detail.map(|d| format!(" ({})", d.label())).unwrap_or_default()
        ),
    };
    text + side
}

impl LateEvent {
    /// Its three largest causes, largest first: "12.0 ms waiting for CPU 1
    /// behind python3 (pid 77); 1.2 ms in timer on CPU 1".
    pub fn causes_text(&self) -> String {
        let parts: Vec<String> = self
            .causes
            .iter()
            .filter(|c| c.ns > 0)
            .take(3)
            .map(|c| {
                format!(
                    "{} {}",
                    ontime_core::duration::format_ns(c.ns),
                    describe(c.cause, c.detail, c.side, c.culprit.as_ref())
                )
            })
            .collect();
        parts.join("; ")
    }
}

impl RunExplanation {
    /// The explanation as text: the sentence, the causes, the worst events.
    pub fn text(&self, what: &str) -> String {
        use std::fmt::Write as _;
        let mut s = format!("why late: {}\n", self.sentence(what));
        if self.late > 0 {
            for c in self.causes.iter().take(10) {
                let _ = writeln!(
                    s,
                    "  {:>5.1} %  {:>10}  {}",
                    c.share * 100.0,
                    ontime_core::duration::format_ns(c.ns),
                    describe(c.cause, c.detail, c.side, c.culprit.as_ref())
                );
            }
            let _ = writeln!(s, "  worst:");
            for e in self.worst.iter().take(5) {
                let _ = writeln!(
                    s,
                    "    planned {:.6} s, {} late: {}",
                    e.planned_ns as f64 / 1e9,
                    ontime_core::duration::format_ns(e.lateness_ns),
                    e.causes_text()
                );
            }
        }
        for u in &self.unseen {
            let _ = writeln!(s, "  not recorded: {u}");
        }
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        s
    }

    /// "14 wake-ups over 10.0 ms; 78 % of their lateness waiting for CPU 1
    /// behind stress-ng (pid 4242), 15 % ..., 7 % unexplained".
    pub fn sentence(&self, what: &str) -> String {
        let over = if self.threshold_ns >= 1_000_000 {
            format!("{:.1} ms", self.threshold_ns as f64 / 1e6)
        } else {
            format!("{} us", self.threshold_ns / 1000)
        };
        if self.late == 0 {
            return format!("no {what} over {over}");
        }
        let of = if self.explained < self.late {
            format!(" (the worst {} explained)", self.explained)
        } else {
            String::new()
        };
        format!(
            "{} {what} over {over}{of}; of their lateness: {}",
            self.late,
            self.largest_causes()
        )
    }

    /// "78 % waiting for CPU 1 behind stress-ng (pid 4242), 15 % ...": the
    /// four largest causes with their culprits, those of 1 % or more
    /// (and what is unexplained, whatever its share).
    pub fn largest_causes(&self) -> String {
        let parts: Vec<String> = self
            .causes
            .iter()
            .filter(|c| c.share >= 0.01 || c.cause == CauseKind::Unexplained)
            .take(4)
            .map(|c| {
                format!(
                    "{:.0} % {}",
                    c.share * 100.0,
                    describe(c.cause, c.detail, c.side, c.culprit.as_ref())
                )
            })
            .collect();
        parts.join(", ")
    }
}

/// Several runs' explanations together (a lab setting's repetitions, its
/// tenants): the causes summed by what they are and who, with process ids
/// left out (they differ from run to run), shares of the pooled lateness.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PooledExplanation {
    /// Explanations pooled.
    pub runs: u64,
    pub late: u64,
    pub explained: u64,
    pub lateness_ns: u64,
    /// Largest first.
    pub causes: Vec<CauseTotal>,
}

impl PooledExplanation {
    pub fn of<'a>(runs: impl Iterator<Item = &'a RunExplanation>) -> PooledExplanation {
        let mut out = PooledExplanation::default();
        for r in runs {
            out.runs += 1;
            out.late += r.late;
            out.explained += r.explained;
            out.lateness_ns += r.lateness_ns;
            for c in &r.causes {
                let culprit = c.culprit.clone().map(|mut k| {
                    k.tid = None;
                    k.pid = None;
                    k
                });
                match out
                    .causes
                    .iter_mut()
                    .find(|t| t.sums(c.cause, c.detail, c.side, &culprit))
                {
                    Some(t) => {
                        t.ns += c.ns;
                        t.events += c.events;
                    }
                    None => out.causes.push(CauseTotal {
                        culprit,
                        share: 0.0,
                        ..c.clone()
                    }),
                }
            }
        }
        for t in &mut out.causes {
            t.share = if out.lateness_ns == 0 {
                0.0
            } else {
                t.ns as f64 / out.lateness_ns as f64
            };
        }
        out.causes.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.cause.cmp(&b.cause)));
        out
    }

    /// "931 of 931 late events explained; by cause: waiting for a CPU
    /// 99.9 % (behind tenants 0.0 %, the host I/O path 0.0 %, other
    /// threads 99.9 %), interrupts 0.1 %; largest: 99.9 % waiting for CPU 1
    /// behind ontime-burst; 0.0 % unexplained". Every cause over 1 % is
    /// listed, so the shares add up; then the three largest causes with
    /// their culprits. A guest's events say first how much of their
    /// lateness each side saw.
    pub fn sentence(&self) -> String {
        if self.explained == 0 {
            return format!("{} late events, none explained", self.late);
        }
        let of = |ns: u64| ns as f64 * 100.0 / self.lateness_ns.max(1) as f64;
        let mut kinds: Vec<(CauseKind, u64)> = Vec::new();
        // Waiting for a CPU, by whom: another tenant, the host I/O path,
        // anything else (the host's own threads, the idle CPU).
        let mut behind = [0u64; 3];
        for c in self.causes.iter().filter(|c| c.cause != CauseKind::Unexplained) {
            match kinds.iter_mut().find(|(k, _)| *k == c.cause) {
                Some(k) => k.1 += c.ns,
                None => kinds.push((c.cause, c.ns)),
            }
            if c.cause == CauseKind::WaitedForCpu {
                let i = match c.culprit.as_ref().and_then(|k| k.group_kind) {
                    Some(GroupKind::Tenant) => 0,
                    Some(GroupKind::HostIo) => 1,
                    None => 2,
                };
                behind[i] += c.ns;
            }
        }
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let by_cause: Vec<String> = kinds
            .iter()
            .filter(|(_, ns)| of(*ns) >= 1.0)
            .map(|(k, ns)| {
                let mut s = format!("{} {:.1} %", kind_words(*k), of(*ns));
                if *k == CauseKind::WaitedForCpu {
                    s += &format!(
                        " (behind tenants {:.1} %, the host I/O path {:.1} %, other threads {:.1} %)",
                        of(behind[0]),
                        of(behind[1]),
                        of(behind[2])
                    );
                }
                s
            })
            .collect();
        let largest: Vec<String> = self
            .causes
            .iter()
            .filter(|c| c.share >= 0.01 && c.cause != CauseKind::Unexplained)
            .take(3)
            .map(|c| {
                format!(
                    "{:.1} % {}",
                    c.share * 100.0,
                    describe(c.cause, c.detail, c.side, c.culprit.as_ref())
                )
            })
            .collect();
        let unexplained: u64 = self
            .causes
            .iter()
            .filter(|c| c.cause == CauseKind::Unexplained)
            .map(|c| c.ns)
            .sum();
        let mut out = format!("{} of {} late events explained", self.explained, self.late);
        // A guest's events: how much its own scheduler saw, how much the
        // host's (docs/explain.md, "Guest and host").
        let on = |side: Side| -> u64 {
            self.causes
                .iter()
                .filter(|c| c.side == side && c.cause != CauseKind::Unexplained)
                .map(|c| c.ns)
                .sum()
        };
        if on(Side::Guest) > 0 {
            out += &format!(
                "; in the guest {:.1} %, on the host {:.1} %",
                of(on(Side::Guest)),
                of(on(Side::Host))
            );
        }
        if !by_cause.is_empty() {
            out += &format!("; by cause: {}", by_cause.join(", "));
        }
        if !largest.is_empty() {
            out += &format!("; largest: {}", largest.join(", "));
        }
        out + &format!("; {:.1} % unexplained", of(unexplained))
    }
}

/// A cause in the words of a sentence.
fn kind_words(k: CauseKind) -> &'static str {
    match k {
        CauseKind::WaitedForCpu => "waiting for a CPU",
        CauseKind::Interrupts => "interrupts",
        CauseKind::Throttled => "throttled (real-time)",
        CauseKind::OwnWork => "own work",
        CauseKind::Blocked => "blocked",
        CauseKind::LateTimer => "a late timer",
        CauseKind::Emulation => "emulation",
        CauseKind::Steal => "steal (the hypervisor beneath)",
        CauseKind::Unexplained => "unexplained",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::CauseShare;

    /// Results written before steal was a cause still read, with no steal.
    #[test]
    fn time_buckets_written_before_steal_still_read() {
        let old = r#"{"start_ns":1,"width_ns":2,"events":3,"ns_by_cause":[1,2,3,4,5,6,7,8]}"#;
        let b: TimeBucket = serde_json::from_str(old).unwrap();
        assert_eq!(b.ns_by_cause[CauseKind::Steal as usize], 0);
        assert_eq!(b.ns_by_cause[CauseKind::Emulation as usize], 7);
        assert_eq!(b.ns_by_cause[CauseKind::Unexplained as usize], 8);
        let back: TimeBucket = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        assert!(
            serde_json::from_str::<TimeBucket>(r#"{"start_ns":1,"width_ns":2,"events":3,"ns_by_cause":[1]}"#).is_err()
        );
    }

    const MS: u64 = 1_000_000;

    fn who(tid: u32, pid: u32, comm: &str, cpu: u16) -> Culprit {
        Culprit {
            tid: Some(tid),
            pid: Some(pid),
            comm: Some(comm.into()),
            cpu: Some(cpu),
            ..Culprit::default()
        }
    }

    fn late(planned: u64, causes: Vec<(CauseKind, u64, Option<Culprit>)>) -> LateEvent {
        let lateness_ns = causes.iter().map(|c| c.1).sum();
        LateEvent {
            probe: who(100, 99, "cyclic0", 1),
            planned_ns: planned,
            actual_ns: planned + lateness_ns,
            lateness_ns,
            causes: causes
                .into_iter()
                .map(|(cause, ns, culprit)| CauseShare {
                    cause,
                    detail: None,
                    side: Side::Host,
                    ns,
                    idle_elsewhere_ns: 0,
                    culprit,
                })
                .collect(),
        }
    }

    #[test]
    fn threads_of_one_process_sum_as_one_culprit_and_shares_add_up() {
        let reports = vec![
            late(
                0,
                vec![
                    (CauseKind::WaitedForCpu, 70 * MS, Some(who(4242, 4242, "stress-ng", 1))),
                    (CauseKind::OwnWork, 2 * MS, Some(who(100, 99, "cyclic0", 1))),
                    (CauseKind::Unexplained, 0, None),
                ],
            ),
            late(
                100 * MS,
                vec![
                    (CauseKind::WaitedForCpu, 20 * MS, Some(who(4243, 4242, "stress-ng", 1))),
                    (CauseKind::Unexplained, 8 * MS, None),
                ],
            ),
        ];
        let names = std::collections::HashMap::from([((Side::Host, 4242), "stress-ng".to_string())]);
        let run = summarize(reports, &names, 2, 10 * MS, "--explain-over", vec![], vec![]);
        assert_eq!(run.lateness_ns, 100 * MS);
        let first = &run.causes[0];
        assert_eq!(
            (first.cause, first.ns, first.events),
            (CauseKind::WaitedForCpu, 90 * MS, 2)
        );
        assert_eq!(first.culprit.as_ref().unwrap().tid, None, "the process, not a thread");
        assert!((run.causes.iter().map(|c| c.share).sum::<f64>() - 1.0).abs() < 1e-9);
        let text = run.sentence("wake-ups");
        assert!(
            text == "2 wake-ups over 10.0 ms; of their lateness: 90 % waiting for CPU 1 behind stress-ng \
                     (pid 4242), 8 % unexplained, 2 % running its own work",
            "{text}"
        );
    }

    #[test]
    fn runs_pool_by_what_and_who_across_process_ids() {
        let names = std::collections::HashMap::new();
        let run = |pid: u32, waited: u64, unexplained: u64| {
            summarize(
                vec![late(
                    0,
                    vec![
                        (CauseKind::WaitedForCpu, waited, Some(who(pid, pid, "ontime-burst", 1))),
                        (CauseKind::Unexplained, unexplained, None),
                    ],
                )],
                &names,
                1,
                MS,
                "p99.9 of the run",
                vec![],
                vec![],
            )
        };
        let (a, b) = (run(500, 30 * MS, 0), run(700, 60 * MS, 10 * MS));
        let pooled = PooledExplanation::of([&a, &b].into_iter());
        assert_eq!((pooled.runs, pooled.late, pooled.lateness_ns), (2, 2, 100 * MS));
        let first = &pooled.causes[0];
        assert_eq!((first.ns, first.events), (90 * MS, 2), "one culprit whatever its pid");
        assert_eq!(first.culprit.as_ref().unwrap().pid, None);
        assert!((pooled.causes.iter().map(|c| c.share).sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(
            pooled.sentence(),
            "2 of 2 late events explained; by cause: waiting for a CPU 90.0 % (behind tenants 0.0 %, the host I/O path \
             0.0 %, other threads 90.0 %); largest: 90.0 % waiting for CPU 1 behind ontime-burst; 10.0 % unexplained"
        );
    }

    #[test]
    fn lateness_over_time_adds_up_by_cause() {
        let reports = vec![
            late(0, vec![(CauseKind::WaitedForCpu, 70 * MS, None)]),
            late(
                1_000 * MS,
                vec![(CauseKind::OwnWork, 5 * MS, None), (CauseKind::Unexplained, MS, None)],
            ),
        ];
        let run = summarize(reports, &Default::default(), 2, MS, "--explain-over", vec![], vec![]);
        let b = &run.over_time;
        assert!(b.len() <= TIME_BUCKETS as usize && b.len() > 1, "{b:?}");
        let sum: u64 = b.iter().flat_map(|b| b.ns_by_cause.iter()).sum();
        assert_eq!(sum, run.lateness_ns);
        assert_eq!(b[0].ns_by_cause[0], 70 * MS, "waited for a CPU first");
        assert_eq!(b.last().unwrap().events, 1);
    }

    #[test]
    fn no_late_event_says_so() {
        let run = summarize(
            vec![],
            &Default::default(),
            0,
            5 * MS,
            "p99.9 of the run",
            vec![],
            vec![],
        );
        assert_eq!(run.sentence("polls"), "no polls over 5.0 ms");
        assert_eq!(run.causes.len(), 1, "unexplained is listed even then");
    }
}
