//! The recording file: a header, then length-prefixed blocks streamed as
//! the recorder drains the ring, so a recording cut short (power loss,
//! SIGKILL) still reads up to its last complete block.
//!
//! ```text
//! "OTREC\0" u16 version
//! block*: u32 kind, u32 length, payload
//!   META    JSON Meta (first block)
//!   EVENTS  length/24 events (event.rs layout, little endian)
//!   THREADS JSON [ThreadInfo] (new or renamed threads since the last one)
//!   END     JSON End (last block of a recording that stopped cleanly)
//!   SAMPLES stack samples (samples.rs layout; `ontime profile record`)
//!   MAPS    JSON [ProcessMaps] (executable mappings of sampled processes)
//!   IO_EVENTS  length/72 I/O events (io_abi.rs layout; `ontime io record`)
//!   IO_FILES   JSON [IoFile] (files opened by the tenants, by device+inode)
//!   IO_STATE   JSON [IoState] (cache and memory samples, block counters)
//!   IO_LAYOUT  JSON IoLayout (where the images lie on the disk, at the end)
//! ```
//! Readers skip block kinds they do not know, so older recordings read
//! and an older ontime reads newer ones without the blocks it lacks. What
//! the blocks claim (counts, lengths, spans, paths) is checked by
//! [`validate`] as they are read, before anything is sized from it.
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use self::validate::corrupt;
use crate::event::{Event, EVENT_SIZE};
pub use crate::groups::{Group, GroupKind};
use crate::io_abi::{IoEvent, IO_EVENT_SIZE};
use crate::io_layout::{IoFile, IoLayout, IoState};
use crate::maps::ProcessMaps;
use crate::samples::SampleBatch;

pub mod validate;

const MAGIC: &[u8; 6] = b"OTREC\0";
const VERSION: u16 = 1;
const BLOCK_META: u32 = 1;
const BLOCK_EVENTS: u32 = 2;
const BLOCK_THREADS: u32 = 3;
const BLOCK_END: u32 = 4;
const BLOCK_SAMPLES: u32 = 5;
const BLOCK_MAPS: u32 = 6;
const BLOCK_IO_EVENTS: u32 = 7;
const BLOCK_IO_FILES: u32 = 8;
const BLOCK_IO_STATE: u32 = 9;
const BLOCK_IO_LAYOUT: u32 = 10;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub version: u16,
    /// "bpf" or "perf".
    pub mechanism: String,
    /// CLOCK_MONOTONIC when recording began (events before it are absent).
    pub start_ns: u64,
    /// Wall-clock time at start, ns since the epoch.
    pub start_realtime_ns: u64,
    pub cpus: usize,
    pub kernel: String,
    pub hostname: String,
    /// Index = the group number in ThreadInfo::group.
    pub groups: Vec<Group>,
    /// True when wake-ups of every task are recorded, not only tracked ones.
    pub track_all: bool,
    /// Events the kernel side could not record for lack of room ("kvm", ...).
    #[serde(default)]
    pub unavailable: Vec<String>,
    /// How the recording was made, like every ontime result: command line,
    /// ontime version, clocksource (absent in recordings before 0.1.0's
    /// foundation work).
    #[serde(default)]
    pub command_line: Vec<String>,
    #[serde(default)]
    pub ontime_version: String,
    #[serde(default)]
    pub clocksource: String,
    /// Stack sampling period (ns) on every CPU, when stacks were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_period_ns: Option<u64>,
    /// What an I/O recording (`ontime io record`) watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<crate::io_layout::IoMeta>,
}

impl Meta {
    /// A recording that starts now on this host, made by this command.
    pub fn of_this_host(mechanism: &str, start_ns: u64, groups: Vec<Group>) -> Meta {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
        Meta {
            version: VERSION,
            mechanism: mechanism.into(),
            start_ns,
            start_realtime_ns: ontime_core::time::realtime_ns(),
            cpus: ontime_core::limits::online_cpus(),
            kernel: read("/proc/sys/kernel/osrelease"),
            hostname: read("/proc/sys/kernel/hostname"),
            groups,
            track_all: false,
            unavailable: vec![],
            command_line: std::env::args().collect(),
            ontime_version: env!("CARGO_PKG_VERSION").into(),
            clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            sample_period_ns: None,
            io: None,
        }
    }

