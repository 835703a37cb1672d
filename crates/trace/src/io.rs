//! I/O capture at three layers (document 004): the I/O event of
//! `bpf/io.bpf.c`, what a recording watched ([`IoMeta`]: each tenant's
//! image file, loop device and the disk under the image), the cache and
//! memory state sampled beside the events ([`IoState`]), where the images
//! lie on the disk ([`IoLayout`], so physical requests are charged to the
//! tenant whose image they touch) and the recorder itself ([`record`]).
//!
//! Interpretation (absorption per layer, splits and merges) is ontime-io's.
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::targets::{CgroupRoot, Targets};
// What only the BPF recorder uses.
#[cfg(feature = "bpf")]
use crate::{
    recording::{End, Group, GroupKind, Meta, Writer},
    targets,
};
#[cfg(feature = "bpf")]
use anyhow::Context;
#[cfg(feature = "bpf")]
use ontime_core::time::MonoNs;
#[cfg(feature = "bpf")]
use std::collections::{HashMap, HashSet};

pub use crate::io_abi::*;
pub use crate::io_layout::*;

/// The memory cgroup beside a cpu-hierarchy cgroup (v1 keeps them in
/// separate hierarchies under the same relative path; v2 has one).
pub fn memory_cgroup_of(cpu_cgroup: &Path, root: &CgroupRoot) -> Option<PathBuf> {
    if !root.v1 {
        return Some(cpu_cgroup.to_path_buf());
    }
    let rel = cpu_cgroup.strip_prefix(&root.path).ok()?;
    let mem = Path::new(ontime_core::cgroup::ROOT).join("memory").join(rel);
    mem.is_dir().then_some(mem)
}

/// What to record.
#[derive(Clone, Debug)]
pub struct IoRecordOptions {
    pub targets: Targets,
    /// (group, image file) for tenants with a virtual disk.
    pub images: Vec<(u32, PathBuf)>,
    /// QEMU guests' images, found already ([`crate::io_vmm::vmm_disks`]).
    pub guest_disks: Vec<TenantDisk>,
    pub output: PathBuf,
    pub drain_every: Duration,
    /// How often cache and memory state is sampled.
    pub state_every: Duration,
    /// How the application layer is seen: every call (the syscall
    /// tracepoints, which slow every system call on the host) or each
    /// thread's counters.
    pub app_layer: AppLayer,
    /// Count each watched device's bios, merges and splits (four classic
    /// block tracepoints, on every bio).
    pub merges: bool,
}

/// What a recording cost and produced.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoRecordSummary {
    pub start_ns: u64,
    pub end_ns: u64,
    pub events: u64,
    /// Events not recorded: the ring had no room, a program was skipped,
    /// or a call's start could not be remembered (`unpaired_lost`).
    pub lost: u64,
    /// Of `lost`: calls or requests whose start could not be remembered
    /// (map full), so their end was not recorded.
    pub unpaired_lost: u64,
    pub reader_cpu_ns: u64,
    pub output: PathBuf,
    pub disks: Vec<TenantDisk>,
    pub unavailable: Vec<String>,
}

impl ontime_core::export::TextReport for IoRecordSummary {
    fn text(&self) -> String {
        use ontime_core::duration::format_ns;
        let span = self.end_ns.saturating_sub(self.start_ns);
        format!(
            "recorded {} I/O events in {} ({} lost, of them {} starts not remembered) to {}\nrecorder cost: {:.3}% of one core (reader only)\n{}",
            self.events,
            format_ns(span),
            self.lost,
            self.unpaired_lost,
            self.output.display(),
            self.reader_cpu_ns as f64 / span.max(1) as f64 * 100.0,
            crate::recorder::unavailable_text(&self.unavailable)
        )
    }
}

