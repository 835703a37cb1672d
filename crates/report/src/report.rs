//! `ontime lab report DIR`: one self-contained HTML page (plots inline as
//! SVG) plus PNG files of the same plots, from a results directory.
//!
//! - crawl scenarios: interval error percentiles (p50 ... p99.999, max)
//!   against the swept variable, one chart per series of the other swept
//!   keys (document 000 figures 5, 6, 8, 11, 14), pooled over tenants and
//!   repetitions from the tenants' histogram logs;
//! - cyclic scenarios: wake-up latency histograms, one line per run
//!   (document 001 figures 3 and 4);
//! - a table per run, the environment, the relay's measured delay, and a
//!   visible note wherever the sample count does not support a percentile.

use anyhow::{Context, Result};
use ontime_core::duration::format_ns;
use ontime_core::export::Exporter;
use ontime_core::stats::{LatencyHistogram, PERCENTILES};
use ontime_plot::{Chart, Range, Scale};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Swept (key, value) pairs of a run.
type Vars = Vec<(String, String)>;

use crate::html::esc;
use ontime_scenario::record::Workload;
use ontime_scenario::results::RunResults;

/// What the report wrote.
#[derive(Debug)]
pub struct Written {
    pub html: PathBuf,
    pub pngs: Vec<PathBuf>,
    pub runs: usize,
}

