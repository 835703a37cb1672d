//! What travels between agents, workers and the view: subjects, streams,
//! buckets and the JSON messages. Every message carries `version`; a
//! worker sends what it cannot read to the dead letters.

use serde::{Deserialize, Serialize};

/// The message format's version.
pub const VERSION: u32 = 1;

/// Windows' notices: `ontime.windows.<host>`, a work queue (each notice
/// is removed once a worker acknowledges it).
pub const WINDOWS_STREAM: &str = "ONTIME_WINDOWS";
pub const WINDOWS_SUBJECTS: &str = "ontime.windows.>";
/// Analyses: `ontime.results.<host>`, kept.
pub const RESULTS_STREAM: &str = "ONTIME_RESULTS";
pub const RESULTS_SUBJECTS: &str = "ontime.results.>";
/// What a worker could not use, with the reason: `ontime.dead.<host or unknown>`.
pub const DEAD_STREAM: &str = "ONTIME_DEAD";
pub const DEAD_SUBJECTS: &str = "ontime.dead.>";
/// The reason a message is dead, as a header.
pub const DEAD_REASON_HEADER: &str = "Ontime-Dead-Reason";
/// The window files, by window id.
pub const WINDOW_BUCKET: &str = "ontime-windows";
/// Each window's pprof (`<id>.pb.gz`).
pub const RESULT_BUCKET: &str = "ontime-results";
/// Each host's recent figures per tenant, for anomaly detection: the last
/// message of `ontime.history.<host>` (a stream that keeps one per
/// subject: a key-value store that nats-server 2.9 also serves).
pub const HISTORY_STREAM: &str = "ONTIME_HISTORY";
pub const HISTORY_SUBJECTS: &str = "ontime.history.>";

pub fn history_subject(host: &str) -> String {
    format!("ontime.history.{host}")
}
/// The workers' shared durable consumer.
pub const ANALYSERS: &str = "ontime-analysers";

/// The largest window file an agent publishes and a worker takes. A
/// worker holds a window in memory to analyse it, so what one window may
/// claim is bounded here, before anything is read: a 60 s window of 10
/// VMs at 1 kHz is about 6 MB.
pub const MAX_WINDOW_BYTES: u64 = 512 << 20;
/// The largest notice a worker reads (one is well under 1 KiB: ids,
/// counts and the tenants' names).
pub const MAX_NOTICE_BYTES: usize = 64 << 10;
/// The longest window a notice may claim (an agent's window is 1 h at
/// most; a recording may run a little past its window).
pub const MAX_WINDOW_NS: u64 = 2 * 3_600_000_000_000;

pub fn windows_subject(host: &str) -> String {
    format!("ontime.windows.{host}")
}

pub fn results_subject(host: &str) -> String {
    format!("ontime.results.{host}")
}

/// A host name is one subject token and part of object names.
pub fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() || host.len() > 64 {
        return Err(format!("host name {host:?}: use 1 to 64 characters"));
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "host name {host:?}: {c:?} is not allowed (letters, digits, '-' and '_': it is a NATS subject token)"
        ));
    }
    Ok(())
}

/// One recorded window, published by an agent.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WindowNotice {
    pub version: u32,
    pub host: String,
    /// `<host>.<start, ns since the epoch>`: the message id (JetStream's
    /// de-duplication) and the object's name.
    pub id: String,
    /// The window's start (wall clock, ns since the epoch) and length.
    pub start_realtime_ns: u64,
    pub duration_ns: u64,
    /// Size of the window file in the object store.
    pub bytes: u64,
    /// The tenants recorded.
    pub targets: Vec<String>,
    /// Windows the agent dropped so far because its spool was full.
    pub dropped: u64,
    /// Replayed from a recording rather than recorded live.
    pub replayed: bool,
    /// The agent's own cost so far: CPU time and resident memory.
    pub agent_cpu_ns: u64,
    pub agent_rss_bytes: u64,
    pub agent_uptime_ns: u64,
    /// The late wake-ups of the agent's probes in the window, to explain
    /// on it (`[[probe]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<ProbeLate>,
}

impl WindowNotice {
    pub fn id_of(host: &str, start_realtime_ns: u64) -> String {
        format!("{host}.{start_realtime_ns}")
    }
}

