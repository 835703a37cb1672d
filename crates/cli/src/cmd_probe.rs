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
    }
}
