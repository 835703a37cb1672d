//! The host relay: the lab's Dom0 / vhost. Ordinary host threads move every
//! frame between the tenants' and the building side's host-end veths
//! (AF_PACKET sockets) after a one-way delay (the WAN, 10 ms by default),
//! optionally through a rate-limited link. Their count, policy, priority and
//! affinity are settings, so a scenario can starve or prioritise the host
//! I/O path. The relay measures the delay it actually gives.
//!
//! Tenant frames all go to the building side; building frames go to the
//! tenant that owns their destination MAC. Broadcasts are dropped (the lab
//! uses static neighbours). Nothing is allocated per frame: frame buffers,
//! the release heap and the histogram are sized at start.

use crate::sandbox::Endpoint;
use anyhow::{Context, Result};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use ontime_core::rt::ThreadSettings;
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How the relay runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RelaySettings {
    /// One-way delay added in each direction.
    pub delay_ns: u64,
    /// Link rate per direction and port in bit/s; None = unlimited.
    pub rate_bps: Option<u64>,
    pub threads: usize,
    pub thread: ThreadSettings,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            delay_ns: 10_000_000,
            rate_bps: None,
            threads: 1,
            thread: ThreadSettings::default(),
        }
    }
}

/// What the relay did and the delay it gave.
#[derive(Debug, Serialize)]
pub struct RelayReport {
    pub settings: RelaySettings,
    pub frames: u64,
    pub bytes: u64,
    /// Frames dropped: no free buffer, oversize, or no destination.
    pub dropped: u64,
    /// Time from a frame's arrival at the relay to its departure.
    pub delay: Summary,
    #[serde(skip)]
    pub delay_histogram: LatencyHistogram,
}

const FRAME: usize = 2048;
const SLOTS: usize = 8192;
const ETH_P_ALL: u16 = 0x0003;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_HASH: u32 = 0;
const TIMER: Token = Token(usize::MAX - 1);

fn packet_socket() -> Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            (ETH_P_ALL).to_be() as i32,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot open a packet socket (needs root)");
    }
    // SAFETY: fd is new and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(ifindex: i32) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = ETH_P_ALL.to_be();
    sa.sll_ifindex = ifindex;
    sa.sll_halen = 6;
    sa
}

fn bind(fd: &OwnedFd, ifindex: i32) -> Result<()> {
    let sa = sockaddr(ifindex);
    // SAFETY: sa is a valid sockaddr_ll of the given size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("cannot bind a packet socket");
    }
    Ok(())
}

/// What one relay thread returns: frames, bytes, drops, delay histogram.
type ThreadTotals = (u64, u64, u64, LatencyHistogram);

/// A running relay; [`Relay::stop`] ends it and returns the report.
pub struct Relay {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Result<ThreadTotals>>>,
    settings: RelaySettings,
}

struct Port {
    ifindex: i32,
    /// Where frames arriving here go; None: by destination MAC.
    to: Option<i32>,
}

impl Relay {
    pub fn start(building: &Endpoint, tenants: &[Endpoint], settings: RelaySettings) -> Result<Relay> {
        anyhow::ensure!(settings.threads >= 1, "the relay needs at least one thread");
        let stop = Arc::new(AtomicBool::new(false));
        let by_mac: HashMap<[u8; 6], i32> = tenants.iter().map(|t| (t.mac, t.host_ifindex)).collect();
        let fanout_id = (std::process::id() & 0xffff) as u32;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let mut threads = Vec::new();
        for j in 0..settings.threads {
            let mut ports: Vec<Port> = tenants
                .iter()
                .enumerate()
                .filter(|(i, _)| i % settings.threads == j)
                .map(|(_, t)| Port {
                    ifindex: t.host_ifindex,
                    to: Some(building.host_ifindex),
                })
                .collect();
            ports.push(Port {
                ifindex: building.host_ifindex,
                to: None,
            });
            let (by_mac, stop, s, ready) = (by_mac.clone(), stop.clone(), settings.clone(), ready_tx.clone());
            let fan = (settings.threads > 1).then_some(fanout_id);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("relay{j}"))
                    .spawn(move || {
                        ontime_core::rt::set_thread_name(&format!("ontime-relay{j}"));
                        let r = s.thread.apply().map_err(|e| format!("{e:#}"));
                        let _ = ready.send(r.clone());
                        r.map_err(anyhow::Error::msg)?;
                        run_thread(ports, by_mac, fan, &s, &stop)
                    })
                    .context("cannot start a relay thread")?,
            );
        }
        drop(ready_tx);
        if let Err(e) = ontime_core::rt::await_ready(&ready_rx, settings.threads, std::time::Duration::from_secs(5)) {
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                let _ = t.join();
            }
            anyhow::bail!("relay thread settings: {e}");
        }
        Ok(Relay {
            stop,
            threads,
            settings,
        })
    }

    /// Stops the threads and returns what they measured.
    pub fn stop(self) -> Result<RelayReport> {
        self.stop.store(true, Ordering::Relaxed);
        let (mut frames, mut bytes, mut dropped) = (0, 0, 0);
        let mut hist = LatencyHistogram::new();
        for t in self.threads {
            let (f, b, d, h) = t.join().map_err(|_| anyhow::anyhow!("a relay thread panicked"))??;
            frames += f;
            bytes += b;
            dropped += d;
            hist.add(&h);
        }
        Ok(RelayReport {
            settings: self.settings,
            frames,
            bytes,
            dropped,
            delay: hist.summary(None),
            delay_histogram: hist,
        })
    }
}

