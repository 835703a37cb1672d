//! The I/O event as the BPF program writes it (`bpf/io_event.h`): its
//! 72-byte layout, kinds and flags, read and written one way.

use serde::{Deserialize, Serialize};

/// Kinds of I/O event (`enum io_kind` in bpf/io_event.h).
pub mod io_kind {
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const PREAD: u8 = 3;
    pub const PWRITE: u8 = 4;
    pub const READV: u8 = 5;
    pub const WRITEV: u8 = 6;
    pub const FSYNC: u8 = 7;
    pub const FDATASYNC: u8 = 8;
    pub const OPENAT: u8 = 9;
    pub const PREADV: u8 = 10;
    pub const PWRITEV: u8 = 11;
    /// A VMM's io_uring requests (QEMU's aio=io_uring).
    pub const URING_READ: u8 = 12;
    pub const URING_WRITE: u8 = 13;
    pub const URING_FSYNC: u8 = 14;
    pub const BLOCK: u8 = 16;
    /// A VMM's Linux AIO direct reads and writes (QEMU's aio=native).
    pub const AIO_READ: u8 = 17;
    pub const AIO_WRITE: u8 = 18;
}

/// No tenant (block events; IO_NO_GROUP).
pub const NO_GROUP: u32 = u32::MAX;
/// The file was opened with O_DIRECT.
pub const F_DIRECT: u8 = 1;
/// A block request completed whose issue was not seen.
pub const F_UNPAIRED: u8 = 2;
/// `struct io_event`.
pub const IO_EVENT_SIZE: usize = 72;
pub(crate) const IO_PATH_MAX: usize = 128;
/// The layers of `devices` in io.bpf.c.
pub(crate) const LAYER_VIRTUAL: u32 = 1;
pub(crate) const LAYER_PHYSICAL: u32 = 2;

/// One I/O: a system call of a tenant on a regular file, or a block
/// request on a watched device. Layout: bpf/io_event.h.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoEvent {
    /// Completion, CLOCK_MONOTONIC.
    pub ts: u64,
    pub latency: u64,
    /// File position before the call, or byte address on the device.
    pub offset: u64,
    pub ino: u64,
    /// Return value of the call (bytes moved, or -errno); the request's error.
    pub ret: i64,
    /// Bytes asked for, or the request's size.
    pub bytes: u32,
    pub tid: u32,
    /// Kernel encoding, major << 20 | minor.
    pub dev: u32,
    pub group: u32,
    pub fd: u32,
    pub cpu: u16,
    pub kind: u8,
    pub flags: u8,
    pub rwbs: [u8; 8],
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

impl IoEvent {
    pub fn from_bytes(b: &[u8]) -> Option<IoEvent> {
        if b.len() < IO_EVENT_SIZE {
            return None;
        }
        let mut rwbs = [0u8; 8];
        rwbs.copy_from_slice(&b[64..72]);
        Some(IoEvent {
            ts: u64_at(b, 0),
            latency: u64_at(b, 8),
            offset: u64_at(b, 16),
            ino: u64_at(b, 24),
            ret: u64_at(b, 32) as i64,
            bytes: u32_at(b, 40),
            tid: u32_at(b, 44),
            dev: u32_at(b, 48),
            group: u32_at(b, 52),
            fd: u32_at(b, 56),
            cpu: u16::from_le_bytes([b[60], b[61]]),
            kind: b[62],
            flags: b[63],
            rwbs,
        })
    }

    pub fn to_bytes(&self) -> [u8; IO_EVENT_SIZE] {
        let mut b = [0u8; IO_EVENT_SIZE];
        b[0..8].copy_from_slice(&self.ts.to_le_bytes());
        b[8..16].copy_from_slice(&self.latency.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.ino.to_le_bytes());
        b[32..40].copy_from_slice(&self.ret.to_le_bytes());
        b[40..44].copy_from_slice(&self.bytes.to_le_bytes());
        b[44..48].copy_from_slice(&self.tid.to_le_bytes());
        b[48..52].copy_from_slice(&self.dev.to_le_bytes());
        b[52..56].copy_from_slice(&self.group.to_le_bytes());
        b[56..60].copy_from_slice(&self.fd.to_le_bytes());
        b[60..62].copy_from_slice(&self.cpu.to_le_bytes());
        b[62] = self.kind;
        b[63] = self.flags;
        b[64..72].copy_from_slice(&self.rwbs);
        b
    }

    /// What the I/O did, for counting bytes.
    pub fn op(&self) -> IoOp {
        use io_kind::*;
        match self.kind {
            READ | PREAD | READV | PREADV | URING_READ | AIO_READ => IoOp::Read,
            WRITE | PWRITE | WRITEV | PWRITEV | URING_WRITE | AIO_WRITE => IoOp::Write,
            FSYNC | FDATASYNC | URING_FSYNC => IoOp::Sync,
            OPENAT => IoOp::Open,
            BLOCK => match self.rwbs.iter().find(|c| c.is_ascii_alphabetic()) {
                Some(b'R') => IoOp::Read,
                Some(b'W') => IoOp::Write,
                Some(b'F') if self.rwbs.contains(&b'W') => IoOp::Write,
                Some(b'F') => IoOp::Sync,
                Some(b'D') => IoOp::Discard,
                _ => IoOp::Other,
            },
            _ => IoOp::Other,
        }
    }

    /// Bytes the I/O moved: a call's return value, a request's size.
    pub fn moved(&self) -> u64 {
        if self.kind == io_kind::BLOCK {
            if self.ret == 0 {
                self.bytes as u64
            } else {
                0
            }
        } else {
            self.ret.max(0) as u64
        }
    }

    pub fn is_block(&self) -> bool {
        self.kind == io_kind::BLOCK
    }

    pub fn rwbs_str(&self) -> String {
        let end = self.rwbs.iter().position(|&c| c == 0).unwrap_or(8);
        String::from_utf8_lossy(&self.rwbs[..end]).into_owned()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum IoOp {
    Read,
    Write,
    Sync,
    Open,
    Discard,
    Other,
}

/// The offsets `IoEvent::from_bytes` reads are the ones the compiler laid
/// `struct io_event` out at (the skeleton's twin, generated from the BPF
/// object's BTF): the C header and the Rust codec cannot drift apart.
#[cfg(all(test, feature = "bpf"))]
mod layout_tests {
    use crate::io_skel::types::io_event as C;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_codec_reads_the_compilers_layout() {
        assert_eq!(size_of::<C>(), super::IO_EVENT_SIZE);
        let at = [
            (offset_of!(C, ts), 0),
            (offset_of!(C, latency), 8),
            (offset_of!(C, offset), 16),
            (offset_of!(C, ino), 24),
            (offset_of!(C, ret), 32),
            (offset_of!(C, bytes), 40),
            (offset_of!(C, tid), 44),
            (offset_of!(C, dev), 48),
            (offset_of!(C, group), 52),
            (offset_of!(C, fd), 56),
            (offset_of!(C, cpu), 60),
            (offset_of!(C, kind), 62),
            (offset_of!(C, flags), 63),
            (offset_of!(C, rwbs), 64),
        ];
        for (compiled, read) in at {
            assert_eq!(compiled, read);
        }
    }
}
