//! One view of the fleet from the results stream: hosts x tenants with
//! steal, busiest 100 ms, contention, anomalies and each host's latest
//! pprof; what the agents cost; how many messages were dead. `fleet
//! report` writes it as HTML (the lab report's style) or JSON, `fleet top`
//! prints it again and again.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::{self, consumer};
use futures_util::StreamExt;
use serde::Serialize;

use crate::conn::NatsArgs;
use crate::wire::{self, Anomaly, WindowResult};

#[derive(Clone, Debug, Default, Serialize)]
pub struct TenantRow {
    pub tenant: String,
    pub windows: u64,
    /// Steal in the latest window that has one, and the most in any
    /// (None: every window was too short for a share, n/a).
    pub steal_pct_last: Option<f64>,
    pub steal_pct_max: Option<f64>,
    pub peak_100ms_cpus_max: Option<f64>,
    /// Its CPU over the windows it was in, in CPUs (`on_cpu_ns` over
    /// `observed_ns`).
    pub mean_cpus: f64,
    pub on_cpu_ns: u64,
    /// Those windows' wall time.
    pub observed_ns: u64,
    pub contention_pct_max: Option<f64>,
    pub anomalies: Vec<Anomaly>,
    /// Functions by corrected time in the latest window with samples.
    pub top_functions: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct HostRow {
    pub host: String,
    pub windows: u64,
    /// Windows delivered more than once (a worker died with them).
    pub redelivered: u64,
    pub first_start_realtime_ns: u64,
    pub last_end_realtime_ns: u64,
    pub replayed: bool,
    pub tenants: Vec<TenantRow>,
    /// The latest window's pprof in the results object store.
    pub latest_pprof: Option<String>,
    pub agent_cpu_share: f64,
    pub agent_max_rss_bytes: u64,
    pub dropped_by_agent: u64,
    /// Workers that analysed this host's windows.
    pub workers: Vec<String>,
    /// The agent's probes' late wake-ups, explained.
    pub probes: Vec<ProbeRow>,
}

/// One agent probe's late wake-ups over every window of its host.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProbeRow {
    pub probe: String,
    pub threshold_ns: u64,
    /// Windows with a late wake-up, and of them those whose late events
    /// may be missing (the probe's log had not reached the window's end).
    pub windows: u64,
    pub windows_incomplete: u64,
    /// The windows' explanations pooled: late, explained, causes.
    pub pooled: ontime_explain::summary::PooledExplanation,
    /// The worst late wake-ups over all windows, worst first.
    pub worst: Vec<LateRow>,
}

/// One late wake-up, as the report lists it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LateRow {
    /// When it was planned: wall clock (ns since the epoch), from its
    /// window's start.
    pub planned_realtime_ns: u64,
    pub window: String,
    pub lateness_ns: u64,
    /// Its largest causes, in words.
    pub causes: String,
}

/// Late wake-ups listed per probe in the fleet's view.
pub const WORST_LISTED: usize = 20;

#[derive(Clone, Debug, Default, Serialize)]
pub struct FleetView {
    /// Why there is nothing to show, when there is not.
    pub empty_because: Option<String>,
    pub hosts: Vec<HostRow>,
    pub results: u64,
    pub dead_letters: u64,
    /// Window ids with more than one result (0 unless de-duplication failed).
    pub duplicate_results: u64,
}

/// Every result in the results stream, oldest first (and the dead letters' count).
/// None: the server has no results stream (no worker has run there).
pub async fn fetch(js: &jetstream::Context) -> Result<Option<(Vec<WindowResult>, u64)>> {
    use async_nats::jetstream::context::GetStreamErrorKind;
    let mut stream = match js.get_stream(wire::RESULTS_STREAM).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND) => {
            return Ok(None)
        }
        Err(e) => return Err(anyhow::anyhow!("the results stream: {e}")),
    };
    let total = stream
        .info()
        .await
        .map_err(|e| anyhow::anyhow!("the results stream's state: {e}"))?
        .state
        .messages;
    let mut out = Vec::with_capacity(total.min(1 << 20) as usize);
    if total > 0 {
        let c = stream
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("reading the results stream: {e}"))?;
        let mut msgs = c
            .messages()
            .await
            .map_err(|e| anyhow::anyhow!("reading the results stream: {e}"))?;
        while let Some(m) = tokio::time::timeout(Duration::from_secs(10), msgs.next())
            .await
            .context("the results stream stopped answering")?
        {
            let m = m.map_err(|e| anyhow::anyhow!("reading the results stream: {e}"))?;
            if let Ok(r) = serde_json::from_slice::<WindowResult>(&m.payload) {
                out.push(r);
            }
            let pending = m.info().map(|i| i.pending).unwrap_or(0);
            if pending == 0 {
                break;
            }
        }
    }
    let dead = match js.get_stream(wire::DEAD_STREAM).await {
        Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
        Err(_) => 0,
    };
    Ok(Some((out, dead)))
}