fn run_thread(
    ports: Vec<Port>,
    by_mac: HashMap<[u8; 6], i32>,
    fanout: Option<u32>,
    s: &RelaySettings,
    stop: &AtomicBool,
) -> Result<ThreadTotals> {
    let mut poll = Poll::new()?;
    let mut socks = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let fd = packet_socket()?;
        bind(&fd, p.ifindex)?;
        if p.to.is_none() {
            if let Some(id) = fanout {
                let arg: u32 = id | (PACKET_FANOUT_HASH << 16);
                // SAFETY: setsockopt with a u32 option value.
                let rc = unsafe {
                    libc::setsockopt(
                        fd.as_raw_fd(),
                        libc::SOL_PACKET,
                        PACKET_FANOUT,
                        &arg as *const u32 as *const libc::c_void,
                        4,
                    )
                };
                if rc != 0 {
                    return Err(std::io::Error::last_os_error()).context("cannot join the relay's fanout group");
                }
            }
        }
        poll.registry()
            .register(&mut SourceFd(&fd.as_raw_fd()), Token(i), Interest::READABLE)?;
        socks.push(fd);
    }
    let send = packet_socket()?;
    // SAFETY: timerfd_create; checked.
    let tfd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
    anyhow::ensure!(tfd >= 0, "cannot create a timerfd");
    // SAFETY: fresh fd.
    let timer = unsafe { OwnedFd::from_raw_fd(tfd) };
    poll.registry()
        .register(&mut SourceFd(&timer.as_raw_fd()), TIMER, Interest::READABLE)?;

    let mut bufs = vec![[0u8; FRAME]; SLOTS];
    let mut lens = vec![0usize; SLOTS];
    let mut arrived = vec![0u64; SLOTS];
    let mut dest = vec![0i32; SLOTS];
    let mut free: Vec<usize> = (0..SLOTS).rev().collect();
    let mut heap: BinaryHeap<Reverse<(u64, u64, usize)>> = BinaryHeap::with_capacity(SLOTS);
    let mut busy_until: HashMap<i32, u64> = HashMap::new();
    let mut seq = 0u64;
    let (mut frames, mut bytes, mut dropped) = (0u64, 0u64, 0u64);
    let mut hist = LatencyHistogram::new();
    let mut events = Events::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        let now = MonoNs::now().0;
        // Send everything due.
        while let Some(&Reverse((t, _, slot))) = heap.peek() {
            if t > now {
                break;
            }
            heap.pop();
            let sa = sockaddr(dest[slot]);
            // SAFETY: sending `lens[slot]` bytes of our buffer to a valid sockaddr_ll.
            let rc = unsafe {
                libc::sendto(
                    send.as_raw_fd(),
                    bufs[slot].as_ptr().cast(),
                    lens[slot],
                    0,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                )
            };
            if rc < 0 {
                dropped += 1;
            } else {
                frames += 1;
                bytes += lens[slot] as u64;
                hist.record(MonoNs::now().0.saturating_sub(arrived[slot]));
            }
            free.push(slot);
        }
        let next = heap
            .peek()
            .map(|Reverse((t, _, _))| *t)
            .unwrap_or(now + 20_000_000)
            .min(now + 20_000_000);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: MonoNs(next.max(1)).as_timespec(),
        };
        // SAFETY: valid timerfd and itimerspec.
        unsafe { libc::timerfd_settime(timer.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        for ev in events.iter() {
            if ev.token() == TIMER {
                let mut b = [0u8; 8];
                // SAFETY: 8-byte read from our timerfd.
                unsafe { libc::read(timer.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
                continue;
            }
            let i = ev.token().0;
            loop {
                let Some(slot) = free.pop() else {
                    // Out of buffers: drain the socket, counting drops.
                    let mut scratch = [0u8; 64];
                    // SAFETY: recv into a local buffer.
                    let n =
                        unsafe { libc::recv(socks[i].as_raw_fd(), scratch.as_mut_ptr().cast(), 64, libc::MSG_TRUNC) };
                    if n < 0 {
                        break;
                    }
                    dropped += 1;
                    continue;
                };
                // SAFETY: sockaddr_ll is plain data, filled by recvfrom.
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut fl = std::mem::size_of::<libc::sockaddr_ll>() as u32;
                // SAFETY: receiving into our FRAME-sized buffer.
                let n = unsafe {
                    libc::recvfrom(
                        socks[i].as_raw_fd(),
                        bufs[slot].as_mut_ptr().cast(),
                        FRAME,
                        libc::MSG_TRUNC,
                        &mut from as *mut _ as *mut libc::sockaddr,
                        &mut fl,
                    )
                };
                if n < 0 {
                    free.push(slot);
                    break;
                }
                let t = MonoNs::now().0;
                let n = n as usize;
                // Our own transmissions show up as outgoing: not ours to relay.
                if from.sll_pkttype == libc::PACKET_OUTGOING {
                    free.push(slot);
                    continue;
                }
                if !(14..=FRAME).contains(&n) {
                    dropped += 1;
                    free.push(slot);
                    continue;
                }
                let to = match ports[i].to {
                    Some(b) => b,
                    None => {
                        let mut dst = [0u8; 6];
                        dst.copy_from_slice(&bufs[slot][..6]);
                        match by_mac.get(&dst) {
                            Some(&t) => t,
                            None => {
                                free.push(slot);
                                continue;
                            }
                        }
                    }
                };
                let mut release = t + s.delay_ns;
                if let Some(rate) = s.rate_bps {
                    let b = busy_until.entry(to).or_insert(0);
                    release = release.max(*b);
                    *b = release + (n as u64 * 8 * 1_000_000_000) / rate.max(1);
                }
                lens[slot] = n;
                arrived[slot] = t;
                dest[slot] = to;
                seq += 1;
                heap.push(Reverse((release, seq, slot)));
            }
        }
    }
    Ok((frames, bytes, dropped, hist))
}
