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

use crate::discipline::{DelayLine, Discipline, FrameClass, LinkAhead, Queued};
use crate::edf::{classify, ChannelScheduler, EdfStats, SwitchTable};
use crate::miss::{FramePath, PathLog};
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
    /// Tenant frames addressed to another tenant's MAC go to that tenant
    /// (document 003's same-host case) instead of the building side.
    #[serde(default)]
    pub between_tenants: bool,
}

/// The relay's bottleneck when channels are scheduled; what the controller
/// programs (reserved rates, priorities) is the relay's [`SwitchTable`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChannelLink {
    pub rate_bps: u64,
    /// The best-effort buffer, bytes (a switch port's; None: only the
    /// relay's frame buffers bound it).
    #[serde(default)]
    pub best_effort_buffer_bytes: Option<u64>,
    /// Share of each deadline frame's budget kept from best effort (0:
    /// document 003's soft EDF).
    #[serde(default)]
    pub edf_guard: f64,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            delay_ns: 10_000_000,
            rate_bps: None,
            threads: 1,
            thread: ThreadSettings::default(),
            channels: None,
            between_tenants: false,
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
    fn enqueue(&mut self, q: Queued) -> Result<(), Queued> {
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

impl RelayDiscipline {
    fn channel_stats(&self) -> Option<EdfStats> {
        match self {
            RelayDiscipline::Delay(_) => None,
            RelayDiscipline::Channels(c) => Some(c.stats),
        }
    }
}

impl RelaySettings {
    /// The discipline each relay thread runs.
    fn discipline(&self, table: &Arc<SwitchTable>) -> RelayDiscipline {
        match &self.channels {
            None => RelayDiscipline::Delay(DelayLine::new(self.delay_ns, self.rate_bps, SLOTS)),
            Some(link) => {
                let s = ChannelScheduler::new(
                    link.rate_bps,
                    self.delay_ns,
                    SLOTS,
                    link.best_effort_buffer_bytes,
                    table.clone(),
                )
                .with_guard(link.edf_guard);
                let ahead = 2 * s.mtu_wire_ns();
                RelayDiscipline::Channels(Box::new(s.with_tx_queue(ahead)))
            }
        }
    }
}

/// What the channel scheduler did (document 003), when it ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChannelReport {
    pub stats: EdfStats,
    /// Time from arrival at the relay to departure, per class: "best
    /// effort" and "channel N" (N: the DSCP); the relay's fixed delay is
    /// included (`settings.delay_ns`), the rest is queueing.
    pub delay_by_class: std::collections::BTreeMap<String, Summary>,
    /// Mean time spent in the scheduler's enqueue and dequeue per frame sent, ns.
    pub scheduler_ns_per_frame: f64,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<ChannelReport>,
    /// Per direction of travel ("from tenants": the tenants' requests,
    /// "from building": the answers), how the relay itself delayed frames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directions: Vec<DirectionReport>,
}

/// How the relay delayed the frames going one way. A frame's time in the
/// relay starts when the kernel received it (its receive stamp), so the
/// relay's own wake-up latency on arrival counts, which `delay` (from the
/// read) leaves out.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DirectionReport {
    pub direction: String,
    pub frames: u64,
    /// Frames the kernel stamped (the rest count from their read).
    pub stamped: u64,
    /// From the kernel's receive stamp to the relay's read: the relay
    /// waking up for a frame.
    pub read_wait: Summary,
    /// From the receive stamp to departure, beyond the configured delay:
    /// what the relay's scheduling (both wake-ups) and queueing added.
    pub late: Summary,
}

const FRAME: usize = 2048;
const SLOTS: usize = 8192;
const TIMER: Token = Token(usize::MAX - 1);
/// Longest wait without looking at the stop flag.
const IDLE_WAKE_NS: u64 = 20_000_000;

/// Directions a frame travels, as [`DirectionReport`] names them.
/// A frame's direction is the port it came in by.
const DIRECTIONS: [&str; 2] = ["from tenants", "from building"];

/// What one relay thread counted of one direction.
#[derive(Default)]
struct DirectionTotals {
    frames: u64,
    stamped: u64,
    read_wait: LatencyHistogram,
    late: LatencyHistogram,
}

impl DirectionTotals {
    fn add(&mut self, o: &DirectionTotals) {
        self.frames += o.frames;
        self.stamped += o.stamped;
        self.read_wait.add(&o.read_wait);
        self.late.add(&o.late);
    }
}

