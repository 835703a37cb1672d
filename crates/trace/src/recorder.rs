//! Loads the BPF scheduler probes, drains their ring on a timer and streams
//! the events to a recording and/or a live consumer.
use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};
use ontime_core::time::MonoNs;

#[cfg(feature = "bpf")]
use crate::bpf::BpfSource;
use crate::event::{kind, Event};
use crate::perf::PerfSource;
use crate::recording::{End, Group, GroupKind, Meta, ThreadInfo, Writer};
pub use crate::source::thread_cpu_ns;
use crate::source::EventSource;
use crate::store::{Store, WindowStore};
use crate::targets::{self, CgroupRoot, Targets};

/// How scheduler events are taken from the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mechanism {
    /// BPF where it loads, perf tracepoints otherwise.
    #[default]
    Auto,
    /// BPF programs on BTF tracepoints: filtered in the kernel, cheapest.
    Bpf,
    /// perf_event_open on the same tracepoints, every event copied to user
    /// space and filtered there; for kernels or rights without BPF.
    Perf,
}

impl std::str::FromStr for Mechanism {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Mechanism::Auto),
            "bpf" => Ok(Mechanism::Bpf),
            "perf" => Ok(Mechanism::Perf),
            other => Err(format!("unknown mechanism {other:?}; use auto, bpf or perf")),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub targets: Targets,
    /// Where to stream the recording; None for a live view only.
    pub output: Option<PathBuf>,
    /// How often the reader drains the ring (it is woken earlier only
    /// when the ring is half full).
    pub drain_every: Duration,
    /// Enable the kernel's BPF run-time statistics so the summary can say
    /// what the probes cost in the kernel (adds two clock reads per event).
    pub measure_overhead: bool,
    pub mechanism: Mechanism,
    /// Also sample the tracked threads' stacks at this rate (Hz) on every
    /// CPU (`ontime profile record`).
    pub sample_hz: Option<u32>,
    /// Continuous recording: `output` is a directory of back-to-back
    /// windows of this length, each a whole recording (`crate::store`).
    pub window: Option<Duration>,
    /// Continuous recording: each window's file, once it is finished
    /// (END written, synced), e.g. for `ontime agent` to publish.
    pub windows_done: Option<std::sync::mpsc::Sender<PathBuf>>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            targets: Targets::default(),
            output: None,
            drain_every: Duration::from_millis(100),
            measure_overhead: true,
            mechanism: Mechanism::Auto,
            sample_hz: None,
            window: None,
            windows_done: None,
        }
    }
}

/// What a recording cost and produced.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RecordSummary {
    pub start_ns: u64,
    pub end_ns: u64,
    /// "bpf" or "perf".
    #[serde(default)]
    pub mechanism: String,
    pub events: u64,
    pub lost: u64,
    /// CPU time of the draining thread (user + system).
    pub reader_cpu_ns: u64,
    /// Time spent in the BPF programs, when measured.
    pub bpf_run_ns: Option<u64>,
    pub bpf_runs: Option<u64>,
    pub output: Option<PathBuf>,
    pub unavailable: Vec<String>,
    /// Stack samples of tracked threads kept, and those the kernel dropped.
    #[serde(default)]
    pub samples: u64,
    #[serde(default)]
    pub samples_lost: u64,
    /// The stack sample rate asked for (profile), if any.
    #[serde(default)]
    pub sample_hz: Option<u32>,
}

impl RecordSummary {
    /// Recorder cost as a percentage of one core over the recording.
    pub fn overhead_pct(&self) -> f64 {
        let span = self.end_ns.saturating_sub(self.start_ns).max(1) as f64;
        (self.reader_cpu_ns + self.bpf_run_ns.unwrap_or(0)) as f64 / span * 100.0
    }
}

/// Threads seen so far, with their group.
#[derive(Default)]
pub struct ThreadTable {
    pub infos: HashMap<u32, ThreadInfo>,
    /// New or changed since the last THREADS block.
    pending: Vec<u32>,
    /// Ungrouped threads whose group was asked of the source in this drain:
    /// with BPF each question is a system call, and a busy thread's every
    /// wake-up would ask again.
    asked: HashSet<u32>,
}

