//! The bottleneck scheduler's own cost per frame (enqueue + dequeue), for
//! document 003's mix (two deadline channels, one reservation channel,
//! best effort) beside the lab's plain delay line on the same frames.
//! Prints one JSON object; `bench/net_cost.py` runs it.
use ontime_net::discipline::{DelayLine, Discipline, FrameClass, Queued};
use ontime_net::edf::{ChannelScheduler, SwitchTable};
use std::time::Instant;

const FRAMES: usize = 1_000_000;
/// Frames queued at once: a busy bottleneck's backlog.
const BACKLOG: usize = 256;

fn class(i: usize, now: u64) -> FrameClass {
    match i % 10 {
        0 => FrameClass::Deadline {
            channel: 1,
            deadline_ns: now + 5_000_000,
        },
        1 => FrameClass::Deadline {
            channel: 2,
            deadline_ns: now + 10_000_000,
        },
        2 => FrameClass::Reservation { channel: 3 },
        _ => FrameClass::BestEffort,
    }
}

/// ns per frame through `d`: keeps BACKLOG frames queued, the link's clock
/// advanced by each frame's wire time.
fn run(d: &mut dyn Discipline) -> f64 {
    let mut now = 1_000_000_000u64;
    let mut next_slot = 0usize;
    let mut sent = 0usize;
    let t0 = Instant::now();
    while sent < FRAMES {
        while d.len() < BACKLOG {
            let q = Queued {
                slot: next_slot % 8192,
                arrived_ns: now,
                len: 1000,
                egress: 1,
                class: class(next_slot, now),
                ahead: Default::default(),
            };
            next_slot += 1;
            let _ = d.enqueue(q);
        }
        match d.next_release_ns() {
            Some(t) => now = now.max(t),
            None => continue,
        }
        while let Some(f) = d.dequeue(now) {
            std::hint::black_box(f);
            sent += 1;
        }
    }
    t0.elapsed().as_nanos() as f64 / FRAMES as f64
}

fn main() {
    let table = SwitchTable::new();
    table.set_reservation(3, 10_000_000);
    let mut edf = ChannelScheduler::new(100_000_000, 0, 8192, None, table);
    let mut fifo = DelayLine::new(0, Some(100_000_000), 8192);
    // Warm both up once.
    run(&mut edf);
    run(&mut fifo);
    let e = run(&mut edf);
    let f = run(&mut fifo);
    println!(
        "{{\"frames\": {FRAMES}, \"backlog\": {BACKLOG}, \"channel_scheduler_ns_per_frame\": {e:.1}, \"delay_line_ns_per_frame\": {f:.1}, \"ratio\": {:.2}}}",
        e / f
    );
}
