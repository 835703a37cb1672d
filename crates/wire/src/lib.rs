//! `ontime wire record`: the timeliness of a poller ontime did not write,
//! measured from its packets. A capture on an interface ([`capture`])
//! with the kernel's stamps; HTTP/1.1 request lines, Modbus/TCP reads and
//! BACnet/IP ReadProperty(Multiple) requests decoded (ontime-fieldbus);
//! each point's period inferred from its own history (the median of its
//! first gaps) unless given; per point the interval error and the missed
//! slots by the rule every ontime judge uses (a gap of m periods is m - 1
//! missed slots, each a sample of one period, and one sample of its
//! distance from m periods), and the answers' response times.
//!
//! Owns decoding and judging; not the poller, the devices or any change
//! to them. Memory is bounded whatever the traffic: at most
//! [`MAX_POINTS`] points are followed (each with its own histogram for
//! the first [`MAX_LISTED`]), and at most [`MAX_OPEN_REQUESTS`] requests
//! wait for their answers.

pub mod capture;
pub mod stream;

use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_fieldbus::{bacnet, modbus};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// Points followed at most; requests for others are counted, not judged.
pub const MAX_POINTS: usize = 100_000;
/// Points with a histogram (and a row) of their own; the rest are in the
/// pooled figures only.
pub const MAX_LISTED: usize = 256;
/// Requests waiting for their answers at most (a poller whose answers
/// never come must not grow the table).
pub const MAX_OPEN_REQUESTS: usize = 65_536;
/// Gaps a point's period is inferred from.
const INFER_GAPS: usize = 64;

/// What to recognise where.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Ports {
    pub http: Vec<u16>,
    pub modbus: Vec<u16>,
    pub bacnet: Vec<u16>,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            http: vec![80, 8080],
            modbus: vec![modbus::DEFAULT_PORT],
            bacnet: vec![bacnet::DEFAULT_PORT],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Modbus,
    Bacnet,
}

/// One point as its requests name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PointKey {
    /// The server and a hash of the request line's method and target.
    Http(SocketAddr, u64),
    /// The server, unit, function and register.
    Modbus(SocketAddr, u8, u8, u16),
    /// The device's address and object.
    Bacnet(SocketAddr, u32),
}

/// An outstanding request, by what its answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum OpenKey {
    Modbus(SocketAddr, SocketAddr, u16),
    Bacnet(SocketAddr, SocketAddr, u8),
}

struct Point {
    name: String,
    protocol: Protocol,
    requests: u64,
    /// Times seen while the period is not known yet.
    first: Vec<u64>,
    period_ns: Option<u64>,
    given: bool,
    last: Option<u64>,
    missed: u64,
    hist: Option<Box<LatencyHistogram>>,
}

/// A point's figures in the result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointRow {
    pub point: String,
    pub protocol: Protocol,
    pub requests: u64,
    /// Its period: given (`--period`) or inferred (the median of its
    /// first gaps); None with fewer than three requests.
    pub period_ns: Option<u64>,
    pub period_from: String,
    pub interval_error: Summary,
    pub missed: u64,
}

/// Requests and answers recognised, per protocol.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Counts {
    pub http: u64,
    pub modbus: u64,
    pub bacnet: u64,
}

impl Counts {
    fn add(&mut self, p: Protocol) {
        match p {
            Protocol::Http => self.http += 1,
            Protocol::Modbus => self.modbus += 1,
            Protocol::Bacnet => self.bacnet += 1,
        }
    }
}

/// What `ontime wire record` measured; see docs/protocols.md.
#[derive(Debug, Serialize, Deserialize)]
pub struct WireResult {
    pub manifest: ontime_core::manifest::Manifest,
    pub interface: String,
    pub ports: Ports,
    pub duration_ns: u64,
    pub interrupted: bool,
    pub frames: u64,
    pub requests: Counts,
    pub answers: Counts,
    /// Requests whose answer was not seen (or came after the table was
    /// full), and answers to no request seen.
    pub unanswered: u64,
    pub unmatched_answers: u64,
    /// The period given for every point, if one was.
    pub period_ns: Option<u64>,
    /// Points followed, and of them listed in `points`.
    pub points_seen: u64,
    pub points_not_followed: u64,
    pub points: Vec<PointRow>,
    /// Every followed point's samples together.
    pub interval_error: Summary,
    pub missed: u64,
    pub response_time: Summary,
    /// Gaps in the TCP streams followed (segments the capture did not
    /// see), and bytes dropped (out of step, or an incomplete message
    /// longer than any request); absent in results made before streams
    /// were put back together.
    #[serde(default)]
    pub stream_gaps: u64,
    #[serde(default)]
    pub stream_dropped_bytes: u64,
    pub warnings: Vec<String>,
}

/// Decodes frames and judges their points.
pub struct Wire {
    ports: Ports,
    period_ns: Option<u64>,
    points: HashMap<PointKey, Point>,
    not_followed: u64,
    open: HashMap<OpenKey, u64>,
    /// HTTP/1.1 requests waiting for their answers, in order per
    /// connection (client, server): when each was sent, and whether it was
    /// a HEAD (whose answer has no body, whatever its headers say).
    http_open: HashMap<(SocketAddr, SocketAddr), VecDeque<(u64, bool)>>,
    frames: u64,
    requests: Counts,
    answers: Counts,
    unanswered: u64,
    unmatched_answers: u64,
    interval_error: LatencyHistogram,
    response_time: LatencyHistogram,
    missed: u64,
    /// A BACnet request's objects, reused from request to request.
    objects: Vec<u32>,
    /// Modbus/TCP and HTTP request streams, in order per direction.
    streams: stream::Streams,
}

