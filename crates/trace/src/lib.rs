//! ontime-trace: capturing kernel events. It owns the event layout shared
//! with the BPF program ([`event`], generated from `bpf/event.h`), what to
//! record ([`targets`]: cgroups, processes, QEMU guests, the host I/O path),
//! the event sources behind one trait ([`recorder::EventSource`]: BPF on
//! tracepoints with the `bpf` feature, perf tracepoints through the per-CPU
//! perf ring and tracefs formats otherwise), the choice between them and why
//! one is unavailable, the thread table with /proc identity, and the
//! versioned, streamed recording ([`recording`]).
//!
//! It does not interpret events: time lines and windows are ontime-sched's.
//! A new kind of capture (perf sampling for profile, block and syscall
//! tracepoints for io) is a new source or module here.

#[cfg(feature = "bpf")]
pub mod skel {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/sched.skel.rs"));
}

#[cfg(feature = "bpf")]
pub mod io_skel {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/io.skel.rs"));
}

#[cfg(feature = "bpf")]
mod bpf;
#[cfg(feature = "bpf")]
mod bpfmap;
pub mod event;
pub mod io;
pub mod io_abi;
pub mod io_app;
pub mod io_async;
pub mod io_layout;
pub mod io_vmm;
pub mod maps;
mod perf;
mod pipeline;
pub mod recorder;
pub mod recording;
pub mod sampler;
mod source;
pub mod store;
pub mod targets;
pub mod tracefs;
