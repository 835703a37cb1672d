//! `ontime sim SCENARIO`: a lab scenario run in the simulator.

use crate::usage;
use clap::Args;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_lab::simulate::{simulate_plan, Model, SimOptions};
use std::path::PathBuf;

#[derive(Args)]
pub struct SimArgs {
    /// A lab scenario file (crawler tenants; see docs/scenarios.md)
    scenario: PathBuf,
    /// CPUs of the simulated host (a tenant's cpuset, when it has one, wins)
    /// [default: this host's]
    #[arg(long)]
    cpus: Option<usize>,
    /// Scheduler model instead of the tenants' policy: cfs, fifo, rr, edf,
    /// credit (Xen, --tslice), credit2, rtds (--budget/--period)
    #[arg(long)]
    model: Option<String>,
    /// Time slice of rr and credit [default: 100ms for rr, 30ms for credit]
    #[arg(long, value_parser = parse_ns)]
    tslice: Option<u64>,
    /// RTDS budget per vCPU and period [default: 4ms]
    #[arg(long, value_parser = parse_ns)]
    budget: Option<u64>,
    /// RTDS period of every vCPU's budget [default: 10ms]
    #[arg(long, value_parser = parse_ns)]
    period: Option<u64>,
    /// Model the host I/O path as a thread forwarding every request and
    /// answer at this CPU cost per packet, e.g. 50us (default: a constant
    /// WAN delay only)
    #[arg(long, value_parser = parse_ns)]
    io_cost: Option<u64>,
    /// Seed of the simulated work draws
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

fn model(a: &SimArgs) -> anyhow::Result<Option<Model>> {
    let Some(m) = a.model.as_deref() else { return Ok(None) };
    Ok(Some(match m {
        "cfs" => Model::Cfs,
        "fifo" => Model::Fifo,
        "rr" => Model::Rr {
            slice_ns: a.tslice.unwrap_or(100_000_000),
        },
        "edf" => Model::Edf,
        "credit" => Model::Credit {
            tslice_ns: a.tslice.unwrap_or(30_000_000),
        },
        "credit2" => Model::Credit2,
        "rtds" => Model::Rtds {
            budget_ns: a.budget.unwrap_or(4_000_000),
            period_ns: a.period.unwrap_or(10_000_000),
        },
        other => {
            return Err(usage(format!(
                "--model {other}: use cfs, fifo, rr, edf, credit, credit2 or rtds"
            )))
        }
    }))
}

pub fn run(a: SimArgs) -> anyhow::Result<()> {
    let plan = ontime_lab::scenario::load(&a.scenario).map_err(|e| usage(format!("{e:#}")))?;
    if a.tslice.is_some_and(|t| t == 0) || a.period.is_some_and(|p| p == 0) || a.cpus == Some(0) {
        return Err(usage("--tslice, --period and --cpus must be above 0"));
    }
    crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    let opts = SimOptions {
        cpus: a.cpus.unwrap_or_else(ontime_core::limits::online_cpus),
        model: model(&a)?,
        seed: a.seed,
        send_cost_ns: 10_000,
        io_cost_ns: a.io_cost,
    };
    let runs = simulate_plan(&plan, &opts).map_err(|e| usage(format!("{e:#}")))?;
    let mut text = format!(
        "ontime sim: scenario '{}', {} run(s), simulated (not measured)\n{:<56} {:>8} {:>4} {:>6} {:>10} {:>10} {:>10} {:>10}\n",
        plan.name,
        runs.len(),
        "run",
        "model",
        "CPUs",
        "busy",
        "p99",
        "p99.9",
        "p99.999",
        "max"
    );
    let f = |v: Option<u64>| v.map_or("n/a".into(), format_ns);
    for r in &runs {
        let worst = |p: f64| r.tenants.iter().filter_map(|t| t.interval_error.percentile(p)).max();
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!(
                "{:<56} {:>8} {:>4} {:>6.2} {:>10} {:>10} {:>10} {:>10}\n",
                r.name,
                r.model,
                r.cpus,
                r.busy_cpus,
                f(worst(99.0)),
                f(worst(99.9)),
                f(worst(99.999)),
                f(r.tenants.iter().filter_map(|t| t.interval_error.max_ns).max())
            ),
        );
    }
    text.push_str("interval error of the worst tenant per run; percentiles the sample count cannot support are n/a\n");
    a.out.emit(&runs, &text)
}
