//! `ontime lab run|report|clean`: experiments from scenario files.

use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_lab::runner::{self, Event, RunnerOptions};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    action: LabAction,
}

#[derive(Subcommand)]
enum LabAction {
    /// Run every combination of a scenario, streaming results to a directory
    Run(RunArgs),
    /// Write an HTML report (and PNG figures) from a results directory
    Report(ReportArgs),
    /// Remove every leftover namespace, link, cgroup and process of the lab
    Clean(CleanArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The scenario file (TOML; see docs/scenarios.md)
    scenario: PathBuf,
    /// Results directory [default: results/<scenario name>]
    #[arg(long, short = 'o')]
    results: Option<PathBuf>,
    /// Skip runs already complete in the results directory
    #[arg(long)]
    resume: bool,
    /// Check the scenario and list its runs without running anything
    #[arg(long)]
    dry_run: bool,
    /// Write the report when the runs are done
    #[arg(long)]
    report: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// A results directory written by `ontime lab run` (with --markdown,
    /// also a pack of them: .tar.xz, e.g. docs/results/NAME/runs.tar.xz)
    dir: PathBuf,
    /// Where to write report.html and the PNGs [default: DIR/report]
    #[arg(long, short = 'o', conflicts_with = "markdown")]
    out: Option<PathBuf>,
    /// Print the headline table as Markdown (per setting: the runs' worst
    /// tenant as median and range) instead of writing the HTML report
    #[arg(long)]
    markdown: bool,
    /// Write the runs of DIR (measured ones, without recordings) into
    /// this .tar.xz pack, for committing beside the docs
    #[arg(long, value_name = "FILE", conflicts_with_all = ["out", "markdown"])]
    pack: Option<PathBuf>,
}

#[derive(Args)]
struct CleanArgs {
    /// Only list what would be removed
    #[arg(long)]
    dry_run: bool,
    /// Clean even while a lab runs (it is destroyed and its run fails)
    #[arg(long)]
    force: bool,
}

pub fn run(a: LabArgs) -> anyhow::Result<()> {
    match a.action {
        LabAction::Run(r) => run_scenario(r),
        LabAction::Report(r) => report(r),
        LabAction::Clean(c) => clean(c),
    }
}

fn run_scenario(a: RunArgs) -> anyhow::Result<()> {
    if !a.scenario.exists() {
        return Err(bad_input(format!("no scenario file at {}", a.scenario.display())));
    }
    let text = ontime_scenario::scenario::read_text(&a.scenario).map_err(|e| bad_input(format!("{e:#}")))?;
    let plan = ontime_scenario::scenario::load_str(&text, &a.scenario).map_err(|e| bad_input(format!("{e:#}")))?;
    let results = a
        .results
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(&plan.name));
    ontime_core::errln!(
        "ontime lab: scenario '{}': {} run(s), about {} in all; results in {}",
        plan.name,
        plan.runs.len(),
        ontime_core::duration::format_eta(plan.total_duration_ns()),
        results.display()
    );
    if a.dry_run {
        for r in &plan.runs {
            crate::outln!("{}  {}", r.dir_name(), ontime_scenario::scenario::vars_text(&r.vars));
        }
        return Ok(());
    }
    let outcome = execute(&plan, &text, results, a.resume, a.report)?;
    if outcome.interrupted {
        return Err(crate::signals::Interrupted::by_first_signal().into());
    }
    Ok(())
}

/// Runs a plan with a progress bar and the stop handling of `lab run`
/// (`ontime net controller` runs one this way too). A stop is not an
/// error here: the sweep's outcome says it was interrupted, and what was
/// kept has been said, for the caller to end as it should.
pub fn execute(
    plan: &ontime_scenario::scenario::Plan,
    text: &str,
    results: PathBuf,
    resume: bool,
    with_report: bool,
) -> anyhow::Result<runner::SweepOutcome> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let opts = RunnerOptions {
        results: results.clone(),
        resume,
        exe: std::env::current_exe()?,
        stop,
    };
    let pb = crate::output::progress_bar(0);
    let mut total = plan.runs.len();
    let mut current = String::new();
    let outcome = runner::run_plan(
        &mut ontime_lab::stages::Sandboxes,
        plan,
        text,
        &opts,
        &mut |ev| match ev {
            Event::Skipped { run } => ontime_core::errln!(
                "ontime lab: [{}/{total}] {} already complete, skipped",
                run.index + 1,
                run.dir_name()
            ),
            Event::Started {
                run,
                total: t,
                remaining_ns,
            } => {
                total = t;
                current = run.dir_name();
                pb.set_length(run.config.duration.div_ceil(1_000_000_000));
                pb.set_position(0);
                ontime_core::errln!(
                    "ontime lab: [{}/{t}] {}  (about {} left)",
                    run.index + 1,
                    ontime_scenario::scenario::vars_text(&run.vars),
                    ontime_core::duration::format_eta(remaining_ns)
                );
            }
            Event::Tick { elapsed_ns, .. } => {
                pb.set_position(elapsed_ns / 1_000_000_000);
                pb.set_message(current.clone());
            }
            Event::Finished {
                run,
                summary,
                interrupted,
            } => {
                let how = if interrupted { "interrupted, incomplete" } else { "done" };
                pb.suspend(|| ontime_core::errln!("ontime lab: [{}/{total}] {how}: {summary}", run.index + 1));
            }
        },
    );
    pb.finish_and_clear();
    let outcome = outcome.map_err(|e| {
        // The host cannot run the scenario as written (no guest kit, QEMU
        // or vhost-net): not bad input in the lab's terms, but the user's
        // to fix before anything is made, so exit 2 as documented.
        if e.is::<ontime_lab::qemu::HostCannot>() {
            bad_input(format!("{e:#}"))
        } else {
            e
        }
    })?;
    if outcome.interrupted {
        ontime_core::errln!(
            "ontime lab: interrupted: {} of {} runs complete ({} made now, {} skipped); results in {} (--resume continues)",
            outcome.complete(),
            outcome.planned,
            outcome.done,
            outcome.skipped,
            results.display()
        );
    } else {
        ontime_core::errln!(
            "ontime lab: {} run(s) done, {} skipped; results in {}",
            outcome.done,
            outcome.skipped,
            results.display()
        );
    }
    if with_report {
        report(ReportArgs {
            dir: results,
            out: None,
            markdown: false,
            pack: None,
        })?;
    }
    Ok(outcome)
}