impl ThreadTable {
    pub fn get(&self, tid: u32) -> Option<&ThreadInfo> {
        self.infos.get(&tid)
    }

    fn set(&mut self, info: ThreadInfo) {
        if self.infos.get(&info.tid) != Some(&info) {
            self.pending.push(info.tid);
            self.infos.insert(info.tid, info);
        }
    }

    fn take_pending(&mut self) -> Vec<ThreadInfo> {
        let mut tids = std::mem::take(&mut self.pending);
        tids.sort_unstable();
        tids.dedup();
        tids.iter().filter_map(|t| self.infos.get(t).cloned()).collect()
    }
}

/// A live consumer of events (`observe top`).
pub trait Sink {
    /// Called after every drain with the events in ring order.
    fn events(&mut self, events: &[Event], threads: &ThreadTable);
}

/// No live consumer.
pub struct NoSink;
impl Sink for NoSink {
    fn events(&mut self, _: &[Event], _: &ThreadTable) {}
}

/// The group list of a recording: the targets, then the host I/O path.
pub fn groups_of(targets: &Targets) -> Vec<Group> {
    let mut groups: Vec<Group> = targets
        .groups
        .iter()
        .map(|g| Group {
            name: g.name.clone(),
            kind: GroupKind::Tenant,
            source: g.source.clone(),
            vcpu_names: g.vcpu_names,
        })
        .collect();
    groups.push(Group {
        name: "host-io".into(),
        kind: GroupKind::HostIo,
        source: targets.host_io.iter().map(|p| format!("threads named {p}")).collect(),
        vcpu_names: false,
    });
    groups
}

/// Where libbpf keeps the opened BPF object while the source lives.
#[cfg(feature = "bpf")]
type BpfObject = MaybeUninit<libbpf_rs::OpenObject>;
#[cfg(not(feature = "bpf"))]
type BpfObject = MaybeUninit<()>;

#[cfg(feature = "bpf")]
fn open_bpf<'obj>(
    object: &'obj mut BpfObject,
    opts: &RecordOptions,
    cgroup_root: Option<&CgroupRoot>,
    unavailable: &mut Vec<String>,
) -> Result<Box<dyn EventSource + 'obj>> {
    Ok(Box::new(BpfSource::open(
        object,
        &opts.targets,
        cgroup_root,
        opts.measure_overhead,
        unavailable,
    )?))
}

#[cfg(not(feature = "bpf"))]
fn open_bpf<'obj>(
    _object: &'obj mut BpfObject,
    _opts: &RecordOptions,
    _cgroup_root: Option<&CgroupRoot>,
    _unavailable: &mut Vec<String>,
) -> Result<Box<dyn EventSource + 'obj>> {
    anyhow::bail!("this ontime was built without its BPF recorder (the ontime-trace `bpf` feature)")
}

/// Opens the event source `opts.mechanism` asks for; with `Auto`, BPF and
/// then perf tracepoints, noting in `unavailable` why BPF was passed over.
fn open_source<'obj>(
    opts: &RecordOptions,
    object: &'obj mut BpfObject,
    cgroup_root: Option<&CgroupRoot>,
    unavailable: &mut Vec<String>,
) -> Result<Box<dyn EventSource + 'obj>> {
    let targets = &opts.targets;
    let perf = |unavailable: &mut Vec<String>| PerfSource::open(targets, cgroup_root, unavailable);
    Ok(match opts.mechanism {
        Mechanism::Bpf => open_bpf(object, opts, cgroup_root, unavailable)?,
        Mechanism::Perf => Box::new(perf(unavailable)?),
        Mechanism::Auto => match open_bpf(object, opts, cgroup_root, unavailable) {
            Ok(s) => s,
            Err(bpf_error) => {
                let why = format!("{bpf_error:#}");
                let s = perf(unavailable).map_err(|perf_error| {
                    anyhow::anyhow!(
                        "no way to record scheduler events here. BPF: {why}. perf tracepoints: {perf_error:#}"
                    )
                })?;
                unavailable.push(format!("BPF recorder ({why}); used perf tracepoints instead"));
                Box::new(s)
            }
        },
    })
}