/// Every run; when some were simulated, each run's settings gain a
/// `source` (lab, or sim:<model>) so figures draw them as separate series
/// side by side.
pub(crate) fn load_runs(dir: &Path) -> Result<Vec<RunResults>> {
    let mut runs: Vec<RunResults> = ontime_scenario::results::run_dirs(dir)?
        .iter()
        .map(|d| ontime_scenario::results::read_run(d))
        .collect::<Result<_>>()?;
    if runs.iter().any(|r| r.record.simulated.is_some()) {
        for r in &mut runs {
            let source = match &r.record.simulated {
                Some(s) => format!("sim:{}", s.model),
                None => "lab".into(),
            };
            r.record.vars.push(("source".into(), source));
        }
    }
    Ok(runs)
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

fn vars_label(vars: &[(String, String)]) -> String {
    if vars.is_empty() {
        "(no sweep)".into()
    } else {
        vars.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A lab chart: y (ms or counts) on a log axis, 1000 x 560.
fn lab_chart(
    title: String,
    x_desc: &str,
    y_desc: String,
    x_labels: Option<Vec<String>>,
    series: Vec<(String, Vec<(f64, f64)>)>,
    x_scale: Scale,
) -> Chart {
    let mut c = Chart::new("figure", title, x_desc, y_desc);
    // Named settings (variants) are categories, not a scale: a line
    // between two of them would claim something lies between.
    c.points_only = x_labels
        .as_ref()
        .is_some_and(|l| l.iter().any(|v| number_or_size(v).is_none()));
    c.x_labels = x_labels;
    c.series = series;
    c.x_scale = x_scale;
    c.y_scale = Scale::Log;
    c.size = (1000, 560);
    c
}

fn number_or_size(v: &str) -> Option<f64> {
    v.parse::<f64>()
        .ok()
        .or_else(|| ontime_scenario::scenario::parse_bytes(v).ok().map(|b| b as f64))
}

/// Swept values of `key` as x-axis categories, each once: numbers and sizes
/// ("96M") in their order; named settings (variants) in the order the runs
/// ran them, which is the scenario's.
fn sort_categories(cats: &mut Vec<String>, runs: &[RunResults], key: &str) {
    let mut seen = std::collections::HashSet::new();
    cats.retain(|c| seen.insert(c.clone()));
    if cats.iter().all(|c| number_or_size(c).is_some()) {
        cats.sort_by(|a, b| {
            number_or_size(a)
                .unwrap_or(0.0)
                .total_cmp(&number_or_size(b).unwrap_or(0.0))
        });
        return;
    }
    let ran: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.record.vars.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()))
        .collect();
    cats.sort_by_key(|c| ran.iter().position(|v| v == c).unwrap_or(usize::MAX));
}

/// I/O runs: mean throughput of the tenants against the x key, one figure
/// per workload class, a line per setting of the other swept keys with
/// repetitions and swap settings pooled (swap moved these workloads least;
/// the table below has every cell).
fn io_charts(runs: &[RunResults], cells: &[ontime_io::advise::Cell], x_key: Option<&str>, charts: &mut Vec<Chart>) {
    let Some(xk) = x_key else { return };
    type Lines = BTreeMap<Vars, BTreeMap<String, Vec<f64>>>;
    let mut by_class: BTreeMap<String, Lines> = BTreeMap::new();
    for c in cells {
        let Some(r) = runs.iter().find(|r| r.name == c.run) else {
            continue;
        };
        let xv = r
            .record
            .vars
            .iter()
            .find(|(k, _)| k == xk)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let rest: Vars = r
            .record
            .vars
            .iter()
            .filter(|(k, _)| k != xk && k != "variant" && k != "tenant.swap")
            .cloned()
            .collect();
        by_class
            .entry(c.class.clone())
            .or_default()
            .entry(rest)
            .or_default()
            .entry(xv)
            .or_default()
            .push(c.throughput_bps / 1048576.0);
    }
    for (class, series) in by_class {
        let mut cats: Vec<String> = series.values().flat_map(|m| m.keys().cloned()).collect();
        sort_categories(&mut cats, runs, xk);
        let lines: Vec<(String, Vec<(f64, f64)>)> = series
            .iter()
            .map(|(rest, pts)| {
                let mut v: Vec<(f64, f64)> = pts
                    .iter()
                    .map(|(x, t)| {
                        (
                            cats.iter().position(|c| c == x).unwrap_or(0) as f64,
                            t.iter().sum::<f64>() / t.len().max(1) as f64,
                        )
                    })
                    .collect();
                v.sort_by(|a, b| a.0.total_cmp(&b.0));
                (
                    if rest.is_empty() {
                        "throughput".into()
                    } else {
                        vars_label(rest)
                    },
                    v,
                )
            })
            .collect();
        if lines.iter().any(|l| !l.1.is_empty()) {
            charts.push(lab_chart(
                format!("{class}: throughput vs {xk} (mean of the tenants)"),
                xk,
                "MiB/s".into(),
                Some(cats),
                lines,
                Scale::Linear,
            ));
        }
    }
}

/// The percentiles of the simulated-vs-measured figures.
const WORST_PERCENTILES: [(&str, f64); 2] = [("p99", 99.0), ("p99.9", 99.9)];

/// Per run, the worst tenant's headline p99 and p99.9 (None where no
/// tenant's samples support it), grouped by the swept values other than
/// `x_key` and the source, then by source, then by the value of `x_key`.
type WorstPerRun = BTreeMap<Vars, BTreeMap<String, BTreeMap<String, Vec<[Option<u64>; 2]>>>>;

/// Simulated beside measured: per setting of the other swept keys, one
/// figure with p99 and p99.9 of each source on the basis
/// `ontime sim validate` judges agreement on: each run's worst tenant,
/// the median over the repetitions, a bar spanning them. Per-run summaries
/// also hold for runs whose histogram logs were cut, where pooled
/// percentiles cannot be had.
fn simulated_vs_measured_charts(runs: &[RunResults], xk: &str, cats: &[String], metric: &str, charts: &mut Vec<Chart>) {
    let xpos = |x: &str| cats.iter().position(|c| c == x).unwrap_or(0) as f64;
    for (others, sources) in worst_tenant_per_run(runs, xk) {
        // Each line a little aside, the sources' lines of one
        // percentile next to each other, so bars do not overlap.
        let n = (sources.len() * WORST_PERCENTILES.len()) as f64;
        let mut lines = Vec::new();
        let mut ranges = Vec::new();
        for (k, (name, _)) in WORST_PERCENTILES.iter().enumerate() {
            for (i, (source, by_x)) in sources.iter().enumerate() {
                let j = (k * sources.len() + i) as f64;
                let dodge = (j - (n - 1.0) / 2.0) * 0.05;
                let (pts, bars) = median_and_range(by_x, k, |x| xpos(x) + dodge);
                if !pts.is_empty() {
                    ranges.push((lines.len(), bars));
                    lines.push((format!("{source} {name}"), pts));
                }
            }
        }
        if lines.is_empty() {
            continue;
        }
        let title = if others.is_empty() {
            String::new()
        } else {
            format!(" ({})", vars_label(&others))
        };
        let mut chart = lab_chart(
            format!("Simulated vs measured {metric} vs {xk}{title}"),
            xk,
            format!("worst tenant's {metric} (ms): median of the runs, bar: their range"),
            Some(cats.to_vec()),
            lines,
            Scale::Linear,
        );
        chart.ranges = ranges;
        chart.legend_left = true;
        charts.push(chart);
    }
}

/// Per value of the swept key, the median over the runs of percentile `k`
/// (ms) at `at(x)`, and a bar from the least to the most where there are
/// two runs or more; points in order of `at`.
fn median_and_range(
    by_x: &BTreeMap<String, Vec<[Option<u64>; 2]>>,
    k: usize,
    at: impl Fn(&str) -> f64,
) -> (Vec<(f64, f64)>, Vec<Range>) {
    let (mut pts, mut bars) = (Vec::new(), Vec::new());
    for (x, per_run) in by_x {
        let mut v: Vec<f64> = per_run.iter().filter_map(|w| w[k]).map(|ns| ns as f64 / 1e6).collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let at = at(x);
        pts.push((at, ontime_core::stats::quantile_sorted(&v, 0.5, |x| x)));
        if v.len() > 1 {
            bars.push((at, v[0], v[v.len() - 1]));
        }
    }
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    (pts, bars)
}

fn worst_tenant_per_run(runs: &[RunResults], x_key: &str) -> WorstPerRun {
    let mut out = WorstPerRun::new();
    for r in runs {
        let value = |k: &str| r.record.vars.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        let others: Vars = r
            .record
            .vars
            .iter()
            .filter(|(k, _)| k != x_key && k != "source")
            .cloned()
            .collect();
        let worst = WORST_PERCENTILES.map(|(_, p)| r.worst_tenant(Some(p)));
        out.entry(others)
            .or_default()
            .entry(value("source").unwrap_or_default())
            .or_default()
            .entry(value(x_key).unwrap_or_default())
            .or_default()
            .push(worst);
    }
    out
}

/// Writes `report.html` and PNGs into `out` (default `DIR/report`).
pub fn write(dir: &Path, out: Option<&Path>) -> Result<Written> {
    ontime_plot::register_font()?;
    let runs = load_runs(dir)?;
    if runs.is_empty() {
        return Err(ontime_core::BadInput(format!("{} holds no finished run yet", dir.join("runs").display())).into());
    }
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| dir.join("report"));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let scenario_name = runs[0].record.config.name.clone();
    let crawl = runs[0].record.workload == Workload::Crawl;
    let sweep_keys: Vec<String> = runs[0].record.vars.iter().map(|(k, _)| k.clone()).collect();
    let x_key = runs[0]
        .record
        .config
        .report
        .x
        .clone()
        .filter(|k| sweep_keys.contains(k))
        .or_else(|| sweep_keys.first().cloned());

    let mut charts: Vec<Chart> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let metric = runs[0].record.workload.metric();
    // Pool repetitions: group by all swept values.
    let mut groups: BTreeMap<Vars, LatencyHistogram> = BTreeMap::new();
    for r in &runs {
        groups.entry(r.record.vars.clone()).or_default().add(&r.pooled);
    }
    let simulated: Vec<&RunResults> = runs.iter().filter(|r| r.record.simulated.is_some()).collect();
    if let Some(s) = simulated.first().and_then(|r| r.record.simulated.as_ref()) {
        notes.push(format!(
            "{} of {} runs were simulated by ontime sim, not measured (source=sim:..., run names sim-...; first: model {}, {} CPUs, I/O path {}, host noise {}{}); docs/sim.md says what the models leave out",
            simulated.len(),
            runs.len(),
            s.model,
            s.cpus,
            s.io_cost_per_packet_ns.map_or("not modelled".into(), |c| format!("{} per packet", format_ns(c))),
            if s.host_noise { "calibrated" } else { "none" },
            s.calibration.as_deref().map(|c| format!(", calibration {c}")).unwrap_or_default(),
        ));
    }
    let cut = runs.iter().filter(|r| r.pooled_incomplete).count();
    if cut > 0 {
        notes.push(format!(
            "{cut} runs have histogram logs that hold no samples (cut to their headers, as ontime lab report --pack packs lab runs): figures of pooled percentiles leave their tenants out; the simulated-vs-measured figures use each run's own percentiles"
        ));
    }
    if runs.iter().any(|r| r.pooled_from_bins) {
        notes.push(
            "some runs have no histogram log: their pooled percentiles come from log bins and read up to a quarter high"
                .into(),
        );
    }
    let io = runs[0].record.workload == Workload::Io;
    // Each run's I/O cell (it reads the run's io.json) once, for the
    // figures and the I/O section.
    let io_cells = if io { crate::iocells::cells(&runs) } else { Vec::new() };
    if io {
        // The tools report summaries, not histograms: nothing to pool.
        groups.clear();
        io_charts(&runs, &io_cells, x_key.as_deref(), &mut charts);
    }
    let net_views = crate::netreport::views(&runs);
    if !net_views.is_empty() {
        // Flows are judged per flow, against their own deadlines.
        groups.clear();
        crate::netreport::charts(&net_views, &mut charts);
    }
    for (vars, h) in &groups {
        if h.percentile(99.999).is_none() {
            notes.push(format!(
                "{}: {} samples; percentiles above p{} are n/a (p99.999 needs 100 000)",
                vars_label(vars),
                h.len(),
                PERCENTILES
                    .iter()
                    .rev()
                    .find(|(_, p)| h.percentile(*p).is_some())
                    .map(|(n, _)| &n[1..])
                    .unwrap_or("-")
            ));
        }
    }
    if let Some(xk) = x_key.as_ref().filter(|_| !io && net_views.is_empty()) {
        // Series: the other swept keys' values; x: one tick per swept value,
        // in numeric order when the values are numbers.
        let mut series: BTreeMap<Vars, Vec<(String, &LatencyHistogram)>> = BTreeMap::new();
        for (vars, h) in &groups {
            let xv = vars
                .iter()
                .find(|(k, _)| k == xk)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let rest: Vec<_> = vars.iter().filter(|(k, _)| k != xk).cloned().collect();
            series.entry(rest).or_default().push((xv, h));
        }
        let mut cats: Vec<String> = groups
            .keys()
            .filter_map(|v| v.iter().find(|(k, _)| k == xk).map(|(_, x)| x.clone()))
            .collect();
        sort_categories(&mut cats, &runs, xk);
        let xpos = |x: &str| cats.iter().position(|c| c == x).unwrap_or(0) as f64;
        let line = |pts: &[(String, &LatencyHistogram)], p: Option<f64>| -> Vec<(f64, f64)> {
            let mut v: Vec<(f64, f64)> = pts
                .iter()
                .filter_map(|(x, h)| {
                    let ns = match p {
                        Some(p) => h.percentile(p)?,
                        None if !h.is_empty() => h.max(),
                        None => return None,
                    };
                    Some((xpos(x), ns as f64 / 1e6))
                })
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        };
        if !simulated.is_empty() {
            simulated_vs_measured_charts(&runs, xk, &cats, metric, &mut charts);
        }
        // With several series, first one figure that sets them side by side
        // (p99 and max), then one figure per series.
        if series.len() > 1 {
            let mut lines = Vec::new();
            for (rest, pts) in &series {
                lines.push((format!("{} p99", vars_label(rest)), line(pts, Some(99.0))));
                lines.push((format!("{} max", vars_label(rest)), line(pts, None)));
            }
            lines.retain(|l: &(String, Vec<(f64, f64)>)| !l.1.is_empty());
            charts.push(lab_chart(
                format!("{} p99 and max vs {xk}", capitalise(metric)),
                xk,
                format!("{metric} (ms)"),
                Some(cats.clone()),
                lines,
                Scale::Linear,
            ));
        }
        for (rest, pts) in &series {
            let mut lines: Vec<(String, Vec<(f64, f64)>)> = PERCENTILES
                .iter()
                .filter(|(n, _)| *n != "p99.9999")
                .map(|(name, p)| (name.to_string(), line(pts, Some(*p))))
                .collect();
            lines.push(("max".into(), line(pts, None)));
            lines.retain(|l| !l.1.is_empty());
            let title = if rest.is_empty() {
                String::new()
            } else {
                format!(" ({})", vars_label(rest))
            };
            charts.push(lab_chart(
                format!("{} vs {xk}{title}", capitalise(metric)),
                xk,
                format!("{metric} (ms)"),
                Some(cats.clone()),
                lines,
                Scale::Linear,
            ));
        }
    }
    if runs[0].record.workload == Workload::Cyclic {
        // Histograms (document 001 figures 3 and 4): one figure per value of
        // the first swept key, a line per combination of the others.
        let mut by_x: BTreeMap<String, Vec<(String, &LatencyHistogram)>> = BTreeMap::new();
        for (vars, h) in &groups {
            let (xv, rest): (String, Vars) = match &x_key {
                Some(xk) => (
                    vars.iter()
                        .find(|(k, _)| k == xk)
                        .map(|(k, v)| format!("{k}={v}"))
                        .unwrap_or_default(),
                    vars.iter().filter(|(k, _)| k != xk).cloned().collect(),
                ),
                None => (String::new(), vars.clone()),
            };
            by_x.entry(xv).or_default().push((vars_label(&rest), h));
        }
        for (xv, hs) in by_x {
            let lines = hs
                .into_iter()
                .map(|(name, h)| {
                    let pts = h
                        .log_bins()
                        .iter()
                        .map(|b| (b.le_ns as f64 / 1000.0, b.count as f64))
                        .collect();
                    (name, pts)
                })
                .collect();
            charts.push(lab_chart(
                if xv.is_empty() {
                    "Wake-up latency histogram".into()
                } else {
                    format!("Wake-up latency histogram ({xv})")
                },
                "latency (us), 10 bins per decade",
                "wake-ups".into(),
                None,
                lines,
                Scale::Log,
            ));
        }
    }

    explanation_charts(&runs, &mut charts);
    // A figure with nothing to draw (every run behind it lacks the
    // samples: histogram logs cut to their headers) would be a blank PNG.
    charts.retain(|c| c.series.iter().any(|s| !s.1.is_empty()));
    let mut pngs = Vec::new();
    let mut svgs = Vec::new();
    for (i, c) in charts.iter().enumerate() {
        let png = out.join(format!("figure-{}.png", i + 1));
        c.png(&png)?;
        pngs.push(png);
        svgs.push(c.svg()?);
    }

    let (mut observe_html, observe_pngs) = observe_section(&runs, &out)?;
    pngs.extend(observe_pngs);
    let (io_html, io_pngs) = crate::iocells::section(&runs, &io_cells, &out)?;
    observe_html.insert_str(0, &io_html);
    pngs.extend(io_pngs);
    let (net_html, net_pngs) = crate::netreport::section(&net_views, &out)?;
    observe_html.insert_str(0, &net_html);
    pngs.extend(net_pngs);
    let page = ReportPage {
        name: &scenario_name,
        crawl,
        runs: &runs,
        charts: &charts,
        svgs: &svgs,
        notes: &notes,
        scheduler_view: &observe_html,
    };
    let html = Html.export(&page)?;
    let path = out.join("report.html");
    ontime_core::fsio::write_atomic(&path, html.as_bytes())?;
    Ok(Written {
        html: path,
        pngs,
        runs: runs.len(),
    })
}

