//! `ontime agent`, `ontime analyse` and `ontime fleet`: the fleet on NATS
//! JetStream (crates/fleet; docs/fleet.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use ontime_fleet::conn::NatsArgs;

use crate::output;
use ontime_core::bad_input;

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The agent's config file (host, window, what to record or replay,
    /// spool, NATS; docs/fleet.md)
    #[arg(short, long, value_name = "FILE")]
    config: PathBuf,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn agent(a: AgentArgs) -> anyhow::Result<()> {
    let c = ontime_fleet::agent::AgentConfig::read(&a.config).map_err(|e| bad_input(format!("{e:#}")))?;
    let targets = match &c.record {
        Some(r) => Some(
            crate::flags::TargetArgs {
                lab: r.lab,
                cgroup: r.cgroups.clone(),
                pid: r.pids.clone(),
                guest: r.guests.clone(),
                // A probe's late wake-ups are explained by whoever else
                // ran: every thread is recorded.
                all: !c.probes.is_empty(),
                host_io: Vec::new(),
            }
            .resolve()?,
        ),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    ontime_core::errln!(
        "ontime agent: host {}, {} windows of {}, to {} (spool {})",
        c.host,
        if c.record.is_some() { "recording" } else { "replaying" },
        c.window,
        c.nats.servers.join(","),
        c.spool.dir.display()
    );
    let s = ontime_fleet::agent::run(&c, stop, targets, Some(Box::new(probe_command)))?;
    let text = format!(
        "ontime agent: {} window(s) published ({} already there), {} dropped, {} left in the spool; {:.3} s CPU, {} MiB max resident",
        s.published,
        s.duplicates,
        s.dropped,
        s.left_in_spool,
        s.cpu_ns as f64 / 1e9,
        s.max_rss_bytes >> 20
    );
    a.out.emit(&s, &text)
}

/// How the agent starts a probe: this binary's `ontime probe SPEC.json`
/// (the lab's way: no command line assembled from the spec).
fn probe_command(probe: &ontime_cyclic::CyclicProbe, spec: &std::path::Path) -> anyhow::Result<std::process::Command> {
    ontime_scenario::probe::ProbeSpec::Cyclic(probe.clone()).write(spec)?;
    let exe = std::env::current_exe().context("where this ontime binary is")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("probe").arg(spec);
    Ok(cmd)
}

#[derive(Args, Debug)]
pub struct AnalyseArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// This worker's name in the results [default: HOSTNAME-PID]
    #[arg(long)]
    name: Option<String>,
    /// How long a window may stay unacknowledged before another worker gets it
    #[arg(long, default_value = "60s", value_parser = ontime_core::duration::parse_ns)]
    ack_wait: u64,
    /// Stop after analysing this many windows
    #[arg(long)]
    max_windows: Option<u64>,
    /// Where windows are put while analysed
    #[arg(long, default_value = "/tmp/ontime-analyse")]
    scratch: PathBuf,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn analyse(a: AnalyseArgs) -> anyhow::Result<()> {
    if !(1_000_000_000..=3_600_000_000_000).contains(&a.ack_wait) {
        return Err(bad_input("--ack-wait: use 1s to 1h"));
    }
    let name = a.name.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_default()
                .trim(),
            std::process::id()
        )
    });
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let o = ontime_fleet::worker::WorkerOptions {
        nats: a.nats.clone(),
        name: name.clone(),
        ack_wait: Duration::from_nanos(a.ack_wait),
        max_windows: a.max_windows,
        scratch: a.scratch.join(&name),
    };
    ontime_core::errln!("ontime analyse: worker {name} on {}", a.nats.servers.join(","));
    let s = ontime_fleet::worker::run(&o, stop)?;
    let text = format!(
        "ontime analyse: {} window(s) analysed ({} redelivered with a result already), {} dead letter(s), {:.3} s busy",
        s.analysed,
        s.duplicate_results,
        s.dead,
        s.busy_ns as f64 / 1e9
    );
    a.out.emit(&s, &text)
}

#[derive(Args, Debug)]
pub struct FleetArgs {
    #[command(subcommand)]
    action: FleetAction,
}

#[derive(Subcommand, Debug)]
enum FleetAction {
    /// Every host's tenants from the results: steal, busiest 100 ms,
    /// contention, anomalies, pprof links; HTML with -o, else text or --json
    Report(FleetReportArgs),
    /// The same table, again every --interval until Ctrl-C
    Top(FleetTopArgs),
}

#[derive(Args, Debug)]
struct FleetReportArgs {
    #[command(flatten)]
    nats: NatsArgs,
    /// Write the HTML report here (each host's latest pprof beside it)
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    out: output::OutputFlags,
}

#[derive(Args, Debug)]
struct FleetTopArgs {
    #[command(flatten)]
    nats: NatsArgs,
    #[arg(long, default_value = "5s", value_parser = ontime_core::duration::parse_ns)]
    interval: u64,
}

pub fn fleet(a: FleetArgs) -> anyhow::Result<()> {
    match a.action {
        FleetAction::Report(r) => {
            let dir = r.output.as_deref().map(|o| {
                o.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(std::path::Path::new("."))
            });
            let (v, pprofs) = ontime_fleet::report::load(&r.nats, dir)?;
            if let Some(out) = &r.output {
                ontime_core::fsio::write_atomic(out, ontime_fleet::report::html(&v, &pprofs).as_bytes())?;
                ontime_core::errln!("ontime fleet report: {} host(s) -> {}", v.hosts.len(), out.display());
            }
            r.out.emit(&v, &ontime_fleet::report::text(&v))
        }
        FleetAction::Top(t) => {
            if !(500_000_000..=3_600_000_000_000).contains(&t.interval) {
                return Err(bad_input("--interval: use 500ms to 1h"));
            }
            let stop = Arc::new(AtomicBool::new(false));
            crate::signals::install_flag(stop.clone())?;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (v, _) = ontime_fleet::report::load(&t.nats, None)?;
                crate::out!("\x1b[2J\x1b[H{}{}", freshness(&v), ontime_fleet::report::text(&v));
                let until = std::time::Instant::now() + Duration::from_nanos(t.interval);
                while std::time::Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            Ok(())
        }
    }
}

/// How old each host's newest result is: a host whose agent or workers
/// stopped shows as falling behind, which a table of figures alone hides.
fn freshness(v: &ontime_fleet::report::FleetView) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let ages: Vec<String> = v
        .hosts
        .iter()
        .map(|h| {
            format!(
                "{} {:.0} s ago",
                h.host,
                now.saturating_sub(h.last_end_realtime_ns) as f64 / 1e9
            )
        })
        .collect();
    if ages.is_empty() {
        return String::new();
    }
    format!("newest window: {}\n", ages.join(", "))
}
