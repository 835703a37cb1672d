//! `ontime sim SCENARIO`: a lab scenario run in the simulator.

use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_core::duration::parse_ns;
use ontime_core::export::TextReport;
use ontime_sim_lab::simulate::{simulate_plan_until, Model, SimLine, SimListing, SimOptions};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    #[command(subcommand)]
    cmd: Option<SimCmd>,
    /// A lab scenario file (crawler tenants; see docs/scenarios.md)
    #[arg(required = true)]
    scenario: Option<PathBuf>,
    /// This host's calibration, fitted from its lab runs by `ontime sim
    /// calibrate` (host noise, CPU per poll, the I/O path's cost)
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Only the host noise (how late woken threads start) of a calibration,
    /// for a host that was not calibrated (e.g. document 000's, with
    /// --model): without noise, bursts on the same instant interleave the
    /// same way every second
    #[arg(long, value_name = "FILE", conflicts_with = "calibration")]
    host_noise: Option<PathBuf>,
    /// Also write the runs into this lab results directory, marked
    /// simulated, beside measured runs of the same scenario (each with the
    /// measured run's tenant start times); `ontime lab report DIR` then
    /// draws both
    #[arg(long, value_name = "DIR")]
    into: Option<PathBuf>,
    /// CPUs of the simulated host (a tenant's cpuset, when it has one, wins)
    /// [default: this host's]
    #[arg(long)]
    cpus: Option<usize>,
    /// Scheduler model instead of the tenants' policy: cfs, fifo, rr, edf,
    /// credit (Xen, --tslice), credit2, rtds (--budget/--period)
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    settings: ModelSettings,
    /// Model the host I/O path as a thread forwarding every request and
    /// answer at this CPU cost per packet, e.g. 50us, at most 1s (default:
    /// a constant WAN delay only)
    #[arg(long, value_parser = parse_ns)]
    io_cost: Option<u64>,
    /// Threads of that I/O path, each tenant's packets on one of them (the
    /// lab's relay: 1; document 000's Dom0 had 8 vCPUs)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    io_vcpus: u16,
    /// Seed of the simulated work draws
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Real-time budget per second the tenants' cgroups share (RT group
    /// scheduling): `ontime lab` gives them 900ms on a host with cgroup
    /// v1's cpu.rt_runtime_us (run.json: environment.tenant_rt_runtime_us
    /// per tenant); real-time vCPU threads beyond their share wait for the
    /// next second. 0: none [default: what the measured run --into
    /// recorded, else the calibration's, else none]
    #[arg(long, value_parser = parse_ns, value_name = "DURATION")]
    tenant_rt_budget: Option<u64>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

/// A model's settings, for `sim` and `sim tasks` alike.
#[derive(Args)]
struct ModelSettings {
    /// Time slice of rr and credit [default: 100ms for rr, 30ms for credit]
    #[arg(long, value_parser = parse_ns)]
    tslice: Option<u64>,
    /// RTDS budget of every thread per period [default: 4ms]
    #[arg(long, value_parser = parse_ns)]
    budget: Option<u64>,
    /// RTDS period of every thread's budget [default: 10ms]
    #[arg(long, value_parser = parse_ns)]
    period: Option<u64>,
}

impl ModelSettings {
    fn model(&self, name: &str) -> anyhow::Result<Model> {
        Model::from_name(name, self.tslice, self.budget, self.period).map_err(bad_input)
    }
}

#[derive(Subcommand)]
enum SimCmd {
    /// Fit this host's noise, the crawler's CPU per poll and the host I/O
    /// path's cost per packet from lab results (writes a calibration file)
    Calibrate(CalibrateArgs),
    /// Run a periodic task set (TOML) under a scheduler model: per task
    /// its jobs, deadline misses and worst response; every job with --jobs
    Tasks(TasksArgs),
    /// How close the simulator comes to the lab: committed sets of lab
    /// runs simulated beside themselves, each set alone, pooled and the
    /// lab against itself, side by side
    Validate(ValidateArgs),
}

