//! A packet port: one AF_PACKET socket bound to one host-side interface
//! ([`PacketPort`], shared with `ontime wire`), and the address to send
//! frames out of it.

pub use ontime_core::packet::{PacketPort, Received};

/// A host-side interface the relay reads from and writes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortId {
    pub ifindex: i32,
    /// MAC of the station behind the interface (the namespace side).
    pub mac: [u8; 6],
}
