//! What a recording claims, checked in one place before anything is sized
//! from it. [`Recording::read`](crate::recording::Recording::read) is the
//! one reader of `.otrec` files (`observe report`, `profile report`, `io
//! report`, the lab, `sim calibrate`, the fleet's analysis of windows), and
//! it calls these as it parses. A claim out of its range is a corrupt
//! recording, refused as [`ontime_core::BadInput`] naming the file, the
//! claim and its range: never an allocation, a panic or a hang.
//!
//! | claim | range |
//! |---|---|
//! | the file | a regular file (never a FIFO or a device), at most [`MAX_RECORDING_BYTES`] |
//! | a block's length | at most [`MAX_BLOCK`]; one past the end of the file is a recording cut short there, and only what the file holds is read |
//! | META's CPUs | 1 to [`MAX_RECORDED_CPUS`] |
//! | META's groups | at most [`MAX_RECORDED_GROUPS`] |
//! | META's stack sampling period | [`MIN_SAMPLE_PERIOD_NS`] to [`MAX_SAMPLE_PERIOD_NS`] |
//! | a thread | tid (and tgid, unless unknown) below [`TID_LIMIT`]; its group one of META's |
//! | a mapping | start <= end, file offset + length within 64 bits, a path of at most `PATH_MAX` |
//! | every time stamp | within the recording (its start to END, a week when cut short), give or take a second |
//! | END | not before the start, at most [`MAX_DURATION_NS`] after it, at most [`MAX_EVENT_GAP_NS`] after the last stamp; its storing time at most [`MAX_DURATION_NS`] |
//!
//! What is left is bounded by the file's size: events, samples and the
//! JSON blocks each take in memory about what they take on disk.

use std::fmt::Display;
use std::path::Path;

use ontime_core::bad_input;
use ontime_core::duration::format_ns;
pub use ontime_core::limits::{
    MAX_DURATION_NS, MAX_EVENT_GAP_NS, MAX_RECORDED_CPUS, MAX_RECORDED_GROUPS, MAX_RECORDING_BYTES,
    MAX_SAMPLE_PERIOD_NS, MIN_SAMPLE_PERIOD_NS, TID_LIMIT,
};

use super::{End, Meta, ThreadInfo};
use crate::event::Event;
use crate::io_abi::IoEvent;
use crate::io_layout::IoState;
use crate::maps::ProcessMaps;
use crate::samples::SampleBatch;

/// A block larger than this is corruption, not data (the writer splits
/// events into blocks of 1 MiB).
pub const MAX_BLOCK: u32 = 256 << 20;

/// Stamps may lie this far outside the recording: per-CPU buffers are
/// read a moment late, and the probes attach a moment before the start.
const SLACK_NS: u64 = 1_000_000_000;

/// Longest path a mapping may name (Linux's PATH_MAX).
const MAX_PATH_BYTES: usize = 4096;

/// The error for a corrupt recording: the file, what it claims, and what
/// can be done.
pub fn corrupt(path: &Path, what: impl Display) -> anyhow::Error {
    bad_input(format!(
        "{}: corrupt recording: {what} (the file is damaged or not made by ontime; record it again)",
        path.display()
    ))
}

/// A block's length, read at byte `at` of the file.
pub(crate) fn block_len(path: &Path, kind: u32, len: u32, at: u64) -> anyhow::Result<()> {
    if len > MAX_BLOCK {
        return Err(corrupt(
            path,
            format!("the block of kind {kind} at byte {at} claims {len} bytes, more than a block holds ({MAX_BLOCK})"),
        ));
    }
    Ok(())
}

/// META, as soon as it is parsed: every analysis sizes per-CPU and
/// per-group state from it.
pub(crate) fn meta(path: &Path, meta: &Meta) -> anyhow::Result<()> {
    if meta.cpus == 0 || meta.cpus as u64 > MAX_RECORDED_CPUS {
        return Err(corrupt(
            path,
            format!(
                "META says {} CPUs; a recording holds 1 to {MAX_RECORDED_CPUS}",
                meta.cpus
            ),
        ));
    }
    if meta.groups.len() as u64 > MAX_RECORDED_GROUPS {
        return Err(corrupt(
            path,
            format!(
                "META names {} groups; a recording holds at most {MAX_RECORDED_GROUPS}",
                meta.groups.len()
            ),
        ));
    }
    if let Some(p) = meta.sample_period_ns {
        if !(MIN_SAMPLE_PERIOD_NS..=MAX_SAMPLE_PERIOD_NS).contains(&p) {
            return Err(corrupt(
                path,
                format!(
                    "META says stacks were sampled every {p} ns; a recording samples every {MIN_SAMPLE_PERIOD_NS} to {MAX_SAMPLE_PERIOD_NS} ns"
                ),
            ));
        }
    }
    Ok(())
}

