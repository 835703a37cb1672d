//! I/O capture at three layers (document 004): the I/O event of
//! `bpf/io.bpf.c`, what a recording watched ([`IoMeta`]: each tenant's
//! image file, loop device and the disk under the image), the cache and
//! memory state sampled beside the events ([`IoState`]), where the images
//! lie on the disk ([`IoLayout`], so physical requests are charged to the
//! tenant whose image they touch) and the recorder itself ([`record`]).
//!
//! Interpretation (absorption per layer, splits and merges) is ontime-io's.
use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ontime_core::time::MonoNs;
use serde::{Deserialize, Serialize};

use crate::recording::{End, Group, GroupKind, Meta, Writer};
use crate::targets::{self, CgroupRoot, Targets};

/// Kinds of I/O event (`enum io_kind` in bpf/io_event.h).
pub mod io_kind {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const PREAD: u8 = 3;
    pub const PWRITE: u8 = 4;
    pub const READV: u8 = 5;
    pub const WRITEV: u8 = 6;
    pub const FSYNC: u8 = 7;
    pub const FDATASYNC: u8 = 8;
    pub const OPENAT: u8 = 9;
    pub const BLOCK: u8 = 16;
}

/// No tenant (block events; IO_NO_GROUP).
pub const NO_GROUP: u32 = u32::MAX;
/// The file was opened with O_DIRECT.
pub const F_DIRECT: u8 = 1;
/// A block request completed whose issue was not seen.
pub const F_UNPAIRED: u8 = 2;
/// `struct io_event`.
pub const IO_EVENT_SIZE: usize = 72;
const IO_PATH_MAX: usize = 128;
/// The layers of `devices` in io.bpf.c.
const LAYER_VIRTUAL: u32 = 1;
const LAYER_PHYSICAL: u32 = 2;

/// One I/O: a system call of a tenant on a regular file, or a block
/// request on a watched device. Layout: bpf/io_event.h.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoEvent {
    /// Completion, CLOCK_MONOTONIC.
    pub ts: u64,
    pub latency: u64,
    /// File position before the call, or byte address on the device.
    pub offset: u64,
    pub ino: u64,
    /// Return value of the call (bytes moved, or -errno); the request's error.
    pub ret: i64,
    /// Bytes asked for, or the request's size.
    pub bytes: u32,
    pub tid: u32,
    /// Kernel encoding, major << 20 | minor.
    pub dev: u32,
    pub group: u32,
    pub fd: u32,
    pub cpu: u16,
    pub kind: u8,
    pub flags: u8,
    pub rwbs: [u8; 8],
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

impl IoEvent {
    pub fn from_bytes(b: &[u8]) -> Option<IoEvent> {
        if b.len() < IO_EVENT_SIZE {
            return None;
        }
        let mut rwbs = [0u8; 8];
        rwbs.copy_from_slice(&b[64..72]);
        Some(IoEvent {
            ts: u64_at(b, 0),
            latency: u64_at(b, 8),
            offset: u64_at(b, 16),
            ino: u64_at(b, 24),
            ret: u64_at(b, 32) as i64,
            bytes: u32_at(b, 40),
            tid: u32_at(b, 44),
            dev: u32_at(b, 48),
            group: u32_at(b, 52),
            fd: u32_at(b, 56),
            cpu: u16::from_le_bytes([b[60], b[61]]),
            kind: b[62],
            flags: b[63],
            rwbs,
        })
    }

    pub fn to_bytes(&self) -> [u8; IO_EVENT_SIZE] {
        let mut b = [0u8; IO_EVENT_SIZE];
        b[0..8].copy_from_slice(&self.ts.to_le_bytes());
        b[8..16].copy_from_slice(&self.latency.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.ino.to_le_bytes());
        b[32..40].copy_from_slice(&self.ret.to_le_bytes());
        b[40..44].copy_from_slice(&self.bytes.to_le_bytes());
        b[44..48].copy_from_slice(&self.tid.to_le_bytes());
        b[48..52].copy_from_slice(&self.dev.to_le_bytes());
        b[52..56].copy_from_slice(&self.group.to_le_bytes());
        b[56..60].copy_from_slice(&self.fd.to_le_bytes());
        b[60..62].copy_from_slice(&self.cpu.to_le_bytes());
        b[62] = self.kind;
        b[63] = self.flags;
        b[64..72].copy_from_slice(&self.rwbs);
        b
    }

