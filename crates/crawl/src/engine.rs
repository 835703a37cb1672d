//! One vCPU thread of the crawler: an epoll loop (mio) that sends each poll
//! at its planned time and reads answers on persistent connections:
//! HTTP/1.1 keep-alive or Modbus/TCP, one poll in flight on each; over
//! BACnet/IP each "connection" is a connected UDP socket, one poll in
//! flight on it, its invoke id the poll's.
//!
//! Timing: every poll's planned time is `start + phase + k * period`, fixed
//! in advance. The loop waits on a timerfd armed with TFD_TIMER_ABSTIME at
//! the next planned time (or the next timeout), so a slow, failed or lost
//! answer never shifts later polls. A poll is missed when no answer came
//! `timeout` after its planned time; it is then a sample with its full
//! error in every metric, never skipped.
//!
//! Nothing here allocates per poll: connections, queues, buffers and
//! histograms are sized at start, and histograms are recycled through the
//! collector.

use crate::http::{self, Parsed};
use crate::metrics::{Metrics, Outcome, PollRecord, StoreRecord};
use crate::request::{ModbusRead, Request};
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use ontime_core::interval::IntervalTracker;
use ontime_core::late::{GatewayStamps, PathNominal, ProbeEvent, WorstEvents};
use ontime_core::time::{Clock, SystemClock};
use ontime_core::wire::PointStatus;
use ontime_core::MonoNs;
use ontime_fieldbus::{bacnet, modbus};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

/// A fixed set of points on one gateway, polled together once per period.
#[derive(Clone, Debug)]
pub struct Stream {
    pub id: u32,
    pub gateway: usize,
    pub request: crate::request::Request,
    pub period_ns: u64,
    pub phase_ns: u64,
}

/// Stop requests shared with the signal handler.
#[derive(Debug, Default)]
pub struct StopFlags {
    /// Plan no more polls; finish those in flight (first Ctrl-C).
    pub stop: AtomicBool,
    /// Give up on those in flight too (second Ctrl-C).
    pub abort: AtomicBool,
    /// When the first stop was asked for (CLOCK_MONOTONIC ns; 0 = never).
    pub stop_requested_ns: std::sync::atomic::AtomicU64,
}

