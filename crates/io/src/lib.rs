//! ontime-io: the layered view of document 004 from an I/O recording. Per
//! tenant and layer (application, virtual disk, physical disk): operations,
//! bytes, request sizes and latency, reads and writes apart; how much of
//! each layer's traffic the cache below it absorbed (guest cache between the
//! application and the virtual disk, host cache between the virtual disk
//! and the physical disk); requests split or merged on the way down; time
//! series and the cache sizes beside them. The recording is ontime-trace's
//! ([`ontime_trace::io`]).
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ontime_core::duration::format_ns;
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_trace::io::{AppLayer, IoEvent, IoOp, TenantDisk, NO_GROUP};
use ontime_trace::recording::Recording;
use serde::{Deserialize, Serialize};

/// Page size cachestat counts in.
const PAGE: u64 = 4096;

pub mod advise;
pub mod workload;

/// Reads or writes at one layer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpStats {
    pub ops: u64,
    pub bytes: u64,
    /// Requests by size: (upper bound in bytes, count), powers of two.
    pub sizes: Vec<(u64, u64)>,
    pub latency: Option<Summary>,
}

/// One layer of one tenant.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LayerStats {
    pub read: OpStats,
    pub write: OpStats,
    /// fsync/fdatasync calls, or flush requests.
    pub syncs: u64,
    /// Discards (block layers).
    pub discards: u64,
}

/// Share of a layer's bytes that never reached the layer below.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Absorbed {
    /// 1 - below/above, clamped at 0; None when nothing moved above.
    pub share: Option<f64>,
    /// below/above when the layer below moved more (read-ahead, metadata,
    /// whole blocks for partial writes).
    pub amplification: Option<f64>,
}

