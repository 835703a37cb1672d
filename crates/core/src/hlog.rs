//! HdrHistogram interval logs (the Java `HistogramLogWriter` format that
//! HistogramLogAnalyzer and hdr-plot read), for long runs: one compressed
//! histogram per metric and interval, so the tail can be followed over time.

use crate::stats::LatencyHistogram;
use anyhow::{Context, Result};
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// An interval log being written. Every error names the file, so a full
/// disk says which log it cut.
pub struct HlogFile {
    out: BufWriter<std::fs::File>,
    ser: V2DeflateSerializer,
    path: PathBuf,
}

impl HlogFile {
    /// Creates the log; `start` is the wall time of the run's start.
    pub fn create(path: &Path, comment: &str, start: SystemTime) -> Result<HlogFile> {
        let file =
            std::fs::File::create(path).with_context(|| format!("cannot create histogram log {}", path.display()))?;
        let mut h = HlogFile {
            out: BufWriter::new(file),
            ser: V2DeflateSerializer::new(),
            path: path.to_path_buf(),
        };
        IntervalLogWriterBuilder::new()
            .add_comment(comment)
            .add_comment("values in nanoseconds")
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut h.out, &mut h.ser)
            .with_context(|| format!("cannot write histogram log {}", path.display()))?;
        Ok(h)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one interval histogram; `offset` is from the run's start.
    pub fn write(&mut self, tag: &str, h: &LatencyHistogram, offset: Duration, length: Duration) -> Result<()> {
        // A builder without headers writes nothing when it begins, so one
        // can be made per interval over the same output.
        let mut w = IntervalLogWriterBuilder::new()
            .begin_log_with(&mut self.out, &mut self.ser)
            .with_context(|| format!("cannot write histogram log {}", self.path.display()))?;
        w.write_histogram(h.inner(), offset, length, Tag::new(tag))
            .map_err(|e| anyhow::anyhow!("cannot write histogram log {}: {e}", self.path.display()))?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .with_context(|| format!("cannot write histogram log {}", self.path.display()))
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

/// The largest histogram log read: a week's run (the longest any verb
/// makes) logs a few tags a second at a few hundred bytes each, under
/// 1 GiB. The log is read a line at a time, so this bounds time, not memory.
pub const MAX_HLOG_BYTES: u64 = 2 << 30;

/// The longest line of a histogram log: one interval of ontime's
/// histograms (3 digits, up to an hour) encodes to under 400 KiB even with
/// every bucket counted.
pub const MAX_HLOG_LINE_BYTES: u64 = 1 << 20;

/// One interval's histogram, decompressed: its V2 encoding takes at most
/// 9 bytes per bucket, about 300 KiB for ontime's histograms.
const MAX_INTERVAL_BYTES: u64 = 4 << 20;

/// Reads every interval tagged `tag` in an interval log and adds them up.
///
/// The log is input (a results directory may come from anywhere): it is
/// opened under the input rule (a regular file of at most
/// [`MAX_HLOG_BYTES`]), read a line at a time, and every interval is
/// checked before it is decoded, so memory stays bounded whatever the file
/// claims. A line that is neither a comment nor an interval, or an
/// interval that does not decode, is [`crate::BadInput`] naming the file
/// and the line. A last line without its newline (a log cut by a kill) is
/// left out: what was written whole counts.
pub fn read_merged(path: &Path, tag: &str) -> Result<LatencyHistogram> {
    use base64::Engine;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    use std::io::{BufRead, Read};
    let (file, _) = crate::fsio::open_input(path, "histogram log", MAX_HLOG_BYTES)?;
    let bad = |what: String| crate::bad_input(format!("{} is not a valid histogram log: {what}", path.display()));
    let mut reader = std::io::BufReader::new(file.take(MAX_HLOG_BYTES));
    let mut out = LatencyHistogram::new();
    let mut de = Deserializer::new();
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        (&mut reader)
            .take(MAX_HLOG_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| crate::bad_input(format!("cannot read histogram log {}: {e}", path.display())))?;
        if line.is_empty() {
            break;
        }
        n += 1;
        if line.len() as u64 > MAX_HLOG_LINE_BYTES {
            return Err(bad(format!("line {n} is longer than {MAX_HLOG_LINE_BYTES} bytes")));
        }
        if line.last() != Some(&b'\n') {
            break;
        }
        let interval = match IntervalLogIterator::new(&line).next() {
            // A comment or the legend.
            None => continue,
            Some(Ok(LogEntry::Interval(i))) => i,
            Some(Ok(_)) => continue,
            Some(Err(_)) => return Err(bad(format!("line {n} is neither a comment nor an interval"))),
        };
        if interval.tag().map(|t| t.as_str() == tag) != Some(true) {
            continue;
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(interval.encoded_histogram())
            .map_err(|_| bad(format!("line {n}: the interval is not valid base64")))?;
        let raw = v2_encoding(&bytes).map_err(|e| bad(format!("line {n}: {e}")))?;
        let h: hdrhistogram::Histogram<u64> = de
            .deserialize(&mut &raw[..])
            .map_err(|e| bad(format!("line {n}: the interval does not decode ({e:?})")))?;
        out.add_raw(&h);
    }
    Ok(out)
}

/// The uncompressed HdrHistogram V2 encoding of one logged interval,
/// checked so that decoding it allocates no more than it holds:
/// hdrhistogram's decoder sizes its buffer from the payload length the
/// header claims before it reads a byte of it (a forged 4 GiB claim in a
/// few bytes of log), and inflating is capped at [`MAX_INTERVAL_BYTES`].
fn v2_encoding(bytes: &[u8]) -> std::result::Result<std::borrow::Cow<'_, [u8]>, String> {
    use std::io::Read;
    const V2: u32 = 0x1c84_9313;
    const V2_COMPRESSED: u32 = 0x1c84_9314;
    // Cookie, payload length, normalising offset, digits, lowest,
    // highest, integer-to-double ratio.
    const HEADER: usize = 40;
    fn word(b: &[u8], at: usize) -> Option<u32> {
        b.get(at..at + 4).map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }
    let raw: std::borrow::Cow<'_, [u8]> = match word(bytes, 0) {
        Some(V2) => std::borrow::Cow::Borrowed(bytes),
        Some(V2_COMPRESSED) => {
            let len = word(bytes, 4).ok_or("the interval is cut short")? as usize;
            let deflated = bytes
                .get(8..)
                .filter(|d| d.len() >= len)
                .ok_or("the interval's compressed length is beyond its end")?;
            let mut inflated = Vec::new();
            flate2::read::ZlibDecoder::new(&deflated[..len])
                .take(MAX_INTERVAL_BYTES + 1)
                .read_to_end(&mut inflated)
                .map_err(|e| format!("the interval does not decompress ({e})"))?;
            if inflated.len() as u64 > MAX_INTERVAL_BYTES {
                return Err(format!(
                    "the interval decompresses to more than {MAX_INTERVAL_BYTES} bytes"
                ));
            }
            std::borrow::Cow::Owned(inflated)
        }
        _ => return Err("the interval is not an HdrHistogram V2 encoding".into()),
    };
    if word(&raw[..], 0) != Some(V2) {
        return Err("the interval is not an HdrHistogram V2 encoding".into());
    }
    let payload = word(&raw[..], 4).ok_or("the interval is cut short")? as usize;
    if raw.len() < HEADER || payload > raw.len() - HEADER {
        return Err("the interval's payload length is beyond its end".into());
    }
    Ok(raw)
}

