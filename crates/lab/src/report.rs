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
use ontime_core::stats::{LatencyHistogram, PERCENTILES};
use ontime_plot::{Chart, Scale};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Swept (key, value) pairs of a run.
type Vars = Vec<(String, String)>;

/// One run as read back from disk.
struct RunView {
    name: String,
    vars: Vec<(String, String)>,
    record: Value,
    tenants: Vec<Value>,
    /// Crawl: pooled interval error. Cyclic: pooled wake-up latency.
    pooled: LatencyHistogram,
}

/// What the report wrote.
pub struct Written {
    pub html: PathBuf,
    pub pngs: Vec<PathBuf>,
    pub runs: usize,
}

fn read_json(p: &Path) -> Result<Value> {
    let t = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_str(&t).with_context(|| format!("{} is not JSON", p.display()))
}

fn load_runs(dir: &Path) -> Result<Vec<RunView>> {
    let runs_dir = dir.join("runs");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
        .with_context(|| {
            format!(
                "{} has no runs/ directory: is it a lab results directory?",
                dir.display()
            )
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("run.json").exists())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for d in names {
        let record = read_json(&d.join("run.json"))?;
        let vars: Vec<(String, String)> = record["vars"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|kv| Some((kv[0].as_str()?.to_string(), kv[1].as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let crawl = record["workload"] == "crawl";
        let mut pooled = LatencyHistogram::new();
        let mut tenants = Vec::new();
        for t in record["tenants"].as_array().into_iter().flatten() {
            let Some(f) = t["result"].as_str() else { continue };
            let i = t["index"].as_u64().unwrap_or(0);
            tenants.push(read_json(&d.join(f))?);
            if crawl {
                let h = d.join(format!("t{i}.hlog"));
                if h.exists() {
                    pooled.add(&ontime_core::hlog::read_merged(&h, "interval_error")?);
                }
            } else if let Some(bins) = tenants.last().and_then(|t| t["histogram_log"].as_array()) {
                for b in bins {
                    pooled.record_n(b["le_ns"].as_u64().unwrap_or(0), b["count"].as_u64().unwrap_or(0));
                }
            }
        }
        out.push(RunView {
            name: d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            vars,
            record,
            tenants,
            pooled,
        });
    }
    Ok(out)
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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
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
    c.x_labels = x_labels;
    c.series = series;
    c.x_scale = x_scale;
    c.y_scale = Scale::Log;
    c.size = (1000, 560);
    c
}

/// Writes `report.html` and PNGs into `out` (default `DIR/report`).
pub fn write(dir: &Path, out: Option<&Path>) -> Result<Written> {
    ontime_plot::register_font()?;
    let runs = load_runs(dir)?;
    anyhow::ensure!(
        !runs.is_empty(),
        "{} holds no finished run yet",
        dir.join("runs").display()
    );
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| dir.join("report"));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let scenario_name = runs[0].record["config"]["name"]
        .as_str()
        .unwrap_or("scenario")
        .to_string();
    let crawl = runs[0].record["workload"] == "crawl";
    let sweep_keys: Vec<String> = runs[0].vars.iter().map(|(k, _)| k.clone()).collect();
    let x_key = runs[0].record["config"]["report"]["x"]
        .as_str()
        .map(str::to_string)
        .filter(|k| sweep_keys.contains(k))
        .or_else(|| sweep_keys.first().cloned());

    let mut charts: Vec<Chart> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let metric = if crawl { "interval error" } else { "wake-up latency" };
    // Pool repetitions: group by all swept values.
    let mut groups: BTreeMap<Vars, LatencyHistogram> = BTreeMap::new();
    for r in &runs {
        groups.entry(r.vars.clone()).or_default().add(&r.pooled);
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
    if let Some(xk) = &x_key {
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
        cats.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
            (Ok(x), Ok(y)) => x.total_cmp(&y),
            _ => a.cmp(b),
        });
        cats.dedup();
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
    if !crawl {
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

    let mut pngs = Vec::new();
    let mut svgs = Vec::new();
    for (i, c) in charts.iter().enumerate() {
        let png = out.join(format!("figure-{}.png", i + 1));
        c.png(&png)?;
        pngs.push(png);
        svgs.push(c.svg()?);
    }

    let (observe_html, observe_pngs) = observe_section(dir, &runs, &out)?;
    pngs.extend(observe_pngs);
    let mut html = render_html(&scenario_name, crawl, &runs, &charts, &svgs, &notes);
    if let Some(at) = html.find("<h2>Runs</h2>") {
        html.insert_str(at, &observe_html);
    }
    let path = out.join("report.html");
    std::fs::write(&path, html).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Written {
        html: path,
        pngs,
        runs: runs.len(),
    })
}

/// "Scheduler view": per run, what `ontime observe` recorded (100 ms peaks,
/// contention, steal, the host I/O path's minimum, the recorder's cost), and
/// the figures of the run with the worst error.
fn observe_section(dir: &Path, runs: &[RunView], out: &Path) -> Result<(String, Vec<PathBuf>)> {
    use ontime_observe::report::Analysis;
    let mut h = String::new();
    let mut pngs = Vec::new();
    let mut rows = String::new();
    let mut worst: Option<(u64, &RunView, Analysis)> = None;
    for r in runs {
        let o = &r.record["observe"];
        if o.is_null() {
            continue;
        }
        let f2 = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
        let ms = |v: Option<u64>| v.map(format_ns).unwrap_or_else(|| "-".into());
        let analysis: Option<Analysis> = o["analysis"]
            .as_str()
            .and_then(|f| std::fs::read(dir.join("runs").join(&r.name).join(f)).ok())
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(a) = analysis else {
            let _ = write!(
                rows,
                "<tr><td class=l>{}</td><td class=l colspan=9>{} {}</td><td>{}</td></tr>",
                esc(&r.name),
                esc(o["recorder"].as_str().unwrap_or("?")),
                esc(o["error"].as_str().unwrap_or("")),
                f2(o["overhead_pct"].as_f64())
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
            t.mean_steal_pct.map(|v| format!("{v:.1}%")).unwrap_or_else(|| "-".into()),
            ms(t.contention_p99_ns),
            ms(t.contention_max_ns),
            t.full_episodes,
            f2(t.host_io_min),
            f2(t.host_io_mean),
            a.recording.lost,
            o["overhead_pct"].as_f64().map(|v| format!("{v:.2}%")).unwrap_or_else(|| "-".into()),
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
        "<h2>Scheduler view (ontime observe)</h2><p>Recorded from the sched tracepoints during each run. \
Peak = the highest 100 ms-window CPU use of any tenant (CPUs); above 1 CPU = the largest share of a tenant's 100 ms windows using more than one CPU; \
steal = run delay / (on-CPU + run delay), mean over tenants; contention = a tenant vCPU runnable but not running (episode length p99 and max over tenants; full = every vCPU of a tenant waiting); \
host I/O = relay, vhost and ksoftirqd threads, CPU per 100 ms window.</p>\
<table><tr><th>run</th><th>peak 100 ms</th><th>above 1 CPU</th><th>steal</th><th>contention p99</th><th>contention max</th><th>full episodes</th>\
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
    }
    Ok((h, pngs))
}

fn cell(v: Option<u64>) -> String {
    v.map(format_ns).unwrap_or_else(|| "<span class=na>n/a</span>".into())
}

fn pct(s: &Value, name: &str) -> Option<u64> {
    s["percentiles_ns"].as_array()?.iter().find(|p| p["name"] == name)?["value_ns"].as_u64()
}

fn render_html(
    name: &str,
    crawl: bool,
    runs: &[RunView],
    charts: &[Chart],
    svgs: &[String],
    notes: &[String],
) -> String {
    let mut h = String::new();
    let env = &runs[0].record["environment"];
    let m = &env["manifest"];
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=utf-8><title>ontime lab: {n}</title><style>
body{{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}} table{{border-collapse:collapse;font-size:13px;margin:1em 0}}
td,th{{border:1px solid #bbb;padding:3px 7px;text-align:right}} th{{background:#eee}} td.l{{text-align:left}}
.na{{color:#a00}} .note{{background:#fff6d6;border-left:4px solid #e0b000;padding:.5em 1em;margin:1em 0}}
.model{{background:#eef4ff;border-left:4px solid #3070d0;padding:.5em 1em}} figure{{margin:1em 0}}
</style></head><body><h1>ontime lab report: {n}</h1>",
        n = esc(name)
    );
    let _ = write!(
        h,
        "<p class=model>{}</p>",
        esc(env["model_note"].as_str().unwrap_or(crate::runner::MODEL_NOTE))
    );
    if let Some(d) = runs[0].record["config"]["description"]
        .as_str()
        .filter(|d| !d.is_empty())
    {
        let _ = write!(h, "<p>{}</p>", esc(d));
    }
    // Environment.
    let mut missing: Vec<String> = m["capabilities"]["missing"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if env["netem"] == false {
        missing.push("netem (WAN delay by the host relay instead)".into());
    }
    let relay_delays: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            let d = &r.record["relay"]["delay"];
            Some(format!(
                "{}: p50 {} p99 {} max {}",
                r.name,
                format_ns(pct(d, "p50")?),
                format_ns(pct(d, "p99")?),
                format_ns(d["max_ns"].as_u64()?)
            ))
        })
        .collect();
    let setting = runs[0].record["config"]["host"]["relay_delay"].as_u64().unwrap_or(0);
    let _ = write!(
        h,
        "<h2>Environment</h2><table><tr><th>kernel</th><td class=l>{}</td></tr><tr><th>clocksource</th><td class=l>{}</td></tr>\
<tr><th>CPUs</th><td class=l>{}</td></tr><tr><th>backend</th><td class=l>{}</td></tr><tr><th>cgroups</th><td class=l>{}</td></tr>\
<tr><th>unavailable</th><td class=l>{}</td></tr><tr><th>WAN delay setting</th><td class=l>{} one way, added by the {}</td></tr>\
<tr><th>relay delay measured</th><td class=l>{}</td></tr><tr><th>ontime</th><td class=l>{}</td></tr></table>",
        esc(m["kernel"].as_str().unwrap_or("?")),
        esc(m["clocksource"].as_str().unwrap_or("?")),
        m["cpus_online"],
        esc(m["backend"].as_str().unwrap_or("?")),
        esc(env["cgroup_version"].as_str().unwrap_or("none")),
        esc(&if missing.is_empty() { "nothing".into() } else { missing.join(", ") }),
        format_ns(setting),
        esc(env["wan_delay_by"].as_str().unwrap_or("relay")),
        esc(&relay_delays.join("<br>")).replace("&lt;br&gt;", "<br>"),
        esc(m["version"].as_str().unwrap_or("?")),
    );
    if !notes.is_empty() {
        h.push_str("<div class=note><b>Sample counts:</b><ul>");
        for n in notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul></div>");
    }
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
    h.push_str("<h2>Runs</h2>");
    let metric = if crawl { "interval error" } else { "wake-up latency" };
    let _ = write!(
        h,
        "<p>Per tenant: {metric}. Pooled = all tenants of the run together.</p>"
    );
    for r in runs {
        let complete = r.record["complete"].as_bool().unwrap_or(false);
        let _ = write!(
            h,
            "<h3>{}{}</h3><p>{}</p>",
            esc(&r.name),
            if complete {
                ""
            } else {
                " <span class=na>(incomplete)</span>"
            },
            esc(&vars_label(&r.vars))
        );
        if let Some(e) = r.record["error"].as_str() {
            let _ = write!(h, "<p class=na>error: {}</p>", esc(e));
        }
        h.push_str("<table><tr><th>tenant</th><th>count</th>");
        for (n, _) in PERCENTILES.iter().filter(|(n, _)| *n != "p99.9999") {
            let _ = write!(h, "<th>{n}</th>");
        }
        let _ = write!(
            h,
            "<th>max</th><th>{}</th>{}</tr>",
            if crawl { "missed" } else { "overruns" },
            if crawl { "<th>send lag p99.9</th>" } else { "" }
        );
        for (i, t) in r.tenants.iter().enumerate() {
            let s = if crawl { &t["interval_error"] } else { &t["latency"] };
            let _ = write!(h, "<tr><td>t{i}</td><td>{}</td>", s["count"]);
            for (n, _) in PERCENTILES.iter().filter(|(n, _)| *n != "p99.9999") {
                let _ = write!(h, "<td>{}</td>", cell(pct(s, n)));
            }
            let miss = if crawl { &t["missed"] } else { &t["overruns"] };
            let _ = write!(h, "<td>{}</td><td>{}</td>", cell(s["max_ns"].as_u64()), miss);
            if crawl {
                let _ = write!(h, "<td>{}</td>", cell(pct(&t["send_lag"], "p99.9")));
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
        let relay = &r.record["relay"];
        if relay.is_object() {
            let d = &relay["delay"];
            let _ = write!(
                h,
                "<p>relay: {} frames, {} dropped; delay p50 {} p99 {} max {} (setting {} + forwarding)</p>",
                relay["frames"],
                relay["dropped"],
                cell(pct(d, "p50")),
                cell(pct(d, "p99")),
                cell(d["max_ns"].as_u64()),
                format_ns(relay["settings"]["delay_ns"].as_u64().unwrap_or(0))
            );
        }
    }
    h.push_str("<p><small>Made by ontime lab report. Numbers are the runs' own measurements; n/a marks a percentile the sample count cannot support.</small></p></body></html>\n");
    h
}
