//! Figures of an analysis: CPU use over time at 100 ms, peak use against
//! window length, contention per tenant, and the host I/O path's minimum.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::analyze::GroupReport;
use crate::recording::GroupKind;
use crate::report::Analysis;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// Lines per figure; more tenants are shown by their 8 highest peaks.
const MAX_LINES: usize = 8;

pub fn register_font() -> Result<()> {
    let bytes = std::fs::read(FONT)
        .with_context(|| format!("cannot read {FONT}: install fonts-dejavu-core (scripts/setup.sh does)"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("{FONT} is not a usable font"))?;
    Ok(())
}

/// A line chart with a linear y axis from 0.
pub struct Chart {
    pub name: String,
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Category names for x = 0, 1, 2 ...
    pub x_labels: Option<Vec<String>>,
    pub log_x: bool,
    /// A dashed horizontal line (e.g. the host's CPU count).
    pub limit: Option<(String, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(0, 0, 0),
];

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("plot: {e:?}");
    root.fill(&WHITE).map_err(e)?;
    let pts: Vec<(f64, f64)> = c.series.iter().flat_map(|s| s.1.iter().copied()).collect();
    if pts.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let mut y1 = pts.iter().fold(0.0f64, |a, p| a.max(p.1));
    if let Some((_, l)) = &c.limit {
        y1 = y1.max(*l);
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.1 };
    if x1 <= x0 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    let pad = if c.x_labels.is_some() { 0.5 } else { 0.0 };
    let mut b = ChartBuilder::on(&root);
    b.caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            let labels = c.x_labels.clone();
            let log_x = c.log_x;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(c.x_desc.as_str()).y_desc(c.y_desc.as_str());
            let fmt = move |v: &f64| match &labels {
                Some(l) => l
                    .get(v.round() as usize)
                    .filter(|_| (v - v.round()).abs() < 1e-6)
                    .cloned()
                    .unwrap_or_default(),
                None if log_x => ontime_core::duration::format_ns(*v as u64),
                None => format!("{v}"),
            };
            mesh.x_label_formatter(&fmt);
            if let Some(l) = &c.x_labels {
                mesh.x_labels(l.len() * 2 + 1);
            }
            mesh.draw().map_err(e)?;
            if let Some((name, l)) = &c.limit {
                let l = *l;
                chart
                    .draw_series(DashedLineSeries::new(
                        vec![(x0 - pad, l), (x1 + pad, l)],
                        6,
                        4,
                        BLACK.stroke_width(1),
                    ))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
            }
            for (i, (name, points)) in c.series.iter().enumerate() {
                let col = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), col.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
                if points.len() <= 60 {
                    chart
                        .draw_series(points.iter().map(|&p| Circle::new(p, 3, col.filled())))
                        .map_err(e)?;
                }
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(e)?;
        }};
    }
    if c.log_x {
        body!(b
            .build_cartesian_2d((x0.max(1.0)..x1 * 1.5).log_scale(), 0.0..y1)
            .map_err(e)?);
    } else {
        body!(b.build_cartesian_2d(x0 - pad..x1 + pad, 0.0..y1).map_err(e)?);
    }
    root.present().map_err(e)?;
    Ok(())
}

impl Chart {
    pub fn svg(&self) -> Result<String> {
        let mut s = String::new();
        draw(SVGBackend::with_string(&mut s, (900, 420)).into_drawing_area(), self)?;
        Ok(s)
    }

    pub fn png(&self, path: &Path) -> Result<()> {
        draw(BitMapBackend::new(path, (900, 420)).into_drawing_area(), self)
    }
}

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
            out.push(Chart {
                name: "usage-over-time".into(),
                title: format!("{label}{sep}CPU use per {} window", ontime_core::duration::format_ns(w)),
                x_desc: "time (s)".into(),
                y_desc: "CPUs".into(),
                series,
                x_labels: None,
                log_x: false,
                limit: Some((format!("host: {} CPUs", a.recording.cpus), a.recording.cpus as f64)),
            });
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
        out.push(Chart {
            name: "peak-vs-window".into(),
            title: format!("{label}{sep}peak CPU use against window length"),
            x_desc: "window".into(),
            y_desc: "max CPUs in a window".into(),
            series: peak,
            x_labels: None,
            log_x: true,
            limit: None,
        });
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
        out.push(Chart {
            name: "contention".into(),
            title: format!("{label}{sep}contention episodes (a vCPU runnable, not running)"),
            x_desc: "tenant".into(),
            y_desc: "episode length (ms)".into(),
            series: vec![("p99".into(), p99), ("max".into(), max)],
            x_labels: Some(names),
            log_x: false,
            limit: None,
        });
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
            out.push(Chart {
                name: "host-io".into(),
                title: format!("{label}{sep}host I/O path CPU per window"),
                x_desc: "window".into(),
                y_desc: "CPUs".into(),
                series: vec![("min".into(), min), ("mean".into(), mean)],
                x_labels: None,
                log_x: true,
                limit: None,
            });
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
        std::fs::write(&svg, c.svg()?).with_context(|| format!("cannot write {}", svg.display()))?;
        let png = dir.join(format!("{}.png", c.name));
        c.png(&png)?;
        out.push(png);
    }
    Ok(out)
}

impl Analysis {
    pub fn has_kind(&self, k: GroupKind) -> bool {
        self.groups.iter().any(|g| g.kind == k)
    }
}
