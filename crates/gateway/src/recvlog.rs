//! The gateway's receive-time log: one line per point read, streamed to disk
//! off the request path, and the interval-error analysis that reads it back.
//!
//! Format (text, one record per line, `#` lines are comments):
//!
//! ```text
//! # ontime gateway receive log v1: recv_ns building point lead
//! 1234567890123 b0 17 1
//! 1234567890123 b0 18 0
//! ```
//!
//! `lead` is 1 for the first point named in a request. Points read by one
//! request share its receive time, so the analysis counts intervals of lead
//! points only: one sample per poll, as the crawler counts them.

use anyhow::{Context, Result};
use ontime_core::interval;
use ontime_core::stats::{LatencyHistogram, Summary};
use serde::Serialize;
use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

pub const HEADER: &str = "# ontime gateway receive log v1: recv_ns building point lead";

/// One request's worth of log lines.
pub struct LogBatch {
    pub recv_ns: u64,
    pub building: usize,
    pub points: Vec<u32>,
}

/// How long a batch may sit in the writer's buffer: a killed gateway loses
/// at most this much of its log, busy or idle.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// A thread that writes batches to the log, flushing at least every
/// [`FLUSH_EVERY`]. A write error (a full disk) is kept, with the file's
/// name, for [`LogWriter::failure`] and [`LogWriter::finish`]: the gateway
/// must stop and say so, not go on measuring into nothing.
pub struct LogWriter {
    tx: Option<mpsc::Sender<LogBatch>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl LogWriter {
    pub fn create(path: &Path, building_names: Vec<String>) -> Result<LogWriter> {
        let file =
            std::fs::File::create(path).with_context(|| format!("cannot create receive log {}", path.display()))?;
        let (tx, rx) = mpsc::channel::<LogBatch>();
        let failure = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (fail, shown) = (failure.clone(), path.display().to_string());
        let thread = std::thread::Builder::new()
            .name("gw-log".into())
            .spawn(move || -> Result<()> {
                let r = write_log(file, &rx, &building_names);
                if let Err(e) = &r {
                    let msg = format!("cannot write receive log {shown}: {e}");
                    if let Ok(mut f) = fail.lock() {
                        *f = Some(msg.clone());
                    }
                    // Keep receiving so senders never notice; nothing more
                    // is written.
                    while rx.recv().is_ok() {}
                    anyhow::bail!(msg);
                }
                Ok(())
            })
            .context("cannot start the receive-log thread")?;
        Ok(LogWriter {
            tx: Some(tx),
            thread: Some(thread),
            failure,
        })
    }

    pub fn sender(&self) -> mpsc::Sender<LogBatch> {
        self.tx.clone().expect("sender exists until finish")
    }

    /// The write error that stopped the log, if one did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Closes the log after every sender is gone and everything is written.
    pub fn finish(mut self) -> Result<()> {
        self.tx.take();
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| anyhow::anyhow!("receive-log thread panicked"))?,
            None => Ok(()),
        }
    }
}

fn write_log(file: std::fs::File, rx: &mpsc::Receiver<LogBatch>, building_names: &[String]) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(1 << 20, file);
    writeln!(w, "{HEADER}")?;
    w.flush()?;
    let mut last_flush = std::time::Instant::now();
    loop {
        let wait = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
        match rx.recv_timeout(wait) {
            Ok(b) => {
                let name = &building_names[b.building];
                for (i, p) in b.points.iter().enumerate() {
                    writeln!(w, "{} {} {} {}", b.recv_ns, name, p, u8::from(i == 0))?;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            w.flush()?;
            last_flush = std::time::Instant::now();
        }
    }
    w.flush()?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// Interval error computed from a receive log.
#[derive(Debug, Serialize)]
pub struct LogAnalysis {
    pub period_ns: u64,
    pub points: usize,
    pub lines: u64,
    /// Measurements that never reached the gateway, inferred from gaps.
    pub inferred_missed: u64,
    pub interval_error: Summary,
    #[serde(skip)]
    pub histogram: LatencyHistogram,
}

/// Reads a receive log and computes the interval error of every lead point.
pub fn analyze(path: &Path, period_ns: u64, threshold_ns: Option<u64>) -> Result<LogAnalysis> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open receive log {}", path.display()))?;
    let mut series: HashMap<(String, u32), Vec<u64>> = HashMap::new();
    let mut lines = 0u64;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}: cannot read line {}", path.display(), n + 1))?;
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        lines += 1;
        let bad = || anyhow::anyhow!("{}:{}: not a receive-log line: '{line}'", path.display(), n + 1);
        let mut f = line.split_ascii_whitespace();
        let (Some(t), Some(b), Some(p), Some(lead)) = (f.next(), f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        if lead != "1" {
            continue;
        }
        let t: u64 = t.parse().map_err(|_| bad())?;
        let p: u32 = p.parse().map_err(|_| bad())?;
        series.entry((b.to_string(), p)).or_default().push(t);
    }
    let mut hist = LatencyHistogram::new();
    let mut missed = 0;
    for times in series.values_mut() {
        times.sort_unstable();
        missed += interval::from_timestamps(times, period_ns, &mut hist);
    }
    Ok(LogAnalysis {
        period_ns,
        points: series.len(),
        lines,
        inferred_missed: missed,
        interval_error: hist.summary(threshold_ns),
        histogram: hist,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_analyzes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recv.log");
        let w = LogWriter::create(&path, vec!["b0".into()]).unwrap();
        let tx = w.sender();
        let p = 1_000_000_000u64;
        for (k, jitter) in [(0u64, 0u64), (1, 1_000), (2, 0), (4, 2_000)] {
            tx.send(LogBatch {
                recv_ns: k * p + jitter,
                building: 0,
                points: vec![10, 11],
            })
            .unwrap();
        }
        drop(tx);
        w.finish().unwrap();
        let a = analyze(&path, p, None).unwrap();
        assert_eq!(a.lines, 8);
        assert_eq!(a.points, 1);
        assert_eq!(a.inferred_missed, 1);
        assert_eq!(a.interval_error.count, 4);
    }
}