pub fn view(results: &[WindowResult], dead_letters: u64) -> FleetView {
    let mut hosts: BTreeMap<&str, HostRow> = BTreeMap::new();
    let mut ids: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sorted: Vec<&WindowResult> = results.iter().collect();
    sorted.sort_by_key(|r| (r.host.clone(), r.start_realtime_ns));
    // Each host's probes' explanations, pooled at the end.
    let mut explained: BTreeMap<(&str, &str), Vec<&ontime_explain::RunExplanation>> = BTreeMap::new();
    for r in sorted {
        *ids.entry(&r.id).or_default() += 1;
        let h = hosts.entry(&r.host).or_insert_with(|| HostRow {
            host: r.host.clone(),
            first_start_realtime_ns: r.start_realtime_ns,
            ..Default::default()
        });
        h.windows += 1;
        h.redelivered += (r.delivered > 1) as u64;
        h.last_end_realtime_ns = h
            .last_end_realtime_ns
            .max(r.start_realtime_ns.saturating_add(r.duration_ns));
        h.replayed |= r.replayed;
        if r.pprof.is_some() {
            h.latest_pprof = r.pprof.clone();
        }
        if r.agent_uptime_ns > 0 {
            h.agent_cpu_share = r.agent_cpu_ns as f64 / r.agent_uptime_ns as f64;
        }
        h.agent_max_rss_bytes = h.agent_max_rss_bytes.max(r.agent_rss_bytes);
        h.dropped_by_agent = h.dropped_by_agent.max(r.dropped_by_agent);
        if !h.workers.contains(&r.worker) {
            h.workers.push(r.worker.clone());
        }
        for t in &r.tenants {
            let row = match h.tenants.iter_mut().position(|x| x.tenant == t.name) {
                Some(i) => &mut h.tenants[i],
                None => {
                    h.tenants.push(TenantRow {
                        tenant: t.name.clone(),
                        ..Default::default()
                    });
                    h.tenants.last_mut().expect("just pushed")
                }
            };
            row.windows += 1;
            row.observed_ns = row.observed_ns.saturating_add(r.duration_ns);
            row.on_cpu_ns = row.on_cpu_ns.saturating_add(t.on_cpu_ns);
            row.mean_cpus = row.on_cpu_ns as f64 / row.observed_ns.max(1) as f64;
            // An almost empty window's n/a leaves the figures as they were.
            if let Some(s) = t.steal_pct {
                row.steal_pct_last = Some(s);
                row.steal_pct_max = Some(row.steal_pct_max.map_or(s, |m| m.max(s)));
            }
            if let Some(c) = t.contention_pct {
                row.contention_pct_max = Some(row.contention_pct_max.map_or(c, |m| m.max(c)));
            }
            if let Some(p) = t.peak_100ms_cpus {
                row.peak_100ms_cpus_max = Some(row.peak_100ms_cpus_max.map_or(p, |m: f64| m.max(p)));
            }
            if !t.functions.is_empty() {
                row.top_functions = t.functions.clone();
            }
        }
        for a in &r.anomalies {
            if let Some(row) = h.tenants.iter_mut().find(|x| x.tenant == a.tenant) {
                row.anomalies.push(a.clone());
            }
        }
        for l in &r.late {
            let x = &l.explanation;
            let i = match h.probes.iter().position(|p| p.probe == l.probe) {
                Some(i) => i,
                None => {
                    h.probes.push(ProbeRow {
                        probe: l.probe.clone(),
                        ..Default::default()
                    });
                    h.probes.len() - 1
                }
            };
            let row = &mut h.probes[i];
            row.threshold_ns = x.threshold_ns;
            if x.late > 0 {
                row.windows += 1;
                row.windows_incomplete += !l.complete as u64;
            }
            explained
                .entry((r.host.as_str(), l.probe.as_str()))
                .or_default()
                .push(x);
            row.worst.extend(x.worst.iter().map(|e| {
                LateRow {
                    planned_realtime_ns: r
                        .start_realtime_ns
                        .saturating_add(e.planned_ns.saturating_sub(l.window_start_ns)),
                    window: r.id.clone(),
                    lateness_ns: e.lateness_ns,
                    causes: e.causes_text(),
                }
            }));
            row.worst.sort_by(|a, b| {
                b.lateness_ns
                    .cmp(&a.lateness_ns)
                    .then(a.planned_realtime_ns.cmp(&b.planned_realtime_ns))
            });
            row.worst.truncate(WORST_LISTED);
        }
    }
    for ((host, probe), runs) in explained {
        if let Some(row) = hosts
            .get_mut(host)
            .and_then(|h| h.probes.iter_mut().find(|p| p.probe == probe))
        {
            row.pooled = ontime_explain::summary::PooledExplanation::of(runs.into_iter());
        }
    }
    FleetView {
        empty_because: None,
        hosts: hosts.into_values().collect(),
        results: results.len() as u64,
        dead_letters,
        duplicate_results: ids.values().filter(|&&n| n > 1).count() as u64,
    }
}

