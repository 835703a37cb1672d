//! ontime-net: the packet path. It owns how frames move between tenants and
//! the building side on the host: [`port`] (an AF_PACKET socket bound to one
//! host-side interface), [`discipline`] (the order and time at which queued
//! frames leave: today's [`discipline::DelayLine`]; EDF and WFQ for document
//! 003 are further implementations of the same trait) and [`relay`] (the
//! threads that carry frames: the lab's Dom0 / vhost, the host I/O path).
//!
//! [`channel`] holds document 003's real-time channel arithmetic (the
//! deadline label, EDF and guaranteed-service admission) and [`edf`] the
//! scheduler at the bottleneck link (WFQ, EDF, best effort); the data path and
//! controller that use it are issue 13's work in progress.
//!
//! It does not own the interfaces themselves (the lab's sandbox makes them).

pub mod channel;
#[cfg(feature = "bpf")]
pub mod datapath;
pub mod discipline;
pub mod edf;
pub mod port;
pub mod relay;

pub use discipline::{DelayLine, Discipline, Queued};
pub use port::PacketPort;
pub use relay::{Relay, RelayReport, RelaySettings};