/// "Scheduler view": per run, what `ontime observe` recorded (100 ms peaks,
/// contention, steal, the host I/O path's minimum, the recorder's cost), and
/// the figures of the run with the worst error.
fn observe_section(runs: &[RunResults], out: &Path) -> Result<(String, Vec<PathBuf>)> {
    use ontime_sched::Analysis;
    let mut h = String::new();
    let mut pngs = Vec::new();
    let mut rows = String::new();
    let mut worst: Option<(u64, &RunResults, Analysis)> = None;
    for r in runs {
        let Some(o) = &r.record.observe else {
            continue;
        };
        let f2 = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
        let ms = |v: Option<u64>| v.map(format_ns).unwrap_or_else(|| "-".into());
        let Some(a) = r.analysis.clone() else {
            let _ = write!(
                rows,
                "<tr><td class=l>{}</td><td class=l colspan=9>{} {}</td><td>{}</td></tr>",
                esc(&r.name),
                esc(&o.recorder),
                esc(&match (&o.error, &o.flight) {
                    (Some(e), _) => e.clone(),
                    (None, Some(f)) => format!(
                        "flight recorder: kept {} of {} windows ({:.1} MB) around {} late intervals; \
                         no aggregates (observe.flight = \"off\" records the whole run)",
                        f.ring.kept,
                        f.ring.windows,
                        f.ring.bytes_kept as f64 / 1e6,
                        f.ring.triggers
                    ),
                    (None, None) => String::new(),
                }),
                f2(o.overhead_pct)
            );
            continue;
        };
        let t = a.tenant_summary(100_000_000);
        let _ = write!(
            rows,
            "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.name),
            f2(t.peak),
            t.above_one_cpu.map(|v| format!("{:.1}%", v * 100.0)).unwrap_or_else(|| "-".into()),
            match (t.mean_steal_pct, t.max_steal_pct) {
                (Some(m), Some(x)) => format!("{m:.1}% / {x:.1}%"),
                _ => "-".into(),
            },
            ms(t.contention_p99_ns),
            ms(t.contention_max_ns),
            t.full_episodes,
            f2(t.host_io_min),
            f2(t.host_io_mean),
            a.recording.lost,
            o.overhead_pct.map(|v| format!("{v:.2}%")).unwrap_or_else(|| "-".into()),
        );
        let err = r.pooled.max();
        if worst.as_ref().is_none_or(|(e, _, _)| err > *e) {
            worst = Some((err, r, a));
        }
    }
    if rows.is_empty() {
        return Ok((h, pngs));
    }
    h.push_str(
        "<h2 id=scheduler>Scheduler view (ontime observe)</h2><p>Recorded from the sched tracepoints during each run. \
Peak = the highest 100 ms-window CPU use of any tenant (CPUs); above 1 CPU = the largest share of a tenant's 100 ms windows using more than one CPU; \
steal = run delay as a share of a tenant's vCPU time (run + idle + steal = 100 %, as document 002 and mpstat count it), mean / worst tenant; contention = a tenant vCPU runnable but not running (episode length p99 and max over tenants; full = every vCPU of a tenant waiting); \
host I/O = relay, vhost and ksoftirqd threads, CPU per 100 ms window.</p>\
<table><tr><th>run</th><th>peak 100 ms</th><th>above 1 CPU</th><th>steal mean / worst</th><th>contention p99</th><th>contention max</th><th>full episodes</th>\
<th>host I/O min</th><th>host I/O mean</th><th>lost events</th><th>recorder cost (% core)</th></tr>",
    );
    h.push_str(&rows);
    h.push_str("</table>");
    if let Some((err, r, a)) = worst {
        let label = format!("{} (largest error, max {})", r.name, format_ns(err));
        let _ = write!(h, "<h3>Run {}</h3>", esc(&label));
        for (i, c) in ontime_observe::plots::charts(&a, &r.name).into_iter().enumerate() {
            let png = out.join(format!("observe-{}.png", i + 1));
            c.png(&png)?;
            let _ = write!(
                h,
                "<figure>{}<figcaption>{} (observe-{}.png)</figcaption></figure>",
                c.svg()?,
                esc(&c.title),
                i + 1
            );
            pngs.push(png);
        }
        let _ = write!(h, "<p>Full tables: runs/{}/observe.txt</p>", esc(&r.name));
        profile_section(r, out, &mut h, &mut pngs)?;
    }
    Ok((h, pngs))
}

