//! `ontime profile record|report`: stacks joined with the scheduler's time
//! line; steal and I/O wait charged to functions (document 002).

use crate::cmd_observe::RecordArgs;
use crate::output;
use crate::usage;
use clap::{Args, Subcommand};
use ontime_trace::recording::Recording;
use std::path::PathBuf;

#[derive(Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    action: ProfileAction,
}

#[derive(Subcommand)]
enum ProfileAction {
    /// Sample the targets' stacks on every CPU and record their scheduler events, on one clock
    Record(ProfileRecordArgs),
    /// Run, idle, steal (by whom) and I/O wait per tenant and thread; steal charged to functions; pprof and flame graphs
    Report(ProfileReportArgs),
}

#[derive(Args)]
struct ProfileRecordArgs {
    /// Samples per second on every CPU (cpu-clock; 1 to 10000)
    #[arg(short = 'F', long, default_value_t = 1000)]
    rate: u32,
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(Args)]
struct ProfileReportArgs {
    /// A recording made by `ontime profile record`
    recording: PathBuf,
    /// Functions shown in the text table
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Rank functions by their time with callees (default: own time)
    #[arg(long)]
    inclusive: bool,
    /// Also write the profile in pprof format (gzipped protobuf: go tool
    /// pprof, Pyroscope, Parca); values: samples, on_cpu, steal, blocked
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Write flame graphs (on-cpu.svg, steal.svg) into this directory
    #[arg(long, value_name = "DIR")]
    flame_graphs: Option<PathBuf>,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn run(args: ProfileArgs) -> anyhow::Result<()> {
    match args.action {
        ProfileAction::Record(a) => {
            if !(1..=10_000).contains(&a.rate) {
                return Err(usage(format!("--rate {}: use 1 to 10000 samples per second", a.rate)));
            }
            crate::cmd_observe::record(a.record, "profile.otrec", Some(a.rate))
        }
        ProfileAction::Report(a) => report(a),
    }
}

fn report(a: ProfileReportArgs) -> anyhow::Result<()> {
    crate::output::check_outputs(&[("--result", a.out.result.as_deref()), ("--pprof", a.pprof.as_deref())])?;
    let rec = Recording::read(&a.recording).map_err(|e| usage(format!("{e:#}")))?;
    let p = ontime_profile::profile(&rec).map_err(|e| usage(format!("{}: {e:#}", a.recording.display())))?;
    if let Some(path) = &a.pprof {
        let prof = ontime_profile::pprof::build(
            &p.joined,
            &p.symbols,
            p.start_realtime_ns,
            p.report.profile.sample_period_ns,
        );
        ontime_profile::pprof::write(&prof, path)?;
        eprintln!(
            "ontime: wrote {} (go tool pprof -sample_index=steal {})",
            path.display(),
            path.display()
        );
    }
    if let Some(dir) = &a.flame_graphs {
        let files = ontime_profile::flame_graphs(&p.joined, &p.symbols, dir)?;
        eprintln!("ontime: wrote {} flame graphs to {}", files.len(), dir.display());
    }
    let text = ontime_profile::text(&p.report, a.top, a.inclusive);
    a.out.emit(&p.report, &text)
}