/// One probe's late events in one window, as the notice carries them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeLate {
    pub probe: String,
    pub threshold_ns: u64,
    /// Late wake-ups in the window (each log interval counted in the
    /// window its start falls in), kept or not.
    pub late: u64,
    /// The worst of them planned inside the window, worst first.
    pub events: Vec<ontime_core::late::ProbeEvent>,
    /// False: the probe's log had not reached the window's end when it was
    /// spooled (the probe stopped, or was slow); events may be missing.
    pub complete: bool,
}

/// A tenant's figures in one window.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TenantFigures {
    pub name: String,
    /// Its vCPUs' (or threads') time stolen: runnable, not running (%).
    /// None (n/a) in a window too short, or with too little of its time
    /// observed, for a share to mean anything
    /// ([`crate::analysis::MIN_SHARE_WINDOW_NS`]).
    #[serde(default)]
    pub steal_pct: Option<f64>,
    /// Its busiest 100 ms of CPU use, in CPUs.
    pub peak_100ms_cpus: Option<f64>,
    /// Time with at least one of its threads waiting for a CPU (%); None
    /// (n/a) in a window too short for a share.
    #[serde(default)]
    pub contention_pct: Option<f64>,
    pub on_cpu_ns: u64,
    /// Functions by corrected time (on-CPU + blocked, steal removed), when
    /// the window has stack samples: (function, ns).
    pub functions: Vec<(String, u64)>,
    /// The stack samples' period, when there are functions: their times
    /// are counts of samples, whose own noise the anomaly check allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_period_ns: Option<u64>,
}

/// A departure from a tenant's recent history.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Anomaly {
    pub tenant: String,
    /// "steal_pct", "peak_100ms_cpus" or "function:<name>" (corrected ns).
    pub metric: String,
    pub value: f64,
    /// The history it departs from: its median, median absolute
    /// deviation and length.
    pub median: f64,
    pub mad: f64,
    pub history: usize,
    pub threshold: f64,
}

/// One window, analysed by a worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WindowResult {
    pub version: u32,
    pub host: String,
    pub id: String,
    pub start_realtime_ns: u64,
    pub duration_ns: u64,
    pub replayed: bool,
    /// The worker, and how long reading and analysing the window took.
    pub worker: String,
    pub analysis_ns: u64,
    /// How many times the window was delivered (more than 1: a worker
    /// died with it, or was too slow for the ack wait).
    pub delivered: u64,
    pub tenants: Vec<TenantFigures>,
    /// The window's pprof in the results bucket, when it had samples.
    pub pprof: Option<String>,
    pub anomalies: Vec<Anomaly>,
    pub notes: Vec<String>,
    pub dropped_by_agent: u64,
    pub agent_cpu_ns: u64,
    pub agent_rss_bytes: u64,
    pub agent_uptime_ns: u64,
    /// The agent's probes' late wake-ups in the window, explained on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<ProbeLateExplained>,
}

/// One probe's late wake-ups in a window, explained on the window's
/// recording.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProbeLateExplained {
    pub probe: String,
    /// The window's start on CLOCK_MONOTONIC: the events' times less it
    /// are their offsets into the window (wall clock: `start_realtime_ns`
    /// plus the offset).
    pub window_start_ns: u64,
    /// The probe's log had reached the window's end when it was spooled.
    pub complete: bool,
    /// Its late wake-ups explained (`late`: all in the window; the worst,
    /// at most [`LATE_SHOWN`], with their causes).
    pub explanation: ontime_explain::RunExplanation,
}

/// Worst events kept per probe and window in a result.
pub const LATE_SHOWN: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_one_subject_token() {
        assert!(check_host("plc-host_01").is_ok());
        for bad in ["", "a.b", "a b", "a*", "a>", &"x".repeat(65)] {
            assert!(check_host(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_notice_reads_back() {
        let n = WindowNotice {
            version: VERSION,
            host: "h1".into(),
            id: WindowNotice::id_of("h1", 42),
            start_realtime_ns: 42,
            duration_ns: 30_000_000_000,
            bytes: 10,
            targets: vec!["t0".into()],
            dropped: 0,
            replayed: true,
            agent_cpu_ns: 1,
            agent_rss_bytes: 2,
            agent_uptime_ns: 3,
            late: Vec::new(),
        };
        let back: WindowNotice = serde_json::from_slice(&serde_json::to_vec(&n).unwrap()).unwrap();
        assert_eq!(back, n);
        assert_eq!(back.id, "h1.42");
    }
}