/// Copies a figure of a run directory into the report under the input
/// rule: a regular file of at most [`crate::MAX_FIGURE_BYTES`], so a FIFO or a
/// device in a results directory neither hangs the report nor fills it
/// (bad input naming the file).
fn copy_figure(src: &Path, dest: &Path) -> Result<()> {
    ontime_core::fsio::copy_input(src, "figure", crate::MAX_FIGURE_BYTES, dest)
}

/// "Where the tenants' time went": for the run with the largest error,
/// when the scenario sampled stacks (`[observe] profile`), each tenant's
/// time classes, who stole from it and the functions the steal is charged
/// to, its class figures and links to the flame graphs.
fn profile_section(r: &RunResults, out: &Path, h: &mut String, pngs: &mut Vec<PathBuf>) -> Result<()> {
    let Some(file) = r.record.observe.as_ref().and_then(|o| o.profile.as_ref()) else {
        return Ok(());
    };
    let p: ontime_profile::ProfileReport = ontime_scenario::results::read_json(&r.dir.join(file), "profile report")?;
    let pct = |part: u64, whole: u64| {
        if whole == 0 {
            "-".to_string()
        } else {
            format!("{:.1}%", 100.0 * part as f64 / whole as f64)
        }
    };
    let _ = write!(
        h,
        "<h3>Where the tenants' time went (ontime profile, {} stack samples at {})</h3>\
<p>Each tenant's threads' time in classes that add up to it: run, idle (asleep by choice), steal (runnable while another task ran on its CPU, split by who ran) and I/O wait. \
Steal is charged to the function sampled before it when the sample after it is in the same function (document 002); the rest is uncharged. \
Steal by the host (VM exits): {}.</p>\
Figures per tenant sum its vCPU threads. Steal after a wake-up is scheduling latency (the thread had slept); the rest is preemption.</p>\
<table><tr><th>tenant</th><th>vCPU threads</th><th>run</th><th>idle</th><th>steal</th><th>of it after wake-up</th><th>by tenants</th><th>by host I/O</th><th>by other host work</th><th>I/O wait</th><th>uncharged steal</th><th>most steal charged to</th></tr>",
        p.profile.samples,
        format_ns(p.profile.sample_period_ns),
        esc(&p.profile.steal_host)
    );
    for t in &p.tenants {
        let a = t.apparent_ns;
        let top = p
            .functions
            .iter()
            .filter(|f| f.tenant == t.name && f.program.steal_ns > 0)
            .max_by_key(|f| f.program.steal_ns)
            .map(|f| format!("{} ({})", f.function, format_ns(f.program.steal_ns)))
            .unwrap_or_else(|| "-".into());
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=l>{}</td></tr>",
            esc(&t.name),
            t.threads,
            pct(t.run_ns, a),
            pct(t.idle_ns, a),
            pct(t.steal_runqueue_ns, a),
            pct(t.steal_after_wakeup_ns, t.steal_runqueue_ns),
            pct(t.steal_by.other_tenant_ns + t.steal_by.own_tenant_ns, a),
            pct(t.steal_by.host_io_ns, a),
            pct(t.steal_by.other_host_ns + t.steal_by.wakeup_ns, a),
            pct(t.io_wait_ns, a),
            pct(t.steal_uncharged_ns, t.steal_runqueue_ns),
            esc(&top)
        );
    }
    h.push_str("</table>");
    let figs = r.dir.join("profile");
    let mut classes: Vec<PathBuf> = std::fs::read_dir(&figs)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "png")
                        && p.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("classes-"))
                })
                .collect()
        })
        .unwrap_or_default();
    classes.sort();
    for (i, png) in classes.iter().take(4).enumerate() {
        let name = format!("profile-{}.png", i + 1);
        let dest = out.join(&name);
        copy_figure(png, &dest)?;
        let svg = ontime_core::fsio::read_text_capped(&png.with_extension("svg"), "figure", crate::MAX_FIGURE_BYTES)
            .unwrap_or_default();
        let _ = write!(h, "<figure>{svg}<figcaption>{name}</figcaption></figure>");
        pngs.push(dest);
    }
    for f in ["on-cpu.svg", "steal.svg"] {
        let src = figs.join(f);
        if src.exists() {
            let name = format!("profile-{f}");
            copy_figure(&src, &out.join(&name))?;
            let _ = write!(
                h,
                "<p><a href=\"{name}\">Flame graph: {}</a></p>",
                if f == "steal.svg" {
                    "steal charged to functions"
                } else {
                    "on-CPU time"
                }
            );
        }
    }
    let _ = write!(
        h,
        "<p>Full tables: runs/{0}/profile.txt; pprof: runs/{0}/profile.pb.gz (<code>go tool pprof -sample_index=steal</code>)</p>",
        esc(&r.name)
    );
    Ok(())
}

