//! `ontime profile record|report`: stacks joined with the scheduler's time
//! line; steal and I/O wait charged to functions (document 002).

use crate::cmd_observe::RecordArgs;
use crate::output;
use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_core::duration::parse_ns;
use ontime_core::export::TextReport;
use ontime_profile::FunctionView;
use ontime_trace::recording::Recording;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// Print the in-guest agent (POSIX sh): run it in a guest as root; it dumps kernel symbols and process mappings
    Agent,
    /// Name guest addresses with an agent's dump (a file or a serial console log holding one)
    Guest(GuestArgs),
}

#[derive(Args)]
struct GuestArgs {
    /// The agent's output (or a console log that contains it)
    dump: PathBuf,
    /// Guest addresses, hex (0x...)
    #[arg(required = true)]
    addresses: Vec<String>,
    /// The guest process the user-space addresses belong to
    #[arg(long)]
    pid: Option<u32>,
    /// The guest's root file system, readable here (e.g. the mounted
    /// image): user addresses are then named by their files' symbols
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

#[derive(Args)]
struct ProfileRecordArgs {
    /// Samples per second on every CPU (cpu-clock; 1 to 10000)
    #[arg(short = 'F', long, default_value_t = 1000)]
    rate: u32,
    /// Record continuously in back-to-back windows, each a whole recording
    /// in the directory -o (default profile.d); collection never pauses
    /// while a window is stored
    #[arg(long)]
    continuous: bool,
    /// Window length with --continuous
    #[arg(long, default_value = "30s", value_parser = parse_ns)]
    window: u64,
    /// Then report it: the text on stderr, the pprof beside the
    /// recording (<name>.pb.gz) and the figures in <name>-figures/ (a
    /// continuous recording: the windows' table)
    #[arg(long)]
    report: bool,
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(Args)]
struct ProfileReportArgs {
    /// A recording made by `ontime profile record`, or the directory of a
    /// continuous one (every window, analysed in parallel)
    recording: PathBuf,
    /// Windows analysed at once (a directory; default: the CPUs)
    #[arg(long)]
    jobs: Option<usize>,
    /// Functions shown in the text table
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Rank functions by their time with callees (default: the program's
    /// own innermost function, its innermost user-space frame)
    #[arg(long, conflicts_with = "leaf")]
    inclusive: bool,
    /// Rank functions by the leaf frame, kernel functions included
    #[arg(long)]
    leaf: bool,
    /// Also write the profile in pprof format (gzipped protobuf: go tool
    /// pprof, Pyroscope, Parca); values: samples, on_cpu, steal, blocked
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Write figures into this directory: flame graphs (on-cpu.svg,
    /// steal.svg) and each tenant's time classes over time (classes-*.svg/png)
    #[arg(long, value_name = "DIR")]
    figures: Option<PathBuf>,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn run(args: ProfileArgs) -> anyhow::Result<()> {
    match args.action {
        ProfileAction::Record(a) => {
            if !(1..=10_000).contains(&a.rate) {
                return Err(bad_input(format!(
                    "--rate {}: use 1 to 10000 samples per second",
                    a.rate
                )));
            }
            let output = if a.continuous {
                if !(1_000_000_000..=3_600_000_000_000).contains(&a.window) {
                    return Err(bad_input("--window: use 1s to 1h"));
                }
                crate::cmd_observe::record(
                    a.record,
                    "profile.d",
                    Some(a.rate),
                    Some(Duration::from_nanos(a.window)),
                )?
            } else {
                crate::cmd_observe::record(a.record, "profile.otrec", Some(a.rate), None)?
            };
            if a.report {
                let (pprof, figures) = if output.is_dir() {
                    (None, None)
                } else {
                    let stem = output.with_extension("");
                    (
                        Some(output.with_extension("pb.gz")),
                        Some(PathBuf::from(format!("{}-figures", stem.display()))),
                    )
                };
                let text = analyse(
                    &output,
                    None,
                    20,
                    FunctionView::Program,
                    pprof.as_deref(),
                    figures.as_deref(),
                )?
                .1;
                ontime_core::err!("{text}");
            }
            Ok(())
        }
        ProfileAction::Report(a) => report(a),
        ProfileAction::Agent => {
            crate::out!("{}", ontime_profile::guest::AGENT);
            Ok(())
        }
        ProfileAction::Guest(a) => guest(a),
    }
}

fn guest(a: GuestArgs) -> anyhow::Result<()> {
    let dump = ontime_profile::guest::GuestDump::read(&a.dump).map_err(|e| bad_input(format!("{e:#}")))?;
    if let Some(r) = &a.root {
        if !r.is_dir() {
            return Err(bad_input(format!("--root {}: not a directory", r.display())));
        }
    }
    let mut pcs = Vec::new();
    for s in &a.addresses {
        let hex = s.trim_start_matches("0x");
        let pc = u64::from_str_radix(hex, 16).map_err(|_| bad_input(format!("{s}: not a hex address")))?;
        pcs.push(pc);
    }
    if let Some(pid) = a.pid {
        if !dump.processes.contains_key(&pid) {
            return Err(bad_input(format!("--pid {pid}: the dump has no process {pid}")));
        }
    }
    ontime_core::errln!(
        "ontime: guest kernel {}, {} processes, {} kernel symbols{}{}",
        dump.kernel,
        dump.processes.len(),
        dump.kallsyms.len(),
        dump.cr3.as_deref().map(|c| format!("; cr3 {c}")).unwrap_or_default(),
        if dump.complete { "" } else { "; the dump is cut short" }
    );
    let g = ontime_profile::guest::GuestSymbols::new(dump, a.root);
    for pc in pcs {
        let f = g.frame(a.pid, pc);
        crate::outln!("{pc:#x} {} {}", f.function, f.module);
    }
    Ok(())
}

fn report(a: ProfileReportArgs) -> anyhow::Result<()> {
    crate::output::check_outputs(&[("--result", a.out.result.as_deref()), ("--pprof", a.pprof.as_deref())])?;
    let view = if a.inclusive {
        FunctionView::Inclusive
    } else if a.leaf {
        FunctionView::Leaf
    } else {
        FunctionView::Program
    };
    let (json, text) = analyse(
        &a.recording,
        a.jobs,
        a.top,
        view,
        a.pprof.as_deref(),
        a.figures.as_deref(),
    )?;
    a.out.emit(&json, &text)
}

/// Reports a recording (or a continuous recording's directory): its JSON
/// and text, writing the pprof and figures when asked.
fn analyse(
    recording: &Path,
    jobs: Option<usize>,
    top: usize,
    view: FunctionView,
    pprof: Option<&Path>,
    figures: Option<&Path>,
) -> anyhow::Result<(serde_json::Value, String)> {
    if recording.is_dir() {
        if pprof.is_some() || figures.is_some() {
            return Err(bad_input(
                "--pprof and --figures take one recording: give a window file of the directory",
            ));
        }
        let files = ontime_trace::store::window_files(recording).map_err(|e| bad_input(format!("{e:#}")))?;
        if files.is_empty() {
            return Err(bad_input(format!(
                "{}: no window files (made by `ontime profile record --continuous -o DIR`)",
                recording.display()
            )));
        }
        let jobs = jobs.unwrap_or_else(ontime_core::limits::online_cpus);
        let r = ontime_profile::profile_windows(&files, top, jobs)?;
        return Ok((serde_json::to_value(&r)?, ontime_profile::windows_text(&r)));
    }
    let rec = Recording::read(recording).map_err(|e| bad_input(format!("{e:#}")))?;
    let p = ontime_profile::profile(&rec).map_err(|e| bad_input(format!("{}: {e:#}", recording.display())))?;
    if let Some(path) = pprof {
        p.write_pprof(path)?;
        ontime_core::errln!(
            "ontime: wrote {} (go tool pprof -sample_index=steal {})",
            path.display(),
            path.display()
        );
    }
    if let Some(dir) = figures {
        let files = p.write_figures(dir)?;
        ontime_core::errln!("ontime: wrote {} figures to {}", files.len(), dir.display());
    }
    let text = ontime_profile::ProfileText {
        report: &p.report,
        top,
        view,
    }
    .text();
    Ok((serde_json::to_value(&p.report)?, text))
}