impl Wire {
    pub fn new(ports: Ports, period_ns: Option<u64>) -> Wire {
        Wire {
            ports,
            period_ns,
            points: HashMap::new(),
            not_followed: 0,
            open: HashMap::new(),
            http_open: HashMap::new(),
            frames: 0,
            requests: Counts::default(),
            answers: Counts::default(),
            unanswered: 0,
            unmatched_answers: 0,
            interval_error: LatencyHistogram::new(),
            response_time: LatencyHistogram::new(),
            missed: 0,
            objects: Vec::new(),
            streams: stream::Streams::default(),
        }
    }

    /// One Ethernet frame stamped at `ns`.
    pub fn frame(&mut self, ns: u64, f: &[u8]) {
        self.frames += 1;
        let Some(Transport { src, dst, seq, payload }) = transport(f) else {
            return;
        };
        let (sp, dp) = (src.port(), dst.port());
        let Some((seq, flags)) = seq else {
            if payload.is_empty() {
                return;
            }
            if self.ports.bacnet.contains(&dp) {
                self.bacnet_request(ns, src, dst, payload);
            } else if self.ports.bacnet.contains(&sp) {
                self.bacnet_answer(ns, src, dst, payload);
            }
            return;
        };
        // The streams are put back together apart from the decoders they
        // feed, which need the rest of `self`.
        let mut streams = std::mem::take(&mut self.streams);
        if self.ports.modbus.contains(&dp) {
            streams.segment(src, dst, seq, flags, ns, payload, |b, first| {
                self.modbus_requests((first, ns), src, dst, b)
            });
        } else if self.ports.modbus.contains(&sp) {
            streams.segment(src, dst, seq, flags, ns, payload, |b, first| {
                self.modbus_answers((first, ns), src, dst, b)
            });
        } else if self.ports.http.contains(&dp) || self.ports.http.contains(&sp) {
            let (client, server) = if self.ports.http.contains(&dp) {
                (src, dst)
            } else {
                (dst, src)
            };
            let continuity = streams.segment(src, dst, seq, flags, ns, payload, |b, first| {
                if dst == server {
                    self.http_requests((first, ns), client, server, b)
                } else {
                    self.http_answers((first, ns), server, client, b)
                }
            });
            // HTTP pairs answers with requests by order: after a gap, or
            // once the server has ended the connection, it is lost.
            if continuity == stream::Continuity::AfterGap || (flags.end && src == server) {
                if let Some(q) = self.http_open.remove(&(client, server)) {
                    self.unanswered += q.len() as u64;
                }
            }
        }
        self.streams = streams;
    }

    /// Modbus/TCP requests at the head of `p`: the first sent at
    /// `first`, the others (begun in this segment) at `ns`.
    fn modbus_requests(
        &mut self,
        (first, now): (u64, u64),
        client: SocketAddr,
        server: SocketAddr,
        p: &[u8],
    ) -> stream::Decoded {
        modbus_frames(p, (first, now), |frame, ns| {
            let Ok(read) = modbus::parse_read(frame) else {
                return;
            };
            self.requests.add(Protocol::Modbus);
            self.open_request(OpenKey::Modbus(client, server, read.transaction), ns);
            let fc = read.table.function();
            for r in read.start..read.start.saturating_add(read.count) {
                let key = PointKey::Modbus(server, read.unit, fc, r);
                self.observe(key, Protocol::Modbus, ns, || {
                    format!("modbus {server} unit {} {} {r}", read.unit, read.table.name())
                });
            }
        })
    }

    /// Modbus/TCP answers at the head of `p`: the first's first byte in at
    /// `first`, the others' at `now`.
    fn modbus_answers(
        &mut self,
        (first, now): (u64, u64),
        server: SocketAddr,
        client: SocketAddr,
        p: &[u8],
    ) -> stream::Decoded {
        modbus_frames(p, (first, now), |frame, ns| {
            let t = modbus::transaction(frame);
            let sent = self.open.remove(&OpenKey::Modbus(client, server, t));
            self.answered(ns, sent, Protocol::Modbus);
        })
    }

    fn bacnet_request(&mut self, ns: u64, client: SocketAddr, server: SocketAddr, d: &[u8]) {
        let Ok(bacnet::Request::Confirmed(c)) = bacnet::apdu_of(d).and_then(bacnet::parse_request) else {
            return;
        };
        let mut objects = std::mem::take(&mut self.objects);
        objects.clear();
        match c.service {
            bacnet::SERVICE_READ_PROPERTY_MULTIPLE => {
                let _ = bacnet::parse_rpm_request(c.data, &mut |id, _| {
                    if objects.last() != Some(&id.0) {
                        objects.push(id.0);
                    }
                });
            }
            bacnet::SERVICE_READ_PROPERTY => objects.extend(bacnet::parse_read_property(c.data).map(|(id, _)| id.0)),
            _ => {}
        }
        if !objects.is_empty() {
            self.requests.add(Protocol::Bacnet);
            self.open_request(OpenKey::Bacnet(client, server, c.invoke), ns);
        }
        for &o in &objects {
            let id = bacnet::ObjectId(o);
            self.observe(PointKey::Bacnet(server, o), Protocol::Bacnet, ns, || {
                format!("bacnet {server} object {}:{}", id.object_type(), id.instance())
            });
        }
        self.objects = objects;
    }

