//! `ontime observe`: records scheduler events with BPF and turns them into
//! per-window CPU use, run delay (steal), contention and host I/O path CPU.
pub mod skel {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/sched.skel.rs"));
}

pub mod analyze;
mod bpf;
pub mod event;
mod perf;
pub mod plots;
pub mod recorder;
pub mod recording;
pub mod report;
pub mod targets;