/// The tenants' virtual disks: each image's loop device and the disk
/// under it; a block device given as the image (a guest's /dev/vda, seen
/// from inside the guest) is the virtual disk itself, with nothing under
/// it that this kernel sees.
pub fn tenant_disks(images: &[(u32, PathBuf)]) -> Result<Vec<TenantDisk>> {
    let mut disks = Vec::new();
    for (group, image) in images {
        if let Some(dev) = BlockDevice::of_node(image) {
            disks.push(TenantDisk {
                group: *group,
                image: image.clone(),
                loop_device: Some(dev),
                direct: false,
                physical: None,
                partition_start: 0,
                image_file: None,
                aio: Default::default(),
            });
            continue;
        }
        let Some((loop_device, direct)) = loop_device_of(image) else {
            bail!(
                "{} is not attached to a loop device; attach it with `losetup --find --show {}` and mount it in the tenant",
                image.display(),
                image.display()
            );
        };
        let (physical, partition_start) = match disk_under(image) {
            Some((d, s)) => (Some(d), s),
            None => (None, 0),
        };
        disks.push(TenantDisk {
            group: *group,
            image: image.clone(),
            loop_device: Some(loop_device),
            direct,
            physical,
            partition_start,
            image_file: None,
            aio: Default::default(),
        });
    }
    Ok(disks)
}

#[cfg(feature = "bpf")]
pub use self::bpf_record::record;

#[cfg(not(feature = "bpf"))]
pub fn record(
    _opts: &IoRecordOptions,
    _stop: &AtomicBool,
    _duration: Option<Duration>,
    _ready: &mut dyn FnMut(u64),
) -> Result<IoRecordSummary> {
    bail!("this ontime was built without BPF (feature `bpf`); I/O recording needs it")
}

