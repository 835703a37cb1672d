//! Per-layer counts: reads and writes at one layer (operations, bytes,
//! request sizes, latency) and their accumulation from events, and a
//! block device's bios, merges, splits and requests beside the kernel's
//! own statistics.
use std::collections::HashMap;

use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_recording::io_abi::{IoEvent, IoOp};
use ontime_recording::recording::Recording;
use serde::{Deserialize, Serialize};

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
    pub kernel: Option<ontime_recording::io_layout::DiskStat>,
}

/// Accumulates one layer. There are four per group a recording names and
/// a histogram holds some 270 KiB whatever it holds, so one is made only
/// for a layer that saw a latency.
#[derive(Default)]
pub(crate) struct LayerAcc {
    pub(crate) stats: LayerStats,
    read_lat: Option<Box<LatencyHistogram>>,
    write_lat: Option<Box<LatencyHistogram>>,
    read_sizes: HashMap<u64, u64>,
    write_sizes: HashMap<u64, u64>,
}

fn size_bucket(bytes: u64) -> u64 {
    bytes.max(512).next_power_of_two()
}

impl LayerAcc {
    pub(crate) fn add(&mut self, e: &IoEvent) {
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
            lat.get_or_insert_with(|| Box::new(LatencyHistogram::new()))
                .record(e.latency);
        }
    }

    pub(crate) fn finish(mut self) -> LayerStats {
        let sorted = |m: HashMap<u64, u64>| {
            let mut v: Vec<(u64, u64)> = m.into_iter().collect();
            v.sort();
            v
        };
        self.stats.read.sizes = sorted(self.read_sizes);
        self.stats.write.sizes = sorted(self.write_sizes);
        self.stats.read.latency = self.read_lat.map(|h| h.summary(None));
        self.stats.write.latency = self.write_lat.map(|h| h.summary(None));
        self.stats
    }
}

/// The requests the events show on one device.
#[derive(Default)]
pub(crate) struct DevRequests {
    requests: u64,
    failed: u64,
    read_bytes: u64,
    write_bytes: u64,
}

impl DevRequests {
    pub(crate) fn add(&mut self, e: &IoEvent) {
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

/// None where the recording did not count bios (`io record` without
/// `--merges`).
pub(crate) fn counters(
    rec: &Recording,
    dev: u32,
    name: &str,
    requests: &HashMap<u32, DevRequests>,
) -> Option<BlockCounters> {
    let first = rec
        .io_states
        .first()
        .and_then(|s| s.devices.iter().find(|c| c.dev == dev));
    let last = rec
        .io_states
        .last()
        .and_then(|s| s.devices.iter().find(|c| c.dev == dev));
    last?;
    let d = |f: fn(&ontime_recording::io_layout::DeviceCounters) -> u64| match (first, last) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{text, IoAnalysis};

    /// A device's line: the events' requests (a failed one counts no
    /// bytes) beside the kernel's own statistics over the recording.
    #[test]
    fn a_devices_requests_are_set_beside_the_kernels_count() {
        use ontime_recording::io_abi::io_kind;
        use ontime_recording::io_layout::{DeviceCounters, DiskStat, IoState};
        use ontime_recording::recording::Meta;
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
    fn sizes_bucket_by_powers_of_two() {
        assert_eq!(size_bucket(0), 512);
        assert_eq!(size_bucket(4096), 4096);
        assert_eq!(size_bucket(4097), 8192);
    }
}
