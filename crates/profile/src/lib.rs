//! ontime-profile: document 002's host-side profiler on Linux. It owns the
//! join of stack samples (recorded by ontime-trace's sampler beside the
//! scheduler events, one clock) with each thread's time line (rebuilt by
//! ontime-sched): the blank-time classes (run, idle/halt, steal by
//! runqueue with the preemptor's class, steal by the host, I/O wait),
//! steal and blocked time charged to functions, apparent and corrected
//! times, symbols ([`symbols`], blazesym), and the outputs: text, JSON,
//! pprof ([`pprof`]) and flame graphs (inferno).
//!
//! Recording is `ontime profile record` (the observe recorder with
//! sampling switched on); it does not write a second recorder.

pub mod attribute;
pub mod guest;
pub mod pprof;
pub mod symbols;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use ontime_core::duration::format_ns;
use ontime_trace::event::kind;
use ontime_trace::recording::Recording;
use serde::{Deserialize, Serialize};

pub use attribute::{Classes, Joined, StealBy};
pub use symbols::Symbols;

/// Time charged to a function.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Times {
    pub samples: u64,
    pub on_cpu_ns: u64,
    /// Steal charged to it (document 002's rule).
    pub steal_ns: u64,
    /// Blocked (I/O wait) time charged to it by the same rule.
    pub blocked_ns: u64,
    /// on-CPU + steal + blocked.
    pub apparent_ns: u64,
    /// Apparent minus steal.
    pub corrected_ns: u64,
}

impl Times {
    fn add(&mut self, c: &attribute::Charge) {
        self.samples += c.samples;
        self.on_cpu_ns += c.on_cpu_ns;
        self.steal_ns += c.steal_ns;
        self.blocked_ns += c.blocked_ns;
        self.apparent_ns = self.on_cpu_ns + self.steal_ns + self.blocked_ns;
        self.corrected_ns = self.on_cpu_ns + self.blocked_ns;
    }
}

/// One function of one tenant: its own time (as the leaf of a stack) and
/// its inclusive time (anywhere on the stack, its callees included).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FunctionRow {
    pub tenant: String,
    pub function: String,
    pub module: String,
    pub own: Times,
    pub inclusive: Times,
    /// As the program's own innermost function (its innermost user-space
    /// frame, kernel frames above it folded in): where a program's time
    /// went in its own code.
    pub program: Times,
    /// Own and inclusive apparent time, of the tenant's apparent time less
    /// its idle time.
    pub share_pct: f64,
    pub inclusive_share_pct: f64,
    #[serde(default)]
    pub program_share_pct: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub duration_ns: u64,
    pub cpus: usize,
    pub sample_period_ns: u64,
    pub samples: u64,
    /// Samples whose user chain stopped at the leaf (no frame pointers).
    pub truncated_samples: u64,
    pub unnamed_frames: u64,
    /// The most any thread's time line can be off by (scheduler events that
    /// never reached the recorder; 0 when none went missing).
    pub error_bound_ns: u64,
    /// Why steal by the host (VM exits) is or is not measured.
    pub steal_host: String,
}

/// What `ontime profile report` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProfileReport {
    pub profile: ProfileInfo,
    pub tenants: Vec<Classes>,
    pub threads: Vec<Classes>,
    pub functions: Vec<FunctionRow>,
    pub notes: Vec<String>,
}

/// Everything `report` derives from a recording.
pub struct Profiled {
    pub report: ProfileReport,
    pub joined: Joined,
    pub symbols: Symbols,
    pub start_realtime_ns: u64,
}

impl Profiled {
    /// Writes the pprof file (gzipped profile.proto) to `path`.
    pub fn write_pprof(&self, path: &Path) -> Result<()> {
        pprof::write(&self.pprof(), path)
    }

    /// The pprof file's bytes (gzipped profile.proto).
    pub fn pprof_bytes(&self) -> Result<Vec<u8>> {
        pprof::gzipped(&self.pprof())
    }

    fn pprof(&self) -> pprof::Profile {
        pprof::build(
            &self.joined,
            &self.symbols,
            self.start_realtime_ns,
            self.report.profile.sample_period_ns,
        )
    }

    /// Writes the flame graphs and the tenants' class figures into `dir`.
    pub fn write_figures(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        figures(&self.joined, &self.symbols, dir)
    }
}