/// Records until `stop` is set or `duration` has passed since attaching.
/// `ready` is called once the probes are attached.
pub fn record(
    opts: &RecordOptions,
    stop: &AtomicBool,
    duration: Option<Duration>,
    sink: &mut dyn Sink,
    ready: &mut dyn FnMut(u64),
) -> Result<RecordSummary> {
    let targets = &opts.targets;
    let cgroup_root = CgroupRoot::detect().ok();
    let needs_cgroups = targets.groups.iter().any(|g| !g.cgroups.is_empty());
    if needs_cgroups && cgroup_root.is_none() {
        CgroupRoot::detect()?;
    }
    let mut unavailable = Vec::new();
    let mut object: BpfObject = MaybeUninit::uninit();
    let mut source = open_source(opts, &mut object, cgroup_root.as_ref(), &mut unavailable)?;
    let host_io_group = targets.groups.len() as u32;

    let mut sampler = opts
        .sample_hz
        .map(|hz| crate::sampler::Sampler::open(hz).context("opening the stack sampler"))
        .transpose()?;
    source.attach()?;
    if let Some(s) = sampler.as_mut() {
        s.enable()?;
    }
    let start = MonoNs::now();
    let until = duration.map(|d| start.add_ns(d.as_nanos() as u64));

    let meta = Meta {
        track_all: targets.everything,
        unavailable: unavailable.clone(),
        sample_period_ns: sampler.as_ref().map(|s| s.period_ns),
        ..Meta::of_this_host(source.mechanism(), start.0, groups_of(targets))
    };
    let store = match (&opts.output, opts.window) {
        (Some(dir), Some(window)) => Store::Windows(WindowStore::start(
            dir,
            meta,
            window.as_nanos() as u64,
            opts.windows_done.clone(),
        )?),
        (Some(p), None) => Store::File(Writer::create(p, &meta)?),
        (None, _) => Store::Nothing,
    };
    let rusage_before = thread_cpu_ns();
    ready(start.0);

    let mut cap = SchedCapture {
        source,
        sampler,
        store,
        sink,
        targets,
        host_io_group,
        threads: ThreadTable::default(),
        batch: Vec::with_capacity(1 << 16),
        comms: Vec::new(),
        samples: crate::sampler::SampleBatch::default(),
        sampled: SampledThreads::default(),
        mapped: Vec::new(),
        events_total: 0,
        samples_total: 0,
        lost: 0,
        cut: until.map(|u| u.0),
    };
    let end = crate::pipeline::drive(&mut [&mut cap], stop, until, opts.drain_every)?;
    let SchedCapture {
        mut source,
        sampler,
        mut store,
        mut threads,
        events_total,
        samples_total,
        mut lost,
        ..
    } = cap;
    lost = lost.max(source.lost());
    // Names set after a thread's first event (pthread_setname_np) show now.
    regroup(&mut threads, source.as_mut());
    let tids: Vec<u32> = threads.infos.keys().copied().collect();
    for tid in tids {
        if let Some((comm, tgid)) = targets::thread_identity(tid) {
            if let Some(t) = threads.infos.get(&tid).cloned() {
                let group = t
                    .group
                    .or_else(|| host_io_match(&comm, &targets.host_io).then_some(host_io_group));
                threads.set(ThreadInfo { comm, tgid, group, ..t });
            }
        }
    }
    let reader_cpu_ns = thread_cpu_ns().saturating_sub(rusage_before);
    let cost = source.cost();
    lost += cost.extra_lost;
    store.drained(
        &[],
        threads.take_pending(),
        &crate::sampler::SampleBatch::default(),
        Vec::new(),
        end.0,
        lost,
    )?;
    store.finish(&End {
        end_ns: end.0,
        events: events_total,
        lost,
        store_ns: None,
    })?;
    Ok(RecordSummary {
        start_ns: start.0,
        end_ns: end.0,
        mechanism: source.mechanism().to_string(),
        events: events_total,
        lost,
        reader_cpu_ns,
        bpf_run_ns: cost.kernel_run_ns,
        bpf_runs: cost.kernel_runs,
        output: opts.output.clone(),
        unavailable,
        samples: samples_total,
        samples_lost: sampler.as_ref().map_or(0, |s| s.lost),
        sample_hz: opts.sample_hz,
    })
}

