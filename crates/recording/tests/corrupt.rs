//! Every corruption of a valid recording reads as a recording or fails as
//! bad input in one line: never a panic, and never an allocation the file
//! cannot justify (a count or a length in the file sizes nothing beyond
//! what the file holds). The cases are seeded, so a failure names one
//! that replays.
//!
//! One test in this file: the allocator below counts the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use ontime_recording::event::{kind, Event};
use ontime_recording::groups::{Group, GroupKind};
use ontime_recording::io_abi::IoEvent;
use ontime_recording::io_layout::IoState;
use ontime_recording::maps::{Mapping, ProcessMaps};
use ontime_recording::recording::{End, Meta, Recording, ThreadInfo, Writer};
use ontime_recording::samples::SampleBatch;
use ontime_recording::recording::validate::{MAX_RECORDED_CPUS, MAX_RECORDED_GROUPS};

/// Bytes allocated now, and the most since the last [`reset_peak`].
static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

fn grew(by: usize) {
    let now = NOW.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as alloc.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.dealloc(p, l) };
        NOW.fetch_sub(l.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` came from this allocator with layout `l`.
        let q = unsafe { System.realloc(p, l, new_size) };
        if !q.is_null() {
            if new_size >= l.size() {
                grew(new_size - l.size());
            } else {
                NOW.fetch_sub(l.size() - new_size, Ordering::Relaxed);
            }
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts measuring the peak from what is allocated now.
fn reset_peak() -> usize {
    let now = NOW.load(Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

const START: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// A small recording with a block of every kind a reader takes.
fn valid(path: &Path) {
    let group = |name: &str, kind| Group {
        name: name.into(),
        kind,
        source: vec![],
        vcpu_names: false,
    };
    let meta = Meta {
        version: 1,
        mechanism: "bpf".into(),
        start_ns: START,
        start_realtime_ns: 1_700_000_000_000_000_000,
        cpus: 2,
        kernel: "test".into(),
        hostname: "h".into(),
        groups: vec![group("t0", GroupKind::Tenant), group("host-io", GroupKind::HostIo)],
        track_all: false,
        unavailable: vec![],
        command_line: vec!["ontime".into()],
        ontime_version: "test".into(),
        clocksource: "tsc".into(),
        sample_period_ns: Some(MS),
        io: None,
    };
    let mut w = Writer::create(path, &meta).unwrap();
    let threads: HashMap<u32, ThreadInfo> = [(10, Some(0)), (11, Some(0)), (12, Some(1)), (13, None)]
        .into_iter()
        .map(|(tid, group)| {
            (
                tid,
                ThreadInfo {
                    tid,
                    tgid: 10,
                    comm: format!("CPU {}/KVM", tid - 10),
                    group,
                },
            )
        })
        .collect();
    w.threads_of(&threads).unwrap();
    for k in 0..50u64 {
        let (prev, next) = if k % 2 == 0 {
            (0, 10 + (k % 4) as u32)
        } else {
            (10 + (k % 4) as u32, 0)
        };
        w.event(&Event {
            ts: START + k * MS,
            a: prev,
            b: next,
            c: 0,
            cpu: (k % 2) as u16,
            kind: kind::SWITCH,
            flags: 0,
        })
        .unwrap();
        if k % 5 == 0 {
            w.event(&Event {
                ts: START + k * MS + 1000,
                a: 11,
                b: 0,
                c: 1,
                cpu: 0,
                kind: kind::WAKEUP,
                flags: 0,
            })
            .unwrap();
        }
    }
    w.flush().unwrap();
    let mut samples = SampleBatch::default();
    for k in 0..10u64 {
        samples.push(
            START + k * 3 * MS,
            10,
            10,
            0,
            &[0xffff_ffff_8100_0000 + k],
            &[0x40_1000 + k, 0x40_2000],
        );
    }
    w.samples(&samples).unwrap();
    w.maps(&[ProcessMaps {
        pid: 10,
        comm: "qemu".into(),
        maps: vec![Mapping {
            start: 0x40_0000,
            end: 0x50_0000,
            offset: 0,
            path: "/nonexistent/qemu".into(),
            dev: "fe:01".into(),
            inode: 7,
        }],
    }])
    .unwrap();
    let io: Vec<u8> = (0..2u64)
        .flat_map(|k| {
            IoEvent {
                ts: START + k * 10 * MS,
                ..IoEvent::default()
            }
            .to_bytes()
        })
        .collect();
    w.io_events(&io).unwrap();
    w.io_state(&[IoState {
        ts: START + 20 * MS,
        ..IoState::default()
    }])
    .unwrap();
    w.finish(&End {
        end_ns: START + 60 * MS,
        events: 60,
        lost: 0,
        store_ns: Some(MS),
    })
    .unwrap();
}

#[test]
fn every_corruption_reads_or_fails_as_bad_input_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.otrec");
    valid(&good);
    let rec = Recording::read(&good).expect("the valid recording reads");
    assert_eq!((rec.events.len(), rec.samples.len(), rec.io_events.len()), (60, 10, 2));
    let bytes = std::fs::read(&good).unwrap();
    let path = dir.path().join("bad.otrec");
    let (mut read, mut refused) = (0, 0);
    for (what, b) in ontime_testkit::corrupt::corruptions(&bytes, 0x07_11_3e, 500) {
        std::fs::write(&path, &b).unwrap();
        let base = reset_peak();
        let r = std::panic::catch_unwind(|| Recording::read(&path));
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        // The reader's 1 MiB buffer, and a few times the file for what it
        // parses: nothing a claim in the file could inflate.
        let bound = (1 << 20) + 64 * b.len() + (64 << 10);
        assert!(peak <= bound, "{what}: reading took {peak} bytes, more than {bound}");
        match r {
            Err(_) => panic!("{what}: the reader panicked"),
            Ok(Err(e)) => {
                refused += 1;
                let text = format!("{e:#}");
                assert!(
                    e.downcast_ref::<ontime_core::BadInput>().is_some(),
                    "{what}: not bad input: {text}"
                );
                assert!(!text.contains('\n'), "{what}: not one line: {text}");
                assert!(text.contains("bad.otrec"), "{what}: the file is not named: {text}");
            }
            Ok(Ok(r)) => {
                read += 1;
                assert!((1..=MAX_RECORDED_CPUS as usize).contains(&r.meta.cpus), "{what}");
                assert!(r.meta.groups.len() as u64 <= MAX_RECORDED_GROUPS, "{what}");
                assert!(r.events.len() * 24 <= b.len(), "{what}");
                assert!(r.samples.frames.len() * 8 <= b.len(), "{what}");
                assert!(r.threads.len() * 8 <= b.len(), "{what}");
                if let Some(e) = &r.end {
                    assert!(e.end_ns >= r.meta.start_ns, "{what}");
                }
            }
        }
    }
    // Both kinds occur: the cases test the checks, not only the parser.
    assert!(read > 20 && refused > 20, "read {read}, refused {refused}");
}