/// Symbolises and joins a recording made with stack samples.
pub fn profile(rec: &Recording) -> Result<Profiled> {
    let period = rec.meta.sample_period_ns.context(
        "this recording has no stack samples: make it with `ontime profile record` (observe record does not sample)",
    )?;
    let symbols = symbols::symbolize(rec);
    let joined = attribute::join(rec, &symbols);
    let kvm = rec
        .events
        .iter()
        .any(|e| e.kind == kind::KVM_EXIT || e.kind == kind::KVM_ENTRY);
    let steal_host = if kvm {
        "time inside VM exits (kvm_exit to kvm_entry on a CPU); exit reasons not recorded".to_string()
    } else {
        "unavailable: no kvm_exit/kvm_entry events (no KVM guest on this host)".to_string()
    };
    let mut notes = symbols.notes.clone();
    notes.extend(joined.notes.iter().cloned());
    if let Some(end) = &rec.end {
        if end.lost > 0 {
            notes.push(format!(
                "{} scheduler events were lost: time lines are approximate",
                end.lost
            ));
        }
    } else {
        notes.push("the recording was cut short; analysed up to its last block".into());
    }
    let samples = rec.samples.len() as u64;
    if samples > 0 && symbols.truncated * 10 > samples {
        notes.push(format!(
            "{:.0} % of samples have a one-frame user stack: those binaries keep no frame pointers, so callers are missing (leaf functions are exact)",
            100.0 * symbols.truncated as f64 / samples as f64
        ));
    }
    let functions = function_rows(&joined, &symbols);
    let report = ProfileReport {
        profile: ProfileInfo {
            duration_ns: joined.duration_ns,
            cpus: rec.meta.cpus,
            sample_period_ns: period,
            samples,
            truncated_samples: symbols.truncated,
            unnamed_frames: symbols.unnamed,
            error_bound_ns: joined.error_bound_ns,
            steal_host,
        },
        tenants: joined.tenants.clone(),
        threads: joined.threads.clone(),
        functions,
        notes,
    };
    Ok(Profiled {
        report,
        joined,
        symbols,
        start_realtime_ns: rec.meta.start_realtime_ns,
    })
}

/// Pseudo frames for function rows: on-CPU time no sample saw, and
/// samples without any frame.
const UNSAMPLED_FRAME: u32 = u32::MAX;
const NO_STACK: u32 = u32::MAX - 1;

fn function_row<'a>(
    rows: &'a mut std::collections::HashMap<(u32, u32), FunctionRow>,
    tenant: u32,
    frame: u32,
    j: &Joined,
    syms: &Symbols,
) -> &'a mut FunctionRow {
    rows.entry((tenant, frame)).or_insert_with(|| {
        let (function, module) = match frame {
            UNSAMPLED_FRAME => ("[unsampled]".to_string(), String::new()),
            NO_STACK => ("[no stack]".to_string(), String::new()),
            f => {
                let fr = &syms.frames[f as usize];
                (fr.function.clone(), fr.module.clone())
            }
        };
        FunctionRow {
            tenant: j.tenant_names.get(tenant as usize).cloned().unwrap_or_default(),
            function,
            module,
            own: Times::default(),
            inclusive: Times::default(),
            program: Times::default(),
            share_pct: 0.0,
            inclusive_share_pct: 0.0,
            program_share_pct: 0.0,
        }
    })
}

fn function_rows(j: &Joined, syms: &Symbols) -> Vec<FunctionRow> {
    let mut rows = std::collections::HashMap::new();
    let mut counted: Vec<u32> = Vec::new();
    for (&(tenant, _tid, stack), c) in &j.charges {
        let frames: &[u32] = if stack == attribute::UNSAMPLED {
            &[UNSAMPLED_FRAME]
        } else {
            match syms.stacks[stack as usize].as_slice() {
                [] => &[NO_STACK],
                f => f,
            }
        };
        function_row(&mut rows, tenant, frames[0], j, syms).own.add(c);
        let program = if stack == attribute::UNSAMPLED {
            None
        } else {
            syms.program_frame(stack)
        };
        function_row(&mut rows, tenant, program.unwrap_or(frames[0]), j, syms)
            .program
            .add(c);
        // A recursive function counts once per stack.
        counted.clear();
        for &f in frames {
            if !counted.contains(&f) {
                counted.push(f);
                function_row(&mut rows, tenant, f, j, syms).inclusive.add(c);
            }
        }
    }
    let mut out: Vec<FunctionRow> = rows.into_values().collect();
    for r in &mut out {
        let busy = j
            .tenants
            .iter()
            .find(|t| t.name == r.tenant)
            .map(|t| t.apparent_ns - t.idle_ns)
            .unwrap_or(0);
        let share = |ns: u64| if busy > 0 { 100.0 * ns as f64 / busy as f64 } else { 0.0 };
        r.share_pct = share(r.own.apparent_ns);
        r.inclusive_share_pct = share(r.inclusive.apparent_ns);
        r.program_share_pct = share(r.program.apparent_ns);
    }
    out.sort_by(|a, b| {
        b.own
            .apparent_ns
            .cmp(&a.own.apparent_ns)
            .then_with(|| b.inclusive.apparent_ns.cmp(&a.inclusive.apparent_ns))
            .then_with(|| a.function.cmp(&b.function))
    });
    out
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// How the function table ranks and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FunctionView {
    /// The program's own innermost function (innermost user frame).
    #[default]
    Program,
    /// The leaf frame, kernel frames included.
    Leaf,
    /// With callees: anywhere on the stack.
    Inclusive,
}

