//! ontime-net: the packet path. It owns how frames move between tenants and
//! the building side on the host: [`port`] (an AF_PACKET socket bound to one
//! host-side interface), [`discipline`] (the order and time at which queued
//! frames leave: today's [`discipline::DelayLine`]; EDF and WFQ for document
//! 003 are further implementations of the same trait) and [`relay`] (the
//! threads that carry frames: the lab's Dom0 / vhost, the host I/O path).
//!
//! Document 003's real-time channels: [`channel`] (the deadline label, EDF
//! and guaranteed-service admission), [`edf`] (the scheduler at the
//! bottleneck link: WFQ, EDF, best effort, and the switch table the
//! controller programs), [`datapath`] (the stamp and check in BPF),
//! [`controller`] (admission, installation, escalation, misses), [`api`]
//! (its HTTP/JSON API and client; `peers` bounds what each client holds)
//! and [`flow`] (the measured flows: a paced UDP sender and a receiver
//! that times every datagram). [`flood`] is the UDP flood the
//! attribution's ground truth injects at a tenant's interface.
//!
//! It does not own the interfaces themselves (the lab's sandbox makes them).

pub mod api;
pub mod channel;
pub mod clock;
pub mod controller;
#[cfg(feature = "bpf")]
pub mod datapath;
pub mod discipline;
pub mod edf;
pub mod flood;
pub mod flow;
pub mod miss;
mod peers;
pub mod port;
pub mod relay;

pub use discipline::{DelayLine, Discipline, Queued};
pub use port::PacketPort;
pub use relay::{Relay, RelayReport, RelaySettings};
