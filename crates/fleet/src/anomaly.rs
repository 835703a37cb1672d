//! Document 002's periodic check: a window whose figure departs from the
//! tenant's recent history is flagged with the evidence. Robust to the
//! history's own outliers: the median and the median absolute deviation
//! (MAD), with a floor so a flat history does not flag noise.

use serde::{Deserialize, Serialize};

use crate::analysis::TOP_FUNCTIONS;
use crate::wire::{Anomaly, TenantFigures};

/// Windows kept per tenant.
pub const HISTORY: usize = 20;
/// Windows needed before anything is flagged.
pub const MIN_HISTORY: usize = 5;
/// How many scaled MADs above the median count as departing.
const MADS: f64 = 6.0;

/// A host's recent figures per tenant (the history bucket's value).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    pub tenants: Vec<(String, Vec<TenantFigures>)>,
}

impl History {
    fn of(&self, tenant: &str) -> &[TenantFigures] {
        self.tenants
            .iter()
            .find(|(n, _)| n == tenant)
            .map(|(_, v)| v.as_slice())
            .unwrap_or(&[])
    }

    /// Adds a window's figures, keeping the last [`HISTORY`].
    pub fn add(&mut self, figures: &[TenantFigures]) {
        for f in figures {
            match self.tenants.iter_mut().find(|(n, _)| *n == f.name) {
                Some((_, v)) => {
                    v.push(f.clone());
                    if v.len() > HISTORY {
                        v.remove(0);
                    }
                }
                None => self.tenants.push((f.name.clone(), vec![f.clone()])),
            }
        }
    }

    /// What in `figures` departs from this history.
    pub fn departures(&self, figures: &[TenantFigures]) -> Vec<Anomaly> {
        let mut out = Vec::new();
        for f in figures {
            let past = self.of(&f.name);
            if past.len() < MIN_HISTORY {
                continue;
            }
            // Floors: 5 points of steal, a tenth of a CPU.
            let mut check = |metric: String, value: f64, hist: Vec<f64>, floor: &dyn Fn(f64) -> f64| {
                if let Some(a) = departure(&f.name, metric, value, hist, floor) {
                    out.push(a);
                }
            };
            // An n/a steal (an almost empty window) is neither compared
            // nor part of the history compared with.
            if let Some(v) = f.steal_pct {
                check(
                    "steal_pct".into(),
                    v,
                    past.iter().filter_map(|p| p.steal_pct).collect(),
                    &|_| 5.0,
                );
            }
            if let Some(v) = f.peak_100ms_cpus {
                check(
                    "peak_100ms_cpus".into(),
                    v,
                    past.iter().filter_map(|p| p.peak_100ms_cpus).collect(),
                    &|_| 0.1,
                );
            }
            for (func, ns) in &f.functions {
                let hist: Vec<f64> = past.iter().map(|p| past_function_ns(p, func)).collect();
                let period = f.sample_period_ns;
                check(format!("function:{func}"), *ns as f64, hist, &|median| {
                    sampling_floor_ns(median, period)
                });
            }
        }
        out
    }
}

/// How far a function's corrected time must rise to be more than
/// sampling noise: at least 10 ms, and [`MADS`] standard deviations of a
/// Poisson count of samples at the history's median (a function seen in 4
/// samples of 10 ms is as likely to be seen in 6 next window: 40 -> 60 ms
/// is not a departure; at 100 samples, +60 % is).
fn sampling_floor_ns(median: f64, period_ns: Option<u64>) -> f64 {
    let Some(period) = period_ns.filter(|&p| p > 0).map(|p| p as f64) else {
        return 10e6;
    };
    let samples = (median / period).max(1.0);
    (MADS * samples.sqrt() * period).max(10e6)
}

/// A function's corrected time in a past window. Only the top
/// [`TOP_FUNCTIONS`] are kept: one missing from a full list may have had up
/// to the smallest kept time, and is taken to have had it (counting it as 0
/// flagged every function that sampling moved into the top few); one
/// missing from a shorter list had none.
fn past_function_ns(p: &TenantFigures, func: &str) -> f64 {
    match p.functions.iter().find(|(n, _)| n == func) {
        Some((_, ns)) => *ns as f64,
        None if p.functions.len() >= TOP_FUNCTIONS => p.functions.iter().map(|f| f.1).min().unwrap_or(0) as f64,
        None => 0.0,
    }
}

