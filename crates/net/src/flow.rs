//! The measured flows of document 003's experiment: a paced UDP sender
//! (fixed-size datagrams at a rate, each carrying its sequence number and
//! send time) and a receiver that times every datagram end to end. Sender
//! and receiver share one host's CLOCK_MONOTONIC (they run in tenants'
//! network namespaces on the same host), so the one-way delay is exact to
//! the clock. The sender sleeps to absolute times and never skips a
//! datagram: when it falls behind it sends what is due at once and counts
//! how late it was.
use anyhow::{bail, Context, Result};
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const MAGIC: u32 = 0x6f6e_7464; // "ontd"
const HEADER: usize = 20;

/// What `ontime net send` does.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendSettings {
    pub to: SocketAddr,
    pub rate_bps: f64,
    /// UDP payload bytes per datagram (at least 20).
    pub size: usize,
    pub duration_ns: u64,
    /// Wait this long before the first datagram.
    pub start_after_ns: u64,
    /// Datagrams sent back to back each time (a bursty source): the
    /// period grows so the rate stays.
    pub burst: u32,
    /// Added to this host's CLOCK_MONOTONIC for the send times (a guest's
    /// offset to its host: `clock::measure_offset`).
    #[serde(default)]
    pub clock_offset_ns: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SendReport {
    /// The sending thread (to find it in a recording of the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    pub sent: u64,
    pub send_errors: u64,
    /// Largest lag of a send behind its scheduled time.
    pub max_lag_ns: u64,
}

/// Sends until the duration ends or `stop` is set.
pub fn send(s: &SendSettings, stop: &AtomicBool) -> Result<SendReport> {
    if s.size < HEADER || s.size > 65_507 {
        bail!("datagram size {} B: give {HEADER} to 65507", s.size);
    }
    if !(s.rate_bps.is_finite() && s.rate_bps > 0.0) {
        bail!("rate must be above 0");
    }
    let burst = s.burst.max(1) as u64;
    let sock = UdpSocket::bind("0.0.0.0:0").context("cannot open a UDP socket")?;
    sock.connect(s.to).with_context(|| format!("cannot address {}", s.to))?;
    let _ = ontime_core::rt::set_timer_slack_ns(1);
    let period_ns = ((s.size as f64 * 8.0 * burst as f64) / s.rate_bps * 1e9).max(1.0) as u64;
    let mut buf = vec![0u8; s.size];
    buf[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    let mut r = SendReport {
        // SAFETY: gettid has no preconditions.
        tid: Some(unsafe { libc::gettid() } as u32),
        ..Default::default()
    };
    let t0 = MonoNs::now().0 + s.start_after_ns;
    let end = t0 + s.duration_ns.saturating_sub(s.start_after_ns);
    let mut next = t0;
    let mut seq: u64 = 0;
    while next < end && !stop.load(Ordering::Relaxed) {
        ontime_core::time::sleep_until(MonoNs(next));
        let now = MonoNs::now().0;
        r.max_lag_ns = r.max_lag_ns.max(now.saturating_sub(next));
        for _ in 0..burst {
            buf[4..12].copy_from_slice(&seq.to_be_bytes());
            let sent = MonoNs::now().0.saturating_add_signed(s.clock_offset_ns);
            buf[12..20].copy_from_slice(&sent.to_be_bytes());
            match sock.send(&buf) {
                Ok(_) => r.sent += 1,
                // A full socket buffer or no route yet: counted, not retried.
                Err(_) => r.send_errors += 1,
            }
            seq += 1;
        }
        next += period_ns;
    }
    Ok(r)
}

/// The receiver's time-series bin unless told otherwise.
pub const BIN_NS: u64 = 100_000_000;

/// What `ontime net receive` does.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiveSettings {
    pub listen: SocketAddr,
    /// The flow's deadline: datagrams later than this count as misses.
    pub deadline_ns: Option<u64>,
    /// Width of a time-series bin.
    pub bin_ns: u64,
    /// Added to this host's CLOCK_MONOTONIC for arrival times, as the
    /// sender's for send times: both ends on one clock.
    #[serde(default)]
    pub clock_offset_ns: i64,
    /// The worst late datagrams kept, to be explained (`late_events`).
    #[serde(default = "default_keep_late")]
    pub keep_late: usize,
    /// An interval log of the datagrams' lateness past the deadline (tag
    /// `lateness`, one histogram a second, flushed as it goes): what a
    /// flight recorder follows to keep the windows around late datagrams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hlog: Option<std::path::PathBuf>,
}

