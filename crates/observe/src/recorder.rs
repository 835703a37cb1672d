//! Loads the BPF scheduler probes, drains their ring on a timer and streams
//! the events to a recording and/or a live consumer.
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};
use ontime_core::time::{realtime_ns, MonoNs};

use crate::event::{kind, Event, COMM_EVENT_SIZE};
use crate::recording::{End, Group, GroupKind, Meta, ThreadInfo, Writer};
use crate::skel::SchedSkelBuilder;
use crate::targets::{self, CgroupRoot, Targets};

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
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            targets: Targets::default(),
            output: None,
            drain_every: Duration::from_millis(100),
            measure_overhead: true,
        }
    }
}

/// What a recording cost and produced.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RecordSummary {
    pub start_ns: u64,
    pub end_ns: u64,
    pub events: u64,
    pub lost: u64,
    /// CPU time of the draining thread (user + system).
    pub reader_cpu_ns: u64,
    /// Time spent in the BPF programs, when measured.
    pub bpf_run_ns: Option<u64>,
    pub bpf_runs: Option<u64>,
    pub output: Option<PathBuf>,
    pub unavailable: Vec<String>,
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

/// Events and (tid, comm) pairs copied out of the ring by its callback.
type Staged = (Vec<Event>, Vec<(u32, String)>);

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
    let v1 = cgroup_root.as_ref().map(|r| r.v1).unwrap_or(false);
    let mut unavailable = Vec::new();

    let kvm = Path::new("/sys/kernel/btf/kvm").exists();
    if !kvm {
        unavailable.push("kvm_entry/kvm_exit (kvm module not loaded)".to_string());
    }
    let mut object = MaybeUninit::uninit();
    let mut open = SchedSkelBuilder::default()
        .open(&mut object)
        .context("opening the BPF scheduler probes failed")?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.track_all = targets.everything;
        ro.cgroup_v1 = v1;
        // Half the ring: wake the reader early only under a burst.
        ro.wakeup_threshold = 8 << 20;
    }
    if !kvm {
        open.progs.on_kvm_entry.set_autoload(false);
        open.progs.on_kvm_exit.set_autoload(false);
    }
    let mut skel = open.load().map_err(|e| {
        anyhow::anyhow!(
            "loading the BPF scheduler probes failed: {e}. They need root (CAP_BPF and CAP_PERFMON) and a kernel with BTF (/sys/kernel/btf/vmlinux)"
        )
    })?;

    let host_io_group = targets.groups.len() as u32;
    let mut cgroup_ids: HashMap<u64, u32> = HashMap::new();
    let add_cgroups = |skel_map: &libbpf_rs::MapMut, ids: &mut HashMap<u64, u32>| -> Result<()> {
        for (gi, g) in targets.groups.iter().enumerate() {
            for cg in &g.cgroups {
                for dir in targets::cgroup_tree(cg) {
                    let Ok(id) = targets::cgroup_id(&dir) else { continue };
                    if ids.insert(id, gi as u32).is_none() {
                        skel_map
                            .update(&id.to_ne_bytes(), &(gi as u32).to_ne_bytes(), MapFlags::ANY)
                            .context("adding a cgroup to the BPF filter")?;
                    }
                }
            }
        }
        Ok(())
    };
    add_cgroups(&skel.maps.tracked_cgroups, &mut cgroup_ids)?;
    for (gi, g) in targets.groups.iter().enumerate() {
        for &pid in &g.pids {
            for tid in targets::threads_of(pid)? {
                skel.maps
                    .tracked_tids
                    .update(&tid.to_ne_bytes(), &(gi as u32).to_ne_bytes(), MapFlags::ANY)
                    .context("adding a thread to the BPF filter")?;
            }
        }
    }

    let stats_fd = if opts.measure_overhead {
        // SAFETY: plain syscall wrapper; a non-negative result is an fd we own.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    } else {
        None
    };
    if opts.measure_overhead && stats_fd.is_none() {
        unavailable.push("BPF run-time statistics".to_string());
    }
    let bpf_before = bpf_run_time(&skel);
    skel.attach()
        .context("attaching the BPF scheduler probes to the sched tracepoints failed")?;
    let start = MonoNs::now();
    let until = duration.map(|d| start.add_ns(d.as_nanos() as u64));

    let meta = Meta {
        version: 1,
        mechanism: "bpf".into(),
        start_ns: start.0,
        start_realtime_ns: realtime_ns(),
        cpus: online_cpus(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .to_string(),
        groups: groups_of(targets),
        track_all: targets.everything,
        unavailable: unavailable.clone(),
    };
    let mut writer = match &opts.output {
        Some(p) => Some(Writer::create(p, &meta)?),
        None => None,
    };
    let rusage_before = thread_cpu_ns();

    let staged: Rc<RefCell<Staged>> = Rc::new(RefCell::new((Vec::with_capacity(1 << 16), Vec::new())));
    let staged_cb = staged.clone();
    let mut rb = RingBufferBuilder::new();
    rb.add(&skel.maps.events, move |data: &[u8]| {
        if let Some(e) = Event::from_bytes(data) {
            let mut s = staged_cb.borrow_mut();
            if data.len() >= COMM_EVENT_SIZE {
                let tid = if e.kind == kind::FORK { e.b } else { e.a };
                if let Some(comm) = Event::comm_from_bytes(data) {
                    s.1.push((tid, comm));
                }
            }
            s.0.push(e);
        }
        0
    })?;
    let rb = rb.build()?;
    ready(start.0);

    let mut threads = ThreadTable::default();
    let mut last_rescan = start;
    let mut events_total = 0u64;
    let mut lost = 0u64;
    let mut batch: Vec<Event> = Vec::with_capacity(1 << 16);
    loop {
        let finishing = stop.load(Ordering::Relaxed) || until.is_some_and(|u| MonoNs::now() >= u);
        if finishing {
            // Detach first so nothing arrives after the last drain.
            drop_links(&mut skel);
        } else {
            let wait = until
                .map(|u| Duration::from_nanos(u.0.saturating_sub(MonoNs::now().0)))
                .unwrap_or(opts.drain_every);
            let _ = rb.poll(wait.min(opts.drain_every));
        }
        rb.consume().context("draining the BPF ring")?;
        {
            let mut s = staged.borrow_mut();
            std::mem::swap(&mut batch, &mut s.0);
            for (tid, comm) in s.1.drain(..) {
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
        }
        resolve_threads(
            &batch,
            &mut threads,
            &skel.maps.tracked_tids,
            host_io_group,
            &targets.host_io,
        );
        if let Some(w) = writer.as_mut() {
            for e in &batch {
                w.event(e)?;
            }
            w.threads(&threads.take_pending())?;
            w.flush()?;
        } else {
            threads.pending.clear();
        }
        sink.events(&batch, &threads);
        events_total += batch.len() as u64;
        batch.clear();

        let now = MonoNs::now();
        if finishing {
            break;
        }
        if now.since(last_rescan) >= 1_000_000_000 {
            last_rescan = now;
            add_cgroups(&skel.maps.tracked_cgroups, &mut cgroup_ids)?;
            regroup_from_map(&mut threads, &skel.maps.tracked_tids);
            lost = read_lost(&skel.maps.lost);
        }
    }
    let end = MonoNs::now();
    lost = lost.max(read_lost(&skel.maps.lost));
    // Names set after a thread's first event (pthread_setname_np) show now.
    regroup_from_map(&mut threads, &skel.maps.tracked_tids);
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
    let bpf_after = bpf_run_time(&skel);
    // Runs the kernel skipped (a BPF program already active on that CPU)
    // are events lost too.
    if let (Some(b), Some(a)) = (bpf_before, bpf_after) {
        lost += a.2.saturating_sub(b.2);
    }
    let (bpf_run_ns, bpf_runs) = match (stats_fd.is_some(), bpf_before, bpf_after) {
        (true, Some(b), Some(a)) => (Some(a.0.saturating_sub(b.0)), Some(a.1.saturating_sub(b.1))),
        _ => (None, None),
    };
    if let Some(mut w) = writer {
        w.threads(&threads.take_pending())?;
        w.finish(&End {
            end_ns: end.0,
            events: events_total,
            lost,
        })?;
    }
    Ok(RecordSummary {
        start_ns: start.0,
        end_ns: end.0,
        events: events_total,
        lost,
        reader_cpu_ns,
        bpf_run_ns,
        bpf_runs,
        output: opts.output.clone(),
        unavailable,
    })
}

fn drop_links(skel: &mut crate::skel::SchedSkel) {
    let l = &mut skel.links;
    l.on_switch = None;
    l.on_wakeup = None;
    l.on_wakeup_new = None;
    l.on_migrate = None;
    l.on_fork = None;
    l.on_exit = None;
    l.on_exec = None;
    l.on_kvm_entry = None;
    l.on_kvm_exit = None;
}

fn host_io_match(comm: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| targets::matches(p, comm))
}

