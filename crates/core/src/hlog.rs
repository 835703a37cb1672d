//! HdrHistogram interval logs (the Java `HistogramLogWriter` format that
//! HistogramLogAnalyzer and hdr-plot read), for long runs: one compressed
//! histogram per metric and interval, so the tail can be followed over time.

use crate::stats::LatencyHistogram;
use anyhow::{Context, Result};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

pub struct HlogFile {
    out: BufWriter<std::fs::File>,
    ser: V2DeflateSerializer,
}

impl HlogFile {
    /// Creates the log; `start` is the wall time of the run's start.
    pub fn create(path: &Path, comment: &str, start: SystemTime) -> Result<HlogFile> {
        let file =
            std::fs::File::create(path).with_context(|| format!("cannot create histogram log {}", path.display()))?;
        let mut h = HlogFile {
            out: BufWriter::new(file),
            ser: V2DeflateSerializer::new(),
        };
        IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .add_comment("values in nanoseconds")
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut h.out, &mut h.ser)?;
        Ok(h)
    }

    /// Appends one interval histogram; `offset` is from the run's start.
    pub fn write(&mut self, tag: &str, h: &LatencyHistogram, offset: Duration, length: Duration) -> Result<()> {
        // A builder without headers writes nothing when it begins, so one
        // can be made per interval over the same output.
        let mut w = IntervalLogWriterBuilder::new().begin_log_with(&mut self.out, &mut self.ser)?;
        w.write_histogram(h.inner(), offset, length, Tag::new(tag))
            .map_err(|e| anyhow::anyhow!("cannot write histogram log: {e}"))?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().context("cannot flush histogram log")
    }
}

/// Joins the per-thread parts of numbered intervals into whole intervals.
///
/// Probe threads hand over one interval's statistics when they move past it
/// (never allocating on their hot path); an interval is whole, and may be
/// logged, once every thread has handed over a later one or finished. Used
/// by the crawler's and the cyclic probe's histogram logs.
#[derive(Debug)]
pub struct IntervalMerge<T> {
    pending: std::collections::BTreeMap<u64, T>,
    /// Per thread: the first interval it may still report (u64::MAX: done).
    reached: Vec<u64>,
}

impl<T: Default> IntervalMerge<T> {
    pub fn new(threads: usize) -> Self {
        IntervalMerge {
            pending: Default::default(),
            reached: vec![0; threads],
        }
    }

    /// Thread `thread` hands over its part of interval `index`; `merge` adds
    /// it to the interval's total.
    pub fn add(&mut self, thread: usize, index: u64, merge: impl FnOnce(&mut T)) {
        merge(self.pending.entry(index).or_default());
        if let Some(r) = self.reached.get_mut(thread) {
            *r = (*r).max(index.saturating_add(1));
        }
    }

    /// Thread `thread` will report no more intervals.
    pub fn finish(&mut self, thread: usize) {
        if let Some(r) = self.reached.get_mut(thread) {
            *r = u64::MAX;
        }
    }

    /// The earliest interval that every thread has moved past, if any.
    pub fn pop_whole(&mut self) -> Option<(u64, T)> {
        let upto = self.reached.iter().copied().min().unwrap_or(u64::MAX);
        match self.pending.first_key_value() {
            Some((&i, _)) if i < upto => self.pending.pop_first(),
            _ => None,
        }
    }

    /// The earliest interval still held, whole or not (at the end of a run).
    pub fn pop_any(&mut self) -> Option<(u64, T)> {
        self.pending.pop_first()
    }
}

/// The largest histogram log read back whole: a week's run at 1 s
/// intervals with three metrics (about 0.5 KB an interval) is under 1 GiB.
pub const MAX_LOG_BYTES: u64 = 1 << 30;

/// Reads every interval tagged `tag` in an interval log and adds them up.
/// The log is opened under the input rule (a regular file of at most
/// [`MAX_LOG_BYTES`], never a FIFO or device, which would block or never
/// end).
pub fn read_merged(path: &Path, tag: &str) -> Result<LatencyHistogram> {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let data = crate::fsio::read_input(path, "histogram log", MAX_LOG_BYTES)?;
    let mut out = LatencyHistogram::new();
    let mut de = Deserializer::new();
    for entry in IntervalLogIterator::new(&data) {
        let Ok(LogEntry::Interval(ilh)) = entry else { continue };
        if ilh.tag().map(|t| t.as_str() == tag) != Some(true) {
            continue;
        }
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(ilh.encoded_histogram())
            .with_context(|| format!("{}: an interval is not valid base64", path.display()))?;
        let h: hdrhistogram::Histogram<u64> = de
            .deserialize(&mut &bytes[..])
            .map_err(|e| anyhow::anyhow!("{}: cannot decode an interval: {e:?}", path.display()))?;
        out.add_raw(&h);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    #[test]
    fn an_interval_is_whole_once_every_thread_moved_past_it() {
        let mut m: IntervalMerge<u64> = IntervalMerge::new(2);
        m.add(0, 0, |t| *t += 1);
        m.add(0, 1, |t| *t += 1);
        assert_eq!(m.pop_whole(), None, "thread 1 has not reported interval 0");
        m.add(1, 0, |t| *t += 10);
        assert_eq!(m.pop_whole(), Some((0, 11)));
        assert_eq!(m.pop_whole(), None, "thread 1 may still add to interval 1");
        m.finish(1);
        assert_eq!(m.pop_whole(), Some((1, 1)));
        m.add(0, 5, |t| *t += 1);
        assert_eq!(
            m.pop_whole(),
            Some((5, 1)),
            "a thread hands over an interval it is done with"
        );
        let mut m: IntervalMerge<u64> = IntervalMerge::new(2);
        m.add(0, 3, |t| *t += 1);
        assert_eq!(m.pop_whole(), None, "thread 1 has reported nothing yet");
        assert_eq!(m.pop_any(), Some((3, 1)), "at the end, whatever is held");
        assert_eq!(m.pop_any(), None);
    }

    #[test]
    fn writes_readable_intervals() {
        let dir = std::env::temp_dir().join(format!("ontime-hlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.hlog");
        let mut log = HlogFile::create(&path, "test", SystemTime::now()).unwrap();
        let mut h = LatencyHistogram::new();
        h.record(1000);
        log.write("send_lag", &h, Duration::from_secs(0), Duration::from_secs(1))
            .unwrap();
        log.write("send_lag", &h, Duration::from_secs(1), Duration::from_secs(1))
            .unwrap();
        log.flush().unwrap();
        let data = std::fs::read(&path).unwrap();
        let n = IntervalLogIterator::new(&data)
            .filter(|e| matches!(e, Ok(LogEntry::Interval(_))))
            .count();
        assert_eq!(n, 2);
        let merged = read_merged(&path, "send_lag").unwrap();
        assert_eq!(merged.len(), 2);
        assert_eq!(read_merged(&path, "other").unwrap().len(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A histogram log named in a results directory is input: a FIFO once
    /// blocked `sim calibrate` for ever, /dev/zero behind a symlink was
    /// read until memory ran out. Both are refused at once.
    #[test]
    fn a_log_that_is_not_a_regular_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("t0.hlog");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let zero = dir.path().join("t1.hlog");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for p in [&fifo, &zero] {
            let e = read_merged(p, "send_lag").unwrap_err();
            assert!(e.downcast_ref::<crate::BadInput>().is_some(), "{e:#}");
            assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
        }
    }
}