fn report(a: ReportArgs) -> anyhow::Result<()> {
    if !a.dir.exists() {
        return Err(bad_input(format!("no results directory at {}", a.dir.display())));
    }
    // A results file of the wrong shape: its own line, without context.
    let one_line = |e: anyhow::Error| match e.downcast_ref::<ontime_core::BadInput>() {
        Some(bad) => bad_input(bad.to_string()),
        None => e,
    };
    if let Some(pack) = &a.pack {
        if !pack.to_string_lossy().ends_with(".tar.xz") {
            return Err(bad_input("--pack: the file name ends in .tar.xz"));
        }
        crate::output::check_outputs(&[("--pack", Some(pack))])?;
        let n = ontime_scenario::pack::write(pack, std::slice::from_ref(&a.dir)).map_err(one_line)?;
        crate::outln!("ontime lab report: {n} measured run(s) -> {}", pack.display());
        return Ok(());
    }
    if a.markdown {
        let (dirs, _unpacked) = if ontime_scenario::pack::is_pack(&a.dir) {
            let u = ontime_scenario::pack::unpack(&a.dir).map_err(one_line)?;
            (u.results.clone(), Some(u))
        } else {
            (vec![a.dir.clone()], None)
        };
        for d in &dirs {
            if dirs.len() > 1 {
                let name = d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                crate::outln!("### {name}\n");
            }
            crate::out!("{}", ontime_report::markdown::table(d).map_err(one_line)?);
        }
        return Ok(());
    }
    if ontime_scenario::pack::is_pack(&a.dir) {
        return Err(bad_input(format!(
            "{} is a pack: give --markdown for its tables, or unpack it (tar -xJf) for the HTML report",
            a.dir.display()
        )));
    }
    // Where the report goes, checked before any run is read; a DIR that
    // is no directory is said by the reading, as before.
    match &a.out {
        Some(out) => ontime_core::fsio::check_output_dir("--out", out).map_err(bad_input)?,
        None if a.dir.is_dir() => {
            ontime_core::fsio::check_output_dir("--out (default DIR/report)", &a.dir.join("report"))
                .map_err(bad_input)?
        }
        None => {}
    }
    let w = ontime_report::report::write(&a.dir, a.out.as_deref()).map_err(one_line)?;
    crate::outln!("ontime lab report: {} run(s) -> {}", w.runs, w.html.display());
    for p in &w.pngs {
        crate::outln!("  {}", p.display());
    }
    Ok(())
}

fn clean(a: CleanArgs) -> anyhow::Result<()> {
    let found = if a.dry_run {
        ontime_lab::clean::find()?
    } else {
        ontime_lab::clean::clean(a.force).map_err(|e| {
            if e.is::<ontime_lab::clean::LabRunning>() {
                bad_input(format!("{e:#}"))
            } else {
                e
            }
        })?
    };
    if found.is_empty() {
        crate::outln!("ontime lab clean: nothing of the lab's is left on this host");
        return Ok(());
    }
    let verb = if a.dry_run { "would remove" } else { "removed" };
    crate::outln!(
        "ontime lab clean: {verb} {} namespace(s), {} link(s), {} cgroup(s), {} process(es), {} disk(s) ({} loop device(s), {} mount namespace(s)), {} controller file(s); {} {} kernel setting(s)",
        found.netns.len(),
        found.links.len(),
        found.cgroups.len(),
        found.processes.len(),
        found.disks.images.len(),
        found.disks.loop_devices.len(),
        found.disks.mount_namespaces.len(),
        found.files.len(),
        if a.dry_run { "would restore" } else { "restored" },
        found.settings.len()
    );
    for n in found.names() {
        crate::outln!("  {n}");
    }
    Ok(())
}