#[cfg(feature = "bpf")]
mod bpf_record {
    use super::*;
    use crate::io_skel::{IoSkel, IoSkelBuilder};
    use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
    use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder};
    use std::cell::RefCell;
    use std::mem::MaybeUninit;
    use std::rc::Rc;

    /// Events (bytes in the recording's layout) and opened files.
    type Staged = (Vec<u8>, Vec<IoFile>);

    fn device_counters(skel: &IoSkel, devs: &[u32]) -> Vec<DeviceCounters> {
        let mut out = Vec::new();
        for &dev in devs {
            let mut c = DeviceCounters {
                dev,
                kernel: DiskStat::of_device(dev),
                ..Default::default()
            };
            // No entry yet: no bio on the device since recording began.
            if let Ok(Some(per_cpu)) = skel.maps.dev_counts.lookup_percpu(&dev.to_ne_bytes(), MapFlags::ANY) {
                for v in per_cpu.iter().filter_map(|v| DevCounts::from_bytes(v)) {
                    c.bios += v.bios;
                    c.bio_bytes += v.bio_bytes;
                    c.merges += v.merges;
                    c.splits += v.splits;
                }
            }
            out.push(c);
        }
        out
    }

    /// The tenants' cgroups created since the last call, into the filter.
    fn add_cgroups(skel: &IoSkel, targets: &Targets, known: &mut HashMap<u64, u32>) -> Result<()> {
        for (id, group) in targets::new_cgroup_ids(targets, known) {
            skel.maps
                .tracked_cgroups
                .update(&id.to_ne_bytes(), &group.to_ne_bytes(), MapFlags::ANY)
                .context("adding a cgroup to the BPF filter")?;
        }
        Ok(())
    }

    /// I/O events, opened files and the caches' state as one capture of
    /// the recording loop.
    struct IoCapture<'a, 'obj> {
        skel: IoSkel<'obj>,
        ring: libbpf_rs::RingBuffer<'static>,
        staged: Rc<RefCell<Staged>>,
        writer: Writer,
        targets: &'a Targets,
        images: Vec<(u32, Option<std::fs::File>)>,
        memory: Vec<MemoryCgroup>,
        watched: Vec<u32>,
        merges: bool,
        cgroup_ids: HashMap<u64, u32>,
        files_seen: HashSet<(u32, u64)>,
        new_files: Vec<IoFile>,
        states: Vec<IoState>,
        last_state: MonoNs,
        state_every_ns: u64,
        events: u64,
        /// The application layer's counters (without per-call tracing).
        apps: Option<crate::io_app::AppCounterReader>,
    }

    impl IoCapture<'_, '_> {
        /// Asynchronous requests begun and never seen to complete, staged
        /// as events marked unpaired, at the size they asked for: in flight
        /// at the end, or completed in a context whose events the host
        /// hides (an interrupt that came while a thread the host keeps out
        /// of tracing ran). Dropped, they would vanish from the counts.
        fn unfinished_async(&mut self) {
            let map = &self.skel.maps.async_pending;
            let mut s = self.staged.borrow_mut();
            for key in map.keys() {
                let Ok(Some(v)) = map.lookup(&key, MapFlags::ANY) else {
                    continue;
                };
                let Some(mut e) = IoEvent::from_bytes(&v) else { continue };
                if e.kind == 0 || e.dev == 0 {
                    continue;
                }
                e.flags |= ontime_recording::io_abi::F_UNPAIRED;
                e.ret = 0;
                e.latency = 0;
                s.0.extend_from_slice(&e.to_bytes());
            }
        }
    }

    /// What the tracked groups' exited threads did (the exit program's
    /// sums), per group index.
    fn exited_io(skel: &IoSkel, groups: usize) -> HashMap<u32, crate::io_app::ThreadIo> {
        (0..groups as u32)
            .filter_map(|g| {
                let v = skel.maps.exited_io.lookup(&g.to_ne_bytes(), MapFlags::ANY).ok()??;
                let c = AppCounts::from_bytes(&v)?;
                Some((
                    g,
                    crate::io_app::ThreadIo {
                        rchar: c.rchar,
                        wchar: c.wchar,
                        syscr: c.syscr,
                        syscw: c.syscw,
                    },
                ))
            })
            .collect()
    }

    impl IoCapture<'_, '_> {
        /// The caches, devices and application counters now.
        fn state(&mut self) -> IoState {
            let apps = match self.apps.as_mut() {
                Some(r) => {
                    let exited = exited_io(&self.skel, self.targets.groups.len());
                    r.sample(self.targets, &exited)
                }
                None => Vec::new(),
            };
            IoState {
                apps,
                ts: MonoNs::now().0,
                images: self
                    .images
                    .iter()
                    .filter_map(|(g, f)| {
                        let cs = f.as_ref().and_then(cachestat)?;
                        Some(ImageCache {
                            group: *g,
                            cache: cs[0],
                            dirty: cs[1],
                            writeback: cs[2],
                            evicted: cs[3],
                            recently_evicted: cs[4],
                        })
                    })
                    .collect(),
                memory: self
                    .memory
                    .iter()
                    .filter_map(|m| memory_state(m.group, &m.path))
                    .collect(),
                devices: if self.merges {
                    device_counters(&self.skel, &self.watched)
                } else {
                    Vec::new()
                },
            }
        }
    }

    impl crate::pipeline::Capture for IoCapture<'_, '_> {
        fn wait(&mut self, timeout: Duration) {
            let _ = self.ring.poll(timeout);
        }

        fn stop(&mut self, _end: MonoNs) {
            // Detaching two dozen tracepoint links takes over a second: a
            // flag the programs check stops them at once.
            if let Some(data) = self.skel.maps.data_data.as_deref_mut() {
                data.enabled = false;
            }
            // A program past its check when the flag fell finishes within
            // microseconds; let it land before the last drain.
            std::thread::sleep(Duration::from_millis(2));
        }

        fn drain(&mut self, finishing: bool) -> Result<()> {
            self.ring.consume().context("draining the BPF I/O ring")?;
            if finishing {
                self.unfinished_async();
            }
            {
                let mut s = self.staged.borrow_mut();
                self.events += (s.0.len() / IO_EVENT_SIZE) as u64;
                self.writer.io_events(&s.0)?;
                s.0.clear();
                for f in s.1.drain(..) {
                    if self.files_seen.insert((f.dev, f.ino)) {
                        self.new_files.push(f);
                    }
                }
            }
            self.writer.io_files(&self.new_files)?;
            self.new_files.clear();
            let now = MonoNs::now();
            if finishing || now.since(self.last_state) >= self.state_every_ns {
                self.last_state = now;
                let st = self.state();
                self.states.push(st);
                self.writer.io_state(&self.states)?;
                self.states.clear();
            }
            self.writer.flush()?;
            Ok(())
        }

        fn rescan(&mut self) -> Result<()> {
            add_cgroups(&self.skel, self.targets, &mut self.cgroup_ids)
        }
    }

    /// Records until `stop` or `duration`; `ready` is called once attached.
    pub fn record(
        opts: &IoRecordOptions,
        stop: &AtomicBool,
        duration: Option<Duration>,
        ready: &mut dyn FnMut(u64),
    ) -> Result<IoRecordSummary> {
        let targets = &opts.targets;
        let root = CgroupRoot::detect().ok();
        if targets.groups.iter().any(|g| !g.cgroups.is_empty()) && root.is_none() {
            CgroupRoot::detect()?;
        }
        let mut unavailable = Vec::new();
        let calls = opts.app_layer == AppLayer::Calls;
        let mut disks = tenant_disks(&opts.images)?;
        disks.extend(opts.guest_disks.iter().cloned());
        let vmm = |m: VmmAio| disks.iter().any(|d| d.loop_device.is_none() && d.aio == m);
        if !calls && disks.iter().any(TenantDisk::vmm_thread_pool) {
            unavailable.push(
                "a QEMU guest's virtual disk through its thread pool (its QEMU's preadv/pwritev on the image, all of them with aio=threads, the misaligned ones with cache=none: record with --calls)"
                    .into(),
            );
        }
        for d in disks.iter().filter(|d| d.loop_device.is_none()) {
            unavailable.push(format!(
                "the application layer inside guest {} (from the host only its QEMU's requests on the image are seen)",
                targets.groups.get(d.group as usize).map_or("?", |g| g.name.as_str())
            ));
        }
        if !opts.merges {
            unavailable.push("bios, merges and splits per disk (record with --merges)".into());
        }
        let mut memory = Vec::new();
        if let Some(root) = &root {
            for (gi, g) in targets.groups.iter().enumerate() {
                // A QEMU guest's cgroup holds its VMM, whose page cache is
                // the host cache of its images, not the guest cache.
                if disks.iter().any(|d| d.group == gi as u32 && d.loop_device.is_none()) {
                    continue;
                }
                if let Some(path) = g.cgroups.first().and_then(|c| memory_cgroup_of(c, root)) {
                    memory.push(MemoryCgroup { group: gi as u32, path });
                }
            }
        }

        // libbpf attaches tracepoint programs through tracefs event ids.
        let tracefs = crate::tracefs::Tracefs::ensure("block/block_bio_queue", "the block tracepoints (CONFIG_BLOCK)")?;
        // A VMM's asynchronous I/O has hooks of its own, loaded only for
        // guests that use it.
        let uring = vmm(VmmAio::IoUring) && crate::io_async::uring_tracepoints(tracefs.path());
        if vmm(VmmAio::IoUring) && !uring {
            unavailable.push(
                "QEMU's io_uring requests (aio=io_uring): this kernel has no io_uring tracepoints (Linux 5.19 and later with CONFIG_IO_URING)"
                    .into(),
            );
        }
        let aio_flags = if vmm(VmmAio::Native) {
            crate::io_async::iocb_flags(tracefs.path())
        } else {
            None
        };
        if vmm(VmmAio::Native) && aio_flags.is_none() {
            unavailable.push(
                "QEMU's Linux AIO requests (aio=native): this kernel's direct I/O tracepoint does not mark Linux AIO (IOCB_AIO_RW, Linux 6.8 and later)"
                    .into(),
            );
        }
        for d in disks
            .iter()
            .filter(|d| d.loop_device.is_none() && d.aio == VmmAio::Native)
        {
            if let Some(why) = crate::io_async::aio_unseen_on(&d.image) {
                unavailable.push(format!("QEMU's Linux AIO requests on {} ({why})", d.image.display()));
            }
        }
        let mut object = MaybeUninit::uninit();
        let mut open = IoSkelBuilder::default()
            .open(&mut object)
            .context("opening the BPF I/O probes failed")?;
        {
            use libbpf_rs::skel::OpenSkel as _;
            for mut prog in open.open_object_mut().progs_mut() {
                let name = prog.name().to_string_lossy().into_owned();
                let syscall = name.starts_with("enter_") || name.starts_with("exit_");
                // Either every call, or each thread's counters and its
                // exit; the block layer either way.
                let exit = name == "task_exit";
                let bio = name.starts_with("bio_");
                let uring_prog = name.starts_with("uring_");
                let aio_prog = name.starts_with("aio_");
                if (syscall && !calls)
                    || (exit && calls)
                    || (bio && !opts.merges)
                    || (uring_prog && !uring)
                    || (aio_prog && aio_flags.is_none())
                {
                    prog.set_autoload(false);
                }
            }
        }
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.cgroup_v1 = root.as_ref().map(|r| r.v1).unwrap_or(false);
            ro.wakeup_threshold = 8 << 20;
            if let Some(f) = aio_flags {
                ro.iocb_aio_rw = f.aio_rw;
                ro.iocb_write = f.write;
            }
        }
        let skel =
            open.load().map_err(|e| {
                anyhow::anyhow!(
                "loading the BPF I/O probes failed: {e}. They need root (CAP_BPF and CAP_PERFMON), a kernel with BTF{}",
                if calls { " and the syscall tracepoints (CONFIG_FTRACE_SYSCALLS)" } else { "" }
            )
            })?;
        for (gi, g) in targets.groups.iter().enumerate() {
            for &pid in &g.pids {
                skel.maps
                    .tracked_tgids
                    .update(&pid.to_ne_bytes(), &(gi as u32).to_ne_bytes(), MapFlags::ANY)
                    .context("adding a process to the BPF filter")?;
            }
        }
        let mut watched: Vec<u32> = Vec::new();
        for d in &disks {
            let mut add = |dev: u32, layer: u32| -> Result<()> {
                if !watched.contains(&dev) {
                    watched.push(dev);
                }
                skel.maps
                    .devices
                    .update(&dev.to_ne_bytes(), &layer.to_ne_bytes(), MapFlags::ANY)
                    .context("adding a device to the BPF filter")
            };
            if let Some(l) = &d.loop_device {
                add(l.dev, LAYER_VIRTUAL)?;
            }
            match &d.physical {
                Some(p) => add(p.dev, LAYER_PHYSICAL)?,
                None if d.image.starts_with("/dev") => unavailable.push(format!(
                    "physical layer under {} (a block device whose backing this kernel does not see: a guest's disk is a file or device on its host)",
                    d.image.display()
                )),
                None => unavailable.push(format!(
                    "physical layer of {} (its file system has no block device)",
                    d.image.display()
                )),
            }
        }
        let mut cgroup_ids: HashMap<u64, u32> = HashMap::new();
        add_cgroups(&skel, targets, &mut cgroup_ids)?;
        // The counters each living thread starts from: the exit program
        // subtracts them, the reader too.
        let apps = (!calls).then(|| crate::io_app::AppCounterReader::start(targets));
        for (tid, io) in apps.iter().flat_map(|a| a.baselines()) {
            let v = AppCounts {
                rchar: io.rchar,
                wchar: io.wchar,
                syscr: io.syscr,
                syscw: io.syscw,
            }
            .to_bytes();
            skel.maps
                .io_baseline
                .update(&tid.to_ne_bytes(), &v, MapFlags::ANY)
                .context("giving the BPF exit counter a thread's baseline")?;
        }

        let staged: Rc<RefCell<Staged>> = Rc::new(RefCell::new((Vec::with_capacity(1 << 20), Vec::new())));
        let staged_cb = staged.clone();
        let mut rb = RingBufferBuilder::new();
        rb.add(&skel.maps.events, move |data: &[u8]| {
            let Some(e) = IoEvent::from_bytes(data) else { return 0 };
            let mut s = staged_cb.borrow_mut();
            if e.kind == io_kind::OPENAT {
                if let Some(raw) = data.get(IO_EVENT_SIZE..IO_EVENT_SIZE + IO_PATH_MAX) {
                    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
                    s.1.push(IoFile {
                        dev: e.dev,
                        ino: e.ino,
                        path: String::from_utf8_lossy(&raw[..end]).into_owned(),
                        group: e.group,
                    });
                }
            }
            s.0.extend_from_slice(&data[..IO_EVENT_SIZE]);
            0
        })?;
        let ring = rb.build()?;

        let images: Vec<(u32, Option<std::fs::File>)> = disks
            .iter()
            .map(|d| (d.group, std::fs::File::open(&d.image).ok()))
            .collect();
        let cachestat_works = images.iter().any(|(_, f)| f.as_ref().and_then(cachestat).is_some());
        if !disks.is_empty() && !cachestat_works {
            unavailable.push("cachestat(2) on the images (Linux 6.5 and later): no host cache sizes".into());
        }
        let extents_at_start: Vec<Vec<Extent>> = disks
            .iter()
            .map(|d| extents_of(&d.image, d.partition_start).unwrap_or_default())
            .collect();

        let _tracefs = (
            tracefs,
            if calls {
                crate::tracefs::Tracefs::ensure(
                    "syscalls/sys_enter_read",
                    "the syscall tracepoints (CONFIG_FTRACE_SYSCALLS)",
                )?
            } else {
                crate::tracefs::Tracefs::ensure("sched/sched_process_exit", "the scheduler tracepoints")?
            },
        );
        let mut skel = skel;
        skel.attach().with_context(|| {
            format!(
                "attaching the BPF I/O probes to the {} and block tracepoints failed",
                if calls { "syscall" } else { "process exit" }
            )
        })?;
        let start = MonoNs::now();
        let until = duration.map(|d| start.add_ns(d.as_nanos() as u64));
        let groups: Vec<Group> = targets
            .groups
            .iter()
            .map(|g| Group {
                name: g.name.clone(),
                kind: GroupKind::Tenant,
                source: g.source.clone(),
                vcpu_names: false,
            })
            .collect();
        let meta = Meta {
            unavailable: unavailable.clone(),
            io: Some(IoMeta {
                disks: disks.clone(),
                memory: memory.clone(),
                state_every_ns: opts.state_every.as_nanos() as u64,
                cachestat: cachestat_works,
                app_layer: opts.app_layer,
            }),
            ..Meta::of_this_host("bpf", start.0, groups)
        };
        let writer = Writer::create(&opts.output, &meta)?;
        let cpu_before = crate::source::thread_cpu_ns();
        ready(start.0);

        let state_every_ns = opts.state_every.as_nanos() as u64;
        let mut cap = IoCapture {
            skel,
            ring,
            staged,
            writer,
            targets,
            images,
            memory,
            watched,
            merges: opts.merges,
            cgroup_ids,
            files_seen: HashSet::new(),
            new_files: Vec::new(),
            states: Vec::new(),
            last_state: start,
            state_every_ns,
            events: 0,
            apps,
        };
        let first = cap.state();
        cap.states.push(first);
        crate::pipeline::drive(&mut [&mut cap], stop, until, opts.drain_every)?;
        let IoCapture {
            mut skel,
            mut writer,
            events,
            ..
        } = cap;
        let end = MonoNs::now();
        let reader_cpu_ns = crate::source::thread_cpu_ns().saturating_sub(cpu_before);
        skel.links = Default::default();
        let layout = IoLayout {
            images: disks
                .iter()
                .zip(extents_at_start)
                .map(|(d, mut before)| {
                    before.extend(extents_of(&d.image, d.partition_start).unwrap_or_default());
                    ImageExtents {
                        group: d.group,
                        extents: merge_extents(before),
                    }
                })
                .collect(),
        };
        writer.io_layout(&layout)?;
        // A program the kernel skips because a BPF program already runs on
        // that CPU (a block completion's hardirq inside the softirq that
        // completes requests; a system call's tracepoint during another
        // program) records nothing: each skip is an event lost, as a full
        // ring's are.
        let skipped: u64 = skel.object().progs().map(|p| crate::bpf::recursion_misses(&p)).sum();
        let unpaired_lost = crate::bpfmap::percpu_sum(&skel.maps.lost, 1);
        // A call or request whose start found no room is never recorded
        // when it ends: an event lost like the others.
        let lost = crate::bpfmap::percpu_sum(&skel.maps.lost, 0) + skipped + unpaired_lost;
        writer.finish(&End {
            end_ns: end.0,
            events,
            lost,
            store_ns: None,
        })?;
        Ok(IoRecordSummary {
            start_ns: start.0,
            end_ns: end.0,
            events,
            lost,
            unpaired_lost,
            reader_cpu_ns,
            output: opts.output.clone(),
            disks,
            unavailable,
        })
    }
}