    /// What the I/O did, for counting bytes.
    pub fn op(&self) -> IoOp {
        use io_kind::*;
        match self.kind {
            READ | PREAD | READV => IoOp::Read,
            WRITE | PWRITE | WRITEV => IoOp::Write,
            FSYNC | FDATASYNC => IoOp::Sync,
            OPENAT => IoOp::Open,
            BLOCK => match self.rwbs.iter().find(|c| c.is_ascii_alphabetic()) {
                Some(b'R') => IoOp::Read,
                Some(b'W') => IoOp::Write,
                Some(b'F') if self.rwbs.contains(&b'W') => IoOp::Write,
                Some(b'F') => IoOp::Sync,
                Some(b'D') => IoOp::Discard,
                _ => IoOp::Other,
            },
            _ => IoOp::Other,
        }
    }

    /// Bytes the I/O moved: a call's return value, a request's size.
    pub fn moved(&self) -> u64 {
        if self.kind == io_kind::BLOCK {
            if self.ret == 0 {
                self.bytes as u64
            } else {
                0
            }
        } else {
            self.ret.max(0) as u64
        }
    }

    pub fn is_block(&self) -> bool {
        self.kind == io_kind::BLOCK
    }

    pub fn rwbs_str(&self) -> String {
        let end = self.rwbs.iter().position(|&c| c == 0).unwrap_or(8);
        String::from_utf8_lossy(&self.rwbs[..end]).into_owned()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum IoOp {
    Read,
    Write,
    Sync,
    Open,
    Discard,
    Other,
}

/// A block device in the kernel's dev_t encoding (major << 20 | minor, as
/// the block tracepoints and `s_dev` carry it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BlockDevice {
    pub dev: u32,
    /// Its name under /sys/block ("loop3", "vda").
    pub name: String,
}

impl BlockDevice {
    fn from_major_minor(major: u32, minor: u32) -> Option<BlockDevice> {
        let dir = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
        let name = dir.file_name()?.to_string_lossy().into_owned();
        Some(BlockDevice {
            dev: (major << 20) | minor,
            name,
        })
    }

    pub fn major_minor(&self) -> (u32, u32) {
        (self.dev >> 20, self.dev & 0xfffff)
    }
}

/// A tenant's virtual disk: image file, loop device, the disk under it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TenantDisk {
    pub group: u32,
    pub image: PathBuf,
    /// The virtual disk (the guest's block layer).
    pub loop_device: BlockDevice,
    /// The loop device bypasses the host page cache (`losetup --direct-io`).
    pub direct: bool,
    /// The whole disk under the image file; None when the image is on a
    /// file system without one (tmpfs, overlay).
    pub physical: Option<BlockDevice>,
    /// Where the image's file system starts on `physical` (its partition), bytes.
    pub partition_start: u64,
}

/// A tenant's memory cgroup: the "guest cache" is its page cache.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryCgroup {
    pub group: u32,
    pub path: PathBuf,
}

/// What an I/O recording watched.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoMeta {
    pub disks: Vec<TenantDisk>,
    pub memory: Vec<MemoryCgroup>,
    /// How often cache and memory state was sampled, ns.
    pub state_every_ns: u64,
    /// cachestat(2) worked on the images (Linux 6.5 and later).
    pub cachestat: bool,
}

/// A file a tenant opened, named by the path it gave.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IoFile {
    pub dev: u32,
    pub ino: u64,
    pub path: String,
    pub group: u32,
}

/// The host page cache's hold on one image (cachestat(2), in pages).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageCache {
    pub group: u32,
    pub cache: u64,
    pub dirty: u64,
    pub writeback: u64,
    pub evicted: u64,
    pub recently_evicted: u64,
}

/// A tenant's memory cgroup, bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemoryState {
    pub group: u32,
    /// Page cache (the guest cache).
    pub file: u64,
    pub anon: u64,
    pub dirty: u64,
    pub writeback: u64,
    pub swap: u64,
    /// Memory limit, when set.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Bios queued, merged and split on a device since recording began.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceCounters {
    pub dev: u32,
    pub bios: u64,
    pub bio_bytes: u64,
    pub merges: u64,
    pub splits: u64,
}

/// One sample of cache, memory and block counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoState {
    pub ts: u64,
    pub images: Vec<ImageCache>,
    pub memory: Vec<MemoryState>,
    pub devices: Vec<DeviceCounters>,
}