/// Scheduler events (and, with a sample rate, stack samples) as one
/// capture of the recording loop: drained into the store and handed to
/// the sink, threads named and grouped as they appear.
struct SchedCapture<'a, 'obj> {
    source: Box<dyn EventSource + 'obj>,
    sampler: Option<crate::sampler::Sampler>,
    store: Store,
    sink: &'a mut dyn Sink,
    targets: &'a Targets,
    host_io_group: u32,
    threads: ThreadTable,
    batch: Vec<Event>,
    comms: Vec<(u32, String)>,
    samples: crate::sampler::SampleBatch,
    sampled: SampledThreads,
    mapped: Vec<(u32, crate::maps::Mapping)>,
    events_total: u64,
    samples_total: u64,
    lost: u64,
    /// The recording's end, once known (from the start with a duration):
    /// what the kernel stamps after it is not kept.
    cut: Option<u64>,
}

impl crate::pipeline::Capture for SchedCapture<'_, '_> {
    fn wait(&mut self, timeout: Duration) {
        self.source.wait(timeout);
    }

    fn stop(&mut self, end: MonoNs) {
        self.cut = Some(self.cut.map_or(end.0, |c| c.min(end.0)));
        self.source.detach();
        if let Some(s) = self.sampler.as_mut() {
            s.disable();
        }
    }

    fn drain(&mut self, _finishing: bool) -> Result<()> {
        let threads = &mut self.threads;
        self.source.drain(&mut self.batch, &mut self.comms)?;
        if let Some(cut) = self.cut {
            self.batch.retain(|e| e.ts <= cut);
        }
        for (tid, comm) in self.comms.drain(..) {
            if let Some(t) = threads.infos.get(&tid).cloned() {
                threads.set(ThreadInfo { comm, ..t });
            } else {
                threads.set(ThreadInfo {
                    tid,
                    tgid: 0,
                    comm,
                    group: None,
                });
            }
        }
        resolve_threads(
            &self.batch,
            threads,
            self.source.as_mut(),
            self.host_io_group,
            &self.targets.host_io,
        );
        let mut new_maps = Vec::new();
        if let Some(s) = self.sampler.as_mut() {
            self.samples.clear();
            self.mapped.clear();
            let (sampled, source, everything) = (&mut self.sampled, self.source.as_mut(), self.targets.everything);
            s.drain(&mut self.samples, &mut self.mapped, &mut |pid, tid| {
                sampled.keep(pid, tid, everything, threads, source)
            });
            if let Some(cut) = self.cut {
                // Frames of the samples left out stay in the batch unused.
                self.samples.samples.retain(|x| x.ts <= cut);
            }
            self.samples_total += self.samples.len() as u64;
            self.sampled.mapped(&self.mapped, &mut new_maps);
            self.sampled.maps_needed(&self.samples, &mut new_maps);
        }
        // Past the end, the store must not open a window after it.
        let now = MonoNs::now().0;
        self.store.drained(
            &self.batch,
            threads.take_pending(),
            &self.samples,
            new_maps,
            self.cut.map_or(now, |c| now.min(c)),
            self.lost,
        )?;
        self.sink.events(&self.batch, threads);
        self.events_total += self.batch.len() as u64;
        self.batch.clear();
        Ok(())
    }

    fn rescan(&mut self) -> Result<()> {
        self.source.rescan()?;
        regroup(&mut self.threads, self.source.as_mut());
        // A thread moved into a target cgroup is sampled from now on.
        self.sampled.forget_untracked();
        self.lost = self.source.lost();
        Ok(())
    }
}