/// The tag of a receiver's interval log.
pub const HLOG_TAG: &str = "lateness";
/// A receiver's interval log's interval.
const HLOG_INTERVAL_NS: u64 = 1_000_000_000;

/// A receiver's interval log: the datagrams' lateness past the deadline,
/// a histogram per second of its own time. The receiving thread only
/// records and hands each finished interval to a writer thread (which
/// compresses and writes it, and hands the emptied histogram back), so the
/// disk never delays a datagram. While the writer is behind, an interval
/// grows until it can be handed over; a log that cannot be written is said
/// once and dropped, and the receiver goes on.
struct LatenessLog {
    interval: LatencyHistogram,
    /// Start of the interval being filled, ns after `start`.
    from_ns: u64,
    start: u64,
    to_writer: Option<std::sync::mpsc::SyncSender<Interval>>,
    spare: std::sync::mpsc::Receiver<LatencyHistogram>,
    writer: Option<std::thread::JoinHandle<()>>,
    failed: std::sync::Arc<AtomicBool>,
}

/// A finished interval on its way to the log.
struct Interval {
    lateness: LatencyHistogram,
    from_ns: u64,
    len_ns: u64,
}

impl LatenessLog {
    fn create(path: &std::path::Path, start: u64) -> Option<LatenessLog> {
        let file = ontime_core::hlog::HlogFile::create(
            path,
            "ontime net receive: each datagram's lateness past its deadline",
            std::time::SystemTime::now(),
        );
        let mut file = match file {
            Ok(file) => file,
            Err(e) => {
                ontime_core::errln!("ontime net receive: {e:#}; no interval log");
                return None;
            }
        };
        let (to_writer, intervals) = std::sync::mpsc::sync_channel::<Interval>(4);
        let (give_back, spare) = std::sync::mpsc::channel();
        let failed = std::sync::Arc::new(AtomicBool::new(false));
        let failing = failed.clone();
        let writer = std::thread::Builder::new().name("ontime-hlog".into()).spawn(move || {
            for mut i in intervals {
                if !failing.load(Ordering::Relaxed) {
                    let written = file
                        .write(
                            HLOG_TAG,
                            &i.lateness,
                            Duration::from_nanos(i.from_ns),
                            Duration::from_nanos(i.len_ns),
                        )
                        .and_then(|()| file.flush());
                    if let Err(e) = written {
                        ontime_core::errln!("ontime net receive: {e:#}; the interval log stops here");
                        failing.store(true, Ordering::Relaxed);
                    }
                }
                i.lateness.reset();
                let _ = give_back.send(i.lateness);
            }
        });
        let writer = match writer {
            Ok(w) => w,
            Err(e) => {
                ontime_core::errln!("ontime net receive: cannot start the interval log's writer: {e}; no interval log");
                return None;
            }
        };
        Some(LatenessLog {
            interval: LatencyHistogram::new(),
            from_ns: 0,
            start,
            to_writer: Some(to_writer),
            spare,
            writer: Some(writer),
            failed,
        })
    }

    /// Hands over the interval being filled once it has run a whole
    /// interval by `now` (with `last`, whatever it has); false once the
    /// log has failed.
    fn catch_up(&mut self, now: u64, last: bool) -> bool {
        if self.failed.load(Ordering::Relaxed) {
            return false;
        }
        let at = now.saturating_sub(self.start);
        if at < self.from_ns + HLOG_INTERVAL_NS && !(last && at > self.from_ns) {
            return true;
        }
        let Some(to_writer) = &self.to_writer else { return false };
        // A histogram the writer gave back; a new one only while it is behind.
        let empty = self.spare.try_recv().unwrap_or_else(|_| LatencyHistogram::new());
        let interval = Interval {
            lateness: std::mem::replace(&mut self.interval, empty),
            from_ns: self.from_ns,
            len_ns: at - self.from_ns,
        };
        match to_writer.try_send(interval) {
            Ok(()) => self.from_ns = at,
            // The writer is behind: this interval goes on growing.
            Err(std::sync::mpsc::TrySendError::Full(i)) => self.interval.add(&i.lateness),
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return false,
        }
        true
    }

