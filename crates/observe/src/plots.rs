//! Figures of an analysis: CPU use over time at 100 ms, peak use against
//! window length, contention per tenant, and the host I/O path's minimum.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
pub use ontime_plot::{register_font, Chart};
use ontime_plot::{Scale, XTicks};

use ontime_sched::analyze::GroupReport;
use ontime_sched::Analysis;

/// Lines per figure; more tenants are shown by their 8 highest peaks.
const MAX_LINES: usize = 8;

/// Tenants with the highest peak at the finest window, at most MAX_LINES.
fn busiest(a: &Analysis) -> Vec<&GroupReport> {
    let mut t: Vec<&GroupReport> = a.tenants().filter(|g| g.on_cpu_ns > 0).collect();
    t.sort_by(|x, y| {
        let m = |g: &GroupReport| g.usage.first().and_then(|u| u.max).unwrap_or(0.0);
        m(y).total_cmp(&m(x)).then(x.name.cmp(&y.name))
    });
    t.truncate(MAX_LINES);
    t
}

/// The charts of an analysis; `label` goes into the titles.
pub fn charts(a: &Analysis, label: &str) -> Vec<Chart> {
    let mut out = Vec::new();
    let sep = if label.is_empty() { "" } else { ": " };
    // The series window nearest 100 ms.
    let series_w = a
        .windows_ns
        .iter()
        .copied()
        .filter(|&w| w >= 10_000_000)
        .min_by_key(|&w| w.abs_diff(100_000_000));
    if let Some(w) = series_w {
        let mut series = Vec::new();
        let mut groups = busiest(a);
        if let Some(h) = a.host_io() {
            groups.push(h);
        }
        for g in groups {
            if let Some(s) = g
                .usage
                .iter()
                .find(|u| u.window_ns == w)
                .and_then(|u| u.series.as_ref())
            {
                let step = (s.len() / 3000).max(1);
                let pts = s
                    .iter()
                    .enumerate()
                    .step_by(step)
                    .map(|(i, &v)| ((i as u64 * w) as f64 / 1e9, v as f64))
                    .collect();
                series.push((g.name.clone(), pts));
            }
        }
        if !series.is_empty() {
            let mut c = Chart::new(
                "usage-over-time",
                format!("{label}{sep}CPU use per {} window", ontime_core::duration::format_ns(w)),
                "time (s)",
                "CPUs",
            );
            c.series = series;
            c.limit = Some((format!("host: {} CPUs", a.recording.cpus), a.recording.cpus as f64));
            out.push(c);
        }
    }
    let mut peak = Vec::new();
    for g in busiest(a) {
        let pts: Vec<(f64, f64)> = g
            .usage
            .iter()
            .filter_map(|u| Some((u.window_ns as f64, u.max?)))
            .collect();
        if !pts.is_empty() {
            peak.push((g.name.clone(), pts));
        }
    }
    if !peak.is_empty() {
        let mut c = Chart::new(
            "peak-vs-window",
            format!("{label}{sep}peak CPU use against window length"),
            "window",
            "max CPUs in a window",
        );
        c.series = peak;
        c.x_scale = Scale::Log;
        c.x_ticks = XTicks::Duration;
        out.push(c);
    }
    let tenants: Vec<&GroupReport> = a.tenants().filter(|g| g.vcpus > 0).collect();
    if !tenants.is_empty() {
        let ms = |v: Option<u64>| v.unwrap_or(0) as f64 / 1e6;
        let names: Vec<String> = tenants.iter().map(|g| g.name.clone()).collect();
        let p99: Vec<(f64, f64)> = tenants
            .iter()
            .enumerate()
            .map(|(i, g)| (i as f64, ms(g.contention.any.p99_ns)))
            .collect();
        let max: Vec<(f64, f64)> = tenants
            .iter()
            .enumerate()
            .map(|(i, g)| (i as f64, ms(g.contention.any.max_ns)))
            .collect();
        let mut c = Chart::new(
            "contention",
            format!("{label}{sep}contention episodes (a vCPU runnable, not running)"),
            "tenant",
            "episode length (ms)",
        );
        c.series = vec![("p99".into(), p99), ("max".into(), max)];
        c.x_labels = Some(names);
        out.push(c);
    }
    if let Some(h) = a.host_io().filter(|h| h.thread_count > 0) {
        let min: Vec<(f64, f64)> = h
            .usage
            .iter()
            .filter_map(|u| Some((u.window_ns as f64, u.min?)))
            .collect();
        let mean: Vec<(f64, f64)> = h
            .usage
            .iter()
            .filter_map(|u| Some((u.window_ns as f64, u.mean?)))
            .collect();
        if !min.is_empty() {
            let mut c = Chart::new(
                "host-io",
                format!("{label}{sep}host I/O path CPU per window"),
                "window",
                "CPUs",
            );
            c.series = vec![("min".into(), min), ("mean".into(), mean)];
            c.x_scale = Scale::Log;
            c.x_ticks = XTicks::Duration;
            out.push(c);
        }
    }
    out
}

/// Writes every chart as SVG and PNG; returns the PNG paths.
pub fn write_all(a: &Analysis, dir: &Path) -> Result<Vec<PathBuf>> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut out = Vec::new();
    for c in charts(a, "") {
        let svg = dir.join(format!("{}.svg", c.name));
        ontime_core::fsio::write_atomic(&svg, c.svg()?.as_bytes())?;
        let png = dir.join(format!("{}.png", c.name));
        c.png(&png)?;
        out.push(png);
    }
    Ok(out)
}