/// What one relay thread counted.
#[derive(Default)]
struct ThreadTotals {
    frames: u64,
    bytes: u64,
    dropped: u64,
    unaddressed: u64,
    delay: LatencyHistogram,
    /// With channels: the delay per class (0: best effort, else the
    /// channel), each allocated at its class's first frame.
    by_class: Vec<Option<Box<LatencyHistogram>>>,
    scheduler_ns: u64,
    edf: Option<EdfStats>,
    directions: [DirectionTotals; 2],
}

impl ThreadTotals {
    fn record_class(&mut self, class: FrameClass, delay_ns: u64) {
        let k = match class {
            FrameClass::BestEffort => 0,
            FrameClass::Deadline { channel, .. } | FrameClass::Reservation { channel } => channel as usize,
        };
        if self.by_class.len() <= k {
            self.by_class.resize_with(crate::edf::MAX_CHANNELS, || None);
        }
        if let Some(h) = self.by_class.get_mut(k) {
            h.get_or_insert_with(|| Box::new(LatencyHistogram::new()))
                .record(delay_ns);
        }
    }
}

/// A running relay; [`Relay::stop`] ends it and returns the report. Its
/// threads stop when it is dropped, too.
pub struct Relay {
    threads: ontime_core::rt::ThreadGroup<ThreadTotals>,
    settings: RelaySettings,
    table: Arc<SwitchTable>,
    held_until: Arc<std::sync::atomic::AtomicU64>,
}

/// Holds a running relay's threads: until the instant stored
/// (CLOCK_MONOTONIC ns), each sleeps as soon as it next wakes and carries
/// no frame, as a stopped Dom0 or vhost would (the attribution's ground
/// truth, class b). 0: not held.
#[derive(Clone)]
pub struct RelayHold(Arc<std::sync::atomic::AtomicU64>);