    /// A recording of `cpus` CPUs from `start_ns` with fixed host fields, for
    /// recordings a test or a generator makes rather than a host.
    pub fn synthetic(mechanism: &str, cpus: usize, start_ns: u64, groups: Vec<Group>) -> Meta {
        Meta {
            version: VERSION,
            mechanism: mechanism.into(),
            start_ns,
            start_realtime_ns: 0,
            cpus,
            kernel: "test".into(),
            hostname: "h".into(),
            groups,
            track_all: false,
            unavailable: vec![],
            command_line: vec![],
            ontime_version: "test".into(),
            clocksource: "tsc".into(),
            sample_period_ns: None,
            io: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ThreadInfo {
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    /// Index into Meta::groups, if the thread belongs to one.
    pub group: Option<u32>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct End {
    pub end_ns: u64,
    pub events: u64,
    /// Events dropped because the ring was full, or never made because the
    /// kernel skipped a program already running on that CPU (I/O
    /// recordings: block completions); non-zero makes the analysis
    /// approximate and the report says so.
    pub lost: u64,
    /// Time spent storing this file (a window of a continuous recording:
    /// document 002's t0), when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_ns: Option<u64>,
}

/// Streams a recording to disk.
pub struct Writer {
    out: BufWriter<File>,
    path: PathBuf,
    events: Vec<u8>,
    scratch: Vec<u8>,
    pub events_written: u64,
}

/// Events are buffered and written as one block per drain, at most this many bytes.
const EVENT_BLOCK: usize = 1 << 20;

impl Writer {
    pub fn create(path: &Path, meta: &Meta) -> Result<Writer> {
        let file = File::create(path).with_context(|| format!("cannot create recording {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        let mut w = Writer {
            out,
            path: path.to_path_buf(),
            events: Vec::with_capacity(EVENT_BLOCK),
            scratch: Vec::new(),
            events_written: 0,
        };
        w.json_block(BLOCK_META, meta)?;
        Ok(w)
    }

    pub fn event(&mut self, e: &Event) -> Result<()> {
        self.events.extend_from_slice(&e.to_bytes());
        self.events_written += 1;
        if self.events.len() + EVENT_SIZE > EVENT_BLOCK {
            self.flush_events()?;
        }
        Ok(())
    }

    /// Writes a drain's stack samples as one block (split to stay under
    /// the block limit).
    pub fn samples(&mut self, batch: &SampleBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut bytes = std::mem::take(&mut self.scratch);
        bytes.clear();
        batch.encode(&mut bytes);
        let r = self.block(BLOCK_SAMPLES, &bytes);
        self.scratch = bytes;
        r
    }

    pub fn maps(&mut self, maps: &[ProcessMaps]) -> Result<()> {
        if maps.is_empty() {
            return Ok(());
        }
        self.json_block(BLOCK_MAPS, &maps)
    }

    /// A drain's I/O events (already in the recording's layout).
    pub fn io_events(&mut self, bytes: &[u8]) -> Result<()> {
        for chunk in bytes.chunks(EVENT_BLOCK - EVENT_BLOCK % IO_EVENT_SIZE) {
            self.block(BLOCK_IO_EVENTS, chunk)?;
        }
        Ok(())
    }

    pub fn io_files(&mut self, files: &[IoFile]) -> Result<()> {
        if files.is_empty() {
            return Ok(());
        }
        self.json_block(BLOCK_IO_FILES, &files)
    }

    pub fn io_state(&mut self, states: &[IoState]) -> Result<()> {
        if states.is_empty() {
            return Ok(());
        }
        self.json_block(BLOCK_IO_STATE, &states)
    }

    pub fn io_layout(&mut self, layout: &IoLayout) -> Result<()> {
        self.json_block(BLOCK_IO_LAYOUT, layout)
    }

    /// [`Writer::threads`] of a map by tid, in tid order (a file that
    /// reads the same each time it is written).
    pub fn threads_of(&mut self, threads: &HashMap<u32, ThreadInfo>) -> Result<()> {
        let mut sorted: Vec<ThreadInfo> = threads.values().cloned().collect();
        sorted.sort_by_key(|t| t.tid);
        self.threads(&sorted)
    }

    pub fn threads(&mut self, threads: &[ThreadInfo]) -> Result<()> {
        if threads.is_empty() {
            return Ok(());
        }
        // Events that name these threads may precede them; order does not
        // matter to the reader, which loads every thread block first.
        self.json_block(BLOCK_THREADS, &threads)
    }

    /// Flushes what is written so far and moves the file to `to`, so the
    /// name appears only once the recording there is readable (a reader
    /// of a directory, or a SIGKILL, never sees a file without its header).
    pub fn publish(&mut self, to: &Path) -> Result<()> {
        self.flush()?;
        std::fs::rename(&self.path, to)
            .with_context(|| format!("cannot move {} to {}", self.path.display(), to.display()))?;
        self.path = to.to_path_buf();
        Ok(())
    }

    /// Writes buffered events and pushes everything to the OS.
    pub fn flush(&mut self) -> Result<()> {
        self.flush_events()?;
        self.out
            .flush()
            .with_context(|| format!("writing {}", self.path.display()))
    }

    /// [`Writer::finish`], then moves the complete file to `to`
    /// ([`Writer::publish`] moves one still being written).
    pub fn finish_as(mut self, end: &End, to: &Path) -> Result<()> {
        self.end_block(end)?;
        self.publish(to)?;
        self.out.get_ref().sync_all().ok();
        Ok(())
    }

    pub fn finish(mut self, end: &End) -> Result<()> {
        self.end_block(end)?;
        self.flush()?;
        self.out.get_ref().sync_all().ok();
        Ok(())
    }

    /// The events still buffered, then the end block.
    fn end_block(&mut self, end: &End) -> Result<()> {
        self.flush_events()?;
        self.json_block(BLOCK_END, end)
    }

    fn flush_events(&mut self) -> Result<()> {
        if self.events.is_empty() {
            return Ok(());
        }
        let block = std::mem::take(&mut self.events);
        self.block(BLOCK_EVENTS, &block)?;
        self.events = block;
        self.events.clear();
        Ok(())
    }

    fn json_block<T: Serialize>(&mut self, kind: u32, value: &T) -> Result<()> {
        let bytes = serde_json::to_vec(value)?;
        self.block(kind, &bytes)
    }

    fn block(&mut self, kind: u32, payload: &[u8]) -> Result<()> {
        let len = u32::try_from(payload.len()).context("block too large")?;
        self.out.write_all(&kind.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out
            .write_all(payload)
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// A whole recording in memory: events in time order.
#[derive(Debug)]
pub struct Recording {
    pub meta: Meta,
    pub threads: HashMap<u32, ThreadInfo>,
    pub events: Vec<Event>,
    /// Stack samples, in time order (empty unless profiled).
    pub samples: SampleBatch,
    /// Executable mappings of sampled processes, by pid (the last block
    /// for a pid wins).
    pub maps: HashMap<u32, ProcessMaps>,
    /// I/O events in the order they were drained (`ontime io record`).
    pub io_events: Vec<IoEvent>,
    pub io_files: Vec<IoFile>,
    pub io_states: Vec<IoState>,
    pub io_layout: Option<IoLayout>,
    /// None when the recording was cut short.
    pub end: Option<End>,
    /// Bytes after the last complete block (a cut-short recording).
    pub truncated_bytes: u64,
}

impl Recording {
    /// A complete recording made in memory (the simulator's scheduler
    /// view, tests): the events are all there, none lost, no I/O.
    pub fn of_events(meta: Meta, threads: HashMap<u32, ThreadInfo>, events: Vec<Event>, end_ns: u64) -> Recording {
        Recording {
            meta,
            threads,
            end: Some(End {
                end_ns,
                events: events.len() as u64,
                lost: 0,
                store_ns: None,
            }),
            events,
            samples: SampleBatch::default(),
            maps: HashMap::new(),
            io_events: vec![],
            io_files: vec![],
            io_states: vec![],
            io_layout: None,
            truncated_bytes: 0,
        }
    }

    /// Writes a recording made in memory (the simulator's scheduler view)
    /// as a file `read` and `ontime observe report` take; the file appears
    /// under its name only once complete.
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let mut w = Writer::create(Path::new(&tmp), &self.meta)?;
        w.threads_of(&self.threads)?;
        for e in &self.events {
            w.event(e)?;
        }
        let end = self.end.clone().unwrap_or(End {
            end_ns: self.events.last().map_or(0, |e| e.ts),
            events: self.events.len() as u64,
            ..End::default()
        });
        w.finish_as(&end, path)
    }

    /// Reads a recording under the input rule (a regular file of at most
    /// [`validate::MAX_RECORDING_BYTES`], never a FIFO or a device), up to
    /// its last whole block. Whatever is wrong with the file, the error is
    /// [`ontime_core::BadInput`] naming it.
    pub fn read(path: &Path) -> Result<Recording> {
        let (file, size) = ontime_core::fsio::open_input(path, "recording", validate::MAX_RECORDING_BYTES)?;
        let mut r = BufReader::with_capacity(1 << 20, file);
        let mut head = [0u8; 8];
        if read_full(&mut r, &mut head, path)? < head.len() {
            return Err(ontime_core::bad_input(format!(
                "{} is not an ontime recording (too short)",
                path.display()
            )));
        }
        if &head[..6] != MAGIC {
            return Err(ontime_core::bad_input(format!(
                "{} is not an ontime recording (made by `ontime observe record`)",
                path.display()
            )));
        }
        let version = u16::from_le_bytes([head[6], head[7]]);
        if version != VERSION {
            return Err(ontime_core::bad_input(format!(
                "{}: recording format version {version}, this ontime reads {VERSION}",
                path.display()
            )));
        }
        // Bytes read so far: a block never claims more than the file has
        // left, whatever its header says.
        let mut at = head.len() as u64;
        let mut meta: Option<Meta> = None;
        let mut threads = HashMap::new();
        let mut events = Vec::new();
        let mut samples = SampleBatch::default();
        let mut maps = HashMap::new();
        let mut end = None;
        let mut truncated_bytes = 0u64;
        let (mut io_events, mut io_files, mut io_states, mut io_layout) = (Vec::new(), Vec::new(), Vec::new(), None);
        let mut payload = Vec::new();
        loop {
            let mut hdr = [0u8; 8];
            match read_full(&mut r, &mut hdr, path)? {
                0 => break,
                n if n < 8 => {
                    truncated_bytes += n as u64;
                    break;
                }
                _ => {}
            }
            let kind = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
            validate::block_len(path, kind, len, at)?;
            at += 8;
            // The file was this long when opened: a length past its end is
            // a block cut short there, read up to what is there.
            let here = u64::from(len).min(size.saturating_sub(at)) as usize;
            payload.resize(here, 0);
            let got = read_full(&mut r, &mut payload, path)?;
            at += got as u64;
            if got < len as usize {
                truncated_bytes += 8 + got as u64;
                // Keep the whole events of a cut-short EVENTS block.
                if kind == BLOCK_EVENTS {
                    push_events(&mut events, &payload[..got - got % EVENT_SIZE]);
                }
                if kind == BLOCK_IO_EVENTS {
                    let whole = &payload[..got - got % IO_EVENT_SIZE];
                    io_events.extend(whole.chunks_exact(IO_EVENT_SIZE).filter_map(IoEvent::from_bytes));
                }
                break;
            }
            let json =
                |what: &str, e: serde_json::Error| corrupt(path, format!("its {what} block does not parse ({e})"));
            match kind {
                BLOCK_META => {
                    let m: Meta = serde_json::from_slice(&payload).map_err(|e| json("META", e))?;
                    validate::meta(path, &m)?;
                    meta = Some(m);
                }
                BLOCK_EVENTS => push_events(&mut events, &payload),
                BLOCK_THREADS => {
                    let list: Vec<ThreadInfo> = serde_json::from_slice(&payload).map_err(|e| json("THREADS", e))?;
                    for t in list {
                        validate::thread(path, &t)?;
                        // A later block knows more: a name set after the
                        // thread started, a group found later.
                        let group = t
                            .group
                            .or_else(|| threads.get(&t.tid).and_then(|o: &ThreadInfo| o.group));
                        threads.insert(t.tid, ThreadInfo { group, ..t });
                    }
                }
                BLOCK_SAMPLES => samples.decode(&payload),
                BLOCK_IO_EVENTS => {
                    io_events.extend(payload.chunks_exact(IO_EVENT_SIZE).filter_map(IoEvent::from_bytes))
                }
                BLOCK_IO_FILES => {
                    io_files.extend(serde_json::from_slice::<Vec<IoFile>>(&payload).map_err(|e| json("IO_FILES", e))?)
                }
                BLOCK_IO_STATE => {
                    io_states.extend(serde_json::from_slice::<Vec<IoState>>(&payload).map_err(|e| json("IO_STATE", e))?)
                }
                BLOCK_IO_LAYOUT => {
                    io_layout = Some(serde_json::from_slice(&payload).map_err(|e| json("IO_LAYOUT", e))?)
                }
                BLOCK_MAPS => {
                    let list: Vec<ProcessMaps> = serde_json::from_slice(&payload).map_err(|e| json("MAPS", e))?;
                    for m in list {
                        validate::process_maps(path, &m)?;
                        maps.insert(m.pid, m);
                    }
                }
                BLOCK_END => end = Some(serde_json::from_slice(&payload).map_err(|e| json("END", e))?),
                _ => {} // from a newer ontime: skip
            }
        }
        let meta = meta.ok_or_else(|| {
            ontime_core::bad_input(format!("{}: no META block; the recording is empty", path.display()))
        })?;
        validate::thread_groups(path, &meta, threads.values())?;
        validate::times(path, &meta, end.as_ref(), &events, &samples, &io_events, &io_states)?;
        // Per-CPU rings interleave slightly; the analysis needs one time order.
        events.sort_by_key(|e| e.ts);
        samples.sort_by_time();
        Ok(Recording {
            meta,
            threads,
            events,
            samples,
            maps,
            io_events,
            io_files,
            io_states,
            io_layout,
            end,
            truncated_bytes,
        })
    }
}

impl Recording {
    /// The META block of a recording, read without its events (a window's
    /// start and span, for the flight recorder's bookkeeping).
    pub fn read_meta(path: &Path) -> Result<Meta> {
        let (file, size) = ontime_core::fsio::open_input(path, "recording", validate::MAX_RECORDING_BYTES)?;
        let mut r = BufReader::new(file);
        let mut head = [0u8; 16];
        if read_full(&mut r, &mut head, path)? < head.len() || &head[..6] != MAGIC {
            return Err(ontime_core::bad_input(format!(
                "{} is not an ontime recording",
                path.display()
            )));
        }
        let kind = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        let len = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
        if kind != BLOCK_META {
            return Err(corrupt(path, "its first block is not META".to_string()));
        }
        validate::block_len(path, kind, len, 8)?;
        if u64::from(len) > size.saturating_sub(16) {
            return Err(corrupt(path, "its META block is cut short".to_string()));
        }
        let mut payload = vec![0u8; len as usize];
        read_full(&mut r, &mut payload, path)?;
        let m: Meta = serde_json::from_slice(&payload)
            .map_err(|e| corrupt(path, format!("its META block does not parse ({e})")))?;
        validate::meta(path, &m)?;
        Ok(m)
    }

    /// Back-to-back windows of one continuous recording (`store`), in
    /// time order, as one recording: the first window's start, the last's
    /// end, every event and sample, the thread table as the last window
    /// knows it, the events and losses summed (the losses an upper
    /// bound). Windows that do not follow each other (a gap, a window
    /// missing) are refused: a time line over a gap would take the gap for
    /// time in which nothing happened.
    pub fn concat(parts: Vec<Recording>) -> Result<Recording> {
        let mut parts = parts.into_iter();
        let mut out = parts.next().ok_or_else(|| anyhow::anyhow!("no windows to join"))?;
        for next in parts {
            let at = out.end.as_ref().map(|e| e.end_ns);
            if at != Some(next.meta.start_ns) {
                anyhow::bail!(
                    "windows do not follow each other: one ends at {at:?}, the next starts at {} ns",
                    next.meta.start_ns
                );
            }
            for (tid, t) in next.threads {
                let group = t.group.or_else(|| out.threads.get(&tid).and_then(|o| o.group));
                out.threads.insert(tid, ThreadInfo { group, ..t });
            }
            out.events.extend(next.events);
            for s in &next.samples.samples {
                out.samples.push(
                    s.ts,
                    s.pid,
                    s.tid,
                    s.cpu,
                    next.samples.kernel_frames(s),
                    next.samples.user_frames(s),
                );
            }
            out.maps.extend(next.maps);
            out.truncated_bytes += next.truncated_bytes;
            out.end = match (out.end.take(), next.end) {
                // A window counts what was lost while it was open, grace
                // included, so the sum may count a loss in the overlap
                // twice: an upper bound.
                (Some(a), Some(b)) => Some(End {
                    end_ns: b.end_ns,
                    events: a.events + b.events,
                    lost: a.lost + b.lost,
                    store_ns: a.store_ns.zip(b.store_ns).map(|(x, y)| x + y),
                }),
                // A window cut short ends the stretch where it was cut.
                _ => None,
            };
        }
        // Stragglers stored in the oldest open window sit just past its
        // neighbour's events: one time order again.
        out.events.sort_by_key(|e| e.ts);
        out.samples.sort_by_time();
        Ok(out)
    }
}

fn push_events(events: &mut Vec<Event>, bytes: &[u8]) {
    events.extend(bytes.chunks_exact(EVENT_SIZE).filter_map(Event::from_bytes));
}

fn read_full(r: &mut impl Read, buf: &mut [u8], path: &Path) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(ontime_core::bad_input(format!(
                    "cannot read recording {}: {e}",
                    path.display()
                )))
            }
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::validate::{MAX_BLOCK, MAX_EVENT_GAP_NS};
    use super::*;
    use crate::event::kind;

    fn meta() -> Meta {
        Meta {
            version: VERSION,
            mechanism: "bpf".into(),
            start_ns: 1,
            start_realtime_ns: 2,
            cpus: 2,
            kernel: "test".into(),
            hostname: "h".into(),
            groups: vec![Group {
                name: "t0".into(),
                kind: GroupKind::Tenant,
                source: vec![],
                vcpu_names: false,
            }],
            track_all: false,
            unavailable: vec![],
            command_line: vec!["ontime".into()],
            ontime_version: "test".into(),
            clocksource: "tsc".into(),
            sample_period_ns: None,
            io: None,
        }
    }

    proptest::proptest! {
        /// Whatever follows a valid header (a corrupt or foreign file), the
        /// reader gives a recording or an error naming the file, never a
        /// panic or an allocation the file's size cannot justify.
        #[test]
        fn any_bytes_after_the_header_read_or_fail(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("r.otrec");
            let mut bytes = Vec::new();
            bytes.extend_from_slice(MAGIC);
            bytes.extend_from_slice(&VERSION.to_le_bytes());
            bytes.extend_from_slice(&tail);
            std::fs::write(&path, &bytes).unwrap();
            let _ = Recording::read(&path);
        }
    }

    /// Defect 11: a forged EVENTS block gave a 72 337 616 s recording span.
    #[test]
    fn a_stamp_outside_the_recording_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.otrec");
        let write = |ts: u64| {
            let mut w = Writer::create(&path, &meta()).unwrap();
            w.event(&Event {
                ts,
                kind: kind::SWITCH,
                ..Default::default()
            })
            .unwrap();
            w.finish(&End {
                end_ns: 2000,
                events: 1,
                lost: 0,
                store_ns: None,
            })
            .unwrap();
        };
        write(72_337_616 * 1_000_000_000);
        let e = format!("{:#}", Recording::read(&path).unwrap_err());
        assert!(e.contains("corrupt recording") && e.contains("outside"), "{e}");
        write(1500);
        assert_eq!(Recording::read(&path).unwrap().events.len(), 1);
    }

    fn refused(path: &Path, words: &[&str]) {
        let e = Recording::read(path).unwrap_err();
        assert!(
            e.downcast_ref::<ontime_core::BadInput>().is_some(),
            "not bad input: {e:#}"
        );
        let text = format!("{e:#}");
        assert!(!text.contains('\n'), "one line: {text}");
        for w in words {
            assert!(text.contains(w), "{w:?} not in: {text}");
        }
    }

    fn switch(ts: u64) -> Event {
        Event {
            ts,
            kind: kind::SWITCH,
            ..Default::default()
        }
    }

    /// Writes a recording of `meta` with switches at `events` and an END
    /// block at `end_ns`.
    fn write_with(path: &Path, meta: &Meta, events: &[u64], end_ns: u64) {
        let mut w = Writer::create(path, meta).unwrap();
        for &ts in events {
            w.event(&switch(ts)).unwrap();
        }
        w.finish(&End {
            end_ns,
            events: events.len() as u64,
            lost: 0,
            store_ns: None,
        })
        .unwrap();
    }

    /// A META claiming a billion CPUs aborted the reports with an 8 GB
    /// allocation; it is refused as corrupt with the range, as is a
    /// crafted list of 5 000 groups.
    #[test]
    fn a_meta_claiming_too_many_cpus_or_groups_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.otrec");
        let mut m = meta();
        m.cpus = 1_000_000_000;
        write_with(&path, &m, &[1000], 2000);
        refused(&path, &["r.otrec", "corrupt recording", "1000000000 CPUs", "1 to 4096"]);
        m.cpus = 0;
        write_with(&path, &m, &[1000], 2000);
        refused(&path, &["0 CPUs"]);
        let mut m = meta();
        m.groups = (0..5000)
            .map(|i| Group {
                name: format!("g{i}"),
                kind: GroupKind::Tenant,
                source: vec![],
                vcpu_names: false,
            })
            .collect();
        write_with(&path, &m, &[1000], 2000);
        refused(&path, &["5000 groups", "at most 1024"]);
        let mut m = meta();
        m.sample_period_ns = Some(0);
        write_with(&path, &m, &[1000], 2000);
        refused(&path, &["sampled every 0 ns"]);
        write_with(&path, &meta(), &[1000], 2000);
        assert_eq!(Recording::read(&path).unwrap().meta.cpus, 2);
    }

    /// A forged END gave a recording of 604 800 000 s with its events
    /// intact: END must lie within the longest recording of its start and
    /// within an hour of its last event.
    #[test]
    fn a_forged_end_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.otrec");
        let s = 1_000_000_000u64;
        write_with(&path, &meta(), &[s, 2 * s], 604_800_000 * s);
        refused(&path, &["corrupt recording", "END says it lasted", "at most"]);
        // Within a week of the start, but days after the last event.
        write_with(&path, &meta(), &[s, 2 * s], 3 * 24 * 3600 * s);
        refused(&path, &["END at", "after its last event", "within"]);
        // An hour after the last event is the most a whole recording has.
        write_with(&path, &meta(), &[s, 2 * s], 2 * s + MAX_EVENT_GAP_NS);
        assert!(Recording::read(&path).is_ok());
        write_with(&path, &meta(), &[s, 2 * s], 2 * s + MAX_EVENT_GAP_NS + 1);
        refused(&path, &["after its last event"]);
        let mut m = meta();
        m.start_ns = 10 * s;
        write_with(&path, &m, &[], 5 * s);
        refused(&path, &["ends before it starts"]);
    }

    /// A block header claiming more than the file holds reads as a
    /// recording cut short there: nothing is sized from the claim.
    #[test]
    fn a_block_longer_than_the_file_is_read_as_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.otrec");
        write_with(&path, &meta(), &[1000], 2000);
        let mut bytes = std::fs::read(&path).unwrap();
        let whole = bytes.len();
        bytes.extend_from_slice(&BLOCK_EVENTS.to_le_bytes());
        bytes.extend_from_slice(&(MAX_BLOCK).to_le_bytes());
        bytes.extend_from_slice(&[0u8; 30]);
        std::fs::write(&path, &bytes).unwrap();
        let r = Recording::read(&path).unwrap();
        assert_eq!(r.truncated_bytes, (bytes.len() - whole) as u64);
        assert_eq!(r.events.len(), 2, "the whole event of the cut block is kept");
        bytes.truncate(whole);
        bytes.extend_from_slice(&BLOCK_EVENTS.to_le_bytes());
        bytes.extend_from_slice(&(MAX_BLOCK + 1).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        refused(&path, &["claims 268435457 bytes", "more than a block holds"]);
    }

    /// Threads and mappings name what lies in range: a thread id past
    /// PID_MAX_LIMIT, a group META does not have, a mapping whose file
    /// offset overflows.
    #[test]
    fn threads_and_mappings_out_of_range_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.otrec");
        let write = |t: ThreadInfo, maps: Vec<ProcessMaps>| {
            let mut w = Writer::create(&path, &meta()).unwrap();
            w.event(&switch(1000)).unwrap();
            w.threads(&[t]).unwrap();
            w.maps(&maps).unwrap();
            w.finish(&End {
                end_ns: 2000,
                ..End::default()
            })
            .unwrap();
        };
        let t = |tid: u32, group: Option<u32>| ThreadInfo {
            tid,
            tgid: tid,
            comm: "x".into(),
            group,
        };
        let pm = |offset: u64| ProcessMaps {
            pid: 5,
            comm: "x".into(),
            maps: vec![crate::maps::Mapping {
                start: 0x1000,
                end: 0x2000,
                offset,
                path: "/bin/x".into(),
                dev: "fe:01".into(),
                inode: 1,
            }],
        };
        write(t(5, Some(0)), vec![pm(0)]);
        assert!(Recording::read(&path).is_ok());
        write(t(u32::MAX - 1, Some(0)), vec![]);
        refused(&path, &["thread 4294967294", "below 4194304"]);
        write(t(5, Some(7)), vec![]);
        refused(&path, &["group 7", "names 1 groups"]);
        write(t(5, None), vec![pm(u64::MAX - 10)]);
        refused(&path, &["MAPS maps", "not a range of a file"]);
    }

    /// A FIFO named as a recording would block the reader for ever: it is
    /// refused without opening it for reading.
    #[test]
    fn a_fifo_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("r.otrec");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        refused(&fifo, &["not a regular file"]);
    }

