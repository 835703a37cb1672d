//! The layered analysis of a recording: per tenant, the application,
//! virtual disk and physical disk layers, the caches' absorption between
//! them, the files it moved most, its time series; the physical disks'
//! traffic outside every image.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ontime_recording::io_abi::{IoOp, NO_GROUP};
use ontime_recording::io_layout::{AppLayer, TenantDisk};
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

use crate::cache::{cache_state, Absorbed, Absorption, CacheState};
use crate::layers::{counters, BlockCounters, DevRequests, LayerAcc, LayerStats};
use crate::series::{series_bin, spread, SeriesLayer, SeriesPoint};

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
    /// The VMM's asynchronous requests on the image begun in the recording
    /// and never seen to complete, by the size they asked for (not in
    /// `virtual_disk`): in flight at its end, or completed where the host
    /// hides the events.
    #[serde(default, skip_serializing_if = "Unfinished::is_empty")]
    pub virtual_unfinished: Unfinished,
    /// A QEMU guest recorded from inside too ([`merge_guest`](crate::merge_guest)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside_guest: Option<GuestView>,
}

/// Requests begun and never seen to complete, by the bytes they asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unfinished {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
}

impl Unfinished {
    pub fn is_empty(&self) -> bool {
        self.reads + self.writes == 0
    }
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
    /// Requests seen at one end only: block requests completed without
    /// their issue, asynchronous requests begun and never seen to complete
    /// (each tenant's `virtual_unfinished`).
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
    let mut unfinished = vec![Unfinished::default(); n];
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
            if e.flags & ontime_recording::io_abi::F_UNPAIRED != 0 {
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
        if e.flags & ontime_recording::io_abi::F_UNPAIRED != 0 {
            unpaired += 1;
            if vmm_image.get(&(e.dev, e.ino)) == Some(&e.group) {
                let u = &mut unfinished[g];
                match op {
                    IoOp::Read => (u.reads, u.read_bytes) = (u.reads + 1, u.read_bytes + e.bytes as u64),
                    IoOp::Write => (u.writes, u.write_bytes) = (u.writes + 1, u.write_bytes + e.bytes as u64),
                    _ => {}
                }
            }
            continue;
        }
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
        if e.flags & ontime_recording::io_abi::F_DIRECT != 0 && matches!(op, IoOp::Read | IoOp::Write) {
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
            f.direct |= e.flags & ontime_recording::io_abi::F_DIRECT != 0;
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
            virtual_unfinished: unfinished[g],
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

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_recording::groups::{Group, GroupKind};
    use ontime_recording::io_abi::{io_kind, IoEvent, F_UNPAIRED};
    use ontime_recording::io_layout::{IoMeta, TenantDisk, VmmAio};
    use ontime_recording::recording::Meta;

    /// A QEMU guest's image read through Linux AIO: one read seen to
    /// complete, one begun and never seen to complete (the reader's last
    /// drain marks it unpaired, at the size it asked for). The first is in
    /// the virtual disk; the second only in `virtual_unfinished`, and in
    /// `unpaired_requests`.
    #[test]
    fn reads_never_seen_to_complete_are_kept_apart_at_their_size() {
        const MIB: u32 = 1 << 20;
        let image = ((8 << 20) | 1, 42);
        let mut meta = Meta::of_this_host("bpf", 1_000, vec![]);
        meta.groups = vec![Group {
            name: "t0".into(),
            kind: GroupKind::Tenant,
            source: vec![],
            vcpu_names: false,
        }];
        meta.io = Some(IoMeta {
            disks: vec![TenantDisk {
                group: 0,
                image: "/img".into(),
                loop_device: None,
                direct: true,
                physical: None,
                partition_start: 0,
                image_file: Some(image),
                aio: VmmAio::Native,
            }],
            memory: vec![],
            state_every_ns: 250_000_000,
            cachestat: false,
            app_layer: AppLayer::Calls,
        });
        let read = |ts: u64, ret: i64, flags: u8| IoEvent {
            ts,
            dev: image.0,
            ino: image.1,
            group: 0,
            kind: io_kind::AIO_READ,
            bytes: MIB,
            ret,
            flags,
            ..Default::default()
        };
        let mut rec = Recording::of_events(meta, HashMap::new(), vec![], 10_000);
        rec.io_events = vec![read(2_000, MIB as i64, 0), read(3_000, 0, F_UNPAIRED)];
        let a = analyze(&rec, Path::new("x.otrec")).unwrap();
        let t = &a.tenants[0];
        assert_eq!((t.virtual_disk.read.ops, t.virtual_disk.read.bytes), (1, MIB as u64));
        assert_eq!(
            t.virtual_unfinished,
            Unfinished {
                reads: 1,
                read_bytes: MIB as u64,
                ..Default::default()
            }
        );
        assert_eq!(a.unpaired_requests, 1);
    }
}