impl RelayHold {
    /// Holds the relay until `until_ns`.
    pub fn hold_until(&self, until_ns: u64) {
        self.0.store(until_ns, Ordering::Relaxed);
    }
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
        let table = SwitchTable::new();
        let mut threads = ontime_core::rt::ThreadGroup::new(move || stopper.store(true, Ordering::Relaxed));
        let held_until = Arc::new(std::sync::atomic::AtomicU64::new(0));
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
            let routes = Routes {
                ingress,
                by_mac: by_mac.clone(),
                between_tenants: settings.between_tenants,
            };
            let (stop, discipline) = (stop.clone(), settings.discipline(&table));
            let fan = (settings.threads > 1).then_some(fanout_id);
            let ports = open_ports(&routes, fan)?;
            let delay_ns = settings.delay_ns;
            let held = held_until.clone();
            let table = table.clone();
            threads.spawn(
                &ontime_core::names::relay_thread(j),
                settings.thread.clone(),
                move || run_thread(routes, ports, discipline, delay_ns, &stop, &held, &table.paths),
            )?;
        }
        threads
            .await_ready(std::time::Duration::from_secs(5))
            .map_err(|e| anyhow::anyhow!("relay thread settings: {e}"))?;
        Ok(Relay {
            threads,
            settings,
            table,
            held_until,
        })
    }

    /// What holds the relay's threads (an injected stall).
    pub fn hold(&self) -> RelayHold {
        RelayHold(self.held_until.clone())
    }

    /// What the controller programs while the relay runs (channels only).
    pub fn switch_table(&self) -> Arc<SwitchTable> {
        self.table.clone()
    }

    /// Stops the threads and returns what they measured.
    pub fn stop(self) -> Result<RelayReport> {
        self.threads.stop();
        let mut all = ThreadTotals::default();
        let mut by_class: Vec<Option<LatencyHistogram>> = vec![None; crate::edf::MAX_CHANNELS];
        for t in self.threads.join() {
            let t = t?;
            all.frames += t.frames;
            all.bytes += t.bytes;
            all.dropped += t.dropped;
            all.unaddressed += t.unaddressed;
            all.delay.add(&t.delay);
            all.scheduler_ns += t.scheduler_ns;
            for (a, d) in all.directions.iter_mut().zip(&t.directions) {
                a.add(d);
            }
            if let Some(e) = t.edf {
                all.edf.get_or_insert_with(EdfStats::default).add(&e);
            }
            for (k, h) in t.by_class.iter().enumerate() {
                if let Some(h) = h {
                    by_class[k].get_or_insert_with(LatencyHistogram::new).add(h);
                }
            }
        }
        let channels = all.edf.map(|stats| ChannelReport {
            stats,
            delay_by_class: by_class
                .iter()
                .enumerate()
                .filter_map(|(k, h)| {
                    let name = if k == 0 {
                        "best effort".to_string()
                    } else {
                        format!("channel {k}")
                    };
                    h.as_ref().map(|h| (name, h.summary(None)))
                })
                .collect(),
            scheduler_ns_per_frame: all.scheduler_ns as f64 / (all.frames.max(1)) as f64,
        });
        Ok(RelayReport {
            settings: self.settings,
            frames: all.frames,
            bytes: all.bytes,
            dropped: all.dropped,
            unaddressed: all.unaddressed,
            delay: all.delay.summary(None),
            delay_histogram: all.delay,
            channels,
            directions: DIRECTIONS
                .iter()
                .zip(&all.directions)
                .filter(|(_, d)| d.frames > 0)
                .map(|(name, d)| DirectionReport {
                    direction: name.to_string(),
                    frames: d.frames,
                    stamped: d.stamped,
                    read_wait: d.read_wait.summary(None),
                    late: d.late.summary(None),
                })
                .collect(),
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
    /// Per buffer, what the relay keeps of its frame beside the discipline.
    meta: Vec<FrameMeta>,
    free: Vec<usize>,
}

#[derive(Clone, Copy, Default)]
struct FrameMeta {
    /// The kernel's receive stamp, or the read time when there was none.
    received_ns: u64,
    /// Index into [`DIRECTIONS`].
    direction: usize,
}

/// Where arriving frames go: the building port's frames by destination
/// MAC, a tenant port's to the building.
struct Routes {
    ingress: Vec<Ingress>,
    by_mac: Vec<([u8; 6], i32)>,
    /// Tenant frames to a known tenant MAC go there, not to the building.
    between_tenants: bool,
}

impl Routes {
    /// The egress interface of a frame read on port `i`, if any.
    fn egress(&self, i: usize, frame: &[u8]) -> Option<i32> {
        let by_mac = || {
            self.by_mac
                .iter()
                .find(|(mac, _)| mac[..] == frame[..6])
                .map(|&(_, to)| to)
        };
        let g = &self.ingress[i];
        match g.to {
            Some(b) if self.between_tenants => by_mac().or(Some(b)),
            Some(b) => Some(b),
            None => by_mac(),
        }
    }
}

/// One relay thread: opens its ports, then loops: send what the discipline
/// releases -> sleep until the next release or a frame -> take in frames.
/// One thread's ingress ports (in `routes.ingress` order), opened before the
/// thread starts: a frame sent once [`Relay::start`] returns is queued on
/// its port, never lost to a port not yet bound.
fn open_ports(routes: &Routes, fanout: Option<u32>) -> Result<Vec<PacketPort>> {
    routes
        .ingress
        .iter()
        .map(|p| {
            let port = PacketPort::bind(p.ifindex)?;
            port.stamp_arrivals()?;
            if let (None, Some(id)) = (p.to, fanout) {
                port.join_fanout(id)?;
            }
            Ok(port)
        })
        .collect()
}

fn run_thread(
    routes: Routes,
    ports: Vec<PacketPort>,
    mut discipline: RelayDiscipline,
    delay_ns: u64,
    stop: &AtomicBool,
    held_until: &std::sync::atomic::AtomicU64,
    paths: &PathLog,
) -> Result<ThreadTotals> {
    let mut poll = Poll::new()?;
    for (i, port) in ports.iter().enumerate() {
        poll.registry()
            .register(&mut SourceFd(&port.as_raw_fd()), Token(i), Interest::READABLE)?;
    }
    let egress = PacketPort::unbound()?;
    let timer = timer_fd()?;
    poll.registry()
        .register(&mut SourceFd(&timer.as_raw_fd()), TIMER, Interest::READABLE)?;

    let mut frames = Frames {
        bufs: vec![[0u8; FRAME]; SLOTS],
        meta: vec![FrameMeta::default(); SLOTS],
        free: (0..SLOTS).rev().collect(),
    };
    let mut t = ThreadTotals::default();
    let timed = discipline.classifies();
    // Channel frames' paths not yet in the shared log (it may be being read).
    let mut pending: Vec<FramePath> = Vec::with_capacity(PENDING_PATHS);
    let mut events = Events::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        let held = held_until.load(Ordering::Relaxed);
        // 0 (not held) costs no clock read.
        if held != 0 && held > MonoNs::now().0 {
            // Held (an injected stall): asleep, carrying nothing; frames
            // wait in the sockets and the release queue.
            ontime_core::time::sleep_until(MonoNs(held.min(MonoNs::now().0 + IDLE_WAKE_NS)));
            continue;
        }
        let now = MonoNs::now().0;
        send_released(
            &mut discipline,
            &egress,
            &mut frames,
            now,
            delay_ns,
            &mut t,
            timed,
            &mut pending,
        );
        paths.try_append(&mut pending);
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
            take_in(i, &ports[i], &routes, &mut discipline, &mut frames, &mut t, timed);
        }
    }
    t.edf = discipline.channel_stats();
    Ok(t)
}

