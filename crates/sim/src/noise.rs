//! The host's own noise, which the simulator has none of, fitted by
//! calibration from quiet lab runs' send lag: small jitter in how late a
//! thread wakes (timer slack, interrupts), drawn per send, and stalls of
//! the whole host (a VM's vCPUs descheduled by its hypervisor: every
//! thread stops at once), drawn as a Poisson process that the engine
//! runs (`engine::run_with_stalls`).

use ontime_core::stats::{Summary, PERCENTILES};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A delay distribution given by points of its quantile function
/// (probability 0..=1, ns), drawn by inverse transform, interpolating
/// between the points geometrically: latency tails are closer to straight
/// on a log scale, and a linear fill between p99 and p99.9 would spread
/// a few outliers' size over the whole 0.9 %.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub points: Vec<(f64, u64)>,
}

impl Quantiles {
    /// From a measured summary: its minimum, every percentile it supports
    /// and its maximum. None when it has no samples.
    pub fn from_summary(s: &Summary) -> Option<Quantiles> {
        let mut points = vec![(0.0, s.min_ns?)];
        for (name, p) in PERCENTILES {
            if let Some(v) = s.get(name) {
                points.push((p / 100.0, v));
            }
        }
        points.push((1.0, s.max_ns?));
        // Percentiles come from histogram buckets and may overshoot the
        // maximum; the quantile function must not decrease.
        for i in 1..points.len() {
            points[i].1 = points[i].1.max(points[i - 1].1);
        }
        let last = points.len() - 1;
        points[last].1 = points[last].1.max(points[last - 1].1);
        Some(Quantiles { points })
    }

    /// Checks a quantile function read from a file (`key` names it in the
    /// message): at least one point, probabilities within 0 .. 1 and
    /// values within 0 .. `max_ns`, neither decreasing from one point to
    /// the next (a quantile function never does).
    pub fn check(&self, key: &str, max_ns: u64) -> Result<(), String> {
        if self.points.is_empty() {
            return Err(format!("{key}.points is empty: give (probability, ns) points"));
        }
        let mut prev = (0.0f64, 0u64);
        for (i, &(p, v)) in self.points.iter().enumerate() {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(format!(
                    "{key}.points[{i}]: probability {p} is out of range: give 0 .. 1"
                ));
            }
            ontime_core::limits::duration(&format!("{key}.points[{i}]"), v, 0, max_ns)?;
            if i > 0 && (p < prev.0 || v < prev.1) {
                return Err(format!(
                    "{key}.points[{i}] = ({p}, {v}) is below the point before it ({}, {}): a quantile function does not decrease",
                    prev.0, prev.1
                ));
            }
            prev = (p, v);
        }
        Ok(())
    }

    /// The value at probability `u` (0..=1).
    pub fn at(&self, u: f64) -> u64 {
        let Some(&(_, first)) = self.points.first() else {
            return 0;
        };
        let mut prev = (0.0, first);
        for &(q, v) in &self.points {
            if u <= q {
                if q <= prev.0 {
                    return v;
                }
                let f = (u - prev.0) / (q - prev.0);
                if prev.1 == 0 {
                    return (v as f64 * f) as u64;
                }
                return (prev.1 as f64 * (v as f64 / prev.1 as f64).powf(f)) as u64;
            }
            prev = (q, v);
        }
        prev.1
    }
}

/// Draws from [`Quantiles`] with its own seeded generator.
#[derive(Clone, Debug)]
pub struct NoiseSampler {
    q: Quantiles,
    rng: SmallRng,
}

impl NoiseSampler {
    pub fn new(q: Quantiles, seed: u64) -> NoiseSampler {
        NoiseSampler {
            q,
            rng: SmallRng::seed_from_u64(seed),
        }
    }
    pub fn next_ns(&mut self) -> u64 {
        let u: f64 = self.rng.gen();
        self.q.at(u)
    }
}

/// Stalls of the whole host as a Poisson process: `per_second` on
/// average, each lasting a draw from `durations`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stalls {
    pub per_second: f64,
    pub durations: Quantiles,
}

impl Stalls {
    /// Checks stalls read from a file (`key` names them): a rate within
    /// 0 .. `max_per_second`, durations a quantile function within 0 ..
    /// `max_ns`.
    pub fn check(&self, key: &str, max_per_second: f64, max_ns: u64) -> Result<(), String> {
        let r = self.per_second;
        if !(r.is_finite() && (0.0..=max_per_second).contains(&r)) {
            return Err(format!(
                "{key}.per_second = {r} is out of range: give 0 .. {max_per_second} stalls per second"
            ));
        }
        self.durations.check(&format!("{key}.durations"), max_ns)
    }
}

