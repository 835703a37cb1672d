//! What a vCPU thread measures: three histograms and the outcome counters,
//! handed to the collector once per report interval and recycled, so the
//! timing path never allocates.

use ontime_core::stats::LatencyHistogram;
use serde::{Deserialize, Serialize};

/// How each planned poll ended. Every planned poll has exactly one outcome.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Outcomes {
    pub planned: u64,
    /// Answered 200 with a well-formed body: a measurement.
    pub ok: u64,
    /// No answer within the timeout after the planned time.
    pub timeout: u64,
    /// Answered with a non-200 status.
    pub http_error: u64,
    /// The device answered with an error: a Modbus exception (counted by
    /// code in `modbus_exceptions`), a BACnet Error, Reject or Abort or a
    /// segmented answer (`bacnet`).
    #[serde(default)]
    pub device_error: u64,
    #[serde(default, skip_serializing_if = "ExceptionCounts::is_empty")]
    pub modbus_exceptions: ExceptionCounts,
    #[serde(default, skip_serializing_if = "BacnetRefusals::is_empty")]
    pub bacnet: BacnetRefusals,
    /// Answered with a body that is not a getValues response.
    pub malformed: u64,
    /// The connection failed or closed before the answer.
    pub connection_lost: u64,
    /// Never sent: no connection could carry it before the timeout.
    pub not_sent: u64,
    /// Still open when the run was aborted (second Ctrl-C).
    pub abandoned: u64,
    /// Points answered with status "fault" or "unknown-point" inside ok polls.
    pub point_faults: u64,
    /// Polls sent a second time, on a new connection, because the
    /// connection they were written into was closed by the server before
    /// any answer (counted whatever their outcome; the poll keeps its
    /// planned and first send time).
    #[serde(default)]
    pub resent: u64,
}

impl Outcomes {
    pub fn missed(&self) -> u64 {
        self.timeout
            + self.http_error
            + self.device_error
            + self.malformed
            + self.connection_lost
            + self.not_sent
            + self.abandoned
    }

    pub fn add(&mut self, o: &Outcomes) {
        self.planned += o.planned;
        self.ok += o.ok;
        self.timeout += o.timeout;
        self.http_error += o.http_error;
        self.device_error += o.device_error;
        self.modbus_exceptions.add(&o.modbus_exceptions);
        self.bacnet.add(&o.bacnet);
        self.malformed += o.malformed;
        self.connection_lost += o.connection_lost;
        self.not_sent += o.not_sent;
        self.abandoned += o.abandoned;
        self.point_faults += o.point_faults;
        self.resent += o.resent;
    }
}

/// A BACnet device's answers that were not values, by kind: an Error PDU,
/// a Reject, an Abort (`abort_segmentation`: of them, for an answer too
/// long to send unsegmented), and a segmented ComplexACK, which the
/// crawler does not reassemble.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BacnetRefusals {
    pub error: u64,
    pub reject: u64,
    pub abort: u64,
    pub abort_segmentation: u64,
    pub segmented: u64,
}

impl BacnetRefusals {
    pub fn is_empty(&self) -> bool {
        *self == BacnetRefusals::default()
    }

    fn add(&mut self, o: &BacnetRefusals) {
        self.error += o.error;
        self.reject += o.reject;
        self.abort += o.abort;
        self.abort_segmentation += o.abort_segmentation;
        self.segmented += o.segmented;
    }
}

/// Exceptions by code, counted without allocating: codes 1 to 15 each
/// (the specification names 1-6, 8, 10 and 11), any other in one count.
/// In JSON an object of the non-zero ones by name ("illegal-data-address",
/// or "code-N" for a code without one, "other" for 0 and codes above 15).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ExceptionCounts([u64; 16]);

impl ExceptionCounts {
    #[inline]
    pub fn count(&mut self, code: u8) {
        self.0[if code < 16 { code as usize } else { 0 }] += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&n| n == 0)
    }

    fn add(&mut self, o: &ExceptionCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }

    fn key(i: usize) -> String {
        match i {
            0 => "other".into(),
            _ => ontime_fieldbus::modbus::exception_name(i as u8).map_or_else(|| format!("code-{i}"), str::to_string),
        }
    }

    /// The non-zero counts with their names, in code order.
    pub fn named(&self) -> Vec<(String, u64)> {
        (0..16)
            .filter(|&i| self.0[i] > 0)
            .map(|i| (ExceptionCounts::key(i), self.0[i]))
            .collect()
    }
}

impl Serialize for ExceptionCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.named())
    }
}

impl<'de> Deserialize<'de> for ExceptionCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, u64>::deserialize(d)?;
        let mut out = ExceptionCounts::default();
        for (k, n) in map {
            let i = (0..16)
                .find(|&i| ExceptionCounts::key(i) == k)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown Modbus exception '{k}'")))?;
            out.0[i] += n;
        }
        Ok(out)
    }
}