    fn bacnet_answer(&mut self, ns: u64, server: SocketAddr, client: SocketAddr, d: &[u8]) {
        let invoke = match bacnet::apdu_of(d).and_then(bacnet::parse_answer) {
            Ok(bacnet::Answer::Ack { invoke, .. })
            | Ok(bacnet::Answer::Segmented { invoke })
            | Ok(bacnet::Answer::Error { invoke, .. })
            | Ok(bacnet::Answer::Reject { invoke, .. })
            | Ok(bacnet::Answer::Abort { invoke, .. }) => invoke,
            _ => return,
        };
        let sent = self.open.remove(&OpenKey::Bacnet(client, server, invoke));
        self.answered(ns, sent, Protocol::Bacnet);
    }

    /// HTTP/1.1 requests at the head of `p` (pipelined ones one after
    /// another), each counted at its head, its body (Content-Length)
    /// skipped: the first sent at `first`, the others at `now`.
    fn http_requests(
        &mut self,
        (first, now): (u64, u64),
        client: SocketAddr,
        server: SocketAddr,
        p: &[u8],
    ) -> stream::Decoded {
        http_messages(p, is_request_line, (first, now), |line, ns| {
            self.requests.add(Protocol::Http);
            if self.http_open.len() >= MAX_OPEN_REQUESTS && !self.http_open.contains_key(&(client, server)) {
                self.unanswered += self.http_open.values().map(|q| q.len() as u64).sum::<u64>();
                self.http_open.clear();
            }
            let q = self.http_open.entry((client, server)).or_default();
            if q.len() < 64 {
                q.push_back((ns, line.starts_with(b"HEAD ")));
            } else {
                self.unanswered += 1;
            }
            self.observe(PointKey::Http(server, fnv(line)), Protocol::Http, ns, || {
                format!(
                    "http {server} {}",
                    String::from_utf8_lossy(&line[..line.len().min(200)])
                )
            });
            false
        })
    }

    /// HTTP/1.1 answers at the head of `p`, matched to the connection's
    /// requests in order: the first's head in at `first`, the others' at
    /// `now`. An interim answer (1xx, but 101) answers nothing yet; the
    /// answer to a HEAD has no body.
    fn http_answers(
        &mut self,
        (first, now): (u64, u64),
        server: SocketAddr,
        client: SocketAddr,
        p: &[u8],
    ) -> stream::Decoded {
        http_messages(p, is_status_line, (first, now), |line, ns| {
            let code = line.get(9..12).unwrap_or(b"");
            if code.first() == Some(&b'1') && code != b"101" {
                return true;
            }
            let answered = self.http_open.get_mut(&(client, server)).and_then(|q| q.pop_front());
            self.answered(ns, answered.map(|a| a.0), Protocol::Http);
            answered.is_some_and(|a| a.1)
        })
    }

    fn open_request(&mut self, key: OpenKey, ns: u64) {
        if self.open.len() >= MAX_OPEN_REQUESTS {
            self.unanswered += self.open.len() as u64;
            self.open.clear();
        }
        if self.open.insert(key, ns).is_some() {
            // Sent again before an answer: the first counts as unanswered.
            self.unanswered += 1;
        }
    }

    fn answered(&mut self, ns: u64, sent: Option<u64>, p: Protocol) {
        match sent {
            Some(t) => {
                self.answers.add(p);
                self.response_time.record(ns.saturating_sub(t));
            }
            None => self.unmatched_answers += 1,
        }
    }

    fn observe(&mut self, key: PointKey, protocol: Protocol, ns: u64, name: impl FnOnce() -> String) {
        let listed = self.points.len() < MAX_LISTED;
        if !self.points.contains_key(&key) {
            if self.points.len() >= MAX_POINTS {
                self.not_followed += 1;
                return;
            }
            self.points.insert(
                key,
                Point {
                    name: name(),
                    protocol,
                    requests: 0,
                    first: Vec::new(),
                    period_ns: self.period_ns,
                    given: self.period_ns.is_some(),
                    last: None,
                    missed: 0,
                    hist: listed.then(|| Box::new(LatencyHistogram::new())),
                },
            );
        }
        let Some(p) = self.points.get_mut(&key) else { return };
        p.requests += 1;
        if p.period_ns.is_none() {
            p.first.push(ns);
            if p.first.len() > INFER_GAPS {
                settle(p, &mut self.interval_error, &mut self.missed);
            }
            return;
        }
        step(p, ns, &mut self.interval_error, &mut self.missed);
    }

    /// The result, once the capture is over.
    pub fn finish(
        self,
        manifest: ontime_core::manifest::Manifest,
        interface: String,
        duration_ns: u64,
        interrupted: bool,
        threshold_ns: Option<u64>,
    ) -> WireResult {
        self.finish_pooled(manifest, interface, duration_ns, interrupted, threshold_ns)
            .0
    }