/// Names and groups for threads seen for the first time in `batch`.
fn resolve_threads(
    batch: &[Event],
    threads: &mut ThreadTable,
    tracked: &libbpf_rs::MapMut,
    host_io: u32,
    patterns: &[String],
) {
    for e in batch {
        let (first, second) = match e.kind {
            kind::SWITCH => (e.a, Some(e.b)),
            kind::FORK => (e.b, None),
            _ => (e.a, None),
        };
        // Only tracked tasks produce events other than switches.
        let tracked_now = e.kind != kind::SWITCH;
        for tid in std::iter::once(first).chain(second) {
            if tid == 0 {
                continue;
            }
            let known = threads.infos.get(&tid);
            let needs_group = known.map(|t| t.group.is_none() && tracked_now).unwrap_or(true);
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
                info.group = lookup_group(tracked, tid);
            }
            if info.group.is_none() && host_io_match(&info.comm, patterns) {
                info.group = Some(host_io);
                // From now on its wake-ups are recorded too.
                let _ = tracked.update(&tid.to_ne_bytes(), &host_io.to_ne_bytes(), MapFlags::ANY);
            }
            if info.tgid == 0 {
                // Gone before we looked: keep the name, mark as resolved.
                info.tgid = u32::MAX;
            }
            threads.set(info);
        }
    }
}

