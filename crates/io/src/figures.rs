//! The figures: one chart per tenant of the bytes per second at each
//! layer, as SVG and PNG.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::analysis::IoAnalysis;
use crate::series::SeriesPoint;

type Pick = fn(&SeriesPoint) -> f64;

/// Writes one figure per tenant with a disk (bytes per second at each
/// layer) as SVG and PNG; returns the files.
pub fn figures(a: &IoAnalysis, dir: &Path) -> Result<Vec<PathBuf>> {
    ontime_plot::register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut out = Vec::new();
    for t in &a.tenants {
        if t.series.is_empty() {
            continue;
        }
        let mut c = ontime_plot::Chart::new(
            &format!("io-{}", t.name),
            format!("{}: bytes per second at each layer", t.name),
            "time (s)",
            "MiB/s",
        );
        let pick: [(&str, Pick); 6] = [
            ("application read", |p| p.app_read),
            ("virtual disk read", |p| p.virtual_read),
            ("physical disk read", |p| p.physical_read),
            ("application write", |p| p.app_write),
            ("virtual disk write", |p| p.virtual_write),
            ("physical disk write", |p| p.physical_write),
        ];
        for (name, f) in pick {
            let pts: Vec<(f64, f64)> = t.series.iter().map(|p| (p.t, f(p) / 1048576.0)).collect();
            if pts.iter().any(|p| p.1 > 0.0) {
                c.series.push((name.to_string(), pts));
            }
        }
        if c.series.is_empty() {
            continue;
        }
        let svg = dir.join(format!("io-{}.svg", t.name));
        ontime_core::fsio::write_atomic(&svg, c.svg()?.as_bytes())?;
        let png = dir.join(format!("io-{}.png", t.name));
        c.png(&png)?;
        out.push(svg);
        out.push(png);
    }
    Ok(out)
}
