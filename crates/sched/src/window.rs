//! Window accumulators: CPU time credited to an entity (a tenant or a
//! thread) in fixed windows of any length from 1 ms, closed lazily and
//! summarised (mean, percentiles, max, min, share of windows above k CPUs,
//! an optional series for plots). Empty windows are counted in bulk, so a
//! long idle stretch costs no more than a short one.
//!
//! An accumulator costs what its entity did, not what the host is: the
//! distinct usages are kept as a short sorted list (an entity's windows
//! are mostly empty or one whole CPU; any other value needs a switch in
//! the window) and move into an HdrHistogram (100 to 200 KiB) only past
//! `DISTINCT` of them; the counts above k CPUs grow to the largest k
//! passed, not to the host's CPUs; and windows are closed as credit comes
//! in, once no credit can land in them, so only those since every CPU's
//! last switch stay open. An accumulator that saw a few events takes about
//! 250 bytes.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Window usage is kept in micro-CPUs: 1 000 000 = one CPU busy all window.
const MICRO: f64 = 1e6;
/// Windows this long or longer keep a time series for plots.
const SERIES_MIN_WINDOW: u64 = 10_000_000;
/// Cap on a series, so an hours-long recording stays bounded in memory.
const SERIES_MAX_POINTS: usize = 2_000_000;

/// Distinct usages kept as a list before they move into a histogram.
const DISTINCT: usize = 512;

/// How many windows had each usage (micro-CPUs): a sorted list of
/// (usage, windows) while there are few distinct ones, a histogram (three
/// digits) past `DISTINCT`.
enum Usages {
    Few(Vec<(u64, u64)>),
    Many(Box<Histogram<u64>>),
}

impl Usages {
    /// `n` windows of usage `v` (at most `high`).
    fn record_n(&mut self, v: u64, n: u64, high: u64) {
        match self {
            Usages::Many(h) => {
                let top = h.high();
                let _ = h.record_n(v.min(top), n);
            }
            Usages::Few(list) => {
                match list.binary_search_by_key(&v, |&(u, _)| u) {
                    Ok(i) => list[i].1 += n,
                    Err(i) => list.insert(i, (v, n)),
                }
                if list.len() > DISTINCT {
                    // Bounds from the CPU count, which the recording's
                    // reader keeps in range; were they refused, the list
                    // would go on growing rather than fail.
                    if let Ok(mut h) = Histogram::<u64>::new_with_bounds(1, high.max(2), 3) {
                        let top = h.high();
                        for &(u, k) in list.iter() {
                            let _ = h.record_n(u.min(top), k);
                        }
                        *self = Usages::Many(Box::new(h));
                    }
                }
            }
        }
    }

    /// The usage at quantile `q` (0..1) of `count` windows: the smallest
    /// with at least that share of the windows at or below it.
    fn value_at_quantile(&self, q: f64, count: u64) -> u64 {
        match self {
            Usages::Many(h) => h.value_at_quantile(q),
            Usages::Few(list) => {
                let rank = ((q * count as f64).ceil() as u64).max(1);
                let mut seen = 0;
                for &(u, n) in list {
                    seen += n;
                    if seen >= rank {
                        return u;
                    }
                }
                list.last().map_or(0, |&(u, _)| u)
            }
        }
    }

    fn reset(&mut self) {
        match self {
            Usages::Many(h) => h.reset(),
            Usages::Few(list) => list.clear(),
        }
    }
}

/// Per-window usage of one entity (a group or a thread) at one window length.
pub(crate) struct WindowAcc {
    w: u64,
    /// Window index of bins[0].
    base: u64,
    bins: VecDeque<u64>,
    usages: Usages,
    /// The highest usage counted (micro-CPUs): all the host's CPUs and one.
    high: u64,
    cpus: usize,
    count: u64,
    sum: f64,
    max: f64,
    min: f64,
    /// Windows above k CPUs, k = 1..: only as far as a window went.
    above: Vec<u64>,
    series: Option<Vec<f32>>,
}

impl WindowAcc {
    /// An accumulator of windows of `w` ns on `cpus` CPUs, from the window
    /// holding `from_ns` (the statistics' start: earlier windows are not
    /// counted).
    pub(crate) fn new(w: u64, cpus: usize, series: bool, from_ns: u64) -> WindowAcc {
        WindowAcc {
            w,
            base: from_ns / w,
            bins: VecDeque::new(),
            usages: Usages::Few(Vec::new()),
            high: ((cpus as f64 + 1.0) * MICRO) as u64,
            cpus,
            count: 0,
            sum: 0.0,
            max: 0.0,
            min: f64::INFINITY,
            above: Vec::new(),
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
        self.usages.record_n(v.min(self.high), n, self.high);
        self.count += n;
        self.sum += usage * n as f64;
        self.max = self.max.max(usage);
        self.min = self.min.min(usage);
        // Above k CPUs for k = 1, 2, ... while the window passed k.
        for k in 0..self.cpus {
            if usage <= (k + 1) as f64 {
                break;
            }
            if self.above.len() <= k {
                self.above.push(0);
            }
            self.above[k] += n;
        }
        if let Some(s) = self.series.as_mut() {
            let room = SERIES_MAX_POINTS.saturating_sub(s.len());
            s.extend(std::iter::repeat_n(usage as f32, (n as usize).min(room)));
        }
        self.base += n;
    }

    pub(crate) fn report(&self) -> WindowUsage {
        let pct = |p: f64| (self.count > 0).then(|| self.usages.value_at_quantile(p, self.count) as f64 / MICRO);
        WindowUsage {
            window_ns: self.w,
            windows: self.count,
            mean: (self.count > 0).then(|| self.sum / self.count as f64),
            max: (self.count > 0).then_some(self.max),
            min: (self.count > 0).then_some(self.min),
            p1: if self.count >= 100 { pct(0.01) } else { None },
            p99: if self.count >= 100 { pct(0.99) } else { None },
            // From one CPU to the most any window used: a report per
            // thread of a 4096-CPU host is not 4096 zeros long.
            above: (0..self.above.len().max(1).min(self.cpus))
                .map(|k| AboveK {
                    cpus: k + 1,
                    fraction: match self.above.get(k) {
                        Some(&c) if self.count > 0 => c as f64 / self.count as f64,
                        _ => 0.0,
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
    /// Credits `[a, b)`; windows ending by `horizon` (no credit starts
    /// before it any more) are closed first, so a long recording keeps
    /// no window of its past open while every CPU switches now and then.
    pub(crate) fn add(&mut self, a: u64, b: u64, horizon: u64) {
        for acc in &mut self.accs {
            acc.close_until(horizon.min(a));
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
            acc.usages.reset();
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
    /// Fraction of windows using more than k CPUs, for k from 1 to the
    /// most any window used (k not listed: none).
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
        let mut acc = WindowAcc::new(1_000_000, 2, true, 0);
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
