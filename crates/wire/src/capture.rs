//! An AF_PACKET socket on one interface that sees frames in both
//! directions, each with the kernel's stamp (CLOCK_MONOTONIC).

use anyhow::{Context, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const ETH_P_ALL: u16 = 0x0003;

pub struct Capture {
    fd: OwnedFd,
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
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                (ETH_P_ALL).to_be() as i32,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error())
                .context("cannot open a packet socket (needs root or CAP_NET_RAW)");
        }
        // SAFETY: fd is new and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = ETH_P_ALL.to_be();
        sa.sll_ifindex = ifindex as i32;
        // SAFETY: a valid sockaddr_ll of its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("cannot capture on {name}"));
        }
        ontime_core::kstamp::enable(&fd).context("cannot ask for kernel stamps on the capture")?;
        // A read waits at most this long, so a stop is seen.
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        // SAFETY: setsockopt with a timeval.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        // Room for bursts while the reader is descheduled.
        let size: libc::c_int = 8 << 20;
        // SAFETY: setsockopt with an int.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            )
        };
        Ok(Capture {
            fd,
            loopback: name == "lo",
        })
    }

    pub fn next(&self, buf: &mut [u8]) -> Frame {
        // SAFETY: plain data, filled by recvmsg.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = ontime_core::kstamp::Control::default();
        // SAFETY: msghdr is plain data; every pointer set below outlives the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len();
        // SAFETY: receiving into `buf` and `control`, whose lengths msg carries.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, 0) };
        if n < 0 {
            return Frame::Idle;
        }
        if self.loopback && from.sll_pkttype == libc::PACKET_OUTGOING {
            return Frame::Skip;
        }
        match ontime_core::kstamp::monotonic_stamp(&msg) {
            Some(ns) => Frame::Got {
                len: (n as usize).min(buf.len()),
                ns,
            },
            None => Frame::Skip,
        }
    }
}