impl FunctionView {
    fn times(self, f: &FunctionRow) -> &Times {
        match self {
            FunctionView::Program => &f.program,
            FunctionView::Leaf => &f.own,
            FunctionView::Inclusive => &f.inclusive,
        }
    }
}

/// The profile as people read it: classes per tenant and per thread, then
/// the `top` functions as `view` counts them.
pub struct ProfileText<'a> {
    pub report: &'a ProfileReport,
    pub top: usize,
    pub view: FunctionView,
}

impl ontime_core::export::TextReport for ProfileText<'_> {
    fn text(&self) -> String {
        text(self.report, self.top, self.view)
    }
}

fn text(r: &ProfileReport, top: usize, view: FunctionView) -> String {
    let mut out = String::new();
    let p = &r.profile;
    let _ = writeln!(
        out,
        "profile: {} on {} CPUs, {} samples at {} ({} with a one-frame user stack), steal by host: {}",
        format_ns(p.duration_ns),
        p.cpus,
        p.samples,
        format_ns(p.sample_period_ns),
        p.truncated_samples,
        p.steal_host
    );
    let _ = writeln!(
        out,
        "\nTime classes (run + idle + steal + I/O wait = apparent; corrected = apparent - steal):"
    );
    let _ = writeln!(
        out,
        "  {:<26} {:>11} {:>7} {:>7} {:>7} {:>7} {:>11}   steal by: {:>7} {:>7} {:>7} {:>7} {:>7}  {:>9}",
        "program",
        "apparent",
        "run",
        "idle",
        "steal",
        "I/O",
        "corrected",
        "tenants",
        "own",
        "host-io",
        "host",
        "wake-up",
        "uncharged"
    );
    let row = |out: &mut String, name: &str, c: &Classes| {
        let a = c.apparent_ns;
        let s = &c.steal_by;
        let _ = writeln!(
            out,
            "  {:<26} {:>11} {:>7} {:>7} {:>7} {:>7} {:>11}             {:>7} {:>7} {:>7} {:>7} {:>7}  {:>9} {:>8} {:>8}",
            name,
            format_ns(a),
            pct(c.run_ns, a),
            pct(c.idle_ns, a),
            pct(c.steal_runqueue_ns, a),
            pct(c.io_wait_ns, a),
            format_ns(c.corrected_ns),
            pct(s.other_tenant_ns, a),
            pct(s.own_tenant_ns, a),
            pct(s.host_io_ns, a),
            pct(s.other_host_ns, a),
            pct(s.wakeup_ns, a),
            pct(c.steal_uncharged_ns, c.steal_runqueue_ns),
            pct(c.steal_after_wakeup_ns, c.steal_runqueue_ns),
            c.steal_host_ns.map(|h| pct(h, a)).unwrap_or_else(|| "n/a".into())
        );
    };
    for t in &r.tenants {
        row(&mut out, &format!("{} ({} vCPU threads)", t.name, t.threads), t);
        for th in r.threads.iter().filter(|th| th.tenant == t.name) {
            row(&mut out, &format!("  {} [{}]", th.name, th.tid.unwrap_or(0)), th);
        }
    }
    let _ = writeln!(
        out,
        "  a tenant sums its vCPU threads; uncharged = steal no function could be charged with (the samples around it disagree or are missing);\n  woken = steal right after a wake-up (scheduling latency), the rest is preemption; VM exits = steal by the host inside KVM exits (part of run; n/a without KVM)"
    );
    for t in r.tenants.iter().filter(|t| !t.steal_host_by_reason.is_empty()) {
        let parts: Vec<String> = t
            .steal_host_by_reason
            .iter()
            .take(6)
            .map(|(reason, ns)| format!("{reason} {}", format_ns(*ns)))
            .collect();
        let _ = writeln!(out, "  VM exits of {}: {}", t.name, parts.join(", "));
    }
    let _ = writeln!(
        out,
        "\nTop functions ({}; steal and I/O wait charged by document 002's rule):",
        match view {
            FunctionView::Program => "the program's own innermost function",
            FunctionView::Leaf => "leaf frame, kernel included",
            FunctionView::Inclusive => "with their callees",
        }
    );
    let _ = writeln!(
        out,
        "  {:<14} {:<40} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}",
        "tenant", "function", "on-CPU", "steal", "I/O wait", "apparent", "corrected", "share"
    );
    let mut shown: Vec<&FunctionRow> = r.functions.iter().filter(|f| view.times(f).apparent_ns > 0).collect();
    shown.sort_by(|a, b| {
        view.times(b)
            .apparent_ns
            .cmp(&view.times(a).apparent_ns)
            .then_with(|| a.function.cmp(&b.function))
    });
    for f in shown.into_iter().take(top) {
        let t = view.times(f);
        let name: String = if f.function.chars().count() > 40 {
            f.function.chars().take(39).chain(std::iter::once('~')).collect()
        } else {
            f.function.clone()
        };
        let _ = writeln!(
            out,
            "  {:<14} {:<40} {:>10} {:>10} {:>10} {:>10} {:>10} {:>5.1}%",
            f.tenant,
            name,
            format_ns(t.on_cpu_ns),
            format_ns(t.steal_ns),
            format_ns(t.blocked_ns),
            format_ns(t.apparent_ns),
            format_ns(t.corrected_ns),
            match view {
                FunctionView::Inclusive => f.inclusive_share_pct,
                FunctionView::Leaf => f.share_pct,
                FunctionView::Program => f.program_share_pct,
            }
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "\nnote: {n}");
    }
    out
}

