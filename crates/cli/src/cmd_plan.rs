//! `ontime plan INPUT` and `ontime plan check PLACEMENT`.

use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_core::export::TextReport;
use ontime_plan::input::FleetMeasure;
use ontime_plan::{check, plan, PlanInput, PlanOptions};
use ontime_sim::sched::MeasuredWakeups;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PlanArgs {
    #[command(subcommand)]
    cmd: Option<PlanCmd>,
    /// Hosts and tenants to place (TOML; see docs/plan.md)
    #[arg(required = true)]
    input: Option<PathBuf>,
    /// Write the placement as a file `ontime plan check` reads (the input
    /// plus a [placement] table)
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the 1 s mean-CPU packing as such a file
    #[arg(long, value_name = "FILE")]
    mean_cpu_output: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Common {
    /// The hosts' own noise and, for cfs hosts, how their kernel places and
    /// preempts waking threads, fitted from lab runs by `ontime sim
    /// calibrate` (without it the simulated hosts have no noise and cfs
    /// hosts keep the kernel's rules as written)
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Seed of the simulated work draws and start offsets
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hosts simulated at once [default: this host's CPUs]
    #[arg(long)]
    jobs: Option<usize>,
    /// Take each `fleet = "HOST/TENANT"` tenant's CPU per poll and busiest
    /// 100 ms from the fleet's results (`ontime analyse`), not a model
    #[arg(long)]
    from_fleet: bool,
    #[command(flatten)]
    out: crate::output::OutputFlags,
    #[command(flatten, next_help_heading = "Fleet (with --from-fleet)")]
    nats: ontime_fleet::conn::NatsArgs,
}

#[derive(Subcommand)]
enum PlanCmd {
    /// Predict an existing placement: which tenants would miss their target, and why
    Check(CheckArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// Hosts, tenants and a [placement] table (TOML; `ontime plan -o` writes one)
    placement: PathBuf,
    #[command(flatten)]
    common: Common,
}

fn options(c: &Common) -> anyhow::Result<PlanOptions> {
    if c.jobs == Some(0) {
        return Err(bad_input("--jobs must be above 0"));
    }
    let mut o = PlanOptions {
        seed: c.seed,
        ..Default::default()
    };
    if let Some(p) = &c.calibration {
        let cal = ontime_sim_lab::calibrate::read(p).map_err(|e| bad_input(format!("{e:#}")))?;
        let wakeups = cal.wakeups();
        let placement = if wakeups == MeasuredWakeups::default() {
            String::new()
        } else {
            format!(
                "; cfs hosts keep {:.0} % of wake-ups on a busy last CPU, {}, as measured",
                100.0 * wakeups.stay_on_busy_prev,
                match wakeups.preempts {
                    Some(p) => format!("{:.0} % of those preempt there", 100.0 * p),
                    None => "EEVDF's rules decide who preempts".to_string(),
                }
            )
        };
        o.calibration = Some(format!(
            "{} (host noise and stalls from {}{placement})",
            p.display(),
            cal.from
        ));
        o.wakeups = wakeups;
        o.host_noise = cal.host_noise;
        o.host_stalls = cal.host_stalls;
    }
    if let Some(j) = c.jobs {
        o.jobs = j;
    }
    Ok(o)
}

fn read(p: &Path, c: &Common) -> anyhow::Result<PlanInput> {
    if !c.from_fleet {
        return PlanInput::read(p).map_err(|e| bad_input(format!("{e:#}")));
    }
    let (view, _) = ontime_fleet::report::load(&c.nats, None)?;
    if let Some(why) = &view.empty_because {
        return Err(bad_input(format!("--from-fleet: {why}")));
    }
    let lookup = |name: &str| fleet_measure(&view, name);
    PlanInput::read_measured(p, Some(&lookup)).map_err(|e| bad_input(format!("{e:#}")))
}

/// A tenant's figures in the fleet's view: "HOST/TENANT", or "TENANT"
/// when exactly one host has it.
fn fleet_measure(view: &ontime_fleet::report::FleetView, name: &str) -> anyhow::Result<FleetMeasure> {
    let (host, tenant) = match name.split_once('/') {
        Some((h, t)) => (Some(h), t),
        None => (None, name),
    };
    let found: Vec<_> = view
        .hosts
        .iter()
        .filter(|h| host.is_none_or(|want| h.host == want))
        .flat_map(|h| h.tenants.iter().filter(|t| t.tenant == tenant).map(move |t| (h, t)))
        .collect();
    let known = || {
        let all: Vec<String> = view
            .hosts
            .iter()
            .flat_map(|h| h.tenants.iter().map(move |t| format!("{}/{}", h.host, t.tenant)))
            .collect();
        all.join(", ")
    };
    match found.as_slice() {
        [(h, t)] => {
            let Some(peak) = t.peak_100ms_cpus_max else {
                anyhow::bail!(
                    "the fleet has no 100 ms peak for {}/{} (its windows were shorter than 100 ms)",
                    h.host,
                    t.tenant
                );
            };
            if t.mean_cpus <= 0.0 {
                anyhow::bail!(
                    "{}/{} used no CPU in the fleet's {} window(s): nothing to plan by",
                    h.host,
                    t.tenant,
                    t.windows
                );
            }
            Ok(FleetMeasure {
                source: format!("{}/{}", h.host, t.tenant),
                windows: t.windows,
                observed_ns: t.observed_ns,
                mean_cpus: t.mean_cpus,
                peak_100ms_cpus: peak,
            })
        }
        [] => anyhow::bail!("the fleet's results have no such tenant (they have: {})", known()),
        many => anyhow::bail!(
            "{} hosts have a tenant {tenant} ({}): name one as HOST/TENANT",
            many.len(),
            many.iter().map(|(h, _)| h.host.as_str()).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn write_placement(
    input: &PlanInput,
    placement: &std::collections::BTreeMap<String, Vec<String>>,
    path: &Path,
) -> anyhow::Result<()> {
    let mut out = input.clone();
    out.placement = placement.clone();
    let text = format!(
        "# Written by ontime plan; check it with: ontime plan check {}\n{}",
        path.display(),
        toml::to_string(&out)?
    );
    ontime_core::fsio::write_atomic(path, text.as_bytes())
}

pub fn run(a: PlanArgs) -> anyhow::Result<()> {
    if let Some(PlanCmd::Check(c)) = a.cmd {
        let input = read(&c.placement, &c.common)?;
        let r = check(&input, &options(&c.common)?).map_err(|e| bad_input(format!("{e:#}")))?;
        return c.common.out.emit(&r, &r.text());
    }
    let Some(path) = a.input.as_deref() else {
        return Err(bad_input(
            "give a plan input: ontime plan INPUT (or ontime plan check PLACEMENT)",
        ));
    };
    crate::output::check_outputs(&[
        ("--result", a.common.out.result.as_deref()),
        ("--output", a.output.as_deref()),
        ("--mean-cpu-output", a.mean_cpu_output.as_deref()),
    ])?;
    let input = read(path, &a.common)?;
    let r = plan(&input, &options(&a.common)?).map_err(|e| bad_input(format!("{e:#}")))?;
    let mut text = r.text();
    if let Some(o) = &a.output {
        write_placement(&input, &r.placement, o)?;
        let _ = writeln!(
            text,
            "placement written: {} (ontime plan check {})",
            o.display(),
            o.display()
        );
    }
    if let Some(o) = &a.mean_cpu_output {
        write_placement(&input, &r.mean_cpu_packing.placement, o)?;
        let _ = writeln!(text, "mean-CPU packing written: {}", o.display());
    }
    a.common.out.emit(&r, &text)
}