/// One tenant against the scenario's targets.
enum Judged {
    Met,
    /// (what, measured, target), the worst first by measured / target.
    Missed(Vec<(String, u64, u64)>),
    /// A target percentile the sample count cannot support.
    CannotTell(String),
}

fn judge(t: &ontime_scenario::results::ProbeResult, targets: &ontime_scenario::scenario::Targets) -> Judged {
    let s = t.headline();
    let mut misses = Vec::new();
    for (name, at_most) in &targets.latency {
        let value = if name == "max" { s.max_ns } else { s.get(name) };
        match value {
            Some(v) if v > *at_most => misses.push((name.clone(), v, *at_most)),
            Some(_) => {}
            None => return Judged::CannotTell(format!("{name} needs more samples than {} (n/a)", s.count)),
        }
    }
    if let Some(m) = targets.missed {
        if t.missed() > m {
            misses.push(("missed".into(), t.missed(), m));
        }
    }
    if misses.is_empty() {
        return Judged::Met;
    }
    let ratio = |(_, v, t): &(String, u64, u64)| *v as f64 / (*t).max(1) as f64;
    misses.sort_by(|a, b| ratio(b).total_cmp(&ratio(a)));
    Judged::Missed(misses)
}

fn show_value(what: &str, v: u64) -> String {
    if what == "missed" {
        v.to_string()
    } else {
        format_ns(v)
    }
}

/// The report's first screen: per run, which tenants met the scenario's
/// targets, the worst miss, and where to look for why.
fn verdict_section(runs: &[RunResults]) -> String {
    let mut h = String::from("<h2 id=verdict>Verdict</h2>");
    let targets = &runs[0].record.config.targets;
    let metric = runs[0].record.workload.metric();
    if targets.is_empty() {
        let _ = write!(
            h,
            "<p class=note>The scenario states no targets, so there is no verdict. Add for example \
<code>[targets]</code> <code>\"p99.9\" = \"10ms\"</code> <code>missed = 0</code> to the scenario; \
the worst {metric} per run is below.</p><table><tr><th>run</th><th>setting</th><th>worst p99.9</th><th>worst max</th><th>{}</th></tr>",
            runs[0].record.workload.misses()
        );
        for r in runs {
            let worst = |f: &dyn Fn(&ontime_core::stats::Summary) -> Option<u64>| {
                r.tenants.iter().filter_map(|(_, t)| f(t.headline())).max()
            };
            let missed: u64 = r.tenants.iter().map(|(_, t)| t.missed()).sum();
            let _ = write!(
                h,
                "<tr><td class=l><a href=\"#run-{n}\">{n}</a></td><td class=l>{}</td><td>{}</td><td>{}</td><td>{missed}</td></tr>",
                esc(&vars_label(&r.record.vars)),
                cell(worst(&|s| s.get("p99.9"))),
                cell(worst(&|s| s.max_ns)),
                n = esc(&r.name),
            );
        }
        h.push_str("</table>");
        return h;
    }
    let stated: Vec<String> = targets
        .latency
        .iter()
        .map(|(n, v)| format!("{metric} {n} &le; {}", format_ns(*v)))
        .chain(
            targets
                .missed
                .map(|m| format!("{} &le; {m}", runs[0].record.workload.misses())),
        )
        .collect();
    let _ = write!(
        h,
        "<p>Targets, per tenant: {}.</p><table><tr><th>run</th><th>setting</th><th>verdict</th><th>tenants that met them</th><th>worst miss</th><th>why</th></tr>",
        stated.join(", ")
    );
    let mut all_met = true;
    for r in runs {
        let judged: Vec<(usize, Judged)> = r.tenants.iter().map(|(i, t)| (*i, judge(t, targets))).collect();
        let met = judged.iter().filter(|(_, j)| matches!(j, Judged::Met)).count();
        let worst = judged
            .iter()
            .filter_map(|(i, j)| match j {
                Judged::Missed(m) => Some((*i, m[0].clone())),
                _ => None,
            })
            .max_by(|a, b| (a.1 .1 as f64 / a.1 .2.max(1) as f64).total_cmp(&(b.1 .1 as f64 / b.1 .2.max(1) as f64)));
        let cannot = judged.iter().find_map(|(_, j)| match j {
            Judged::CannotTell(why) => Some(why.clone()),
            _ => None,
        });
        let incomplete = !r.record.complete || r.tenants.len() < r.record.tenants.len();
        let (verdict, class) = if worst.is_some() {
            ("missed", "na")
        } else if cannot.is_some() || incomplete || r.tenants.is_empty() {
            ("cannot tell", "")
        } else {
            ("met", "ok")
        };
        all_met &= verdict == "met";
        let worst_text = match (&worst, &cannot) {
            (Some((i, (what, v, t))), _) => {
                format!("t{i}: {what} {} &gt; {}", show_value(what, *v), show_value(what, *t))
            }
            (None, Some(why)) => esc(why),
            (None, None) if incomplete => "the run is incomplete".into(),
            _ => "-".into(),
        };
        // The late events explained (the worst tenant's, else the tenant
        // with the most lateness); the scheduler's aggregates otherwise.
        let explained = r.explanations.as_ref().and_then(|x| {
            let worst_name = worst.as_ref().map(|(i, _)| format!("t{i}"));
            let (name, t) = match worst_name.as_ref().and_then(|n| x.tenants.get_key_value(n)) {
                Some(kv) => kv,
                None => x.tenants.iter().max_by_key(|(_, t)| t.primary().0.lateness_ns)?,
            };
            let (e, what) = t.primary();
            Some(format!(
                "<a href=\"#run-{}\">{}: {}</a>",
                esc(&r.name),
                esc(name),
                esc(&e.sentence(what))
            ))
        });
        let why = match &r.record.observe {
            _ if explained.is_some() => explained.unwrap_or_default(),
            None if r.record.simulated.is_some() => "simulated".into(),
            Some(_) => match &r.analysis {
                Some(a) => {
                    let t = a.tenant_summary(100_000_000);
                    format!(
                        "<a href=\"#scheduler\">contention p99 {}, steal {}, host I/O min {}</a>",
                        t.contention_p99_ns.map(format_ns).unwrap_or_else(|| "-".into()),
                        t.mean_steal_pct
                            .map(|v| format!("{v:.1}%"))
                            .unwrap_or_else(|| "-".into()),
                        t.host_io_min
                            .map(|v| format!("{v:.2} CPU"))
                            .unwrap_or_else(|| "-".into()),
                    )
                }
                None => "-".into(),
            },
            None => "not recorded".into(),
        };
        let _ = write!(
            h,
            "<tr><td class=l><a href=\"#run-{n}\">{n}</a></td><td class=l>{}</td><td class=\"l {class}\"><b>{verdict}</b></td><td>{met} of {}</td><td class=l>{worst_text}</td><td class=l>{why}</td></tr>",
            esc(&vars_label(&r.record.vars)),
            r.record.tenants.len(),
            n = esc(&r.name),
        );
    }
    h.push_str("</table>");
    if all_met {
        h.push_str("<p class=ok>Every tenant of every run met the targets.</p>");
    }
    h
}

