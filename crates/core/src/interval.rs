//! Interval error of a periodically measured point, computed one way for
//! every source of timestamps (the crawler's responses and the gateway's own
//! receive log), so both sides can be compared sample for sample.
//!
//! Rule: every planned measurement after a point's first is one sample.
//! - A measurement at `t` whose previous measurement was at `t_prev`,
//!   `m` periods earlier, gives `| (t - t_prev) - m * period |`.
//! - A measurement that never happened (a missed poll) gives one sample of a
//!   full `period`: the point then went unmeasured for at least two periods.
//!
//! The crawler knows `m` from poll indices. The gateway log does not, and
//! infers `m = max(1, round(gap / period))`, which agrees whenever the
//! jitter is below half a period.

use crate::stats::LatencyHistogram;

/// Per-point state for the crawler side, where poll indices are known.
#[derive(Clone, Copy, Debug, Default)]
pub struct IntervalTracker {
    last: Option<(u64, u64)>, // (poll index, timestamp ns)
}

impl IntervalTracker {
    /// A measurement of poll `index` taken at `t_ns`; returns the interval
    /// error it recorded (None for a stream's first measurement).
    #[inline]
    pub fn measured(&mut self, index: u64, t_ns: u64, period_ns: u64, hist: &mut LatencyHistogram) -> Option<u64> {
        match self.last {
            Some((li, lt)) => {
                let m = index as i128 - li as i128;
                let err = ((t_ns as i128 - lt as i128) - m * period_ns as i128).unsigned_abs() as u64;
                hist.record(err);
                // Responses can complete out of order across connections:
                // keep the newest poll as the reference.
                if index > li {
                    self.last = Some((index, t_ns));
                }
                Some(err)
            }
            None => {
                self.last = Some((index, t_ns));
                None
            }
        }
    }

    /// Poll `index` produced no measurement.
    #[inline]
    pub fn missed(&mut self, _index: u64, period_ns: u64, hist: &mut LatencyHistogram) {
        hist.record(period_ns);
    }
}

/// Gateway-side computation from one point's receive times (ascending):
/// records the samples into `hist` and returns how many of them were
/// inferred missed measurements.
pub fn from_timestamps(times_ns: &[u64], period_ns: u64, hist: &mut LatencyHistogram) -> u64 {
    let mut missed = 0;
    for w in times_ns.windows(2) {
        let gap = w[1].saturating_sub(w[0]);
        let m = ((gap as f64 / period_ns.max(1) as f64).round() as u64).max(1);
        // One sample per missed measurement, recorded at once: a gap of
        // many periods (or a bad timestamp) costs no more than a short one.
        hist.record_n(period_ns, m - 1);
        missed += m - 1;
        hist.record(gap.abs_diff(m.saturating_mul(period_ns)));
    }
    missed
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000_000;

    #[test]
    fn crawler_and_gateway_rules_agree() {
        // Poll 2 is missed; others jitter by a few ms.
        let times = [(0u64, 0u64), (1, P + 3_000_000), (3, 3 * P - 2_000_000), (4, 4 * P)];
        let mut a = LatencyHistogram::new();
        let mut t = IntervalTracker::default();
        t.measured(times[0].0, times[0].1, P, &mut a);
        t.measured(times[1].0, times[1].1, P, &mut a);
        t.missed(2, P, &mut a);
        t.measured(times[2].0, times[2].1, P, &mut a);
        t.measured(times[3].0, times[3].1, P, &mut a);

        let mut b = LatencyHistogram::new();
        let ts: Vec<u64> = times.iter().map(|x| x.1).collect();
        assert_eq!(from_timestamps(&ts, P, &mut b), 1);
        assert_eq!(a.len(), 4);
        assert_eq!(a.summary(None), b.summary(None));
        assert_eq!(a.count_above(P / 2), 1);
    }
}
