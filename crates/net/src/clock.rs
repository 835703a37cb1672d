//! One clock for flows whose ends run on different clocks: a QEMU guest's
//! CLOCK_MONOTONIC starts at its own boot, so a datagram's send time from
//! a guest means nothing to a receiver on the host or in another guest. An
//! echo on the host answers each request with the host's CLOCK_MONOTONIC;
//! a guest asks it many times and keeps the exchange with the shortest
//! round trip (NTP's best sample): offset = host - midpoint, uncertain by
//! at most half that round trip. Flows then stamp and time on the host's
//! clock (`SendSettings::clock_offset_ns`, `ReceiveSettings::clock_offset_ns`).
use anyhow::{bail, Context, Result};
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const MAGIC: u32 = 0x6f6e_7463; // "ontc"

/// Answers clock requests until `stop` is set.
pub fn serve_echo(sock: &UdpSocket, stop: &AtomicBool) -> Result<u64> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = [0u8; 64];
    let mut answered = 0;
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e).context("receiving clock requests"),
        };
        if n != 12 || buf[0..4] != MAGIC.to_be_bytes() {
            continue;
        }
        buf[12..20].copy_from_slice(&MonoNs::now().0.to_be_bytes());
        if sock.send_to(&buf[..20], from).is_ok() {
            answered += 1;
        }
    }
    Ok(answered)
}

/// A measured offset: reference clock = this clock + `offset_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    pub offset_ns: i64,
    /// Round trip of the exchange used: the offset is right to within half.
    pub rtt_ns: u64,
    /// Exchanges answered, of those asked.
    pub answered: u32,
    pub asked: u32,
}

/// Asks the echo at `server` `samples` times (1 ms apart) and keeps the
/// exchange with the shortest round trip.
pub fn measure_offset(server: SocketAddr, samples: u32) -> Result<ClockOffset> {
    if samples == 0 {
        bail!("clock samples must be at least 1");
    }
    let sock = UdpSocket::bind("0.0.0.0:0").context("cannot open a UDP socket")?;
    sock.connect(server)
        .with_context(|| format!("cannot address the clock echo {server}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut best: Option<ClockOffset> = None;
    let mut answered = 0;
    let mut req = [0u8; 12];
    req[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    let mut buf = [0u8; 64];
    for seq in 0..samples {
        req[4..8].copy_from_slice(&seq.to_be_bytes());
        let t0 = MonoNs::now().0;
        if sock.send(&req).is_err() {
            continue;
        }
        // An answer to an earlier request that timed out is skipped.
        let t1 = loop {
            match sock.recv(&mut buf) {
                Ok(20) if buf[0..8] == req[0..8] => break Some(MonoNs::now().0),
                Ok(_) => continue,
                Err(_) => break None,
            }
        };
        if let Some(t1) = t1 {
            answered += 1;
            let host = u64::from_be_bytes(buf[12..20].try_into().unwrap_or([0; 8]));
            let rtt = t1.saturating_sub(t0);
            let mid = t0 + rtt / 2;
            let o = ClockOffset {
                offset_ns: host as i64 - mid as i64,
                rtt_ns: rtt,
                answered: 0,
                asked: 0,
            };
            if best.is_none_or(|b| rtt < b.rtt_ns) {
                best = Some(o);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut b = best.with_context(|| format!("the clock echo at {server} answered none of {samples} requests"))?;
    b.answered = answered;
    b.asked = samples;
    Ok(b)
}

/// Reads an offset written by [`measure_offset`]'s caller (JSON).
pub fn read_offset(path: &std::path::Path) -> Result<ClockOffset> {
    let text = ontime_core::fsio::read_text(path, "clock offset (JSON)")?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a clock offset", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_gives_this_hosts_clock_within_half_a_round_trip() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let echo = std::thread::spawn(move || serve_echo(&sock, &s2).unwrap());
        let o = measure_offset(addr, 20).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(echo.join().unwrap() >= 20);
        assert_eq!((o.answered, o.asked), (20, 20));
        // One clock on both ends: the offset is zero within half the round trip.
        assert!(o.offset_ns.unsigned_abs() <= o.rtt_ns / 2 + 1, "{o:?}");
    }

    #[test]
    fn no_echo_is_an_error_naming_it() {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        drop(sock);
        let e = measure_offset(addr, 2).unwrap_err();
        assert!(format!("{e:#}").contains(&addr.to_string()), "{e:#}");
    }
}
