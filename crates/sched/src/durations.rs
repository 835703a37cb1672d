//! Durations a thread or a group collects (run-queue waits, contention
//! episodes), kept at the cost of what was collected. An HdrHistogram of
//! one hour at three digits holds some 270 KiB whatever it holds; one per
//! thread and three per group made a 2.35 MB `--all` recording of 800
//! short-lived processes need over 6 GB to report. Here the first
//! [`EXACT`] values are kept as they are (8 bytes each, and each needs at
//! least one event of 24 bytes in the recording), and only a thread or
//! group with more moves them into a [`LatencyHistogram`].

use ontime_core::stats::{supports, LatencyHistogram};

/// Values kept exactly before they move into a histogram: 32 KiB, an
/// eighth of one.
const EXACT: usize = 4096;

/// Count, total, largest and percentiles of durations (ns).
#[derive(Debug, Default)]
pub(crate) struct Durations {
    exact: Vec<u64>,
    hist: Option<Box<LatencyHistogram>>,
    count: u64,
    total_ns: u64,
    max_ns: u64,
}

impl Durations {
    pub(crate) fn record(&mut self, ns: u64) {
        self.count += 1;
        self.total_ns = self.total_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
        if let Some(h) = self.hist.as_mut() {
            h.record(ns);
        } else if self.exact.len() < EXACT {
            self.exact.push(ns);
        } else {
            let mut h = Box::new(LatencyHistogram::new());
            for &v in &self.exact {
                h.record(v);
            }
            h.record(ns);
            self.exact = Vec::new();
            self.hist = Some(h);
        }
    }

    /// Forgets the values (the live view's next interval); a histogram
    /// already made is kept for it.
    pub(crate) fn reset(&mut self) {
        self.exact.clear();
        if let Some(h) = self.hist.as_mut() {
            h.reset();
        }
        self.count = 0;
        self.total_ns = 0;
        self.max_ns = 0;
    }

    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Exact largest value (0 when empty).
    pub(crate) fn max(&self) -> u64 {
        self.max_ns
    }

    /// Exact sum (saturating).
    pub(crate) fn total(&self) -> u64 {
        self.total_ns
    }

    /// The value at percentile `p` (0..100) where the count supports it
    /// ([`supports`]): exact while the values are kept, the histogram's
    /// (three digits) beyond. The rank is the histogram's: the smallest
    /// value with at least p % of the values at or below it.
    pub(crate) fn percentile(&self, p: f64) -> Option<u64> {
        if !supports(self.count, p) {
            return None;
        }
        if let Some(h) = &self.hist {
            return h.percentile(p);
        }
        let n = self.exact.len();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
        let mut v = self.exact.clone();
        let (_, at, _) = v.select_nth_unstable(rank - 1);
        Some(*at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_values_are_exact_and_many_move_into_a_histogram() {
        let mut d = Durations::default();
        assert_eq!((d.len(), d.percentile(50.0), d.max()), (0, None, 0));
        for v in 1..=100u64 {
            d.record(v * 1000);
        }
        assert_eq!(d.percentile(50.0), Some(50_000));
        assert_eq!(d.percentile(99.0), Some(99_000));
        assert_eq!(d.percentile(99.9), None, "100 values do not support p99.9");
        assert_eq!((d.len(), d.total(), d.max()), (100, 5_050_000, 100_000));
        assert!(d.hist.is_none());
        for v in 0..EXACT as u64 {
            d.record(v);
        }
        assert!(d.hist.is_some() && d.exact.is_empty());
        assert_eq!(d.len(), 100 + EXACT as u64);
        assert_eq!(d.max(), 100_000);
        // The top five of 4 196 values are 96 000 to 100 000 ns.
        let p = d.percentile(99.9).unwrap();
        assert!((95_000..=100_000).contains(&p), "{p}");
        d.reset();
        assert_eq!((d.len(), d.percentile(50.0), d.total()), (0, None, 0));
        // Two values support a median; the histogram kept past the reset holds them.
        d.record(7);
        d.record(7);
        assert_eq!(d.percentile(50.0), Some(7));
    }
}