fn cell(v: Option<u64>) -> String {
    v.map(format_ns).unwrap_or_else(|| "<span class=na>n/a</span>".into())
}

/// Everything the report page shows; the figures are already drawn (their
/// SVGs inline, PNGs written beside the page).
pub struct ReportPage<'a> {
    name: &'a str,
    crawl: bool,
    runs: &'a [RunResults],
    charts: &'a [Chart],
    svgs: &'a [String],
    notes: &'a [String],
    scheduler_view: &'a str,
}

/// The lab report as one self-contained HTML page: the verdict first, then
/// the model note, environment, sample-count notes, figures, the scheduler
/// view and a table per run.
pub struct Html;

impl Exporter<ReportPage<'_>> for Html {
    fn format(&self) -> &'static str {
        "html"
    }
    fn export(&self, p: &ReportPage<'_>) -> Result<String> {
        let mut html = render_html(p.name, p.crawl, p.runs, p.charts, p.svgs, p.notes);
        if let Some(at) = html.find("<h2>Runs</h2>") {
            html.insert_str(at, p.scheduler_view);
        }
        // The answer first: the verdict goes before everything but the title.
        if let Some(at) = html.find("<p class=model>") {
            html.insert_str(at, &verdict_section(p.runs));
        }
        Ok(html)
    }
}

/// The page without the verdict and the scheduler view (the exporter puts
/// them in).
fn render_html(
    name: &str,
    crawl: bool,
    runs: &[RunResults],
    charts: &[Chart],
    svgs: &[String],
    notes: &[String],
) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=utf-8><title>ontime lab: {n}</title><style>{style}</style></head><body><h1>ontime lab report: {n}</h1>",
        n = esc(name),
        style = crate::html::STYLE
    );
    // A sweep may mix backends (document 001's native baseline beside VM
    // tenants): every note its runs carry, once.
    let mut notes_seen: Vec<&str> = Vec::new();
    for r in runs {
        let n = r.record.environment.model_note.as_str();
        if !notes_seen.contains(&n) {
            notes_seen.push(n);
            let _ = write!(h, "<p class=model>{}</p>", esc(n));
        }
    }
    if let Some(d) = Some(&runs[0].record.config.description).filter(|d| !d.is_empty()) {
        let _ = write!(h, "<p>{}</p>", esc(d));
    }
    h.push_str(&environment_section(runs));
    h.push_str(&truth_section(runs));
    h.push_str(&notes_section(notes));
    h.push_str(&figures_section(charts, svgs));
    h.push_str(&runs_section(runs, crawl));
    h.push_str("<p><small>Made by ontime lab report. Numbers are the runs' own measurements; n/a marks a percentile the sample count cannot support.</small></p></body></html>\n");
    h
}

/// The attribution against the causes the runs injected (`[[inject]]`),
/// pooled over the runs of each setting.
fn truth_section(runs: &[RunResults]) -> String {
    let Some((caption, columns, rows)) = crate::markdown::truth_table(runs) else {
        return String::new();
    };
    let mut h = format!("<h2>Ground truth</h2><p>{}</p><table><tr>", esc(&caption));
    for c in &columns {
        let _ = write!(h, "<th>{}</th>", esc(c));
    }
    h.push_str("</tr>");
    for row in rows {
        h.push_str("<tr>");
        for c in row {
            let _ = write!(h, "<td>{}</td>", esc(&c));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    h
}

/// Kernel, clocksource, CPUs, backend, what was unavailable, the WAN delay
/// and what the relay measured.
fn environment_section(runs: &[RunResults]) -> String {
    let mut h = String::new();
    let env = &runs[0].record.environment;
    let m = &env.manifest;
    // Environment.
    let mut missing: Vec<String> = m.capabilities.missing.clone();
    if !env.netem {
        missing.push("netem (WAN delay by the host relay instead)".into());
    }
    let relay_delays: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let d = &r.record.relay.as_ref()?.delay;
            Some(format!(
                "{}: p50 {} p99 {} max {}",
                r.name,
                format_ns(d.percentile(50.0)?),
                format_ns(d.percentile(99.0)?),
                format_ns(d.max_ns?)
            ))
        })
        .collect();
    let stamps: Vec<String> = runs
        .iter()
        .filter_map(|r| Some(format!("{}: {}", r.name, stamp_line(r.record.gateway.as_ref()?))))
        .collect();
    let setting = runs[0].record.config.host.relay_delay;
    let _ = write!(
        h,
        "<h2>Environment</h2><table><tr><th>kernel</th><td class=l>{}</td></tr><tr><th>clocksource</th><td class=l>{}</td></tr>\
<tr><th>CPUs</th><td class=l>{}</td></tr><tr><th>backend</th><td class=l>{}</td></tr><tr><th>cgroups</th><td class=l>{}</td></tr>\
<tr><th>unavailable</th><td class=l>{}</td></tr><tr><th>WAN delay setting</th><td class=l>{} one way, added by the {}</td></tr>\
<tr><th>relay delay measured</th><td class=l>{}</td></tr>\
<tr><th>gateway receive stamps</th><td class=l>{}</td></tr>{}{}<tr><th>ontime</th><td class=l>{}</td></tr></table>",
        esc(&m.kernel),
        esc(&m.clocksource),
        m.cpus_online,
        esc(&{
            let mut b: Vec<&str> = runs.iter().map(|r| r.record.environment.manifest.backend.as_str()).collect();
            b.dedup();
            b.join(", ")
        }),
        env.cgroup_version.map(|v| format!("{v:?}")).unwrap_or_else(|| "none".into()),
        esc(&if missing.is_empty() { "nothing".into() } else { missing.join(", ") }),
        format_ns(setting),
        env.wan_delay_by.as_str(),
        esc(&relay_delays.join("<br>")).replace("&lt;br&gt;", "<br>"),
        if stamps.is_empty() {
            "no gateway (cyclic or I/O runs)".into()
        } else {
            esc(&stamps.join("<br>")).replace("&lt;br&gt;", "<br>")
        },
        vm_rows(runs),
        reference_rows(runs),
        esc(&m.version),
    );
    h
}

