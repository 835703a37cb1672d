//! What an I/O recording describes besides its events: the tenants' disks
//! (image, loop device, the block device under it), their extents on it,
//! the files opened and the caches' sizes over time. Finding them on this
//! host (loop devices, FIEMAP, cachestat, memory cgroups) is ontime-trace's
//! (`io_layout` there); the two look-ups of sysfs here name a device.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A block device in the kernel's dev_t encoding (major << 20 | minor, as
/// the block tracepoints and `s_dev` carry it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BlockDevice {
    pub dev: u32,
    /// Its name under /sys/block ("loop3", "vda").
    pub name: String,
}

impl BlockDevice {
    /// The block device `major:minor` by its name under /sys/dev/block.
    pub fn from_major_minor(major: u32, minor: u32) -> Option<BlockDevice> {
        let dir = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
        let name = dir.file_name()?.to_string_lossy().into_owned();
        Some(BlockDevice {
            dev: (major << 20) | minor,
            name,
        })
    }

    /// The block device a device node (`/dev/vda`) stands for.
    pub fn of_node(node: &Path) -> Option<BlockDevice> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = std::fs::metadata(node).ok()?;
        if !meta.file_type().is_block_device() {
            return None;
        }
        BlockDevice::from_major_minor(libc::major(meta.rdev()), libc::minor(meta.rdev()))
    }

    pub fn major_minor(&self) -> (u32, u32) {
        (self.dev >> 20, self.dev & 0xfffff)
    }
}

/// A tenant's virtual disk: image file, loop device or VMM, the disk under it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TenantDisk {
    pub group: u32,
    pub image: PathBuf,
    /// The virtual disk (the guest's block layer) of a sandbox tenant: the
    /// loop device. None for a QEMU guest's image, whose virtual disk is
    /// QEMU's own reads and writes of the file (`image_file`).
    pub loop_device: Option<BlockDevice>,
    /// The loop device or QEMU bypasses the host page cache
    /// (`losetup --direct-io`, QEMU's `cache=none`: O_DIRECT).
    pub direct: bool,
    /// The whole disk under the image file; None when the image is on a
    /// file system without one (tmpfs, overlay).
    pub physical: Option<BlockDevice>,
    /// Where the image's file system starts on `physical` (its partition), bytes.
    pub partition_start: u64,
    /// A VMM's image as the kernel names it: (s_dev, inode), what its
    /// calls on the file carry.
    #[serde(default)]
    pub image_file: Option<(u32, u64)>,
    /// How the VMM submits its reads and writes of the image (QEMU's
    /// `aio=`); each is seen by other kernel hooks.
    #[serde(default)]
    pub aio: VmmAio,
}

impl TenantDisk {
    /// A VMM's image some of whose reads and writes go through its thread
    /// pool's preadv/pwritev, which only per-call tracing sees: all of
    /// them with `aio=threads`, and with O_DIRECT (`cache=none`) every
    /// request whose guest buffers are not aligned for it, whatever the
    /// `aio=` (QEMU bounces those through the pool: block/file-posix.c,
    /// raw_co_prw, `QEMU_AIO_MISALIGNED`). A guest's request merging a
    /// 1 MiB read with a 2 KiB one of its file system's metadata is one.
    pub fn vmm_thread_pool(&self) -> bool {
        self.loop_device.is_none() && (self.aio == VmmAio::Threads || self.direct)
    }
}

/// How a VMM moves its image's data, which decides what the recorder
/// hooks to see it: QEMU's thread pool calls preadv/pwritev (the syscall
/// tracepoints), Linux AIO submits direct I/O the file system starts
/// through iomap, io_uring has its own tracepoints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VmmAio {
    #[default]
    Threads,
    Native,
    IoUring,
}

impl VmmAio {
    /// QEMU's name for it (`aio=`).
    pub fn as_str(self) -> &'static str {
        match self {
            VmmAio::Threads => "threads",
            VmmAio::Native => "native",
            VmmAio::IoUring => "io_uring",
        }
    }

    pub fn parse(s: &str) -> Option<VmmAio> {
        match s {
            "threads" => Some(VmmAio::Threads),
            "native" => Some(VmmAio::Native),
            "io_uring" => Some(VmmAio::IoUring),
            _ => None,
        }
    }
}

impl TenantDisk {
    /// What stands for the virtual disk, for people.
    pub fn virtual_name(&self) -> String {
        match &self.loop_device {
            Some(l) => l.name.clone(),
            None => "the VMM's reads and writes of the image".into(),
        }
    }
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
    /// Recordings before the counters mode traced calls.
    #[serde(default)]
    pub app_layer: AppLayer,
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

/// Bios queued, merged and split on a device since recording began, and
/// the kernel's own I/O statistics of the device (/sys/dev/block/M:m/stat,
/// since boot) at the same moment.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceCounters {
    pub dev: u32,
    pub bios: u64,
    pub bio_bytes: u64,
    pub merges: u64,
    pub splits: u64,
    /// The kernel's counts, absent where the device has no stat file.
    #[serde(default)]
    pub kernel: Option<DiskStat>,
}

/// A block device's completed I/O as the kernel counts it (the stat file's
/// reads, sectors read, writes, sectors written; requests after merging),
/// independent of the recorder's events: what they are checked against.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DiskStat {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
}

impl DiskStat {
    /// The stat file of the device `dev` (kernel encoding major << 20 |
    /// minor), or None when it cannot be read.
    pub fn of_device(dev: u32) -> Option<DiskStat> {
        let text = std::fs::read_to_string(format!("/sys/dev/block/{}:{}/stat", dev >> 20, dev & 0xfffff)).ok()?;
        Self::parse(&text)
    }