    /// [`Wire::finish`], and every followed point's interval errors
    /// together as a histogram (what a lab run pools over its tenants).
    pub fn finish_pooled(
        mut self,
        manifest: ontime_core::manifest::Manifest,
        interface: String,
        duration_ns: u64,
        interrupted: bool,
        threshold_ns: Option<u64>,
    ) -> (WireResult, LatencyHistogram) {
        for p in self.points.values_mut() {
            if p.period_ns.is_none() && p.first.len() >= 3 {
                settle(p, &mut self.interval_error, &mut self.missed);
            }
        }
        self.unanswered += self.open.len() as u64 + self.http_open.values().map(|q| q.len() as u64).sum::<u64>();
        let mut warnings = Vec::new();
        if self.requests == Counts::default() {
            warnings.push(format!(
                "no request seen on {interface}: is the poller's traffic on it, and on these ports (--http-port, --modbus-port, --bacnet-port)?"
            ));
        }
        if self.streams.gaps > 0 {
            warnings.push(format!(
                "{} gaps in TCP streams: segments the capture did not see (its receive buffer overflowed?); requests in them are not counted",
                self.streams.gaps
            ));
        }
        let mut rows: Vec<PointRow> = self
            .points
            .values()
            .filter_map(|p| {
                Some(PointRow {
                    point: p.name.clone(),
                    protocol: p.protocol,
                    requests: p.requests,
                    period_ns: p.period_ns,
                    period_from: if p.given { "given" } else { "inferred" }.into(),
                    interval_error: p.hist.as_ref()?.summary(threshold_ns),
                    missed: p.missed,
                })
            })
            .collect();
        rows.sort_by(|a, b| a.point.cmp(&b.point));
        let listed = rows.len() as u64;
        if (self.points.len() as u64) > listed {
            warnings.push(format!(
                "{} points followed; the first {listed} have rows, all are in the pooled figures",
                self.points.len()
            ));
        }
        let result = WireResult {
            manifest,
            interface,
            ports: self.ports,
            duration_ns,
            interrupted,
            frames: self.frames,
            requests: self.requests,
            answers: self.answers,
            unanswered: self.unanswered,
            unmatched_answers: self.unmatched_answers,
            period_ns: self.period_ns,
            points_seen: self.points.len() as u64,
            points_not_followed: self.not_followed,
            points: rows,
            interval_error: self.interval_error.summary(threshold_ns),
            missed: self.missed,
            response_time: self.response_time.summary(threshold_ns),
            stream_gaps: self.streams.gaps,
            stream_dropped_bytes: self.streams.dropped_bytes,
            warnings,
        };
        (result, self.interval_error)
    }
}

/// A capture's whole job, as `ontime wire record` and a lab tenant's
/// probe give it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireOptions {
    pub interface: String,
    pub ports: Ports,
    /// Every point's period (None: each point's own, inferred).
    pub period_ns: Option<u64>,
    /// How long to capture (None: until stopped).
    pub duration_ns: Option<u64>,
    pub threshold_ns: Option<u64>,
}

impl WireOptions {
    /// Every range, for flags and lab specs alike.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(p) = self.period_ns {
            ontime_core::limits::duration("period", p, 1_000, 7 * 24 * 3_600_000_000_000)?;
        }
        if self.interface.is_empty() {
            return Err("interface is empty: give one to capture on (ip -br link lists them)".into());
        }
        Ok(())
    }
}

/// Captures as `o` says until its duration has passed or `stop` is set;
/// `second` is called with the whole seconds captured so far, about once
/// a second, and `started` once the capture is open (frames from then on
/// are seen). Returns the result and the pooled interval errors.
pub fn record(
    o: &WireOptions,
    stop: &std::sync::atomic::AtomicBool,
    started: impl FnOnce(),
    mut second: impl FnMut(u64),
) -> anyhow::Result<(WireResult, LatencyHistogram)> {
    use std::sync::atomic::Ordering;
    let capture = capture::Capture::open(&o.interface)?;
    let manifest = ontime_core::manifest::Manifest::start("native", ontime_core::caps::Capabilities::probe());
    let mut wire = Wire::new(o.ports.clone(), o.period_ns);
    let start = ontime_core::MonoNs::now().0;
    let end = o.duration_ns.map_or(u64::MAX, |d| start.saturating_add(d));
    started();
    let mut buf = vec![0u8; 65_536];
    let mut shown = start;
    loop {
        let now = ontime_core::MonoNs::now().0;
        if now >= end || stop.load(Ordering::Relaxed) {
            break;
        }
        if now >= shown + 1_000_000_000 {
            shown = now;
            second((now - start) / 1_000_000_000);
        }
        if let capture::Frame::Got { len, ns } = capture.next(&mut buf) {
            wire.frame(ns, &buf[..len]);
        }
    }
    let interrupted = stop.load(Ordering::Relaxed);
    // On a busy host the capture runs late: frames the kernel stamped
    // before the stop may still wait on the socket. They are the run's
    // too (a poller's last requests); the first frame stamped after the
    // stop ends the drain, so a busy link cannot keep it going.
    let stopped_at = ontime_core::MonoNs::now().0.min(end);
    loop {
        match capture.queued(&mut buf) {
            capture::Frame::Got { ns, .. } if ns > stopped_at => break,
            capture::Frame::Got { len, ns } => wire.frame(ns, &buf[..len]),
            capture::Frame::Skip => {}
            capture::Frame::Idle => break,
        }
    }
    let mut manifest = manifest;
    manifest.finish();
    let duration = stopped_at.saturating_sub(start);
    Ok(wire.finish_pooled(manifest, o.interface.clone(), duration, interrupted, o.threshold_ns))
}