/// Bytes the crawler's sockets carried (HTTP requests and answers, not
/// TCP/IP headers).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Traffic {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
}

/// Who stamped the receive times the interval error was computed from, per
/// answered poll: the gateway's kernel stamp (untouched by the gateway's
/// own scheduling), its handler, or unknown (a gateway that does not say);
/// or, where the protocol carries no receive time (Modbus), the crawler's
/// own send time (`crawler_send`): then the interval error is the
/// crawler's, not the device's.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct StampCounts {
    pub kernel: u64,
    pub user: u64,
    pub unknown: u64,
    #[serde(default)]
    pub crawler_send: u64,
}

impl StampCounts {
    #[inline]
    pub fn count(&mut self, s: Option<ontime_core::wire::ReceiveStamp>) {
        use ontime_core::wire::ReceiveStamp;
        match s {
            Some(ReceiveStamp::Kernel) => self.kernel += 1,
            Some(ReceiveStamp::User) => self.user += 1,
            None => self.unknown += 1,
        }
    }

    fn add(&mut self, o: &StampCounts) {
        self.kernel += o.kernel;
        self.user += o.user;
        self.unknown += o.unknown;
        self.crawler_send += o.crawler_send;
    }
}

/// One reporting interval's measurements from one thread (or merged).
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    pub send_lag: LatencyHistogram,
    /// (gateway receive − planned) − the path's nominal one-way delay, where
    /// the crawl knows it (`RunOptions::path_nominal`).
    pub arrival_lag: LatencyHistogram,
    /// (answer back − planned) − the path's nominal round trip, for the
    /// answers the gateway stamped (`RunOptions::path_nominal`).
    pub answer_lag: LatencyHistogram,
    pub response_time: LatencyHistogram,
    pub interval_error: LatencyHistogram,
    pub outcomes: Outcomes,
    pub traffic: Traffic,
    pub stamps: StampCounts,
}

impl Metrics {
    pub fn add(&mut self, o: &Metrics) {
        self.send_lag.add(&o.send_lag);
        self.arrival_lag.add(&o.arrival_lag);
        self.answer_lag.add(&o.answer_lag);
        self.response_time.add(&o.response_time);
        self.interval_error.add(&o.interval_error);
        self.outcomes.add(&o.outcomes);
        self.traffic.tx_bytes += o.traffic.tx_bytes;
        self.traffic.rx_bytes += o.traffic.rx_bytes;
        self.stamps.add(&o.stamps);
    }

    pub fn reset(&mut self) {
        self.send_lag.reset();
        self.arrival_lag.reset();
        self.answer_lag.reset();
        self.response_time.reset();
        self.interval_error.reset();
        self.outcomes = Outcomes::default();
        self.traffic = Traffic::default();
        self.stamps = StampCounts::default();
    }
}

/// Outcome codes in per-poll records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    Ok = 0,
    Timeout = 1,
    HttpError = 2,
    Malformed = 3,
    ConnectionLost = 4,
    NotSent = 5,
    Abandoned = 6,
    DeviceError = 7,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Timeout => "timeout",
            Outcome::HttpError => "http_error",
            Outcome::Malformed => "malformed",
            Outcome::ConnectionLost => "connection_lost",
            Outcome::NotSent => "not_sent",
            Outcome::Abandoned => "abandoned",
            Outcome::DeviceError => "device_error",
        }
    }

    pub fn count(self, o: &mut Outcomes) {
        match self {
            Outcome::Ok => o.ok += 1,
            Outcome::Timeout => o.timeout += 1,
            Outcome::HttpError => o.http_error += 1,
            Outcome::Malformed => o.malformed += 1,
            Outcome::ConnectionLost => o.connection_lost += 1,
            Outcome::NotSent => o.not_sent += 1,
            Outcome::Abandoned => o.abandoned += 1,
            Outcome::DeviceError => o.device_error += 1,
        }
    }
}

/// One poll, as written to the per-poll record file. Times are
/// CLOCK_MONOTONIC ns; 0 means "did not happen".
#[derive(Clone, Copy, Debug, Default)]
pub struct PollRecord {
    pub stream: u32,
    pub index: u64,
    pub planned_ns: u64,
    pub sent_ns: u64,
    pub gateway_recv_ns: u64,
    pub done_ns: u64,
    /// The answer's HTTP status, or a Modbus exception's code (0 for
    /// registers read).
    pub status: u16,
    pub outcome: u8,
}

/// One point's value for the time-series store.
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreRecord {
    pub gateway: u16,
    pub point: u32,
    pub recv_ns: u64,
    pub value: f64,
    pub status: u8,
}
