//! Field-bus codecs: Modbus/TCP's MBAP frames with reads of holding and
//! input registers ([`modbus`]), and BACnet/IP's ReadPropertyMultiple of
//! present values with its answers and Who-Is / I-Am ([`bacnet`]).
//!
//! Owns the bytes only: encoding into caller-owned buffers and parsing in
//! place, with no allocation and no I/O, so the crawler's hot path, the
//! gateway emulator and a passive recorder of other pollers share one
//! implementation. Does not own sockets, timing or what a register means.

pub mod bacnet;
pub mod modbus;

/// A frame written as the hex bytes a capture shows ("00 01 ff"), for the
/// codecs' tests against frames of independent implementations.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}