    /// The last interval, then waits for the writer.
    fn finish(mut self, now: u64) {
        if self.catch_up(now, true) && self.to_writer.as_ref().is_some() {
            // The writer may have been behind: the last interval must go.
            let at = now.saturating_sub(self.start);
            if at > self.from_ns {
                if let Some(w) = &self.to_writer {
                    let _ = w.send(Interval {
                        lateness: std::mem::replace(&mut self.interval, LatencyHistogram::new()),
                        from_ns: self.from_ns,
                        len_ns: at - self.from_ns,
                    });
                }
            }
        }
        self.to_writer = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Late datagrams a receiver keeps unless told otherwise.
pub const KEEP_LATE: usize = 1000;

fn default_keep_late() -> usize {
    KEEP_LATE
}

/// One time-series bin.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FlowBin {
    /// Start of the bin, ns since the receiver started.
    pub t_ns: u64,
    pub packets: u64,
    pub max_delay_ns: u64,
    pub misses: u64,
}

/// What a receiver measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FlowResult {
    pub listen: String,
    pub deadline_ns: Option<u64>,
    pub received: u64,
    /// Sequence numbers never seen below the highest seen.
    pub lost: u64,
    /// Datagrams seen out of order or twice.
    pub reordered: u64,
    /// End-to-end one-way delay: the sender's send call to the receiver's
    /// return from recv.
    pub delay: Summary,
    /// Datagrams later than the deadline.
    pub misses: u64,
    /// Delay between consecutive arrivals minus the sender's spacing is not
    /// known here; jitter is the spread of the delay: max - min.
    pub jitter_ns: u64,
    pub series: Vec<FlowBin>,
    pub started_utc: String,
    /// The worst datagrams later than the deadline (at most `keep_late`),
    /// each as an event of the receiving thread: planned = its send time
    /// plus the deadline, actual = its return from recv (on this host's
    /// clock), for `ontime explain` and the lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_events: Option<ontime_core::late::LateSet>,
}

/// Receives until `stop` is set; the result covers every datagram seen.
pub fn receive(s: &ReceiveSettings, stop: &AtomicBool) -> Result<FlowResult> {
    let sock = UdpSocket::bind(s.listen).with_context(|| format!("cannot listen on {}", s.listen))?;
    receive_on(sock, s, stop)
}

/// [`receive`] on a socket already bound (the caller knows it listens
/// before it starts the sender). Once `stop` is set, what has already
/// arrived is still counted, then it returns.
pub fn receive_on(sock: UdpSocket, s: &ReceiveSettings, stop: &AtomicBool) -> Result<FlowResult> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    // Room for bursts while this thread is off the CPU.
    let _ = set_rcvbuf(&sock, 4 << 20);
    // When each datagram entered this host's stack, to tell its way
    // there from this thread's own delay; without it a late datagram is
    // explained on this thread's time line alone.
    let _ = ontime_core::kstamp::enable(&sock);
    let start = MonoNs::now().0;
    let bin_ns = s.bin_ns.max(1_000_000);
    // Sized for an hour at the bin width up front; beyond that bins grow.
    let mut series: Vec<FlowBin> = Vec::with_capacity((3_600_000_000_000 / bin_ns).min(100_000) as usize);
    let mut hist = LatencyHistogram::new();
    let mut r = FlowResult {
        listen: s.listen.to_string(),
        deadline_ns: s.deadline_ns,
        started_utc: ontime_core::manifest::utc_now(),
        ..Default::default()
    };
    let mut highest: Option<u64> = None;
    let mut buf = [0u8; 65_536];
    let mut worst = ontime_core::late::WorstEvents::new(if s.deadline_ns.is_some() { s.keep_late } else { 0 });
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let mut draining = false;
    let mut log = match (&s.hlog, s.deadline_ns) {
        (Some(path), Some(_)) => LatenessLog::create(path, start),
        _ => None,
    };
    loop {
        if log.as_mut().is_some_and(|l| !l.catch_up(MonoNs::now().0, false)) {
            log = None;
        }
        if !draining && stop.load(Ordering::Relaxed) {
            draining = true;
            sock.set_nonblocking(true)?;
        }
        let (n, received) = match recv_stamped(&sock, &mut buf) {
            Ok(r) => r,
            Err(e) if draining && e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("receiving"),
        };
        let now = MonoNs::now().0;
        if n < HEADER || buf[0..4] != MAGIC.to_be_bytes() {
            continue;
        }
        let seq = u64::from_be_bytes(buf[4..12].try_into().unwrap_or([0; 8]));
        let sent = u64::from_be_bytes(buf[12..20].try_into().unwrap_or([0; 8]));
        let delay = now.saturating_add_signed(s.clock_offset_ns).saturating_sub(sent);
        // The send time on this host's clock.
        let sent_here = sent.saturating_add_signed(s.clock_offset_ns.saturating_neg());
        hist.record(delay);
        r.received += 1;
        match highest {
            Some(h) if seq <= h => r.reordered += 1,
            _ => {
                if let Some(h) = highest {
                    r.lost += seq - h - 1;
                }
                highest = Some(seq);
            }
        }
        let missed = s.deadline_ns.is_some_and(|d| delay > d);
        // Into the interval it arrived in.
        if log.as_mut().is_some_and(|l| !l.catch_up(now, false)) {
            log = None;
        }
        if let Some(l) = &mut log {
            l.interval.record(delay.saturating_sub(s.deadline_ns.unwrap_or(0)));
        }
        if missed {
            r.misses += 1;
            let late = delay - s.deadline_ns.unwrap_or(0);
            worst.offer(ontime_core::late::ProbeEvent {
                tid,
                planned_ns: now.saturating_sub(late),
                actual_ns: now,
                sent_ns: Some(sent_here),
                gateway: None,
                // A stamp outside [sent, return] is a wall-clock step, or
                // the clock offset's error: none.
                received_ns: received.filter(|&k| (sent_here..=now).contains(&k)),
            });
        }
        let k = ((now - start) / bin_ns) as usize;
        while series.len() <= k {
            let t_ns = series.len() as u64 * bin_ns;
            series.push(FlowBin {
                t_ns,
                ..Default::default()
            });
        }
        let b = &mut series[k];
        b.packets += 1;
        b.max_delay_ns = b.max_delay_ns.max(delay);
        b.misses += missed as u64;
    }
    if let Some(l) = log {
        l.finish(MonoNs::now().0);
    }
    // Out-of-order arrivals filled gaps counted as lost.
    r.lost = r.lost.saturating_sub(r.reordered);
    r.delay = hist.summary(s.deadline_ns);
    r.jitter_ns = match (r.delay.max_ns, r.delay.min_ns) {
        (Some(a), Some(b)) => a - b,
        _ => 0,
    };
    r.series = series;
    if let Some(d) = s.deadline_ns.filter(|_| worst.capacity() > 0) {
        r.late_events = Some(ontime_core::late::LateSet {
            late: worst.offered(),
            events: worst.into_worst_first(),
            threshold_ns: d,
            threshold_from: "the flow's deadline".into(),
        });
    }
    Ok(r)
}