/// A run of an image file on its disk, bytes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    /// Byte address on the whole disk (partition start included).
    pub physical: u64,
    pub len: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ImageExtents {
    pub group: u32,
    pub extents: Vec<Extent>,
}

/// Where the images lie on their disks: the union of what FIEMAP said at
/// the start and at the end of the recording.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoLayout {
    pub images: Vec<ImageExtents>,
}

impl IoLayout {
    /// The tenant whose image holds byte `addr` of `dev`, if any.
    pub fn owner(&self, meta: &IoMeta, dev: u32, addr: u64) -> Option<u32> {
        for img in &self.images {
            let on_dev = meta
                .disks
                .iter()
                .any(|d| d.group == img.group && d.physical.as_ref().is_some_and(|p| p.dev == dev));
            if !on_dev {
                continue;
            }
            let i = img.extents.partition_point(|e| e.physical + e.len <= addr);
            if img.extents.get(i).is_some_and(|e| e.physical <= addr) {
                return Some(img.group);
            }
        }
        None
    }
}

/// An attached loop device and the file behind it.
#[derive(Clone, Debug)]
pub struct LoopDevice {
    pub device: BlockDevice,
    pub backing: PathBuf,
    /// It bypasses the host page cache (`losetup --direct-io`).
    pub direct: bool,
}

/// Every attached loop device (/sys/block/loop*/loop).
pub fn loop_devices() -> Vec<LoopDevice> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).map(|s| s.trim().to_string());
        let (Ok(backing), Ok(devnum)) = (read("loop/backing_file"), read("dev")) else {
            continue;
        };
        let Some((ma, mi)) = devnum.split_once(':') else {
            continue;
        };
        let (Ok(ma), Ok(mi)) = (ma.parse::<u32>(), mi.parse::<u32>()) else {
            continue;
        };
        out.push(LoopDevice {
            device: BlockDevice {
                dev: (ma << 20) | mi,
                name,
            },
            backing: PathBuf::from(backing),
            direct: read("loop/dio").is_ok_and(|d| d == "1"),
        });
    }
    out
}

/// The loop device whose backing file is `image`.
pub fn loop_device_of(image: &Path) -> Option<(BlockDevice, bool)> {
    let want = std::fs::canonicalize(image).ok()?;
    loop_devices()
        .into_iter()
        .find(|l| l.backing == want)
        .map(|l| (l.device, l.direct))
}

/// The whole disk holding the file system `file` is on, and where that
/// file system's partition starts on it (bytes).
pub fn disk_under(file: &Path) -> Option<(BlockDevice, u64)> {
    use std::os::unix::fs::MetadataExt;
    let st = std::fs::metadata(file).ok()?.dev();
    let (major, minor) = (libc::major(st), libc::minor(st));
    if major == 0 {
        return None;
    }
    let dir = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    if dir.join("partition").exists() {
        let start: u64 = std::fs::read_to_string(dir.join("start")).ok()?.trim().parse().ok()?;
        let parent = dir.parent()?;
        let devnum = std::fs::read_to_string(parent.join("dev")).ok()?;
        let (ma, mi) = devnum.trim().split_once(':')?;
        let disk = BlockDevice::from_major_minor(ma.parse().ok()?, mi.parse().ok()?)?;
        Some((disk, start * 512))
    } else {
        Some((BlockDevice::from_major_minor(major, minor)?, 0))
    }
}

/// The extents of `path` by FIEMAP, physical addresses shifted by `base`.
pub fn extents_of(path: &Path, base: u64) -> Result<Vec<Extent>> {
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const BATCH: usize = 256;
    const LAST: u32 = 1;
    // struct fiemap (32 bytes) then BATCH struct fiemap_extent (56 bytes).
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut out = Vec::new();
    let mut start = 0u64;
    let mut buf = vec![0u64; (32 + BATCH * 56) / 8];
    loop {
        buf.iter_mut().for_each(|w| *w = 0);
        buf[0] = start;
        buf[1] = u64::MAX - start;
        // fm_flags = 0, fm_mapped_extents = 0 | fm_extent_count = BATCH
        buf[2] = 0;
        buf[3] = BATCH as u64;
        // SAFETY: buf is large enough for the header and BATCH extents.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_FIEMAP, buf.as_mut_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("FIEMAP on {}", path.display()));
        }
        let mapped = (buf[2] >> 32) as usize;
        if mapped == 0 {
            break;
        }
        let mut done = false;
        for i in 0..mapped.min(BATCH) {
            let w = (32 + i * 56) / 8;
            let (logical, physical, len) = (buf[w], buf[w + 1], buf[w + 2]);
            let flags = (buf[w + 5] & 0xffff_ffff) as u32;
            out.push(Extent {
                logical,
                physical: physical + base,
                len,
            });
            start = logical + len;
            done |= flags & LAST != 0;
        }
        if done {
            break;
        }
    }
    Ok(out)
}