/// Channel frames' paths a relay thread holds while the log is being read
/// (some 50 ms of 100 Mbit/s of 500-byte channel frames); beyond, a path is
/// not recorded.
const PENDING_PATHS: usize = 1024;

/// Sends every frame the discipline releases by `now`, measuring the delay
/// each was given (and, when `timed`, the scheduler's own time, and each
/// channel frame's path into `paths`).
#[allow(clippy::too_many_arguments)]
fn send_released(
    discipline: &mut impl Discipline,
    egress: &PacketPort,
    frames: &mut Frames,
    now: u64,
    delay_ns: u64,
    t: &mut ThreadTotals,
    timed: bool,
    paths: &mut Vec<FramePath>,
) {
    loop {
        let t0 = if timed { MonoNs::now().0 } else { 0 };
        let next = discipline.dequeue(now);
        if timed {
            t.scheduler_ns += MonoNs::now().0 - t0;
        }
        let Some(f) = next else { break };
        if let (Some(dscp), true) = (f.class.channel(), paths.len() < PENDING_PATHS) {
            let frame = &frames.bufs[f.slot][..f.len];
            paths.push(FramePath {
                dscp,
                // Behind the label: 14 bytes of MAC header, 4 of label, then IPv4's id.
                ip_id: frame.get(22..24).map_or(0, |b| u16::from_be_bytes([b[0], b[1]])),
                received_ns: frames.meta[f.slot].received_ns,
                read_ns: f.arrived_ns,
                eligible_ns: f.arrived_ns + delay_ns,
                // Before the send: the receiver's check may run inside it.
                handed_ns: MonoNs::now().0,
                ahead: f.ahead,
            });
        }
        match egress.send(f.egress, &frames.bufs[f.slot][..f.len]) {
            Ok(()) => {
                t.frames += 1;
                t.bytes += f.len as u64;
                let sent_ns = MonoNs::now().0;
                let delay = sent_ns.saturating_sub(f.arrived_ns);
                t.delay.record(delay);
                let m = frames.meta[f.slot];
                t.directions[m.direction]
                    .late
                    .record(sent_ns.saturating_sub(m.received_ns).saturating_sub(delay_ns));
                if timed {
                    t.record_class(f.class, delay);
                }
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
    timed: bool,
) {
    loop {
        let Some(slot) = frames.free.pop() else {
            // Out of buffers: drain the socket, counting drops.
            let mut scratch = [0u8; 64];
            match port.recv(&mut scratch) {
                Received::Empty => return,
                // The relay's ports are bound one way: never `Sent`.
                Received::Own | Received::Sent { .. } => continue,
                Received::Frame { .. } => {
                    t.dropped += 1;
                    continue;
                }
            }
        };
        let (n, kernel_ns) = match port.recv(&mut frames.bufs[slot]) {
            Received::Empty => {
                frames.free.push(slot);
                return;
            }
            Received::Own | Received::Sent { .. } => {
                frames.free.push(slot);
                continue;
            }
            Received::Frame { len, kernel_ns } => (len, kernel_ns),
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
        // A stamp after the read is a wall-clock step, not an arrival.
        let stamp = kernel_ns.filter(|&k| k <= arrived_ns);
        let direction = usize::from(routes.ingress[i].to.is_none());
        let d = &mut t.directions[direction];
        d.frames += 1;
        if let Some(k) = stamp {
            d.stamped += 1;
            d.read_wait.record(arrived_ns - k);
        }
        frames.meta[slot] = FrameMeta {
            received_ns: stamp.unwrap_or(arrived_ns),
            direction,
        };
        let class = if timed {
            classify(&frames.bufs[slot][..n], arrived_ns)
        } else {
            FrameClass::BestEffort
        };
        let t0 = if timed { MonoNs::now().0 } else { 0 };
        let refused = discipline.enqueue(Queued {
            slot,
            arrived_ns,
            len: n,
            egress: to,
            class,
            ahead: LinkAhead::default(),
        });
        if timed {
            t.scheduler_ns += MonoNs::now().0 - t0;
        }
        if let Err(q) = refused {
            t.dropped += 1;
            frames.free.push(q.slot);
        }
    }
}
