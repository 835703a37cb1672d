//! The time series: bytes per second at each layer in bins of about a
//! sixtieth of the recording, and spreading bytes moved over an interval
//! across the bins it covers.
use ontime_recording::io_abi::IoOp;
use serde::{Deserialize, Serialize};

/// Bytes per second at each layer in one bin of the time series.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// Seconds since the recording began (bin start).
    pub t: f64,
    pub app_read: f64,
    pub app_write: f64,
    pub virtual_read: f64,
    pub virtual_write: f64,
    pub physical_read: f64,
    pub physical_write: f64,
}

/// A layer of the time series.
#[derive(Clone, Copy)]
pub(crate) enum SeriesLayer {
    App,
    Virtual,
    Physical,
}

impl SeriesPoint {
    pub(crate) fn add(&mut self, layer: SeriesLayer, op: IoOp, bytes: f64) {
        let (read, write) = match layer {
            SeriesLayer::App => (&mut self.app_read, &mut self.app_write),
            SeriesLayer::Virtual => (&mut self.virtual_read, &mut self.virtual_write),
            SeriesLayer::Physical => (&mut self.physical_read, &mut self.physical_write),
        };
        match op {
            IoOp::Read => *read += bytes,
            IoOp::Write => *write += bytes,
            _ => {}
        }
    }
}

/// Adds `bytes` moved evenly over [from, to) to the bins it covers.
pub(crate) fn spread(
    points: &mut [SeriesPoint],
    start: u64,
    bin_ns: u64,
    from: u64,
    to: u64,
    bytes: u64,
    field: impl Fn(&mut SeriesPoint) -> &mut f64,
) {
    if bytes == 0 || points.is_empty() {
        return;
    }
    let (from, to) = (from.max(start) - start, to.max(start) - start);
    if to <= from {
        let i = ((to / bin_ns) as usize).min(points.len() - 1);
        *field(&mut points[i]) += bytes as f64;
        return;
    }
    let per_ns = bytes as f64 / (to - from) as f64;
    let mut t = from;
    while t < to {
        let i = (t / bin_ns) as usize;
        let bin_end = ((t / bin_ns) + 1) * bin_ns;
        let upto = bin_end.min(to);
        let Some(p) = points.get_mut(i) else { break };
        *field(p) += per_ns * (upto - t) as f64;
        t = upto;
    }
}

/// A bin of about a sixtieth of the recording, at least 100 ms, rounded to 1-2-5.
pub(crate) fn series_bin(duration_ns: u64) -> u64 {
    let want = (duration_ns / 60).max(100_000_000);
    let mut step = 100_000_000u64;
    loop {
        for m in [1, 2, 5] {
            if step * m >= want {
                return step * m;
            }
        }
        step *= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_follow_1_2_5() {
        assert_eq!(series_bin(1_000_000_000), 100_000_000);
        assert_eq!(series_bin(30_000_000_000), 500_000_000);
        assert_eq!(series_bin(100_000_000_000), 2_000_000_000);
    }
}