/// Reads the fleet's results, on one connection; with `pprof_dir`, copies
/// each host's latest pprof there (`<host>.pb.gz`, for the HTML report's
/// links) and names the files written.
pub fn load(nats: &NatsArgs, pprof_dir: Option<&Path>) -> Result<(FleetView, Vec<String>)> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let client = nats.connect("ontime-fleet").await?;
        let js = jetstream::new(client);
        let v = match fetch(&js).await? {
            Some((results, dead)) => view(&results, dead),
            None => FleetView {
                empty_because: Some(format!(
                    "no results on {} yet: start `ontime analyse` workers (and agents)",
                    nats.servers.join(",")
                )),
                ..Default::default()
            },
        };
        let written = match pprof_dir {
            Some(dir) => fetch_pprofs(&js, &v, dir).await?,
            None => Vec::new(),
        };
        Ok((v, written))
    })
}

async fn fetch_pprofs(js: &jetstream::Context, v: &FleetView, dir: &Path) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let store = js
        .get_object_store(wire::RESULT_BUCKET)
        .await
        .map_err(|e| anyhow::anyhow!("the results object store: {e}"))?;
    let mut written = Vec::new();
    for h in &v.hosts {
        let Some(name) = &h.latest_pprof else { continue };
        let Ok(mut obj) = store.get(name).await else { continue };
        let file = format!("{}.pb.gz", h.host);
        let mut f = tokio::fs::File::create(dir.join(&file)).await?;
        tokio::io::copy(&mut obj, &mut f).await?;
        written.push(file);
    }
    Ok(written)
}

impl TenantRow {
    /// The figures both tables show, in order: windows, mean CPUs, steal
    /// last and max, busiest 100 ms, contention max, anomalies.
    fn cells(&self) -> [String; 7] {
        [
            self.windows.to_string(),
            format!("{:.3}", self.mean_cpus),
            pct(self.steal_pct_last),
            pct(self.steal_pct_max),
            cpus(self.peak_100ms_cpus_max),
            pct(self.contention_pct_max),
            self.anomalies.len().to_string(),
        ]
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.1} %"))
}

fn cpus(v: Option<f64>) -> String {
    v.map_or("-".into(), |c| format!("{c:.2}"))
}

fn anomaly_text(a: &Anomaly) -> String {
    // Each metric in its own unit: steal in %, peaks in CPUs, a
    // function's corrected time (ns in the result) in ms.
    let (scale, unit) = match a.metric.as_str() {
        "steal_pct" => (1.0, " %"),
        "peak_100ms_cpus" => (1.0, " CPUs"),
        _ => (1e-6, " ms"),
    };
    let v = |x: f64| format!("{:.2}{unit}", x * scale);
    format!(
        "{} {} over {} (median {}, MAD {}, {} windows)",
        a.metric,
        v(a.value),
        v(a.threshold),
        v(a.median),
        v(a.mad),
        a.history
    )
}

