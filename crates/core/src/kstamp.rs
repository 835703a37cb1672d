//! The kernel's software receive stamps (`SO_TIMESTAMPNS`): when a packet
//! entered the host's network stack, in softirq, untouched by how late the
//! reading thread ran. The gateway judges a crawler's interval error by
//! them; the relay measures how long a frame waited before it was read; a
//! flow's receiver tells a late datagram's way there from its own delay.

use std::io;
use std::os::fd::AsRawFd;

/// Asks the kernel to stamp what socket `s` receives (software stamps,
/// CLOCK_REALTIME). Fails where the socket option is missing. The kernel
/// turns stamping on from a work item, so the first packets after the call
/// may come without a stamp.
pub fn enable(s: &impl AsRawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor and an int option of the right size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CMSG space for one `struct timespec`, aligned for `cmsghdr`: give its
/// bytes to `recvmsg` as `msg_control`.
#[repr(C, align(8))]
pub struct Control(pub [u8; 64]);

impl Default for Control {
    fn default() -> Self {
        Control([0; 64])
    }
}

/// One `recvmsg` into `buf`; returns the bytes read and the kernel's
/// receive stamp of them converted to CLOCK_MONOTONIC, if it gave one.
/// With `from`, the sender's address is written there (a datagram's).
pub fn recv_stamped(
    fd: i32,
    buf: &mut [std::mem::MaybeUninit<u8>],
    from: Option<&mut libc::sockaddr_storage>,
) -> io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = Control::default();
    // SAFETY: msghdr is plain data; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if let Some(from) = from {
        msg.msg_name = (from as *mut libc::sockaddr_storage).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
    }
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len();
    // SAFETY: the kernel writes at most iov_len bytes into buf, msg_namelen
    // into the sender's address and msg_controllen into control.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, monotonic_stamp(&msg)))
}

/// The receive stamp among the control messages `recvmsg` filled into
/// `msg`, on CLOCK_MONOTONIC; None when the kernel gave none.
pub fn monotonic_stamp(msg: &libc::msghdr) -> Option<u64> {
    let mut stamp = None;
    // SAFETY: walking the control messages the kernel wrote, within
    // msg_controllen, with the libc macros made for it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                stamp = realtime_to_monotonic(ts);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    stamp
}

/// A CLOCK_REALTIME instant on CLOCK_MONOTONIC, by the offset between the
/// two clocks now. A step of the wall clock between the stamp and now
/// moves it; callers reject stamps that land after their own.
fn realtime_to_monotonic(ts: libc::timespec) -> Option<u64> {
    let real_stamp = u64::try_from(ts.tv_sec).ok()?.checked_mul(1_000_000_000)? + u64::try_from(ts.tv_nsec).ok()?;
    if real_stamp == 0 {
        return None;
    }
    let now = |clock| {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: valid clock id and out pointer.
        unsafe { libc::clock_gettime(clock, &mut t) };
        t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128
    };
    let offset = now(libc::CLOCK_REALTIME) - now(libc::CLOCK_MONOTONIC);
    u64::try_from(real_stamp as i128 - offset).ok()
}
