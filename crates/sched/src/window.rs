//! Window accumulators: CPU time credited to an entity (a tenant or a
//! thread) in fixed windows of any length from 1 ms, closed lazily and
//! summarised (mean, percentiles, max, min, share of windows above k CPUs,
//! an optional series for plots). Empty windows are counted in bulk, so a
//! long idle stretch costs no more than a short one.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Window usage is kept in micro-CPUs: 1 000 000 = one CPU busy all window.
const MICRO: f64 = 1e6;
/// Windows this long or longer keep a time series for plots.
const SERIES_MIN_WINDOW: u64 = 10_000_000;
/// Cap on a series, so an hours-long recording stays bounded in memory.
const SERIES_MAX_POINTS: usize = 2_000_000;

/// Per-window usage of one entity (a group or a thread) at one window length.
pub(crate) struct WindowAcc {
    w: u64,
    /// Window index of bins[0].
    base: u64,
    bins: VecDeque<u64>,
    hist: Histogram<u64>,
    count: u64,
    sum: f64,
    max: f64,
    min: f64,
    /// Windows above k CPUs, k = 1..=cpus.
    above: Vec<u64>,
    series: Option<Vec<f32>>,
}

impl WindowAcc {
    pub(crate) fn new(w: u64, cpus: usize, series: bool) -> WindowAcc {
        let high = ((cpus as f64 + 1.0) * MICRO) as u64;
        WindowAcc {
            w,
            base: 0,
            bins: VecDeque::new(),
            hist: Histogram::new_with_bounds(1, high.max(2), 3).expect("valid usage histogram bounds"),
            count: 0,
            sum: 0.0,
            max: 0.0,
            min: f64::INFINITY,
            above: vec![0; cpus],
            series: (series && w >= SERIES_MIN_WINDOW).then(Vec::new),
        }
    }

    pub(crate) fn add(&mut self, a: u64, b: u64) {
        let mut t = a;
        while t < b {
            let idx = t / self.w;
            let end = ((idx + 1) * self.w).min(b);
            let slot = idx.saturating_sub(self.base) as usize;
            if self.bins.len() <= slot {
                self.bins.resize(slot + 1, 0);
            }
            self.bins[slot] += end - t;
            t = end;
        }
    }

    /// Closes every window that ends at or before `horizon`.
    pub(crate) fn close_until(&mut self, horizon: u64) {
        let last = horizon / self.w; // windows < last are complete
        while self.base < last {
            match self.bins.pop_front() {
                Some(ns) => self.close(ns, 1),
                None => {
                    let n = last - self.base;
                    self.close(0, n);
                    return;
                }
            }
        }
    }

    fn close(&mut self, ns: u64, n: u64) {
        let usage = ns as f64 / self.w as f64;
        let v = (usage * MICRO).round() as u64;
        let _ = self.hist.record_n(v.clamp(0, self.hist.high()), n);
        self.count += n;
        self.sum += usage * n as f64;
        self.max = self.max.max(usage);
        self.min = self.min.min(usage);
        for (k, c) in self.above.iter_mut().enumerate() {
            if usage > (k + 1) as f64 {
                *c += n;
            }
        }
        if let Some(s) = self.series.as_mut() {
            let room = SERIES_MAX_POINTS.saturating_sub(s.len());
            s.extend(std::iter::repeat_n(usage as f32, (n as usize).min(room)));
        }
        self.base += n;
    }

    pub(crate) fn report(&self) -> WindowUsage {
        let pct = |p: f64| (self.count > 0).then(|| self.hist.value_at_quantile(p) as f64 / MICRO);
        WindowUsage {
            window_ns: self.w,
            windows: self.count,
            mean: (self.count > 0).then(|| self.sum / self.count as f64),
            max: (self.count > 0).then_some(self.max),
            min: (self.count > 0).then_some(self.min),
            p1: if self.count >= 100 { pct(0.01) } else { None },
            p99: if self.count >= 100 { pct(0.99) } else { None },
            above: self
                .above
                .iter()
                .enumerate()
                .map(|(k, &c)| AboveK {
                    cpus: k + 1,
                    fraction: if self.count > 0 {
                        c as f64 / self.count as f64
                    } else {
                        0.0
                    },
                })
                .collect(),
            series: self.series.clone(),
        }
    }
}

pub(crate) struct Entity {
    pub(crate) accs: Vec<WindowAcc>,
}

impl Entity {
    pub(crate) fn add(&mut self, a: u64, b: u64) {
        for acc in &mut self.accs {
            acc.add(a, b);
        }
    }
    pub(crate) fn close_until(&mut self, horizon: u64) {
        for acc in &mut self.accs {
            acc.close_until(horizon);
        }
    }

    /// Restarts the window statistics (the live view's next interval); the
    /// open windows carry on.
    pub(crate) fn reset_stats(&mut self) {
        for acc in &mut self.accs {
            acc.hist.reset();
            acc.count = 0;
            acc.sum = 0.0;
            acc.max = 0.0;
            acc.min = f64::INFINITY;
            acc.above.iter_mut().for_each(|c| *c = 0);
            if let Some(s) = acc.series.as_mut() {
                s.clear();
            }
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AboveK {
    pub cpus: usize,
    pub fraction: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowUsage {
    pub window_ns: u64,
    /// Whole windows in the recording.
    pub windows: u64,
    /// CPUs (1.0 = one CPU busy for the whole window).
    pub mean: Option<f64>,
    pub max: Option<f64>,
    pub min: Option<f64>,
    /// Needs at least 100 windows.
    pub p1: Option<f64>,
    pub p99: Option<f64>,
    /// Fraction of windows using more than k CPUs.
    pub above: Vec<AboveK>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<Vec<f32>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Credit splits at window boundaries; a long idle stretch closes in
    /// bulk as empty windows.
    #[test]
    fn credit_splits_at_boundaries_and_idle_windows_count() {
        let mut acc = WindowAcc::new(1_000_000, 2, true);
        acc.add(500_000, 2_500_000); // 0.5 + 1 + 0.5 ms
        acc.close_until(1_000_000_000); // 1 s: 1000 windows
        let r = acc.report();
        assert_eq!(r.windows, 1000);
        assert_eq!(r.max, Some(1.0));
        assert_eq!(r.min, Some(0.0));
        let mean = r.mean.unwrap();
        assert!((mean - 0.002).abs() < 1e-12, "{mean}");
        assert_eq!(r.series.as_ref().map(Vec::len), None, "1 ms windows keep no series");
    }
}
