//! `ontime plan INPUT` and `ontime plan check PLACEMENT`.

use crate::usage;
use clap::{Args, Subcommand};
use ontime_core::export::TextReport;
use ontime_plan::{check, plan, PlanInput, PlanOptions};
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
    /// The hosts' own noise, fitted from lab runs by `ontime sim calibrate`
    /// (without it the simulated hosts have none)
    #[arg(long, value_name = "FILE")]
    calibration: Option<PathBuf>,
    /// Seed of the simulated work draws and start offsets
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hosts simulated at once [default: this host's CPUs]
    #[arg(long)]
    jobs: Option<usize>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
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
        return Err(usage("--jobs must be above 0"));
    }
    let mut o = PlanOptions {
        seed: c.seed,
        ..Default::default()
    };
    if let Some(p) = &c.calibration {
        let cal = ontime_sim_lab::calibrate::read(p).map_err(|e| usage(format!("{e:#}")))?;
        o.host_noise = cal.host_noise;
        o.host_stalls = cal.host_stalls;
    }
    if let Some(j) = c.jobs {
        o.jobs = j;
    }
    Ok(o)
}

fn read(p: &Path) -> anyhow::Result<PlanInput> {
    PlanInput::read(p).map_err(|e| usage(format!("{e:#}")))
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
        let input = read(&c.placement)?;
        let r = check(&input, &options(&c.common)?).map_err(|e| usage(format!("{e:#}")))?;
        return c.common.out.emit(&r, &r.text());
    }
    let Some(path) = a.input.as_deref() else {
        return Err(usage(
            "give a plan input: ontime plan INPUT (or ontime plan check PLACEMENT)",
        ));
    };
    crate::output::check_outputs(&[
        ("--result", a.common.out.result.as_deref()),
        ("--output", a.output.as_deref()),
        ("--mean-cpu-output", a.mean_cpu_output.as_deref()),
    ])?;
    let input = read(path)?;
    let r = plan(&input, &options(&a.common)?).map_err(|e| usage(format!("{e:#}")))?;
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
