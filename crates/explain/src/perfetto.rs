//! A Perfetto trace (ui.perfetto.dev) of a recording around a run's
//! late events: every CPU's scheduling as ftrace `sched_switch` and
//! `sched_waking` events (Perfetto draws CPU tracks and thread states from
//! them), the threads named by process (`ProcessTree`), and on each probe
//! thread a track of its late events, each a slice from planned to actual
//! named by its largest causes.
//!
//! The encoding is Perfetto's protobuf wire format (protos/perfetto/trace
//! in the Perfetto repository; the field numbers are named where they are
//! written); `crates/cli/tests/explain.rs` decodes what this writes with
//! Perfetto's own definitions. Timestamps are CLOCK_MONOTONIC written as
//! they are: Perfetto reads ftrace and track event times on one clock
//! (BOOTTIME by default), so they line up with each other, but the
//! absolute clock label is BOOTTIME's.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use ontime_recording::event::kind;
use ontime_recording::recording::Recording;

use crate::report::LateEvent;
use crate::summary::describe;

/// Protobuf wire types.
const VARINT: u32 = 0;
const LEN: u32 = 2;

/// One message being encoded.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.raw_varint(u64::from(field << 3 | wire));
    }

    fn uint(&mut self, field: u32, v: u64) {
        self.key(field, VARINT);
        self.raw_varint(v);
    }

    /// int32 and int64 fields: negatives as ten-byte two's complement.
    fn int(&mut self, field: u32, v: i64) {
        self.key(field, VARINT);
        self.raw_varint(v as u64);
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        self.raw_varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn message(&mut self, field: u32, f: impl FnOnce(&mut Pb)) {
        let mut inner = Pb::default();
        f(&mut inner);
        self.bytes(field, &inner.0);
    }
}

// Trace.packet
const TRACE_PACKET: u32 = 1;
// TracePacket fields.
const PKT_FTRACE_EVENTS: u32 = 1;
const PKT_PROCESS_TREE: u32 = 2;
const PKT_TIMESTAMP: u32 = 8;
const PKT_SEQUENCE_ID: u32 = 10;
const PKT_TRACK_EVENT: u32 = 11;
const PKT_SYSTEM_INFO: u32 = 45;
const PKT_TRACK_DESCRIPTOR: u32 = 60;
/// Our one packet sequence (track descriptors and events need one).
const SEQUENCE: u64 = 1;

/// A late event's slice is drawn around this much before and after.
pub const AROUND_NS: u64 = 100_000_000;
/// Events of one CPU per ftrace bundle.
const BUNDLE: usize = 4096;

/// What [`write`] wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub sched_events: u64,
    pub late_events: u64,
    pub bytes: u64,
}

/// [`write`] into the file `path`, whole or not at all, with
/// [`AROUND_NS`] around each event.
pub fn write_file(rec: &Recording, late: &[LateEvent], path: &std::path::Path) -> anyhow::Result<Written> {
    use anyhow::Context as _;
    let mut file = ontime_core::fsio::AtomicWriter::create(path)?;
    let mut buf = std::io::BufWriter::new(&mut file);
    let w = write(rec, late, AROUND_NS, &mut buf).with_context(|| format!("cannot write {}", path.display()))?;
    buf.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    drop(buf);
    file.commit()?;
    Ok(w)
}

