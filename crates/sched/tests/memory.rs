//! The analysis takes memory in proportion to the events, not to the
//! processes or groups a recording names: `observe record --all` of 800
//! short-lived processes (a 2.35 MB recording) needed over 6 GB to
//! report, some 270 KiB per fixed-size histogram, several per process; a
//! META of the most groups a recording may name costs little more.
//!
//! One test in this file: the counting allocator counts the whole process.

use std::collections::HashMap;

use ontime_recording::event::{kind, Event, TASK_DEAD};
use ontime_recording::groups::{Group, GroupKind};
use ontime_recording::recording::validate::MAX_RECORDED_GROUPS;
use ontime_recording::recording::{Meta, Recording, ThreadInfo};
use ontime_sched::analyze::AnalysisOptions;

#[global_allocator]
static ALLOCATOR: ontime_testkit::alloc::Counting = ontime_testkit::alloc::Counting;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const PROCESSES: u32 = 800;

/// 3 s of `--all` on 2 CPUs: every 3.5 ms a process is born, waits 10 us,
/// runs 990 us and exits; META names the most groups a recording may.
fn recording() -> Recording {
    let groups = (0..MAX_RECORDED_GROUPS)
        .map(|i| Group {
            name: format!("t{i}"),
            kind: GroupKind::Tenant,
            source: vec![],
            vcpu_names: false,
        })
        .collect();
    let meta = Meta {
        track_all: true,
        ..Meta::synthetic("bpf", 2, 0, groups)
    };
    let mut threads = HashMap::new();
    let mut events = Vec::new();
    for i in 0..PROCESSES {
        let tid = 1000 + i;
        threads.insert(
            tid,
            ThreadInfo {
                tid,
                tgid: tid,
                comm: "sh".into(),
                group: None,
            },
        );
        let t = u64::from(i) * 3_500 * US;
        let cpu = (i % 2) as u16;
        events.push(Event {
            ts: t,
            a: tid,
            c: u32::from(cpu),
            cpu,
            kind: kind::WAKEUP_NEW,
            ..Event::default()
        });
        events.push(Event {
            ts: t + 10 * US,
            a: 0,
            b: tid,
            cpu,
            kind: kind::SWITCH,
            ..Event::default()
        });
        events.push(Event {
            ts: t + MS,
            a: tid,
            b: 0,
            c: TASK_DEAD,
            cpu,
            kind: kind::SWITCH,
            ..Event::default()
        });
    }
    Recording::of_events(meta, threads, events, 3_000 * MS)
}

#[test]
fn short_lived_processes_and_many_groups_cost_kilobytes_each() {
    let rec = recording();
    let (a, peak) = ontime_testkit::alloc::peak_of(|| ontime_sched::analyze(&rec, &AnalysisOptions::default()));
    let processes: Vec<_> = a.groups.iter().filter(|g| g.name.starts_with("sh[")).collect();
    assert_eq!(processes.len(), PROCESSES as usize);
    for g in &processes {
        assert_eq!((g.on_cpu_ns, g.run_delay_ns), (990 * US, 10 * US), "{}", g.name);
        assert_eq!(g.threads[0].waits, 1);
    }
    // Some 1 800 groups with their reports, each a few KiB; fixed-size
    // histograms took some 2 MiB per process.
    let groups = a.groups.len();
    assert!(
        peak < 32 << 20,
        "analysing {groups} groups took {} MiB at its peak",
        peak >> 20
    );
}