/// A run judged again from the gateway's receive log.
fn reference_text(j: &ontime_scenario::record::ReferenceJudgement) -> String {
    // A receive log cut by a kill or a full disk judges the run only up
    // to the cut: say so.
    let cut = j.incomplete.as_ref().map(|w| format!(" ({w})"));
    format!(
        "interval error p99 {} max {}, missed {}{}",
        cell(j.interval_error.percentile(99.0)),
        cell(j.interval_error.max_ns),
        j.missed,
        cut.unwrap_or_default()
    )
}

/// Runs on the host judged again from the gateway's receive log (Modbus
/// crawlers, whose answers carry no receive time: their own interval
/// error is taken at their sends).
fn reference_rows(runs: &[RunResults]) -> String {
    let lines: Vec<String> = runs
        .iter()
        .filter(|r| r.record.environment.vm.is_none())
        .filter_map(|r| Some(format!("{}: {}", r.name, reference_text(r.record.reference.as_ref()?))))
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let by_building = runs
        .iter()
        .any(|r| r.record.reference.as_ref().is_some_and(|x| !x.tenants.is_empty()));
    let own = if runs[0].record.workload == Workload::Wire {
        "the pollers' interval error is taken from their packets on the tenants' veths"
    } else if by_building {
        "the verdict and the tables judge each tenant by its building's polls in this log; the crawlers' own interval error, in their results, is taken at their sends: the protocol's answers carry no receive time"
    } else {
        "the crawlers' own interval error is taken at their sends: the protocol's answers carry no receive time"
    };
    format!(
        "<tr><th>judged from the gateway's receive stamps</th><td class=l>{}<br>({own})</td></tr>",
        esc(&lines.join("\n")).replace('\n', "<br>")
    )
}

/// QEMU tenants' accelerator (and why), devices and boot times, per run.
fn vm_rows(runs: &[RunResults]) -> String {
    let lines: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let vm = r.record.environment.vm.as_ref()?;
            let boot = if vm.boot_s.is_empty() {
                String::new()
            } else {
                let b: Vec<String> = vm.boot_s.iter().map(|s| format!("{s:.1}")).collect();
                format!("; boot {} s", b.join(", "))
            };
            // The crawlers judged on the host's clock beside their own.
            let reference = r
                .record
                .reference
                .as_ref()
                .map(|j| format!("; by the gateway's receive stamps (host clock): {}", reference_text(j)))
                .unwrap_or_default();
            Some(format!(
                "{}: {} ({}); NIC {}{}{}{}{}",
                r.name,
                vm.accel,
                vm.accel_why,
                vm.nic,
                if vm.vhost { " + vhost" } else { "" },
                vm.disk.as_ref().map(|d| format!("; disk {d}")).unwrap_or_default(),
                boot,
                reference
            ))
        })
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let qemu = runs
        .iter()
        .find_map(|r| r.record.environment.vm.as_ref().map(|v| v.qemu.clone()))
        .unwrap_or_default();
    format!(
        "<tr><th>QEMU guests</th><td class=l>{}<br>{}</td></tr>",
        esc(&qemu),
        esc(&lines.join("\n")).replace('\n', "<br>")
    )
}

/// What the crawlers of a run used, over its tenants: CPU per answered
/// poll (document 000's figure 4), network, peak memory, disk writes
/// (finding 1: a crawler is CPU-bound).
fn crawler_resources_line(r: &RunResults) -> Option<String> {
    let res: Vec<&ontime_crawl::Resources> = r
        .tenants
        .iter()
        .filter_map(|(_, p)| match p {
            ontime_scenario::results::ProbeResult::Crawl(c)
            | ontime_scenario::results::ProbeResult::CrawlAtDevice(c, _) => Some(&c.resources),
            _ => None,
        })
        .collect();
    if res.is_empty() {
        return None;
    }
    let n = res.len() as f64;
    let cpu: Vec<u64> = res.iter().filter_map(|x| x.cpu_per_poll_ns).collect();
    let mean_cpu = (!cpu.is_empty()).then(|| cpu.iter().sum::<u64>() / cpu.len() as u64);
    Some(format!(
        "CPU per answered poll {} (mean over {} tenant(s)); network {:.0} kbit/s per tenant; peak memory {:.1} MiB; disk written {} B in all",
        cell(mean_cpu),
        res.len(),
        res.iter().map(|x| x.net_kbit_per_s).sum::<f64>() / n,
        res.iter().map(|x| x.max_rss_bytes).max().unwrap_or(0) as f64 / 1048576.0,
        res.iter().filter_map(|x| x.disk_write_bytes).sum::<u64>()
    ))
}

/// Who stamped the gateway's receive times (interval error comes from
/// them) and how far the handler's own stamp came after the kernel's: the
/// error a user-space stamp would have added.
fn stamp_line(g: &ontime_gateway::server::GatewayStats) -> String {
    format!("{} requests, {}", g.requests, g.stamps.text())
}

/// Where the sample count does not support a percentile.
fn notes_section(notes: &[String]) -> String {
    let mut h = String::new();
    if !notes.is_empty() {
        h.push_str("<div class=note><b>Sample counts:</b><ul>");
        for n in notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul></div>");
    }
    h
}

fn figures_section(charts: &[Chart], svgs: &[String]) -> String {
    let mut h = String::new();
    h.push_str("<h2>Figures</h2>");
    for (i, (c, svg)) in charts.iter().zip(svgs).enumerate() {
        let _ = write!(
            h,
            "<figure>{svg}<figcaption>Figure {}: {} (figure-{}.png)</figcaption></figure>",
            i + 1,
            esc(&c.title),
            i + 1
        );
    }
    if charts.is_empty() {
        h.push_str("<p>No sweep: see the table.</p>");
    }
    h
}

/// The runs with the most explained lateness (six at most, each its tenant
/// with the most): that lateness over the run, stacked by cause.
fn explanation_charts(runs: &[RunResults], charts: &mut Vec<Chart>) {
    use ontime_explain::CauseKind;
    let mut picked: Vec<_> = runs
        .iter()
        .filter_map(|r| {
            let (name, t) = r
                .explanations
                .as_ref()?
                .tenants
                .iter()
                .max_by_key(|(_, t)| t.primary().0.lateness_ns)?;
            Some((r, name, t))
        })
        .filter(|(_, _, t)| !t.primary().0.over_time.is_empty())
        .collect();
    picked.sort_by_key(|(_, _, t)| std::cmp::Reverse(t.primary().0.lateness_ns));
    for (r, name, t) in picked.into_iter().take(6) {
        let (e, what) = t.primary();
        let b = &e.over_time;
        let t0 = b[0].start_ns;
        let mut c = Chart::new(
            "figure",
            format!("Why late: run {}, {name}'s {what} by cause", r.name),
            "planned time since its first late event (s)",
            "lateness summed per stretch (ms)",
        );
        c.stacked = true;
        c.size = (1000, 480);
        for (k, kind) in CauseKind::ALL.iter().enumerate() {
            if b.iter().all(|x| x.ns_by_cause[k] == 0) {
                continue;
            }
            let label = match kind {
                CauseKind::WaitedForCpu => "waited for a CPU",
                CauseKind::Interrupts => "interrupts",
                CauseKind::Throttled => "throttled",
                CauseKind::OwnWork => "own work",
                CauseKind::Blocked => "blocked",
                CauseKind::LateTimer => "late timer",
                CauseKind::Emulation => "emulation",
                CauseKind::Steal => "steal",
                CauseKind::Unexplained => "unexplained",
            };
            c.series.push((
                label.to_string(),
                b.iter()
                    .map(|x| ((x.start_ns - t0) as f64 / 1e9, x.ns_by_cause[k] as f64 / 1e6))
                    .collect(),
            ));
        }
        charts.push(c);
    }
}

