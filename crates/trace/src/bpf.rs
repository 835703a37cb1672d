//! The BPF event source: `bpf/sched.bpf.c` on BTF tracepoints, filtering by
//! tid and cgroup in the kernel and delivering through one ring buffer.
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBuffer, RingBufferBuilder};

use crate::bpfmap::percpu_sum;
use crate::event::{kind, Event, COMM_EVENT_SIZE};
use crate::skel::{SchedSkel, SchedSkelBuilder};
use crate::source::{EventSource, SourceCost};
use crate::targets::{self, CgroupRoot, Targets};

/// Events and (tid, comm) pairs copied out of the ring by its callback.
type Staged = (Vec<Event>, Vec<(u32, String)>);

pub(crate) struct BpfSource<'obj> {
    skel: SchedSkel<'obj>,
    ring: RingBuffer<'static>,
    staged: Rc<RefCell<Staged>>,
    targets: Targets,
    cgroup_ids: HashMap<u64, u32>,
    stats_fd: Option<OwnedFd>,
    /// Program statistics when attached: (run_ns, runs, recursion misses).
    before: Option<(u64, u64, u64)>,
}

impl<'obj> BpfSource<'obj> {
    /// Loads the programs and fills the filter maps; nothing is attached yet.
    /// `unavailable` collects the parts this kernel lacks.
    pub(crate) fn open(
        object: &'obj mut MaybeUninit<OpenObject>,
        targets: &Targets,
        cgroup_root: Option<&CgroupRoot>,
        measure_overhead: bool,
        unavailable: &mut Vec<String>,
    ) -> Result<BpfSource<'obj>> {
        let kvm = Path::new("/sys/kernel/btf/kvm").exists();
        if !kvm {
            unavailable.push("kvm_entry/kvm_exit (kvm module not loaded)".to_string());
        }
        let mut open = SchedSkelBuilder::default()
            .open(object)
            .context("opening the BPF scheduler probes failed")?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.track_all = targets.everything;
            ro.cgroup_v1 = cgroup_root.map(|r| r.v1).unwrap_or(false);
            // Half the ring: wake the reader early only under a burst.
            ro.wakeup_threshold = 8 << 20;
        }
        if !kvm {
            open.progs.on_kvm_entry.set_autoload(false);
            open.progs.on_kvm_exit.set_autoload(false);
        }
        if !has_system_vectors() {
            unavailable.push("x86 system vectors (no irq_vectors tracepoints on this kernel)".to_string());
            let p = &mut open.progs;
            for prog in [
                &mut p.on_local_timer_entry,
                &mut p.on_local_timer_exit,
                &mut p.on_reschedule_entry,
                &mut p.on_reschedule_exit,
                &mut p.on_call_function_entry,
                &mut p.on_call_function_exit,
                &mut p.on_call_function_single_entry,
                &mut p.on_call_function_single_exit,
            ] {
                prog.set_autoload(false);
            }
        }
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!(
                "loading the BPF scheduler probes failed: {e}. They need root (CAP_BPF and CAP_PERFMON) and a kernel with BTF (/sys/kernel/btf/vmlinux)"
            )
        })?;

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
        let ring = rb.build()?;

        let stats_fd = if measure_overhead {
            // SAFETY: plain syscall wrapper; a non-negative result is an fd we own.
            let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        } else {
            None
        };
        if measure_overhead && stats_fd.is_none() {
            unavailable.push("BPF run-time statistics".to_string());
        }
        let mut source = BpfSource {
            skel,
            ring,
            staged,
            targets: targets.clone(),
            cgroup_ids: HashMap::new(),
            stats_fd,
            before: None,
        };
        source.rescan()?;
        Ok(source)
    }
}