/// `floor`: the least rise that counts, given the history's median.
fn departure(
    tenant: &str,
    metric: String,
    value: f64,
    mut hist: Vec<f64>,
    floor: &dyn Fn(f64) -> f64,
) -> Option<Anomaly> {
    if hist.len() < MIN_HISTORY {
        return None;
    }
    let median = median_of(&mut hist);
    let mut dev: Vec<f64> = hist.iter().map(|v| (v - median).abs()).collect();
    let mad = median_of(&mut dev);
    // 1.4826 MAD estimates a standard deviation for normal data.
    let threshold = median + (MADS * 1.4826 * mad).max(floor(median));
    (value > threshold).then(|| Anomaly {
        tenant: tenant.into(),
        metric,
        value,
        median,
        mad,
        history: hist.len(),
        threshold,
    })
}

fn median_of(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(steal: f64, func_ms: u64) -> TenantFigures {
        TenantFigures {
            name: "t0".into(),
            steal_pct: Some(steal),
            peak_100ms_cpus: Some(0.5),
            contention_pct: Some(0.0),
            on_cpu_ns: 0,
            functions: vec![("poll".into(), func_ms * 1_000_000)],
            sample_period_ns: None,
        }
    }

    #[test]
    fn a_window_far_above_its_history_is_flagged_with_the_evidence() {
        let mut h = History::default();
        assert!(h.departures(&[fig(90.0, 500)]).is_empty(), "no history yet");
        for s in [2.0, 3.0, 2.5, 3.5, 2.0, 3.0] {
            h.add(&[fig(s, 20)]);
        }
        assert!(h.departures(&[fig(4.0, 22)]).is_empty(), "within the floor");
        let a = h.departures(&[fig(40.0, 200)]);
        let metrics: Vec<&str> = a.iter().map(|a| a.metric.as_str()).collect();
        assert_eq!(metrics, ["steal_pct", "function:poll"]);
        assert_eq!(a[0].history, 6);
        assert!((a[0].median - 2.75).abs() < 1e-9 && a[0].value == 40.0);
    }

    /// A function that sampling moves in and out of a window's top few is
    /// not a departure: absent from a full list, it had up to the smallest
    /// kept time. A new function above every past window's list still is.
    #[test]
    fn a_function_entering_the_top_few_is_not_flagged_by_itself() {
        let top = |extra: &str, ns: u64| TenantFigures {
            functions: (0..TOP_FUNCTIONS as u64 - 1)
                .map(|i| (format!("f{i}"), 60_000_000 - i * 1_000_000))
                .chain([(extra.to_string(), ns)])
                .collect(),
            ..fig(2.0, 0)
        };
        let mut h = History::default();
        for i in 0..8 {
            h.add(&[top(&format!("other{i}"), 40_000_000)]);
        }
        assert!(h.departures(&[top("newcomer", 50_000_000)]).is_empty());
        // Sampled at 100 Hz the history's 40 ms is 4 samples: 60 ms (6) is
        // sampling noise, 200 ms is not.
        let sampled = |ns| TenantFigures {
            sample_period_ns: Some(10_000_000),
            ..top("newcomer", ns)
        };
        assert!(h.departures(&[sampled(60_000_000)]).is_empty());
        assert_eq!(h.departures(&[sampled(200_000_000)]).len(), 1);
        let a = h.departures(&[top("newcomer", 400_000_000)]);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0].metric, "function:newcomer");
        assert_eq!(a[0].median, 40_000_000.0);
    }

    #[test]
    fn the_history_keeps_the_last_windows() {
        let mut h = History::default();
        for i in 0..30 {
            h.add(&[fig(i as f64, 1)]);
        }
        assert_eq!(h.of("t0").len(), HISTORY);
        assert_eq!(h.of("t0")[0].steal_pct, Some(10.0));
    }

    #[test]
    fn an_na_steal_is_neither_flagged_nor_history() {
        let mut h = History::default();
        for s in [2.0, 3.0, 2.5, 3.5, 2.0] {
            h.add(&[fig(s, 20)]);
        }
        let na = TenantFigures {
            steal_pct: None,
            ..fig(0.0, 20)
        };
        assert!(h.departures(std::slice::from_ref(&na)).is_empty());
        // Four real figures and an n/a one: too little history to flag.
        let mut short = History::default();
        for s in [2.0, 3.0, 2.5, 3.5] {
            short.add(&[fig(s, 20)]);
        }
        short.add(&[na]);
        assert!(short.departures(&[fig(90.0, 20)]).is_empty());
        assert_eq!(h.departures(&[fig(90.0, 20)]).len(), 1);
    }
}