/// The view as text (`fleet top`, `fleet report` without -o).
pub fn text(v: &FleetView) -> String {
    let mut out = String::new();
    if let Some(why) = &v.empty_because {
        let _ = writeln!(out, "{why}");
        return out;
    }
    let _ = writeln!(
        out,
        "{} host(s), {} window result(s), {} dead letter(s), {} window(s) with more than one result",
        v.hosts.len(),
        v.results,
        v.dead_letters,
        v.duplicate_results
    );
    let _ = writeln!(
        out,
        "{:<16} {:<12} {:>7} {:>8} {:>10} {:>9} {:>12} {:>11} {:>9}",
        "host", "tenant", "windows", "mean CPU", "steal last", "steal max", "100ms peak", "contention", "anomalies"
    );
    for h in &v.hosts {
        for t in &h.tenants {
            let c = t.cells();
            let _ = writeln!(
                out,
                "{:<16} {:<12} {:>7} {:>8} {:>10} {:>9} {:>12} {:>11} {:>9}",
                h.host, t.tenant, c[0], c[1], c[2], c[3], c[4], c[5], c[6]
            );
        }
        let _ = writeln!(
            out,
            "{:<16} agent: {:.2} % of a core, {} MiB max resident, {} window(s) dropped{}",
            "",
            h.agent_cpu_share * 100.0,
            h.agent_max_rss_bytes >> 20,
            h.dropped_by_agent,
            if h.replayed { ", replayed windows" } else { "" }
        );
        for p in &h.probes {
            let _ = writeln!(out, "{:<16} probe {}: {}", "", p.probe, p.summary());
            for e in p.worst.iter().take(5) {
                let _ = writeln!(
                    out,
                    "{:<16}   {}  {:>10} late: {}",
                    "",
                    ontime_core::manifest::utc_millis(e.planned_realtime_ns),
                    ontime_core::duration::format_ns(e.lateness_ns),
                    e.causes
                );
            }
        }
    }
    out
}

impl ProbeRow {
    /// "14 late wake-ups over 1.0 ms in 3 windows; <the pooled sentence>".
    pub fn summary(&self) -> String {
        let incomplete = if self.windows_incomplete > 0 {
            format!(" ({} with events possibly missing)", self.windows_incomplete)
        } else {
            String::new()
        };
        format!(
            "{} late wake-up(s) over {} in {} window(s){incomplete}; {}",
            self.pooled.late,
            ontime_core::duration::format_ns(self.threshold_ns),
            self.windows,
            self.pooled.sentence()
        )
    }
}

