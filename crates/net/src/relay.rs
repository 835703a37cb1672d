//! The host relay: the lab's Dom0 / vhost, the host I/O path. Ordinary host
//! threads move every frame between the tenants' and the building side's
//! host-end interfaces after a [`Discipline`] releases it (today the
//! [`DelayLine`]: the WAN, 10 ms by default, optionally rate-limited). Their
//! count, policy, priority and affinity are settings, so a scenario can
//! starve or prioritise the host I/O path. The relay measures the delay it
//! actually gives.
//!
//! Tenant frames all go to the building side; building frames go to the
//! tenant that owns their destination MAC. Broadcasts are dropped (the lab
//! uses static neighbours). Nothing is allocated per frame: frame buffers,
//! the discipline's queue and the histogram are sized at start.

use crate::discipline::{DelayLine, Discipline, FrameClass, Queued};
use crate::edf::{classify, ChannelScheduler};
use crate::port::{PacketPort, PortId, Received};
use anyhow::{Context, Result};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use ontime_core::rt::ThreadSettings;
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
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
    /// Document 003's scheduler instead of the plain delay line: one
    /// bottleneck link of `rate_bps` (both directions share it), reservation
    /// channels by WFQ, deadline channels by EDF, best effort last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelLink>,
}

/// The relay's bottleneck when channels are scheduled.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChannelLink {
    pub rate_bps: u64,
    /// (channel, reserved bits/s) of the reservation channels.
    #[serde(default)]
    pub reservations: Vec<(u8, u64)>,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            delay_ns: 10_000_000,
            rate_bps: None,
            threads: 1,
            thread: ThreadSettings::default(),
            channels: None,
        }
    }
}

/// The discipline a relay thread runs, chosen by the settings.
enum RelayDiscipline {
    Delay(DelayLine),
    Channels(Box<ChannelScheduler>),
}

impl Discipline for RelayDiscipline {
    fn classifies(&self) -> bool {
        match self {
            RelayDiscipline::Delay(d) => d.classifies(),
            RelayDiscipline::Channels(c) => c.classifies(),
        }
    }
    fn enqueue(&mut self, q: Queued) {
        match self {
            RelayDiscipline::Delay(d) => d.enqueue(q),
            RelayDiscipline::Channels(c) => c.enqueue(q),
        }
    }
    fn next_release_ns(&self) -> Option<u64> {
        match self {
            RelayDiscipline::Delay(d) => d.next_release_ns(),
            RelayDiscipline::Channels(c) => c.next_release_ns(),
        }
    }
    fn dequeue(&mut self, now_ns: u64) -> Option<Queued> {
        match self {
            RelayDiscipline::Delay(d) => d.dequeue(now_ns),
            RelayDiscipline::Channels(c) => c.dequeue(now_ns),
        }
    }
    fn len(&self) -> usize {
        match self {
            RelayDiscipline::Delay(d) => d.len(),
            RelayDiscipline::Channels(c) => c.len(),
        }
    }
}

impl RelaySettings {
    /// The discipline each relay thread runs.
    fn discipline(&self) -> RelayDiscipline {
        match &self.channels {
            None => RelayDiscipline::Delay(DelayLine::new(self.delay_ns, self.rate_bps, SLOTS)),
            Some(link) => {
                let mut s = ChannelScheduler::new(link.rate_bps, self.delay_ns, SLOTS);
                for &(channel, bps) in &link.reservations {
                    s.set_reservation(channel, bps);
                }
                RelayDiscipline::Channels(Box::new(s))
            }
        }
    }
}

/// What the relay did and the delay it gave.
#[derive(Debug, Serialize, Deserialize)]
pub struct RelayReport {
    pub settings: RelaySettings,
    /// Frames sent on.
    pub frames: u64,
    pub bytes: u64,
    /// Frames dropped: no free buffer, oversize, or the send failed.
    pub dropped: u64,
    /// Frames for no known station (not relayed by design, e.g. broadcasts).
    #[serde(default)]
    pub unaddressed: u64,
    /// Time from a frame's arrival at the relay to its departure.
    pub delay: Summary,
    #[serde(skip)]
    pub delay_histogram: LatencyHistogram,
}

const FRAME: usize = 2048;
const SLOTS: usize = 8192;
const TIMER: Token = Token(usize::MAX - 1);
/// Longest wait without looking at the stop flag.
const IDLE_WAKE_NS: u64 = 20_000_000;

