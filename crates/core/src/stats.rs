//! Latency statistics on HdrHistogram, with percentiles reported only where
//! the sample count supports them.
//!
//! Values are nanoseconds, recorded with 3 significant digits from 1 ns up to
//! one hour; larger values are clamped to one hour and counted as such, so a
//! sample is never dropped. A percentile p is supported when the count is at
//! least 1 / (1 - p): p99.999 needs 100 000 samples.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest trackable value: one hour in ns.
pub const MAX_TRACKABLE_NS: u64 = 3_600_000_000_000;

/// The percentiles every ontime summary reports, in order.
pub const PERCENTILES: [(&str, f64); 7] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("p99.99", 99.99),
    ("p99.999", 99.999),
    ("p99.9999", 99.9999),
];

/// A histogram of nanosecond values.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    clamped: u64,
    /// Exact extremes (the histogram only knows them to its precision).
    min: u64,
    max: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        LatencyHistogram {
            // Bounds are constants that hdrhistogram accepts.
            hist: Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, 3).expect("constant histogram bounds are valid"),
            clamped: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Records one value; never allocates.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        let v = if ns > MAX_TRACKABLE_NS {
            self.clamped += 1;
            MAX_TRACKABLE_NS
        } else {
            ns
        };
        // Cannot fail: v is within the histogram's bounds (0 counts in the
        // lowest bucket).
        let _ = self.hist.record(v);
    }

    pub fn add(&mut self, other: &LatencyHistogram) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.clamped += other.clamped;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Adds a raw histogram (e.g. read back from an interval log); its
    /// extremes are known only to the histogram's precision.
    pub fn add_raw(&mut self, h: &Histogram<u64>) {
        if h.is_empty() {
            return;
        }
        let _ = self.hist.add(h);
        self.min = self.min.min(h.min());
        self.max = self.max.max(h.max());
    }

    /// Records `n` samples of one value.
    pub fn record_n(&mut self, ns: u64, n: u64) {
        if n == 0 {
            return;
        }
        let v = ns.min(MAX_TRACKABLE_NS);
        if ns > MAX_TRACKABLE_NS {
            self.clamped += n;
        }
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        let _ = self.hist.record_n(v, n);
    }

    /// Log-spaced bins (10 per decade from 1 us): (upper bound ns, count),
    /// empty bins left out. Compact enough for a JSON result.
    pub fn log_bins(&self) -> Vec<LogBin> {
        let mut out = Vec::new();
        if self.is_empty() {
            return out;
        }
        for v in self.hist.iter_log(1000, 10f64.powf(0.1)) {
            let n = v.count_since_last_iteration();
            if n > 0 {
                out.push(LogBin {
                    le_ns: v.value_iterated_to(),
                    count: n,
                });
            }
        }
        out
    }

    pub fn reset(&mut self) {
        self.hist.reset();
        self.clamped = 0;
        self.min = u64::MAX;
        self.max = 0;
    }

    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// Count of values strictly above `ns`.
    pub fn count_above(&self, ns: u64) -> u64 {
        if ns >= MAX_TRACKABLE_NS {
            return 0;
        }
        // Values equivalent to `ns` share its bucket; count those above the
        // bucket that holds `ns`.
        let top = self.hist.highest_equivalent(ns);
        self.hist.len() - self.hist.count_between(0, top)
    }

    /// Exact largest value recorded (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn inner(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// The value at percentile `p` (0..100), or None when the count does not
    /// support it.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if supports(self.len(), p) {
            // The histogram answers with its bucket's top, which can pass
            // the exact max.
            Some(self.hist.value_at_percentile(p).min(self.max))
        } else {
            None
        }
    }

    pub fn summary(&self, threshold_ns: Option<u64>) -> Summary {
        let n = self.len();
        let nonempty = |v: u64| if n > 0 { Some(v) } else { None };
        Summary {
            count: n,
            min_ns: nonempty(self.min),
            mean_ns: nonempty(self.hist.mean().round() as u64),
            percentiles_ns: PERCENTILES
                .iter()
                .map(|(name, p)| Percentile {
                    name: (*name).to_string(),
                    value_ns: self.percentile(*p),
                })
                .collect(),
            max_ns: nonempty(self.max),
            threshold_ns,
            above_threshold: threshold_ns.map(|t| self.count_above(t)),
            clamped_at_max: self.clamped,
        }
    }
}

/// The q-quantile (0..=1) of a few values sorted ascending, between the
/// closest ranks (linear interpolation, R's type 7): the median of an even
/// count is the mean of the middle two. 0 for none. For the handful of
/// runs a setting has (their median and quartiles), where a histogram's
/// buckets would be coarser than the spread; `value` reads one as f64.
pub fn quantile_sorted<T: Copy>(sorted: &[T], q: f64, value: impl Fn(T) -> f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => value(sorted[0]),
        n => {
            let at = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = at.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            let (a, b) = (value(sorted[lo]), value(sorted[hi]));
            a + (at - lo as f64) * (b - a)
        }
    }
}