/// One datagram into `buf`, with the kernel's receive stamp of it.
fn recv_stamped(sock: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, Option<u64>)> {
    use std::os::fd::AsRawFd;
    // SAFETY: MaybeUninit<u8> has u8's layout, and the kernel writes only
    // bytes, so `buf` stays initialised.
    let uninit = unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    ontime_core::kstamp::recv_stamped(sock.as_raw_fd(), uninit, None)
}

fn set_rcvbuf(sock: &UdpSocket, bytes: i32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt with a valid fd and an int option.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_flow_arrives_whole_and_timed() {
        let stop = AtomicBool::new(false);
        let rx = ReceiveSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            deadline_ns: Some(1_000_000_000),
            bin_ns: 100_000_000,
            clock_offset_ns: 0,
            keep_late: KEEP_LATE,
            hlog: None,
        };
        // Bound before the sender starts: nothing is sent to a port not yet listened on.
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let rx = ReceiveSettings {
            listen: sock.local_addr().unwrap(),
            ..rx
        };
        std::thread::scope(|s| {
            let h = s.spawn(|| receive_on(sock, &rx, &stop));
            let sent = send(
                &SendSettings {
                    to: rx.listen,
                    rate_bps: 800_000.0,
                    size: 1000,
                    duration_ns: 300_000_000,
                    start_after_ns: 0,
                    burst: 2,
                    clock_offset_ns: 0,
                },
                &AtomicBool::new(false),
            )
            .unwrap();
            // Loopback delivers each datagram within its send call; the
            // receiver counts what is queued before it returns.
            stop.store(true, Ordering::Relaxed);
            let r = h.join().unwrap().unwrap();
            // 0.8 Mbit/s of 1000-byte datagrams for 0.3 s: 30, in pairs.
            assert_eq!(sent.sent, 30);
            assert_eq!(r.received, 30);
            assert_eq!((r.lost, r.reordered, r.misses), (0, 0, 0));
            assert_eq!(r.series.iter().map(|b| b.packets).sum::<u64>(), 30);
            assert!(r.delay.max_ns.unwrap() < 1_000_000_000);
        });
    }
}