    /// A recording published under its name is readable there at once,
    /// before it is finished (a killed recorder's last window).
    #[test]
    fn a_published_recording_is_readable_under_its_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let (partial, path) = (dir.path().join(".r.new"), dir.path().join("r.otrec"));
        let mut w = Writer::create(&partial, &meta()).unwrap();
        w.publish(&path).unwrap();
        assert!(!partial.exists());
        let r = Recording::read(&path).unwrap();
        assert!(r.end.is_none() && r.events.is_empty());
        drop(w);
    }

    #[test]
    fn back_to_back_windows_join_and_a_gap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let window = |i: u64, start: u64, end: u64, events: &[u64]| {
            let path = dir.path().join(format!("window-{i:06}.otrec"));
            let m = Meta {
                start_ns: start,
                ..meta()
            };
            let mut w = Writer::create(&path, &m).unwrap();
            w.threads(&[ThreadInfo {
                tid: 5,
                tgid: 5,
                comm: format!("w{i}"),
                group: (i == 1).then_some(0),
            }])
            .unwrap();
            for &ts in events {
                w.event(&switch(ts)).unwrap();
            }
            w.finish(&End {
                end_ns: end,
                events: events.len() as u64,
                lost: i,
                store_ns: None,
            })
            .unwrap();
            path
        };
        let files = vec![
            window(1, 100, 200, &[150, 120]),
            window(2, 200, 300, &[250]),
            window(4, 400, 500, &[450]),
        ];
        assert_eq!(Recording::read_meta(&files[1]).unwrap().start_ns, 200);
        let runs = crate::store::contiguous(files.clone());
        assert_eq!(runs, vec![files[..2].to_vec(), files[2..].to_vec()]);
        let read = |fs: &[PathBuf]| fs.iter().map(|f| Recording::read(f).unwrap()).collect::<Vec<_>>();
        let joined = Recording::concat(read(&runs[0])).unwrap();
        assert_eq!(joined.meta.start_ns, 100);
        let ts: Vec<u64> = joined.events.iter().map(|e| e.ts).collect();
        assert_eq!(ts, vec![120, 150, 250]);
        let end = joined.end.unwrap();
        assert_eq!((end.end_ns, end.events, end.lost), (300, 3, 3));
        assert_eq!(joined.threads[&5].comm, "w2", "the later window knows more");
        assert_eq!(joined.threads[&5].group, Some(0), "a group found once stays");
        let gap = Recording::concat(read(&files)).unwrap_err();
        assert!(gap.to_string().contains("do not follow"), "{gap}");
    }

    #[test]
    fn round_trip_and_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.otrec");
        let mut w = Writer::create(&path, &meta()).unwrap();
        for i in 0..1000u64 {
            w.event(&Event {
                ts: 1000 - i,
                a: i as u32,
                kind: kind::SWITCH,
                ..Default::default()
            })
            .unwrap();
        }
        w.flush().unwrap();
        w.threads(&[ThreadInfo {
            tid: 5,
            tgid: 5,
            comm: "x".into(),
            group: Some(0),
        }])
        .unwrap();
        w.threads(&[ThreadInfo {
            tid: 5,
            tgid: 5,
            comm: "renamed".into(),
            group: None,
        }])
        .unwrap();
        w.finish(&End {
            end_ns: 2000,
            events: 1000,
            lost: 0,
            store_ns: None,
        })
        .unwrap();
        let r = Recording::read(&path).unwrap();
        assert_eq!(r.events.len(), 1000);
        assert!(r.events.windows(2).all(|p| p[0].ts <= p[1].ts));
        assert_eq!(r.threads[&5].comm, "renamed");
        assert_eq!(r.threads[&5].group, Some(0));
        assert_eq!(r.end.as_ref().unwrap().events, 1000);

        // Cut inside the END block and inside the events: still readable.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let r = Recording::read(&path).unwrap();
        assert!(r.end.is_none());
        assert_eq!(r.events.len(), 1000);
        let cut = 8 + 8 + serde_json::to_vec(&meta()).unwrap().len() + 8 + 24 * 10 + 7;
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let r = Recording::read(&path).unwrap();
        assert_eq!(r.events.len(), 10);

        std::fs::write(&path, b"hello world").unwrap();
        assert!(Recording::read(&path)
            .unwrap_err()
            .to_string()
            .contains("not an ontime recording"));
    }
}
