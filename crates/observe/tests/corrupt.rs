//! What `observe report` does with a corrupted recording: every seeded
//! corruption the reader accepts is analysed (time lines, wake-ups, the
//! text and JSON) without a panic and in bounded memory; what it refuses
//! is bad input. The fleet worker runs the same analysis on each window.
//!
//! One test in this file: the counting allocator counts the whole process.

use std::collections::HashMap;

use ontime_sched::analyze::AnalysisOptions;
use ontime_trace::event::{kind, Event, F_PREV_RUNNABLE};
use ontime_trace::recording::{End, Group, GroupKind, Meta, Recording, ThreadInfo, Writer};

#[global_allocator]
static ALLOCATOR: ontime_testkit::alloc::Counting = ontime_testkit::alloc::Counting;

const START: u64 = 5_000_000_000;
const MS: u64 = 1_000_000;

/// Two tenants of two vCPUs each on 2 CPUs for 200 ms, with the host I/O
/// path, preempting each other.
fn valid(path: &std::path::Path) {
    let group = |name: &str, kind| Group {
        name: name.into(),
        kind,
        source: vec![],
        vcpu_names: true,
    };
    let meta = Meta::synthetic(
        "bpf",
        2,
        START,
        vec![
            group("t0", GroupKind::Tenant),
            group("t1", GroupKind::Tenant),
            group("host-io", GroupKind::HostIo),
        ],
    );
    let mut w = Writer::create(path, &meta).unwrap();
    let mut threads = HashMap::new();
    for (tid, group, comm) in [
        (100, 0, "CPU 0/KVM"),
        (101, 0, "CPU 1/KVM"),
        (200, 1, "CPU 0/KVM"),
        (201, 1, "CPU 1/KVM"),
        (300, 2, "vhost-100"),
    ] {
        threads.insert(
            tid,
            ThreadInfo {
                tid,
                tgid: tid - tid % 100,
                comm: comm.into(),
                group: Some(group),
            },
        );
    }
    w.threads_of(&threads).unwrap();
    let order = [100u32, 200, 300, 101, 201];
    let mut on = [0u32; 2];
    for k in 0..200u64 {
        let cpu = (k % 2) as usize;
        let next = order[(k as usize / 2) % order.len()];
        let ts = START + k * MS;
        w.event(&Event {
            ts,
            a: next,
            c: cpu as u32,
            cpu: cpu as u16,
            kind: kind::WAKEUP,
            ..Event::default()
        })
        .unwrap();
        w.event(&Event {
            ts: ts + 100_000,
            a: on[cpu],
            b: next,
            c: 0,
            cpu: cpu as u16,
            kind: kind::SWITCH,
            flags: if k % 3 == 0 { F_PREV_RUNNABLE } else { 0 },
        })
        .unwrap();
        on[cpu] = next;
    }
    w.finish(&End {
        end_ns: START + 200 * MS,
        events: 400,
        lost: 0,
        store_ns: None,
    })
    .unwrap();
}

#[test]
fn every_corrupted_recording_is_analysed_or_refused_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.otrec");
    valid(&good);
    let bytes = std::fs::read(&good).unwrap();
    let path = dir.path().join("bad.otrec");
    let opts = AnalysisOptions {
        windows: vec![10 * MS, 100 * MS],
        series: true,
    };
    let mut analysed = 0;
    for (what, b) in ontime_testkit::corrupt::corruptions(&bytes, 0x000b_5e7e, 200) {
        std::fs::write(&path, &b).unwrap();
        let (r, peak) = ontime_testkit::alloc::peak_of(|| {
            std::panic::catch_unwind(|| {
                let rec = Recording::read(&path)?;
                let mut a = ontime_sched::analyze(&rec, &opts);
                a.wake_detail = Some(ontime_sched::wake_detail::of_recording(&rec));
                let text = ontime_observe::report::AnalysisText {
                    analysis: &a,
                    vcpus: true,
                };
                let text = ontime_core::export::TextReport::text(&text);
                let json = serde_json::to_string(&a)?;
                Ok::<_, anyhow::Error>((text, json))
            })
        });
        match r {
            Err(_) => panic!("{what}: the analysis panicked"),
            Ok(Err(e)) => assert!(
                e.downcast_ref::<ontime_core::BadInput>().is_some(),
                "{what}: refused, but not as bad input: {e:#}"
            ),
            Ok(Ok((text, json))) => {
                analysed += 1;
                assert!(!text.is_empty() && !json.is_empty(), "{what}");
            }
        }
        // The recording's claims are in range (at most 4096 CPUs): what the
        // analysis keeps per CPU and per group stays small.
        assert!(peak < 64 << 20, "{what}: {} MiB at the peak", peak >> 20);
    }
    assert!(
        analysed > 20,
        "only {analysed} of 200 corrupted recordings were analysed"
    );
}
