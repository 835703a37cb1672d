//! ontime-trace: capturing kernel events. It owns what to record
//! ([`targets`]: cgroups, processes, QEMU guests, the host I/O path), the
//! BPF programs (`src/bpf`, built against the event layout in
//! ontime-recording's `abi/` headers), the event sources behind one trait
//! ([`recorder::EventSource`]: BPF on tracepoints with the `bpf` feature,
//! perf tracepoints through the per-CPU perf ring and tracefs formats
//! otherwise), the choice between them and why one is unavailable, the
//! thread table with /proc identity, stack sampling ([`sampler`]), the I/O
//! recorder ([`io`]) and finding disks, extents and caches on this host
//! ([`io_layout`]).
//!
//! The recording itself (format, event types, groups, samples, mappings,
//! windows) is ontime-recording's, re-exported here under the paths it had
//! ([`event`], [`io_abi`], [`maps`], [`recording`], [`store`]).
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
pub mod io;
pub mod io_app;
pub mod io_async;
pub mod io_layout;
pub mod io_vmm;
mod perf;
mod pipeline;
pub mod recorder;
pub mod sampler;
mod source;
pub mod targets;
pub mod tracefs;

pub use ontime_recording::{event, flight, io_abi, maps, recording, store};