/// The layout build.rs generated from `io_event.h` (and so the offsets the
/// codec reads) is the one the compiler gave the same structs in the BPF
/// object (the skeleton's twins, from its BTF).
#[cfg(all(test, feature = "bpf"))]
mod layout_tests {
    use super::{AppCounts, DevCounts, IoEvent, APP_COUNTS_SIZE, DEV_COUNTS_SIZE, IO_EVENT_SIZE};
    use crate::io_skel::types::{app_counts, dev_counts, io_event};
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_generated_layout_is_the_compilers() {
        assert_eq!(size_of::<io_event>(), IO_EVENT_SIZE);
        let at = [
            (offset_of!(io_event, ts), offset_of!(IoEvent, ts)),
            (offset_of!(io_event, latency), offset_of!(IoEvent, latency)),
            (offset_of!(io_event, offset), offset_of!(IoEvent, offset)),
            (offset_of!(io_event, ino), offset_of!(IoEvent, ino)),
            (offset_of!(io_event, ret), offset_of!(IoEvent, ret)),
            (offset_of!(io_event, bytes), offset_of!(IoEvent, bytes)),
            (offset_of!(io_event, tid), offset_of!(IoEvent, tid)),
            (offset_of!(io_event, dev), offset_of!(IoEvent, dev)),
            (offset_of!(io_event, group), offset_of!(IoEvent, group)),
            (offset_of!(io_event, fd), offset_of!(IoEvent, fd)),
            (offset_of!(io_event, cpu), offset_of!(IoEvent, cpu)),
            (offset_of!(io_event, kind), offset_of!(IoEvent, kind)),
            (offset_of!(io_event, flags), offset_of!(IoEvent, flags)),
            (offset_of!(io_event, rwbs), offset_of!(IoEvent, rwbs)),
        ];
        for (compiled, generated) in at {
            assert_eq!(compiled, generated);
        }
        assert_eq!(size_of::<dev_counts>(), DEV_COUNTS_SIZE);
        let at = [
            (offset_of!(dev_counts, bios), offset_of!(DevCounts, bios)),
            (offset_of!(dev_counts, bio_bytes), offset_of!(DevCounts, bio_bytes)),
            (offset_of!(dev_counts, merges), offset_of!(DevCounts, merges)),
            (offset_of!(dev_counts, splits), offset_of!(DevCounts, splits)),
        ];
        for (compiled, generated) in at {
            assert_eq!(compiled, generated);
        }
        assert_eq!(size_of::<app_counts>(), APP_COUNTS_SIZE);
        let at = [
            (offset_of!(app_counts, rchar), offset_of!(AppCounts, rchar)),
            (offset_of!(app_counts, wchar), offset_of!(AppCounts, wchar)),
            (offset_of!(app_counts, syscr), offset_of!(AppCounts, syscr)),
            (offset_of!(app_counts, syscw), offset_of!(AppCounts, syscw)),
        ];
        for (compiled, generated) in at {
            assert_eq!(compiled, generated);
        }
    }
}