/// Which sampled threads are tracked, the mappings written so far, and
/// the mappings the kernel reported for processes not sampled yet.
#[derive(Default)]
struct SampledThreads {
    tracked: HashMap<u32, bool>,
    maps: HashMap<u32, crate::maps::ProcessMaps>,
    reported: HashMap<u32, Vec<crate::maps::Mapping>>,
}

impl SampledThreads {
    /// Whether a sample of `tid` is kept: a thread of a target (asked of
    /// the source once), or any thread when recording everything. A kept
    /// thread the table does not know yet is added to it.
    fn keep(
        &mut self,
        pid: u32,
        tid: u32,
        everything: bool,
        threads: &mut ThreadTable,
        source: &mut dyn EventSource,
    ) -> bool {
        if let Some(&k) = self.tracked.get(&tid) {
            return k;
        }
        let group = threads.get(tid).and_then(|t| t.group).or_else(|| source.group_of(tid));
        let keep = everything || group.is_some();
        if keep && !matches!(threads.get(tid), Some(t) if t.tgid != 0) {
            let (comm, tgid) = targets::thread_identity(tid).unwrap_or_else(|| (format!("tid {tid}"), pid));
            threads.set(ThreadInfo { tid, tgid, comm, group });
        }
        self.tracked.insert(tid, keep);
        keep
    }

