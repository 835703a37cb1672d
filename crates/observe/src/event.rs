//! The scheduler event as the BPF program emits it and the recording stores it.

/// Kinds of event; the numbers are shared with `bpf/sched.bpf.c` and the file format.
pub mod kind {
    pub const SWITCH: u8 = 1;
    pub const WAKEUP: u8 = 2;
    pub const WAKEUP_NEW: u8 = 3;
    pub const MIGRATE: u8 = 4;
    pub const FORK: u8 = 5;
    pub const EXIT: u8 = 6;
    pub const EXEC: u8 = 7;
    pub const KVM_ENTRY: u8 = 8;
    pub const KVM_EXIT: u8 = 9;
}

/// `flags` of a switch: the previous task stays runnable (it was preempted
/// or yielded), so its wait for a CPU starts now.
pub const F_PREV_RUNNABLE: u8 = 1;
/// `flags` of a switch: the kernel preempted the previous task.
pub const F_PREEMPT: u8 = 2;
/// `TASK_DEAD` in the previous task's state: it will never run again.
pub const TASK_DEAD: u32 = 0x80;

/// One scheduler event, 24 bytes, identical in the BPF ring and on disk.
///
/// | kind | a | b | c |
/// |---|---|---|---|
/// | SWITCH | prev tid | next tid | prev state |
/// | WAKEUP(_NEW) | tid | - | target CPU |
/// | MIGRATE | tid | from CPU | to CPU |
/// | FORK | parent tid | child tid | child tgid |
/// | EXIT | tid | - | - |
/// | EXEC | tid | - | tgid |
/// | KVM_ENTRY/EXIT | tid | vCPU id | - |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC, ns (bpf_ktime_get_ns).
    pub ts: u64,
    pub a: u32,
    pub b: u32,
    pub c: u32,
    pub cpu: u16,
    pub kind: u8,
    pub flags: u8,
}

pub const EVENT_SIZE: usize = std::mem::size_of::<Event>();
/// A FORK or EXEC record in the ring carries the task's comm after the event.
pub const COMM_EVENT_SIZE: usize = EVENT_SIZE + 16;

const _: () = assert!(EVENT_SIZE == 24);

impl Event {
    /// Reads one event from little-endian bytes (at least `EVENT_SIZE`).
    pub fn from_bytes(b: &[u8]) -> Option<Event> {
        if b.len() < EVENT_SIZE {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Event {
            ts: u64::from_le_bytes(b[0..8].try_into().ok()?),
            a: u32_at(8),
            b: u32_at(12),
            c: u32_at(16),
            cpu: u16::from_le_bytes([b[20], b[21]]),
            kind: b[22],
            flags: b[23],
        })
    }

    pub fn to_bytes(self) -> [u8; EVENT_SIZE] {
        let mut out = [0u8; EVENT_SIZE];
        out[0..8].copy_from_slice(&self.ts.to_le_bytes());
        out[8..12].copy_from_slice(&self.a.to_le_bytes());
        out[12..16].copy_from_slice(&self.b.to_le_bytes());
        out[16..20].copy_from_slice(&self.c.to_le_bytes());
        out[20..22].copy_from_slice(&self.cpu.to_le_bytes());
        out[22] = self.kind;
        out[23] = self.flags;
        out
    }

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
