//! `ontime plan INPUT` and `ontime plan check PLACEMENT`.

use crate::usage;
use clap::{Args, Subcommand};
use ontime_core::duration::format_ns;
use ontime_plan::{check, plan, CheckReport, HostPrediction, PlanInput, PlanOptions, PlanReport};
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

fn worst(h: &HostPrediction) -> String {
    h.tenants
        .iter()
        .max_by(|a, b| {
            let r = |t: &ontime_plan::TenantPrediction| {
                t.predicted_ns
                    .map_or(f64::INFINITY, |v| v as f64 / t.target_ns.max(1) as f64)
            };
            r(a).total_cmp(&r(b))
        })
        .map(|t| {
            format!(
                "{} {} (target {}){}",
                t.percentile,
                t.predicted_ns.map_or("n/a".into(), format_ns),
                format_ns(t.target_ns),
                if t.missed > 0 {
                    format!(", {} missed", t.missed)
                } else {
                    String::new()
                }
            )
        })
        .unwrap_or_default()
}

fn host_table(hosts: &[HostPrediction]) -> String {
    let mut s = format!(
        "{:<10} {:>7} {:>9} {:>8} {:>10} {:>7} {:<26} {:<5} worst predicted\n",
        "host", "tenants", "vCPUs+IO", "mean CPU", "100ms peak", "I/O CPU", "scheduler", "keeps"
    );
    for h in hosts {
        let _ = writeln!(
            s,
            "{:<10} {:>7} {:>9} {:>8.2} {:>10.2} {:>7.2} {:<26} {:<5} {}",
            h.instance,
            h.tenants.len(),
            format!("{}+{}", h.vcpus, h.io_vcpus),
            h.mean_cpu,
            h.peak_100ms_cpu,
            h.io_cpu,
            h.scheduler.to_string(),
            if h.meets { "yes" } else { "NO" },
            worst(h)
        );
    }
    s
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

fn plan_text(r: &PlanReport) -> String {
    let mut s = format!(
        "ontime plan: {} tenants on {} hosts, every host verified by the simulator ({:.1} s)\n",
        r.tenants,
        r.hosts.len(),
        r.elapsed_s
    );
    s += &host_table(&r.hosts);
    for (t, why) in &r.unplaced {
        let _ = writeln!(s, "unplaced: {t}: {why}");
    }
    let m = &r.mean_cpu_packing;
    let _ = writeln!(
        s,
        "\nusual practice ({}): {} hosts on paper; {} of them break a target ({} by document 000's rules, {} in the simulation; {} tenants miss){}",
        m.rule,
        m.hosts,
        m.broken_hosts.len(),
        m.broken_by_rules,
        m.broken_in_simulation,
        m.tenants_missing,
        if m.broken_hosts.is_empty() {
            String::new()
        } else {
            format!(": {}", m.broken_hosts.join(", "))
        }
    );
    match r.hosts_needed_without_limit {
        Some(n) => {
            let _ = writeln!(
                s,
                "keeping every target needs {n} hosts ({:+} against the mean-CPU packing); the input allows {}, so {} tenants stay unplaced",
                n as i64 - m.hosts as i64,
                r.hosts.len(),
                r.unplaced.len()
            );
        }
        None => {
            let _ = writeln!(
                s,
                "keeping every target needs {} hosts ({:+} against the mean-CPU packing)",
                r.hosts.len(),
                r.hosts.len() as i64 - m.hosts as i64
            );
        }
    }
    s
}

fn check_text(r: &CheckReport) -> String {
    let mut s = format!(
        "ontime plan check: {} hosts predicted by the simulator\n",
        r.hosts.len()
    );
    s += &host_table(&r.hosts);
    if r.missing.is_empty() {
        s += "every placed tenant keeps its target\n";
    }
    for (t, h, why) in &r.missing {
        let _ = writeln!(s, "misses: {t} on {h}: {why}");
    }
    for t in &r.not_placed {
        let _ = writeln!(s, "not placed: {t}");
    }
    s
}

pub fn run(a: PlanArgs) -> anyhow::Result<()> {
    if let Some(PlanCmd::Check(c)) = a.cmd {
        let input = read(&c.placement)?;
        let r = check(&input, &options(&c.common)?).map_err(|e| usage(format!("{e:#}")))?;
        return c.common.out.emit(&r, &check_text(&r));
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
    let mut text = plan_text(&r);
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
