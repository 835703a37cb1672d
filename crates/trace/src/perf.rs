//! The perf event source, for kernels or rights where BPF cannot load:
//! `perf_event_open` on the same sched (and kvm) tracepoints with raw
//! samples, one buffer per CPU, decoded with the field layout tracefs
//! publishes and filtered in user space. It copies every event of the host
//! out of the kernel, so it costs more than the BPF source, and its kernel
//! side is not measured (only the reader's CPU is).
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ontime_core::time::MonoNs;
use perf_event_open_sys as sys;

use crate::event::{kind, Event, F_NEXT_RT, F_PREEMPT, F_PREV_RT, F_PREV_RUNNABLE, TASK_DEAD};
use crate::source::{EventSource, SourceCost};
use crate::targets::{self, CgroupRoot, Targets};
use crate::tracefs::Tracefs;

/// Buffer per CPU, in pages (plus the header page). 4 MiB holds about 40 000
/// switches, 0.4 s of a busy CPU, against a 100 ms drain.
const RING_PAGES: usize = 1024;
/// Events younger than this stay buffered at a drain, so an event another
/// CPU is still writing cannot arrive after a later one was passed on.
const SETTLE_NS: u64 = 2_000_000;

/// EXIT_DEAD | EXIT_ZOMBIE as the sched_switch tracepoint reports them.
const REPORTED_EXIT: u64 = 0x10 | 0x20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tracepoint {
    Switch,
    Wakeup,
    WakeupNew,
    Migrate,
    Fork,
    Exit,
    Exec,
    Rename,
    KvmEntry,
    KvmExit,
    IrqEntry,
    IrqExit,
    SoftirqEntry,
    SoftirqExit,
}

/// Fields read of one tracepoint at most (the switch's five).
const FIELDS: usize = 5;

/// (tracepoint, tracefs path, fields read in order, required).
const TRACEPOINTS: [(Tracepoint, &str, [&str; FIELDS], bool); 14] = [
    (
        Tracepoint::Switch,
        "sched/sched_switch",
        // The priorities mark real-time tasks (prio below 100), as the
        // BPF probe's F_PREV_RT / F_NEXT_RT do.
        ["prev_pid", "prev_state", "next_pid", "prev_prio", "next_prio"],
        true,
    ),
    (
        Tracepoint::Wakeup,
        "sched/sched_wakeup",
        ["pid", "target_cpu", "", "", ""],
        true,
    ),
    (
        Tracepoint::WakeupNew,
        "sched/sched_wakeup_new",
        ["pid", "target_cpu", "", "", ""],
        true,
    ),
    (
        Tracepoint::Migrate,
        "sched/sched_migrate_task",
        ["pid", "orig_cpu", "dest_cpu", "", ""],
        true,
    ),
    (
        Tracepoint::Fork,
        "sched/sched_process_fork",
        ["parent_pid", "child_pid", "child_comm", "", ""],
        true,
    ),
    (
        Tracepoint::Exit,
        "sched/sched_process_exit",
        ["pid", "", "", "", ""],
        true,
    ),
    (
        Tracepoint::Exec,
        "sched/sched_process_exec",
        ["pid", "filename", "", "", ""],
        true,
    ),
    (
        Tracepoint::Rename,
        "task/task_rename",
        ["pid", "newcomm", "", "", ""],
        true,
    ),
    (
        Tracepoint::KvmEntry,
        "kvm/kvm_entry",
        ["vcpu_id", "", "", "", ""],
        false,
    ),
    (
        Tracepoint::KvmExit,
        "kvm/kvm_exit",
        ["vcpu_id", "exit_reason", "isa", "", ""],
        false,
    ),
    (
        Tracepoint::IrqEntry,
        "irq/irq_handler_entry",
        ["irq", "", "", "", ""],
        false,
    ),
    (
        Tracepoint::IrqExit,
        "irq/irq_handler_exit",
        ["irq", "", "", "", ""],
        false,
    ),
    (
        Tracepoint::SoftirqEntry,
        "irq/softirq_entry",
        ["vec", "", "", "", ""],
        false,
    ),
    (
        Tracepoint::SoftirqExit,
        "irq/softirq_exit",
        ["vec", "", "", "", ""],
        false,
    ),
];

