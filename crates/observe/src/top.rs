//! `ontime observe top`'s engine: the recorder feeding a live analysis;
//! every refresh a table per tenant (and per vCPU on demand), handed to the
//! caller to show, and optionally the same figures as Prometheus metrics.
//! The CLI only parses arguments and prints the tables.

use ontime_core::duration::format_ns;
use ontime_core::time::MonoNs;
use ontime_sched::analyze::{AnalysisOptions, Analyzer, GroupReport};
use ontime_trace::event::Event;
use ontime_trace::recorder::{self, groups_of, Mechanism, RecordOptions, Sink, ThreadTable};
use ontime_trace::recording::{Group, GroupKind};
use ontime_trace::targets::{counts_as_vcpu, is_vcpu_name, Targets};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const WINDOW: u64 = 100_000_000;

/// Totals since start, for Prometheus counters.
#[derive(Default, Clone)]
pub struct Totals {
    on_cpu_ns: u64,
    run_delay_ns: u64,
    any: u64,
    partial: u64,
    full: u64,
    any_ns: u64,
}

struct Live<'a> {
    analyzer: Analyzer,
    groups: Vec<Group>,
    declared: HashSet<u32>,
    named: HashSet<u32>,
    last_show: u64,
    interval: u64,
    vcpus: bool,
    show_table: Box<dyn FnMut(&str) + 'a>,
    totals: HashMap<String, Totals>,
    vcpu_totals: HashMap<(String, String, u32), (u64, u64)>,
    events: u64,
    metrics: Option<Arc<Mutex<String>>>,
}

impl Live<'_> {
    fn declare(&mut self, threads: &ThreadTable) {
        for (tid, t) in &threads.infos {
            let Some(g) = t.group else { continue };
            if self.declared.contains(tid) || (g as usize) >= self.groups.len() || t.tgid == 0 {
                continue;
            }
            if is_vcpu_name(&t.comm) {
                self.named.insert(g);
            }
            let vcpu = counts_as_vcpu(&self.groups[g as usize], &t.comm, self.named.contains(&g));
            self.analyzer.set_thread(*tid, g, vcpu);
            self.declared.insert(*tid);
        }
    }

    fn show(&mut self, now: u64, threads: &ThreadTable) {
        self.analyzer.advance(now);
        let name_of = |tid: u32| {
            threads
                .get(tid)
                .map(|t| t.comm.clone())
                .unwrap_or_else(|| format!("tid {tid}"))
        };
        let reports = self.analyzer.report(&name_of);
        // The stretch actually covered, not the nominal interval: the first
        // refresh and late drains differ from it.
        let span = self.analyzer.stats_span_ns();
        self.analyzer.reset_stats();
        for g in &reports {
            let t = self.totals.entry(g.name.clone()).or_default();
            t.on_cpu_ns += g.on_cpu_ns;
            t.run_delay_ns += g.run_delay_ns;
            t.any += g.contention.any.count;
            t.partial += g.contention.partial.count;
            t.full += g.contention.full.count;
            t.any_ns += g.contention.any_ns;
            for th in &g.threads {
                let v = self
                    .vcpu_totals
                    .entry((g.name.clone(), th.name.clone(), th.tid))
                    .or_default();
                v.0 += th.on_cpu_ns;
                v.1 += th.run_delay_ns;
            }
        }
        let text = table(&reports, self.vcpus, span);
        (self.show_table)(&text);
        if let Some(m) = &self.metrics {
            use ontime_core::export::Exporter;
            let figures = LiveFigures {
                reports: &reports,
                totals: &self.totals,
                vcpus: &self.vcpu_totals,
                events: self.events,
            };
            let body = Prometheus.export(&figures).unwrap_or_default();
            if let Ok(mut g) = m.lock() {
                *g = body;
            }
        }
    }
}

impl Sink for Live<'_> {
    fn events(&mut self, events: &[Event], threads: &ThreadTable) {
        self.declare(threads);
        for e in events {
            self.analyzer.feed(e);
        }
        self.events += events.len() as u64;
        let now = MonoNs::now().0;
        if now >= self.last_show + self.interval {
            self.last_show = now;
            self.show(now, threads);
        }
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v)
}

