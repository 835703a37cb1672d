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

/// Reads every interval tagged `tag` in an interval log and adds them up.
pub fn read_merged(path: &Path, tag: &str) -> Result<LatencyHistogram> {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let data = std::fs::read(path).with_context(|| format!("cannot read histogram log {}", path.display()))?;
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
}