/// The view as an HTML page; `pprofs`: the hosts whose latest pprof sits
/// beside it as `<host>.pb.gz`.
pub fn html(v: &FleetView, pprofs: &[String]) -> String {
    use ontime_plot::html::esc;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=utf-8><title>ontime fleet</title><style>{}</style></head><body><h1>ontime fleet report</h1>",
        ontime_plot::html::STYLE
    );
    if let Some(why) = &v.empty_because {
        let _ = write!(h, "<p class=note>{}</p>", esc(why));
    }
    let anomalies: usize = v.hosts.iter().flat_map(|h| &h.tenants).map(|t| t.anomalies.len()).sum();
    let _ = write!(
        h,
        "<p>{} host(s), {} analysed window(s), {} anomal{} flagged, {} dead letter(s), {} window(s) with more than one result.</p>",
        v.hosts.len(),
        v.results,
        anomalies,
        if anomalies == 1 { "y" } else { "ies" },
        v.dead_letters,
        v.duplicate_results
    );
    h.push_str("<h2>Hosts and tenants</h2><table><tr><th>host</th><th>tenant</th><th>windows</th><th>mean CPUs</th><th>steal last</th><th>steal max</th><th>busiest 100 ms (CPUs)</th><th>contention max</th><th>anomalies</th><th>top function (corrected)</th></tr>");
    for host in &v.hosts {
        for (i, t) in host.tenants.iter().enumerate() {
            let name = if i == 0 {
                let link = if pprofs.iter().any(|p| p == &format!("{}.pb.gz", host.host)) {
                    format!(" <a href=\"{0}.pb.gz\">pprof</a>", esc(&host.host))
                } else {
                    String::new()
                };
                format!(
                    "<td class=l rowspan={}>{}{link}</td>",
                    host.tenants.len(),
                    esc(&host.host)
                )
            } else {
                String::new()
            };
            let c = t.cells();
            let top = t
                .top_functions
                .first()
                .map(|(f, ns)| format!("{} {:.1} ms", esc(f), *ns as f64 / 1e6))
                .unwrap_or_else(|| "-".into());
            let _ = write!(
                h,
                "<tr>{name}<td class=l>{}</td>{}<td{}>{}</td><td class=l>{top}</td></tr>",
                esc(&t.tenant),
                c[..6].iter().map(|v| format!("<td>{v}</td>")).collect::<String>(),
                if t.anomalies.is_empty() { "" } else { " class=na" },
                c[6]
            );
        }
    }
    h.push_str("</table>");
    if anomalies > 0 {
        h.push_str(
            "<h2>Anomalies</h2><table><tr><th>host</th><th>tenant</th><th>what departed from its history</th></tr>",
        );
        for host in &v.hosts {
            for t in &host.tenants {
                for a in &t.anomalies {
                    let _ = write!(
                        h,
                        "<tr><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td></tr>",
                        esc(&host.host),
                        esc(&t.tenant),
                        esc(&anomaly_text(a))
                    );
                }
            }
        }
        h.push_str("</table>");
    }
    if v.hosts.iter().any(|h| !h.probes.is_empty()) {
        h.push_str("<h2>Late wake-ups and why</h2><p>Each agent's probes' wake-ups later than their threshold, explained on the window that holds them.</p><table><tr><th>host</th><th>probe</th><th>late wake-ups, and why</th></tr>");
        for host in &v.hosts {
            for p in &host.probes {
                let _ = write!(
                    h,
                    "<tr><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td></tr>",
                    esc(&host.host),
                    esc(&p.probe),
                    esc(&p.summary())
                );
            }
        }
        h.push_str("</table><h3>The worst late wake-ups</h3><table><tr><th>host</th><th>probe</th><th>planned (UTC)</th><th>late by</th><th>causes</th></tr>");
        for host in &v.hosts {
            for p in &host.probes {
                for e in &p.worst {
                    let _ = write!(
                        h,
                        "<tr><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td><td>{}</td><td class=l>{}</td></tr>",
                        esc(&host.host),
                        esc(&p.probe),
                        ontime_core::manifest::utc_millis(e.planned_realtime_ns),
                        ontime_core::duration::format_ns(e.lateness_ns),
                        esc(&e.causes)
                    );
                }
            }
        }
        h.push_str("</table>");
    }
    h.push_str("<h2>Agents and workers</h2><table><tr><th>host</th><th>windows</th><th>redelivered</th><th>agent CPU (share of a core)</th><th>agent max resident</th><th>dropped (spool full)</th><th>analysed by</th></tr>");
    for host in &v.hosts {
        let _ = write!(
            h,
            "<tr><td class=l>{}{}</td><td>{}</td><td>{}</td><td>{:.2} %</td><td>{} MiB</td><td>{}</td><td class=l>{}</td></tr>",
            esc(&host.host),
            if host.replayed { " (replayed)" } else { "" },
            host.windows,
            host.redelivered,
            host.agent_cpu_share * 100.0,
            host.agent_max_rss_bytes >> 20,
            host.dropped_by_agent,
            esc(&host.workers.join(", "))
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TenantFigures;

    fn result(start_s: u64, duration_ns: u64, steal: Option<f64>, contention: Option<f64>) -> WindowResult {
        WindowResult {
            version: wire::VERSION,
            host: "h1".into(),
            id: wire::WindowNotice::id_of("h1", start_s * 1_000_000_000),
            start_realtime_ns: start_s * 1_000_000_000,
            duration_ns,
            replayed: true,
            worker: "w1".into(),
            analysis_ns: 1,
            delivered: 1,
            tenants: vec![TenantFigures {
                name: "t0".into(),
                steal_pct: steal,
                peak_100ms_cpus: None,
                contention_pct: contention,
                on_cpu_ns: 0,
                functions: vec![],
                sample_period_ns: None,
            }],
            pprof: None,
            anomalies: vec![],
            notes: vec![],
            dropped_by_agent: 0,
            agent_cpu_ns: 0,
            agent_rss_bytes: 0,
            agent_uptime_ns: 0,
            late: vec![],
        }
    }

    /// A recording's last, almost empty window is n/a: it neither becomes
    /// the tenant's "steal last" nor its maximum (it showed 100 % steal).
    #[test]
    fn an_na_window_leaves_the_figures_and_shows_as_na() {
        let v = view(
            &[
                result(1, 1_000_000_000, Some(4.0), Some(3.0)),
                result(2, 860_000, None, None),
            ],
            0,
        );
        let t = &v.hosts[0].tenants[0];
        assert_eq!(
            (t.steal_pct_last, t.steal_pct_max, t.contention_pct_max),
            (Some(4.0), Some(4.0), Some(3.0))
        );
        assert_eq!(t.windows, 2);
        let only_na = view(&[result(2, 860_000, None, None)], 0);
        let shown = text(&only_na);
        let row = shown.lines().find(|l| l.starts_with("h1 ")).expect("a row for h1");
        assert_eq!(row.matches("n/a").count(), 3, "steal last, max, contention: {shown}");
    }
}
