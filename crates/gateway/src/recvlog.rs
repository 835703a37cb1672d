//! The gateway's receive-time log: one line per point read, streamed to disk
//! off the request path, and the interval-error analysis that reads it back.
//!
//! Format (text, one record per line, `#` lines are comments):
//!
//! ```text
//! # ontime gateway receive log v4: recv_ns building point lead poll planned_ns user_ns
//! 1234567890123 b0 17 1 42 1234567000000 1234567951000
//! 1234567890123 b0 18 0 42 1234567000000 1234567951000
//! # end: 2 lines
//! ```
//!
//! The end mark is written when the log is closed cleanly and counts the
//! records: a log cut by a kill or a full disk lacks it (and may end in a
//! cut line), and its analysis says it is partial instead of passing it
//! off as the whole run. v4 is v3 with the end mark; a log of an older
//! version is analysed as before and said to be of unknown completeness.
//!
//! `lead` is 1 for the first point named in a request. Points read by one
//! request share its receive time, so the analysis counts intervals of lead
//! points only: one sample per poll, as the crawler counts them. `poll` and
//! `planned_ns` come from the crawler's `X-Ontime-Poll` header ("-" when a
//! client does not send it, or, for `planned_ns`, when the crawler's clock
//! is not this host's). `recv_ns` is the kernel's receive stamp where the
//! connection had one, else the handler's; `user_ns` is always the
//! handler's, so the analysis can say how far the two differ. v1 (four
//! columns), v2 (six) and v3 logs are still read.
//!
//! With poll numbers the analysis applies the crawler's own rule: a poll
//! that never arrived, or arrived later than its planned time + the
//! timeout (the crawler had given up on it), is missed and one sample of a
//! full period; otherwise its interval error is measured against the
//! previous measured poll, `m` periods apart by poll number. Without them it
//! infers `m` from the gap, which is right only while jitter stays below
//! half a period.

use anyhow::{bail, Context, Result};
use ontime_core::interval;
use ontime_core::stats::{LatencyHistogram, Summary};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Read, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

pub const HEADER: &str = "# ontime gateway receive log v4: recv_ns building point lead poll planned_ns user_ns";
/// What the header says before its version number.
const HEADER_PREFIX: &str = "# ontime gateway receive log v";
/// The first version whose logs end with an end mark.
const END_MARK_SINCE: u32 = 4;
/// The end mark, followed by the count of records: `# end: 1234 lines`.
pub const END_MARK: &str = "# end: ";

/// The largest receive log analysed: about 16 GiB of lines, far past a
/// lab run's (a 1 h run at 1000 polls/s of 10 points is about 2 GiB).
pub const MAX_LOG_BYTES: u64 = 16 << 30;
/// Polls (lead points) one analysis holds in memory, 40 bytes each plus
/// the growth of their vectors: at most about 800 MB. 10 million is
/// 2.8 h at 1000 polls/s.
pub const MAX_LOG_POLLS: u64 = 10_000_000;
/// The longest line read: a record is under 120 bytes, the header under
/// 100, so anything longer is not a receive log.
const MAX_LINE_BYTES: usize = 4096;

