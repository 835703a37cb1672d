//! A tenant's busiest 100 ms: drawn from its work model, and the work
//! model's tail fitted to a measured one (`plan --from-fleet`).

use ontime_core::work::WorkModel;

/// The window document 000 found the bursts in.
pub const PEAK_WINDOW_NS: u64 = 100_000_000;

/// A tenant's CPU in its busiest 100 ms windows (the 99.9th percentile of
/// 100 ms windows: once in 100 s), in CPUs, capped at its vCPUs: the work
/// model's draws summed over the polls of a window.
pub fn peak_cpu(rate: f64, work: &WorkModel, vcpus: usize, seed: u64) -> f64 {
    let per_window = (rate * PEAK_WINDOW_NS as f64 / 1e9).round().max(1.0) as usize;
    let mut s = work.sampler(seed);
    let mut sums: Vec<u64> = (0..2000)
        .map(|_| (0..per_window).map(|_| s.next_ns()).sum::<u64>())
        .collect();
    sums.sort_unstable();
    let p = sums[(sums.len() * 999 / 1000).min(sums.len() - 1)];
    (p as f64 / PEAK_WINDOW_NS as f64).min(vcpus as f64)
}

/// The Pareto shape whose 100 ms peak (as [`peak_cpu`]
/// draws it) matches a measured one, for a tenant whose mean CPU per poll
/// is `mean_ns`; None when fixed work already reaches the peak (the
/// measured bursts are no heavier than a steady crawler's). Shapes from
/// 1.05 (heaviest) to 100; the peak falls as the shape grows.
pub fn fit_tail(rate: f64, mean_ns: u64, vcpus: usize, peak: f64) -> Option<f64> {
    let at = |tail: Option<f64>| peak_cpu(rate, &WorkModel { mean_ns, tail }, vcpus, FIT_SEED);
    if at(None) >= peak * 0.99 {
        return None;
    }
    let (mut heavy, mut light) = (1.05f64, 100.0f64);
    if at(Some(heavy)) <= peak {
        return Some(heavy);
    }
    // Bisection on the log of the shape: the peak changes fastest near 1.
    for _ in 0..30 {
        let mid = (heavy * light).sqrt();
        if at(Some(mid)) > peak {
            heavy = mid;
        } else {
            light = mid;
        }
        if light / heavy < 1.001 {
            break;
        }
    }
    Some((heavy * light).sqrt())
}

/// The draws fitting uses: fixed so the same input fits the same tail.
pub const FIT_SEED: u64 = 0x5eed;