/// Folded stacks (`tenant;thread;root;...;leaf value`) of one value, in
/// microseconds, the input of inferno's flame graphs.
pub fn folded(j: &Joined, syms: &Symbols, value: impl Fn(&attribute::Charge) -> u64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut keys: Vec<&(u32, u32, u32)> = j.charges.keys().collect();
    keys.sort();
    for key in keys {
        let v = value(&j.charges[key]) / 1000;
        if v == 0 {
            continue;
        }
        let (tenant, tid, stack) = *key;
        let mut parts = vec![
            j.tenant_names.get(tenant as usize).cloned().unwrap_or_default(),
            format!(
                "{} [{tid}]",
                j.thread_names.get(&tid).map(String::as_str).unwrap_or("?")
            ),
        ];
        if stack == attribute::UNSAMPLED {
            parts.push("[unsampled]".into());
        } else {
            parts.extend(
                syms.stacks[stack as usize]
                    .iter()
                    .rev()
                    .map(|&f| syms.frames[f as usize].function.replace(';', ":")),
            );
        }
        lines.push(format!("{} {v}", parts.join(";")));
    }
    lines
}

/// Per tenant, its time classes over the recording as stacked shares
/// (run, steal, I/O wait, idle: 100 % = its threads' observed time in the
/// bin). At most 8 tenants, the most stolen from first.
pub fn class_charts(j: &Joined) -> Vec<ontime_plot::Chart> {
    let mut order: Vec<usize> = (0..j.series.len()).filter(|&t| !j.series[t].is_empty()).collect();
    let steal = |t: usize| j.series[t].iter().map(|b| b[2]).sum::<u64>();
    order.sort_by_key(|&t| std::cmp::Reverse(steal(t)));
    order.truncate(8);
    order
        .into_iter()
        .map(|t| {
            let name = j.tenant_names.get(t).cloned().unwrap_or_default();
            let slug: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let mut c = ontime_plot::Chart::new(
                &format!("classes-{slug}"),
                format!("{name}: where its threads' time went"),
                "time (s)",
                "share of its threads' time (%)",
            );
            c.stacked = true;
            let bin_s = j.bin_ns as f64 / 1e9;
            // Demand at the bottom (run, then steal), idle on top.
            for (k, class) in [(0, "run"), (2, "steal"), (3, "I/O wait"), (1, "idle")] {
                let pts = j.series[t]
                    .iter()
                    .enumerate()
                    .map(|(i, b)| {
                        let total: u64 = b.iter().sum();
                        let share = if total == 0 {
                            0.0
                        } else {
                            100.0 * b[k] as f64 / total as f64
                        };
                        ((i as f64 + 0.5) * bin_s, share)
                    })
                    .collect();
                c.series.push((class.to_string(), pts));
            }
            c
        })
        .collect()
}

