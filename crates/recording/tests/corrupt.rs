//! Every corruption of a valid recording reads as a recording or fails as
//! bad input in one line: never a panic, and never an allocation the file
//! cannot justify (a count or a length in the file sizes nothing beyond
//! what the file holds). The cases are seeded, so a failure names one
//! that replays.
//!
//! One test in this file: the counting allocator counts the whole process.

use std::collections::HashMap;
use std::path::Path;

use ontime_recording::event::{kind, Event};
use ontime_recording::groups::{Group, GroupKind};
use ontime_recording::io_abi::IoEvent;
use ontime_recording::io_layout::IoState;
use ontime_recording::maps::{Mapping, ProcessMaps};
use ontime_recording::recording::validate::{MAX_RECORDED_CPUS, MAX_RECORDED_GROUPS};
use ontime_recording::recording::{End, Meta, Recording, ThreadInfo, Writer};
use ontime_recording::samples::SampleBatch;

#[global_allocator]
static ALLOCATOR: ontime_testkit::alloc::Counting = ontime_testkit::alloc::Counting;

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
        start_realtime_ns: 1_700_000_000_000_000_000,
        command_line: vec!["ontime".into()],
        sample_period_ns: Some(MS),
        ..Meta::synthetic(
            "bpf",
            2,
            START,
            vec![group("t0", GroupKind::Tenant), group("host-io", GroupKind::HostIo)],
        )
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
        let (r, peak) = ontime_testkit::alloc::peak_of(|| std::panic::catch_unwind(|| Recording::read(&path)));
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
