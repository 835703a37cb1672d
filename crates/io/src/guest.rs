//! A QEMU guest recorded from inside as well as from the host: its clock
//! placed on the host's from requests seen on both sides, and its
//! recording folded into the host's view of it.
use ontime_recording::io_abi::IoOp;
use ontime_recording::recording::Recording;

use crate::analysis::{ClockOffset, GuestView, IoAnalysis};
use crate::cache::Absorbed;
use crate::series::spread;

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
    let wall = |m: &ontime_recording::recording::Meta| m.start_ns as i64 - m.start_realtime_ns as i64;
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use ontime_recording::io_abi::IoEvent;

    use super::*;

    /// A guest 3 h 7 s behind the host whose RTC is 0.8 s off, its
    /// requests completing 40 us after its VMM's calls, at irregular times.
    #[test]
    fn the_guest_clock_is_found_from_the_requests_seen_on_both_sides() {
        use ontime_recording::io_abi::io_kind;
        use ontime_recording::recording::Meta;
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
}