/// Writes the flame graphs (`on-cpu.svg`, `steal.svg`) and each tenant's
/// time classes (`classes-<tenant>.svg` and `.png`) into `dir`.
pub fn figures(j: &Joined, syms: &Symbols, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = flame_graphs(j, syms, dir)?;
    ontime_plot::register_font()?;
    for c in class_charts(j) {
        let svg = dir.join(format!("{}.svg", c.name));
        ontime_core::fsio::write_atomic(&svg, c.svg()?.as_bytes())?;
        let png = dir.join(format!("{}.png", c.name));
        c.png(&png)?;
        written.push(svg);
        written.push(png);
    }
    Ok(written)
}

/// Writes on-CPU and steal flame graphs (SVG) into `dir`.
pub fn flame_graphs(j: &Joined, syms: &Symbols, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (name, title, lines) in [
        ("on-cpu.svg", "On-CPU time (us)", folded(j, syms, |c| c.on_cpu_ns)),
        (
            "steal.svg",
            "Steal charged to functions (us)",
            folded(j, syms, |c| c.steal_ns),
        ),
    ] {
        let path = dir.join(name);
        if lines.is_empty() {
            continue;
        }
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = title.to_string();
        opts.count_name = "us".to_string();
        let mut svg = Vec::new();
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut svg)
            .with_context(|| format!("drawing {}", path.display()))?;
        ontime_core::fsio::write_atomic(&path, &svg)?;
        written.push(path);
    }
    Ok(written)
}

/// One window of a continuous recording, analysed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowReport {
    pub file: PathBuf,
    /// Start, ns after the first window's start.
    pub offset_ns: u64,
    /// Collection time (document 002's t1): the window's length.
    pub collect_ns: u64,
    /// Store time (t0): spent writing it, beside collection.
    pub store_ns: Option<u64>,
    /// Analysis time (t2): reading, symbolising and joining it here.
    pub analysis_ns: u64,
    pub samples: u64,
    pub events: u64,
    pub lost: u64,
    /// Read whole (its END block present).
    pub complete: bool,
    pub tenants: Vec<Classes>,
    /// The top functions by own time.
    pub functions: Vec<FunctionRow>,
    pub notes: Vec<String>,
}

/// A continuous recording: every window, and what one analyser keeps up
/// with.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowsReport {
    pub windows: Vec<WindowReport>,
    /// Medians over the whole windows.
    pub median_collect_ns: u64,
    pub median_store_ns: u64,
    pub median_analysis_ns: u64,
    /// Document 002's rule: one analyser keeps up with n hosts while
    /// t0 + t1 > (t0 + t2) x n.
    pub hosts_per_analyser: u64,
    /// Gaps or overlaps between consecutive windows whose ends were
    /// recorded (0 expected; a window cut short has no end to compare).
    pub seams_not_tiling: u64,
}

