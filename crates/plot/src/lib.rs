//! Line charts for reports: named series of (x, y) points, linear or log
//! axes, category or duration tick labels, an optional dashed limit line,
//! rendered to SVG (for HTML) and PNG (for files) with DejaVu Sans; and the
//! HTML the reports share ([`html`]).

pub mod html;

use std::path::Path;

use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Makes DejaVu Sans the "sans-serif" family plotters draws with (the
/// bitmap backend has no system font lookup). Call before drawing; calls
/// after the first return the first outcome.
pub fn register_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT)
                .map_err(|e| format!("cannot read {FONT} ({e}): install fonts-dejavu-core (scripts/setup.sh does)"))?;
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT} is not a usable font"))
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    #[default]
    Linear,
    Log,
}

/// How x values are labelled when there are no category labels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XTicks {
    #[default]
    Plain,
    /// x values are nanoseconds: 1ms, 100ms, 1s.
    Duration,
}

/// Where the legend goes and how high the y axis must reach for it to
/// cover no point: the upper corner (left: true) whose points reach least
/// high (the left one when `left_only`), and the axis top raised so those
/// points stay below the legend. The legend is taken to span the outer
/// `LEGEND_WIDTH` of the plot's width and `legend_share` of its height
/// from the top.
fn legend_room(
    pts: &[(f64, f64)],
    (xa, xb): (f64, f64),
    (y0, y1): (f64, f64),
    (x_scale, y_scale): (Scale, Scale),
    legend_share: f64,
    left_only: bool,
) -> (bool, f64) {
    // Where a point lies across the plot, 0 to 1, as the axis draws it.
    let across = |x: f64| match x_scale {
        Scale::Log if xa > 0.0 && xb > xa && x > 0.0 => (x / xa).ln() / (xb / xa).ln(),
        _ if xb > xa => (x - xa) / (xb - xa),
        _ => 0.5,
    };
    let highest = |inside: &dyn Fn(f64) -> bool| {
        pts.iter()
            .filter(|p| p.1.is_finite() && inside(across(p.0)))
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let (l, r) = (highest(&|f| f <= LEGEND_WIDTH), highest(&|f| f >= 1.0 - LEGEND_WIDTH));
    let on_left = left_only || l <= r;
    let top = if on_left { l } else { r };
    // The fraction of the axis below the legend must hold `top`; a legend
    // taller than half the plot is let cover some rather than flatten it.
    let below = 1.0 - legend_share.clamp(0.0, 0.5);
    let needed = match y_scale {
        Scale::Linear => y0 + (top - y0) / below,
        Scale::Log if top > y0 && y0 > 0.0 => y0 * (top / y0).powf(1.0 / below),
        Scale::Log => y1,
    };
    (on_left, if needed.is_finite() { y1.max(needed) } else { y1 })
}

/// The share of the plot's width a legend takes at most, from its side.
const LEGEND_WIDTH: f64 = 0.3;

/// The share of a `height` px chart's plot area a legend of `entries`
/// takes: about 20 px an entry and 20 px of frame, of the height less the
/// caption and the x labels (about 100 px).
fn legend_share(entries: usize, height: u32) -> f64 {
    (entries as f64 * 20.0 + 20.0) / (height as f64 - 100.0).max(100.0)
}

/// A vertical bar at x from low to high: (x, low, high).
pub type Range = (f64, f64, f64);

#[derive(Clone, Debug)]
pub struct Chart {
    /// File stem when written (`<name>.png`).
    pub name: String,
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Category names for x = 0, 1, 2 ...
    pub x_labels: Option<Vec<String>>,
    pub x_ticks: XTicks,
    pub x_scale: Scale,
    /// Linear y starts at 0; log y spans the data with a factor 2 of room.
    pub y_scale: Scale,
    /// A dashed horizontal line (e.g. the host's CPU count).
    pub limit: Option<(String, f64)>,
    pub size: (u32, u32),
    /// Series stacked as filled areas, each on top of the ones before (all
    /// series on the same x values): shares that add up, such as a
    /// thread's time classes.
    pub stacked: bool,
    /// Vertical bars in a series' colour: (series index, [(x, low, high)]),
    /// e.g. the spread of the repetitions behind each point.
    pub ranges: Vec<(usize, Vec<Range>)>,
    /// The legend in the upper left corner instead of the upper right
    /// (for lines that rise to the right); otherwise in the upper corner
    /// where the fewest points lie.
    pub legend_left: bool,
    /// Points (with their ranges) not joined by lines: x values are named
    /// categories, not a scale.
    pub points_only: bool,
}

impl Chart {
    /// An empty chart: linear axes, plain ticks, 900 x 420.
    pub fn new(name: &str, title: impl Into<String>, x_desc: impl Into<String>, y_desc: impl Into<String>) -> Chart {
        Chart {
            name: name.into(),
            title: title.into(),
            x_desc: x_desc.into(),
            y_desc: y_desc.into(),
            series: Vec::new(),
            x_labels: None,
            x_ticks: XTicks::Plain,
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            limit: None,
            size: (900, 420),
            stacked: false,
            ranges: Vec::new(),
            legend_left: false,
            points_only: false,
        }
    }

    pub fn svg(&self) -> Result<String> {
        let mut s = String::new();
        draw(SVGBackend::with_string(&mut s, self.size).into_drawing_area(), self)?;
        Ok(s)
    }

    /// Writes the PNG whole or not at all (drawn beside it, then renamed):
    /// a full disk leaves no 0-byte figure that looks like one.
    pub fn png(&self, path: &Path) -> Result<()> {
        // The encoder takes the format from the name: keep ".png" last.
        let mut name = std::ffi::OsString::from(".");
        name.push(path.file_name().unwrap_or_default());
        name.push(".tmp.png");
        let tmp = path.with_file_name(name);
        let drawn = draw(BitMapBackend::new(&tmp, self.size).into_drawing_area(), self)
            .and_then(|()| std::fs::rename(&tmp, path).map_err(anyhow::Error::from));
        if drawn.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        drawn.with_context(|| format!("cannot write {}", path.display()))
    }
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
    // Stacked: each series becomes its band (lower, upper) over the ones
    // before it.
    let bands: Vec<Vec<(f64, f64, f64)>> = if c.stacked {
        let mut below: Vec<f64> = Vec::new();
        c.series
            .iter()
            .map(|(_, pts)| {
                below.resize(below.len().max(pts.len()), 0.0);
                pts.iter()
                    .enumerate()
                    .map(|(i, &(x, y))| {
                        let lo = below[i];
                        below[i] += y;
                        (x, lo, below[i])
                    })
                    .collect()
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut pts: Vec<(f64, f64)> = if c.stacked {
        bands.iter().flat_map(|b| b.iter().map(|&(x, _, hi)| (x, hi))).collect()
    } else {
        c.series.iter().flat_map(|s| s.1.iter().copied()).collect()
    };
    // The bars' ends are inside the axes too.
    pts.extend(
        c.ranges
            .iter()
            .flat_map(|(_, r)| r.iter().flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)])),
    );
    if pts.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (mut y0, mut y1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    if let Some((_, l)) = &c.limit {
        y0 = y0.min(*l);
        y1 = y1.max(*l);
    }
    let (y0, y1) = match c.y_scale {
        Scale::Linear => (0.0, if y1 <= 0.0 { 1.0 } else { y1 * 1.1 }),
        Scale::Log => ((y0 / 2.0).max(1e-4), (y1 * 2.0).max(1e-3)),
    };
    if x1 <= x0 {
        x0 -= 0.5;
        x1 += 0.5;
    }
    let pad = if c.x_labels.is_some() { 0.5 } else { 0.0 };
    let (xa, xb) = match c.x_scale {
        Scale::Linear => (x0 - pad, x1 + pad),
        Scale::Log => (x0.max(1e-3), x1 * 1.3),
    };
    // No legend covers data: it goes to the emptier upper corner, and the
    // axis reaches high enough to leave it room.
    let entries = c.series.len() + usize::from(c.limit.is_some());
    let mut under = pts;
    // The limit line runs the whole width, under either corner.
    under.extend(c.limit.iter().flat_map(|&(_, l)| [(xa, l), (xb, l)]));
    let (legend_left, y1) = legend_room(
        &under,
        (xa, xb),
        (y0, y1),
        (c.x_scale, c.y_scale),
        legend_share(entries, c.size.1),
        c.legend_left,
    );
    let mut b = ChartBuilder::on(&root);
    b.caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            let labels = c.x_labels.clone();
            let ticks = c.x_ticks;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(c.x_desc.as_str()).y_desc(c.y_desc.as_str());
            let fmt = move |v: &f64| match &labels {
                Some(l) => l
                    .get(v.round() as usize)
                    .filter(|_| (v - v.round()).abs() < 1e-6)
                    .cloned()
                    .unwrap_or_default(),
                None if ticks == XTicks::Duration => ontime_core::duration::format_ns(*v as u64),
                None => format!("{v}"),
            };
            mesh.x_label_formatter(&fmt);
            // Log axes put ticks at values like 0.30000000000000004.
            let yfmt = |v: &f64| tick_label(*v);
            mesh.y_label_formatter(&yfmt);
            if let Some(l) = &c.x_labels {
                // Two ticks per category so every category gets one.
                mesh.x_labels(l.len() * 2 + 1);
            }
            mesh.draw().map_err(e)?;
            if let Some((name, l)) = &c.limit {
                let l = *l;
                chart
                    .draw_series(DashedLineSeries::new(
                        vec![(xa, l), (xb, l)],
                        6,
                        4,
                        BLACK.stroke_width(1),
                    ))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
            }
            for (i, (name, band)) in c.series.iter().zip(&bands).enumerate() {
                let col = COLORS[i % COLORS.len()];
                let outline: Vec<(f64, f64)> = band
                    .iter()
                    .map(|&(x, _, hi)| (x, hi))
                    .chain(band.iter().rev().map(|&(x, lo, _)| (x, lo)))
                    .collect();
                chart
                    .draw_series(std::iter::once(Polygon::new(outline, col.mix(0.75).filled())))
                    .map_err(e)?
                    .label(name.0.as_str())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], col.mix(0.75).filled()));
            }
            for (i, (name, points)) in c.series.iter().enumerate().filter(|_| !c.stacked && c.points_only) {
                let col = COLORS[i % COLORS.len()];
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 5, col.filled())))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| Circle::new((x + 9, y), 5, col.filled()));
            }
            for (i, (name, points)) in c.series.iter().enumerate().filter(|_| !c.stacked && !c.points_only) {
                let col = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), col.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
                // Markers only where they can still be told apart.
                if points.len() <= 60 {
                    chart
                        .draw_series(points.iter().map(|&p| Circle::new(p, 3, col.filled())))
                        .map_err(e)?;
                }
            }
            for (i, bars) in &c.ranges {
                let col = COLORS[i % COLORS.len()];
                let mid = |x: f64, lo: f64, hi: f64| {
                    c.series
                        .get(*i)
                        .and_then(|s| s.1.iter().find(|p| (p.0 - x).abs() < 1e-9))
                        .map_or((lo * hi).sqrt(), |p| p.1)
                };
                chart
                    .draw_series(
                        bars.iter().map(|&(x, lo, hi)| {
                            ErrorBar::new_vertical(x, lo, mid(x, lo, hi), hi, col.stroke_width(1), 8)
                        }),
                    )
                    .map_err(e)?;
            }
            chart
                .configure_series_labels()
                .position(if legend_left {
                    SeriesLabelPosition::UpperLeft
                } else {
                    SeriesLabelPosition::UpperRight
                })
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(e)?;
        }};
    }
    match (c.x_scale, c.y_scale) {
        (Scale::Linear, Scale::Linear) => body!(b.build_cartesian_2d(xa..xb, y0..y1).map_err(e)?),
        (Scale::Linear, Scale::Log) => body!(b.build_cartesian_2d(xa..xb, (y0..y1).log_scale()).map_err(e)?),
        (Scale::Log, Scale::Linear) => body!(b.build_cartesian_2d((xa..xb).log_scale(), y0..y1).map_err(e)?),
        (Scale::Log, Scale::Log) => {
            body!(b
                .build_cartesian_2d((xa..xb).log_scale(), (y0..y1).log_scale())
                .map_err(e)?)
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_scale_combination_to_svg() {
        register_font().expect("font (fonts-dejavu-core)");
        for (xs, ys) in [
            (Scale::Linear, Scale::Linear),
            (Scale::Linear, Scale::Log),
            (Scale::Log, Scale::Linear),
            (Scale::Log, Scale::Log),
        ] {
            let mut c = Chart::new("t", "title", "x", "y");
            c.x_scale = xs;
            c.y_scale = ys;
            c.limit = Some(("limit".into(), 2.0));
            c.series.push(("a".into(), vec![(1.0, 0.5), (10.0, 3.0), (100.0, 1.0)]));
            let svg = c.svg().expect("draws");
            assert!(svg.contains("<svg"), "{xs:?}/{ys:?}");
        }
        let mut c = Chart::new("s", "stacked", "x", "share");
        c.stacked = true;
        c.series.push(("run".into(), vec![(0.0, 30.0), (1.0, 50.0)]));
        c.series.push(("steal".into(), vec![(0.0, 70.0), (1.0, 50.0)]));
        assert!(c.svg().expect("draws stacked").contains("<polygon"));
        // A bar reaching past every point widens the axis to hold it.
        let mut c = Chart::new("r", "ranges", "x", "y");
        c.y_scale = Scale::Log;
        c.series.push(("median".into(), vec![(0.0, 1.0), (1.0, 2.0)]));
        c.ranges.push((0, vec![(0.0, 0.5, 40.0)]));
        let tick_10 = ">\n10\n</text>";
        assert!(c.svg().expect("draws ranges").contains(tick_10));
        c.ranges.clear();
        assert!(!c.svg().expect("draws").contains(tick_10), "the points alone reach 4");
        // Nothing to draw is not an error.
        assert!(Chart::new("e", "empty", "x", "y").svg().is_ok());
    }
}

/// A tick value with at most 3 significant digits and no float noise
/// (log axes put ticks at values like 0.30000000000000004).
fn tick_label(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod category_tests {
    use super::*;

    fn variants() -> Chart {
        let mut c = Chart::new("f", "Wake-up latency vs variant", "variant", "ms");
        c.x_labels = Some(vec!["vm-emulated".into(), "vm-kernel".into(), "vm-virtio".into()]);
        c.y_scale = Scale::Log;
        c.series = vec![
            ("p99".into(), vec![(0.0, 150.0), (1.0, 40.0), (2.0, 90.0)]),
            ("max".into(), vec![(0.0, 100.0), (1.0, 71.0), (2.0, 284.0)]),
        ];
        c
    }

    #[test]
    fn named_categories_are_points_not_lines() {
        register_font().expect("font (fonts-dejavu-core)");
        let mut c = variants();
        let lines = c.svg().unwrap().matches("<polyline").count();
        c.points_only = true;
        let points = c.svg().unwrap().matches("<polyline").count();
        assert!(points < lines, "joined: {lines} polylines, as points: {points}");
        if let Some(p) = std::env::var_os("ONTIME_PLOT_DEMO") {
            c.png(std::path::Path::new(&p)).unwrap();
        }
    }

    #[test]
    fn the_legend_goes_where_points_reach_least_high_and_covers_none() {
        let pts = [(0.0, 10.0), (1.0, 50.0), (2.0, 284.0)];
        // The tallest point is at the right: the legend goes left, and the
        // axis is as it was (the left point is low).
        const LIN: (Scale, Scale) = (Scale::Linear, Scale::Linear);
        let (left, top) = legend_room(&pts, (-0.5, 2.5), (0.0, 312.0), LIN, 0.3, false);
        assert!(left);
        assert_eq!(top, 312.0);
        // Both corners high: the lower one, and the axis raised so the
        // point stays under the legend's 30 %.
        let pts = [(0.0, 300.0), (1.0, 50.0), (2.0, 284.0)];
        let (left, top) = legend_room(&pts, (-0.5, 2.5), (0.0, 330.0), LIN, 0.3, false);
        assert!(!left);
        assert!((top * 0.7 - 284.0).abs() < 1e-6, "{top}");
        // On a log axis, in log space.
        let (_, top) = legend_room(&pts, (-0.5, 2.5), (1.0, 600.0), (Scale::Linear, Scale::Log), 0.5, true);
        assert!((top.ln() * 0.5 - 300f64.ln()).abs() < 1e-9, "{top}");
        // On a log x axis, a point at 100 of 1e-3..1e3 is 83 % across:
        // under a legend on the right.
        let pts = [(1e-2, 1.0), (100.0, 50.0)];
        let (left, _) = legend_room(&pts, (1e-3, 1e3), (0.0, 60.0), (Scale::Log, Scale::Linear), 0.3, false);
        assert!(left, "the right corner holds the tall point");
    }
}

#[cfg(test)]
mod tick_tests {
    #[test]
    fn tick_labels_have_no_float_noise() {
        assert_eq!(super::tick_label(0.30000000000000004), "0.3");
        assert_eq!(super::tick_label(0.6000000000000001), "0.6");
        assert_eq!(super::tick_label(1000.0), "1000");
        assert_eq!(super::tick_label(0.125), "0.125");
        assert_eq!(super::tick_label(20.0), "20");
    }
}