/// One request's worth of log lines.
pub struct LogBatch {
    pub recv_ns: u64,
    /// The handler's own stamp (equal to `recv_ns` without a kernel stamp).
    pub user_ns: u64,
    pub building: usize,
    pub points: Vec<u32>,
    pub poll: Option<crate::wire::PollId>,
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
    let mut records = 0u64;
    let mut last_flush = std::time::Instant::now();
    loop {
        let wait = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
        match rx.recv_timeout(wait) {
            Ok(b) => {
                let name = &building_names[b.building];
                let (poll, planned) = match b.poll {
                    Some(id) => (id.index.to_string(), id.planned_ns.map(|p| p.to_string())),
                    None => ("-".into(), None),
                };
                let planned = planned.as_deref().unwrap_or("-");
                for (i, p) in b.points.iter().enumerate() {
                    writeln!(
                        w,
                        "{} {} {} {} {poll} {planned} {}",
                        b.recv_ns,
                        name,
                        p,
                        u8::from(i == 0),
                        b.user_ns
                    )?;
                }
                records += b.points.len() as u64;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if last_flush.elapsed() >= FLUSH_EVERY {
            w.flush()?;
            last_flush = std::time::Instant::now();
        }
    }
    // Only a log closed here, every record written, gets its end mark.
    writeln!(w, "{END_MARK}{records} lines")?;
    w.flush()?;
    w.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// Interval error computed from a receive log.
#[derive(Debug, Serialize)]
pub struct LogAnalysis {
    pub period_ns: u64,
    pub points: usize,
    pub lines: u64,
    /// How missed polls were found: "poll numbers" (exact, the crawler's
    /// rule) or "gaps" (inferred from receive times: v1 logs, other
    /// clients).
    pub method: &'static str,
    /// Polls counted missed: never received, or (with the crawler's
    /// planned times on this host's clock) received after planned +
    /// timeout.
    pub missed: u64,
    /// Of `missed`, those that did arrive, too late.
    pub arrived_late: u64,
    pub interval_error: Summary,
    /// Whether the log is known to be whole: it ends with the end mark the
    /// gateway writes when it closes the log, counting every record.
    pub complete: bool,
    /// When not complete, why: "partial: ..." for a log cut by a kill or
    /// a full disk (the analysis covers the run up to the cut), "unknown:
    /// ..." for a log older than end marks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Handler stamp minus receive stamp per lead point (v3 logs): zero
    /// where the kernel gave no stamp, else the error a user-space stamp
    /// carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_minus_recv: Option<Summary>,
    /// Each building's polls judged on their own (the first
    /// [`MAX_BUILDINGS_JUDGED`] by name; all are in the pooled figures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buildings: Vec<BuildingJudgement>,
    #[serde(skip)]
    pub histogram: LatencyHistogram,
}

/// Buildings judged on their own at most.
pub const MAX_BUILDINGS_JUDGED: usize = 256;

/// One building's polls, judged from their receive stamps.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BuildingJudgement {
    pub building: String,
    pub missed: u64,
    pub interval_error: Summary,
}

impl ontime_core::export::TextReport for LogAnalysis {
    fn text(&self) -> String {
        let mut t = format!(
            "ontime gateway analyze: {} lines, {} lead points, period {}, missed {} ({} arrived too late; by {})\n{}\n{}\n",
            self.lines,
            self.points,
            ontime_core::duration::format_ns(self.period_ns),
            self.missed,
            self.arrived_late,
            self.method,
            ontime_core::stats::Summary::text_header(),
            self.interval_error.text_row("interval error")
        );
        if let Some(why) = &self.incomplete {
            t += &format!("{why}\n");
        }
        t
    }
}

/// How whole a log is, from what its reading found.
struct Ending {
    /// The header's version (None: no header, as in v1 logs).
    version: Option<u32>,
    /// The end mark's count, and the records read before it.
    end: Option<(u64, u64)>,
    /// The last line had no newline: cut mid-way.
    cut: bool,
}

impl Ending {
    /// None when the log is whole, else why not (a "partial: " or an
    /// "unknown: " sentence).
    fn incomplete(&self, records: u64) -> Option<String> {
        let marked = self.version.is_some_and(|v| v >= END_MARK_SINCE);
        match self.end {
            _ if self.cut => {
                Some("partial: the log ends in a cut line, without its end mark (cut by a kill or a full disk)".into())
            }
            _ if !marked => Some(format!(
                "unknown: a {} log has no end mark, so whether it is whole cannot be told",
                self.version
                    .map_or_else(|| String::from("headerless (v1)"), |v| format!("v{v}"))
            )),
            None => Some("partial: the log ends without its end mark (cut by a kill or a full disk)".into()),
            Some((counted, before)) if counted != before || before != records => Some(format!(
                "partial: its end mark counts {counted} lines, the log holds {records} (lines lost, or logs joined)"
            )),
            Some(_) => None,
        }
    }
}

/// `# ontime gateway receive log vN: ...` -> N.
fn header_version(line: &str) -> Option<u32> {
    line.strip_prefix(HEADER_PREFIX)?.split(':').next()?.trim().parse().ok()
}

/// `# end: N lines` -> N.
fn end_mark(line: &str) -> Option<u64> {
    line.strip_prefix(END_MARK)?.strip_suffix(" lines")?.parse().ok()
}

/// One lead point's reception.
#[derive(Clone, Copy)]
struct Reception {
    recv_ns: u64,
    poll: Option<u64>,
    planned_ns: Option<u64>,
}

/// Reads a receive log and computes the interval error of every lead point.
/// `timeout_ns`: after how long past its planned time the crawler gave a
/// poll up (its default is the period).
///
/// The log is input: opened under the input rule (a regular file of at
/// most [`MAX_LOG_BYTES`]; a FIFO or device is refused, never read), read
/// a line of at most 4 KiB at a time, holding at most [`MAX_LOG_POLLS`]
/// polls. A log that lacks its end mark is analysed up to where it ends
/// and said to be partial.
pub fn analyze(path: &Path, period_ns: u64, timeout_ns: u64, threshold_ns: Option<u64>) -> Result<LogAnalysis> {
    let (file, _) = ontime_core::fsio::open_input(path, "receive log", MAX_LOG_BYTES)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut series: HashMap<(String, u32), Vec<Reception>> = HashMap::new();
    let mut lines = 0u64;
    let mut polls = 0u64;
    let mut gap: Option<LatencyHistogram> = None;
    let mut ending = Ending {
        version: None,
        end: None,
        cut: false,
    };
    let mut buf = Vec::with_capacity(256);
    let mut n = 0usize;
    loop {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("{}: cannot read line {}", path.display(), n + 1))?;
        if read == 0 {
            break;
        }
        n += 1;
        if buf.last() != Some(&b'\n') {
            if buf.len() > MAX_LINE_BYTES {
                bail!(
                    "{}:{n}: a line longer than {MAX_LINE_BYTES} bytes: not a receive log",
                    path.display()
                );
            }
            // Only the last line can lack its newline: the writer ends
            // every line with one, so this one was cut mid-way (a kill, a
            // full disk) and its fields cannot be trusted.
            ending.cut = true;
            break;
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            bail!("{}:{n}: not text: not a receive log", path.display());
        };
        let line = line.trim_end_matches(['\n', '\r']);
        if line.starts_with('#') {
            if n == 1 {
                ending.version = header_version(line);
            } else if let Some(counted) = end_mark(line) {
                ending.end = Some((counted, lines));
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        lines += 1;
        let bad = || {
            // Quoted and cut: the error stays one line whatever the log holds.
            let shown: String = line.chars().take(80).collect();
            anyhow::anyhow!("{}:{n}: not a receive-log line: {shown:?}", path.display())
        };
        let mut f = line.split_ascii_whitespace();
        let (Some(t), Some(b), Some(p), Some(lead)) = (f.next(), f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        if lead != "1" {
            continue;
        }
        let opt = |v: Option<&str>| -> Result<Option<u64>> {
            match v {
                None | Some("-") => Ok(None),
                Some(x) => x.parse().map(Some).map_err(|_| bad()),
            }
        };
        let (poll, planned_ns, user_ns) = (opt(f.next())?, opt(f.next())?, opt(f.next())?);
        let r = Reception {
            recv_ns: t.parse().map_err(|_| bad())?,
            poll,
            planned_ns,
        };
        let p: u32 = p.parse().map_err(|_| bad())?;
        polls += 1;
        if polls > MAX_LOG_POLLS {
            bail!(
                "{}: more than {MAX_LOG_POLLS} polls (lead points), more than one analysis holds: analyse a shorter run",
                path.display()
            );
        }
        if let Some(u) = user_ns {
            gap.get_or_insert_with(LatencyHistogram::new)
                .record(u.saturating_sub(r.recv_ns));
        }
        series.entry((b.to_string(), p)).or_default().push(r);
    }
    // What cannot be true of one run's log is refused, not counted: a
    // forged or corrupt stamp would otherwise become billions of misses.
    let stamps = series.values().flatten().map(|r| r.recv_ns);
    if let (Some(first), Some(last)) = (stamps.clone().min(), stamps.max()) {
        if last - first > ontime_core::limits::MAX_DURATION_NS {
            bail!(
                "{}: receive times span {}, longer than any run (at most {}): a corrupt stamp, or logs of several runs joined",
                path.display(),
                ontime_core::duration::format_ns(last - first),
                ontime_core::duration::format_ns(ontime_core::limits::MAX_DURATION_NS)
            );
        }
    }
    let mut hist = LatencyHistogram::new();
    let (mut missed, mut late) = (0u64, 0u64);
    let exact = !series.is_empty() && series.values().flatten().all(|r| r.poll.is_some());
    // Each building judged on its own too (a lab tenant polls one), the
    // first MAX_BUILDINGS_JUDGED by name; the rest only pooled.
    let mut keys: Vec<(String, u32)> = series.keys().cloned().collect();
    keys.sort_unstable();
    let mut own: std::collections::BTreeMap<String, (LatencyHistogram, u64)> = Default::default();
    for key in keys {
        let (building, point) = &key;
        let Some(rs) = series.get_mut(&key) else { continue };
        if own.len() < MAX_BUILDINGS_JUDGED && !own.contains_key(building) {
            own.insert(building.clone(), (LatencyHistogram::new(), 0));
        }
        let (into, building_missed) = match own.get_mut(building) {
            Some((h, m)) => (h, Some(m)),
            None => (&mut hist, None),
        };
        let m = if exact {
            let (m, l) = by_poll_number(rs, period_ns, timeout_ns, into)
                .map_err(|e| anyhow::anyhow!("{}: building {building} point {point}: {e}", path.display()))?;
            late += l;
            m
        } else {
            let mut times: Vec<u64> = rs.iter().map(|r| r.recv_ns).collect();
            times.sort_unstable();
            interval::from_timestamps(&times, period_ns, into)
        };
        missed += m;
        if let Some(bm) = building_missed {
            *bm += m;
        }
    }
    let buildings = own
        .into_iter()
        .map(|(building, (h, missed))| {
            hist.add(&h);
            BuildingJudgement {
                building,
                missed,
                interval_error: h.summary(threshold_ns),
            }
        })
        .collect();
    let incomplete = ending.incomplete(lines);
    Ok(LogAnalysis {
        period_ns,
        points: series.len(),
        lines,
        method: if exact { "poll numbers" } else { "gaps" },
        missed,
        arrived_late: late,
        interval_error: hist.summary(threshold_ns),
        complete: incomplete.is_none(),
        incomplete,
        user_minus_recv: gap.map(|g| g.summary(None)),
        buildings,
        histogram: hist,
    })
}

/// The crawler's rule on one point's receptions, by poll number. Returns
/// (missed, of which arrived late).
fn by_poll_number(
    rs: &mut [Reception],
    period_ns: u64,
    timeout_ns: u64,
    hist: &mut LatencyHistogram,
) -> Result<(u64, u64)> {
    rs.sort_by_key(|r| (r.poll, r.recv_ns));
    let mut tracker = interval::IntervalTracker::default();
    let (mut missed, mut late) = (0u64, 0u64);
    let mut next: Option<u64> = None;
    let mut previous: Option<(u64, u64)> = None;
    for r in rs.iter() {
        let k = r.poll.unwrap_or(0);
        // A poll received twice (a resend after a closed connection)
        // counts once, at its first arrival.
        if next.is_some_and(|n| k < n) {
            continue;
        }
        // Poll k is planned (k - j) periods after poll j: it cannot arrive
        // much sooner than that after j did (j may have been late, by its
        // timeout and a minute more at most).
        if let Some((j, at)) = previous {
            let ahead = (k - j).checked_mul(period_ns);
            let room = r
                .recv_ns
                .saturating_sub(at)
                .saturating_add(timeout_ns)
                .saturating_add(60_000_000_000);
            if ahead.is_none_or(|a| a > room) {
                bail!(
                    "poll numbers jump from {j} to {k} in {} of receive time: not possible at a period of {} (corrupt log?)",
                    ontime_core::duration::format_ns(r.recv_ns.saturating_sub(at)),
                    ontime_core::duration::format_ns(period_ns)
                );
            }
        }
        previous = Some((k, r.recv_ns));
        // Polls between the previous one and this never arrived.
        let gap = next.map_or(0, |n| k - n);
        hist.record_n(period_ns, gap);
        missed += gap;
        next = Some(k + 1);
        if r.planned_ns.is_some_and(|p| r.recv_ns > p.saturating_add(timeout_ns)) {
            tracker.missed(k, period_ns, hist);
            missed += 1;
            late += 1;
        } else {
            let _ = tracker.measured(k, r.recv_ns, period_ns, hist);
        }
    }
    Ok((missed, late))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defect 11: a crafted log gave "missed 18446744073709551614".
    #[test]
    fn what_cannot_be_true_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recv.log");
        let p = 1_000_000_000u64;
        let analyze_text = |text: &str| {
            std::fs::write(&path, text).unwrap();
            analyze(&path, p, p, None).map(|a| a.missed)
        };
        // Poll numbers that jump further than the receive times allow.
        let e = analyze_text("1000000000 b0 0 1 0 - -\n2000000000 b0 0 1 18446744073709551615 - -\n").unwrap_err();
        assert!(format!("{e:#}").contains("poll numbers jump"), "{e:#}");
        // Receive stamps spanning more than any run.
        let e = analyze_text("0 b0 0 1\n18446744073709551615 b0 0 1\n").unwrap_err();
        assert!(format!("{e:#}").contains("longer than any run"), "{e:#}");
        // A true gap of two polls in two periods is counted.
        assert_eq!(analyze_text("0 b0 0 1 0 - -\n3000000000 b0 0 1 3 - -\n").unwrap(), 2);
    }

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
                user_ns: k * p + jitter + 1000,
                building: 0,
                points: vec![10, 11],
                poll: None,
            })
            .unwrap();
        }
        drop(tx);
        w.finish().unwrap();
        let a = analyze(&path, p, p, None).unwrap();
        assert_eq!(a.lines, 8);
        assert_eq!(a.points, 1);
        assert_eq!((a.method, a.missed), ("gaps", 1));
        assert_eq!(a.interval_error.count, 4);
        assert!(a.complete && a.incomplete.is_none(), "{:?}", a.incomplete);
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("\n# end: 8 lines\n"));
    }

    /// A log cut by kill -9 or a full disk was analysed as if whole.
    #[test]
    fn a_log_without_its_end_mark_is_partial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recv.log");
        let p = 1_000_000_000u64;
        let analyze_text = |text: &str| {
            std::fs::write(&path, text).unwrap();
            analyze(&path, p, p, None).unwrap()
        };
        let h = HEADER;
        let whole = analyze_text(&format!(
            "{h}\n0 b0 0 1 0 - -\n1000000000 b0 0 1 1 - -\n# end: 2 lines\n"
        ));
        assert!(whole.complete, "{:?}", whole.incomplete);
        // Killed: no end mark; the lines there are still analysed.
        let killed = analyze_text(&format!("{h}\n0 b0 0 1 0 - -\n1000000000 b0 0 1 1 - -\n"));
        assert!(!killed.complete);
        assert_eq!(killed.interval_error.count, 1);
        let why = killed.incomplete.unwrap();
        assert!(why.starts_with("partial: the log ends without its end mark"), "{why}");
        use ontime_core::export::TextReport;
        let cut = analyze_text(&format!(
            "{h}\n0 b0 0 1 0 - -\n1000000000 b0 0 1 1 - -\n2000000000 b0 0 1 2 -"
        ));
        assert_eq!((cut.lines, cut.complete), (2, false));
        assert!(
            cut.text().contains("partial: the log ends in a cut line"),
            "{}",
            cut.text()
        );
        let short = analyze_text(&format!("{h}\n0 b0 0 1 0 - -\n# end: 5 lines\n"));
        assert!(short
            .incomplete
            .unwrap()
            .contains("end mark counts 5 lines, the log holds 1"));
        // Logs older than end marks are analysed, their completeness unknown.
        let v3 = analyze_text(
            "# ontime gateway receive log v3: recv_ns building point lead poll planned_ns user_ns\n0 b0 0 1 0 - -\n",
        );
        assert!(!v3.complete && v3.incomplete.unwrap().starts_with("unknown: a v3 log"));
        let v1 = analyze_text("0 b0 0 1\n");
        assert!(v1.incomplete.unwrap().starts_with("unknown: a headerless (v1) log"));
    }

    /// The log is input: a FIFO is refused at once, a line without end
    /// is not read into memory.
    #[test]
    fn the_log_is_read_under_the_input_rule() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("recv.log");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = analyze(&fifo, 1_000_000_000, 1_000_000_000, None).unwrap_err();
        assert!(e.downcast_ref::<ontime_core::BadInput>().is_some(), "{e:#}");
        let long = dir.path().join("long.log");
        std::fs::write(&long, vec![b'1'; 10_000]).unwrap();
        let e = analyze(&long, 1_000_000_000, 1_000_000_000, None).unwrap_err();
        assert!(format!("{e:#}").contains("a line longer than 4096 bytes"), "{e:#}");
    }

    /// With poll numbers, a burst of late arrivals (a stalled gateway
    /// answering its backlog) is what the crawler saw: late polls missed,
    /// nothing invented; gap inference would count others.
    #[test]
    fn poll_numbers_apply_the_crawlers_rule() {
        use crate::wire::PollId;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recv.log");
        let w = LogWriter::create(&path, vec!["b0".into()]).unwrap();
        let tx = w.sender();
        let p = 1_000_000_000u64;
        // Polls 0..3 on time; 4 and 5 held up until 6.0 s (received then,
        // too late); 6 on time; 7 never arrives; 8 on time.
        let recv = [
            (0, 0),
            (1, p),
            (2, 2 * p),
            (3, 3 * p),
            (4, 6 * p),
            (5, 6 * p + 1000),
            (6, 6 * p + 2000),
            (8, 8 * p),
        ];
        for (k, t) in recv {
            tx.send(LogBatch {
                recv_ns: t,
                user_ns: t,
                building: 0,
                points: vec![1],
                poll: Some(PollId {
                    index: k,
                    planned_ns: Some(k * p),
                }),
            })
            .unwrap();
        }
        drop(tx);
        w.finish().unwrap();
        let a = analyze(&path, p, p, None).unwrap();
        assert_eq!(a.method, "poll numbers");
        assert_eq!((a.missed, a.arrived_late), (3, 2));
        // One sample per poll after the first: 8.
        assert_eq!(a.interval_error.count, 8);
        assert_eq!(a.histogram.count_above(p / 2), 3);
    }
}