fn table(reports: &[GroupReport], vcpus: bool, span: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ontime observe top — last {} (100 ms windows)", format_ns(span));
    let _ = writeln!(
        out,
        "{:<20} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9}",
        "tenant", "max/100ms", "mean", "steal", "contended", "episodes", "ep. max"
    );
    for g in reports {
        let u = g.usage.first();
        let span = span.max(1) as f64;
        let _ = writeln!(
            out,
            "{:<20} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9}",
            if g.kind == GroupKind::HostIo {
                format!("[{}]", g.name)
            } else {
                g.name.clone()
            },
            u.and_then(|u| u.max)
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.2}", g.on_cpu_ns as f64 / span),
            pct(g.time_shares.steal_pct),
            pct(g.contention.any_pct),
            g.contention.any.count,
            g.contention.any.max_ns.map(format_ns).unwrap_or_else(|| "-".into()),
        );
        if vcpus {
            for t in g.threads.iter().filter(|t| t.vcpu || g.kind == GroupKind::HostIo) {
                let busy = t.on_cpu_ns + t.run_delay_ns;
                let _ = writeln!(
                    out,
                    "  {:<18} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9}",
                    format!("{}[{}]", t.name, t.tid),
                    t.usage
                        .first()
                        .and_then(|u| u.max)
                        .map(|v| format!("{v:.2}"))
                        .unwrap_or_else(|| "-".into()),
                    format!("{:.2}", t.on_cpu_ns as f64 / span),
                    pct(if busy > 0 {
                        t.run_delay_ns as f64 * 100.0 / busy as f64
                    } else {
                        0.0
                    }),
                    "",
                    t.waits,
                    t.wait_max_ns.map(format_ns).unwrap_or_else(|| "-".into()),
                );
            }
        }
    }
    out
}

/// A Prometheus label value, escaped (backslash, quote, newline).
pub fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What one refresh of the live view knows: the last interval's reports
/// and the totals since start.
pub struct LiveFigures<'a> {
    reports: &'a [GroupReport],
    totals: &'a HashMap<String, Totals>,
    vcpus: &'a HashMap<(String, String, u32), (u64, u64)>,
    events: u64,
}

/// The Prometheus text exposition (version 0.0.4) of the live figures.
pub struct Prometheus;

impl ontime_core::export::Exporter<LiveFigures<'_>> for Prometheus {
    fn format(&self) -> &'static str {
        "prometheus"
    }
    fn export(&self, f: &LiveFigures<'_>) -> anyhow::Result<String> {
        Ok(prometheus(f.reports, f.totals, f.vcpus, f.events))
    }
}

fn prometheus(
    reports: &[GroupReport],
    totals: &HashMap<String, Totals>,
    vcpus: &HashMap<(String, String, u32), (u64, u64)>,
    events: u64,
) -> String {
    let mut o = String::new();
    let s = |ns: u64| ns as f64 / 1e9;
    let mut metric = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(o, "{name}{{{labels}}} {v}");
        }
    };
    let t = |g: &str| format!("tenant=\"{}\"", esc(g));
    let mut names: Vec<&String> = totals.keys().collect();
    names.sort();
    metric(
        "ontime_tenant_cpu_seconds_total",
        "counter",
        "On-CPU time of the tenant's threads.",
        names.iter().map(|n| (t(n), s(totals[*n].on_cpu_ns))).collect(),
    );
    metric(
        "ontime_tenant_run_delay_seconds_total",
        "counter",
        "Time the tenant's threads were runnable but not running (steal).",
        names.iter().map(|n| (t(n), s(totals[*n].run_delay_ns))).collect(),
    );
    let mut eps = Vec::new();
    for n in &names {
        let x = &totals[*n];
        eps.push((format!("{},kind=\"any\"", t(n)), x.any as f64));
        eps.push((format!("{},kind=\"partial\"", t(n)), x.partial as f64));
        eps.push((format!("{},kind=\"full\"", t(n)), x.full as f64));
    }
    metric(
        "ontime_tenant_contention_episodes_total",
        "counter",
        "Contention episodes ended: any, partial or full.",
        eps,
    );
    metric(
        "ontime_tenant_contention_seconds_total",
        "counter",
        "Time with any vCPU of the tenant runnable but not running.",
        names.iter().map(|n| (t(n), s(totals[*n].any_ns))).collect(),
    );
    metric(
        "ontime_tenant_window_cpus_max",
        "gauge",
        "Highest CPU use in a 100 ms window during the last refresh, in CPUs.",
        reports
            .iter()
            .filter_map(|g| Some((format!("{},window=\"100ms\"", t(&g.name)), g.usage.first()?.max?)))
            .collect(),
    );
    metric(
        "ontime_tenant_steal_ratio",
        "gauge",
        "Steal: run delay as a share of the vCPUs' observed time (run + idle + steal = 1), during the last refresh.",
        reports
            .iter()
            .map(|g| (t(&g.name), g.time_shares.steal_pct / 100.0))
            .collect(),
    );
    metric(
        "ontime_tenant_wait_share_ratio",
        "gauge",
        "Run delay / (on-CPU + run delay): the share of its demand the tenant waited for, during the last refresh.",
        reports.iter().map(|g| (t(&g.name), g.wait_share_pct / 100.0)).collect(),
    );
    let mut keys: Vec<_> = vcpus.keys().collect();
    keys.sort();
    let lbl = |k: &(String, String, u32)| format!("{},thread=\"{}\",tid=\"{}\"", t(&k.0), esc(&k.1), k.2);
    metric(
        "ontime_thread_cpu_seconds_total",
        "counter",
        "On-CPU time per thread of a tenant.",
        keys.iter().map(|k| (lbl(k), s(vcpus[*k].0))).collect(),
    );
    metric(
        "ontime_thread_run_delay_seconds_total",
        "counter",
        "Run delay per thread of a tenant.",
        keys.iter().map(|k| (lbl(k), s(vcpus[*k].1))).collect(),
    );
    let _ = writeln!(o, "# HELP ontime_observe_events_total Scheduler events analysed.\n# TYPE ontime_observe_events_total counter\nontime_observe_events_total {events}");
    o
}

