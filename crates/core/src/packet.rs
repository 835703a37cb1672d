//! A packet socket (AF_PACKET) on one interface: the relay's port, the
//! flooder's way out, and `ontime wire`'s capture, which keeps the frames
//! the interface sends too.

use anyhow::{Context, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const ETH_P_ALL: u16 = 0x0003;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_HASH: u32 = 0;

/// What happened to one receive call.
pub enum Received {
    /// A frame of `len` bytes, sent by someone else on the link;
    /// `kernel_ns`: when the kernel received it (CLOCK_MONOTONIC), once
    /// [`PacketPort::stamp_arrivals`] asked for stamps.
    Frame { len: usize, kernel_ns: Option<u64> },
    /// Our own transmission, seen again on the link: not ours to relay.
    Own,
    /// A frame the interface sent, on a port that keeps them
    /// ([`PacketPort::bind_both_ways`]), as [`Received::Frame`] is.
    Sent { len: usize, kernel_ns: Option<u64> },
    /// Nothing (more) to read now.
    Empty,
}

/// An AF_PACKET socket (non-blocking, close-on-exec).
pub struct PacketPort {
    fd: OwnedFd,
    /// Frames the interface sends are returned ([`Received::Sent`]).
    keep_sent: bool,
}

impl PacketPort {
    /// A socket for sending only (to any interface, see [`PacketPort::send`]).
    /// Opened with protocol 0 it receives nothing until bound: with
    /// ETH_P_ALL the kernel would hand it a copy of every frame on the host,
    /// in the receiving CPU's softirq, for no reader.
    pub fn unbound() -> Result<PacketPort> {
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("cannot open a packet socket (needs root)");
        }
        // SAFETY: fd is new and ours.
        Ok(PacketPort {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            keep_sent: false,
        })
    }

    /// A socket receiving every frame that arrives on `ifindex` (bound with
    /// ETH_P_ALL).
    pub fn bind(ifindex: i32) -> Result<PacketPort> {
        let port = PacketPort::bound(ifindex)?;
        // Frames sent out of the interface (the relay's own, a flood
        // written onto a tenant's veth) are not arrivals: the kernel need
        // not wake the reader for them. Before Linux 4.20 `recv` drops them.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with an int option value.
        unsafe {
            libc::setsockopt(
                port.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                &on as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        Ok(port)
    }

    /// A socket receiving every frame on `ifindex` in both directions:
    /// those it receives ([`Received::Frame`]) and those it sends
    /// ([`Received::Sent`]), as a capture needs them.
    pub fn bind_both_ways(ifindex: i32) -> Result<PacketPort> {
        let mut port = PacketPort::bound(ifindex)?;
        port.keep_sent = true;
        Ok(port)
    }

    fn bound(ifindex: i32) -> Result<PacketPort> {
        let port = PacketPort::unbound()?;
        let sa = sockaddr(ifindex);
        // SAFETY: sa is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                port.fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("cannot bind a packet socket to interface index {ifindex}"));
        }
        Ok(port)
    }

    /// Asks for a receive buffer of `bytes` (room for bursts while the
    /// reader is descheduled); the kernel may give less.
    pub fn receive_buffer(&self, bytes: usize) {
        let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: setsockopt with an int option value.
        unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
    }

    /// Waits up to `timeout_ms` for a frame to read; false when none came
    /// (or a signal ended the wait).
    pub fn wait(&self, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    }

    /// Shares arriving frames with the other sockets of fanout group `id`
    /// (by flow hash), so several relay threads can read one interface.
    pub fn join_fanout(&self, id: u32) -> Result<()> {
        let arg: u32 = (id & 0xffff) | (PACKET_FANOUT_HASH << 16);
        // SAFETY: setsockopt with a u32 option value.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_FANOUT,
                &arg as *const u32 as *const libc::c_void,
                4,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot join the relay's fanout group");
        }
        Ok(())
    }

    /// Asks the kernel to stamp every frame as it receives it, so a reader
    /// can tell how long a frame waited on the socket before it was read
    /// (the relay's own wake-up latency, which its read time hides).
    pub fn stamp_arrivals(&self) -> Result<()> {
        crate::kstamp::enable(self).context("cannot ask for receive stamps on a packet socket")
    }

    /// Reads one frame into `buf` (a longer frame is reported with its full
    /// length, so the caller can drop it).
    pub fn recv(&self, buf: &mut [u8]) -> Received {
        // SAFETY: sockaddr_ll is plain data, filled by recvmsg.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = crate::kstamp::Control::default();
        // SAFETY: msghdr is plain data; every pointer set below outlives the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len();
        // SAFETY: receiving into `buf` and `control`, whose lengths msg carries.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC) };
        if n < 0 {
            return Received::Empty;
        }
        let (len, kernel_ns) = (n as usize, crate::kstamp::monotonic_stamp(&msg));
        match (from.sll_pkttype == libc::PACKET_OUTGOING, self.keep_sent) {
            (true, true) => Received::Sent { len, kernel_ns },
            (true, false) => Received::Own,
            (false, _) => Received::Frame { len, kernel_ns },
        }
    }

    /// Sends `frame` out of interface `ifindex`.
    pub fn send(&self, ifindex: i32, frame: &[u8]) -> std::io::Result<()> {
        let sa = sockaddr(ifindex);
        // SAFETY: sending `frame.len()` bytes of `frame` to a valid sockaddr_ll.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl AsRawFd for PacketPort {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// linux/if_packet.h (4.20+); not in the libc crate.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

fn sockaddr(ifindex: i32) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = ETH_P_ALL.to_be();
    sa.sll_ifindex = ifindex;
    sa.sll_halen = 6;
    sa
}
