//! Document 002's periodic check: a window whose figure departs from the
//! tenant's recent history is flagged with the evidence. Robust to the
//! history's own outliers: the median and the median absolute deviation
//! (MAD), with a floor so a flat history does not flag noise.

use serde::{Deserialize, Serialize};

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
            let mut check = |metric: String, value: f64, hist: Vec<f64>, floor: f64| {
                if let Some(a) = departure(&f.name, metric, value, hist, floor) {
                    out.push(a);
                }
            };
            check(
                "steal_pct".into(),
                f.steal_pct,
                past.iter().map(|p| p.steal_pct).collect(),
                5.0,
            );
            if let Some(v) = f.peak_100ms_cpus {
                check(
                    "peak_100ms_cpus".into(),
                    v,
                    past.iter().filter_map(|p| p.peak_100ms_cpus).collect(),
                    0.1,
                );
            }
            for (func, ns) in &f.functions {
                let hist: Vec<f64> = past
                    .iter()
                    .map(|p| p.functions.iter().find(|(n, _)| n == func).map_or(0.0, |x| x.1 as f64))
                    .collect();
                // 10 ms of corrected time in a window.
                check(format!("function:{func}"), *ns as f64, hist, 10e6);
            }
        }
        out
    }
}

fn departure(tenant: &str, metric: String, value: f64, mut hist: Vec<f64>, floor: f64) -> Option<Anomaly> {
    if hist.len() < MIN_HISTORY {
        return None;
    }
    let median = median_of(&mut hist);
    let mut dev: Vec<f64> = hist.iter().map(|v| (v - median).abs()).collect();
    let mad = median_of(&mut dev);
    // 1.4826 MAD estimates a standard deviation for normal data.
    let threshold = median + (MADS * 1.4826 * mad).max(floor);
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
            steal_pct: steal,
            peak_100ms_cpus: Some(0.5),
            contention_pct: 0.0,
            on_cpu_ns: 0,
            functions: vec![("poll".into(), func_ms * 1_000_000)],
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

    #[test]
    fn the_history_keeps_the_last_windows() {
        let mut h = History::default();
        for i in 0..30 {
            h.add(&[fig(i as f64, 1)]);
        }
        assert_eq!(h.of("t0").len(), HISTORY);
        assert_eq!(h.of("t0")[0].steal_pct, 10.0);
    }
}