/// A run's late events explained: per tenant the sentence, then the worst
/// events with their causes.
fn worst_events_table(x: &ontime_explain::kept::RunExplanations) -> String {
    let mut h = String::new();
    for (name, t) in &x.tenants {
        let (e, what) = t.primary();
        if t.arrivals.is_some() {
            // The send lag too: how much of it was the crawler's own.
            let _ = write!(
                h,
                "<p>why {} ({}): {}</p>",
                esc(name),
                esc(&t.what),
                esc(&t.explanation.sentence(&t.what))
            );
        }
        let _ = write!(h, "<p>why {}: {}</p>", esc(name), esc(&e.sentence(what)));
        if let Some(a) = t.answers.as_ref().filter(|a| a.late > 0) {
            let what = ontime_explain::kept::ANSWERS_WHAT;
            let _ = write!(h, "<p>why {} ({what}): {}</p>", esc(name), esc(&a.sentence(what)));
        }
        if e.worst.is_empty() {
            continue;
        }
        h.push_str("<table><tr><th>planned (s)</th><th>late</th><th>causes</th></tr>");
        for w in e.worst.iter().take(10) {
            let _ = write!(
                h,
                "<tr><td>{:.6}</td><td>{}</td><td class=l>{}</td></tr>",
                w.planned_ns as f64 / 1e9,
                format_ns(w.lateness_ns),
                esc(&w.causes_text())
            );
        }
        h.push_str("</table>");
        for u in &e.unseen {
            let _ = write!(h, "<p class=model>not recorded: {}</p>", esc(u));
        }
    }
    h
}

/// Per run: each tenant's percentiles, misses, send lag, the pooled row and
/// the relay's delay.
fn runs_section(runs: &[RunResults], crawl: bool) -> String {
    let mut h = String::new();
    h.push_str("<h2>Runs</h2>");
    let metric = runs[0].record.workload.metric();
    let _ = write!(
        h,
        "<p>Per tenant: {metric}. Pooled = all tenants of the run together.</p>"
    );
    for r in runs {
        let complete = r.record.complete;
        let _ = write!(
            h,
            "<h3 id=\"run-{}\">{}{}</h3><p>{}</p>",
            esc(&r.name),
            esc(&r.name),
            if complete {
                ""
            } else {
                " <span class=na>(incomplete)</span>"
            },
            esc(&vars_label(&r.record.vars))
        );
        if let Some(s) = &r.record.simulated {
            let _ = write!(
                h,
                "<p class=model>Simulated, not measured: model {}, {} CPUs, {:.2} CPUs busy, {} CPU hog(s), I/O path {}, host noise {}.{}</p>",
                esc(&s.model),
                s.cpus,
                s.busy_cpus,
                s.cpu_hogs,
                s.io_cost_per_packet_ns.map_or("not modelled".into(), |c| format!("{} per packet", format_ns(c))),
                if s.host_noise { "from the calibration" } else { "none" },
                if s.left_out.is_empty() {
                    String::new()
                } else {
                    format!(" Left out: {}.", esc(&s.left_out.join("; ")))
                }
            );
        }
        if let Some(e) = &r.record.error {
            let _ = write!(h, "<p class=na>error: {}</p>", esc(e));
        }
        h.push_str("<table><tr><th>tenant</th><th>count</th>");
        for (n, _) in PERCENTILES.iter().filter(|(n, _)| *n != "p99.9999") {
            let _ = write!(h, "<th>{n}</th>");
        }
        let _ = write!(
            h,
            "<th>max</th><th>{}</th>{}</tr>",
            runs[0].record.workload.misses(),
            if crawl { "<th>send lag p99.9</th>" } else { "" }
        );
        for (i, t) in &r.tenants {
            let s = t.headline();
            let _ = write!(h, "<tr><td>t{i}</td><td>{}</td>", s.count);
            for (n, _) in PERCENTILES.iter().filter(|(n, _)| *n != "p99.9999") {
                let _ = write!(h, "<td>{}</td>", cell(s.get(n)));
            }
            let _ = write!(h, "<td>{}</td><td>{}</td>", cell(s.max_ns), t.missed());
            if let Some(lag) = t.send_lag() {
                let _ = write!(h, "<td>{}</td>", cell(lag.get("p99.9")));
            }
            h.push_str("</tr>");
        }
        let p = r.pooled.summary(None);
        let _ = write!(h, "<tr><th>pooled</th><td>{}</td>", p.count);
        for (n, _) in PERCENTILES.iter().filter(|(n, _)| *n != "p99.9999") {
            let _ = write!(h, "<td>{}</td>", cell(p.get(n)));
        }
        let _ = write!(
            h,
            "<td>{}</td><td></td>{}</tr></table>",
            cell(p.max_ns),
            if crawl { "<td></td>" } else { "" }
        );
        if let Some(x) = &r.explanations {
            h.push_str(&worst_events_table(x));
        }
        if let Some(g) = &r.record.gateway {
            let _ = write!(h, "<p>gateway: {}</p>", esc(&stamp_line(g)));
        }
        if let Some(line) = crawler_resources_line(r) {
            let _ = write!(h, "<p>crawlers (measured): {}</p>", esc(&line));
        }
        if let Some(relay) = &r.record.relay {
            let d = &relay.delay;
            let _ = write!(
                h,
                "<p>relay: {} frames, {} dropped; delay p50 {} p99 {} max {} (setting {} + forwarding)</p>",
                relay.frames,
                relay.dropped,
                cell(d.get("p50")),
                cell(d.get("p99")),
                cell(d.max_ns),
                format_ns(relay.settings.delay_ns)
            );
            for dir in &relay.directions {
                let _ = write!(
                    h,
                    "<p>relay, {} ({} frames): late beyond the setting (from the kernel's receive stamp) p50 {} p99 {} max {}; of it, waiting to be read p99 {}</p>",
                    esc(&dir.direction),
                    dir.frames,
                    cell(dir.late.get("p50")),
                    cell(dir.late.get("p99")),
                    cell(dir.late.max_ns),
                    cell(dir.read_wait.get("p99"))
                );
            }
        }
    }
    h
}
