//! `ontime probe SPEC.json` (hidden): runs the probe a typed spec
//! describes. The lab writes one per tenant (and for its gateway and
//! flows) instead of assembling a command line; each verb's own flags build
//! the same types, so both run one code path.

use crate::output::OutputFlags;
use clap::Args;
use ontime_core::bad_input;
use ontime_scenario::probe::ProbeSpec;
use std::path::PathBuf;

#[derive(Args)]
pub struct ProbeArgs {
    /// A probe spec (JSON) as the lab writes it (`t0.probe.json`)
    spec: PathBuf,
}

pub fn run(a: ProbeArgs) -> anyhow::Result<()> {
    let spec = ProbeSpec::read(&a.spec).map_err(|e| bad_input(format!("{e:#}")))?;
    let out = OutputFlags::default();
    match spec {
        ProbeSpec::Crawl(p) => crate::cmd_crawl::execute(p, None, &out, Some(&a.spec), &Default::default()),
        ProbeSpec::Cyclic(p) => crate::cmd_cyclic::execute(p, &out, &Default::default()),
        ProbeSpec::Gateway(p) => crate::cmd_gateway::execute(p),
        ProbeSpec::IoWorkload(p) => crate::cmd_io::execute_workload(p, &out),
        ProbeSpec::FlowSend(p) => crate::cmd_net::execute_send(p),
        ProbeSpec::FlowReceive(p) => crate::cmd_net::execute_receive(p),
        ProbeSpec::ClockEcho(p) => crate::cmd_net::execute_clock_echo(p),
        ProbeSpec::ClockSync(p) => crate::cmd_net::execute_clock_sync(p),
        ProbeSpec::CpuBurst(p) => cpu_bursts(p),
        ProbeSpec::SoftirqFlood(p) => softirq_flood(p),
        ProbeSpec::Wire(p) => crate::cmd_wire::execute(p),
    }
}

/// An injected flood: floods until SIGTERM or its time is up, then its
/// windows into the result, on the tenant's CPU where its receipt ran.
fn softirq_flood(p: ontime_scenario::probe::SoftirqFloodProbe) -> anyhow::Result<()> {
    use ontime_explain::truth::{InjectedClass, Injections};
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    ontime_core::rt::set_thread_name("ontime-flood");
    let f = ontime_net::flood::flood(&p.flood, &stop)?;
    ontime_core::errln!(
        "ontime-flood: {} frames in {} windows ({} refused)",
        f.frames,
        f.windows.len(),
        f.refused
    );
    Injections::of_windows(
        InjectedClass::SoftirqFlood,
        &f.windows,
        std::process::id(),
        u16::try_from(p.tenant_cpu).ok(),
    )
    .write(&p.result)
}

/// An injected cause: bursts until SIGTERM or their time is up, then
/// their actual windows (the ground truth) into the result.
fn cpu_bursts(p: ontime_scenario::probe::CpuBurstProbe) -> anyhow::Result<()> {
    use ontime_explain::truth::{InjectedClass, Injections};
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Before the pinning and the priority: the signal thread stays free.
    crate::signals::install_flag(stop.clone())?;
    // The process's name, as the attribution names the culprit.
    ontime_core::rt::set_thread_name("ontime-burst");
    let windows = ontime_load::inject::cpu_bursts(&p.bursts, &stop)?;
    let class = if p.bursts.fair_companion {
        InjectedClass::RtThrottle
    } else if p.guest.is_some() {
        InjectedClass::CpuBurstInGuest
    } else {
        InjectedClass::CpuBurst
    };
    Injections::of_windows(class, &windows, std::process::id(), u16::try_from(p.bursts.cpu).ok())
        .in_guest(p.guest)
        .write(&p.result)
}