/// Where a field sits in a tracepoint's raw record; size 0 when absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Field {
    offset: usize,
    size: usize,
    /// A `__data_loc` field: the record holds (length << 16 | offset).
    data_loc: bool,
}

impl Field {
    fn int(self, raw: &[u8]) -> u64 {
        let Some(b) = raw.get(self.offset..self.offset + self.size) else {
            return 0;
        };
        match *b {
            [a] => a as u64,
            [a, b] => u16::from_ne_bytes([a, b]) as u64,
            [a, b, c, d] => u32::from_ne_bytes([a, b, c, d]) as u64,
            _ => b.try_into().map(u64::from_ne_bytes).unwrap_or(0),
        }
    }

    /// A string field (inline char array or `__data_loc`), NUL-terminated.
    fn str(self, raw: &[u8]) -> &[u8] {
        let bytes = if self.data_loc {
            let loc = self.int(raw);
            let (off, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
            raw.get(off..off + len).unwrap_or(&[])
        } else {
            raw.get(self.offset..self.offset + self.size).unwrap_or(&[])
        };
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        &bytes[..end]
    }
}

/// A disabled sampling event: every sample carries the thread, a
/// CLOCK_MONOTONIC stamp (the clock of bpf_ktime_get_ns and the rest of
/// ontime) and the CPU, plus `extra` sample fields; the reader is woken
/// only when half of its `ring_bytes` buffer is used (it drains on a timer).
pub(crate) fn sample_attr(
    type_: u32,
    config: u64,
    period: u64,
    extra: u64,
    ring_bytes: usize,
) -> sys::bindings::perf_event_attr {
    // SAFETY: perf_event_attr is plain data; all-zero is its default.
    let mut attr: sys::bindings::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.type_ = type_;
    attr.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
    attr.config = config;
    attr.__bindgen_anon_1.sample_period = period;
    attr.sample_type =
        (sys::bindings::PERF_SAMPLE_TID | sys::bindings::PERF_SAMPLE_TIME | sys::bindings::PERF_SAMPLE_CPU) as u64
            | extra;
    attr.set_disabled(1);
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = (ring_bytes / 2) as u32;
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr
}

/// The online CPUs (one perf buffer each) and the page size (the buffer's
/// unit).
pub(crate) fn cpus_and_page() -> Result<(Vec<usize>, usize)> {
    let cpus = ontime_core::rt::online_cpu_list()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    Ok((cpus, page))
}

/// Opens `attr` on one CPU for every task; `what` names it in the error.
pub(crate) fn open_on_cpu(attr: &mut sys::bindings::perf_event_attr, cpu: usize, what: &str) -> Result<OwnedFd> {
    // SAFETY: attr is initialised; the result is an fd we own.
    let fd = unsafe { sys::perf_event_open(attr, -1, cpu as i32, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        bail!(
            "perf_event_open ({what}) on CPU {cpu} failed: {err}. It needs root or CAP_PERFMON (or kernel.perf_event_paranoid = -1)"
        );
    }
    // SAFETY: a fresh fd from the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A tracepoint's id and field layout, as tracefs `format` gives them.
#[derive(Debug)]
struct Format {
    id: u64,
    fields: HashMap<String, Field>,
    print_fmt: String,
}

fn parse_format(text: &str) -> Result<Format> {
    let mut id = None;
    let mut fields = HashMap::new();
    let mut print_fmt = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = line.strip_prefix("ID:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("print fmt:") {
            print_fmt = v.to_string();
        } else if let Some(rest) = line.strip_prefix("field:") {
            let mut decl = "";
            let mut f = Field::default();
            for part in rest.split(';') {
                let part = part.trim();
                if let Some(v) = part.strip_prefix("offset:") {
                    f.offset = v.parse().context("field offset")?;
                } else if let Some(v) = part.strip_prefix("size:") {
                    f.size = v.parse().context("field size")?;
                } else if decl.is_empty() {
                    decl = part;
                }
            }
            f.data_loc = decl.starts_with("__data_loc");
            let name = decl.split_whitespace().last().unwrap_or("");
            let name = name.split('[').next().unwrap_or(name);
            fields.insert(name.to_string(), f);
        }
    }
    let id = id.context("no ID line")?;
    Ok(Format { id, fields, print_fmt })
}

/// The bit sched_switch sets in `prev_state` when the task was preempted
/// (TASK_REPORT_MAX; it has moved between kernel versions), read from the
/// tracepoint's print format: `prev_state & (((A | B | ...) + 1) << 1) ? "+"`.
fn preempt_bit(print_fmt: &str) -> Option<u64> {
    let end = print_fmt.find("? \"+\"")?;
    let start = print_fmt[..end].rfind("REC->prev_state &")?;
    let expr = &print_fmt[start..end];
    let mask = expr
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter_map(|t| t.strip_prefix("0x"))
        .filter_map(|h| u64::from_str_radix(h, 16).ok())
        .fold(0u64, |a, b| a | b);
    (mask != 0 && expr.contains("<< 1")).then_some((mask + 1) << 1)
}

/// A tracepoint ready to decode: its id and the fields we read.
#[derive(Clone, Copy, Debug)]
struct Decoder {
    id: u16,
    tp: Tracepoint,
    fields: [Field; FIELDS],
}

/// One CPU's perf buffer and the events that write into it.
pub(crate) struct CpuRing {
    /// fds[0] owns the buffer; the others are redirected into it.
    fds: Vec<OwnedFd>,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

impl Drop for CpuRing {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` come from our own successful mmap.
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

impl CpuRing {
    /// Maps a buffer of `pages` pages (a power of two) for `fds[0]` and
    /// redirects the other events on this CPU into it.
    pub(crate) fn map(fds: Vec<OwnedFd>, cpu: usize, pages: usize, page: usize) -> Result<CpuRing> {
        let leader = fds.first().context("no perf events to map")?;
        let map_len = (pages + 1) * page;
        // SAFETY: mapping a perf fd as the perf_event_open(2) page describes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                leader.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            bail!(
                "mapping the perf buffer of CPU {cpu} ({} KiB) failed: {}; raise `ulimit -l` or kernel.perf_event_mlock_kb",
                map_len / 1024,
                std::io::Error::last_os_error()
            );
        }
        // The kernel redirects only into an event that has its buffer mapped.
        for fd in &fds[1..] {
            // SAFETY: both fds are perf events on the same CPU with the same clock.
            let rc = unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), leader.as_raw_fd()) };
            if rc != 0 {
                let err = std::io::Error::last_os_error();
                // SAFETY: unmapping what we just mapped.
                unsafe { libc::munmap(base, map_len) };
                bail!("redirecting perf output on CPU {cpu} failed: {err}");
            }
        }
        let mut ring = CpuRing {
            fds,
            base: base.cast(),
            map_len,
            data_offset: page,
            data_size: pages * page,
        };
        // SAFETY: the header page is mapped; these fields exist since Linux 4.1.
        let (off, size) = unsafe { ((*ring.header()).data_offset, (*ring.header()).data_size) };
        if size != 0 {
            ring.data_offset = off as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    /// The fd that owns the buffer (poll it, enable and disable through it).
    pub(crate) fn leader_fd(&self) -> i32 {
        self.fds[0].as_raw_fd()
    }

    fn header(&self) -> *mut sys::bindings::perf_event_mmap_page {
        self.base.cast()
    }

    /// Calls `f` with each record written since the last call. Returns the
    /// bytes skipped because the ring lost record alignment (0 normally).
    pub(crate) fn read(&mut self, scratch: &mut [u8], mut f: impl FnMut(&[u8])) -> u64 {
        let hdr = self.header();
        // SAFETY: data_head/data_tail are naturally aligned u64 in the shared
        // header page; the kernel publishes data_head with a release store and
        // reads data_tail, which is what the atomics give.
        let (head_ptr, tail_ptr) = unsafe {
            (
                &*(addr_of_mut!((*hdr).data_head) as *const AtomicU64),
                &*(addr_of_mut!((*hdr).data_tail) as *const AtomicU64),
            )
        };
        let head = head_ptr.load(Ordering::Acquire);
        let mut tail = tail_ptr.load(Ordering::Relaxed);
        // SAFETY: the data area lies inside the mapping.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let copy = |pos: u64, out: &mut [u8]| {
            let start = (pos % self.data_size as u64) as usize;
            let first = out.len().min(self.data_size - start);
            out[..first].copy_from_slice(&data[start..start + first]);
            let rest = out.len() - first;
            out[first..].copy_from_slice(&data[..rest]);
        };
        let mut skipped = 0;
        while head.saturating_sub(tail) >= 8 {
            let mut h = [0u8; 8];
            copy(tail, &mut h);
            let size = u16::from_ne_bytes([h[6], h[7]]) as usize;
            if size < 8 || (head - tail) < size as u64 || size > scratch.len() {
                // Not a record boundary: drop the rest rather than misread
                // it, and say how much was dropped.
                skipped = head - tail;
                tail = head;
                break;
            }
            copy(tail, &mut scratch[..size]);
            f(&scratch[..size]);
            tail += size as u64;
        }
        tail_ptr.store(tail, Ordering::Release);
        skipped
    }
}

/// An event waiting for the buffers of the other CPUs to catch up, with the
/// comm a fork or exec carries.
#[derive(Clone, Copy)]
struct Pending {
    event: Event,
    comm: [u8; 16],
}

pub(crate) struct PerfSource {
    decoders: Vec<Decoder>,
    rings: Vec<CpuRing>,
    /// One per ring, for the wait between drains.
    pollfds: Vec<libc::pollfd>,
    preempt_bit: Option<u64>,
    pending: Vec<Pending>,
    scratch: Vec<u8>,
    lost: u64,
    detached: bool,
    targets: Targets,
    cgroup_root: Option<CgroupRoot>,
    cgroup_ids: HashMap<u64, u32>,
    /// Tracked threads and their group (None: tracked by `--all`).
    tracked: HashMap<u32, Option<u32>>,
    /// Threads found outside the targets; forgotten at each rescan, since a
    /// thread can be moved into a target cgroup later.
    untracked: HashSet<u32>,
    /// Held while the source lives (a mount of ours is undone after).
    _tracefs: Option<Tracefs>,
}

impl Drop for PerfSource {
    fn drop(&mut self) {
        self.rings.clear();
    }
}

impl PerfSource {
    pub(crate) fn open(
        targets: &Targets,
        cgroup_root: Option<&CgroupRoot>,
        unavailable: &mut Vec<String>,
    ) -> Result<PerfSource> {
        let held = Tracefs::ensure("sched/sched_switch", "the scheduler tracepoints (CONFIG_TRACEPOINTS)")?;
        let tracefs = held.path().to_path_buf();
        let mut source = PerfSource {
            decoders: Vec::new(),
            rings: Vec::new(),
            pollfds: Vec::new(),
            preempt_bit: None,
            pending: Vec::with_capacity(1 << 16),
            scratch: vec![0u8; 1 << 16],
            lost: 0,
            detached: false,
            targets: targets.clone(),
            cgroup_root: cgroup_root.cloned(),
            cgroup_ids: HashMap::new(),
            tracked: HashMap::new(),
            untracked: HashSet::new(),
            _tracefs: Some(held),
        };
        for (tp, path, names, required) in TRACEPOINTS {
            let file = tracefs.join("events").join(path).join("format");
            let format = match std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))
                .and_then(|t| parse_format(&t).with_context(|| format!("parsing {}", file.display())))
            {
                Ok(f) => f,
                Err(e) if required => return Err(e),
                Err(_) => {
                    unavailable.push(format!("{path} (no such tracepoint)"));
                    continue;
                }
            };
            let Ok(id) = u16::try_from(format.id) else {
                bail!(
                    "tracepoint {path} has id {} beyond a raw record's common_type",
                    format.id
                );
            };
            let mut fields = [Field::default(); FIELDS];
            for (slot, name) in fields.iter_mut().zip(names) {
                if name.is_empty() {
                    continue;
                }
                match format.fields.get(name) {
                    Some(f) => *slot = *f,
                    None if tp == Tracepoint::KvmExit => unavailable.push(format!("{name} on kvm_exit (older kernel)")),
                    None if name.ends_with("_prio") => {
                        unavailable.push(format!("real-time bits of switches (no {name} on sched_switch)"))
                    }
                    None => bail!("tracepoint {path} has no field {name}; this kernel's layout is not supported"),
                }
            }
            if tp == Tracepoint::Switch {
                source.preempt_bit = preempt_bit(&format.print_fmt);
                if source.preempt_bit.is_none() {
                    unavailable.push("preemption flag of sched_switch (unknown prev_state layout)".into());
                }
            }
            source.decoders.push(Decoder { id, tp, fields });
        }
        unavailable.push("kernel-side cost of the perf mechanism (only the reader's CPU is counted)".into());

        let (cpus, page) = cpus_and_page()?;
        for cpu in cpus {
            let ring = source.open_cpu(cpu, page)?;
            source.pollfds.push(libc::pollfd {
                fd: ring.fds[0].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            source.rings.push(ring);
        }
        for (gi, g) in targets.groups.iter().enumerate() {
            for &pid in &g.pids {
                for tid in targets::threads_of(pid)? {
                    source.tracked.insert(tid, Some(gi as u32));
                }
            }
        }
        source.rescan()?;
        Ok(source)
    }

    fn open_cpu(&self, cpu: usize, page: usize) -> Result<CpuRing> {
        let data_size = RING_PAGES * page;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for d in &self.decoders {
            let mut attr = sample_attr(
                sys::bindings::PERF_TYPE_TRACEPOINT,
                d.id as u64,
                1,
                sys::bindings::PERF_SAMPLE_RAW as u64,
                data_size,
            );
            fds.push(open_on_cpu(&mut attr, cpu, &format!("tracepoint {:?}", d.tp))?);
        }
        CpuRing::map(fds, cpu, RING_PAGES, page)
    }

    fn decode(&self, record: &[u8]) -> Option<Pending> {
        // PERF_RECORD_SAMPLE with TID | TIME | CPU | RAW:
        // header(8) pid(4) tid(4) time(8) cpu(4) res(4) size(4) raw(size)
        let u32_at = |i: usize| {
            record
                .get(i..i + 4)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        let tgid = u32_at(8)?;
        let tid = u32_at(12)?;
        let ts = u64::from_ne_bytes(record.get(16..24)?.try_into().ok()?);
        let cpu = u32_at(24)? as u16;
        let raw_len = u32_at(32)? as usize;
        let raw = record.get(36..36 + raw_len)?;
        let common_type = u16::from_ne_bytes([*raw.first()?, *raw.get(1)?]);
        let d = self.decoders.iter().find(|d| d.id == common_type)?;
        let [f0, f1, f2, f3, f4] = d.fields;
        let mut event = Event {
            ts,
            cpu,
            ..Event::default()
        };
        let mut comm = [0u8; 16];
        let mut set_comm = |s: &[u8]| {
            let n = s.len().min(15);
            comm[..n].copy_from_slice(&s[..n]);
        };
        match d.tp {
            Tracepoint::Switch => {
                let reported = f1.int(raw);
                let preempt = self.preempt_bit.is_some_and(|b| reported & b != 0);
                let state = reported & !self.preempt_bit.unwrap_or(0);
                event.kind = kind::SWITCH;
                event.a = f0.int(raw) as u32;
                event.b = f2.int(raw) as u32;
                event.c = if state & REPORTED_EXIT != 0 {
                    TASK_DEAD
                } else {
                    state as u32
                };
                if preempt {
                    event.flags |= F_PREEMPT;
                }
                if preempt || state == 0 {
                    event.flags |= F_PREV_RUNNABLE;
                }
                // Absent fields (size 0) read as 0: no real-time bits then.
                if f3.size > 0 && (f3.int(raw) as i64 as i32) < 100 {
                    event.flags |= F_PREV_RT;
                }
                if f4.size > 0 && (f4.int(raw) as i64 as i32) < 100 {
                    event.flags |= F_NEXT_RT;
                }
            }
            Tracepoint::Wakeup | Tracepoint::WakeupNew => {
                event.kind = if d.tp == Tracepoint::Wakeup {
                    kind::WAKEUP
                } else {
                    kind::WAKEUP_NEW
                };
                event.a = f0.int(raw) as u32;
                // The sample's thread is the one current as it wakes the
                // other: the waker (BPF records the same).
                event.b = tid;
                event.c = f1.int(raw) as u32;
            }
            Tracepoint::Migrate => {
                event.kind = kind::MIGRATE;
                event.a = f0.int(raw) as u32;
                event.b = f1.int(raw) as u32;
                event.c = f2.int(raw) as u32;
            }
            Tracepoint::Fork => {
                event.kind = kind::FORK;
                event.a = f0.int(raw) as u32;
                event.b = f1.int(raw) as u32;
                set_comm(f2.str(raw));
            }
            Tracepoint::Exit => {
                event.kind = kind::EXIT;
                event.a = f0.int(raw) as u32;
            }
            Tracepoint::Exec => {
                event.kind = kind::EXEC;
                event.a = f0.int(raw) as u32;
                event.c = tgid;
                // The kernel names the task after the file it executes.
                let file = f1.str(raw);
                set_comm(file.rsplit(|&c| c == b'/').next().unwrap_or(file));
            }
            Tracepoint::Rename => {
                event.kind = kind::RENAME;
                event.a = f0.int(raw) as u32;
                // The sample's process is the renamer's, which is the
                // task's own unless another wrote its /proc comm.
                event.c = if event.a == tid { tgid } else { 0 };
                set_comm(f1.str(raw));
            }
            Tracepoint::IrqEntry | Tracepoint::IrqExit | Tracepoint::SoftirqEntry | Tracepoint::SoftirqExit => {
                event.kind = match d.tp {
                    Tracepoint::IrqEntry => kind::IRQ_ENTRY,
                    Tracepoint::IrqExit => kind::IRQ_EXIT,
                    Tracepoint::SoftirqEntry => kind::SOFTIRQ_ENTRY,
                    _ => kind::SOFTIRQ_EXIT,
                };
                event.a = f0.int(raw) as u32;
                // The sample's thread is the one interrupted (0: idle).
                event.b = tid;
            }
            Tracepoint::KvmEntry | Tracepoint::KvmExit => {
                event.kind = if d.tp == Tracepoint::KvmEntry {
                    kind::KVM_ENTRY
                } else {
                    kind::KVM_EXIT
                };
                event.a = tid;
                event.b = f0.int(raw) as u32;
                if d.tp == Tracepoint::KvmExit {
                    // The reason, and whose numbering it is in (isa: 1 VMX,
                    // 2 SVM); 0 where the kernel does not say.
                    event.c = f1.int(raw) as u32;
                    event.flags = f2.int(raw) as u8;
                }
            }
        }
        Some(Pending { event, comm })
    }

    /// Whether `tid` is tracked, and its group.
    fn lookup(&mut self, tid: u32) -> Option<Option<u32>> {
        if tid == 0 {
            return None;
        }
        if let Some(g) = self.tracked.get(&tid) {
            return Some(*g);
        }
        if self.untracked.contains(&tid) {
            return None;
        }
        let by_cgroup = self
            .cgroup_root
            .as_ref()
            .filter(|_| !self.cgroup_ids.is_empty())
            .and_then(|root| targets::cgroup_of_thread(tid, root))
            .and_then(|id| self.cgroup_ids.get(&id).copied());
        if by_cgroup.is_some() || self.targets.everything {
            self.tracked.insert(tid, by_cgroup);
            Some(by_cgroup)
        } else {
            self.untracked.insert(tid);
            None
        }
    }
}

impl EventSource for PerfSource {
    fn mechanism(&self) -> &'static str {
        "perf"
    }

    fn attach(&mut self) -> Result<()> {
        for ring in &self.rings {
            for fd in &ring.fds {
                // SAFETY: ioctl on our own perf fd.
                if unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), 0) } != 0 {
                    bail!("enabling perf tracepoints failed: {}", std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) {
        let fds = &mut self.pollfds;
        // SAFETY: fds is a valid array of pollfd.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.as_millis() as i32) };
    }

    fn drain(&mut self, out: &mut Vec<Event>, comms: &mut Vec<(u32, String)>) -> Result<()> {
        let read_start = MonoNs::now().0;
        let mut rings = std::mem::take(&mut self.rings);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut largest = 0usize;
        let mut skipped = 0u64;
        for ring in &mut rings {
            skipped += ring.read(&mut scratch, |record| {
                largest = largest.max(record.len());
                let kind = u32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
                if kind == sys::bindings::PERF_RECORD_SAMPLE {
                    if let Some(p) = self.decode(record) {
                        self.pending.push(p);
                    }
                } else if kind == sys::bindings::PERF_RECORD_LOST {
                    if let Some(b) = record.get(16..24) {
                        self.lost += u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
                    }
                }
            });
        }
        self.rings = rings;
        self.scratch = scratch;
        if skipped > 0 {
            // The records in the skipped bytes are lost: at least one, and
            // at least as many as fit at the largest record size seen.
            self.lost += skipped.div_ceil(largest.max(8) as u64).max(1);
        }

        // Each CPU's buffer is in time order; merge them (a stable sort
        // finds the runs) and hold back what another CPU may still be writing.
        self.pending.sort_by_key(|p| p.event.ts);
        let cut = if self.detached {
            u64::MAX
        } else {
            read_start.saturating_sub(SETTLE_NS)
        };
        let ready = self.pending.partition_point(|p| p.event.ts <= cut);
        for i in 0..ready {
            let p = self.pending[i];
            let e = p.event;
            let keep = match e.kind {
                // Every CPU's switches and interrupts: a tracked thread
                // waits or runs through them.
                kind::SWITCH | kind::IRQ_ENTRY | kind::IRQ_EXIT | kind::SOFTIRQ_ENTRY | kind::SOFTIRQ_EXIT => true,
                // Every task's exec and rename: they rename a culprit
                // first seen before them.
                kind::EXEC | kind::RENAME => true,
                kind::FORK => match self.lookup(e.a) {
                    Some(group) => {
                        self.tracked.insert(e.b, group);
                        self.untracked.remove(&e.b);
                        true
                    }
                    None => false,
                },
                _ => self.lookup(e.a).is_some(),
            };
            if !keep {
                continue;
            }
            if p.comm[0] != 0 {
                let end = p.comm.iter().position(|&c| c == 0).unwrap_or(16);
                let tid = if e.kind == kind::FORK { e.b } else { e.a };
                comms.push((tid, String::from_utf8_lossy(&p.comm[..end]).into_owned()));
            }
            out.push(e);
        }
        self.pending.drain(..ready);
        Ok(())
    }

    fn detach(&mut self) {
        for ring in &self.rings {
            for fd in &ring.fds {
                // SAFETY: ioctl on our own perf fd.
                unsafe { sys::ioctls::DISABLE(fd.as_raw_fd(), 0) };
            }
        }
        self.detached = true;
    }

    fn group_of(&mut self, tid: u32) -> Option<u32> {
        self.lookup(tid).flatten()
    }

    fn track(&mut self, tid: u32, group: u32) {
        self.tracked.insert(tid, Some(group));
        self.untracked.remove(&tid);
    }

    fn rescan(&mut self) -> Result<()> {
        targets::new_cgroup_ids(&self.targets, &mut self.cgroup_ids);
        self.untracked.clear();
        Ok(())
    }

    fn lost(&mut self) -> u64 {
        self.lost
    }

    fn cost(&mut self) -> SourceCost {
        SourceCost::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH_FORMAT: &str = r#"name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;

print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio
"#;

    #[test]
    fn parses_a_tracefs_format() {
        let f = parse_format(SWITCH_FORMAT).expect("parses");
        assert_eq!(f.id, 372);
        assert_eq!(
            f.fields["prev_state"],
            Field {
                offset: 32,
                size: 8,
                data_loc: false
            }
        );
        assert_eq!(f.fields["next_pid"].offset, 56);
        assert_eq!(f.fields["prev_comm"].size, 16);
        assert_eq!(preempt_bit(&f.print_fmt), Some(0x100));
    }

    #[test]
    fn reads_data_loc_strings() {
        let f =
            parse_format("ID: 1\n\tfield:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;\n").expect("parses");
        let comm = f.fields["comm"];
        assert!(comm.data_loc);
        let mut raw = vec![0u8; 12];
        raw[8..12].copy_from_slice(&((5u32 << 16) | 12).to_ne_bytes());
        raw.extend_from_slice(b"sh\0\0\0");
        assert_eq!(comm.str(&raw), b"sh");
    }

    /// A sched_switch record in SWITCH_FORMAT's layout, both tasks at a
    /// fair priority (120).
    fn switch_record(decoder_id: u16, prev: u32, state: u64, next: u32) -> Vec<u8> {
        switch_record_prio(decoder_id, prev, state, next, (120, 120))
    }

    fn switch_record_prio(decoder_id: u16, prev: u32, state: u64, next: u32, prio: (i32, i32)) -> Vec<u8> {
        let mut raw = vec![0u8; 64];
        raw[0..2].copy_from_slice(&decoder_id.to_ne_bytes());
        raw[24..28].copy_from_slice(&prev.to_ne_bytes());
        raw[28..32].copy_from_slice(&prio.0.to_ne_bytes());
        raw[32..40].copy_from_slice(&state.to_ne_bytes());
        raw[56..60].copy_from_slice(&next.to_ne_bytes());
        raw[60..64].copy_from_slice(&prio.1.to_ne_bytes());
        let mut rec = Vec::new();
        rec.extend_from_slice(&sys::bindings::PERF_RECORD_SAMPLE.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((36 + raw.len()) as u16).to_ne_bytes());
        rec.extend_from_slice(&prev.to_ne_bytes());
        rec.extend_from_slice(&prev.to_ne_bytes());
        rec.extend_from_slice(&1234u64.to_ne_bytes());
        rec.extend_from_slice(&1u32.to_ne_bytes());
        rec.extend_from_slice(&0u32.to_ne_bytes());
        rec.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&raw);
        rec
    }

    #[test]
    fn decodes_switch_states_like_the_bpf_probe() {
        let f = parse_format(SWITCH_FORMAT).expect("parses");
        let mut fields = [Field::default(); FIELDS];
        for (slot, name) in fields
            .iter_mut()
            .zip(["prev_pid", "prev_state", "next_pid", "prev_prio", "next_prio"])
        {
            *slot = f.fields[name];
        }
        let source = PerfSource {
            decoders: vec![Decoder {
                id: 372,
                tp: Tracepoint::Switch,
                fields,
            }],
            rings: Vec::new(),
            pollfds: Vec::new(),
            preempt_bit: preempt_bit(&f.print_fmt),
            pending: Vec::new(),
            scratch: Vec::new(),
            lost: 0,
            detached: false,
            targets: Targets::default(),
            cgroup_root: None,
            cgroup_ids: HashMap::new(),
            tracked: HashMap::new(),
            untracked: HashSet::new(),
            _tracefs: None,
        };
        let decode = |state| {
            source
                .decode(&switch_record(372, 10, state, 20))
                .expect("decodes")
                .event
        };
        let preempted = decode(0x100);
        assert_eq!(
            (preempted.a, preempted.b, preempted.ts, preempted.cpu),
            (10, 20, 1234, 1)
        );
        assert_eq!(preempted.flags, F_PREEMPT | F_PREV_RUNNABLE);
        assert_eq!(preempted.c, 0);
        let sleeping = decode(0x1);
        assert_eq!((sleeping.flags, sleeping.c), (0, 1));
        let yielded = decode(0);
        assert_eq!(yielded.flags, F_PREV_RUNNABLE);
        let dead = decode(0x10);
        assert_eq!(dead.c & TASK_DEAD, TASK_DEAD);
        // Real-time sides, as the BPF probe marks them: a FIFO task
        // (prio 19 for priority 80) and a deadline one (prio -1).
        let rt = |prio| {
            source
                .decode(&switch_record_prio(372, 10, 0x1, 20, prio))
                .expect("decodes")
                .event
                .flags
        };
        assert_eq!(rt((19, 120)) & (F_PREV_RT | F_NEXT_RT), F_PREV_RT);
        assert_eq!(rt((120, -1)) & (F_PREV_RT | F_NEXT_RT), F_NEXT_RT);
        assert_eq!(rt((120, 139)) & (F_PREV_RT | F_NEXT_RT), 0);
        assert!(source.decode(&switch_record(999, 1, 0, 2)).is_none());
    }
}
