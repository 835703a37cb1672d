//! The gateway's BACnet/IP side (`protocol = "bacnet"`): each building is
//! a device on an address of its own (instance: its `device`, or its
//! place in the config from 1)
//! whose analog-input objects 0..points are its points, present values as
//! REALs. It answers Who-Is with I-Am (its largest APDU, 1476 bytes, no
//! segmentation) and ReadPropertyMultiple of present-value; requests are
//! stamped by the kernel, logged, delayed, stalled and faulted as
//! getValues requests are, each answered on a task of its own:
//!
//! - an injected error answers an Error PDU (device, operational problem);
//! - an injected drop sends nothing;
//! - an injected malformed answer is cut short;
//! - point faults have no form here and are not injected.
//!
//! An unknown object or property is an error in its place in the answer
//! (object / unknown-object, property / unknown-property); an answer
//! longer than the client takes is an Abort (segmentation not supported);
//! another confirmed service a Reject (unrecognized service); a request
//! for another device, or what is not BACnet/IP, gets no answer.

use crate::points;
use crate::recvlog::LogBatch;
use crate::state::State;
use ontime_core::MonoNs;
use ontime_fieldbus::bacnet::{self, ObjectId, Request};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The largest APDU the gateway's devices take and send.
pub const MAX_APDU: u16 = 1476;
/// The vendor id its I-Am names (ASHRAE's, 0).
const VENDOR: u16 = 0;

/// A UDP socket for `addr` with kernel receive stamps on.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let s = std::net::UdpSocket::bind(addr)?;
    s.set_nonblocking(true)?;
    // Failing here leaves handler stamps, counted per request.
    let _ = ontime_core::kstamp::enable(&s);
    Ok(s)
}

/// One datagram with its sender and the kernel's receive stamp.
fn recv_stamped(fd: i32, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<u64>)> {
    // SAFETY: sockaddr_storage is plain data, zero a valid value.
    let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: u8 and MaybeUninit<u8> have one layout; recvmsg only writes.
    let buf = unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    let (n, stamp) = crate::kstamp::recv_stamped(fd, buf, Some(&mut from))?;
    let peer = socket_addr(&from).ok_or_else(|| io::Error::other("a sender that is not an IP address"))?;
    Ok((n, peer, stamp))
}

fn socket_addr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in.
            let a: &libc::sockaddr_in = unsafe { &*(s as *const libc::sockaddr_storage).cast() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it holds a sockaddr_in6.
            let a: &libc::sockaddr_in6 = unsafe { &*(s as *const libc::sockaddr_storage).cast() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
    }
}

/// Serves one address until the task is aborted.
pub(crate) async fn serve(sock: tokio::net::UdpSocket, st: Arc<State>, li: usize) {
    let sock = Arc::new(sock);
    let fd = sock.as_raw_fd();
    let mut buf = [0u8; 1500];
    loop {
        let got = sock
            .async_io(tokio::io::Interest::READABLE, || recv_stamped(fd, &mut buf))
            .await;
        let Ok((n, from, kernel_ns)) = got else { continue };
        let user_ns = MonoNs::now().0;
        let datagram = buf[..n].to_vec();
        let (st, sock) = (st.clone(), sock.clone());
        tokio::spawn(async move {
            answer(&sock, &datagram, from, kernel_ns.unwrap_or(0), user_ns, &st, li).await;
        });
    }
}

