//! The capture: a packet socket on one interface that keeps the frames it
//! sends and receives, each with the kernel's stamp (CLOCK_MONOTONIC).

use anyhow::{Context, Result};
use ontime_core::packet::{PacketPort, Received};

pub struct Capture {
    port: PacketPort,
    /// The loopback shows every frame twice (sent, then received): only
    /// the received copy is kept.
    loopback: bool,
}

/// One frame read.
pub enum Frame {
    /// `len` bytes (the buffer holds at most its length) stamped at `ns`.
    Got { len: usize, ns: u64 },
    /// A copy not to count (the loopback's sent copy), or no stamp.
    Skip,
    /// Nothing to read within the wait.
    Idle,
}

impl Capture {
    /// Captures on interface `name` (needs root or CAP_NET_RAW).
    pub fn open(name: &str) -> Result<Capture> {
        let cname = std::ffi::CString::new(name).context("an interface name holds no NUL")?;
        // SAFETY: a NUL-terminated name; 0 is its "no such interface".
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(ontime_core::bad_input(format!(
                "no interface '{name}' here (ip -br link lists them)"
            )));
        }
        let port = PacketPort::bind_both_ways(ifindex as i32).with_context(|| format!("cannot capture on {name}"))?;
        port.stamp_arrivals()
            .context("cannot ask for kernel stamps on the capture")?;
        port.receive_buffer(8 << 20);
        Ok(Capture {
            port,
            loopback: name == "lo",
        })
    }

    /// The next frame, waiting at most 100 ms for one (so a stop is seen).
    pub fn next(&self, buf: &mut [u8]) -> Frame {
        let frame = self.queued(buf);
        if matches!(frame, Frame::Idle) {
            self.port.wait(100);
        }
        frame
    }

    /// The next frame already queued on the socket, without waiting.
    pub fn queued(&self, buf: &mut [u8]) -> Frame {
        let got = match self.port.recv(buf) {
            Received::Empty => return Frame::Idle,
            Received::Own => return Frame::Skip,
            Received::Sent { .. } if self.loopback => return Frame::Skip,
            Received::Sent { len, kernel_ns } | Received::Frame { len, kernel_ns } => (len, kernel_ns),
        };
        match got {
            (len, Some(ns)) => Frame::Got {
                len: len.min(buf.len()),
                ns,
            },
            (_, None) => Frame::Skip,
        }
    }
}