    /// Documentation/block/stat.rst: fields 1-7 are read I/Os, read
    /// merges, read sectors, read ticks, write I/Os, write merges, write
    /// sectors; a sector is 512 bytes whatever the device's block size.
    pub fn parse(text: &str) -> Option<DiskStat> {
        let f: Vec<u64> = text
            .split_whitespace()
            .take(7)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        (f.len() == 7).then(|| DiskStat {
            reads: f[0],
            read_bytes: f[2] << 9,
            writes: f[4],
            write_bytes: f[6] << 9,
        })
    }

    /// Growth from `earlier` to `self`.
    pub fn since(&self, earlier: &DiskStat) -> DiskStat {
        DiskStat {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

/// One sample of cache, memory and block counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoState {
    pub ts: u64,
    pub images: Vec<ImageCache>,
    pub memory: Vec<MemoryState>,
    pub devices: Vec<DeviceCounters>,
    /// The application layer as counters since the recording began, per
    /// group (only without per-call tracing: [`AppLayer::Counters`]).
    #[serde(default)]
    pub apps: Vec<AppCounters>,
}

/// What a group's threads read and wrote through the read and write
/// families (files, pipes and sockets alike) since the recording began.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AppCounters {
    pub group: u32,
    pub rchar: u64,
    pub wchar: u64,
    pub syscr: u64,
    pub syscw: u64,
}

/// How a recording saw the application layer.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AppLayer {
    /// Every read, write, fsync and open on a regular file, with its
    /// latency, through the syscall tracepoints (`--calls`).
    #[default]
    Calls,
    /// Each thread's I/O counters: bytes and calls, no sizes, latency or
    /// files, and reads of pipes and sockets count too; no syscall
    /// tracepoint, so no cost on the tenants' system calls.
    Counters,
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
    /// The tenant whose image holds at least half of bytes `addr..addr +
    /// len` of `dev`, if any. By its bytes, not its first sector: the
    /// block layer merges adjacent requests of different files (an
    /// image's write beside the host file system's own metadata), and a
    /// merged request belongs where most of it goes.
    pub fn owner(&self, meta: &IoMeta, dev: u32, addr: u64, len: u64) -> Option<u32> {
        let len = len.max(1);
        let end = addr.saturating_add(len);
        let mut best: Option<(u64, u32)> = None;
        for img in &self.images {
            let on_dev = meta
                .disks
                .iter()
                .any(|d| d.group == img.group && d.physical.as_ref().is_some_and(|p| p.dev == dev));
            if !on_dev {
                continue;
            }
            let first = img.extents.partition_point(|e| e.physical + e.len <= addr);
            let covered: u64 = img.extents[first..]
                .iter()
                .take_while(|e| e.physical < end)
                .map(|e| (e.physical + e.len).min(end) - e.physical.max(addr))
                .sum();
            if covered * 2 >= len && best.is_none_or(|(b, _)| covered > b) {
                best = Some((covered, img.group));
            }
        }
        best.map(|(_, group)| group)
    }
}

/// Joins extents into sorted, non-overlapping runs of the disk.
pub fn merge_extents(mut v: Vec<Extent>) -> Vec<Extent> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_file_gives_requests_and_bytes() {
        // /sys/block/vda/stat on this project's machine (17 fields).
        let text = "  210874     5032 16733666    60512   531093   394618 25331680   700813        0   440928   836283        0        0        0        0    67322    74956\n";
        let s = DiskStat::parse(text).expect("a stat line");
        assert_eq!(
            s,
            DiskStat {
                reads: 210874,
                read_bytes: 16733666 << 9,
                writes: 531093,
                write_bytes: 25331680 << 9
            }
        );
        let later = DiskStat {
            writes: s.writes + 2,
            write_bytes: s.write_bytes + 4096,
            ..s
        };
        assert_eq!(later.since(&s).write_bytes, 4096);
        assert_eq!(later.since(&s).reads, 0);
        assert_eq!(DiskStat::parse("1 2 3"), None);
        assert_eq!(DiskStat::parse("a b c d e f g"), None);
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
                loop_device: Some(BlockDevice {
                    dev: 7 << 20,
                    name: "loop0".into(),
                }),
                direct: false,
                physical: Some(BlockDevice {
                    dev: 254 << 20,
                    name: "vda".into(),
                }),
                partition_start: 0,
                image_file: None,
                aio: Default::default(),
            }],
            ..Default::default()
        };
        let layout = IoLayout {
            images: vec![ImageExtents {
                group: 2,
                extents: merged,
            }],
        };
        assert_eq!(layout.owner(&meta, 254 << 20, 10_000, 512), Some(2));
        assert_eq!(layout.owner(&meta, 254 << 20, 14_095, 1), Some(2));
        assert_eq!(layout.owner(&meta, 254 << 20, 14_096, 512), None);
        assert_eq!(layout.owner(&meta, 254 << 20, 24_195, 1), Some(2));
        assert_eq!(layout.owner(&meta, 7 << 20, 10_000, 512), None, "another device");
        // A request merged across the image's edge belongs where most of
        // its bytes go, whichever side its first sector is on.
        assert_eq!(layout.owner(&meta, 254 << 20, 9_488, 4096), Some(2), "512 out, 3584 in");
        assert_eq!(layout.owner(&meta, 254 << 20, 12_048, 4096), Some(2), "half in");
        assert_eq!(layout.owner(&meta, 254 << 20, 13_596, 4096), None, "500 in, 3596 out");
        // Over a hole of the image: both extents' parts count.
        assert_eq!(
            layout.owner(&meta, 254 << 20, 12_000, 12_196),
            Some(2),
            "6292 of 12196 in"
        );
        assert_eq!(layout.owner(&meta, 254 << 20, 12_000, 10_000), None, "4096 of 10000 in");
    }
}