/// One interval of a histogram log another process is writing: when it
/// started (wall clock, ns since the epoch), how long it was, and its
/// largest value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntervalPeak {
    pub start_wall_ns: u64,
    pub length_ns: u64,
    pub max_ns: u64,
}

/// Follows an interval log as another process appends to it (a lab
/// probe's `--hlog`, flushed once per interval): each poll reads what was
/// added since the last, whole lines only, and hands over the intervals of
/// one tag with their maxima. Memory is one line at most
/// ([`MAX_HLOG_LINE_BYTES`]) whatever the file holds.
#[derive(Debug)]
pub struct HlogTail {
    path: PathBuf,
    tag: String,
    offset: u64,
    partial: Vec<u8>,
    /// The log's BaseTime (else StartTime), ns since the epoch.
    base_ns: Option<u64>,
    /// The end of the last interval of the tag handed over (wall clock).
    logged_upto_ns: Option<u64>,
}

impl HlogTail {
    pub fn new(path: &Path, tag: &str) -> HlogTail {
        HlogTail {
            path: path.to_path_buf(),
            tag: tag.to_string(),
            offset: 0,
            partial: Vec::new(),
            base_ns: None,
            logged_upto_ns: None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the log has got to: the end of the last interval handed over
    /// (wall clock, ns since the epoch); None before the first.
    pub fn logged_upto_ns(&self) -> Option<u64> {
        self.logged_upto_ns
    }

    /// Reads what was appended since the last poll (nothing while the
    /// file does not exist yet) and calls `peak` for each whole interval
    /// of the tag.
    pub fn poll(&mut self, peak: &mut dyn FnMut(IntervalPeak)) -> Result<()> {
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        use std::io::{Read, Seek, SeekFrom};
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("cannot read histogram log {}", self.path.display())),
        };
        file.seek(SeekFrom::Start(self.offset))
            .with_context(|| format!("cannot read histogram log {}", self.path.display()))?;
        let mut chunk = [0u8; 64 << 10];
        loop {
            let n = file
                .read(&mut chunk)
                .with_context(|| format!("cannot read histogram log {}", self.path.display()))?;
            if n == 0 {
                return Ok(());
            }
            self.offset += n as u64;
            let mut rest = &chunk[..n];
            while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
                self.partial.extend_from_slice(&rest[..=nl]);
                rest = &rest[nl + 1..];
                let line = std::mem::take(&mut self.partial);
                match IntervalLogIterator::new(&line).next() {
                    Some(Ok(LogEntry::BaseTime(d))) => self.base_ns = Some(d.as_nanos() as u64),
                    Some(Ok(LogEntry::StartTime(d))) => {
                        self.base_ns.get_or_insert(d.as_nanos() as u64);
                    }
                    Some(Ok(LogEntry::Interval(i))) if i.tag().is_some_and(|t| t.as_str() == self.tag) => {
                        if let Some(base) = self.base_ns {
                            let p = IntervalPeak {
                                start_wall_ns: base + i.start_timestamp().as_nanos() as u64,
                                length_ns: i.duration().as_nanos() as u64,
                                max_ns: i.max().max(0.0) as u64,
                            };
                            self.logged_upto_ns = Some(p.start_wall_ns + p.length_ns);
                            peak(p);
                        }
                    }
                    _ => {}
                }
                self.partial = line;
                self.partial.clear();
            }
            if self.partial.len() + rest.len() > MAX_HLOG_LINE_BYTES as usize {
                return Err(crate::bad_input(format!(
                    "{}: a line longer than {MAX_HLOG_LINE_BYTES} bytes: not a histogram log",
                    self.path.display()
                )));
            }
            self.partial.extend_from_slice(rest);
        }
    }
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

    #[test]
    fn a_tail_hands_over_each_whole_interval_once_with_its_max_and_wall_time() {
        let dir = std::env::temp_dir().join(format!("ontime-hlog-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t0.hlog");
        let mut tail = HlogTail::new(&path, "latency");
        let mut got = Vec::new();
        tail.poll(&mut |p| got.push(p)).unwrap();
        assert!(got.is_empty(), "no file yet: nothing, and no error");
        let start = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut log = HlogFile::create(&path, "test", start).unwrap();
        let mut h = LatencyHistogram::new();
        h.record(2_000_000);
        log.write("latency", &h, Duration::from_secs(0), Duration::from_secs(1))
            .unwrap();
        log.write("other", &h, Duration::from_secs(0), Duration::from_secs(1))
            .unwrap();
        log.flush().unwrap();
        tail.poll(&mut |p| got.push(p)).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].start_wall_ns, 1_700_000_000_000_000_000);
        assert_eq!(got[0].length_ns, 1_000_000_000);
        assert!((got[0].max_ns as f64 / 2e6 - 1.0).abs() < 0.01, "{got:?}");
        h.record(30_000_000);
        log.write("latency", &h, Duration::from_secs(1), Duration::from_secs(1))
            .unwrap();
        log.flush().unwrap();
        // Half a line written: held until its newline comes.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"2.000,1.000,").unwrap();
        tail.poll(&mut |p| got.push(p)).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[1].start_wall_ns, 1_700_000_001_000_000_000);
        assert_eq!(tail.logged_upto_ns(), Some(1_700_000_002_000_000_000));
        assert!(got[1].max_ns >= 30_000_000 * 99 / 100, "{got:?}");
        tail.poll(&mut |p| got.push(p)).unwrap();
        assert_eq!(got.len(), 2, "each interval once");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn is_bad_input(e: &anyhow::Error) -> bool {
        e.downcast_ref::<crate::BadInput>().is_some()
    }

    /// A log of one good interval, then `tail`.
    fn log_with(dir: &Path, tail: &[u8]) -> std::path::PathBuf {
        let path = dir.join("t0.hlog");
        let mut log = HlogFile::create(&path, "test", SystemTime::now()).unwrap();
        let mut h = LatencyHistogram::new();
        h.record(1000);
        log.write("latency", &h, Duration::from_secs(0), Duration::from_secs(1))
            .unwrap();
        log.flush().unwrap();
        drop(log);
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(tail).unwrap();
        path
    }

    fn interval_line(encoded: &[u8]) -> Vec<u8> {
        use base64::Engine;
        let mut line = b"Tag=latency,1.000,1.000,1.000,".to_vec();
        line.extend_from_slice(base64::engine::general_purpose::STANDARD.encode(encoded).as_bytes());
        line.push(b'\n');
        line
    }

    /// A V2 header claiming `payload` bytes that are not there.
    fn forged_v2(payload: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&0x1c84_9313u32.to_be_bytes());
        b.extend_from_slice(&payload.to_be_bytes());
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(&1u64.to_be_bytes());
        b.extend_from_slice(&3_600_000_000_000u64.to_be_bytes());
        b.extend_from_slice(&1.0f64.to_be_bytes());
        b
    }

    #[test]
    fn a_corrupt_log_is_bad_input_naming_the_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        // Garbage after a good interval: refused, not silently cut.
        let p = log_with(d.path(), b"garbage\n");
        let e = read_merged(&p, "latency").unwrap_err();
        assert!(is_bad_input(&e), "{e:#}");
        assert!(
            e.to_string().contains("t0.hlog") && e.to_string().contains("neither a comment"),
            "{e}"
        );
        // An interval that is not base64, or not a histogram.
        let p = log_with(d.path(), b"Tag=latency,1.000,1.000,1.000,!!!\n");
        let e = read_merged(&p, "latency").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("base64"), "{e}");
        let p = log_with(d.path(), &interval_line(b"not a histogram"));
        let e = read_merged(&p, "latency").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("V2"), "{e}");
        // A last line cut by a kill is left out; the whole interval counts.
        let p = log_with(d.path(), b"Tag=latency,1.000,1.0");
        assert_eq!(read_merged(&p, "latency").unwrap().len(), 1);
    }

    /// hdrhistogram's decoder allocates the payload length a header claims
    /// before reading it: 4 GiB from a line of a hundred bytes, plain or
    /// inside a compressed interval. Both are refused before decoding.
    #[test]
    fn a_forged_payload_length_is_refused_before_it_is_allocated() {
        let d = tempfile::tempdir().unwrap();
        let p = log_with(d.path(), &interval_line(&forged_v2(u32::MAX - 64)));
        let e = read_merged(&p, "latency").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("payload length"), "{e}");
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&forged_v2(u32::MAX - 64)).unwrap();
        let deflated = z.finish().unwrap();
        let mut compressed = 0x1c84_9314u32.to_be_bytes().to_vec();
        compressed.extend_from_slice(&(deflated.len() as u32).to_be_bytes());
        compressed.extend_from_slice(&deflated);
        let p = log_with(d.path(), &interval_line(&compressed));
        let e = read_merged(&p, "latency").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("payload length"), "{e}");
        // A compressed length beyond the interval's end.
        let mut short = 0x1c84_9314u32.to_be_bytes().to_vec();
        short.extend_from_slice(&1000u32.to_be_bytes());
        let p = log_with(d.path(), &interval_line(&short));
        let e = read_merged(&p, "latency").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("beyond its end"), "{e}");
    }

    #[test]
    fn a_fifo_or_device_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let link = d.path().join("t0.hlog");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_merged(&link, "latency").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("not a regular file"), "{e}");
    }

    /// A failed write names the log (it said only "cannot flush histogram
    /// log" on a full disk).
    #[test]
    fn write_errors_name_the_file() {
        let mut log = HlogFile::create(Path::new("/dev/full"), "test", SystemTime::now()).unwrap();
        let mut h = LatencyHistogram::new();
        h.record(1000);
        let e = log
            .write("x", &h, Duration::ZERO, Duration::from_secs(1))
            .and_then(|_| log.flush())
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot write histogram log /dev/full"),
            "{e:#}"
        );
    }
}