/// Fixes a point's period from the requests seen so far and judges them.
/// The median gap is robust to missed slots but carries one gap's jitter;
/// each request is then put in its slot (gaps rounded to whole medians)
/// and the period is the slope of time over slot, least squares, which
/// no single late request moves much.
fn settle(p: &mut Point, pooled: &mut LatencyHistogram, missed: &mut u64) {
    let Some(period) = infer_period(&p.first) else {
        return;
    };
    p.period_ns = Some(period);
    for t in std::mem::take(&mut p.first) {
        step(p, t, pooled, missed);
    }
}

/// The period of requests at `times` (ascending, at least two), as
/// `wire` infers a point's: each put in its slot by gaps rounded to
/// whole medians, the period the least-squares slope of time over slot.
pub fn infer_period(times: &[u64]) -> Option<u64> {
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    let mut sorted = gaps.clone();
    sorted.sort_unstable();
    let median = (*sorted.get(sorted.len() / 2)?).max(1);
    let t0 = times[0];
    let mut slot = 0u64;
    let points: Vec<(f64, f64)> = std::iter::once((0.0, 0.0))
        .chain(times[1..].iter().zip(&gaps).map(|(&t, &g)| {
            slot += ((g as f64 / median as f64).round() as u64).max(1);
            (slot as f64, (t - t0) as f64)
        }))
        .collect();
    let n = points.len() as f64;
    let (mk, mt) = (
        points.iter().map(|x| x.0).sum::<f64>() / n,
        points.iter().map(|x| x.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|x| (x.0 - mk) * (x.0 - mk)).sum();
    let sxy: f64 = points.iter().map(|x| (x.0 - mk) * (x.1 - mt)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { median as f64 };
    Some((slope.round() as u64).max(1))
}

/// One request of a point whose period is known.
fn step(p: &mut Point, t: u64, pooled: &mut LatencyHistogram, missed: &mut u64) {
    let period = p.period_ns.unwrap_or(1).max(1);
    if let Some(last) = p.last {
        let gap = t.saturating_sub(last);
        let m = ((gap as f64 / period as f64).round() as u64).max(1);
        let err = gap.abs_diff(m.saturating_mul(period));
        pooled.record_n(period, m - 1);
        pooled.record(err);
        if let Some(h) = p.hist.as_mut() {
            h.record_n(period, m - 1);
            h.record(err);
        }
        p.missed += m - 1;
        *missed += m - 1;
    }
    p.last = Some(t);
}

/// FNV-1a: a point's request line as a key, the same on every run.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A TCP segment's or UDP datagram's addresses and payload.
struct Transport<'a> {
    src: SocketAddr,
    dst: SocketAddr,
    /// TCP: the sequence number of the payload's first byte, and the
    /// segment's SYN and FIN/RST flags.
    seq: Option<(u32, stream::Flags)>,
    payload: &'a [u8],
}

/// An Ethernet frame's IPv4 or IPv6 TCP or UDP.
fn transport(f: &[u8]) -> Option<Transport<'_>> {
    let mut at = 12;
    let mut ethertype = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
    at += 2;
    if ethertype == 0x8100 {
        ethertype = u16::from_be_bytes([*f.get(at + 2)?, *f.get(at + 3)?]);
        at += 4;
    }
    let ip = f.get(at..)?;
    let (src, dst, proto, l4) = match ethertype {
        0x0800 => {
            let ihl = ((*ip.first()? & 0x0F) as usize) * 4;
            let total = u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]) as usize;
            let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
            let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            // A fragment after the first carries no ports.
            if u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1FFF != 0 {
                return None;
            }
            (
                IpAddr::from(src),
                IpAddr::from(dst),
                ip[9],
                ip.get(ihl..total.min(ip.len()))?,
            )
        }
        0x86DD => {
            let len = u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]) as usize;
            let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
            let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (
                IpAddr::from(src),
                IpAddr::from(dst),
                ip[6],
                ip.get(40..(40 + len).min(ip.len()))?,
            )
        }
        _ => return None,
    };
    let ports = |b: &[u8]| -> Option<(u16, u16)> {
        Some((
            u16::from_be_bytes([*b.first()?, *b.get(1)?]),
            u16::from_be_bytes([*b.get(2)?, *b.get(3)?]),
        ))
    };
    match proto {
        6 => {
            let (sp, dp) = ports(l4)?;
            let off = ((*l4.get(12)? >> 4) as usize) * 4;
            Some(Transport {
                src: SocketAddr::new(src, sp),
                dst: SocketAddr::new(dst, dp),
                seq: Some((
                    u32::from_be_bytes(l4.get(4..8)?.try_into().ok()?),
                    stream::Flags {
                        syn: l4.get(13)? & 0x02 != 0,
                        end: l4.get(13)? & 0x05 != 0,
                    },
                )),
                payload: l4.get(off..)?,
            })
        }
        17 => {
            let (sp, dp) = ports(l4)?;
            Some(Transport {
                src: SocketAddr::new(src, sp),
                dst: SocketAddr::new(dst, dp),
                seq: None,
                payload: l4.get(8..)?,
            })
        }
        _ => None,
    }
}

/// The stamp of a message starting `at` bytes into what a stream handed
/// over: the first began at `first`, any later one in the segment that
/// came `now`.
fn stamp_of(at: usize, (first, now): (u64, u64)) -> u64 {
    if at == 0 {
        first
    } else {
        now
    }
}

