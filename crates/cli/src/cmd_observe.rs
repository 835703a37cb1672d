//! `ontime observe record|report|top`: who used the CPU, at which
//! millisecond, and who waited.

use crate::flags::{DurationFlag, MechanismFlag, TargetArgs};
use crate::output;
use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_core::export::TextReport;
use ontime_sched::analyze::AnalysisOptions;
use ontime_trace::recorder::{self, NoSink, RecordOptions};
use ontime_trace::recording::Recording;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct ObserveArgs {
    #[command(subcommand)]
    action: ObserveAction,
}

#[derive(Subcommand)]
enum ObserveAction {
    /// Record scheduler events of chosen tenants to a file (BPF on sched tracepoints)
    Record(RecordArgs),
    /// CPU use per window, run delay, contention and the host I/O path, from a recording
    Report(ReportArgs),
    /// Live view, refreshed every second (optionally served to Prometheus)
    Top(crate::cmd_top::TopArgs),
}

/// The recorders' `-D` and `--drain-every`, checked one way for every verb
/// that records (observe, profile, io).
pub fn check_recording_times(duration: Option<u64>, drain_every: u64) -> anyhow::Result<()> {
    if let Some(d) = duration {
        ontime_core::limits::duration(
            "-D",
            d,
            ontime_core::limits::MIN_DURATION_NS,
            ontime_core::limits::MAX_DURATION_NS,
        )
        .map_err(bad_input)?;
    }
    if !(1_000_000..=10_000_000_000).contains(&drain_every) {
        return Err(bad_input("--drain-every must be between 1ms and 10s"));
    }
    Ok(())
}

/// `record`'s arguments, shared with `profile record`.
#[derive(Args)]
#[command(mut_arg(
    "duration",
    DurationFlag::help_and_d("How long to record, e.g. 30s [default: until Ctrl-C]", None)
))]
pub struct RecordArgs {
    #[command(flatten)]
    targets: TargetArgs,
    /// The recording file [default: observe.otrec; profile.otrec for profile]
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    duration: DurationFlag,
    /// How often the ring is drained to the file
    #[arg(long, default_value = "100ms", value_parser = parse_ns)]
    drain_every: u64,
    /// Switch on the kernel's BPF run-time statistics so the summary includes
    /// the probes' own time. They cost about a quarter more in the kernel
    /// (two clock reads per probe run), so they are off unless asked for
    #[arg(long)]
    overhead_stats: bool,
    #[command(flatten)]
    mechanism: MechanismFlag,
    #[command(flatten)]
    out: output::OutputFlags,
}

#[derive(Args)]
struct ReportArgs {
    /// A recording made by `ontime observe record`
    recording: PathBuf,
    /// Window lengths, comma-separated (1ms ... 1s or longer)
    #[arg(short = 'w', long, default_value = "1ms,10ms,100ms,1s", value_delimiter = ',', value_parser = parse_ns)]
    windows: Vec<u64>,
    /// Also per vCPU thread
    #[arg(long)]
    vcpus: bool,
    /// Wake-up placement and preemption by who woke whom onto whom, and where run-queue waits come from
    #[arg(long)]
    wakeups: bool,
    #[command(flatten)]
    out: output::OutputFlags,
    /// Include per-window series (windows of 10 ms and longer) in the JSON
    #[arg(long)]
    series: bool,
    /// Write figures (SVG and PNG) to this directory
    #[arg(long)]
    plots: Option<PathBuf>,
}

pub fn run(args: ObserveArgs) -> anyhow::Result<()> {
    match args.action {
        ObserveAction::Record(a) => record(a, "observe.otrec", None, None).map(|_| ()),
        ObserveAction::Report(a) => report(a),
        ObserveAction::Top(a) => crate::cmd_top::run(a),
    }
}

/// Records the targets' scheduler events, and their stacks at
/// `sample_hz` when given, to `-o` (default `default_output`); with
/// `window`, `-o` is a directory of back-to-back windows.
pub fn record(
    a: RecordArgs,
    default_output: &str,
    sample_hz: Option<u32>,
    window: Option<Duration>,
) -> anyhow::Result<PathBuf> {
    let output = a.output.clone().unwrap_or_else(|| PathBuf::from(default_output));
    let targets = a.targets.resolve()?;
    check_recording_times(a.duration.until_stopped(), a.drain_every)?;
    if window.is_some() {
        if output.exists() && !output.is_dir() {
            return Err(bad_input(format!(
                "-o {}: is a file; continuous recording writes windows into a directory",
                output.display()
            )));
        }
        crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    } else {
        crate::output::check_outputs(&[("-o", Some(&output)), ("--result", a.out.result.as_deref())])?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let opts = RecordOptions {
        targets: targets.clone(),
        output: Some(output.clone()),
        drain_every: Duration::from_nanos(a.drain_every),
        measure_overhead: a.overhead_stats,
        mechanism: a.mechanism.mechanism,
        sample_hz,
        window,
        windows_done: None,
    };
    let names: Vec<&str> = targets.groups.iter().map(|g| g.name.as_str()).collect();
    let summary = recorder::record(
        &opts,
        &stop,
        a.duration.until_stopped().map(Duration::from_nanos),
        &mut NoSink,
        &mut |_| {
            ontime_core::errln!(
                "ontime: recording {}{}{} to {} {}",
                if sample_hz.is_some() {
                    "stacks and scheduler events of "
                } else {
                    ""
                },
                if names.is_empty() {
                    "everything".to_string()
                } else {
                    names.join(", ")
                },
                if targets.everything && !names.is_empty() {
                    " and everything else"
                } else {
                    ""
                },
                output.display(),
                a.duration
                    .until_stopped()
                    .map(|d| format!("for {}", format_ns(d)))
                    .unwrap_or_else(|| "until Ctrl-C".into())
            );
        },
    );
    let summary = summary?;
    let text = ontime_core::export::TextReport::text(&summary);
    a.out.emit(&summary, &text)?;
    Ok(output)
}

fn report(a: ReportArgs) -> anyhow::Result<()> {
    crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    if let Some(dir) = &a.plots {
        ontime_core::fsio::check_output_dir("--plots", dir).map_err(bad_input)?;
    }
    if a.windows.iter().any(|&w| !(100_000..=3_600_000_000_000).contains(&w)) {
        return Err(bad_input("--windows: every window must be between 100us and 1h"));
    }
    let rec = Recording::read(&a.recording).map_err(|e| bad_input(format!("{e:#}")))?;
    let mut analysis = ontime_sched::analyze(
        &rec,
        &AnalysisOptions {
            windows: a.windows.clone(),
            series: a.series || a.plots.is_some(),
        },
    );
    if a.wakeups {
        analysis.wake_detail = Some(ontime_sched::wake_detail::of_recording(&rec));
    }
    if let Some(dir) = &a.plots {
        let files = ontime_observe::plots::write_all(&analysis, dir)?;
        ontime_core::errln!("ontime: wrote {} figures to {}", files.len(), dir.display());
    }
    let mut shown = analysis.clone();
    if !a.series {
        for g in &mut shown.groups {
            for u in &mut g.usage {
                u.series = None;
            }
        }
    }
    let text = ontime_observe::report::AnalysisText {
        analysis: &shown,
        vcpus: a.vcpus,
    }
    .text();
    a.out.emit(&shown, &text)
}