/// What one relay thread counted.
#[derive(Default)]
struct ThreadTotals {
    frames: u64,
    bytes: u64,
    dropped: u64,
    unaddressed: u64,
    delay: LatencyHistogram,
}

/// A running relay; [`Relay::stop`] ends it and returns the report. Its
/// threads stop when it is dropped, too.
pub struct Relay {
    threads: ontime_core::rt::ThreadGroup<ThreadTotals>,
    settings: RelaySettings,
}

/// One interface a relay thread reads.
struct Ingress {
    ifindex: i32,
    /// Where frames arriving here go; None: by destination MAC.
    to: Option<i32>,
}

impl Relay {
    /// Starts `settings.threads` threads carrying frames between `building`
    /// and `tenants` (tenant ports are dealt round-robin to the threads; all
    /// threads share the building port through a fanout group).
    pub fn start(building: PortId, tenants: &[PortId], settings: RelaySettings) -> Result<Relay> {
        anyhow::ensure!(settings.threads >= 1, "the relay needs at least one thread");
        let stop = Arc::new(AtomicBool::new(false));
        let by_mac: Vec<([u8; 6], i32)> = tenants.iter().map(|t| (t.mac, t.ifindex)).collect();
        let fanout_id = std::process::id() & 0xffff;
        let stopper = stop.clone();
        let mut threads = ontime_core::rt::ThreadGroup::new(move || stopper.store(true, Ordering::Relaxed));
        for j in 0..settings.threads {
            let mut ingress: Vec<Ingress> = tenants
                .iter()
                .enumerate()
                .filter(|(i, _)| i % settings.threads == j)
                .map(|(_, t)| Ingress {
                    ifindex: t.ifindex,
                    to: Some(building.ifindex),
                })
                .collect();
            ingress.push(Ingress {
                ifindex: building.ifindex,
                to: None,
            });
            let (by_mac, stop, discipline) = (by_mac.clone(), stop.clone(), settings.discipline());
            let fan = (settings.threads > 1).then_some(fanout_id);
            threads.spawn(
                &ontime_core::names::relay_thread(j),
                settings.thread.clone(),
                move || run_thread(ingress, by_mac, fan, discipline, &stop),
            )?;
        }
        threads
            .await_ready(std::time::Duration::from_secs(5))
            .map_err(|e| anyhow::anyhow!("relay thread settings: {e}"))?;
        Ok(Relay { threads, settings })
    }

    /// Stops the threads and returns what they measured.
    pub fn stop(self) -> Result<RelayReport> {
        self.threads.stop();
        let mut all = ThreadTotals::default();
        for t in self.threads.join() {
            let t = t?;
            all.frames += t.frames;
            all.bytes += t.bytes;
            all.dropped += t.dropped;
            all.unaddressed += t.unaddressed;
            all.delay.add(&t.delay);
        }
        Ok(RelayReport {
            settings: self.settings,
            frames: all.frames,
            bytes: all.bytes,
            dropped: all.dropped,
            unaddressed: all.unaddressed,
            delay: all.delay.summary(None),
            delay_histogram: all.delay,
        })
    }
}

fn timer_fd() -> Result<OwnedFd> {
    // SAFETY: timerfd_create; checked.
    let tfd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
    if tfd < 0 {
        return Err(std::io::Error::last_os_error()).context("cannot create a timerfd");
    }
    // SAFETY: fresh fd, ours.
    Ok(unsafe { OwnedFd::from_raw_fd(tfd) })
}

