//! Stack sampling for `ontime profile`: a `cpu-clock` perf event on every
//! online CPU (hardware counters are not assumed), each sample carrying
//! the thread, the CPU, a CLOCK_MONOTONIC time stamp (the clock of the
//! scheduler events beside it) and the kernel and user call chains the
//! kernel unwinds by frame pointers.
//!
//! Samples are decoded into one flat, reused buffer ([`SampleBatch`], the
//! recording's: `ontime_recording::samples`, re-exported here): no
//! allocation per sample once the buffer has grown.
use anyhow::{bail, Result};
use perf_event_open_sys as sys;

use crate::perf::{cpus_and_page, open_on_cpu, sample_attr, CpuRing};
pub use ontime_recording::samples::{Sample, SampleBatch};

/// Ring per CPU, in pages: 256 KiB hold ~1 s of 1 kHz samples with deep
/// stacks, against a 100 ms drain.
const RING_PAGES: usize = 64;
/// Most frames kept per chain (the kernel's own default limit is 127).
pub const MAX_FRAMES: usize = 127;

/// perf's context markers inside a call chain.
const PERF_CONTEXT_KERNEL: u64 = (-128i64) as u64;
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;
/// Markers are the top 4095 values.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

/// Splits a perf call chain into kernel and user frames (leaf first),
/// dropping the context markers.
pub fn split_chain(chain: &[u64], kernel: &mut Vec<u64>, user: &mut Vec<u64>) {
    kernel.clear();
    user.clear();
    let mut in_user = false;
    for &ip in chain {
        if ip >= PERF_CONTEXT_MAX {
            in_user = ip == PERF_CONTEXT_USER;
            if ip != PERF_CONTEXT_KERNEL && ip != PERF_CONTEXT_USER {
                // Guest or hypervisor contexts: not ours to symbolise.
                in_user = true;
            }
            continue;
        }
        let to = if in_user { &mut *user } else { &mut *kernel };
        if to.len() < MAX_FRAMES {
            to.push(ip);
        }
    }
}

/// A PERF_RECORD_MMAP2 record (without build ids): header(8) pid(4) tid(4)
/// addr(8) len(8) pgoff(8) maj(4) min(4) ino(8) ino_generation(8) prot(4)
/// flags(4) filename (NUL-terminated, padded).
fn parse_mmap2(rec: &[u8]) -> Option<(u32, crate::maps::Mapping)> {
    let u32_at = |i: usize| rec.get(i..i + 4).map(|b| u32::from_ne_bytes(b.try_into().expect("4")));
    let u64_at = |i: usize| rec.get(i..i + 8).map(|b| u64::from_ne_bytes(b.try_into().expect("8")));
    let pid = u32_at(8)?;
    let (addr, len, pgoff) = (u64_at(16)?, u64_at(24)?, u64_at(32)?);
    let (maj, min, ino) = (u32_at(40)?, u32_at(44)?, u64_at(48)?);
    let name = rec.get(72..)?;
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    Some((
        pid,
        crate::maps::Mapping {
            start: addr,
            end: addr.checked_add(len)?,
            offset: pgoff,
            path: String::from_utf8_lossy(&name[..end]).into_owned(),
            dev: format!("{maj:02x}:{min:02x}"),
            inode: ino,
        },
    ))
}

/// The sampling events, one per online CPU.
pub struct Sampler {
    rings: Vec<CpuRing>,
    scratch: Vec<u8>,
    kernel: Vec<u64>,
    user: Vec<u64>,
    chain: Vec<u64>,
    pub period_ns: u64,
    /// Samples the kernel dropped for a full ring (PERF_RECORD_LOST).
    pub lost: u64,
    /// Bytes skipped because a ring lost record alignment.
    pub skipped: u64,
}

impl Sampler {
    /// Opens (disabled) a `cpu-clock` sampling event at `rate_hz` on every
    /// online CPU.
    pub fn open(rate_hz: u32) -> Result<Sampler> {
        if !(1..=100_000).contains(&rate_hz) {
            bail!("sampling rate {rate_hz} Hz: use 1 to 100000 (default 1000)");
        }
        let period_ns = 1_000_000_000 / rate_hz as u64;
        let (cpus, page) = cpus_and_page()?;
        let mut rings = Vec::new();
        for cpu in cpus {
            let mut attr = sample_attr(
                sys::bindings::PERF_TYPE_SOFTWARE,
                sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64,
                period_ns,
                sys::bindings::PERF_SAMPLE_CALLCHAIN as u64,
                RING_PAGES * page,
            );
            attr.sample_max_stack = MAX_FRAMES as u16;
            // The kernel reports every executable mapping made from now on
            // (perf's way): a process that lives shorter than a drain is
            // still symbolised.
            attr.set_mmap(1);
            attr.set_mmap2(1);
            let fd = open_on_cpu(&mut attr, cpu, "cpu-clock sampling")?;
            rings.push(CpuRing::map(vec![fd], cpu, RING_PAGES, page)?);
        }
        Ok(Sampler {
            rings,
            scratch: vec![0u8; 1 << 16],
            kernel: Vec::with_capacity(MAX_FRAMES),
            user: Vec::with_capacity(MAX_FRAMES),
            chain: Vec::with_capacity(2 * MAX_FRAMES + 4),
            period_ns,
            lost: 0,
            skipped: 0,
        })
    }