#[derive(Args)]
struct ValidateArgs {
    /// The sets of lab runs, their calibrations and the pool (TOML)
    #[arg(default_value = "docs/results/sim/validate.toml")]
    manifest: PathBuf,
    /// Seed of the simulated work draws
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only this set (repeat for several; the pool keeps those among them)
    #[arg(long = "set", value_name = "NAME")]
    sets: Vec<String>,
    /// Every cell of every basis: lab median, quartiles and range, the
    /// other side's median, the ratio
    #[arg(long)]
    cells: bool,
    /// Print only each basis's counts as JSON (docs/results/sim/validation.json)
    #[arg(long, conflicts_with = "cells")]
    counts: bool,
    /// Leave the pooled sets' runs, measured and simulated, here: one
    /// results directory per scenario for `ontime lab report`
    #[arg(long, value_name = "DIR")]
    into: Option<PathBuf>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

#[derive(Args)]
struct TasksArgs {
    /// The task set: [[task]] name, wcet, period, deadline, offset, priority
    set: PathBuf,
    /// Scheduler model: fifo, rr, edf, cfs, credit, credit2, rtds
    #[arg(long, default_value = "fifo")]
    model: String,
    #[command(flatten)]
    settings: ModelSettings,
    /// CPUs (global scheduling: the first m of the model's order run)
    #[arg(long, default_value_t = 1)]
    cpus: usize,
    /// Simulated time [default: the hyperperiod after the last first
    /// release, at most 1 h]
    #[arg(long, value_parser = parse_ns)]
    horizon: Option<u64>,
    /// Write every completed job as CSV: task,release_ns,completion_ns
    /// (RFC 4180: a name with a comma, quote or line break is quoted; the
    /// file appears whole or not at all)
    #[arg(long, value_name = "FILE")]
    jobs: Option<PathBuf>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

/// One task's jobs in `sim tasks`.
#[derive(serde::Serialize)]
struct TaskLine {
    task: String,
    released: u64,
    completed: u64,
    deadline_misses: u64,
    worst_response_ns: u64,
    cpu_ns: u64,
}

/// Jobs a `sim tasks` run may release: the run is a check, not a load
/// test (at 1 us per job this is minutes).
const MAX_JOBS: f64 = 1e8;

fn tasks(a: TasksArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let file: ontime_sim::task::TaskSetFile =
        ontime_core::config::read_toml(&a.set, "task set").map_err(|e| bad_input(format!("{e:#}")))?;
    let set = file
        .tasks()
        .map_err(|e| bad_input(format!("{}: {e}", a.set.display())))?;
    ontime_core::limits::count("--cpus", a.cpus as u64, 1, ontime_core::limits::MAX_SIM_CPUS).map_err(bad_input)?;
    let model = a.settings.model(&a.model)?;
    const HOUR: u64 = 3_600_000_000_000;
    let first = set.iter().map(|t| t.offset_ns).max().unwrap_or(0);
    let horizon = match a.horizon {
        Some(h) => ontime_core::limits::duration("--horizon", h, 1_000, HOUR).map_err(bad_input)?,
        None => first.saturating_add(ontime_sim::task::hyperperiod(&set)).min(HOUR),
    };
    let jobs: f64 = set.iter().map(|t| horizon as f64 / t.period_ns as f64).sum();
    if jobs > MAX_JOBS {
        return Err(bad_input(format!(
            "{jobs:.0} jobs in {}: at most {MAX_JOBS:.0}; give a shorter --horizon",
            ontime_core::duration::format_ns(horizon)
        )));
    }
    crate::output::check_outputs(&[("--result", a.out.result.as_deref()), ("--jobs", a.jobs.as_deref())])?;
    let mut sched = model.build(set.len(), a.cpus);
    // Jobs stream to the file as they complete (memory stays the set's),
    // through a temporary file renamed into place at the end: a full disk
    // leaves no partial CSV, and the error names the file.
    let mut csv = match &a.jobs {
        Some(p) => {
            let mut w = ontime_core::fsio::AtomicWriter::create(p)?;
            writeln!(w, "task,release_ns,completion_ns")
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", p.display()))?;
            Some(w)
        }
        None => None,
    };
    let names: Vec<String> = set
        .iter()
        .map(|t| ontime_core::export::csv_field(&t.name).into_owned())
        .collect();
    let mut write_err = None;
    let outcome = ontime_sim::engine::simulate_jobs(&set, a.cpus, &mut *sched, horizon, 0, &mut |t, rel, done| {
        if write_err.is_some() {
            return;
        }
        if let Some(w) = csv.as_mut() {
            if let Err(e) = writeln!(w, "{},{rel},{done}", names[t]) {
                write_err = Some(e);
            }
        }
    });
    if let Some(w) = csv {
        if let Some(e) = write_err {
            // Dropping the writer removes the partial file.
            let path = w.path().display().to_string();
            drop(w);
            return Err(anyhow::anyhow!("cannot write {path}: {e}"));
        }
        w.commit()?;
    }
    if outcome.end_ns < horizon {
        ontime_core::errln!(
            "ontime sim tasks: stopped at {}: more than {} jobs waited at once (the set is overloaded); every waiting job past its deadline by then is a miss",
            ontime_core::duration::format_ns(outcome.end_ns),
            ontime_sim::engine::MAX_WAITING_JOBS
        );
    }
    let lines: Vec<TaskLine> = set
        .iter()
        .zip(&outcome.tasks)
        .map(|(t, o)| TaskLine {
            task: t.name.clone(),
            released: o.released,
            completed: o.completed,
            deadline_misses: o.deadline_misses,
            worst_response_ns: o.worst_response_ns,
            cpu_ns: o.cpu_ns,
        })
        .collect();
    use ontime_core::duration::format_ns;
    let mut text = format!(
        "ontime sim tasks: {} task(s), {} on {} CPU(s), {} simulated, U = {:.3}\n{:<16} {:>9} {:>9} {:>7} {:>14}\n",
        set.len(),
        model,
        a.cpus,
        format_ns(outcome.end_ns),
        set.iter().map(ontime_sim::task::PeriodicTask::utilisation).sum::<f64>(),
        "task",
        "released",
        "completed",
        "misses",
        "worst response"
    );
    for l in &lines {
        text += &format!(
            "{:<16} {:>9} {:>9} {:>7} {:>14}\n",
            l.task,
            l.released,
            l.completed,
            l.deadline_misses,
            format_ns(l.worst_response_ns)
        );
    }
    a.out.emit(&lines, &text)
}

#[derive(Args)]
struct CalibrateArgs {
    /// Lab results directories with measured crawler runs (`ontime lab run`)
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// Where to write the calibration [default: the first RESULTS/calibration.json]
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

fn calibrate(a: CalibrateArgs) -> anyhow::Result<()> {
    use ontime_core::export::TextReport;
    let dirs: Vec<&std::path::Path> = a.results.iter().map(PathBuf::as_path).collect();
    let cal = ontime_sim_lab::calibrate::calibrate(&dirs).map_err(|e| bad_input(format!("{e:#}")))?;
    let path = a.output.unwrap_or_else(|| a.results[0].join("calibration.json"));
    ontime_core::fsio::write_atomic(&path, serde_json::to_string_pretty(&cal)?.as_bytes())?;
    let text = format!("{}written: {}\n", cal.text(), path.display());
    a.out.emit(&cal, &text)
}

fn model(a: &SimArgs) -> anyhow::Result<Option<Model>> {
    let Some(m) = a.model.as_deref() else { return Ok(None) };
    a.settings.model(m).map(Some)
}

pub fn run(a: SimArgs) -> anyhow::Result<()> {
    match a.cmd {
        Some(SimCmd::Calibrate(c)) => return calibrate(c),
        Some(SimCmd::Tasks(t)) => return tasks(t),
        Some(SimCmd::Validate(v)) => return validate(v),
        None => {}
    }
    let Some(scenario) = a.scenario.as_deref() else {
        return Err(bad_input(
            "give a scenario file: ontime sim SCENARIO (or ontime sim calibrate RESULTS)",
        ));
    };
    let plan = ontime_scenario::scenario::load(scenario).map_err(|e| bad_input(format!("{e:#}")))?;
    // What the simulated host's noise and costs come from, and the first
    // line of the listing says so.
    let read = |p: &PathBuf, noise_only: bool| {
        ontime_sim_lab::calibrate::read(p)
            .and_then(|c| if noise_only { c.host_noise_only(p) } else { Ok(c) })
            .map(|c| Some((p.clone(), c)))
            .map_err(|e| bad_input(format!("{e:#}")))
    };
    let (calibration, basis) = match (&a.calibration, &a.host_noise) {
        (Some(p), _) => (read(p, false)?, format!("calibration {}", p.display())),
        (None, Some(p)) => (
            read(p, true)?,
            format!("host noise of {} (nothing else of it)", p.display()),
        ),
        (None, None) => (None, "no calibration: no host noise".to_string()),
    };
    if let Some(dir) = &a.into {
        // Only beside runs of the same scenario: a report of two scenarios
        // would compare unlike settings.
        if let Ok(dirs) = ontime_scenario::results::run_dirs(dir) {
            if let Some(d) = dirs.first() {
                let other = ontime_scenario::results::read_record(d)?.config.name;
                if other != plan.name {
                    return Err(bad_input(format!(
                        "{} holds runs of scenario '{other}', not '{}': give another --into",
                        dir.display(),
                        plan.name
                    )));
                }
            }
        }
    }
    if a.tenant_rt_budget.is_some_and(|b| b > 1_000_000_000) {
        return Err(bad_input(
            "--tenant-rt-budget: at most 1s (it is a share of each second's real-time time)",
        ));
    }
    if let Some(c) = a.cpus {
        ontime_core::limits::count("--cpus", c as u64, 1, ontime_core::limits::MAX_SIM_CPUS).map_err(bad_input)?;
    }
    if let Some(c) = a.io_cost {
        ontime_core::limits::duration("--io-cost", c, 0, ontime_core::limits::MAX_IO_COST_NS).map_err(bad_input)?;
    }
    crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    let io_cost_known = a.io_cost.is_some()
        || calibration
            .as_ref()
            .is_some_and(|(_, c)| c.io_cost_per_packet_ns.is_some());
    if a.io_vcpus > 1 && !io_cost_known {
        return Err(bad_input(
            "--io-vcpus needs an I/O path: give --io-cost (or a calibration that measured one)",
        ));
    }
    let opts = SimOptions {
        cpus: a.cpus.unwrap_or_else(ontime_core::limits::online_cpus),
        model: model(&a)?,
        seed: a.seed,
        send_cost_ns: 10_000,
        io_cost_ns: a.io_cost,
        io_vcpus: a.io_vcpus as usize,
        calibration,
        scheduler_view: a.into.is_some(),
        starts_from: a.into.clone(),
        tenant_rt_budget_ns: a.tenant_rt_budget,
    };
    // Each run is summarised (and written --into) as it is done; only the
    // summaries (percentiles, no histograms) are kept for --json/--result.
    let mut listing = SimListing {
        scenario: plan.name.clone(),
        basis: Some(basis),
        ..Default::default()
    };
    let mut summaries: Vec<serde_json::Value> = Vec::new();
    let mut written = 0usize;
    let total = plan.runs.len();
    // Ctrl-C stops the sweep between runs; the runs done are listed and
    // written as a finished sweep's are, as `lab run` keeps its runs.
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let done = simulate_plan_until(&plan, &opts, &stop, &mut |r| {
        let line = SimLine::of(&r);
        if total > 1 {
            ontime_core::errln!(
                "ontime sim: [{}/{total}] {}",
                summaries.len() + 1,
                line.text().trim_end()
            );
        }
        listing.lines.push(line);
        if let Some(dir) = &a.into {
            written += ontime_sim_lab::simulate::write_runs(dir, std::slice::from_ref(&r))?.len();
        }
        summaries.push(serde_json::to_value(&r)?);
        Ok(())
    })
    .map_err(|e| bad_input(format!("{e:#}")))?;
    listing.written_into = a.into.clone().map(|d| (written, d));
    let interrupted = stop.load(Ordering::Relaxed) && done < total;
    if interrupted {
        listing.interrupted = Some((done, total));
    }
    a.out.emit(&summaries, &listing.text())?;
    if interrupted {
        ontime_core::errln!(
            "ontime sim: interrupted after {done} of {total} runs; the runs done are in the table{}",
            if a.out.result.is_some() { " and --result" } else { "" }
        );
        return Err(crate::signals::Interrupted::by_first_signal().into());
    }
    Ok(())
}

fn validate(a: ValidateArgs) -> anyhow::Result<()> {
    crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    let v = ontime_sim_lab::validate::validate(&a.manifest, a.seed, &a.sets, a.into.as_deref(), &mut |line| {
        ontime_core::errln!("ontime sim validate: {line}");
    })?;
    if a.counts {
        crate::outln!("{}", serde_json::to_string_pretty(&v.counts())?);
        return Ok(());
    }
    a.out.emit(&v, &v.markdown(a.cells))
}