/// Joins extents into sorted, non-overlapping runs of the disk.
fn merge_extents(mut v: Vec<Extent>) -> Vec<Extent> {
    v.sort_by_key(|e| e.physical);
    let mut out: Vec<Extent> = Vec::with_capacity(v.len());
    for e in v {
        if let Some(last) = out.last_mut() {
            if e.physical <= last.physical + last.len {
                let end = (e.physical + e.len).max(last.physical + last.len);
                last.len = end - last.physical;
                continue;
            }
        }
        out.push(e);
    }
    out
}

/// cachestat(2) over the whole file; None where the kernel lacks it.
pub fn cachestat(file: &std::fs::File) -> Option<[u64; 5]> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        const SYS_CACHESTAT: libc::c_long = 451;
        let range = [0u64, 0u64];
        let mut cs = [0u64; 5];
        // SAFETY: range and cs match struct cachestat_range and struct cachestat.
        let rc = unsafe { libc::syscall(SYS_CACHESTAT, file.as_raw_fd(), range.as_ptr(), cs.as_mut_ptr(), 0u32) };
        (rc == 0).then_some(cs)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = file;
        None
    }
}

/// A memory cgroup's page cache, anonymous memory, dirty, writeback and
/// swap, from memory.stat (v1 or v2 names).
pub fn memory_state(group: u32, dir: &Path) -> Option<MemoryState> {
    let text = std::fs::read_to_string(dir.join("memory.stat")).ok()?;
    let mut m = MemoryState {
        group,
        ..Default::default()
    };
    let mut v2_swap = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(' ') else { continue };
        let Ok(v) = v.trim().parse::<u64>() else { continue };
        match k {
            "cache" | "file" => m.file = v,
            "rss" | "anon" => m.anon = v,
            "dirty" | "file_dirty" => m.dirty = v,
            "writeback" | "file_writeback" => m.writeback = v,
            "swap" => m.swap = v,
            _ => {}
        }
    }
    if let Ok(s) = std::fs::read_to_string(dir.join("memory.swap.current")) {
        v2_swap = s.trim().parse().ok();
    }
    if let Some(s) = v2_swap {
        m.swap = s;
    }
    let limit = std::fs::read_to_string(dir.join("memory.limit_in_bytes"))
        .or_else(|_| std::fs::read_to_string(dir.join("memory.max")))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    // v1 reports "no limit" as a huge page-rounded number.
    m.limit = limit.filter(|&l| l < (1u64 << 60));
    Some(m)
}

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
    pub output: PathBuf,
    pub drain_every: Duration,
    /// How often cache and memory state is sampled.
    pub state_every: Duration,
}

/// What a recording cost and produced.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoRecordSummary {
    pub start_ns: u64,
    pub end_ns: u64,
    pub events: u64,
    /// Events the ring had no room for.
    pub lost: u64,
    /// Calls or requests whose start could not be remembered (map full).
    pub unpaired_lost: u64,
    pub reader_cpu_ns: u64,
    pub output: PathBuf,
    pub disks: Vec<TenantDisk>,
    pub unavailable: Vec<String>,
}