    pub fn enable(&mut self) -> Result<()> {
        for r in &self.rings {
            // SAFETY: an fd we own, a perf event.
            if unsafe { sys::ioctls::ENABLE(r.leader_fd(), 0) } != 0 {
                bail!("enabling sampling failed: {}", std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    pub fn disable(&mut self) {
        for r in &self.rings {
            // SAFETY: an fd we own, a perf event.
            unsafe { sys::ioctls::DISABLE(r.leader_fd(), 0) };
        }
    }

    /// Appends every sample delivered since the last drain for which
    /// `keep(pid, tid)` holds (the idle task is never kept), and every
    /// executable mapping made since, with its process, to `mapped`.
    pub fn drain(
        &mut self,
        out: &mut SampleBatch,
        mapped: &mut Vec<(u32, crate::maps::Mapping)>,
        keep: &mut dyn FnMut(u32, u32) -> bool,
    ) {
        let Sampler {
            rings,
            scratch,
            kernel,
            user,
            chain,
            lost,
            skipped,
            ..
        } = self;
        for ring in rings.iter_mut() {
            *skipped += ring.read(scratch, |rec| {
                let ty = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]);
                if ty == sys::bindings::PERF_RECORD_LOST {
                    // header(8) id(8) lost(8)
                    if let Some(b) = rec.get(16..24) {
                        *lost += u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                    }
                    return;
                }
                if ty == sys::bindings::PERF_RECORD_MMAP2 {
                    if let Some(m) = parse_mmap2(rec) {
                        mapped.push(m);
                    }
                    return;
                }
                if ty != sys::bindings::PERF_RECORD_SAMPLE {
                    return;
                }
                // header(8) pid(4) tid(4) time(8) cpu(4) res(4) nr(8) ips(8 nr)
                let Some(fixed) = rec.get(8..40) else { return };
                let pid = u32::from_ne_bytes(fixed[0..4].try_into().expect("4"));
                let tid = u32::from_ne_bytes(fixed[4..8].try_into().expect("4"));
                if tid == 0 || !keep(pid, tid) {
                    return;
                }
                let ts = u64::from_ne_bytes(fixed[8..16].try_into().expect("8"));
                let cpu = u32::from_ne_bytes(fixed[16..20].try_into().expect("4")) as u16;
                let nr = u64::from_ne_bytes(fixed[24..32].try_into().expect("8")) as usize;
                let Some(ips) = rec.get(40..40 + 8 * nr) else { return };
                chain.clear();
                chain.extend(
                    ips.chunks_exact(8)
                        .map(|c| u64::from_ne_bytes(c.try_into().expect("8"))),
                );
                split_chain(chain, kernel, user);
                out.push(ts, pid, tid, cpu, kernel, user);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_splits_at_its_context_markers() {
        let chain = [
            PERF_CONTEXT_KERNEL,
            0xffff_8000_0000_1000,
            0xffff_8000_0000_2000,
            PERF_CONTEXT_USER,
            0x401000,
            0x402000,
        ];
        let (mut k, mut u) = (Vec::new(), Vec::new());
        split_chain(&chain, &mut k, &mut u);
        assert_eq!(k, [0xffff_8000_0000_1000, 0xffff_8000_0000_2000]);
        assert_eq!(u, [0x401000, 0x402000]);
    }

    #[test]
    fn an_mmap2_record_gives_the_mapping_and_its_file() {
        let mut rec = vec![0u8; 8];
        rec.extend_from_slice(&42u32.to_ne_bytes());
        rec.extend_from_slice(&43u32.to_ne_bytes());
        for v in [0x7f00_0000_0000u64, 0x2000, 0x1000] {
            rec.extend_from_slice(&v.to_ne_bytes());
        }
        rec.extend_from_slice(&0xfeu32.to_ne_bytes());
        rec.extend_from_slice(&1u32.to_ne_bytes());
        rec.extend_from_slice(&777u64.to_ne_bytes());
        rec.extend_from_slice(&0u64.to_ne_bytes());
        rec.extend_from_slice(&5u32.to_ne_bytes());
        rec.extend_from_slice(&2u32.to_ne_bytes());
        rec.extend_from_slice(b"/usr/lib/libx.so\0\0\0\0\0\0\0\0");
        let (pid, m) = parse_mmap2(&rec).expect("parses");
        assert_eq!(pid, 42);
        assert_eq!(
            (m.start, m.end, m.offset, m.inode),
            (0x7f00_0000_0000, 0x7f00_0000_2000, 0x1000, 777)
        );
        assert_eq!((m.path.as_str(), m.dev.as_str()), ("/usr/lib/libx.so", "fe:01"));
        assert!(parse_mmap2(&rec[..30]).is_none(), "a torn record is skipped");
    }
}
