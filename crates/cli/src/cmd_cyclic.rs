//! `ontime cyclic`: periodic wake-up probe with cyclictest's flags where they
//! mean the same (-t -a -i -d -p -m -l -D -h), optional stress-ng load.

use crate::flags::DurationFlag;
use crate::output;
use clap::{ArgAction, Args};
use ontime_core::bad_input;
use ontime_core::caps::Capabilities;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_core::manifest::Manifest;
use ontime_core::rt::{CpuList, Policy};
use ontime_cyclic::{CyclicOptions, CyclicProbe};
use ontime_load::{LoadGuard, LoadProfile};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A duration where a bare number means microseconds, as in cyclictest.
fn parse_us_or_duration(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(us) => us.checked_mul(1000).ok_or_else(|| format!("'{s}' us is too long")),
        Err(_) => parse_ns(s),
    }
}

#[derive(Args)]
#[command(
    disable_help_flag = true,
    mut_arg("duration", DurationFlag::help("Length of the run, e.g. 60s", None))
)]
pub struct CyclicArgs {
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,
    /// Number of probe threads
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// One thread per online CPU, each pinned to its CPU (overrides -t and -a)
    #[arg(short = 'S', long)]
    smp: bool,
    /// CPUs to pin threads to, round-robin (e.g. 0 or 0-1)
    #[arg(short = 'a', long)]
    affinity: Option<CpuList>,
    /// Wake-up interval (bare number = microseconds, as cyclictest)
    #[arg(short = 'i', long, default_value = "1000", value_parser = parse_us_or_duration)]
    interval: u64,
    /// Interval added per further thread (bare number = microseconds)
    #[arg(short = 'd', long, default_value = "0", value_parser = parse_us_or_duration)]
    distance: u64,
    /// Policy: other, fifo, rr (with -p), fifo:PRIO, or deadline:RUNTIME/PERIOD[/DEADLINE]
    #[arg(long)]
    policy: Option<String>,
    /// Real-time priority; alone it means SCHED_FIFO at this priority
    #[arg(short = 'p', long)]
    priority: Option<u8>,
    /// Lock all memory (mlockall)
    #[arg(short = 'm', long)]
    mlockall: bool,
    /// Number of wake-ups per thread
    #[arg(short = 'l', long)]
    loops: Option<u64>,
    #[command(flatten)]
    duration: DurationFlag,
    /// Print a histogram with this many 1-us bins in cyclictest's -h layout
    #[arg(short = 'h', long, default_value_t = 0)]
    histogram: usize,
    /// Write the histogram there instead of stdout
    #[arg(long, requires = "histogram")]
    histfile: Option<PathBuf>,
    /// Also write the histogram of wake-ups that happened only (overrun
    /// periods left out, as cyclictest counts) to this file
    #[arg(long, requires = "histogram")]
    histfile_woken: Option<PathBuf>,
    /// Load during the run, by stress-ng: kernel, io, net, mixed or cpu
    #[arg(long)]
    load: Option<LoadProfile>,
    /// stress-ng workers per stressor of the load (1 to 1024)
    #[arg(long, default_value_t = 1)]
    load_workers: usize,
    /// Stream the wake-ups later than --late-over to FILE as they happen:
    /// a JSON line per --hlog-interval of planned time (docs/cyclic-json.md;
    /// a FIFO works), for a fleet agent or a long run
    #[arg(long, value_name = "FILE", requires = "late_over")]
    late_log: Option<PathBuf>,
    /// What counts as late in the --late-log, e.g. 500us
    #[arg(long, value_parser = ontime_core::duration::parse_ns, requires = "late_log")]
    late_over: Option<u64>,
    #[command(flatten)]
    out: output::OutputFlags,
    #[command(flatten)]
    probe: output::ProbeFlags,
    #[command(flatten)]
    explain: crate::explain::ExplainFlags,
}

fn resolve_policy(policy: Option<&str>, prio: Option<u8>) -> anyhow::Result<Policy> {
    let p = match (policy, prio) {
        (None, None) => Policy::Other,
        (None, Some(p)) => format!("fifo:{p}").parse().map_err(bad_input)?,
        (Some(name @ ("fifo" | "rr")), Some(p)) => format!("{name}:{p}").parse().map_err(bad_input)?,
        (Some(spec), None) => spec.parse().map_err(bad_input)?,
        (Some(spec), Some(_)) => {
            return Err(bad_input(format!("-p goes with --policy fifo or rr, not '{spec}'")));
        }
    };
    Ok(p)
}

pub fn run(a: CyclicArgs) -> anyhow::Result<()> {
    let policy = resolve_policy(a.policy.as_deref(), a.priority)?;
    let online = ontime_core::limits::online_cpus();
    let (threads, affinity) = if a.smp {
        (online, (0..online).collect())
    } else {
        (a.threads, a.affinity.clone().map(|c| c.0).unwrap_or_default())
    };
    let probe = CyclicProbe {
        options: CyclicOptions {
            threads,
            affinity,
            interval_ns: a.interval,
            distance_ns: a.distance,
            policy,
            mlockall: a.mlockall,
            loops: a.loops,
            duration_ns: a.duration.until_stopped(),
            histogram_us: a.histogram,
            threshold_ns: a.probe.threshold,
            dma_latency: !a.probe.no_dma_latency,
            load: a.load.map(|l| l.to_string()),
            hlog: a.probe.hlog.clone(),
            hlog_interval_ns: a.probe.hlog_interval,
            late_log: a.late_log,
            late_log_over_ns: a.late_over,
            keep_worst: a.explain.keep(),
            explain_over: a.explain.explain_over,
            own_work: None,
        },
        load: a.load.map(|l| l.to_string()),
        load_workers: a.load_workers,
        histfile: a.histfile,
        histfile_woken: a.histfile_woken,
        result: a.out.result.clone(),
        injected_work_result: None,
    };
    a.explain.check(probe.options.threads)?;
    execute(probe, &a.out, &a.explain)
}

