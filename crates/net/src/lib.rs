//! ontime-net: the packet path. It owns how frames move between tenants and
//! the building side on the host: [`port`] (an AF_PACKET socket bound to one
//! host-side interface), [`discipline`] (the order and time at which queued
//! frames leave: today's [`discipline::DelayLine`]; EDF and WFQ for document
//! 003 are further implementations of the same trait) and [`relay`] (the
//! threads that carry frames: the lab's Dom0 / vhost, the host I/O path).
//!
//! It does not own the interfaces themselves (the lab's sandbox makes them)
//! nor channel admission (document 003's verb, to come).

pub mod discipline;
pub mod port;
pub mod relay;

pub use discipline::{DelayLine, Discipline, Queued};
pub use port::PacketPort;
pub use relay::{Relay, RelayReport, RelaySettings};
