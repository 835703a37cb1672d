//! Finding what an I/O recording describes on this host: the loop devices
//! and the files behind them, the disk under a file system and where its
//! partition starts, an image's extents by FIEMAP, the host page cache's
//! hold on it (cachestat) and a memory cgroup's state. The types these
//! fill in are the recording's (`ontime_recording::io_layout`, re-exported
//! here).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use ontime_recording::io_layout::*;

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

#[cfg(test)]
mod tests {
    use super::*;

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