fn arm_at(timer: &OwnedFd, at_ns: u64) {
    let spec = libc::itimerspec {
        it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
        it_value: MonoNs(at_ns.max(1)).as_timespec(),
    };
    // SAFETY: valid timerfd and itimerspec.
    unsafe { libc::timerfd_settime(timer.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
}

/// One relay thread's frames: preallocated buffers and the free list.
struct Frames {
    bufs: Vec<[u8; FRAME]>,
    free: Vec<usize>,
}

/// Where arriving frames go: the building port's frames by destination
/// MAC, a tenant port's to the building.
struct Routes {
    ingress: Vec<Ingress>,
    by_mac: Vec<([u8; 6], i32)>,
}

impl Routes {
    /// The egress interface of a frame read on port `i`, if any.
    fn egress(&self, i: usize, frame: &[u8]) -> Option<i32> {
        match self.ingress[i].to {
            Some(b) => Some(b),
            None => self
                .by_mac
                .iter()
                .find(|(mac, _)| mac[..] == frame[..6])
                .map(|&(_, to)| to),
        }
    }
}

/// One relay thread: opens its ports, then loops: send what the discipline
/// releases -> sleep until the next release or a frame -> take in frames.
fn run_thread(
    ingress: Vec<Ingress>,
    by_mac: Vec<([u8; 6], i32)>,
    fanout: Option<u32>,
    mut discipline: impl Discipline,
    stop: &AtomicBool,
) -> Result<ThreadTotals> {
    let mut poll = Poll::new()?;
    let mut ports = Vec::new();
    for (i, p) in ingress.iter().enumerate() {
        let port = PacketPort::bind(p.ifindex)?;
        if p.to.is_none() {
            if let Some(id) = fanout {
                port.join_fanout(id)?;
            }
        }
        poll.registry()
            .register(&mut SourceFd(&port.as_raw_fd()), Token(i), Interest::READABLE)?;
        ports.push(port);
    }
    let routes = Routes { ingress, by_mac };
    let egress = PacketPort::unbound()?;
    let timer = timer_fd()?;
    poll.registry()
        .register(&mut SourceFd(&timer.as_raw_fd()), TIMER, Interest::READABLE)?;

    let mut frames = Frames {
        bufs: vec![[0u8; FRAME]; SLOTS],
        free: (0..SLOTS).rev().collect(),
    };
    let mut t = ThreadTotals::default();
    let mut events = Events::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        let now = MonoNs::now().0;
        send_released(&mut discipline, &egress, &mut frames, now, &mut t);
        let next = discipline.next_release_ns().unwrap_or(u64::MAX).min(now + IDLE_WAKE_NS);
        arm_at(&timer, next);
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("relay poll");
        }
        for ev in events.iter() {
            if ev.token() == TIMER {
                let mut b = [0u8; 8];
                // SAFETY: 8-byte read from our timerfd.
                unsafe { libc::read(timer.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
                continue;
            }
            let i = ev.token().0;
            take_in(i, &ports[i], &routes, &mut discipline, &mut frames, &mut t);
        }
    }
    Ok(t)
}

/// Sends every frame the discipline releases by `now`, measuring the delay
/// each was given.
fn send_released(
    discipline: &mut impl Discipline,
    egress: &PacketPort,
    frames: &mut Frames,
    now: u64,
    t: &mut ThreadTotals,
) {
    while let Some(f) = discipline.dequeue(now) {
        match egress.send(f.egress, &frames.bufs[f.slot][..f.len]) {
            Ok(()) => {
                t.frames += 1;
                t.bytes += f.len as u64;
                t.delay.record(MonoNs::now().0.saturating_sub(f.arrived_ns));
            }
            Err(_) => t.dropped += 1,
        }
        frames.free.push(f.slot);
    }
}

/// Reads every frame waiting on port `i` into a free buffer and queues it
/// in the discipline (or counts why not).
fn take_in(
    i: usize,
    port: &PacketPort,
    routes: &Routes,
    discipline: &mut impl Discipline,
    frames: &mut Frames,
    t: &mut ThreadTotals,
) {
    loop {
        let Some(slot) = frames.free.pop() else {
            // Out of buffers: drain the socket, counting drops.
            let mut scratch = [0u8; 64];
            match port.recv(&mut scratch) {
                Received::Empty => return,
                Received::Own => continue,
                Received::Frame(_) => {
                    t.dropped += 1;
                    continue;
                }
            }
        };
        let n = match port.recv(&mut frames.bufs[slot]) {
            Received::Empty => {
                frames.free.push(slot);
                return;
            }
            Received::Own => {
                frames.free.push(slot);
                continue;
            }
            Received::Frame(n) => n,
        };
        let arrived_ns = MonoNs::now().0;
        if !(14..=FRAME).contains(&n) {
            t.dropped += 1;
            frames.free.push(slot);
            continue;
        }
        let Some(to) = routes.egress(i, &frames.bufs[slot]) else {
            t.unaddressed += 1;
            frames.free.push(slot);
            continue;
        };
        discipline.enqueue(Queued {
            slot,
            arrived_ns,
            len: n,
            egress: to,
            class: if discipline.classifies() {
                classify(&frames.bufs[slot][..n], arrived_ns)
            } else {
                FrameClass::BestEffort
            },
        });
    }
}