/// Serves `body` as Prometheus text on `addr` at /metrics, from a thread
/// that lives as long as the process (`observe top`, `ontime agent`);
/// `flag` names where the address came from, for the error. An address
/// that cannot be listened on is the user's: [`ontime_core::BadInput`].
pub fn serve_metrics(flag: &str, addr: &str, body: Arc<Mutex<String>>) -> anyhow::Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| ontime_core::bad_input(format!("{flag} {addr}: cannot listen: {e}")))?;
    std::thread::Builder::new().name("prometheus".into()).spawn(move || {
        for req in server.incoming_requests() {
            let resp = if req.url() == "/metrics" {
                let text = body.lock().map(|g| g.clone()).unwrap_or_default();
                let ct =
                    tiny_http::Header::from_bytes("Content-Type", "text/plain; version=0.0.4").expect("static header");
                tiny_http::Response::from_string(text).with_header(ct)
            } else {
                tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
            };
            let _ = req.respond(resp);
        }
    })?;
    Ok(())
}

/// What the live view shows and how often.
pub struct TopOptions {
    pub interval_ns: u64,
    /// A row per vCPU thread too.
    pub vcpus: bool,
    /// Serve Prometheus metrics on this address (path /metrics).
    pub prometheus: Option<String>,
    pub mechanism: Mechanism,
    pub duration: Option<Duration>,
}

/// Records `targets` and calls `show` with a table at every refresh until
/// `stop` or the duration.
pub fn run(targets: Targets, opts: TopOptions, stop: &AtomicBool, show: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
    let metrics = match &opts.prometheus {
        Some(addr) => {
            let m = Arc::new(Mutex::new(String::new()));
            serve_metrics("--prometheus", addr, m.clone())?;
            ontime_core::errln!("ontime: Prometheus metrics on http://{addr}/metrics");
            Some(m)
        }
        None => None,
    };
    let groups = groups_of(&targets);
    let cpus = recorder::online_cpus();
    let rec = RecordOptions {
        targets,
        output: None,
        drain_every: Duration::from_millis(100),
        measure_overhead: false,
        mechanism: opts.mechanism,
        sample_hz: None,
        window: None,
        windows_done: None,
    };
    let start = MonoNs::now().0;
    let mut live = Live {
        analyzer: Analyzer::new(
            start,
            cpus,
            &groups,
            &AnalysisOptions {
                windows: vec![WINDOW],
                series: false,
            },
        ),
        groups,
        declared: HashSet::new(),
        named: HashSet::new(),
        last_show: start,
        interval: opts.interval_ns,
        vcpus: opts.vcpus,
        show_table: Box::new(show),
        totals: HashMap::new(),
        vcpu_totals: HashMap::new(),
        events: 0,
        metrics,
    };
    // The analyzer's clock starts where the recorder attaches; events
    // before that cannot exist, so `start` taken just before is safe.
    recorder::record(&rec, stop, opts.duration, &mut live, &mut |_| {})?;
    Ok(())
}