/// The tenants' virtual disks: each image's loop device and the disk under it.
pub fn tenant_disks(images: &[(u32, PathBuf)]) -> Result<Vec<TenantDisk>> {
    let mut disks = Vec::new();
    for (group, image) in images {
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
            loop_device,
            direct,
            physical,
            partition_start,
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
            let Ok(Some(per_cpu)) = skel.maps.dev_counts.lookup_percpu(&dev.to_ne_bytes(), MapFlags::ANY) else {
                out.push(DeviceCounters {
                    dev,
                    ..Default::default()
                });
                continue;
            };
            let mut c = DeviceCounters {
                dev,
                ..Default::default()
            };
            for v in per_cpu {
                if v.len() >= 32 {
                    c.bios += u64_at(&v, 0);
                    c.bio_bytes += u64_at(&v, 8);
                    c.merges += u64_at(&v, 16);
                    c.splits += u64_at(&v, 24);
                }
            }
            out.push(c);
        }
        out
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
        let disks = tenant_disks(&opts.images)?;
        let mut memory = Vec::new();
        if let Some(root) = &root {
            for (gi, g) in targets.groups.iter().enumerate() {
                if let Some(path) = g.cgroups.first().and_then(|c| memory_cgroup_of(c, root)) {
                    memory.push(MemoryCgroup { group: gi as u32, path });
                }
            }
        }

        let mut object = MaybeUninit::uninit();
        let mut open = IoSkelBuilder::default()
            .open(&mut object)
            .context("opening the BPF I/O probes failed")?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.cgroup_v1 = root.as_ref().map(|r| r.v1).unwrap_or(false);
            ro.wakeup_threshold = 8 << 20;
        }
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!(
                "loading the BPF I/O probes failed: {e}. They need root (CAP_BPF and CAP_PERFMON), a kernel with BTF and the syscall tracepoints (CONFIG_FTRACE_SYSCALLS)"
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
            add(d.loop_device.dev, LAYER_VIRTUAL)?;
            match &d.physical {
                Some(p) => add(p.dev, LAYER_PHYSICAL)?,
                None => unavailable.push(format!(
                    "physical layer of {} (its file system has no block device)",
                    d.image.display()
                )),
            }
        }
        let mut cgroup_ids: HashMap<u64, u32> = HashMap::new();
        let add_cgroups = |skel: &IoSkel, known: &mut HashMap<u64, u32>| -> Result<()> {
            for (id, group) in targets::new_cgroup_ids(targets, known) {
                skel.maps
                    .tracked_cgroups
                    .update(&id.to_ne_bytes(), &group.to_ne_bytes(), MapFlags::ANY)
                    .context("adding a cgroup to the BPF filter")?;
            }
            Ok(())
        };
        add_cgroups(&skel, &mut cgroup_ids)?;

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

        // libbpf attaches tracepoint programs through tracefs event ids.
        let _tracefs = crate::tracefs::Tracefs::ensure(
            "syscalls/sys_enter_read",
            "the syscall tracepoints (CONFIG_FTRACE_SYSCALLS)",
        )?;
        crate::tracefs::Tracefs::ensure("block/block_rq_issue", "the block tracepoints (CONFIG_BLOCK)")?;
        let mut skel = skel;
        skel.attach()
            .context("attaching the BPF I/O probes to the syscall and block tracepoints failed")?;
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
            }),
            ..Meta::of_this_host("bpf", start.0, groups)
        };
        let mut writer = Writer::create(&opts.output, &meta)?;
        let cpu_before = crate::recorder::thread_cpu_ns();
        ready(start.0);

        let sample_state = |skel: &IoSkel| IoState {
            ts: MonoNs::now().0,
            images: images
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
            memory: memory.iter().filter_map(|m| memory_state(m.group, &m.path)).collect(),
            devices: device_counters(skel, &watched),
        };
        let mut events = 0u64;
        let mut files_seen: HashSet<(u32, u64)> = HashSet::new();
        let mut new_files: Vec<IoFile> = Vec::new();
        let mut states = vec![sample_state(&skel)];
        let mut last_state = start;
        let mut last_rescan = start;
        loop {
            let finishing = stop.load(Ordering::Relaxed) || until.is_some_and(|u| MonoNs::now() >= u);
            if finishing {
                if let Some(data) = skel.maps.data_data.as_deref_mut() {
                    data.enabled = false;
                }
                // A program past its check when the flag fell finishes
                // within microseconds; let it land before the last drain.
                std::thread::sleep(Duration::from_millis(2));
            } else {
                let wait = until
                    .map(|u| Duration::from_nanos(u.0.saturating_sub(MonoNs::now().0)))
                    .unwrap_or(opts.drain_every);
                let _ = ring.poll(wait.min(opts.drain_every));
            }
            ring.consume().context("draining the BPF I/O ring")?;
            {
                let mut s = staged.borrow_mut();
                events += (s.0.len() / IO_EVENT_SIZE) as u64;
                writer.io_events(&s.0)?;
                s.0.clear();
                for f in s.1.drain(..) {
                    if files_seen.insert((f.dev, f.ino)) {
                        new_files.push(f);
                    }
                }
            }
            writer.io_files(&new_files)?;
            new_files.clear();
            let now = MonoNs::now();
            if finishing || now.since(last_state) >= opts.state_every.as_nanos() as u64 {
                last_state = now;
                states.push(sample_state(&skel));
                writer.io_state(&states)?;
                states.clear();
            }
            writer.flush()?;
            if finishing {
                break;
            }
            if now.since(last_rescan) >= 1_000_000_000 {
                last_rescan = now;
                add_cgroups(&skel, &mut cgroup_ids)?;
            }
        }
        let end = MonoNs::now();
        let reader_cpu_ns = crate::recorder::thread_cpu_ns().saturating_sub(cpu_before);
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
        let lost = crate::bpf::percpu_sum(&skel.maps.lost, 0);
        let unpaired_lost = crate::bpf::percpu_sum(&skel.maps.lost, 1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_event_round_trips() {
        let e = IoEvent {
            ts: 1,
            latency: 2,
            offset: 3,
            ino: 4,
            ret: -5,
            bytes: 6,
            tid: 7,
            dev: (7 << 20) | 3,
            group: 9,
            fd: 10,
            cpu: 11,
            kind: io_kind::BLOCK,
            flags: F_UNPAIRED,
            rwbs: *b"WS\0\0\0\0\0\0",
        };
        assert_eq!(IoEvent::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(e.op(), IoOp::Write);
        assert_eq!(e.moved(), 0, "a failed request moved nothing");
        assert_eq!(e.rwbs_str(), "WS");
        assert_eq!(IoEvent::from_bytes(&[0; 10]), None);
    }

    #[test]
    fn block_operations_read_from_rwbs() {
        let op = |s: &[u8]| {
            let mut rwbs = [0u8; 8];
            rwbs[..s.len()].copy_from_slice(s);
            IoEvent {
                kind: io_kind::BLOCK,
                rwbs,
                ..Default::default()
            }
            .op()
        };
        assert_eq!(op(b"R"), IoOp::Read);
        assert_eq!(op(b"RA"), IoOp::Read);
        assert_eq!(op(b"FWS"), IoOp::Write);
        assert_eq!(op(b"FF"), IoOp::Sync);
        assert_eq!(op(b"D"), IoOp::Discard);
        assert_eq!(op(b"N"), IoOp::Other);
    }

    #[test]
    fn extents_merge_and_owner_is_found_by_address() {
        let merged = merge_extents(vec![
            Extent {
                logical: 4096,
                physical: 20_000,
                len: 4096,
            },
            Extent {
                logical: 0,
                physical: 10_000,
                len: 4096,
            },
            Extent {
                logical: 8192,
                physical: 24_096,
                len: 100,
            },
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[1].len, 4196);
        let meta = IoMeta {
            disks: vec![TenantDisk {
                group: 2,
                image: "/x".into(),
                loop_device: BlockDevice {
                    dev: 7 << 20,
                    name: "loop0".into(),
                },
                direct: false,
                physical: Some(BlockDevice {
                    dev: 254 << 20,
                    name: "vda".into(),
                }),
                partition_start: 0,
            }],
            ..Default::default()
        };
        let layout = IoLayout {
            images: vec![ImageExtents {
                group: 2,
                extents: merged,
            }],
        };
        assert_eq!(layout.owner(&meta, 254 << 20, 10_000), Some(2));
        assert_eq!(layout.owner(&meta, 254 << 20, 14_095), Some(2));
        assert_eq!(layout.owner(&meta, 254 << 20, 14_096), None);
        assert_eq!(layout.owner(&meta, 254 << 20, 24_195), Some(2));
        assert_eq!(layout.owner(&meta, 7 << 20, 10_000), None, "another device");
    }

    #[test]
    fn memory_stat_reads_v1_and_v2_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("memory.stat"), "cache 4096\nrss 8192\ndirty 0\nswap 12\n").unwrap();
        std::fs::write(d.path().join("memory.limit_in_bytes"), "134217728\n").unwrap();
        let m = memory_state(1, d.path()).unwrap();
        assert_eq!((m.file, m.anon, m.swap, m.limit), (4096, 8192, 12, Some(128 << 20)));
        let d2 = tempfile::tempdir().unwrap();
        std::fs::write(d2.path().join("memory.stat"), "anon 1\nfile 2\nfile_dirty 3\n").unwrap();
        std::fs::write(d2.path().join("memory.max"), "max\n").unwrap();
        let m = memory_state(0, d2.path()).unwrap();
        assert_eq!((m.file, m.anon, m.dirty, m.limit), (2, 1, 3, None));
    }
}