/// Writes the recording's scheduling within `around` of each late event
/// (planned - around .. actual + around) and the late events themselves.
pub fn write(rec: &Recording, late: &[LateEvent], around_ns: u64, out: &mut dyn Write) -> std::io::Result<Written> {
    let mut w = Written::default();
    let mut windows: Vec<(u64, u64)> = late
        .iter()
        .map(|e| {
            (
                e.planned_ns.saturating_sub(around_ns),
                e.actual_ns.saturating_add(around_ns),
            )
        })
        .collect();
    windows.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in windows {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let inside = |ts: u64| {
        let i = merged.partition_point(|w| w.1 < ts);
        merged.get(i).is_some_and(|w| w.0 <= ts)
    };
    let mut emit = |pkt: Pb, w: &mut Written| -> std::io::Result<()> {
        let mut p = Pb::default();
        p.bytes(TRACE_PACKET, &pkt.0);
        out.write_all(&p.0)?;
        w.bytes += p.0.len() as u64;
        Ok(())
    };

    // SystemInfo.utsname: Perfetto reads a switch's prev_state by kernel
    // version.
    let mut pkt = Pb::default();
    pkt.message(PKT_SYSTEM_INFO, |si| {
        si.message(1, |u| {
            u.string(1, "Linux");
            u.string(3, rec.meta.kernel.split_whitespace().next().unwrap_or(""));
        })
    });
    emit(pkt, &mut w)?;

    // ProcessTree: processes (pid 1, cmdline 3) and threads (tid 1, name
    // 2, tgid 3).
    let comm = |tid: u32| match tid {
        0 => "swapper",
        _ => rec.threads.get(&tid).map(|t| t.comm.as_str()).unwrap_or(""),
    };
    let mut pkt = Pb::default();
    pkt.message(PKT_PROCESS_TREE, |tree| {
        let mut tgids: BTreeMap<u32, &str> = BTreeMap::new();
        for t in rec.threads.values() {
            if t.tgid != 0 {
                tgids.entry(t.tgid).or_insert_with(|| comm(t.tgid));
            }
        }
        for (&pid, name) in &tgids {
            tree.message(1, |p| {
                p.int(1, i64::from(pid));
                p.string(3, if name.is_empty() { "?" } else { name });
            });
        }
        let mut threads: Vec<_> = rec.threads.values().collect();
        threads.sort_by_key(|t| t.tid);
        for t in threads {
            tree.message(2, |th| {
                th.int(1, i64::from(t.tid));
                th.string(2, &t.comm);
                if t.tgid != 0 {
                    th.int(3, i64::from(t.tgid));
                }
            });
        }
    });
    emit(pkt, &mut w)?;

    // FtraceEventBundle per CPU (cpu 1, event 2); FtraceEvent: timestamp
    // 1, pid 2, sched_switch 4 (prev_comm 1, prev_pid 2, prev_prio 3,
    // prev_state 4, next_comm 5, next_pid 6, next_prio 7), sched_waking
    // 20 (comm 1, pid 2, prio 3, success 4, target_cpu 5).
    let mut per_cpu: HashMap<u16, Vec<Pb>> = HashMap::new();
    let mut current: HashMap<u16, u32> = HashMap::new();
    let prio = |rt: bool| if rt { 49 } else { 120 };
    for e in &rec.events {
        let keep = inside(e.ts);
        match e.kind {
            kind::SWITCH => {
                current.insert(e.cpu, e.b);
                if !keep {
                    continue;
                }
                let state: i64 = if e.flags & ontime_recording::event::F_PREV_RUNNABLE != 0 {
                    0
                } else if e.c & ontime_recording::event::TASK_DEAD != 0 {
                    0x80
                } else if e.c & ontime_recording::event::TASK_UNINTERRUPTIBLE != 0 {
                    2
                } else {
                    1
                };
                let mut ev = Pb::default();
                ev.uint(1, e.ts);
                ev.uint(2, u64::from(e.a));
                ev.message(4, |s| {
                    s.string(1, comm(e.a));
                    s.int(2, i64::from(e.a));
                    s.int(3, prio(e.flags & ontime_recording::event::F_PREV_RT != 0));
                    s.int(4, state);
                    s.string(5, comm(e.b));
                    s.int(6, i64::from(e.b));
                    s.int(7, prio(e.flags & ontime_recording::event::F_NEXT_RT != 0));
                });
                per_cpu.entry(e.cpu).or_default().push(ev);
            }
            kind::WAKEUP | kind::WAKEUP_NEW if keep => {
                let mut ev = Pb::default();
                ev.uint(1, e.ts);
                ev.uint(2, u64::from(e.b));
                ev.message(20, |s| {
                    s.string(1, comm(e.a));
                    s.int(2, i64::from(e.a));
                    s.int(3, 120);
                    s.int(4, 1);
                    s.int(5, i64::from(e.c));
                });
                per_cpu.entry(e.cpu).or_default().push(ev);
            }
            _ => {}
        }
    }
    let mut cpus: Vec<_> = per_cpu.into_iter().collect();
    cpus.sort_by_key(|(c, _)| *c);
    for (cpu, events) in cpus {
        for chunk in events.chunks(BUNDLE) {
            let mut pkt = Pb::default();
            pkt.message(PKT_FTRACE_EVENTS, |b| {
                b.uint(1, u64::from(cpu));
                for ev in chunk {
                    b.bytes(2, &ev.0);
                }
            });
            w.sched_events += chunk.len() as u64;
            emit(pkt, &mut w)?;
        }
    }

    // A track per probe thread (TrackDescriptor: uuid 1, name 2, thread 4
    // as ThreadDescriptor pid 1, tid 2, thread_name 5), and under it as
    // many child tracks (parent_uuid 5) as its late events overlap; each
    // event a SLICE_BEGIN (1) and SLICE_END (2) TrackEvent (type 9,
    // track_uuid 11, name 23).
    let mut lanes: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut sorted: Vec<&LateEvent> = late.iter().collect();
    sorted.sort_by_key(|e| (e.planned_ns, e.actual_ns));
    let mut slices: Vec<(u64, &LateEvent)> = Vec::new();
    for e in sorted {
        let tid = e.probe.tid.unwrap_or(0);
        let ends = lanes.entry(tid).or_default();
        let lane = match ends.iter().position(|&end| end <= e.planned_ns) {
            Some(i) => i,
            None => {
                ends.push(0);
                ends.len() - 1
            }
        };
        ends[lane] = e.actual_ns;
        slices.push((track_uuid(tid, lane + 1), e));
    }
    for (&tid, ends) in &lanes {
        let probe = late.iter().find(|e| e.probe.tid == Some(tid)).map(|e| &e.probe);
        let mut pkt = Pb::default();
        pkt.uint(PKT_SEQUENCE_ID, SEQUENCE);
        pkt.message(PKT_TRACK_DESCRIPTOR, |d| {
            d.uint(1, track_uuid(tid, 0));
            d.message(4, |t| {
                t.int(1, i64::from(probe.and_then(|p| p.pid).unwrap_or(tid)));
                t.int(2, i64::from(tid));
                t.string(5, probe.and_then(|p| p.comm.as_deref()).unwrap_or(""));
            });
        });
        emit(pkt, &mut w)?;
        for lane in 1..=ends.len() {
            let mut pkt = Pb::default();
            pkt.uint(PKT_SEQUENCE_ID, SEQUENCE);
            pkt.message(PKT_TRACK_DESCRIPTOR, |d| {
                d.uint(1, track_uuid(tid, lane));
                d.string(2, "late events");
                d.uint(5, track_uuid(tid, 0));
            });
            emit(pkt, &mut w)?;
        }
    }
    for (uuid, e) in slices {
        let name = slice_name(e);
        for (ts, ty) in [(e.planned_ns, 1u64), (e.actual_ns, 2)] {
            let mut pkt = Pb::default();
            pkt.uint(PKT_TIMESTAMP, ts);
            pkt.uint(PKT_SEQUENCE_ID, SEQUENCE);
            pkt.message(PKT_TRACK_EVENT, |t| {
                t.uint(9, ty);
                t.uint(11, uuid);
                if ty == 1 {
                    t.string(23, &name);
                }
            });
            emit(pkt, &mut w)?;
        }
        w.late_events += 1;
    }
    out.flush()?;
    Ok(w)
}

/// A track's uuid: the probe thread's, or one of its late-event lanes.
fn track_uuid(tid: u32, lane: usize) -> u64 {
    0x6f6e_7469_0000_0000 | (u64::from(tid) << 8) | lane as u64
}

/// "late 27.0 ms: 24.0 ms waiting for CPU 1 behind stress-ng (pid 4242)".
fn slice_name(e: &LateEvent) -> String {
    let ms = |ns: u64| format!("{:.1} ms", ns as f64 / 1e6);
    let causes: Vec<String> = e
        .causes
        .iter()
        .filter(|c| c.ns > 0)
        .take(2)
        .map(|c| {
            format!(
                "{} {}",
                ms(c.ns),
                describe(c.cause, c.detail, c.side, c.culprit.as_ref())
            )
        })
        .collect();
    format!("late {}: {}", ms(e.lateness_ns), causes.join("; "))
}

/// The Perfetto trace of a flight recorder's kept windows: the stretch
/// holding the worst of `worst` (worst first), with every listed event it
/// holds. Nothing is written when no stretch holds it.
pub fn write_kept(
    stretches: &[Vec<std::path::PathBuf>],
    worst: &[LateEvent],
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let Some(first) = worst.iter().max_by_key(|e| e.lateness_ns) else {
        return Ok(());
    };
    for files in stretches {
        let rec = crate::summary::read_stretch(files)?;
        let end = rec.end.as_ref().map_or(0, |e| e.end_ns);
        if rec.meta.start_ns <= first.planned_ns && first.actual_ns <= end {
            let around: Vec<LateEvent> = worst
                .iter()
                .filter(|e| e.planned_ns >= rec.meta.start_ns && e.actual_ns <= end)
                .cloned()
                .collect();
            return write_file(&rec, &around, path).map(|_| ());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_negative_ints_use_protobufs_encoding() {
        let mut p = Pb::default();
        p.uint(1, 300);
        assert_eq!(p.0, vec![0x08, 0xac, 0x02]);
        let mut p = Pb::default();
        p.int(2, -1);
        assert_eq!(p.0.len(), 1 + 10, "an int64 -1 is ten bytes");
        let mut p = Pb::default();
        p.message(3, |m| m.string(1, "hi"));
        assert_eq!(p.0, vec![0x1a, 4, 0x0a, 2, b'h', b'i']);
    }

    #[test]
    fn overlapping_late_events_of_a_thread_get_lanes_of_their_own() {
        // Lanes are assigned in write(); the uuids of two lanes differ
        // from the thread's own track.
        assert_ne!(track_uuid(7, 0), track_uuid(7, 1));
        assert_ne!(track_uuid(7, 1), track_uuid(8, 1));
    }
}
