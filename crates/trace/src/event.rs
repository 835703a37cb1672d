//! The scheduler event as the BPF program emits it and the recording stores
//! it. The layout, kinds and flags are generated from `bpf/event.h`, the
//! header the BPF program includes: one definition, no hand-kept mirror.

include!(concat!(env!("OUT_DIR"), "/event_abi.rs"));

/// A FORK or EXEC record in the ring carries the task's comm after the event.
pub const COMM_EVENT_SIZE: usize = EVENT_SIZE + 16;

impl Event {
    /// The comm carried after a FORK/EXEC event in the ring, if any.
    pub fn comm_from_bytes(b: &[u8]) -> Option<String> {
        let raw = b.get(EVENT_SIZE..COMM_EVENT_SIZE)?;
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        Some(String::from_utf8_lossy(&raw[..end]).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        let e = Event {
            ts: 123_456_789_012,
            a: 7,
            b: 8,
            c: 0x80,
            cpu: 3,
            kind: kind::SWITCH,
            flags: F_PREV_RUNNABLE,
        };
        assert_eq!(Event::from_bytes(&e.to_bytes()), Some(e));
        assert_eq!(Event::from_bytes(&[0u8; 10]), None);
    }
}
