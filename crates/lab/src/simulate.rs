//! A scenario run in the simulator (`ontime sim`, issue 12): the same
//! scenario file as `lab run`, each run's crawler tenants as simulated
//! threads on the host's CPUs (the tenant's cpuset, else all), under the
//! model of the tenants' policy (CFS for `other`, FIFO, RR with
//! `host.rr_timeslice` or Linux's 100 ms, EDF for `deadline`) or a model
//! named on the command line (Xen credit, credit2, RTDS).
//!
//! With `io_cost_ns` the host I/O path is one more thread (the last) that
//! forwards every request and answer. What it does not model yet: host
//! noise, connection pools and timeouts, cyclic tenants.

use crate::scenario::{Backend, Plan, PlannedRun};
use anyhow::{bail, Result};
use ontime_core::rt::{parse_cpu_list, Policy};
use ontime_core::stats::Summary;
use ontime_sim::crawl::{CrawlTenant, CrawlWorkload, HostIo};
use ontime_sim::engine::run;
use ontime_sim::sched::{Cfs, Credit, Credit2, Edf, FixedPriority, RoundRobin, Rtds, Scheduler};
use serde::Serialize;

/// A scheduler model chosen on the command line instead of the policy's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Model {
    Cfs,
    Fifo,
    Rr {
        slice_ns: u64,
    },
    Edf,
    /// Xen credit with its time slice (30 ms by default).
    Credit {
        tslice_ns: u64,
    },
    Credit2,
    /// Every vCPU with this budget per period.
    Rtds {
        budget_ns: u64,
        period_ns: u64,
    },
}

#[derive(Clone, Debug)]
pub struct SimOptions {
    /// CPUs of the simulated host when a tenant has no cpuset.
    pub cpus: usize,
    pub model: Option<Model>,
    pub seed: u64,
    /// CPU per request sent (the crawler's own work besides the answer's).
    pub send_cost_ns: u64,
    /// The host I/O path as a thread with this CPU cost per packet (None:
    /// a constant one-way delay only).
    pub io_cost_ns: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct SimTenant {
    pub polls: u64,
    pub interval_error: Summary,
    pub send_lag: Summary,
}

#[derive(Debug, Serialize)]
pub struct SimRun {
    pub name: String,
    pub vars: Vec<(String, String)>,
    pub model: String,
    pub cpus: usize,
    pub simulated: bool,
    pub tenants: Vec<SimTenant>,
    /// CPU busy over the run, CPUs.
    pub busy_cpus: f64,
}

/// Simulates every run of `plan`.
pub fn simulate_plan(plan: &Plan, opts: &SimOptions) -> Result<Vec<SimRun>> {
    plan.runs.iter().map(|r| simulate_run(r, opts)).collect()
}

fn simulate_run(run_: &PlannedRun, opts: &SimOptions) -> Result<SimRun> {
    let c = &run_.config;
    let t = &c.tenant;
    let Some(cr) = &t.crawl else {
        bail!(
            "{}: the simulator models crawler tenants only so far (this run is cyclic)",
            run_.dir_name()
        );
    };
    let cpus = match (&t.cpuset, t.backend) {
        (Some(s), Backend::Sandbox) => parse_cpu_list(s).map_err(anyhow::Error::msg)?.len().max(1),
        _ => opts.cpus.max(1),
    };
    let vcpus = if t.backend == Backend::Native { cpus } else { t.vcpus };
    let tenant = CrawlTenant {
        vcpus,
        rate: cr.rate,
        period_ns: cr.period,
        work: cr.work_model(),
        send_cost_ns: opts.send_cost_ns,
        one_way_ns: c.host.relay_delay,
    };
    let io = opts.io_cost_ns.map(|c| HostIo { cost_per_packet_ns: c });
    let threads = t.count * vcpus + usize::from(io.is_some());
    // Every tenant's threads share one policy, so FIFO and RR priorities
    // are equal among them: order within a level is arrival order.
    let model = opts.model.unwrap_or(match t.policy {
        Policy::Other => Model::Cfs,
        Policy::Fifo { .. } => Model::Fifo,
        Policy::Rr { .. } => Model::Rr {
            slice_ns: c.host.rr_timeslice.unwrap_or(100_000_000),
        },
        Policy::Deadline { .. } => Model::Edf,
    });
    let mut sched: Box<dyn Scheduler> = match model {
        Model::Cfs => Box::new(Cfs::new(vec![1024; threads])),
        Model::Fifo => Box::new(FixedPriority),
        Model::Rr { slice_ns } => Box::new(RoundRobin { slice_ns }),
        Model::Edf => Box::new(Edf),
        Model::Credit { tslice_ns } => Box::new(Credit::new(vec![256; threads], cpus, tslice_ns)),
        Model::Credit2 => Box::new(Credit2::new(vec![256; threads])),
        Model::Rtds { budget_ns, period_ns } => Box::new(Rtds::new(vec![(budget_ns, period_ns); threads])),
    };
    let mut w = CrawlWorkload::new(vec![tenant; t.count], io, c.duration, opts.seed ^ run_.index as u64);
    // Let the last polls' answers finish.
    let o = run(&mut w, cpus, sched.as_mut(), c.duration + cr.period);
    Ok(SimRun {
        name: run_.dir_name(),
        vars: run_.vars.clone(),
        model: sched.name().into(),
        cpus,
        simulated: true,
        tenants: w
            .measures
            .iter()
            .map(|m| SimTenant {
                polls: m.polls,
                interval_error: m.interval_error.summary(None),
                send_lag: m.send_lag.summary(None),
            })
            .collect(),
        busy_cpus: o.busy_ns as f64 / (c.duration + cr.period).max(1) as f64,
    })
}