/// Runs a wake-up probe, whether its flags or a lab spec built it.
pub fn execute(
    mut p: CyclicProbe,
    out: &output::OutputFlags,
    explain: &crate::explain::ExplainFlags,
) -> anyhow::Result<()> {
    p.validate().map_err(bad_input)?;
    output::check_outputs(&[
        ("--result", p.result.as_deref()),
        ("--histfile", p.histfile.as_deref()),
        ("--histfile-woken", p.histfile_woken.as_deref()),
        ("--hlog", p.options.hlog.as_deref()),
        ("--keep-recording", explain.keep_recording.as_deref()),
        ("--perfetto", explain.perfetto.as_deref()),
    ])?;
    let load: Option<LoadProfile> = match &p.load {
        Some(l) => Some(l.parse().map_err(|e| bad_input(format!("--load {l}: {e}")))?),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let expected_ns = p.expected_ns();
    let _load = match load {
        Some(profile) => {
            let g = LoadGuard::start(
                profile,
                p.load_workers,
                Duration::from_nanos(expected_ns) + Duration::from_secs(30),
            )?;
            if !out.json {
                ontime_core::errln!(
                    "ontime cyclic: load '{profile}' running (stress-ng pid {})",
                    g.pid().unwrap_or(0)
                );
            }
            // Let the load reach steady state before measuring.
            std::thread::sleep(Duration::from_millis(500));
            Some(g)
        }
        None => None,
    };
    let recording = if explain.explain {
        let r = crate::explain::RecordingBeside::start(
            explain.keep_recording.as_deref(),
            &p.options.affinity,
            explain.flight(expected_ns, "latency"),
            p.options.hlog.as_deref(),
        )?;
        // The flight recorder follows the probe's histogram log.
        if let Some(log) = r.flight_log() {
            p.options.hlog = Some(log.to_path_buf());
        }
        Some(r)
    } else {
        None
    };
    let manifest = Manifest::start("native", Capabilities::probe());
    let pb = output::progress_bar(expected_ns.div_ceil(1_000_000_000));
    let t0 = std::time::Instant::now();
    let result = ontime_cyclic::run(p.options.clone(), stop.clone(), manifest, &mut |lives| {
        let cycles: u64 = lives.iter().map(|l| l.cycles.load(Ordering::Relaxed)).sum();
        let max = lives
            .iter()
            .map(|l| l.max_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let over: u64 = lives.iter().map(|l| l.overruns.load(Ordering::Relaxed)).sum();
        pb.set_position(t0.elapsed().as_secs());
        pb.set_message(format!("wake-ups {cycles} max {} overruns {over}", format_ns(max)));
    });
    pb.finish_and_clear();
    drop(_load);
    let mut result = result?;
    let mut text = ontime_core::export::TextReport::text(&result);
    if let (Some(r), Some(late)) = (recording, result.late_events.as_ref()) {
        // The measurement stands without its explanation.
        match r
            .finish()
            .and_then(|(recorded, _)| crate::explain::explain(&recorded, late, explain.perfetto.as_deref()))
        {
            Ok(x) => {
                text.push_str(&x.text("wake-ups"));
                result.explanation = Some(x);
            }
            Err(e) => {
                ontime_core::errln!("ontime: --explain: {e:#}; the result has no explanation");
                result.warnings.push(format!("--explain: {e:#}"));
            }
        }
    }
    if let Some(f) = &p.histfile_woken {
        ontime_core::fsio::write_atomic(f, result.cyclictest_histogram_woken().as_bytes())?;
    }
    if p.options.histogram_us > 0 {
        let hist = result.cyclictest_histogram();
        match &p.histfile {
            Some(f) => ontime_core::fsio::write_atomic(f, hist.as_bytes())?,
            None if !out.json => text = format!("{hist}{text}"),
            None => {}
        }
    }
    if let Some(f) = &p.injected_work_result {
        write_injected_work(f, &result)?;
    }
    output::emit(&result, &text, out.json, p.result.as_deref())?;
    if stop.load(Ordering::Relaxed) {
        ontime_core::errln!("ontime cyclic: interrupted; results cover the run so far");
    }
    Ok(())
}

/// The injected own work's windows as the ground truth reads them: the
/// culprit is this process, on the first thread's CPU where it is pinned.
fn write_injected_work(file: &std::path::Path, r: &ontime_cyclic::CyclicResult) -> anyhow::Result<()> {
    use ontime_explain::truth::{InjectedClass, Injections};
    let cpu = r
        .threads
        .first()
        .and_then(|t| t.cpu)
        .and_then(|c| u16::try_from(c).ok());
    let out = Injections::of_windows(InjectedClass::OwnWork, &r.injected_work, std::process::id(), cpu);
    ontime_core::fsio::write_atomic(file, &serde_json::to_vec_pretty(&out)?)
}