fn lookup_group(tracked: &libbpf_rs::MapMut, tid: u32) -> Option<u32> {
    let v = tracked.lookup(&tid.to_ne_bytes(), MapFlags::ANY).ok()??;
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

/// Threads the BPF side started tracking by cgroup after we first saw them.
fn regroup_from_map(threads: &mut ThreadTable, tracked: &libbpf_rs::MapMut) {
    let ungrouped: Vec<u32> = threads
        .infos
        .values()
        .filter(|t| t.group.is_none())
        .map(|t| t.tid)
        .collect();
    for tid in ungrouped {
        if let Some(g) = lookup_group(tracked, tid) {
            if let Some(t) = threads.infos.get(&tid).cloned() {
                threads.set(ThreadInfo { group: Some(g), ..t });
            }
        }
    }
}

fn read_lost(map: &libbpf_rs::MapMut) -> u64 {
    map.lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .ok()
        .flatten()
        .map(|per_cpu| {
            per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes))
                .sum()
        })
        .unwrap_or(0)
}

/// (run_time_ns, run_cnt, recursion_misses) summed over the loaded programs.
fn bpf_run_time(skel: &crate::skel::SchedSkel) -> Option<(u64, u64, u64)> {
    let p = &skel.progs;
    let progs = [
        &p.on_switch,
        &p.on_wakeup,
        &p.on_wakeup_new,
        &p.on_migrate,
        &p.on_fork,
        &p.on_exit,
        &p.on_exec,
        &p.on_kvm_entry,
        &p.on_kvm_exit,
    ];
    let mut total = (0u64, 0u64, 0u64);
    for prog in progs {
        let fd = prog.as_fd().as_raw_fd();
        if fd < 0 {
            continue;
        }
        // SAFETY: bpf_prog_info is plain data; the kernel fills at most `len` bytes.
        let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
        if rc != 0 {
            return None;
        }
        total.0 += info.run_time_ns;
        total.1 += info.run_cnt;
        total.2 += info.recursion_misses;
    }
    Some(total)
}

pub fn thread_cpu_ns() -> u64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

pub fn online_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).max(
        // available_parallelism follows our own affinity; the host's count matters here.
        unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize,
    )
}