/// Draws the stalls one after another.
#[derive(Clone, Debug)]
pub struct StallSampler {
    stalls: Stalls,
    rng: SmallRng,
}

impl StallSampler {
    pub fn new(stalls: Stalls, seed: u64) -> StallSampler {
        StallSampler {
            stalls,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The next stall starting after `t`: (start, end).
    pub fn next_after(&mut self, t: u64) -> (u64, u64) {
        if self.stalls.per_second <= 0.0 {
            return (u64::MAX, u64::MAX);
        }
        let u: f64 = self.rng.gen::<f64>().max(f64::MIN_POSITIVE);
        let gap = (-u.ln() / self.stalls.per_second * 1e9) as u64;
        let start = t.saturating_add(gap.max(1));
        let d: f64 = self.rng.gen();
        (start, start.saturating_add(self.stalls.durations.at(d)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_core::stats::LatencyHistogram;

    /// Drawn samples reproduce the summary they were fitted from: the
    /// median and p99 of 200 000 draws within the histogram's resolution.
    #[test]
    fn draws_follow_the_fitted_quantiles() {
        let mut h = LatencyHistogram::new();
        for i in 0..100_000u64 {
            // 10 us .. ~1 ms, skewed.
            h.record(10_000 + (i * i) / 10_000_000);
        }
        let q = Quantiles::from_summary(&h.summary(None)).unwrap();
        assert_eq!(Some(q.at(0.0)), h.summary(None).min_ns);
        assert_eq!(q.at(1.0), h.max());
        let mut s = NoiseSampler::new(q, 1);
        let mut d = LatencyHistogram::new();
        for _ in 0..200_000 {
            d.record(s.next_ns());
        }
        for p in [50.0, 99.0] {
            let (a, b) = (h.percentile(p).unwrap() as f64, d.percentile(p).unwrap() as f64);
            assert!((a / b - 1.0).abs() < 0.03, "p{p}: fitted {a}, drawn {b}");
        }
        assert!(d.max() <= h.max());
    }

    /// A quantile function from a file is checked point by point.
    #[test]
    fn quantiles_from_a_file_are_checked() {
        let q = |points: Vec<(f64, u64)>| Quantiles { points };
        assert_eq!(q(vec![(0.0, 10), (0.5, 10), (1.0, 20)]).check("n", 100), Ok(()));
        let e = q(vec![(0.0, 30), (1.0, 20)]).check("host_noise", 100).unwrap_err();
        assert!(
            e.contains("host_noise.points[1]") && e.contains("does not decrease"),
            "{e}"
        );
        let e = q(vec![(0.0, 10), (2.0, 20)]).check("n", 100).unwrap_err();
        assert!(e.contains("probability 2") && e.contains("0 .. 1"), "{e}");
        assert!(q(vec![(-1.0, 10)]).check("n", 100).is_err());
        assert!(q(vec![(0.0, 10), (f64::NAN, 20)]).check("n", 100).is_err());
        let e = q(vec![(0.0, u64::MAX)]).check("n", 100).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        assert!(q(vec![]).check("n", 100).is_err());
        let st = |per_second: f64| Stalls {
            per_second,
            durations: q(vec![(0.0, 10), (1.0, 20)]),
        };
        assert_eq!(st(2.0).check("host_stalls", 1000.0, 100), Ok(()));
        for bad in [-1.0, f64::INFINITY, 1e9] {
            let e = st(bad).check("host_stalls", 1000.0, 100).unwrap_err();
            assert!(e.contains("host_stalls.per_second"), "{e}");
        }
    }

    /// Stalls come at the fitted rate, each from the fitted durations.
    #[test]
    fn stalls_follow_their_rate_and_durations() {
        let q = Quantiles {
            points: vec![(0.0, 1_000_000), (1.0, 3_000_000)],
        };
        let mut st = StallSampler::new(
            Stalls {
                per_second: 2.0,
                durations: q,
            },
            3,
        );
        let (mut t, mut n) = (0u64, 0u64);
        while t < 1_000_000_000_000 {
            let (start, end) = st.next_after(t);
            assert!(start > t && (1_000_000..=3_000_000).contains(&(end - start)));
            t = end;
            n += 1;
        }
        assert!((1900..2100).contains(&n), "{n} stalls in 1000 s at 2/s");
    }
}