    fn forget_untracked(&mut self) {
        self.tracked.retain(|_, k| *k);
        // Mappings of processes gone and never sampled are not needed.
        self.reported
            .retain(|pid, _| std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    /// Mappings the kernel reported: a process already written gets them
    /// added (and written again); others are kept until it is sampled.
    fn mapped(&mut self, mapped: &[(u32, crate::maps::Mapping)], out: &mut Vec<crate::maps::ProcessMaps>) {
        for (pid, m) in mapped {
            match self.maps.get_mut(pid) {
                Some(pm) => {
                    if !pm.maps.contains(m) {
                        pm.maps.retain(|o| o.end <= m.start || o.start >= m.end);
                        pm.maps.push(m.clone());
                        out.retain(|o| o.pid != *pid);
                        out.push(pm.clone());
                    }
                }
                None => self.reported.entry(*pid).or_default().push(m.clone()),
            }
        }
    }

    /// Mappings to write: a process sampled for the first time, or whose
    /// user leaf lies outside what was read (it mapped a library since).
    fn maps_needed(&mut self, batch: &crate::sampler::SampleBatch, out: &mut Vec<crate::maps::ProcessMaps>) {
        for s in &batch.samples {
            let leaf = batch.user_frames(s).first().copied();
            let known = self.maps.get(&s.pid);
            let stale = match (known, leaf) {
                (None, _) => true,
                (Some(m), Some(ip)) => m.find(ip).is_none(),
                (Some(_), None) => false,
            };
            if !stale || out.iter().any(|m| m.pid == s.pid) {
                continue;
            }
            if let Some(m) = crate::maps::read_maps(s.pid) {
                if known != Some(&m) {
                    out.push(m.clone());
                }
                self.reported.remove(&s.pid);
                self.maps.insert(s.pid, m);
            } else if let Some(reported) = self.reported.remove(&s.pid) {
                // Gone already: what the kernel reported of its mappings.
                let m = crate::maps::ProcessMaps {
                    pid: s.pid,
                    comm: String::new(),
                    maps: reported,
                };
                out.push(m.clone());
                self.maps.insert(s.pid, m);
            } else if known.is_none() {
                // Gone before we looked: remember that, do not retry.
                self.maps.insert(
                    s.pid,
                    crate::maps::ProcessMaps {
                        pid: s.pid,
                        comm: String::new(),
                        maps: Vec::new(),
                    },
                );
            }
        }
    }
}

fn host_io_match(comm: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| targets::matches(p, comm))
}

/// Names and groups for threads seen for the first time in `batch`.
fn resolve_threads(
    batch: &[Event],
    threads: &mut ThreadTable,
    source: &mut dyn EventSource,
    host_io: u32,
    patterns: &[String],
) {
    threads.asked.clear();
    for e in batch {
        let (first, second) = match e.kind {
            kind::SWITCH => (e.a, Some(e.b)),
            kind::FORK => (e.b, None),
            // `a` is an interrupt, `b` whoever it interrupted, or a
            // steal's length: no thread of ours.
            kind::IRQ_ENTRY | kind::IRQ_EXIT | kind::SOFTIRQ_ENTRY | kind::SOFTIRQ_EXIT | kind::STEAL => continue,
            _ => (e.a, None),
        };
        // Only tracked tasks produce events other than switches.
        let tracked_now = e.kind != kind::SWITCH;
        for tid in std::iter::once(first).chain(second) {
            if tid == 0 {
                continue;
            }
            let known = threads.infos.get(&tid);
            let needs_group = known
                .map(|t| t.group.is_none() && tracked_now && !threads.asked.contains(&tid))
                .unwrap_or(true);
            let needs_name = known.map(|t| t.tgid == 0).unwrap_or(true);
            if !needs_group && !needs_name {
                continue;
            }
            let mut info = known.cloned().unwrap_or(ThreadInfo {
                tid,
                tgid: 0,
                comm: String::new(),
                group: None,
            });
            if needs_name {
                match targets::thread_identity(tid) {
                    Some((comm, tgid)) => {
                        info.comm = comm;
                        info.tgid = tgid;
                    }
                    None if info.comm.is_empty() => info.comm = format!("tid {tid}"),
                    None => {}
                }
                if info.tgid == 0 && e.kind == kind::FORK {
                    info.tgid = e.c;
                }
            }
            if info.group.is_none() {
                threads.asked.insert(tid);
                info.group = source.group_of(tid);
            }
            if info.group.is_none() && host_io_match(&info.comm, patterns) {
                info.group = Some(host_io);
                // From now on its wake-ups are recorded too.
                source.track(tid, host_io);
            }
            if info.tgid == 0 {
                // Gone before we looked: keep the name, mark as resolved.
                info.tgid = u32::MAX;
            }
            threads.set(info);
        }
    }
}

/// Threads the source started tracking by cgroup after we first saw them.
fn regroup(threads: &mut ThreadTable, source: &mut dyn EventSource) {
    let ungrouped: Vec<u32> = threads
        .infos
        .values()
        .filter(|t| t.group.is_none())
        .map(|t| t.tid)
        .collect();
    for tid in ungrouped {
        if let Some(g) = source.group_of(tid) {
            if let Some(t) = threads.infos.get(&tid).cloned() {
                threads.set(ThreadInfo { group: Some(g), ..t });
            }
        }
    }
}

pub use ontime_core::limits::online_cpus;

/// Lines saying what was not recorded, and why.
pub fn unavailable_text(unavailable: &[String]) -> String {
    unavailable.iter().map(|u| format!("not recorded: {u}\n")).collect()
}

impl ontime_core::export::TextReport for RecordSummary {
    fn text(&self) -> String {
        use ontime_core::duration::format_ns;
        let samples = match self.sample_hz {
            Some(_) => format!(
                "recorded {} stack samples ({} lost by the kernel)\n",
                self.samples, self.samples_lost
            ),
            None => String::new(),
        };
        format!(
            "{samples}recorded {} events in {} ({} lost) with {} to {}\nrecorder cost: {:.3}% of one core (reader {} + kernel probes {}{})\n{}",
            self.events,
            format_ns(self.end_ns - self.start_ns),
            self.lost,
            self.mechanism,
            self.output.as_ref().map_or("nowhere".into(), |p| p.display().to_string()),
            self.overhead_pct(),
            format_ns(self.reader_cpu_ns),
            self.bpf_run_ns
                .map(format_ns)
                .unwrap_or_else(|| "not measured (--overhead-stats)".into()),
            self.bpf_runs.map(|n| format!(" in {n} runs")).unwrap_or_default(),
            unavailable_text(&self.unavailable),
        )
    }
}