/// One entry of a THREADS block.
pub(crate) fn thread(path: &Path, t: &ThreadInfo) -> anyhow::Result<()> {
    // A tgid of u32::MAX is the recorder's mark for a thread gone before
    // it was looked up; 0 for one not looked up yet.
    if u64::from(t.tid) >= TID_LIMIT || (u64::from(t.tgid) >= TID_LIMIT && t.tgid != u32::MAX) {
        return Err(corrupt(
            path,
            format!(
                "THREADS names thread {} of process {}; thread ids lie below {TID_LIMIT}",
                t.tid, t.tgid
            ),
        ));
    }
    Ok(())
}

/// Every thread's group, once META and all THREADS blocks are read.
pub(crate) fn thread_groups<'a>(
    path: &Path,
    meta: &Meta,
    threads: impl IntoIterator<Item = &'a ThreadInfo>,
) -> anyhow::Result<()> {
    let groups = meta.groups.len();
    for t in threads {
        if let Some(g) = t.group.filter(|&g| g as usize >= groups) {
            return Err(corrupt(
                path,
                format!(
                    "THREADS puts thread {} in group {g}, but META names {groups} groups (0 to {})",
                    t.tid,
                    groups.saturating_sub(1)
                ),
            ));
        }
    }
    Ok(())
}

/// One process's entry of a MAPS block: symbolisation computes file
/// offsets from it and opens the paths it names.
pub(crate) fn process_maps(path: &Path, m: &ProcessMaps) -> anyhow::Result<()> {
    if u64::from(m.pid) >= TID_LIMIT {
        return Err(corrupt(
            path,
            format!("MAPS names process {}; process ids lie below {TID_LIMIT}", m.pid),
        ));
    }
    for map in &m.maps {
        let fits = map.start <= map.end && map.offset.checked_add(map.end - map.start).is_some();
        if !fits {
            return Err(corrupt(
                path,
                format!(
                    "MAPS maps {:#x}..{:#x} at file offset {:#x} for process {}: not a range of a file",
                    map.start, map.end, map.offset, m.pid
                ),
            ));
        }
        if map.path.len() > MAX_PATH_BYTES {
            return Err(corrupt(
                path,
                format!(
                    "MAPS names a path of {} bytes for process {}; a path has at most {MAX_PATH_BYTES}",
                    map.path.len(),
                    m.pid
                ),
            ));
        }
    }
    Ok(())
}

/// Every stamp lies within the recording (its start to its end, or a week
/// after its start when it was cut short), give or take a second; END
/// lies after the start, within the longest recording, and within
/// [`MAX_EVENT_GAP_NS`] of the last stamp (no host goes an hour without a
/// scheduler event): a forged or corrupt block is refused, not turned
/// into a recording of 72 million seconds.
pub(crate) fn times(
    path: &Path,
    meta: &Meta,
    end: Option<&End>,
    events: &[Event],
    samples: &SampleBatch,
    io_events: &[IoEvent],
    io_states: &[IoState],
) -> anyhow::Result<()> {
    let start = meta.start_ns;
    if let Some(e) = end {
        if e.end_ns < start {
            return Err(corrupt(path, "it ends before it starts"));
        }
        let span = e.end_ns - start;
        if span > MAX_DURATION_NS {
            return Err(corrupt(
                path,
                format!(
                    "END says it lasted {}; a recording lasts at most {}",
                    format_ns(span),
                    format_ns(MAX_DURATION_NS)
                ),
            ));
        }
        if let Some(store) = e.store_ns.filter(|&s| s > MAX_DURATION_NS) {
            return Err(corrupt(
                path,
                format!(
                    "END says storing it took {}; at most {}",
                    format_ns(store),
                    format_ns(MAX_DURATION_NS)
                ),
            ));
        }
    }
    let first = start.saturating_sub(SLACK_NS);
    let last = end
        .map_or(start.saturating_add(MAX_DURATION_NS), |e| e.end_ns)
        .saturating_add(SLACK_NS);
    let stamps = events
        .iter()
        .map(|e| (e.ts, "scheduler event"))
        .chain(samples.samples.iter().map(|s| (s.ts, "stack sample")))
        .chain(io_events.iter().map(|e| (e.ts, "I/O event")))
        .chain(io_states.iter().map(|s| (s.ts, "I/O state sample")));
    let mut latest = start;
    for (ts, what) in stamps {
        if !(first..=last).contains(&ts) {
            return Err(corrupt(
                path,
                format!(
                    "a {what} at {} s lies outside the recording ({} .. {} s)",
                    ts as f64 / 1e9,
                    start as f64 / 1e9,
                    last.saturating_sub(SLACK_NS) as f64 / 1e9
                ),
            ));
        }
        latest = latest.max(ts);
    }
    if let Some(e) = end {
        if e.end_ns > latest.saturating_add(MAX_EVENT_GAP_NS) {
            return Err(corrupt(
                path,
                format!(
                    "END at {} s lies {} after its last event ({} s); a recording ends within {} of its last event",
                    e.end_ns as f64 / 1e9,
                    format_ns(e.end_ns - latest),
                    latest as f64 / 1e9,
                    format_ns(MAX_EVENT_GAP_NS)
                ),
            ));
        }
    }
    Ok(())
}