/// Calls `each` with every whole Modbus/TCP frame at the head of `p` and
/// its stamp ([`stamp_of`]).
fn modbus_frames(p: &[u8], stamps: (u64, u64), mut each: impl FnMut(&[u8], u64)) -> stream::Decoded {
    let mut used = 0;
    loop {
        match modbus::frame(&p[used..]) {
            modbus::Frame::Complete(n) => {
                each(&p[used..used + n], stamp_of(used, stamps));
                used += n;
            }
            modbus::Frame::Partial => return stream::Decoded::Consumed(used),
            modbus::Frame::Invalid(_) if used == 0 => return stream::Decoded::OutOfStep,
            // The rest is dropped when it comes first.
            modbus::Frame::Invalid(_) => return stream::Decoded::Consumed(used),
        }
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An HTTP/1.1 message head's bytes at most (its start line and
/// headers): longer is not a poller's request or its answer.
const MAX_HEAD: usize = 8_192;

/// Calls `each(start line, its stamp)` ([`stamp_of`]) for every HTTP/1.1
/// message at the head of `p` whose start line `is_start` accepts, as soon
/// as its head is in; its body (by Content-Length, or a chunked one whole
/// in `p`; none where `each` says so) is then skipped, held or not. A body of unknown length (chunks
/// not all here, or until the connection closes) runs to the end of `p`.
fn http_messages(
    p: &[u8],
    is_start: fn(&[u8]) -> bool,
    stamps: (u64, u64),
    mut each: impl FnMut(&[u8], u64) -> bool,
) -> stream::Decoded {
    let mut used = 0;
    while used < p.len() {
        let rest = &p[used..];
        let Some(line_end) = find(rest, b"\r\n") else {
            return partial_or_out_of_step(rest, used);
        };
        if !is_start(&rest[..line_end]) {
            return if used == 0 {
                stream::Decoded::OutOfStep
            } else {
                stream::Decoded::Consumed(used)
            };
        }
        let Some(head) = find(rest, b"\r\n\r\n").map(|h| h + 4) else {
            return partial_or_out_of_step(rest, used);
        };
        let bodiless = each(&rest[..line_end], stamp_of(used, stamps));
        let body = match body_of(&rest[..line_end], &rest[line_end + 2..head]) {
            _ if bodiless => 0,
            Body::Length(n) => n,
            Body::Chunked => match chunked_length(&rest[head..]) {
                Some(n) => n,
                None => return stream::Decoded::Consumed(p.len()),
            },
            Body::UntilClose => return stream::Decoded::Consumed(p.len()),
        };
        used = used.saturating_add(head).saturating_add(body);
    }
    stream::Decoded::Consumed(used)
}

/// An incomplete head: held, unless it is already longer than any head.
fn partial_or_out_of_step(rest: &[u8], used: usize) -> stream::Decoded {
    if rest.len() > MAX_HEAD {
        if used == 0 {
            stream::Decoded::OutOfStep
        } else {
            stream::Decoded::Consumed(used)
        }
    } else {
        stream::Decoded::Consumed(used)
    }
}

/// `METHOD TARGET HTTP/1.x`.
fn is_request_line(line: &[u8]) -> bool {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(_target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    version.starts_with(b"HTTP/1.") && !method.is_empty() && method.iter().all(u8::is_ascii_uppercase)
}

/// `HTTP/1.x CODE REASON`.
fn is_status_line(line: &[u8]) -> bool {
    line.starts_with(b"HTTP/1.")
        && line.get(8) == Some(&b' ')
        && line.get(9..12).is_some_and(|c| c.iter().all(u8::is_ascii_digit))
}

/// How an HTTP/1.1 message's body ends.
enum Body {
    Length(usize),
    Chunked,
    UntilClose,
}

/// The body its start line and headers (each line ending CRLF) give: an
/// answer's to a 1xx, 204 or 304 is empty; a request without a length
/// has none; an answer without one runs until the connection closes.
fn body_of(start: &[u8], headers: &[u8]) -> Body {
    if start.starts_with(b"HTTP/1.") {
        let code = start.get(9..12).unwrap_or(b"");
        if code.first() == Some(&b'1') || code == b"204" || code == b"304" {
            return Body::Length(0);
        }
    }
    let mut length = None;
    for h in headers.split(|&b| b == b'\n') {
        let Some(colon) = h.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&h[..colon], h[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Body::Chunked;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        }
    }
    match length {
        Some(n) => Body::Length(n),
        None if start.starts_with(b"HTTP/1.") => Body::UntilClose,
        None => Body::Length(0),
    }
}

/// The length of a chunked body at the head of `b` when all of it is
/// there (its last chunk and trailers too), else None.
fn chunked_length(b: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line = find(&b[at..], b"\r\n")?;
        let size = std::str::from_utf8(&b[at..at + line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        at += line + 2;
        if size == 0 {
            // Trailers, each ending CRLF, then an empty line.
            loop {
                let end = find(&b[at..], b"\r\n")?;
                at += end + 2;
                if end == 0 {
                    return Some(at);
                }
            }
        }
        at = at.checked_add(size)?.checked_add(2)?;
        if at > b.len() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// An Ethernet + IPv4 + TCP (with the sequence number of the
    /// payload's first byte) or UDP (None) frame around `payload`.
    fn frame(seq: Option<u32>, sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let tcp = seq.is_some();
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let l4_len = if tcp { 20 } else { 8 } + payload.len();
        let total = 20 + l4_len;
        f.extend_from_slice(&[0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64]);
        f.push(if tcp { 6 } else { 17 });
        f.extend_from_slice(&[0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
        f.extend_from_slice(&sp.to_be_bytes());
        f.extend_from_slice(&dp.to_be_bytes());
        if let Some(seq) = seq {
            f.extend_from_slice(&seq.to_be_bytes());
            f.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0]);
        } else {
            f.extend_from_slice(&[(l4_len >> 8) as u8, l4_len as u8, 0, 0]);
        }
        f.extend_from_slice(payload);
        f
    }

    /// The frame of the next `payload` bytes of a TCP stream whose next
    /// sequence number is `seq`.
    fn tcp(seq: &mut u32, sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let f = frame(Some(*seq), sp, dp, payload);
        *seq = seq.wrapping_add(payload.len() as u32);
        f
    }

    fn manifest() -> ontime_core::manifest::Manifest {
        ontime_core::manifest::Manifest::start("native", ontime_core::caps::Capabilities::default())
    }

    /// A Modbus poller every 10 ms that skips two slots: the period is
    /// inferred, the two slots missed, each answer's response time seen.
    #[test]
    fn a_modbus_pollers_slots_are_judged_from_its_requests() {
        let mut w = Wire::new(Ports::default(), None);
        let mut t = 1_000 * MS;
        let (mut up, mut down) = (7u32, 9u32);
        for k in 0..60u16 {
            if k == 40 {
                t += 20 * MS;
            }
            let read = modbus::Read {
                transaction: k,
                unit: 1,
                table: modbus::Table::Holding,
                start: 100,
                count: 2,
            };
            w.frame(t + (k as u64 % 3) * 10_000, &tcp(&mut up, 40000, 502, &read.encode()));
            let mut out = [0u8; modbus::MAX_FRAME];
            let n = modbus::encode_registers(&read, [1u16, 2].into_iter(), &mut out);
            w.frame(t + MS, &tcp(&mut down, 502, 40000, &out[..n]));
            t += 10 * MS;
        }
        let r = w.finish(manifest(), "lo".into(), 0, false, None);
        assert_eq!(r.requests.modbus, 60);
        assert_eq!(r.answers.modbus, 60);
        assert_eq!(r.points.len(), 2, "{:?}", r.points);
        for p in &r.points {
            assert!(p.period_ns.unwrap().abs_diff(10 * MS) < 1_000, "{p:?}");
            assert_eq!(p.missed, 2, "{p:?}");
            assert!(p.point.contains("unit 1 holding 10"), "{p:?}");
        }
        assert_eq!(r.missed, 4);
        assert!(r.response_time.max_ns.unwrap() >= MS - 20_000);
    }

    /// BACnet RPM and HTTP request lines name their points.
    #[test]
    fn bacnet_and_http_requests_name_their_points() {
        let mut w = Wire::new(Ports::default(), Some(100 * MS));
        let ids = [
            bacnet::ObjectId::new(0, 1).unwrap(),
            bacnet::ObjectId::new(0, 2).unwrap(),
        ];
        let mut req = [0u8; 64];
        let mut seq = 0;
        for k in 0..5u64 {
            let n = bacnet::encode_rpm(k as u8, 5, &ids, &mut req).unwrap();
            w.frame(k * 100 * MS, &frame(None, 50000, 47808, &req[..n]));
            w.frame(
                k * 100 * MS,
                &tcp(&mut seq, 50001, 80, b"POST /b0/getValues HTTP/1.1\r\nHost: x\r\n\r\n"),
            );
        }
        w.frame(450 * MS, &frame(Some(0), 80, 50001, b"HTTP/1.1 200 OK\r\n\r\n"));
        let r = w.finish(manifest(), "lo".into(), 0, false, None);
        assert_eq!((r.requests.bacnet, r.requests.http, r.answers.http), (5, 5, 1));
        let names: Vec<&str> = r.points.iter().map(|p| p.point.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.iter().any(|n| n.ends_with("object 0:2")), "{names:?}");
        assert!(
            names.iter().any(|n| n.ends_with("POST /b0/getValues HTTP/1.1")),
            "{names:?}"
        );
        assert!(r.points.iter().all(|p| p.period_from == "given" && p.missed == 0));
        assert_eq!(r.unanswered, 5 + 4);
    }

    /// A Modbus request split over two segments is one request, sent
    /// when its first byte was; two in one segment are two; a
    /// retransmission counts once.
    #[test]
    fn modbus_requests_are_put_together_from_their_segments() {
        let mut w = Wire::new(Ports::default(), None);
        let read = |transaction, start| modbus::Read {
            transaction,
            unit: 1,
            table: modbus::Table::Input,
            start,
            count: 1,
        };
        let mut seq = u32::MAX - 30;
        let mut t = 0;
        for k in 0..20u16 {
            let f = read(k, 7).encode();
            if k % 2 == 0 {
                w.frame(t, &tcp(&mut seq, 40000, 502, &f[..5]));
                w.frame(t + 3 * MS, &tcp(&mut seq, 40000, 502, &f[5..]));
            } else {
                let mut two = f.to_vec();
                two.extend_from_slice(&read(k + 1000, 8).encode());
                let again = frame(Some(seq), 40000, 502, &two);
                w.frame(t, &tcp(&mut seq, 40000, 502, &two));
                w.frame(t + MS, &again);
            }
            t += 10 * MS;
        }
        let r = w.finish(manifest(), "lo".into(), 0, false, None);
        assert_eq!(r.requests.modbus, 30);
        let rows: Vec<(&str, u64)> = r.points.iter().map(|p| (p.point.as_str(), p.requests)).collect();
        assert_eq!(
            rows,
            vec![
                ("modbus 127.0.0.1:502 unit 1 input 7", 20),
                ("modbus 127.0.0.1:502 unit 1 input 8", 10)
            ]
        );
        // Stamped with their first segment, the split requests keep the
        // 10 ms schedule: none missed, no error.
        let p = &r.points[0];
        assert!(p.period_ns.unwrap().abs_diff(10 * MS) < 1_000, "{p:?}");
        assert_eq!(p.missed, 0, "{p:?}");
        assert!(p.interval_error.max_ns.unwrap() < 1_000, "{p:?}");
    }

    /// Pipelined HTTP requests in one segment are each a request; one
    /// split after its request line, with a body, is one; their answers
    /// are framed the same way and matched in order.
    #[test]
    fn pipelined_and_split_http_requests_are_each_counted() {
        let mut w = Wire::new(Ports::default(), Some(10 * MS));
        let mut seq = 1;
        w.frame(
            0,
            &tcp(
                &mut seq,
                50001,
                80,
                b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
            ),
        );
        w.frame(MS, &tcp(&mut seq, 50001, 80, b"POST /c HTTP/1.1\r\n"));
        w.frame(
            2 * MS,
            &tcp(
                &mut seq,
                50001,
                80,
                b"Content-Length: 5\r\n\r\nabcdeGET /a HTTP/1.1\r\n\r\n",
            ),
        );
        // Their answers: two in a segment, a body over two segments, a
        // chunked one and an empty one, matched in order.
        let mut back = 1;
        w.frame(
            3 * MS,
            &tcp(
                &mut back,
                80,
                50001,
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234",
            ),
        );
        w.frame(
            4 * MS,
            &tcp(
                &mut back,
                80,
                50001,
                b"56789HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            ),
        );
        w.frame(5 * MS, &tcp(&mut back, 80, 50001, b"HTTP/1.1 204 No Content\r\n\r\n"));
        let r = w.finish(manifest(), "lo".into(), 0, false, None);
        assert_eq!(r.requests.http, 4);
        assert_eq!((r.answers.http, r.unanswered, r.unmatched_answers), (4, 0, 0));
        assert_eq!((r.stream_gaps, r.stream_dropped_bytes), (0, 0));
        // Each stamped with the frame of its first byte: sent at 0, 0, 1
        // and 2 ms, answered at 3, 3, 4 and 5 ms.
        assert_eq!(
            (r.response_time.min_ns, r.response_time.max_ns),
            (Some(3 * MS), Some(3 * MS))
        );
        let names: Vec<(&str, u64)> = r.points.iter().map(|p| (p.point.as_str(), p.requests)).collect();
        assert_eq!(
            names,
            vec![
                ("http 127.0.0.1:80 GET /a HTTP/1.1", 2),
                ("http 127.0.0.1:80 GET /b HTTP/1.1", 1),
                ("http 127.0.0.1:80 POST /c HTTP/1.1", 1)
            ]
        );
    }

    /// An interim `100 Continue` answers nothing yet; the answer to a HEAD
    /// has no body whatever its Content-Length says; a new connection on
    /// the same addresses (SYN) starts its own sequence.
    #[test]
    fn interim_and_head_answers_keep_the_order() {
        let mut w = Wire::new(Ports::default(), Some(10 * MS));
        let (mut up, mut down) = (10, 20);
        w.frame(
            0,
            &tcp(&mut up, 50001, 80, b"HEAD /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\n\r\n"),
        );
        w.frame(
            MS,
            &tcp(
                &mut down,
                80,
                50001,
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n",
            ),
        );
        w.frame(
            2 * MS,
            &tcp(&mut down, 80, 50001, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        );
        let mut syn = frame(Some(7), 50001, 80, b"");
        syn[14 + 20 + 13] = 0x02;
        w.frame(3 * MS, &syn);
        let mut seq = 8;
        w.frame(4 * MS, &tcp(&mut seq, 50001, 80, b"GET /c HTTP/1.1\r\n\r\n"));
        let r = w.finish(manifest(), "lo".into(), 0, false, None);
        assert_eq!(r.requests.http, 3);
        assert_eq!((r.answers.http, r.unmatched_answers), (2, 0));
        assert_eq!(
            r.response_time.max_ns,
            Some(2 * MS),
            "the POST's answer, not the interim one"
        );
        assert_eq!((r.stream_gaps, r.stream_dropped_bytes), (0, 0));
    }

    #[test]
    fn frames_that_are_not_ip_are_skipped() {
        let mut w = Wire::new(Ports::default(), None);
        for f in [
            vec![],
            vec![0u8; 13],
            vec![0u8; 60],
            frame(Some(0), 1, 2, b"x")[..40].to_vec(),
        ] {
            w.frame(1, &f);
        }
        let r = w.finish(manifest(), "lo".into(), 0, false, None);
        assert_eq!(r.frames, 4);
        assert_eq!(r.requests, Counts::default());
        assert!(!r.warnings.is_empty());
    }
}