impl StopFlags {
    /// The first Ctrl-C: plan no more polls, and remember when.
    pub fn request_stop(&self) {
        let _ = self
            .stop_requested_ns
            .compare_exchange(0, MonoNs::now().0, Ordering::Relaxed, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A message from a vCPU thread to the collector.
pub enum Report {
    Interval {
        thread: usize,
        index: u64,
        metrics: Box<Metrics>,
    },
    Done {
        thread: usize,
        cpu_ns: u64,
    },
}

pub struct EngineSetup {
    pub thread: usize,
    pub streams: Vec<Stream>,
    pub gateways: Vec<SocketAddr>,
    pub timeout_ns: u64,
    pub max_connections: usize,
    pub duration_ns: u64,
    /// The thread says here when its connection pool is warm (or gave up
    /// waiting), then receives the common start time on `start`.
    pub warm: mpsc::Sender<Warm>,
    pub start: mpsc::Receiver<MonoNs>,
    pub report_interval_ns: u64,
    /// CPU time spent processing each answered poll (the crawler's parse,
    /// convert and store work), burned on this thread.
    pub work: crate::work::WorkModel,
    /// On the answer, or before each request is written.
    pub work_at: crate::work::WorkAt,
    /// Send a poll again when its connection closes before any
    /// answer (see `close`).
    pub resend: bool,
    pub flags: Arc<StopFlags>,
    pub reports: mpsc::Sender<Report>,
    pub spares: mpsc::Receiver<Box<Metrics>>,
    pub poll_records: Option<rtrb::Producer<PollRecord>>,
    pub store_records: Option<rtrb::Producer<StoreRecord>>,
    /// Counts records lost because a writer fell behind.
    pub records_dropped: Arc<std::sync::atomic::AtomicU64>,
    /// Polls kept with their send lag for explanation, the worst (0: none).
    pub keep_worst: usize,
    /// With it, arrivals at the gateway late beyond its one-way delay, and
    /// answers late beyond its round trip, are kept too (`keep_worst` of
    /// each).
    pub path_nominal: Option<PathNominal>,
}

/// What a vCPU thread kept for explanation: its worst polls by send lag,
/// by arrival at the gateway and by the arrival of their answers.
#[derive(Debug, Default)]
pub struct KeptPolls {
    pub send_lag: WorstEvents,
    pub arrivals: WorstEvents,
    pub answers: WorstEvents,
}

/// A thread's pool before the start.
#[derive(Debug, Clone, Copy)]
pub struct Warm {
    pub thread: usize,
    pub connected: usize,
    pub open: usize,
}

/// How long a thread waits for its pool to connect before the start.
const WARM_UP_LIMIT_NS: u64 = 3_000_000_000;

const TIMER: Token = Token(usize::MAX - 1);
/// Connections opened per gateway before the first poll.
const PREWARM_CONNECTIONS: usize = 4;
/// Largest answer a connection buffers; larger ones count as malformed.
const READ_BUF: usize = 64 * 1024;

#[derive(Clone, Copy, Debug)]
struct InFlight {
    stream: u32,
    index: u64,
    planned: u64,
    sent: u64,
    /// Already sent a second time (at most once).
    resent: bool,
}

/// A connection's socket: TCP, or UDP connected to the device.
enum Sock {
    Tcp(TcpStream),
    Udp(mio::net::UdpSocket),
}

impl Sock {
    fn raw_fd(&self) -> i32 {
        match self {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Udp(s) => s.as_raw_fd(),
        }
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            Sock::Udp(s) => s,
        }
    }
}

struct Conn {
    sock: Sock,
    gateway: usize,
    connected: bool,
    opened_ns: u64,
    gen: u32,
    poll: Option<InFlight>,
    written: usize,
    rbuf: Box<[u8]>,
    /// The request being written (the stream's template with this poll's
    /// identity), sized once at connect.
    req: Vec<u8>,
    rlen: usize,
}

struct GatewayPool {
    addr: SocketAddr,
    /// BACnet/IP: connected UDP sockets instead of TCP connections.
    udp: bool,
    /// Polls per second this thread sends to the gateway.
    rate: f64,
    /// Most of its polls planned at one instant (1 with spread phases; a
    /// whole period's with aligned ones): all are in flight at once.
    burst: usize,
    /// Fastest handshake seen while warming up (a round trip).
    min_rtt_ns: u64,
    idle: Vec<usize>,
    open: usize,
    waiting: VecDeque<InFlight>,
}

/// One vCPU thread's crawl. Time comes from `C`, so the bookkeeping (what
/// is due, missed, late) is tested with a fake clock; the thread itself
/// runs on CLOCK_MONOTONIC.
struct Engine<C: Clock = SystemClock> {
    clock: C,
    s: EngineSetup,
    poll: Poll,
    timer: OwnedFd,
    conns: Vec<Option<Conn>>,
    free_slots: Vec<usize>,
    pools: Vec<GatewayPool>,
    /// (deadline, conn slot, generation), in dispatch order.
    deadlines: VecDeque<(u64, usize, u32)>,
    schedule: BinaryHeap<Reverse<(u64, u32, u64)>>,
    trackers: Vec<IntervalTracker>,
    metrics: Box<Metrics>,
    /// Draws each answered poll's work.
    work: crate::work::WorkSampler,
    /// Longest request of any stream: each connection's buffer size.
    max_request: usize,
    next_report: u64,
    next_gen: u32,
    /// The common start and end, known after the warm-up.
    start: u64,
    end: u64,
    warming: bool,
    /// This thread's id and its worst send lags, arrivals and answers,
    /// for `--explain`.
    tid: u32,
    worst: WorstEvents,
    worst_arrivals: WorstEvents,
    worst_answers: WorstEvents,
}

/// The most streams planned at the same instant of every period (same
/// phase and period).
fn largest_burst<'a>(streams: impl Iterator<Item = &'a Stream>) -> usize {
    let mut at: std::collections::HashMap<(u64, u64), usize> = std::collections::HashMap::new();
    for st in streams {
        *at.entry((st.phase_ns, st.period_ns)).or_default() += 1;
    }
    at.into_values().max().unwrap_or(0)
}

/// Spends `ns` of this thread's CPU time (not wall time: if the thread is
/// preempted, the work takes longer, as real processing would).
/// Hands a point's value to the store writer, when the run stores values;
/// a full ring counts it dropped (the poll thread never waits for it).
fn store_value(
    store: &mut Option<rtrb::Producer<StoreRecord>>,
    dropped: &std::sync::atomic::AtomicU64,
    rec: impl FnOnce() -> StoreRecord,
) {
    if let Some(prod) = store.as_mut() {
        if prod.push(rec()).is_err() {
            dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn burn_cpu(ns: u64) {
    let end = ontime_core::time::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) + ns;
    while ontime_core::time::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) < end {
        std::hint::spin_loop();
    }
}

/// A UDP socket connected to `addr` (it then receives only from there),
/// non-blocking.
fn udp_socket(addr: SocketAddr) -> std::io::Result<mio::net::UdpSocket> {
    let bind: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let s = std::net::UdpSocket::bind(bind)?;
    s.connect(addr)?;
    s.set_nonblocking(true)?;
    Ok(mio::net::UdpSocket::from_std(s))
}

/// Polls one gateway's pool lets wait for a connection.
const MAX_WAITING: usize = 4096;

/// Runs one vCPU thread's share of the crawl until the end time or a stop.
/// Returns its worst polls by send lag, by arrival and by answer
/// (`keep_worst` of each).
pub fn run(setup: EngineSetup) -> anyhow::Result<KeptPolls> {
    let mut e = Engine::new(setup, SystemClock)?;
    e.warm_up()?;
    e.main_loop()?;
    Ok(KeptPolls {
        send_lag: std::mem::take(&mut e.worst),
        arrivals: std::mem::take(&mut e.worst_arrivals),
        answers: std::mem::take(&mut e.worst_answers),
    })
}

impl<C: Clock> Engine<C> {
    fn new(s: EngineSetup, clock: C) -> anyhow::Result<Engine<C>> {
        let poll = Poll::new()?;
        // SAFETY: timerfd_create has no memory preconditions; the result is
        // checked before wrapping it in an OwnedFd.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: fd is a fresh, valid descriptor we own.
        let timer = unsafe { OwnedFd::from_raw_fd(fd) };
        poll.registry()
            .register(&mut SourceFd(&timer.as_raw_fd()), TIMER, Interest::READABLE)?;
        let cap = s.max_connections * s.gateways.len();
        let on_path = if s.path_nominal.is_some() { s.keep_worst } else { 0 };
        let pools = s
            .gateways
            .iter()
            .enumerate()
            .map(|(gi, &addr)| GatewayPool {
                addr,
                udp: s
                    .streams
                    .iter()
                    .any(|st| st.gateway == gi && matches!(st.request, Request::Bacnet(_))),
                rate: s
                    .streams
                    .iter()
                    .filter(|st| st.gateway == gi)
                    .map(|st| 1e9 / st.period_ns as f64)
                    .sum(),
                burst: largest_burst(s.streams.iter().filter(|st| st.gateway == gi)),
                min_rtt_ns: u64::MAX,
                idle: Vec::with_capacity(s.max_connections),
                open: 0,
                waiting: VecDeque::with_capacity(s.streams.len() * 2),
            })
            .collect();
        let schedule = BinaryHeap::with_capacity(s.streams.len());
        let metrics = s.spares.try_recv().unwrap_or_default();
        let mut e = Engine {
            clock,
            work: s.work.sampler(crate::work::crawler_seed(s.thread)),
            max_request: s.streams.iter().map(|st| st.request.len()).max().unwrap_or(0),
            trackers: vec![IntervalTracker::default(); s.streams.len()],
            next_report: u64::MAX,
            poll,
            timer,
            conns: (0..cap).map(|_| None).collect(),
            free_slots: (0..cap).rev().collect(),
            pools,
            deadlines: VecDeque::with_capacity(cap),
            schedule,
            metrics,
            next_gen: 0,
            start: u64::MAX,
            end: u64::MAX,
            warming: true,
            // SAFETY: gettid has no preconditions.
            tid: unsafe { libc::gettid() } as u32,
            worst: WorstEvents::new(s.keep_worst),
            worst_arrivals: WorstEvents::new(on_path),
            worst_answers: WorstEvents::new(on_path),
            s,
        };
        // Connect ahead of the start so the first polls do not each pay for,
        // or burst, connection set-up; warm_up() waits for these.
        for gw in 0..e.pools.len() {
            for _ in 0..e.s.max_connections.min(PREWARM_CONNECTIONS) {
                e.spare(gw);
            }
        }
        Ok(e)
    }

    /// Handles connection set-up until every connection of the pool is up
    /// (the pool grows to fit the measured round trip), reports, and takes
    /// the common start time. Nothing is measured here.
    fn warm_up(&mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(256);
        let limit = self.clock.now().0 + WARM_UP_LIMIT_NS;
        loop {
            let open = self.conns.iter().flatten().count();
            let connected = self.conns.iter().flatten().filter(|c| c.connected).count();
            if connected == open || self.clock.now().0 >= limit || self.s.flags.stop.load(Ordering::Relaxed) {
                let _ = self.s.warm.send(Warm {
                    thread: self.s.thread,
                    connected,
                    open,
                });
                break;
            }
            self.poll.poll(&mut events, Some(std::time::Duration::from_millis(5)))?;
            for ev in events.iter() {
                let slot = ev.token().0;
                if slot != TIMER.0 && (ev.is_writable() || ev.is_error() || ev.is_write_closed()) {
                    self.on_writable(slot);
                }
            }
        }
        self.warming = false;
        let start = self
            .s
            .start
            .recv()
            .map_err(|_| anyhow::anyhow!("no start time from the collector"))?;
        self.start_at(start.0);
        Ok(())
    }

    /// Plans every stream's first poll from the common start.
    fn start_at(&mut self, start: u64) {
        self.start = start;
        self.end = start.saturating_add(self.s.duration_ns);
        self.next_report = self.start + self.s.report_interval_ns;
        for (i, st) in self.s.streams.iter().enumerate() {
            self.schedule.push(Reverse((self.start + st.phase_ns, i as u32, 0u64)));
        }
    }

    fn main_loop(&mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut scheduling = true;
        loop {
            let now = self.clock.now().0;
            if self.s.flags.abort.load(Ordering::Relaxed) {
                self.abandon_all(now);
                break;
            }
            if scheduling && (self.s.flags.stop.load(Ordering::Relaxed) || now >= self.end) {
                // Polls planned from here on are not part of this run;
                // those planned before that were never sent are missed.
                scheduling = false;
                self.miss_unsent(now.min(self.end), now);
            }
            if scheduling {
                self.send_due(now);
            }
            self.expire(now);
            if now >= self.next_report {
                self.report(now);
            }
            if !scheduling && self.in_flight() == 0 {
                break;
            }
            let mut wake = now + 50_000_000;
            if scheduling {
                if let Some(Reverse((t, _, _))) = self.schedule.peek() {
                    wake = wake.min((*t).max(now));
                }
            }
            if let Some(&(d, _, _)) = self.deadlines.front() {
                wake = wake.min(d.max(now));
            }
            for p in &self.pools {
                if let Some(w) = p.waiting.front() {
                    wake = wake.min((w.planned + self.s.timeout_ns).max(now));
                }
            }
            wake = wake.min(self.next_report.max(now));
            self.arm_timer(wake);
            match self.poll.poll(&mut events, None) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            // Sends first: a due poll should not wait behind answers.
            if scheduling {
                self.send_due(self.clock.now().0);
            }
            for ev in events.iter() {
                if ev.token() == TIMER {
                    let mut buf = [0u8; 8];
                    // SAFETY: reading 8 bytes into an 8-byte buffer from our
                    // non-blocking timerfd; EAGAIN is harmless.
                    unsafe { libc::read(self.timer.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
                    continue;
                }
                let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
                let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                self.on_event(ev.token().0, writable, readable, scheduling);
            }
        }
        let now = self.clock.now().0;
        self.report(now);
        // SAFETY: CLOCK_THREAD_CPUTIME_ID is always valid for this thread.
        let cpu_ns = ontime_core::time::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID);
        let _ = self.s.reports.send(Report::Done {
            thread: self.s.thread,
            cpu_ns,
        });
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.conns.iter().flatten().filter(|c| c.poll.is_some()).count()
            + self.pools.iter().map(|p| p.waiting.len()).sum::<usize>()
    }

    fn arm_timer(&self, at_ns: u64) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            // A zero it_value disarms; never ask for time 0.
            it_value: MonoNs(at_ns.max(1)).as_timespec(),
        };
        // SAFETY: valid timerfd and itimerspec; old value not requested.
        unsafe {
            libc::timerfd_settime(
                self.timer.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
    }

    /// Every poll planned before `cutoff` and not yet sent: missed, each a
    /// sample with its full error (an overloaded thread's backlog at the
    /// end of the run, or at a stop).
    fn miss_unsent(&mut self, cutoff: u64, now: u64) {
        while let Some(Reverse((planned, stream, index))) = self.schedule.pop() {
            let period = self.s.streams[stream as usize].period_ns.max(1);
            let (mut at, mut k) = (planned, index);
            while at < cutoff {
                self.metrics.outcomes.planned += 1;
                let p = InFlight {
                    stream,
                    index: k,
                    planned: at,
                    sent: 0,
                    resent: false,
                };
                self.finish(p, now, Outcome::NotSent, 0, 0, 0);
                at += period;
                k += 1;
            }
        }
    }

    /// One connection's event of a batch. Each answer read may cost its
    /// work (a heavy-tailed draw can be 100+ ms), so polls that fell due
    /// meanwhile go out first, before this event, not after the whole
    /// batch: the simulator's crawler does the same (sends before answers).
    fn on_event(&mut self, slot: usize, writable: bool, readable: bool, scheduling: bool) {
        let now = self.clock.now().0;
        if scheduling && self.due_before(now) {
            self.send_due(now);
        }
        if writable {
            self.on_writable(slot);
        }
        if readable {
            self.on_readable(slot);
        }
    }

    /// Whether a planned poll is due at `now`.
    fn due_before(&self, now: u64) -> bool {
        self.schedule.peek().is_some_and(|r| r.0 .0 <= now)
    }

    fn send_due(&mut self, now: u64) {
        // An overloaded thread stays here while polls are due; it returns
        // every SEND_BATCH sends to read answers, expire polls and report,
        // and as soon as the run ends or is stopped.
        const SEND_BATCH: u32 = 256;
        let mut sent = 0u32;
        while let Some(&Reverse((planned, stream, index))) = self.schedule.peek() {
            if planned > now {
                break;
            }
            if sent == SEND_BATCH {
                break;
            }
            sent += 1;
            self.schedule.pop();
            if planned >= self.end {
                // Past the end of the run: do not plan it, and keep it out of
                // the heap so later polls still fire.
                continue;
            }
            let st = &self.s.streams[stream as usize];
            self.schedule.push(Reverse((planned + st.period_ns, stream, index + 1)));
            self.metrics.outcomes.planned += 1;
            let gw = st.gateway;
            // Built before it is written: a burst's requests leave one
            // work apart, each later as the thread loses its CPU.
            if self.s.work.mean_ns > 0 && !self.s.work_at.is_answer() {
                burn_cpu(self.work.next_ns());
            }
            self.dispatch(
                gw,
                InFlight {
                    stream,
                    index,
                    planned,
                    sent: 0,
                    resent: false,
                },
            );
        }
    }

    fn dispatch(&mut self, gw: usize, p: InFlight) {
        // A server may close an idle keep-alive connection at any time
        // (nginx does when it runs short of worker connections, and logs
        // it below its default level). If its close is already here, the
        // connection is not used: a request written into it would meet the
        // close and the poll would be lost for nothing.
        let mut reused = None;
        while let Some(slot) = self.pools[gw].idle.pop() {
            if self.closed_by_peer(slot) {
                self.close(slot, Outcome::ConnectionLost);
                continue;
            }
            reused = Some(slot);
            break;
        }
        if let Some(slot) = reused {
            self.assign(slot, p);
            // Keep a spare: the next poll should not wait for a handshake
            // (a WAN round trip) because the pool ran dry.
            if self.pools[gw].idle.is_empty() && self.pools[gw].open < self.s.max_connections {
                self.spare(gw);
            }
        } else if self.pools[gw].open < self.s.max_connections {
            match self.connect(gw) {
                Some(slot) => self.assign(slot, p),
                None => self.finish(p, self.clock.now().0, Outcome::ConnectionLost, 0, 0, 0),
            }
        } else if self.pools[gw].waiting.len() < MAX_WAITING {
            self.pools[gw].waiting.push_back(p);
        } else {
            // Overloaded: a poll that would wait behind this many others
            // will not be sent in time; it is missed now, and memory stays
            // bounded however far the plan outruns the connections.
            self.finish(p, self.clock.now().0, Outcome::NotSent, 0, 0, 0);
        }
    }

    /// Whether an idle connection's peer has closed it (or sent something
    /// unasked, which only precedes a close): one non-blocking peek.
    fn closed_by_peer(&self, slot: usize) -> bool {
        let Some(c) = self.conns[slot].as_ref() else {
            return true;
        };
        let mut b = [0u8; 1];
        // SAFETY: a 1-byte non-blocking peek into a local buffer on our socket.
        let n = unsafe {
            libc::recv(
                c.sock.raw_fd(),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted);
        }
        true
    }

    /// Opens a connection with no poll yet. A TCP one joins the idle pool
    /// once its handshake completes (`on_writable`); a UDP socket has none
    /// and joins it now.
    fn spare(&mut self, gw: usize) {
        if let Some(slot) = self.connect(gw) {
            if self.pools[gw].udp {
                self.release(slot, gw);
            }
        }
    }

    fn connect(&mut self, gw: usize) -> Option<usize> {
        let slot = self.free_slots.pop()?;
        let addr = self.pools[gw].addr;
        let udp = self.pools[gw].udp;
        let sock = if udp {
            udp_socket(addr).map(Sock::Udp)
        } else {
            TcpStream::connect(addr).map(Sock::Tcp)
        };
        let mut sock = match sock {
            Ok(s) => s,
            Err(_) => {
                self.free_slots.push(slot);
                return None;
            }
        };
        if let Sock::Tcp(t) = &sock {
            let _ = t.set_nodelay(true);
        }
        if self
            .poll
            .registry()
            .register(sock.source(), Token(slot), Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            self.free_slots.push(slot);
            return None;
        }
        self.pools[gw].open += 1;
        self.conns[slot] = Some(Conn {
            sock,
            gateway: gw,
            // A connected UDP socket has no handshake.
            connected: udp,
            opened_ns: self.clock.now().0,
            gen: 0,
            poll: None,
            written: 0,
            rbuf: vec![0u8; READ_BUF].into_boxed_slice(),
            req: Vec::with_capacity(self.max_request),
            rlen: 0,
        });
        Some(slot)
    }

    fn assign(&mut self, slot: usize, p: InFlight) {
        self.next_gen = self.next_gen.wrapping_add(1);
        let gen = self.next_gen;
        let Some(c) = self.conns[slot].as_mut() else { return };
        c.gen = gen;
        c.poll = Some(p);
        c.written = 0;
        // A Modbus answer carries its request's transaction id: a late
        // answer is never taken for this poll's (a timeout also closes
        // the connection).
        self.s.streams[p.stream as usize]
            .request
            .write_into(&mut c.req, p.index, p.planned, gen as u16);
        // Kept in deadline order: a poll that waited for a connection is
        // assigned after later ones (the common case is still an append).
        let deadline = p.planned + self.s.timeout_ns;
        let at = self.deadlines.partition_point(|&(d, _, _)| d <= deadline);
        self.deadlines.insert(at, (deadline, slot, gen));
        if c.connected {
            self.write(slot);
        }
    }

    fn write(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else { return };
        let Some(p) = c.poll.as_mut() else { return };
        let req = &c.req;
        // Once per poll, even if the first write would block.
        if p.sent == 0 {
            p.sent = self.clock.now().0;
            self.metrics.send_lag.record(p.sent.saturating_sub(p.planned));
            self.worst.offer(ProbeEvent {
                tid: self.tid,
                planned_ns: p.planned,
                actual_ns: p.sent,
                sent_ns: None,
                gateway: None,
                received_ns: None,
            });
        }
        while c.written < req.len() {
            let sent = match &mut c.sock {
                Sock::Tcp(t) => t.write(&req[c.written..]),
                // A datagram goes whole or not at all.
                Sock::Udp(u) => u.send(req).map(|n| n.max(req.len())),
            };
            match sent {
                Ok(n) => {
                    c.written += n;
                    self.metrics.traffic.tx_bytes += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(slot, Outcome::ConnectionLost);
                    return;
                }
            }
        }
    }

    fn on_writable(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else { return };
        if let (false, Sock::Tcp(sock)) = (c.connected, &c.sock) {
            match (sock.take_error(), sock.peer_addr()) {
                (Ok(None), Ok(_)) => c.connected = true,
                (Ok(None), Err(e)) if e.kind() == ErrorKind::NotConnected => return,
                _ => {
                    self.close(slot, Outcome::ConnectionLost);
                    return;
                }
            }
            let (gw, opened, idle) = (c.gateway, c.opened_ns, c.poll.is_none());
            self.grow_before_start(gw, opened);
            if idle {
                self.release(slot, gw);
                return;
            }
        }
        self.write(slot);
    }

    /// While warming up, sizes a gateway's pool from a handshake's duration
    /// (one round trip): connections for twice the polls in flight, so no
    /// measured poll waits for a handshake.
    fn grow_before_start(&mut self, gw: usize, opened_ns: u64) {
        let now = self.clock.now().0;
        if !self.warming {
            return;
        }
        // The fastest handshake: a slow one (a lost SYN waits 1 s) must not
        // inflate the pool.
        let pool = &mut self.pools[gw];
        pool.min_rtt_ns = pool.min_rtt_ns.min(now.saturating_sub(opened_ns));
        let rtt_s = pool.min_rtt_ns as f64 / 1e9;
        let pool = &self.pools[gw];
        // A burst needs a connection for each of its polls, or those past
        // the pool wait a handshake in the first period only.
        let want = ((pool.rate * rtt_s * 2.0).ceil() as usize)
            .max(pool.burst)
            .saturating_add(2)
            .min(self.s.max_connections);
        for _ in pool.open..want {
            self.spare(gw);
        }
    }

    fn on_readable(&mut self, slot: usize) {
        loop {
            let Some(c) = self.conns[slot].as_mut() else { return };
            if c.rlen == c.rbuf.len() {
                self.close(slot, Outcome::Malformed);
                return;
            }
            let read = match &mut c.sock {
                Sock::Tcp(t) => t.read(&mut c.rbuf[c.rlen..]),
                // One datagram is one answer: it replaces what was read.
                Sock::Udp(u) => u.recv(&mut c.rbuf[..]).map(|n| {
                    c.rlen = 0;
                    n.max(1)
                }),
            };
            match read {
                Ok(0) => {
                    self.close(slot, Outcome::ConnectionLost);
                    return;
                }
                Ok(n) => {
                    c.rlen += n;
                    self.metrics.traffic.rx_bytes += n as u64;
                    if !self.consume(slot) {
                        return;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.close(slot, Outcome::ConnectionLost);
                    return;
                }
            }
        }
    }

    /// Handles complete answers in the buffer; false if the connection went.
    fn consume(&mut self, slot: usize) -> bool {
        loop {
            let Some(c) = self.conns[slot].as_mut() else {
                return false;
            };
            if c.rlen == 0 {
                return true;
            }
            let Some(p) = c.poll else {
                if matches!(c.sock, Sock::Udp(_)) {
                    // A datagram nobody waits for (a device answering
                    // twice) is dropped; there is no stream to lose step.
                    c.rlen = 0;
                    return true;
                }
                // An answer nobody asked for: the stream is out of step.
                self.close(slot, Outcome::Malformed);
                return false;
            };
            if let Request::Bacnet(_) = self.s.streams[p.stream as usize].request {
                match self.consume_bacnet(slot, p) {
                    Some(true) => continue,
                    Some(false) => return true,
                    None => return false,
                }
            }
            if let Request::Modbus(read) = self.s.streams[p.stream as usize].request {
                match self.consume_modbus(slot, p, read) {
                    Some(true) => continue,
                    Some(false) => return true,
                    None => return false,
                }
            }
            let Some(c) = self.conns[slot].as_mut() else {
                return false;
            };
            let (len, status, close, body) = match http::parse_head(&mut c.rbuf[..c.rlen]) {
                Parsed::Partial => return true,
                Parsed::Invalid => {
                    self.close(slot, Outcome::Malformed);
                    return false;
                }
                Parsed::Complete {
                    len,
                    status,
                    close,
                    body,
                } => (len, status, close, body),
            };
            let done = self.clock.now().0;
            let gw = c.gateway as u16;
            let (outcome, recv, answered) = if status != 200 {
                (Outcome::HttpError, 0, 0)
            } else {
                let (store, dropped) = (&mut self.s.store_records, &self.s.records_dropped);
                let mut faults = 0u64;
                let parsed = http::parse_body(&c.rbuf[body.0..body.1], &mut |pt: http::PointReading| {
                    if pt.status != PointStatus::Ok {
                        faults += 1;
                    }
                    store_value(store, dropped, || StoreRecord {
                        gateway: gw,
                        point: pt.id,
                        recv_ns: pt.recv_ns,
                        value: pt.value.unwrap_or(f64::NAN),
                        status: pt.status as u8,
                    });
                });
                match parsed {
                    Ok(r) => {
                        self.metrics.outcomes.point_faults += faults;
                        self.metrics.stamps.count(r.stamp);
                        (Outcome::Ok, r.recv_ns, r.answered_ns.unwrap_or(0))
                    }
                    Err(_) => (Outcome::Malformed, 0, 0),
                }
            };
            // Keep what follows this answer (pipelined bytes) in the buffer.
            c.rbuf.copy_within(len..c.rlen, 0);
            c.rlen -= len;
            c.poll = None;
            self.answered(p, done, outcome, (recv, answered), status);
            if close || outcome == Outcome::Malformed {
                self.close(slot, Outcome::ConnectionLost);
                return false;
            }
            let gwi = gw as usize;
            self.release(slot, gwi);
        }
    }

    /// One Modbus answer at the head of the buffer, if whole: Some(true)
    /// when it was handled, Some(false) when more bytes are needed, None
    /// when the connection went (an answer out of step closes it: Modbus
    /// cannot resynchronise a stream).
    fn consume_modbus(&mut self, slot: usize, p: InFlight, read: ModbusRead) -> Option<bool> {
        let c = self.conns[slot].as_mut()?;
        let len = match modbus::frame(&c.rbuf[..c.rlen]) {
            modbus::Frame::Partial => return Some(false),
            modbus::Frame::Invalid(_) => {
                self.close(slot, Outcome::Malformed);
                return None;
            }
            modbus::Frame::Complete(len) => len,
        };
        let done = self.clock.now().0;
        let gw = c.gateway as u16;
        let mut status = 0u16;
        let outcome = match modbus::parse_answer(&c.rbuf[..len]) {
            Ok((tid, unit, answer)) if tid == c.gen as u16 && unit == read.unit => match answer {
                modbus::Answer::Registers { function, values }
                    if function == read.table.function() && values.len() == read.count as usize =>
                {
                    for (i, v) in values.iter().enumerate() {
                        store_value(&mut self.s.store_records, &self.s.records_dropped, || StoreRecord {
                            gateway: gw,
                            point: read.start as u32 + i as u32,
                            recv_ns: done,
                            value: v as f64,
                            status: PointStatus::Ok as u8,
                        });
                    }
                    self.metrics.stamps.crawler_send += 1;
                    Outcome::Ok
                }
                modbus::Answer::Exception { code, .. } => {
                    self.metrics.outcomes.modbus_exceptions.count(code);
                    status = code as u16;
                    Outcome::DeviceError
                }
                modbus::Answer::Registers { .. } => Outcome::Malformed,
            },
            _ => Outcome::Malformed,
        };
        c.rbuf.copy_within(len..c.rlen, 0);
        c.rlen -= len;
        c.poll = None;
        self.answered(p, done, outcome, (0, 0), status);
        if outcome == Outcome::Malformed {
            self.close(slot, Outcome::ConnectionLost);
            return None;
        }
        self.release(slot, gw as usize);
        Some(true)
    }

    /// The datagram in the buffer: Some(true) when it answered the poll,
    /// Some(false) when it was not its answer (another invoke id, an
    /// unconfirmed message) and was dropped, None when the socket went.
    fn consume_bacnet(&mut self, slot: usize, p: InFlight) -> Option<bool> {
        let c = self.conns[slot].as_mut()?;
        let datagram = &c.rbuf[..c.rlen];
        let done = self.clock.now().0;
        let gw = c.gateway as u16;
        let invoke = c.gen as u8;
        let m = &mut self.metrics;
        let mut status = 0u16;
        let answer = bacnet::apdu_of(datagram).and_then(bacnet::parse_answer);
        let outcome = match answer {
            Ok(bacnet::Answer::Ack { invoke: i, data, .. }) if i == invoke => {
                let (store, dropped) = (&mut self.s.store_records, &self.s.records_dropped);
                let mut faults = 0u64;
                let parsed = bacnet::parse_rpm_ack(data, &mut |id, reading| {
                    let (value, status) = match reading {
                        bacnet::Reading::Value(v) => (v, PointStatus::Ok),
                        bacnet::Reading::NotANumber => (f64::NAN, PointStatus::Ok),
                        bacnet::Reading::Error { .. } => {
                            faults += 1;
                            (f64::NAN, PointStatus::Fault)
                        }
                    };
                    store_value(store, dropped, || StoreRecord {
                        gateway: gw,
                        point: id.instance(),
                        recv_ns: done,
                        value,
                        status: status as u8,
                    });
                });
                match parsed {
                    Ok(()) => {
                        m.outcomes.point_faults += faults;
                        m.stamps.crawler_send += 1;
                        Outcome::Ok
                    }
                    Err(_) => Outcome::Malformed,
                }
            }
            Ok(bacnet::Answer::Error { invoke: i, class, code }) if i == invoke => {
                m.outcomes.bacnet.error += 1;
                status = ((class.min(255) << 8) | code.min(255)) as u16;
                Outcome::DeviceError
            }
            Ok(bacnet::Answer::Reject { invoke: i, reason }) if i == invoke => {
                m.outcomes.bacnet.reject += 1;
                status = reason as u16;
                Outcome::DeviceError
            }
            Ok(bacnet::Answer::Abort { invoke: i, reason, .. }) if i == invoke => {
                m.outcomes.bacnet.abort += 1;
                if reason == bacnet::ABORT_SEGMENTATION_NOT_SUPPORTED {
                    m.outcomes.bacnet.abort_segmentation += 1;
                }
                status = reason as u16;
                Outcome::DeviceError
            }
            Ok(bacnet::Answer::Segmented { invoke: i }) if i == invoke => {
                m.outcomes.bacnet.segmented += 1;
                Outcome::DeviceError
            }
            // Another poll's answer, late, or a message of the device's own.
            Ok(_) => {
                c.rlen = 0;
                return Some(false);
            }
            Err(_) => Outcome::Malformed,
        };
        c.rlen = 0;
        c.poll = None;
        self.answered(p, done, outcome, (0, 0), status);
        self.release(slot, gw as usize);
        Some(true)
    }

    /// A poll's answer is in: the poll is done, and the configured work
    /// on an answer is burned (document 000's conversion and storing).
    /// `(recv, answered)`: the gateway's stamps, where the answer has them.
    fn answered(&mut self, p: InFlight, done: u64, outcome: Outcome, (recv, answered): (u64, u64), status: u16) {
        self.finish(p, done, outcome, recv, answered, status);
        if outcome == Outcome::Ok && self.s.work.mean_ns > 0 && self.s.work_at.is_answer() {
            burn_cpu(self.work.next_ns());
        }
    }

    /// A connection is free again: give it the oldest waiting poll.
    fn release(&mut self, slot: usize, gw: usize) {
        let now = self.clock.now().0;
        while let Some(p) = self.pools[gw].waiting.pop_front() {
            if now >= p.planned + self.s.timeout_ns {
                self.finish(p, now, Outcome::NotSent, 0, 0, 0);
                continue;
            }
            self.assign(slot, p);
            return;
        }
        self.pools[gw].idle.push(slot);
    }

    /// Closes a connection; a poll on it ends with `outcome`.
    fn close(&mut self, slot: usize, outcome: Outcome) {
        let Some(mut c) = self.conns[slot].take() else { return };
        let _ = self.poll.registry().deregister(c.sock.source());
        self.free_slots.push(slot);
        let pool = &mut self.pools[c.gateway];
        pool.open -= 1;
        pool.idle.retain(|&s| s != slot);
        let gw = c.gateway;
        if let Some(mut p) = c.poll {
            // A server can also close a connection with our request unread
            // (nginx, short of worker connections, closes idle and
            // not-yet-read ones alike, logging it below its default level).
            // As curl does for reused connections, send such a poll once
            // more on a new connection. It is counted (resent); a gateway
            // that drops after reading logs both arrivals.
            if outcome == Outcome::ConnectionLost && c.rlen == 0 && !p.resent && self.s.resend {
                p.resent = true;
                self.metrics.outcomes.resent += 1;
                match self.connect(gw) {
                    Some(slot) => self.assign(slot, p),
                    None => self.dispatch(gw, p),
                }
                return;
            }
            let outcome = if p.sent == 0 && outcome != Outcome::Timeout {
                Outcome::ConnectionLost
            } else {
                outcome
            };
            self.finish(p, self.clock.now().0, outcome, 0, 0, 0);
        }
        // Waiting polls need a connection: open one now rather than letting
        // them time out behind a closed pool.
        if let Some(p) = self.pools[gw].waiting.pop_front() {
            self.dispatch(gw, p);
        }
    }

    fn expire(&mut self, now: u64) {
        while let Some(&(deadline, slot, gen)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            let live = matches!(&self.conns[slot], Some(c) if c.gen == gen && c.poll.is_some());
            if live {
                self.close(slot, Outcome::Timeout);
            }
        }
        for gw in 0..self.pools.len() {
            while let Some(p) = self.pools[gw].waiting.front().copied() {
                if now < p.planned + self.s.timeout_ns {
                    break;
                }
                self.pools[gw].waiting.pop_front();
                self.finish(p, now, Outcome::NotSent, 0, 0, 0);
            }
        }
    }

    fn abandon_all(&mut self, now: u64) {
        for slot in 0..self.conns.len() {
            if matches!(&self.conns[slot], Some(c) if c.poll.is_some()) {
                self.close(slot, Outcome::Abandoned);
            }
        }
        for gw in 0..self.pools.len() {
            while let Some(p) = self.pools[gw].waiting.pop_front() {
                self.finish(p, now, Outcome::Abandoned, 0, 0, 0);
            }
        }
    }

    /// Every planned poll ends here exactly once.
    /// `recv`, `answered`: the gateway's stamps of the request (0: none);
    /// `status`: its HTTP status or Modbus exception code.
    fn finish(&mut self, p: InFlight, done: u64, outcome: Outcome, recv: u64, answered: u64, status: u16) {
        let m = &mut self.metrics;
        outcome.count(&mut m.outcomes);
        if p.sent == 0 {
            // Never sent: its send lag is all the time it waited.
            m.send_lag.record(done.saturating_sub(p.planned));
            self.worst.offer(ProbeEvent {
                tid: self.tid,
                planned_ns: p.planned,
                actual_ns: done.max(p.planned),
                sent_ns: None,
                gateway: None,
                received_ns: None,
            });
        } else {
            m.response_time.record(done.saturating_sub(p.sent));
        }
        // The request's arrival, on this host's clock where the gateway
        // stamps on it (the lab's emulator).
        let arrived = outcome == Outcome::Ok && recv > 0 && p.sent > 0;
        if let Some(path) = self.s.path_nominal.filter(|_| arrived) {
            let due = p.planned.saturating_add(path.one_way_ns);
            self.metrics.arrival_lag.record(recv.saturating_sub(due));
            self.worst_arrivals.offer(ProbeEvent {
                tid: self.tid,
                planned_ns: p.planned,
                actual_ns: recv.saturating_sub(path.one_way_ns).max(p.planned),
                sent_ns: Some(p.sent),
                gateway: None,
                received_ns: None,
            });
            // Its answer, where the gateway stamped when it answered.
            if answered >= recv {
                let round_trip = path.round_trip_ns();
                let due = p.planned.saturating_add(round_trip);
                self.metrics.answer_lag.record(done.saturating_sub(due));
                self.worst_answers.offer(ProbeEvent {
                    tid: self.tid,
                    planned_ns: p.planned,
                    actual_ns: done.saturating_sub(round_trip).max(p.planned),
                    sent_ns: Some(p.sent),
                    gateway: Some(GatewayStamps {
                        recv_ns: recv,
                        answered_ns: answered,
                    }),
                    received_ns: None,
                });
            }
        }
        let m = &mut self.metrics;
        let st = &self.s.streams[p.stream as usize];
        let tracker = &mut self.trackers[p.stream as usize];
        if outcome == Outcome::Ok {
            // A protocol without a receive time in its answer (Modbus):
            // the crawler's send time, counted as such in `stamps`.
            let at = if recv > 0 { recv } else { p.sent };
            let _ = tracker.measured(p.index, at, st.period_ns, &mut m.interval_error);
        } else {
            tracker.missed(p.index, st.period_ns, &mut m.interval_error);
        }
        if let Some(prod) = self.s.poll_records.as_mut() {
            let rec = PollRecord {
                stream: p.stream,
                index: p.index,
                planned_ns: p.planned,
                sent_ns: p.sent,
                gateway_recv_ns: recv,
                done_ns: done,
                status,
                outcome: outcome as u8,
            };
            if prod.push(rec).is_err() {
                self.s.records_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Hands this interval's metrics to the collector and takes a recycled
    /// set back.
    fn report(&mut self, now: u64) {
        // The collector resets recycled sets, keeping the memset off this
        // thread; a new set is made only if none came back yet.
        let fresh = self.s.spares.try_recv().unwrap_or_default();
        let full = std::mem::replace(&mut self.metrics, fresh);
        // Intervals are numbered by wall position, so threads agree on them
        // even when one reports late.
        let index = (self.next_report - self.start) / self.s.report_interval_ns - 1;
        let _ = self.s.reports.send(Report::Interval {
            thread: self.s.thread,
            index,
            metrics: full,
        });
        while self.next_report <= now {
            self.next_report += self.s.report_interval_ns;
        }
    }
}

/// The engine's bookkeeping on a fake clock: what is due, what is missed,
/// and which samples each outcome leaves. The gateway is a listener that
/// never answers, so no poll can complete by itself.
#[cfg(test)]
mod tests {
    use super::*;
    use ontime_core::time::FakeClock;

    const MS: u64 = 1_000_000;
    const START: u64 = 1_000 * MS;

    struct Rig {
        engine: Engine<FakeClock>,
        reports: mpsc::Receiver<Report>,
        _gateway: std::net::TcpListener,
    }

    /// One thread, `streams` streams of one point each to a silent gateway.
    fn rig(streams: u32, period_ns: u64, timeout_ns: u64, duration_ns: u64, max_connections: usize) -> Rig {
        let gateway = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = gateway.local_addr().unwrap();
        let (warm, _) = mpsc::channel();
        let (_, start) = mpsc::channel();
        let (reports_tx, reports) = mpsc::channel();
        let (_, spares) = mpsc::channel();
        let setup = EngineSetup {
            thread: 0,
            streams: (0..streams)
                .map(|id| Stream {
                    id,
                    gateway: 0,
                    request: Request::Http(http::RequestTemplate::new("h", "b0", &[id], "")),
                    period_ns,
                    phase_ns: 0,
                })
                .collect(),
            gateways: vec![addr],
            timeout_ns,
            max_connections,
            duration_ns,
            warm,
            start,
            report_interval_ns: 1_000 * MS,
            work: Default::default(),
            work_at: Default::default(),
            resend: true,
            flags: Arc::new(StopFlags::default()),
            reports: reports_tx,
            spares,
            poll_records: None,
            store_records: None,
            records_dropped: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            keep_worst: 4,
            path_nominal: Some(PathNominal {
                one_way_ns: 10 * MS,
                gateway_ns: 2 * MS,
            }),
        };
        let mut engine = Engine::new(setup, FakeClock::new(START, vec![])).unwrap();
        engine.warming = false;
        engine.start_at(START);
        Rig {
            engine,
            reports,
            _gateway: gateway,
        }
    }

    fn at(e: &mut Engine<FakeClock>, t: u64) {
        e.clock.sleep_until(MonoNs(t));
    }

    /// A pool is sized for the polls planned at one instant: an aligned
    /// period's all go out at once, and any past the pool would wait for a
    /// handshake in the first period (an interval error of the whole
    /// burst's length at the next).
    #[test]
    fn a_pool_holds_a_whole_burst() {
        let r = rig(30, 1_000 * MS, 1_000 * MS, 1_000 * MS, 256);
        assert_eq!(r.engine.pools[0].burst, 30);
        let stream = |phase_ns, period_ns| Stream {
            id: 0,
            gateway: 0,
            request: Request::Http(http::RequestTemplate::new("h", "b0", &[0], "")),
            period_ns,
            phase_ns,
        };
        let mut streams: Vec<Stream> = (0..5).map(|_| stream(0, 1_000 * MS)).collect();
        streams.extend((0..3).map(|_| stream(10 * MS, 1_000 * MS)));
        streams.extend((0..4).map(|_| stream(0, 500 * MS)));
        assert_eq!(largest_burst(streams.iter()), 5);
        assert_eq!(largest_burst(std::iter::empty()), 0);
    }

    /// A poll nobody answers is missed at planned + timeout: one timeout,
    /// its full wait as send lag (it was never written: the connection
    /// never came up) and a full period of interval error.
    #[test]
    fn an_unanswered_poll_is_missed_at_its_deadline_with_full_samples() {
        let mut r = rig(1, 100 * MS, 40 * MS, 1_000 * MS, 8);
        let e = &mut r.engine;
        e.send_due(START);
        assert_eq!(e.metrics.outcomes.planned, 1);
        at(e, START + 39 * MS);
        e.expire(START + 39 * MS);
        assert_eq!(e.metrics.outcomes.missed(), 0, "not before its deadline");
        at(e, START + 40 * MS);
        e.expire(START + 40 * MS);
        let m = &e.metrics;
        assert_eq!(m.outcomes.missed(), 1);
        assert_eq!(m.interval_error.len(), 1);
        assert_eq!(m.interval_error.max(), 100 * MS);
        let waited = m.send_lag.max().max(m.response_time.max());
        assert_eq!(waited, 40 * MS, "the whole wait is one sample");
    }

    /// An answered poll whose gateway receive stamp is on this clock is an
    /// arrival: late by (receive − planned) − the nominal delay, kept with
    /// its sent time; an answer without a stamp is not.
    #[test]
    fn an_answered_poll_is_kept_as_an_arrival_beyond_the_nominal_delay() {
        let mut r = rig(1, 100 * MS, 1_000 * MS, 1_000 * MS, 64);
        let e = &mut r.engine;
        let poll = |planned, sent| InFlight {
            stream: 0,
            index: 0,
            planned,
            sent,
            resent: false,
        };
        e.finish(
            poll(START, START + MS),
            START + 70 * MS,
            Outcome::Ok,
            START + 50 * MS,
            0,
            200,
        );
        e.finish(poll(START, START + MS), START + 70 * MS, Outcome::Ok, 0, 0, 200);
        assert_eq!(e.metrics.arrival_lag.len(), 1);
        assert_eq!(e.metrics.arrival_lag.max(), 40 * MS);
        let kept = std::mem::take(&mut e.worst_arrivals).into_worst_first();
        assert_eq!(
            kept,
            vec![ProbeEvent {
                tid: e.tid,
                planned_ns: START,
                actual_ns: START + 40 * MS,
                sent_ns: Some(START + MS),
                gateway: None,
                received_ns: None,
            }]
        );
        assert!(e.metrics.answer_lag.is_empty(), "no answer stamp, no answer kept");
    }

    /// An answer the gateway stamped is kept as late by (back − planned) −
    /// the round trip's nominal time (twice the one-way delay and the
    /// controller's), with the gateway's stamps.
    #[test]
    fn an_answer_stamped_by_the_gateway_is_kept_beyond_the_round_trip() {
        let mut r = rig(1, 100 * MS, 1_000 * MS, 1_000 * MS, 64);
        let e = &mut r.engine;
        let p = InFlight {
            stream: 0,
            index: 0,
            planned: START,
            sent: START + MS,
            resent: false,
        };
        e.finish(p, START + 300 * MS, Outcome::Ok, START + 11 * MS, START + 290 * MS, 200);
        assert_eq!(e.metrics.answer_lag.max(), 278 * MS);
        let kept = std::mem::take(&mut e.worst_answers).into_worst_first();
        assert_eq!(kept[0].actual_ns, START + 278 * MS);
        assert_eq!(
            kept[0].gateway,
            Some(GatewayStamps {
                recv_ns: START + 11 * MS,
                answered_ns: START + 290 * MS,
            })
        );
    }

    /// A thread that wakes 35 ms late plans every poll that fell due
    /// meanwhile (none skipped), and polls planned at or past the end of the
    /// run are not planned at all.
    #[test]
    fn a_late_wake_plans_every_due_poll_and_none_past_the_end() {
        let mut r = rig(1, 10 * MS, 1_000 * MS, 50 * MS, 64);
        let e = &mut r.engine;
        at(e, START + 35 * MS);
        e.send_due(START + 35 * MS);
        assert_eq!(e.metrics.outcomes.planned, 4, "polls at 0, 10, 20 and 30 ms");
        at(e, START + 500 * MS);
        e.send_due(START + 500 * MS);
        assert_eq!(e.metrics.outcomes.planned, 5, "the run ends at 50 ms: only 40 ms more");
    }

    /// With the pool exhausted, a poll waits for a connection; one that
    /// never gets one is `not sent` at planned + timeout, with its full
    /// wait as send lag.
    #[test]
    fn a_poll_without_a_connection_is_not_sent_at_its_deadline() {
        let mut r = rig(3, 100 * MS, 20 * MS, 1_000 * MS, 1);
        let e = &mut r.engine;
        e.send_due(START);
        assert_eq!(e.metrics.outcomes.planned, 3);
        at(e, START + 25 * MS);
        e.expire(START + 25 * MS);
        let o = &e.metrics.outcomes;
        assert_eq!(o.not_sent + o.timeout + o.connection_lost, 3, "{o:?}");
        assert!(o.not_sent >= 2, "two polls had no connection: {o:?}");
        assert_eq!(e.metrics.interval_error.len(), 3);
        assert!(e.metrics.send_lag.max() >= 20 * MS);
        // Kept for --explain: the polls never sent, by this thread, with
        // their whole wait.
        let worst = std::mem::take(&mut e.worst).into_worst_first();
        assert!(worst.len() >= 2 && worst[0].lateness_ns() >= 20 * MS, "{worst:?}");
        assert!(worst.iter().all(|w| w.tid == e.tid && w.planned_ns == START));
    }

    /// Polls that fell due while the thread worked on an answer go out
    /// before the next event of the same batch is handled.
    #[test]
    fn due_polls_go_out_between_the_events_of_a_batch() {
        let mut r = rig(1, 10 * MS, 1_000 * MS, 1_000 * MS, 8);
        let e = &mut r.engine;
        e.send_due(START);
        assert_eq!(e.metrics.outcomes.planned, 1);
        // The previous answer's work ran 25 ms: two more polls are due.
        at(e, START + 25 * MS);
        let idle = e.free_slots[0];
        e.on_event(idle, false, true, true);
        assert_eq!(e.metrics.outcomes.planned, 3, "polls at 10 and 20 ms went out first");
        at(e, START + 45 * MS);
        e.on_event(idle, false, true, false);
        assert_eq!(e.metrics.outcomes.planned, 3, "not once the run stopped scheduling");
    }

    /// Reports are numbered by interval from the start, whatever the time
    /// they are made at.
    #[test]
    fn reports_are_numbered_by_interval_from_the_start() {
        let mut r = rig(1, 100 * MS, 40 * MS, 10_000 * MS, 8);
        let e = &mut r.engine;
        at(e, START + 2_500 * MS);
        e.report(START + 2_500 * MS);
        match r.reports.try_recv() {
            Ok(Report::Interval { index, .. }) => assert_eq!(index, 0),
            _ => panic!("no interval report"),
        }
        assert_eq!(r.engine.next_report, START + 3_000 * MS);
    }
}