/// Analyses every window of a continuous recording, `jobs` at a time.
pub fn profile_windows(files: &[PathBuf], top: usize, jobs: usize) -> Result<WindowsReport> {
    let jobs = jobs.max(1);
    let mut results: Vec<Option<Result<(WindowReport, u64, u64)>>> = (0..files.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        for (chunk_files, chunk_out) in files
            .chunks(files.len().div_ceil(jobs).max(1))
            .zip(results.chunks_mut(files.len().div_ceil(jobs).max(1)))
        {
            s.spawn(move || {
                for (f, out) in chunk_files.iter().zip(chunk_out.iter_mut()) {
                    *out = Some(one_window(f, top));
                }
            });
        }
    });
    let mut windows = Vec::new();
    let mut bounds = Vec::new();
    for r in results.into_iter().flatten() {
        let (w, start, end) = r?;
        bounds.push((start, end));
        windows.push(w);
    }
    let first = bounds.first().map(|b| b.0).unwrap_or(0);
    for (w, b) in windows.iter_mut().zip(&bounds) {
        // Windows are listed by name; a forged one may start earlier.
        w.offset_ns = b.0.saturating_sub(first);
    }
    // A window cut short (killed while being stored) has no recorded end:
    // its seam with the next is unknown, not a gap.
    let seams_not_tiling = bounds
        .windows(2)
        .zip(&windows)
        .filter(|(p, w)| w.complete && p[0].1 != p[1].0)
        .count() as u64;
    let whole: Vec<&WindowReport> = windows.iter().filter(|w| w.complete).collect();
    let median = |mut v: Vec<u64>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let t1 = median(whole.iter().map(|w| w.collect_ns).collect());
    let t0 = median(whole.iter().filter_map(|w| w.store_ns).collect());
    let t2 = median(whole.iter().map(|w| w.analysis_ns).collect());
    // The largest n with (t0 + t2) x n < t0 + t1.
    let hosts = t0
        .saturating_add(t1)
        .saturating_sub(1)
        .checked_div(t0.saturating_add(t2))
        .unwrap_or(0);
    Ok(WindowsReport {
        windows,
        median_collect_ns: t1,
        median_store_ns: t0,
        median_analysis_ns: t2,
        hosts_per_analyser: hosts,
        seams_not_tiling,
    })
}

fn one_window(file: &Path, top: usize) -> Result<(WindowReport, u64, u64)> {
    let t = std::time::Instant::now();
    let rec = Recording::read(file)?;
    let p = profile(&rec).with_context(|| file.display().to_string())?;
    let analysis_ns = t.elapsed().as_nanos() as u64;
    let end = rec.end.as_ref();
    let end_ns = end
        .map(|e| e.end_ns)
        .unwrap_or_else(|| rec.meta.start_ns + p.joined.duration_ns);
    let r = p.report;
    Ok((
        WindowReport {
            file: file.to_path_buf(),
            offset_ns: 0,
            collect_ns: end_ns.saturating_sub(rec.meta.start_ns),
            store_ns: end.and_then(|e| e.store_ns),
            analysis_ns,
            samples: r.profile.samples,
            events: rec.events.len() as u64,
            lost: end.map(|e| e.lost).unwrap_or(0),
            complete: end.is_some(),
            tenants: r.tenants,
            functions: r.functions.into_iter().take(top).collect(),
            notes: r.notes,
        },
        rec.meta.start_ns,
        end_ns,
    ))
}

/// The text for a continuous recording: a row per window and tenant.
pub fn windows_text(r: &WindowsReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} windows; per window t1 (collect), t0 (store, beside collecting), t2 (analysis here):",
        r.windows.len()
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6}  {:<14} {:>6} {:>6} {:>6}  top function",
        "window", "offset", "t1", "t0", "t2", "samples", "lost", "tenant", "run", "steal", "idle"
    );
    for w in &r.windows {
        let name = w
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let head = format!(
            "  {:<22} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6}",
            format!("{name}{}", if w.complete { "" } else { " (cut)" }),
            format_ns(w.offset_ns),
            format_ns(w.collect_ns),
            w.store_ns.map(format_ns).unwrap_or_else(|| "n/a".into()),
            format_ns(w.analysis_ns),
            w.samples,
            w.lost
        );
        if w.tenants.is_empty() {
            let _ = writeln!(out, "{head}  (no tracked thread ran)");
        }
        for (i, t) in w.tenants.iter().enumerate() {
            let top = w
                .functions
                .iter()
                .find(|f| f.tenant == t.name)
                .map(|f| f.function.as_str())
                .unwrap_or("-");
            let a = t.apparent_ns;
            let _ = writeln!(
                out,
                "{}  {:<14} {:>6} {:>6} {:>6}  {}",
                if i == 0 { head.clone() } else { " ".repeat(head.len()) },
                t.name,
                pct(t.run_ns, a),
                pct(t.steal_runqueue_ns, a),
                pct(t.idle_ns, a),
                top
            );
        }
    }
    let _ = writeln!(
        out,
        "\nmedians: t1 {}, t0 {}, t2 {}: one analyser keeps up with {} hosts (document 002: t0 + t1 > (t0 + t2) x n)",
        format_ns(r.median_collect_ns),
        format_ns(r.median_store_ns),
        format_ns(r.median_analysis_ns),
        r.hosts_per_analyser
    );
    if r.seams_not_tiling > 0 {
        let _ = writeln!(
            out,
            "note: {} seams between windows leave a gap or an overlap",
            r.seams_not_tiling
        );
    }
    out
}