/// Whether `count` samples support percentile `p` (0..100).
pub fn supports(count: u64, p: f64) -> bool {
    if count == 0 {
        return false;
    }
    let tail = 1.0 - p / 100.0;
    if tail <= 0.0 {
        return false;
    }
    // Round to absorb float error: p99.999 -> exactly 100 000.
    let needed = (1.0 / tail).round();
    count as f64 >= needed
}

/// One bin of [`LatencyHistogram::log_bins`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct LogBin {
    pub le_ns: u64,
    pub count: u64,
}

/// One percentile in a summary; `value_ns` is None ("n/a") when the sample
/// count does not support it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Percentile {
    pub name: String,
    pub value_ns: Option<u64>,
}

/// The statistics of one metric, as every ontime output reports them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub count: u64,
    pub min_ns: Option<u64>,
    pub mean_ns: Option<u64>,
    pub percentiles_ns: Vec<Percentile>,
    pub max_ns: Option<u64>,
    pub threshold_ns: Option<u64>,
    /// Samples strictly above `threshold_ns`.
    pub above_threshold: Option<u64>,
    /// Samples larger than one hour, recorded as one hour.
    pub clamped_at_max: u64,
}

/// The summary of no samples.
impl Default for Summary {
    fn default() -> Summary {
        LatencyHistogram::new().summary(None)
    }
}

impl Summary {
    /// Percentile `p` (0..100) of this summary: one of [`PERCENTILES`], or
    /// None when it is not one of them or the sample count does not
    /// support it (the rule of [`supports`]).
    pub fn percentile(&self, p: f64) -> Option<u64> {
        let (name, _) = PERCENTILES.iter().find(|(_, q)| (q - p).abs() < 1e-9)?;
        if !supports(self.count, p) {
            return None;
        }
        self.get(name)
    }

    /// The percentile called `name` ("p99.9"), None where unsupported.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.percentiles_ns
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.value_ns)
    }

    /// One fixed-width text row: count, then every percentile, then max.
    pub fn text_row(&self, label: &str) -> String {
        use crate::duration::format_ns;
        let cell = |v: Option<u64>| v.map(format_ns).unwrap_or_else(|| "n/a".into());
        let mut s = format!("{label:<18} {:>9}", self.count);
        for p in &self.percentiles_ns {
            if p.name == "p99.9999" {
                continue;
            }
            s.push_str(&format!(" {:>10}", cell(p.value_ns)));
        }
        s.push_str(&format!(" {:>10}", cell(self.max_ns)));
        if let (Some(t), Some(a)) = (self.threshold_ns, self.above_threshold) {
            s.push_str(&format!("  {a} > {}", format_ns(t)));
        }
        s
    }

    pub fn text_header() -> String {
        format!(
            "{:<18} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "metric", "count", "p50", "p90", "p99", "p99.9", "p99.99", "p99.999", "max"
        )
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn quantiles_of_a_few_values_interpolate_between_ranks() {
        let v = [1u64, 2, 3, 10];
        let q = |q| quantile_sorted(&v, q, |x| x as f64);
        assert_eq!((q(0.0), q(0.5), q(1.0)), (1.0, 2.5, 10.0));
        assert_eq!(q(0.25), 1.75);
        assert_eq!(quantile_sorted::<u64>(&[], 0.5, |x| x as f64), 0.0);
        assert_eq!(quantile_sorted(&[7.0], 0.9, |x| x), 7.0);
    }

    use super::*;

    #[test]
    fn support_rule() {
        assert!(supports(100_000, 99.999));
        assert!(!supports(99_999, 99.999));
        assert!(supports(2, 50.0));
        assert!(!supports(0, 50.0));
    }

    #[test]
    fn unsupported_percentiles_are_none() {
        let mut h = LatencyHistogram::new();
        for i in 0..1000 {
            h.record(i * 1000);
        }
        let s = h.summary(Some(500_000));
        assert_eq!(s.count, 1000);
        assert!(s.get("p99.9").is_some());
        assert!(s.get("p99.99").is_none());
        assert!(s.text_row("x").contains("n/a"));
        // 500 us threshold: values 501..999 us are above.
        let above = s.above_threshold.unwrap();
        assert!((498..=500).contains(&above), "{above}");
    }

    #[test]
    fn huge_values_are_clamped_not_dropped() {
        let mut h = LatencyHistogram::new();
        h.record(u64::MAX);
        assert_eq!(h.len(), 1);
        assert_eq!(h.summary(None).clamped_at_max, 1);
    }
}
