//! A UDP flood written straight onto a tenant's veth, for the
//! attribution's ground truth (docs/explain.md, class f): frames go out of
//! the host end through an AF_PACKET socket, past the relay, so the only
//! work they make is their receipt. With receive packet steering on the
//! tenant's end pointed at the tenant's CPU (the lab sets it), that receipt
//! is NET_RX softirq time on the tenant's CPU (or ksoftirqd's, when the
//! kernel hands a long softirq to its thread), while the flooder itself
//! runs on another CPU. The windows returned are when it flooded.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use ontime_core::time::MonoNs;
use ontime_load::inject::{hold_windows, Timing};
use serde::{Deserialize, Serialize};

use crate::port::PacketPort;

/// A flood of one tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FloodSpec {
    /// The host end of the tenant's veth.
    pub host_if: String,
    /// The tenant's end: its MAC and address.
    pub dst_mac: [u8; 6],
    pub dst_addr: Ipv4Addr,
    pub src_addr: Ipv4Addr,
    /// Where the flooder runs: not the tenant's CPU, so that what the
    /// tenant's CPU does is receive.
    pub flooder_cpu: usize,
    /// Frames per second at most (None: as fast as the flooder can send).
    #[serde(default)]
    pub rate_pps: Option<u64>,
    pub timing: Timing,
}

/// Frames sent between two looks at the clock (and, paced, two sleeps).
const BATCH: u64 = 64;

/// UDP to the discard port: nothing listens in a tenant, so each datagram
/// is received, looked up and dropped (the ICMP answers are rate-limited).
const DISCARD_PORT: u16 = 9;
const FRAME_LEN: usize = 60;

/// The one frame sent again and again: Ethernet, IPv4, UDP, an 18-byte
/// zero payload (the minimum frame).
fn udp_frame(spec: &FloodSpec) -> [u8; FRAME_LEN] {
    let mut f = [0u8; FRAME_LEN];
    f[0..6].copy_from_slice(&spec.dst_mac);
    // A locally administered source no station in the lab has.
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xf1, 0x00]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (FRAME_LEN - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&spec.src_addr.octets());
    ip[16..20].copy_from_slice(&spec.dst_addr.octets());
    let sum = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&40000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&DISCARD_PORT.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    // UDP checksum 0: none, which IPv4 allows.
    f
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What a flood did.
#[derive(Debug, Default)]
pub struct Flooded {
    pub windows: Vec<(u64, u64)>,
    pub frames: u64,
    /// Sends the kernel refused (a full queue), not counted in `frames`.
    pub refused: u64,
}

/// Floods in the windows of `spec.timing` from the calling thread, pinned
/// to `flooder_cpu`, until they are over or `stop` is set.
pub fn flood(spec: &FloodSpec, stop: &AtomicBool) -> Result<Flooded> {
    spec.timing.check()?;
    let ifindex = interface_index(&spec.host_if)?;
    let port = PacketPort::unbound()?;
    let frame = udp_frame(spec);
    ontime_core::rt::set_affinity(&[spec.flooder_cpu])?;
    let (mut frames, mut refused) = (0u64, 0u64);
    let mut failed: Option<std::io::Error> = None;
    // Paced: one batch per this many ns, on absolute times.
    let batch_ns = spec.rate_pps.map(|r| BATCH * 1_000_000_000 / r.max(1));
    let windows = hold_windows(&spec.timing, stop, |until| {
        let mut now = MonoNs::now().0;
        let mut next = now;
        'flood: while now < until && !stop.load(Ordering::Relaxed) {
            if let Some(step) = batch_ns {
                ontime_core::time::sleep_until(MonoNs(next));
                next += step;
            }
            for _ in 0..BATCH {
                match port.send(ifindex, &frame) {
                    Ok(()) => frames += 1,
                    // A full queue: the flood is as heavy as it gets.
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => refused += 1,
                    Err(e) => {
                        failed = Some(e);
                        stop.store(true, Ordering::Relaxed);
                        break 'flood;
                    }
                }
            }
            now = MonoNs::now().0;
        }
        now
    });
    // A flood that sent nothing held no cause: its windows are not truth.
    if let Some(e) = failed {
        return Err(e).with_context(|| format!("cannot send onto {}", spec.host_if));
    }
    Ok(Flooded {
        windows,
        frames,
        refused,
    })
}

fn interface_index(name: &str) -> Result<i32> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .with_context(|| format!("no interface {name} on this host: is the lab up?"))?;
    text.trim()
        .parse()
        .with_context(|| format!("interface {name}: unreadable ifindex {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_a_valid_udp_datagram_to_the_tenant() {
        let spec = FloodSpec {
            host_if: "x".into(),
            dst_mac: [2, 0, 0, 0, 0, 7],
            dst_addr: Ipv4Addr::new(10, 99, 0, 7),
            src_addr: Ipv4Addr::new(10, 99, 255, 1),
            flooder_cpu: 0,
            rate_pps: None,
            timing: Timing {
                min_ns: 1,
                max_ns: 1,
                every_ns: 2,
                start_after_ns: 0,
                for_ns: 0,
                seed: 0,
            },
        };
        let f = udp_frame(&spec);
        assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 7]);
        assert_eq!(u16::from_be_bytes([f[12], f[13]]), 0x0800);
        assert_eq!(ipv4_checksum(&f[14..34]), 0, "a header with its checksum sums to zero");
        assert_eq!(&f[30..34], &[10, 99, 0, 7]);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), DISCARD_PORT);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, FRAME_LEN - 14);
    }
}