impl Absorbed {
    fn of(above: u64, below: u64) -> Absorbed {
        if above == 0 {
            return Absorbed {
                share: None,
                amplification: (below > 0).then_some(f64::INFINITY),
            };
        }
        let ratio = below as f64 / above as f64;
        Absorbed {
            share: Some((1.0 - ratio).max(0.0)),
            amplification: (ratio > 1.0).then_some(ratio),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Absorption {
    /// Application -> virtual disk.
    pub guest_cache_reads: Absorbed,
    pub guest_cache_writes: Absorbed,
    /// Virtual disk -> physical disk.
    pub host_cache_reads: Absorbed,
    pub host_cache_writes: Absorbed,
}

/// Cache and memory at the start, the end and the largest seen, bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Span {
    pub start: u64,
    pub end: u64,
    pub max: u64,
}

impl Span {
    fn push(&mut self, first: bool, v: u64) {
        if first {
            *self = Span {
                start: v,
                end: v,
                max: v,
            };
        } else {
            self.end = v;
            self.max = self.max.max(v);
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CacheState {
    /// The tenant's page cache (memory cgroup `file`/`cache`).
    pub guest_cache: Option<Span>,
    /// The image file's pages in the host page cache (cachestat).
    pub host_cache: Option<Span>,
    /// Image pages dirty in the host cache at the end (written by the
    /// tenant, not yet on the physical disk).
    pub host_dirty_end: Option<u64>,
    pub guest_dirty_end: Option<u64>,
    pub swap: Option<Span>,
    pub memory_limit: Option<u64>,
}

/// Bios queued, merged and split on a device during the recording.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BlockCounters {
    pub device: String,
    pub bios: u64,
    pub bio_bytes: u64,
    pub merges: u64,
    pub splits: u64,
    /// Requests completed (from the events).
    pub requests: u64,
    /// Requests that completed with an error (their bytes count nowhere).
    #[serde(default)]
    pub failed: u64,
    /// Bytes the events' requests read and wrote.
    #[serde(default)]
    pub read_bytes: u64,
    #[serde(default)]
    pub write_bytes: u64,
    /// What the kernel's own statistics of the device (its stat file) grew
    /// by over the recording: the events should account for all of it but
    /// the requests in flight at either end. Absent when the device has no
    /// stat file or the recording has no state samples.
    #[serde(default)]
    pub kernel: Option<ontime_trace::io::DiskStat>,
}

/// Bytes per second at each layer in one bin of the time series.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// Seconds since the recording began (bin start).
    pub t: f64,
    pub app_read: f64,
    pub app_write: f64,
    pub virtual_read: f64,
    pub virtual_write: f64,
    pub physical_read: f64,
    pub physical_write: f64,
}

/// A layer of the time series.
#[derive(Clone, Copy)]
enum SeriesLayer {
    App,
    Virtual,
    Physical,
}

impl SeriesPoint {
    fn add(&mut self, layer: SeriesLayer, op: IoOp, bytes: f64) {
        let (read, write) = match layer {
            SeriesLayer::App => (&mut self.app_read, &mut self.app_write),
            SeriesLayer::Virtual => (&mut self.virtual_read, &mut self.virtual_write),
            SeriesLayer::Physical => (&mut self.physical_read, &mut self.physical_write),
        };
        match op {
            IoOp::Read => *read += bytes,
            IoOp::Write => *write += bytes,
            _ => {}
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FileIo {
    pub path: String,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub direct: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TenantIo {
    pub name: String,
    pub disk: Option<TenantDisk>,
    /// Calls on files of the tenant's disk.
    pub application: LayerStats,
    /// Calls on regular files elsewhere (not counted in absorption).
    pub application_elsewhere: LayerStats,
    /// The loop device.
    pub virtual_disk: LayerStats,
    /// Requests of the disk under the image that touch the image's extents.
    pub physical_disk: LayerStats,
    pub absorption: Absorption,
    /// Share of application bytes moved with O_DIRECT.
    pub direct_share: Option<f64>,
    pub cache: CacheState,
    pub virtual_counters: Option<BlockCounters>,
    pub files: Vec<FileIo>,
    pub series_bin_s: f64,
    pub series: Vec<SeriesPoint>,
    /// A QEMU guest recorded from inside too ([`merge_guest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside_guest: Option<GuestView>,
}

/// What the recorder inside a guest saw, beside the host's view of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GuestView {
    /// How it saw the application layer (counters or calls).
    pub app_layer: AppLayer,
    /// The guest's own block layer (its virtio-blk or IDE disk).
    pub block: LayerStats,
    /// Events the guest's recorder lost.
    pub lost: u64,
    /// How its clock maps onto the host's, when measured: the guest's
    /// series are then drawn on the host's time line.
    pub clock: Option<ClockOffset>,
}

/// A guest's CLOCK_MONOTONIC against the host's: host = guest + offset,
/// measured from the same requests seen twice, completed on the guest's
/// disk and as its VMM's calls on the image. The offset includes the time
/// from the VMM's call returning to the guest seeing the completion.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockOffset {
    pub host_minus_guest_ns: i64,
    /// Interquartile range of the paired differences.
    pub spread_ns: u64,
    /// Requests paired.
    pub pairs: u64,
}

/// Completion times of `host`'s calls by `group` on `image` and of
/// `guest`'s requests on its disk `guest_dev`: their offset, or None when
/// either side has too few to pair.
pub fn clock_offset(
    host: &Recording,
    group: u32,
    image: (u32, u64),
    guest: &Recording,
    guest_dev: u32,
) -> Option<ClockOffset> {
    let mut h: Vec<u64> = host
        .io_events
        .iter()
        .filter(|e| !e.is_block() && e.group == group && (e.dev, e.ino) == image)
        .filter(|e| matches!(e.op(), IoOp::Read | IoOp::Write))
        .map(|e| e.ts)
        .collect();
    let g: Vec<u64> = guest
        .io_events
        .iter()
        .filter(|e| e.is_block() && e.dev == guest_dev && matches!(e.op(), IoOp::Read | IoOp::Write))
        .map(|e| e.ts)
        .collect();
    if h.len() < 8 || g.len() < 8 {
        return None;
    }
    h.sort_unstable();
    // Coarse: the two wall clocks (the guest's comes from its emulated RTC,
    // a second or so off), then the lag that best lines up the request
    // counts in 10 ms bins within 2 s of it.
    let wall = |m: &ontime_trace::recording::Meta| m.start_ns as i64 - m.start_realtime_ns as i64;
    let d0 = wall(&host.meta) - wall(&guest.meta);
    const BIN: i64 = 10_000_000;
    const REACH: i64 = 200;
    let counts = |ts: &mut dyn Iterator<Item = i64>| -> (i64, Vec<u32>) {
        let v: Vec<i64> = ts.collect();
        let first = v.iter().min().copied().unwrap_or(0).div_euclid(BIN);
        let last = v.iter().max().copied().unwrap_or(0).div_euclid(BIN);
        let mut c = vec![0u32; (last - first + 1).clamp(1, 1 << 20) as usize];
        for t in v {
            if let Some(x) = c.get_mut((t.div_euclid(BIN) - first) as usize) {
                *x += 1;
            }
        }
        (first, c)
    };
    let (h0, hc) = counts(&mut h.iter().map(|&t| t as i64));
    let (g0, gc) = counts(&mut g.iter().map(|&t| t as i64 + d0));
    let score = |lag: i64| -> u64 {
        gc.iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| {
                let hi = g0 + i as i64 + lag - h0;
                usize::try_from(hi)
                    .ok()
                    .and_then(|k| hc.get(k))
                    .map_or(0, |&m| n.min(m) as u64)
            })
            .sum()
    };
    let lag = (-REACH..=REACH).max_by_key(|&l| (score(l), std::cmp::Reverse(l.abs())))?;
    // Fine: each guest completion against the nearest host completion.
    let guess = d0 + lag * BIN;
    let step = (g.len() / 5000).max(1);
    let mut diffs: Vec<i64> = g
        .iter()
        .step_by(step)
        .filter_map(|&t| {
            let at = t as i64 + guess;
            let k = h.partition_point(|&x| (x as i64) < at);
            [k.checked_sub(1), Some(k)]
                .into_iter()
                .flatten()
                .filter_map(|k| h.get(k))
                .map(|&x| x as i64 - at)
                .min_by_key(|d| d.abs())
        })
        .filter(|d| d.abs() <= 2 * BIN)
        .collect();
    if diffs.len() < 8 {
        return None;
    }
    diffs.sort_unstable();
    let q = |f: f64| diffs[((diffs.len() - 1) as f64 * f) as usize];
    Some(ClockOffset {
        host_minus_guest_ns: guess + q(0.5),
        spread_ns: (q(0.75) - q(0.25)).unsigned_abs(),
        pairs: diffs.len() as u64,
    })
}

/// A recording made inside a guest, ready to fold into the host's.
pub struct GuestRecording<'a> {
    pub analysis: &'a IoAnalysis,
    /// Its CLOCK_MONOTONIC at start (the guest's clock).
    pub start_ns: u64,
    pub clock: Option<ClockOffset>,
}

/// Folds a recording made inside guest `tenant` into the host's view of
/// it: the application layer, the files and the guest cache come from
/// inside, the virtual disk (its VMM's calls on the image), the physical
/// disk and the host cache from the host; the guest cache's absorption is
/// then application vs the VMM's calls. The application layer's series
/// moves onto the host's time line when the clock offset was measured
/// ([`clock_offset`]); without it the series keep the host's layers only.
/// False when either side lacks the tenant.
pub fn merge_guest(host: &mut IoAnalysis, tenant: &str, guest: &GuestRecording) -> bool {
    let (guest_start, offset) = (guest.start_ns, guest.clock);
    let guest = guest.analysis;
    let Some(t) = host.tenants.iter_mut().find(|t| t.name == tenant) else {
        return false;
    };
    let Some(g) = guest.tenants.iter().find(|t| t.name == tenant) else {
        return false;
    };
    t.application = g.application.clone();
    t.application_elsewhere = g.application_elsewhere.clone();
    t.files = g.files.clone();
    t.direct_share = g.direct_share;
    t.absorption.guest_cache_reads = Absorbed::of(t.application.read.bytes, t.virtual_disk.read.bytes);
    t.absorption.guest_cache_writes = Absorbed::of(t.application.write.bytes, t.virtual_disk.write.bytes);
    t.cache.guest_cache = g.cache.guest_cache.clone();
    t.cache.guest_dirty_end = g.cache.guest_dirty_end;
    t.cache.swap = g.cache.swap.clone();
    t.cache.memory_limit = g.cache.memory_limit;
    t.inside_guest = Some(GuestView {
        app_layer: guest.app_layer,
        block: g.virtual_disk.clone(),
        lost: guest.lost,
        clock: offset,
    });
    // On the host's time line: each guest bin's bytes over the host bins
    // it covers.
    if let Some(o) = offset {
        for p in t.series.iter_mut() {
            p.app_read = 0.0;
            p.app_write = 0.0;
        }
        let bin_ns = (t.series_bin_s * 1e9) as u64;
        let guest_bin = (g.series_bin_s * 1e9) as u64;
        for gp in &g.series {
            let from = (guest_start as i64 + (gp.t * 1e9) as i64 + o.host_minus_guest_ns).max(0) as u64;
            let read = (gp.app_read * g.series_bin_s) as u64;
            let written = (gp.app_write * g.series_bin_s) as u64;
            let (until, start) = (from + guest_bin, host.start_ns);
            spread(&mut t.series, start, bin_ns, from, until, read, |p| &mut p.app_read);
            spread(&mut t.series, start, bin_ns, from, until, written, |p| &mut p.app_write);
        }
        for p in t.series.iter_mut() {
            p.app_read /= t.series_bin_s;
            p.app_write /= t.series_bin_s;
        }
    }
    let unseen = format!("inside guest {tenant}");
    host.unavailable.retain(|u| !u.contains(&unseen));
    true
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct IoAnalysis {
    pub recording: PathBuf,
    /// CLOCK_MONOTONIC when the recording began (its host's clock).
    #[serde(default)]
    pub start_ns: u64,
    pub duration_ns: u64,
    pub events: u64,
    /// Events the kernel side had no room for; non-zero makes every count
    /// a lower bound.
    pub lost: u64,
    /// Block requests that completed without their issue (issued before
    /// the recording, or the issue map was full).
    pub unpaired_requests: u64,
    /// The recording was cut short (no END block).
    pub truncated: bool,
    pub tenants: Vec<TenantIo>,
    /// Physical requests outside every image (the host's own I/O, the
    /// host file system's journal and metadata for the images).
    pub physical_other: LayerStats,
    pub physical_counters: Vec<BlockCounters>,
    pub unavailable: Vec<String>,
    /// How the recording saw the application layer: every call, or each
    /// thread's counters (bytes and calls only, pipes and sockets too).
    #[serde(default)]
    pub app_layer: AppLayer,
}

/// Accumulates one layer.
#[derive(Default)]
struct LayerAcc {
    stats: LayerStats,
    read_lat: LatencyHistogram,
    write_lat: LatencyHistogram,
    read_sizes: HashMap<u64, u64>,
    write_sizes: HashMap<u64, u64>,
}

fn size_bucket(bytes: u64) -> u64 {
    bytes.max(512).next_power_of_two()
}

impl LayerAcc {
    fn add(&mut self, e: &IoEvent) {
        let (op, lat, sizes) = match e.op() {
            IoOp::Read => (&mut self.stats.read, &mut self.read_lat, &mut self.read_sizes),
            IoOp::Write => (&mut self.stats.write, &mut self.write_lat, &mut self.write_sizes),
            IoOp::Sync => {
                self.stats.syncs += 1;
                return;
            }
            IoOp::Discard => {
                self.stats.discards += 1;
                return;
            }
            _ => return,
        };
        let moved = e.moved();
        op.ops += 1;
        op.bytes += moved;
        *sizes.entry(size_bucket(moved)).or_default() += 1;
        if e.latency > 0 {
            lat.record(e.latency);
        }
    }

    fn finish(mut self) -> LayerStats {
        let sorted = |m: HashMap<u64, u64>| {
            let mut v: Vec<(u64, u64)> = m.into_iter().collect();
            v.sort();
            v
        };
        self.stats.read.sizes = sorted(self.read_sizes);
        self.stats.write.sizes = sorted(self.write_sizes);
        self.stats.read.latency = (!self.read_lat.is_empty()).then(|| self.read_lat.summary(None));
        self.stats.write.latency = (!self.write_lat.is_empty()).then(|| self.write_lat.summary(None));
        self.stats
    }
}

/// The layered analysis of an I/O recording.
pub fn analyze(rec: &Recording, path: &Path) -> Result<IoAnalysis> {
    let io = rec.meta.io.clone().with_context(|| {
        format!(
            "{} holds no I/O recording (it was made by `ontime {}`); record with `ontime io record`",
            path.display(),
            if rec.meta.sample_period_ns.is_some() {
                "profile record"
            } else {
                "observe record"
            }
        )
    })?;
    let start = rec.meta.start_ns;
    let end = rec
        .end
        .as_ref()
        .map(|e| e.end_ns)
        .or_else(|| rec.io_events.iter().map(|e| e.ts).max())
        .unwrap_or(start);
    let duration_ns = end.saturating_sub(start);
    let n = rec.meta.groups.len();
    let bin_ns = series_bin(duration_ns);
    let bins = (duration_ns / bin_ns + 1) as usize;
    let layout = rec.io_layout.clone().unwrap_or_default();

    let disk_of: HashMap<u32, &TenantDisk> = io.disks.iter().map(|d| (d.group, d)).collect();
    let loop_owner: HashMap<u32, u32> = io
        .disks
        .iter()
        .filter_map(|d| Some((d.loop_device.as_ref()?.dev, d.group)))
        .collect();
    // A QEMU guest's virtual disk: its VMM's calls on the image file.
    let vmm_image: HashMap<(u32, u64), u32> = io.disks.iter().filter_map(|d| Some((d.image_file?, d.group))).collect();
    let physical_devs: Vec<u32> = io
        .disks
        .iter()
        .filter_map(|d| d.physical.as_ref().map(|p| p.dev))
        .collect();

    let mut app = (0..n).map(|_| LayerAcc::default()).collect::<Vec<_>>();
    let mut elsewhere = (0..n).map(|_| LayerAcc::default()).collect::<Vec<_>>();
    let mut virt = (0..n).map(|_| LayerAcc::default()).collect::<Vec<_>>();
    let mut phys = (0..n).map(|_| LayerAcc::default()).collect::<Vec<_>>();
    let mut phys_other = LayerAcc::default();
    let mut series = vec![vec![SeriesPoint::default(); bins]; n];
    let mut direct_bytes = vec![0u64; n];
    let mut requests_per_dev: HashMap<u32, DevRequests> = HashMap::new();
    let mut unpaired = 0u64;
    let names: HashMap<(u32, u64), &str> = rec.io_files.iter().map(|f| ((f.dev, f.ino), f.path.as_str())).collect();
    let mut files: Vec<HashMap<(u32, u64), FileIo>> = vec![HashMap::new(); n];

    for e in &rec.io_events {
        let bin = (e.ts.saturating_sub(start) / bin_ns) as usize;
        let op = e.op();
        let moved = e.moved() as f64;
        if e.is_block() {
            requests_per_dev.entry(e.dev).or_default().add(e);
            if e.flags & ontime_trace::io::F_UNPAIRED != 0 {
                unpaired += 1;
            }
            if let Some(&g) = loop_owner.get(&e.dev) {
                let g = g as usize;
                if g < n {
                    virt[g].add(e);
                    if let Some(p) = series[g].get_mut(bin) {
                        p.add(SeriesLayer::Virtual, op, moved);
                    }
                }
            } else if physical_devs.contains(&e.dev) {
                match layout.owner(&io, e.dev, e.offset, e.bytes as u64).map(|g| g as usize) {
                    Some(g) if g < n => {
                        phys[g].add(e);
                        if let Some(p) = series[g].get_mut(bin) {
                            p.add(SeriesLayer::Physical, op, moved);
                        }
                    }
                    _ => phys_other.add(e),
                }
            }
            continue;
        }
        if e.group == NO_GROUP || e.group as usize >= n || op == IoOp::Open {
            continue;
        }
        let g = e.group as usize;
        if vmm_image.get(&(e.dev, e.ino)) == Some(&e.group) {
            virt[g].add(e);
            if let Some(p) = series[g].get_mut(bin) {
                p.add(SeriesLayer::Virtual, op, moved);
            }
            continue;
        }
        // A guest's own calls are inside it: what its VMM does to other
        // files (a 9p share, its logs) is elsewhere.
        let on_disk = disk_of
            .get(&e.group)
            .is_some_and(|d| d.loop_device.as_ref().is_some_and(|l| l.dev == e.dev));
        if !on_disk && disk_of.contains_key(&e.group) {
            elsewhere[g].add(e);
            continue;
        }
        app[g].add(e);
        if e.flags & ontime_trace::io::F_DIRECT != 0 && matches!(op, IoOp::Read | IoOp::Write) {
            direct_bytes[g] += e.moved();
        }
        if let Some(p) = series[g].get_mut(bin) {
            p.add(SeriesLayer::App, op, moved);
        }
        if matches!(op, IoOp::Read | IoOp::Write) {
            let f = files[g].entry((e.dev, e.ino)).or_insert_with(|| FileIo {
                path: names
                    .get(&(e.dev, e.ino))
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| format!("inode {} on {}:{}", e.ino, e.dev >> 20, e.dev & 0xfffff)),
                ..Default::default()
            });
            if op == IoOp::Read {
                f.read_bytes += e.moved();
            } else {
                f.write_bytes += e.moved();
            }
            f.direct |= e.flags & ontime_trace::io::F_DIRECT != 0;
        }
    }

    if io.app_layer == AppLayer::Counters {
        app_from_counters(rec, start, bin_ns, &mut app, &mut series);
    }
    let bin_s = bin_ns as f64 / 1e9;
    let mut tenants = Vec::with_capacity(n);
    let mut accs = app
        .into_iter()
        .zip(elsewhere)
        .zip(virt)
        .zip(phys)
        .map(|(((a, b), c), d)| (a, b, c, d));
    for (g, group) in rec.meta.groups.iter().enumerate() {
        let Some((a, b, c, d)) = accs.next() else { break };
        let (application, application_elsewhere, virtual_disk, physical_disk) =
            (a.finish(), b.finish(), c.finish(), d.finish());
        let absorption = Absorption {
            guest_cache_reads: Absorbed::of(application.read.bytes, virtual_disk.read.bytes),
            guest_cache_writes: Absorbed::of(application.write.bytes, virtual_disk.write.bytes),
            host_cache_reads: Absorbed::of(virtual_disk.read.bytes, physical_disk.read.bytes),
            host_cache_writes: Absorbed::of(virtual_disk.write.bytes, physical_disk.write.bytes),
        };
        let app_bytes = application.read.bytes + application.write.bytes;
        let disk = disk_of.get(&(g as u32)).map(|d| (*d).clone());
        let virtual_counters = disk
            .as_ref()
            .and_then(|d| d.loop_device.as_ref())
            .and_then(|l| counters(rec, l.dev, &l.name, &requests_per_dev));
        let mut tenant_files: Vec<FileIo> = files[g].drain().map(|(_, f)| f).collect();
        tenant_files.sort_by_key(|f| std::cmp::Reverse(f.read_bytes + f.write_bytes));
        tenant_files.truncate(10);
        let mut points = std::mem::take(&mut series[g]);
        for (i, p) in points.iter_mut().enumerate() {
            p.t = i as f64 * bin_s;
            for v in [
                &mut p.app_read,
                &mut p.app_write,
                &mut p.virtual_read,
                &mut p.virtual_write,
                &mut p.physical_read,
                &mut p.physical_write,
            ] {
                *v /= bin_s;
            }
        }
        tenants.push(TenantIo {
            name: group.name.clone(),
            cache: cache_state(rec, g as u32),
            disk,
            direct_share: (app_bytes > 0).then(|| direct_bytes[g] as f64 / app_bytes as f64),
            application,
            application_elsewhere,
            virtual_disk,
            physical_disk,
            absorption,
            virtual_counters,
            files: tenant_files,
            series_bin_s: bin_s,
            series: points,
            inside_guest: None,
        });
    }
    let mut physical_counters = Vec::new();
    let mut seen = Vec::new();
    for d in &io.disks {
        if let Some(p) = &d.physical {
            if !seen.contains(&p.dev) {
                seen.push(p.dev);
                physical_counters.extend(counters(rec, p.dev, &p.name, &requests_per_dev));
            }
        }
    }
    Ok(IoAnalysis {
        recording: path.to_path_buf(),
        start_ns: start,
        duration_ns,
        events: rec.io_events.len() as u64,
        lost: rec.end.as_ref().map(|e| e.lost).unwrap_or(0),
        unpaired_requests: unpaired,
        truncated: rec.end.is_none(),
        tenants,
        physical_other: phys_other.finish(),
        physical_counters,
        unavailable: rec.meta.unavailable.clone(),
        app_layer: io.app_layer,
    })
}

/// The application layer of a recording without per-call tracing: each
/// group's counters at the last state sample, and their growth between
/// samples spread over the series' bins.
fn app_from_counters(rec: &Recording, start: u64, bin_ns: u64, app: &mut [LayerAcc], series: &mut [Vec<SeriesPoint>]) {
    let mut prev: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    for st in &rec.io_states {
        for c in &st.apps {
            let g = c.group as usize;
            let Some(acc) = app.get_mut(g) else { continue };
            acc.stats.read.ops = c.syscr;
            acc.stats.read.bytes = c.rchar;
            acc.stats.write.ops = c.syscw;
            acc.stats.write.bytes = c.wchar;
            let (t0, r0, w0) = prev.insert(c.group, (st.ts, c.rchar, c.wchar)).unwrap_or((start, 0, 0));
            if let Some(points) = series.get_mut(g) {
                spread(points, start, bin_ns, t0, st.ts, c.rchar.saturating_sub(r0), |p| {
                    &mut p.app_read
                });
                spread(points, start, bin_ns, t0, st.ts, c.wchar.saturating_sub(w0), |p| {
                    &mut p.app_write
                });
            }
        }
    }
}

/// Adds `bytes` moved evenly over [from, to) to the bins it covers.
fn spread(
    points: &mut [SeriesPoint],
    start: u64,
    bin_ns: u64,
    from: u64,
    to: u64,
    bytes: u64,
    field: impl Fn(&mut SeriesPoint) -> &mut f64,
) {
    if bytes == 0 || points.is_empty() {
        return;
    }
    let (from, to) = (from.max(start) - start, to.max(start) - start);
    if to <= from {
        let i = ((to / bin_ns) as usize).min(points.len() - 1);
        *field(&mut points[i]) += bytes as f64;
        return;
    }
    let per_ns = bytes as f64 / (to - from) as f64;
    let mut t = from;
    while t < to {
        let i = (t / bin_ns) as usize;
        let bin_end = ((t / bin_ns) + 1) * bin_ns;
        let upto = bin_end.min(to);
        let Some(p) = points.get_mut(i) else { break };
        *field(p) += per_ns * (upto - t) as f64;
        t = upto;
    }
}

/// A bin of about a sixtieth of the recording, at least 100 ms, rounded to 1-2-5.
fn series_bin(duration_ns: u64) -> u64 {
    let want = (duration_ns / 60).max(100_000_000);
    let mut step = 100_000_000u64;
    loop {
        for m in [1, 2, 5] {
            if step * m >= want {
                return step * m;
            }
        }
        step *= 10;
    }
}

/// None where the recording did not count bios (`io record` without
/// `--merges`).
/// The requests the events show on one device.
#[derive(Default)]
struct DevRequests {
    requests: u64,
    failed: u64,
    read_bytes: u64,
    write_bytes: u64,
}

impl DevRequests {
    fn add(&mut self, e: &IoEvent) {
        self.requests += 1;
        if e.ret != 0 {
            self.failed += 1;
        }
        match e.op() {
            IoOp::Read => self.read_bytes += e.moved(),
            IoOp::Write => self.write_bytes += e.moved(),
            _ => {}
        }
    }
}

fn counters(rec: &Recording, dev: u32, name: &str, requests: &HashMap<u32, DevRequests>) -> Option<BlockCounters> {
    let first = rec
        .io_states
        .first()
        .and_then(|s| s.devices.iter().find(|c| c.dev == dev));
    let last = rec
        .io_states
        .last()
        .and_then(|s| s.devices.iter().find(|c| c.dev == dev));
    last?;
    let d = |f: fn(&ontime_trace::io::DeviceCounters) -> u64| match (first, last) {
        (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
        (None, Some(b)) => f(b),
        _ => 0,
    };
    let seen = requests.get(&dev);
    let kernel = match (first.and_then(|c| c.kernel), last.and_then(|c| c.kernel)) {
        (Some(a), Some(b)) if rec.io_states.len() > 1 => Some(b.since(&a)),
        _ => None,
    };
    Some(BlockCounters {
        device: name.to_string(),
        bios: d(|c| c.bios),
        bio_bytes: d(|c| c.bio_bytes),
        merges: d(|c| c.merges),
        splits: d(|c| c.splits),
        requests: seen.map_or(0, |r| r.requests),
        failed: seen.map_or(0, |r| r.failed),
        read_bytes: seen.map_or(0, |r| r.read_bytes),
        write_bytes: seen.map_or(0, |r| r.write_bytes),
        kernel,
    })
}

fn cache_state(rec: &Recording, group: u32) -> CacheState {
    let mut c = CacheState::default();
    for s in &rec.io_states {
        if let Some(m) = s.memory.iter().find(|m| m.group == group) {
            let first = c.guest_cache.is_none();
            c.guest_cache.get_or_insert_with(Span::default).push(first, m.file);
            let first = c.swap.is_none();
            c.swap.get_or_insert_with(Span::default).push(first, m.swap);
            c.guest_dirty_end = Some(m.dirty + m.writeback);
            c.memory_limit = m.limit;
        }
        if let Some(i) = s.images.iter().find(|i| i.group == group) {
            let first = c.host_cache.is_none();
            c.host_cache
                .get_or_insert_with(Span::default)
                .push(first, i.cache * PAGE);
            c.host_dirty_end = Some((i.dirty + i.writeback) * PAGE);
        }
    }
    c
}

pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn pct(a: &Absorbed) -> String {
    match (a.share, a.amplification) {
        (None, Some(_)) => "- (nothing above, traffic below)".into(),
        (None, None) => "-".into(),
        (Some(_), Some(x)) if x.is_finite() && x >= 1.01 => format!("0 % (below moved {x:.2}x as much)"),
        (Some(_), Some(x)) if x.is_finite() => format!("0 % (below moved {:.1} % more)", (x - 1.0) * 100.0),
        (Some(s), _) => format!("{:.1} %", s * 100.0),
    }
}

fn lat(s: &Option<Summary>) -> String {
    let Some(s) = s else { return "-".into() };
    let p = |name: &str| {
        s.percentiles_ns
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.value_ns)
            .map(format_ns)
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "{}/{}/{}",
        p("p50"),
        p("p99"),
        s.max_ns.map(format_ns).unwrap_or_default()
    )
}

fn layer_line(name: &str, l: &LayerStats) -> String {
    format!(
        "  {:<15} {:>9} {:>11} {:>22} {:>9} {:>11} {:>22} {:>6}\n",
        name,
        l.read.ops,
        format_bytes(l.read.bytes),
        lat(&l.read.latency),
        l.write.ops,
        format_bytes(l.write.bytes),
        lat(&l.write.latency),
        l.syncs
    )
}

fn span(s: &Option<Span>) -> String {
    match s {
        Some(s) => format!(
            "{} -> {} (max {})",
            format_bytes(s.start),
            format_bytes(s.end),
            format_bytes(s.max)
        ),
        None => "not measured".into(),
    }
}

/// The report as text.
pub fn text(a: &IoAnalysis) -> String {
    let mut s = format!(
        "I/O of {} tenant(s) over {} ({} events, {} lost{})\n",
        a.tenants.len(),
        format_ns(a.duration_ns),
        a.events,
        a.lost,
        if a.truncated { "; recording cut short" } else { "" }
    );
    if a.lost > 0 {
        s.push_str("WARNING: events were lost; every count below is a lower bound\n");
    }
    for u in &a.unavailable {
        s.push_str(&format!("not recorded: {u}\n"));
    }
    if a.app_layer == AppLayer::Counters {
        s.push_str(
            "application layer: each thread's I/O counters (every read and write, files or not: a read of /dev/zero or a write to /dev/null counts, and shows as absorbed by the guest cache; no sizes, latency or files: record with --calls for those)\n",
        );
    }
    for t in &a.tenants {
        s.push('\n');
        match &t.disk {
            Some(d) => s.push_str(&format!(
                "{}: disk {} ({} {}; image {}{})",
                t.name,
                d.virtual_name(),
                if d.direct { "direct-I/O" } else { "buffered" },
                if d.loop_device.is_some() { "loop" } else { "VMM" },
                d.image.display(),
                d.physical
                    .as_ref()
                    .map(|p| format!(" on {}", p.name))
                    .unwrap_or_default()
            )),
            None => s.push_str(&format!("{}: no virtual disk (application layer only)", t.name)),
        }
        if let Some(l) = t.cache.memory_limit {
            s.push_str(&format!(", memory limit {}", format_bytes(l)));
        }
        s.push('\n');
        s.push_str(&format!(
            "  {:<15} {:>9} {:>11} {:>22} {:>9} {:>11} {:>22} {:>6}\n",
            "layer", "reads", "read bytes", "read p50/p99/max", "writes", "written", "write p50/p99/max", "syncs"
        ));
        s.push_str(&layer_line("application", &t.application));
        if let Some(g) = &t.inside_guest {
            s.push_str(&layer_line("guest's disk", &g.block));
        }
        if t.disk.is_some() {
            s.push_str(&layer_line("virtual disk", &t.virtual_disk));
            s.push_str(&layer_line("physical disk", &t.physical_disk));
        }
        if let Some(g) = &t.inside_guest {
            s.push_str(&format!(
                "  (application layer and guest cache recorded inside the guest ({}){}; the virtual disk is its VMM's calls on the image; {})\n",
                match g.app_layer {
                    AppLayer::Calls => "every call",
                    AppLayer::Counters => "its threads' counters",
                },
                if g.lost > 0 {
                    format!(", {} events lost there", g.lost)
                } else {
                    String::new()
                },
                match &g.clock {
                    Some(c) => format!(
                        "its clock placed from {} requests seen on both sides, spread {}",
                        c.pairs,
                        format_ns(c.spread_ns)
                    ),
                    None => "its clock not placed: its series stay out of the host's".into(),
                }
            ));
        }
        let other = &t.application_elsewhere;
        if other.read.ops + other.write.ops > 0 {
            s.push_str(&format!(
                "  (also {} read and {} written on files outside its disk, not counted above)\n",
                format_bytes(other.read.bytes),
                format_bytes(other.write.bytes)
            ));
        }
        let common = |o: &OpStats| -> Option<String> {
            let (size, n) = o.sizes.iter().max_by_key(|(_, n)| *n)?;
            Some(format!(
                "{} ({:.0} %)",
                format_bytes(*size),
                *n as f64 * 100.0 / o.ops.max(1) as f64
            ))
        };
        let mut sizes = Vec::new();
        for (name, l) in [
            ("application", &t.application),
            ("virtual disk", &t.virtual_disk),
            ("physical disk", &t.physical_disk),
        ] {
            for (dir, o) in [("reads", &l.read), ("writes", &l.write)] {
                if let Some(c) = common(o) {
                    sizes.push(format!("{name} {dir} {c}"));
                }
            }
        }
        if !sizes.is_empty() {
            s.push_str(&format!("  most common size (up to): {}\n", sizes.join(", ")));
        }
        if t.disk.is_some() {
            let ab = &t.absorption;
            s.push_str(&format!(
                "  absorbed by the guest cache: reads {}, writes {}\n  absorbed by the host cache:  reads {}, writes {}\n",
                pct(&ab.guest_cache_reads),
                pct(&ab.guest_cache_writes),
                pct(&ab.host_cache_reads),
                pct(&ab.host_cache_writes)
            ));
            let per = |a: u64, b: u64| {
                if b == 0 {
                    "-".to_string()
                } else {
                    format!("{:.2}", a as f64 / b as f64)
                }
            };
            s.push_str(&format!(
                "  requests: {} calls -> {} virtual-disk requests -> {} physical requests (calls per virtual request {}, virtual per physical {})\n",
                t.application.read.ops + t.application.write.ops,
                t.virtual_disk.read.ops + t.virtual_disk.write.ops,
                t.physical_disk.read.ops + t.physical_disk.write.ops,
                per(
                    t.application.read.ops + t.application.write.ops,
                    t.virtual_disk.read.ops + t.virtual_disk.write.ops
                ),
                per(
                    t.virtual_disk.read.ops + t.virtual_disk.write.ops,
                    t.physical_disk.read.ops + t.physical_disk.write.ops
                ),
            ));
            if let Some(c) = &t.virtual_counters {
                s.push_str(&format!(
                    "  {}: {} bios merged into {} requests ({} merges, {} splits)\n",
                    c.device, c.bios, c.requests, c.merges, c.splits
                ));
            }
        }
        if let Some(d) = t.direct_share {
            if d > 0.0 {
                s.push_str(&format!("  O_DIRECT: {:.1} % of its bytes\n", d * 100.0));
            }
        }
        s.push_str(&format!(
            "  guest cache {}; host cache {}; swap {}\n",
            span(&t.cache.guest_cache),
            span(&t.cache.host_cache),
            span(&t.cache.swap)
        ));
        if let Some(dirty) = t.cache.host_dirty_end.filter(|&d| d > 0) {
            s.push_str(&format!(
                "  {} of the image still dirty in the host cache at the end (written later; counted as absorbed)\n",
                format_bytes(dirty)
            ));
        }
        if let Some(dirty) = t.cache.guest_dirty_end.filter(|&d| d > 0) {
            s.push_str(&format!(
                "  {} dirty in the guest cache at the end (written later; counted as absorbed)\n",
                format_bytes(dirty)
            ));
        }
        for f in t.files.iter().take(5) {
            s.push_str(&format!(
                "  file {}: read {}, written {}{}\n",
                f.path,
                format_bytes(f.read_bytes),
                format_bytes(f.write_bytes),
                if f.direct { " (O_DIRECT)" } else { "" }
            ));
        }
    }
    let o = &a.physical_other;
    if o.read.ops + o.write.ops > 0 {
        s.push_str(&format!(
            "\nphysical disk outside the images (host I/O, its file system's journal and metadata): {} reads {}, {} writes {}\n",
            o.read.ops,
            format_bytes(o.read.bytes),
            o.write.ops,
            format_bytes(o.write.bytes)
        ));
    }
    for c in &a.physical_counters {
        s.push_str(&format!(
            "{}: {} bios, {} requests ({} merges, {} splits){}\n",
            c.device,
            c.bios,
            c.requests,
            c.merges,
            c.splits,
            if c.failed > 0 {
                format!("; {} failed", c.failed)
            } else {
                String::new()
            }
        ));
        if let Some(k) = &c.kernel {
            s.push_str(&format!(
                "  the kernel's own count: {} requests, read {}, written {} (the events: read {}, written {})\n",
                k.reads + k.writes,
                format_bytes(k.read_bytes),
                format_bytes(k.write_bytes),
                format_bytes(c.read_bytes),
                format_bytes(c.write_bytes)
            ));
        }
    }
    s
}

type Pick = fn(&SeriesPoint) -> f64;

/// Writes one figure per tenant with a disk (bytes per second at each
/// layer) as SVG and PNG; returns the files.
pub fn figures(a: &IoAnalysis, dir: &Path) -> Result<Vec<PathBuf>> {
    ontime_plot::register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut out = Vec::new();
    for t in &a.tenants {
        if t.series.is_empty() {
            continue;
        }
        let mut c = ontime_plot::Chart::new(
            &format!("io-{}", t.name),
            format!("{}: bytes per second at each layer", t.name),
            "time (s)",
            "MiB/s",
        );
        let pick: [(&str, Pick); 6] = [
            ("application read", |p| p.app_read),
            ("virtual disk read", |p| p.virtual_read),
            ("physical disk read", |p| p.physical_read),
            ("application write", |p| p.app_write),
            ("virtual disk write", |p| p.virtual_write),
            ("physical disk write", |p| p.physical_write),
        ];
        for (name, f) in pick {
            let pts: Vec<(f64, f64)> = t.series.iter().map(|p| (p.t, f(p) / 1048576.0)).collect();
            if pts.iter().any(|p| p.1 > 0.0) {
                c.series.push((name.to_string(), pts));
            }
        }
        if c.series.is_empty() {
            continue;
        }
        let svg = dir.join(format!("io-{}.svg", t.name));
        ontime_core::fsio::write_atomic(&svg, c.svg()?.as_bytes())?;
        let png = dir.join(format!("io-{}.png", t.name));
        c.png(&png)?;
        out.push(svg);
        out.push(png);
    }
    Ok(out)
}

impl ontime_core::export::TextReport for IoAnalysis {
    fn text(&self) -> String {
        text(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorption_is_the_share_that_stayed_above() {
        let a = Absorbed::of(1000, 250);
        assert_eq!(a.share, Some(0.75));
        assert_eq!(a.amplification, None);
        let b = Absorbed::of(1000, 4000);
        assert_eq!(b.share, Some(0.0));
        assert_eq!(b.amplification, Some(4.0));
        assert_eq!(Absorbed::of(0, 0).share, None);
    }

    /// A guest 3 h 7 s behind the host whose RTC is 0.8 s off, its
    /// requests completing 40 us after its VMM's calls, at irregular times.
    #[test]
    fn the_guest_clock_is_found_from_the_requests_seen_on_both_sides() {
        use ontime_trace::io::io_kind;
        use ontime_trace::recording::Meta;
        const OFFSET: i64 = 3 * 3600 * 1_000_000_000 + 7_000_000_000;
        const LAG: i64 = 40_000;
        let image = (8 << 20 | 1, 42);
        let guest_dev = 254 << 20;
        let mut t = 5_000_000_000u64;
        let mut guest_times = Vec::new();
        for i in 0..400u64 {
            t += 1_000_000 + (i * 7_919 % 23) * 1_000_000;
            guest_times.push(t);
        }
        let recording = |start: u64, realtime: u64, events: Vec<IoEvent>| {
            let mut r = Recording::of_events(Meta::of_this_host("bpf", start, vec![]), HashMap::new(), vec![], start);
            r.meta.start_realtime_ns = realtime;
            r.io_events = events;
            r
        };
        let guest = recording(
            1_000_000_000,
            1_000_000_000_000,
            guest_times
                .iter()
                .map(|&ts| IoEvent {
                    ts,
                    dev: guest_dev,
                    kind: io_kind::BLOCK,
                    rwbs: *b"R\0\0\0\0\0\0\0",
                    ..Default::default()
                })
                .collect(),
        );
        let host = recording(
            (1_000_000_000 + OFFSET) as u64,
            1_000_000_000_000 + 800_000_000,
            guest_times
                .iter()
                .map(|&ts| IoEvent {
                    ts: (ts as i64 + OFFSET - LAG) as u64,
                    dev: image.0,
                    ino: image.1,
                    group: 0,
                    kind: io_kind::PREADV,
                    ret: 4096,
                    ..Default::default()
                })
                .collect(),
        );
        let o = clock_offset(&host, 0, image, &guest, guest_dev).expect("an offset");
        assert_eq!(o.host_minus_guest_ns, OFFSET - LAG, "{o:?}");
        assert_eq!(o.pairs, 400);
        assert_eq!(o.spread_ns, 0);
        // Nothing to pair: no offset.
        assert_eq!(clock_offset(&host, 1, image, &guest, guest_dev), None);
    }

    /// A device's line: the events' requests (a failed one counts no
    /// bytes) beside the kernel's own statistics over the recording.
    #[test]
    fn a_devices_requests_are_set_beside_the_kernels_count() {
        use ontime_trace::io::{io_kind, DeviceCounters, DiskStat, IoState};
        use ontime_trace::recording::Meta;
        let dev = 254 << 20;
        let mut rec = Recording::of_events(Meta::of_this_host("bpf", 0, vec![]), HashMap::new(), vec![], 0);
        let state = |ts: u64, bios: u64, kernel: DiskStat| IoState {
            ts,
            devices: vec![DeviceCounters {
                dev,
                bios,
                kernel: Some(kernel),
                ..Default::default()
            }],
            ..Default::default()
        };
        let boot = DiskStat {
            reads: 1000,
            read_bytes: 1 << 30,
            writes: 2000,
            write_bytes: 2 << 30,
        };
        let later = DiskStat {
            reads: 1001,
            read_bytes: (1 << 30) + 4096,
            writes: 2003,
            write_bytes: (2 << 30) + (3 << 20),
        };
        rec.io_states = vec![state(1, 10, boot), state(2, 15, later)];
        let request = |rwbs: &[u8; 8], bytes: u32, ret: i64| IoEvent {
            dev,
            kind: io_kind::BLOCK,
            rwbs: *rwbs,
            bytes,
            ret,
            ..Default::default()
        };
        let mut seen: HashMap<u32, DevRequests> = HashMap::new();
        for e in [
            request(b"R\0\0\0\0\0\0\0", 4096, 0),
            request(b"W\0\0\0\0\0\0\0", 1 << 20, 0),
            request(b"FW\0\0\0\0\0\0", 1 << 20, 0),
            request(b"W\0\0\0\0\0\0\0", 1 << 20, -5),
        ] {
            seen.entry(e.dev).or_default().add(&e);
        }
        let c = counters(&rec, dev, "vda", &seen).expect("the device's counters");
        assert_eq!((c.bios, c.requests, c.failed), (5, 4, 1));
        assert_eq!((c.read_bytes, c.write_bytes), (4096, 2 << 20));
        assert_eq!(
            c.kernel,
            Some(DiskStat {
                reads: 1,
                read_bytes: 4096,
                writes: 3,
                write_bytes: 3 << 20
            })
        );
        assert!(text(&IoAnalysis {
            physical_counters: vec![c],
            ..Default::default()
        })
        .contains("vda: 5 bios, 4 requests (0 merges, 0 splits); 1 failed\n  the kernel's own count: 4 requests, read 4.0 KiB, written 3.0 MiB (the events: read 4.0 KiB, written 2.0 MiB)"));
    }

    #[test]
    fn bins_follow_1_2_5() {
        assert_eq!(series_bin(1_000_000_000), 100_000_000);
        assert_eq!(series_bin(30_000_000_000), 500_000_000);
        assert_eq!(series_bin(100_000_000_000), 2_000_000_000);
    }

    #[test]
    fn sizes_bucket_by_powers_of_two() {
        assert_eq!(size_bucket(0), 512);
        assert_eq!(size_bucket(4096), 4096);
        assert_eq!(size_bucket(4097), 8192);
    }
}