async fn answer(
    sock: &tokio::net::UdpSocket,
    datagram: &[u8],
    from: SocketAddr,
    kernel_ns: u64,
    user_ns: u64,
    st: &State,
    li: usize,
) {
    let Ok(apdu) = bacnet::apdu_of(datagram) else {
        st.counters.bad_requests.fetch_add(1, Relaxed);
        return;
    };
    let mut out = [0u8; 1500];
    let request = match bacnet::parse_request(apdu) {
        Ok(r) => r,
        Err(_) => {
            st.counters.bad_requests.fetch_add(1, Relaxed);
            return;
        }
    };
    // One device per address, as a BACnet/IP device has.
    let Some(&(device, bi)) = st.devices.get(&li) else {
        return;
    };
    let c = match request {
        Request::WhoIs(range) => {
            if range.is_none_or(|(lo, hi)| (lo..=hi).contains(&device)) {
                let mut i_am = [0u8; 21];
                let n = bacnet::encode_i_am(device, MAX_APDU, VENDOR, &mut i_am);
                let _ = sock.send_to(&i_am[..n], from).await;
            }
            return;
        }
        Request::Other => return,
        Request::Confirmed(c) => c,
    };
    let (recv_ns, _) = st.stamps.choose(kernel_ns, user_ns);
    st.counters.requests.fetch_add(1, Relaxed);
    if c.service != bacnet::SERVICE_READ_PROPERTY_MULTIPLE {
        st.counters.bad_requests.fetch_add(1, Relaxed);
        let mut r = [0u8; 9];
        let n = bacnet::encode_refusal(false, c.invoke, bacnet::REJECT_UNRECOGNIZED_SERVICE, &mut r);
        let _ = sock.send_to(&r[..n], from).await;
        return;
    }
    let b = &st.cfg.buildings[bi];
    let mut asked = Vec::new();
    let parsed = bacnet::parse_rpm_request(c.data, &mut |id, property| asked.push((id, property)));
    if parsed.is_err() {
        st.counters.bad_requests.fetch_add(1, Relaxed);
        let mut r = [0u8; 9];
        let n = bacnet::encode_refusal(false, c.invoke, bacnet::REJECT_INVALID_TAG, &mut r);
        let _ = sock.send_to(&r[..n], from).await;
        return;
    }
    let draw = st.draw();
    if draw.error {
        st.counters.injected_errors.fetch_add(1, Relaxed);
        let mut e = [0u8; 13];
        let n = bacnet::encode_error(
            c.invoke,
            c.service,
            bacnet::ERROR_CLASS_DEVICE,
            bacnet::ERROR_CODE_OPERATIONAL_PROBLEM,
            &mut e,
        );
        let _ = sock.send_to(&e[..n], from).await;
        return;
    }
    let known = |id: ObjectId| id.object_type() == ObjectId::ANALOG_INPUT && id.instance() < b.points;
    let measured: Vec<u32> = asked
        .iter()
        .filter(|(id, p)| known(*id) && *p == bacnet::PROPERTY_PRESENT_VALUE as u32)
        .map(|(id, _)| id.instance())
        .collect();
    if let (Some(log), false) = (&st.log, measured.is_empty()) {
        let _ = log.send(LogBatch {
            recv_ns,
            user_ns,
            building: bi,
            points: measured,
            poll: None,
        });
    }
    let mut w = bacnet::AnswerWriter::rpm_ack(&mut out, c.invoke);
    for &(id, property) in &asked {
        if !known(id) {
            w.error(id, bacnet::ERROR_CLASS_OBJECT, bacnet::ERROR_CODE_UNKNOWN_OBJECT);
        } else if property != bacnet::PROPERTY_PRESENT_VALUE as u32 {
            w.error(id, 2, bacnet::ERROR_CODE_UNKNOWN_PROPERTY);
        } else {
            w.value(id, points::value(id.instance(), b.analog_percent, recv_ns) as f32);
        }
    }
    let fits = w.apdu_len() <= c.max_apdu as usize;
    let n = w.finish();
    st.hold(draw.delay_ns).await;
    if draw.drop {
        st.counters.injected_drops.fetch_add(1, Relaxed);
        return;
    }
    let Some(n) = n.filter(|_| fits) else {
        // Longer than the client takes, and this device does not segment.
        let mut a = [0u8; 9];
        let n = bacnet::encode_refusal(true, c.invoke, bacnet::ABORT_SEGMENTATION_NOT_SUPPORTED, &mut a);
        let _ = sock.send_to(&a[..n], from).await;
        return;
    };
    let n = if draw.malformed {
        st.counters.injected_malformed.fetch_add(1, Relaxed);
        // Cut short, with the BVLC length still claiming the whole.
        n - 3
    } else {
        st.counters.answered_ok.fetch_add(1, Relaxed);
        n
    };
    let _ = sock.send_to(&out[..n], from).await;
}