impl EventSource for BpfSource<'_> {
    fn mechanism(&self) -> &'static str {
        "bpf"
    }

    fn attach(&mut self) -> Result<()> {
        self.before = bpf_run_time(&self.skel);
        self.skel
            .attach()
            .context("attaching the BPF scheduler probes to the sched tracepoints failed")
    }

    fn wait(&mut self, timeout: Duration) {
        let _ = self.ring.poll(timeout);
    }

    fn drain(&mut self, out: &mut Vec<Event>, comms: &mut Vec<(u32, String)>) -> Result<()> {
        self.ring.consume().context("draining the BPF ring")?;
        let mut s = self.staged.borrow_mut();
        out.append(&mut s.0);
        comms.append(&mut s.1);
        Ok(())
    }

    fn detach(&mut self) {
        let l = &mut self.skel.links;
        l.on_switch = None;
        l.on_wakeup = None;
        l.on_wakeup_new = None;
        l.on_migrate = None;
        l.on_fork = None;
        l.on_exit = None;
        l.on_exec = None;
        l.on_rename = None;
        l.on_kvm_entry = None;
        l.on_kvm_exit = None;
        l.on_irq_entry = None;
        l.on_irq_exit = None;
        l.on_softirq_entry = None;
        l.on_softirq_exit = None;
        l.on_local_timer_entry = None;
        l.on_local_timer_exit = None;
        l.on_reschedule_entry = None;
        l.on_reschedule_exit = None;
        l.on_call_function_entry = None;
        l.on_call_function_exit = None;
        l.on_call_function_single_entry = None;
        l.on_call_function_single_exit = None;
    }

    fn group_of(&mut self, tid: u32) -> Option<u32> {
        let v = self
            .skel
            .maps
            .tracked_tids
            .lookup(&tid.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
    }

    fn track(&mut self, tid: u32, group: u32) {
        let _ = self
            .skel
            .maps
            .tracked_tids
            .update(&tid.to_ne_bytes(), &group.to_ne_bytes(), MapFlags::ANY);
        self.new_generation();
    }

    fn rescan(&mut self) -> Result<()> {
        // Tasks moved into a tracked cgroup since their last answer.
        self.new_generation();
        for (id, group) in targets::new_cgroup_ids(&self.targets, &mut self.cgroup_ids) {
            self.skel
                .maps
                .tracked_cgroups
                .update(&id.to_ne_bytes(), &group.to_ne_bytes(), MapFlags::ANY)
                .context("adding a cgroup to the BPF filter")?;
        }
        Ok(())
    }

    fn lost(&mut self) -> u64 {
        percpu_sum(&self.skel.maps.lost, 0)
    }

    fn cost(&mut self) -> SourceCost {
        let after = bpf_run_time(&self.skel);
        let mut cost = SourceCost::default();
        if let (Some(b), Some(a)) = (self.before, after) {
            // Runs the kernel skipped (a BPF program already active on that
            // CPU) are events lost too.
            cost.extra_lost = a.2.saturating_sub(b.2);
            if self.stats_fd.is_some() {
                cost.kernel_run_ns = Some(a.0.saturating_sub(b.0));
                cost.kernel_runs = Some(a.1.saturating_sub(b.1));
            }
        }
        cost
    }
}

impl BpfSource<'_> {
    /// Invalidates every task's cached is_tracked() answer.
    fn new_generation(&mut self) {
        if let Some(data) = self.skel.maps.data_data.as_deref_mut() {
            // The program reads it through a volatile load; a plain store to
            // the shared mapping is what the skeleton offers.
            data.generation = data.generation.wrapping_add(1).max(1);
        }
    }
}

/// The kernel's counters of a loaded program (run time and count when
/// BPF stats are on, recursion misses always).
fn prog_info(prog: &impl std::os::fd::AsFd) -> Option<libbpf_sys::bpf_prog_info> {
    let fd = prog.as_fd().as_raw_fd();
    // SAFETY: bpf_prog_info is plain data; the kernel fills at most `len` bytes.
    let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
    (rc == 0).then_some(info)
}

/// How often the kernel skipped a loaded program because it was already
/// running on that CPU (an interrupt's tracepoint during its own run): the
/// events it would have recorded are lost.
/// A program not loaded (its fd negative) missed nothing.
pub(crate) fn recursion_misses(prog: &impl std::os::fd::AsFd) -> u64 {
    if prog.as_fd().as_raw_fd() < 0 {
        return 0;
    }
    prog_info(prog).map_or(0, |i| i.recursion_misses)
}

/// (run_time_ns, run_cnt, recursion_misses) summed over the loaded programs.
fn bpf_run_time(skel: &SchedSkel) -> Option<(u64, u64, u64)> {
    let p = &skel.progs;
    let progs = [
        &p.on_switch,
        &p.on_wakeup,
        &p.on_wakeup_new,
        &p.on_migrate,
        &p.on_fork,
        &p.on_exit,
        &p.on_exec,
        &p.on_rename,
        &p.on_kvm_entry,
        &p.on_kvm_exit,
        &p.on_irq_entry,
        &p.on_irq_exit,
        &p.on_softirq_entry,
        &p.on_softirq_exit,
        &p.on_local_timer_entry,
        &p.on_local_timer_exit,
        &p.on_reschedule_entry,
        &p.on_reschedule_exit,
        &p.on_call_function_entry,
        &p.on_call_function_exit,
        &p.on_call_function_single_entry,
        &p.on_call_function_single_exit,
    ];
    let mut total = (0u64, 0u64, 0u64);
    for prog in progs {
        if prog.as_fd().as_raw_fd() < 0 {
            continue;
        }
        let info = prog_info(prog)?;
        total.0 += info.run_time_ns;
        total.1 += info.run_cnt;
        total.2 += info.recursion_misses;
    }
    Some(total)
}

/// The kernel has the x86 irq_vectors tracepoints (their BTF types are in
/// vmlinux's BTF: other architectures, and kernels built without them,
/// have none).
fn has_system_vectors() -> bool {
    const NEEDLE: &[u8] = b"btf_trace_local_timer_entry";
    std::fs::read("/sys/kernel/btf/vmlinux").is_ok_and(|btf| btf.windows(NEEDLE.len()).any(|w| w == NEEDLE))
}
