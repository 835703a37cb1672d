//! `ontime cyclic`: periodic wake-up probe with cyclictest's flags where they
//! mean the same (-t -a -i -d -p -m -l -D -h), optional stress-ng load.

use crate::output;
use crate::usage;
use clap::{ArgAction, Args};
use ontime_core::caps::Capabilities;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_core::limits;
use ontime_core::manifest::Manifest;
use ontime_core::rt::{CpuList, Policy};
use ontime_cyclic::CyclicOptions;
use ontime_load::{LoadGuard, LoadProfile};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A duration where a bare number means microseconds, as in cyclictest.
fn parse_us_or_duration(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(us) => us.checked_mul(1000).ok_or_else(|| format!("'{s}' us is too long")),
        Err(_) => parse_ns(s),
    }
}

#[derive(Args)]
#[command(disable_help_flag = true)]
pub struct CyclicArgs {
    /// Print help
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,
    /// Number of probe threads
    #[arg(short = 't', long, default_value_t = 1)]
    threads: usize,
    /// One thread per online CPU, each pinned to its CPU (overrides -t and -a)
    #[arg(short = 'S', long)]
    smp: bool,
    /// CPUs to pin threads to, round-robin (e.g. 0 or 0-1)
    #[arg(short = 'a', long)]
    affinity: Option<CpuList>,
    /// Wake-up interval (bare number = microseconds, as cyclictest)
    #[arg(short = 'i', long, default_value = "1000", value_parser = parse_us_or_duration)]
    interval: u64,
    /// Interval added per further thread (bare number = microseconds)
    #[arg(short = 'd', long, default_value = "0", value_parser = parse_us_or_duration)]
    distance: u64,
    /// Policy: other, fifo, rr (with -p), fifo:PRIO, or deadline:RUNTIME/PERIOD[/DEADLINE]
    #[arg(long)]
    policy: Option<String>,
    /// Real-time priority; alone it means SCHED_FIFO at this priority
    #[arg(short = 'p', long)]
    priority: Option<u8>,
    /// Lock all memory (mlockall)
    #[arg(short = 'm', long)]
    mlockall: bool,
    /// Number of wake-ups per thread
    #[arg(short = 'l', long)]
    loops: Option<u64>,
    /// Length of the run, e.g. 60s
    #[arg(short = 'D', long, value_parser = parse_ns)]
    duration: Option<u64>,
    /// Print a histogram with this many 1-us bins in cyclictest's -h layout
    #[arg(short = 'h', long, default_value_t = 0)]
    histogram: usize,
    /// Write the histogram there instead of stdout
    #[arg(long, requires = "histogram")]
    histfile: Option<PathBuf>,
    /// Also write the histogram of wake-ups that happened only (overrun
    /// periods left out, as cyclictest counts) to this file
    #[arg(long, requires = "histogram")]
    histfile_woken: Option<PathBuf>,
    /// Load during the run, by stress-ng: kernel, io, net, mixed or cpu
    #[arg(long)]
    load: Option<LoadProfile>,
    /// stress-ng workers per stressor of the load
    #[arg(long, default_value_t = 1)]
    load_workers: usize,
    #[command(flatten)]
    out: output::OutputFlags,
    #[command(flatten)]
    probe: output::ProbeFlags,
}

fn resolve_policy(policy: Option<&str>, prio: Option<u8>) -> anyhow::Result<Policy> {
    let p = match (policy, prio) {
        (None, None) => Policy::Other,
        (None, Some(p)) => format!("fifo:{p}").parse().map_err(usage)?,
        (Some(name @ ("fifo" | "rr")), Some(p)) => format!("{name}:{p}").parse().map_err(usage)?,
        (Some(spec), None) => spec.parse().map_err(usage)?,
        (Some(spec), Some(_)) => {
            return Err(usage(format!("-p goes with --policy fifo or rr, not '{spec}'")));
        }
    };
    Ok(p)
}

pub fn run(a: CyclicArgs) -> anyhow::Result<()> {
    let policy = resolve_policy(a.policy.as_deref(), a.priority)?;
    if a.loops.is_none() && a.duration.is_none() {
        return Err(usage("give a duration (-D 60s) or a loop count (-l 100000)"));
    }
    limits::count("-t", a.threads as u64, 1, limits::MAX_THREADS).map_err(usage)?;
    output::check_outputs(&[
        ("--result", a.out.result.as_deref()),
        ("--histfile", a.histfile.as_deref()),
        ("--histfile-woken", a.histfile_woken.as_deref()),
        ("--hlog", a.probe.hlog.as_deref()),
    ])?;
    a.probe.check()?;
    limits::duration("-i", a.interval, limits::MIN_INTERVAL_NS, limits::MAX_DURATION_NS).map_err(usage)?;
    limits::duration("-d", a.distance, 0, limits::MAX_DURATION_NS).map_err(usage)?;
    limits::count("-h", a.histogram as u64, 0, limits::MAX_HISTOGRAM_BINS).map_err(usage)?;
    if let Some(l) = a.loops {
        limits::count("-l", l, 1, limits::MAX_DURATION_NS / limits::MIN_INTERVAL_NS).map_err(usage)?;
    }
    if let Some(d) = a.duration {
        limits::duration("-D", d, limits::MIN_DURATION_NS, limits::MAX_DURATION_NS).map_err(usage)?;
    }
    let online = ontime_core::limits::online_cpus();
    let (threads, affinity) = if a.smp {
        (online, (0..online).collect())
    } else {
        (a.threads, a.affinity.clone().map(|c| c.0).unwrap_or_default())
    };
    if let Some(bad) = affinity.iter().find(|&&c| c >= online) {
        return Err(usage(format!("CPU {bad} is not online (this host has {online})")));
    }
    let opts = CyclicOptions {
        threads,
        affinity,
        interval_ns: a.interval,
        distance_ns: a.distance,
        policy,
        mlockall: a.mlockall,
        loops: a.loops,
        duration_ns: a.duration,
        histogram_us: a.histogram,
        threshold_ns: a.probe.threshold,
        dma_latency: !a.probe.no_dma_latency,
        load: a.load.map(|l| l.to_string()),
        hlog: a.probe.hlog.clone(),
        hlog_interval_ns: a.probe.hlog_interval,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let expected_ns = a.duration.unwrap_or_else(|| {
        a.loops
            .unwrap_or(0)
            .saturating_mul(a.interval + a.distance * threads as u64)
    });
    let _load = match a.load {
        Some(profile) => {
            let g = LoadGuard::start(
                profile,
                a.load_workers,
                Duration::from_nanos(expected_ns) + Duration::from_secs(30),
            )?;
            if !a.out.json {
                ontime_core::errln!(
                    "ontime cyclic: load '{profile}' running (stress-ng pid {})",
                    g.pid().unwrap_or(0)
                );
            }
            // Let the load reach steady state before measuring.
            std::thread::sleep(Duration::from_millis(500));
            Some(g)
        }
        None => None,
    };
    let manifest = Manifest::start("native", Capabilities::probe());
    let pb = output::progress_bar(expected_ns.div_ceil(1_000_000_000));
    let t0 = std::time::Instant::now();
    let result = ontime_cyclic::run(opts, stop.clone(), manifest, &mut |lives| {
        let cycles: u64 = lives.iter().map(|l| l.cycles.load(Ordering::Relaxed)).sum();
        let max = lives
            .iter()
            .map(|l| l.max_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let over: u64 = lives.iter().map(|l| l.overruns.load(Ordering::Relaxed)).sum();
        pb.set_position(t0.elapsed().as_secs());
        pb.set_message(format!("wake-ups {cycles} max {} overruns {over}", format_ns(max)));
    });
    pb.finish_and_clear();
    drop(_load);
    let result = result?;
    let mut text = ontime_core::export::TextReport::text(&result);
    if let Some(p) = &a.histfile_woken {
        ontime_core::fsio::write_atomic(p, result.cyclictest_histogram_woken().as_bytes())?;
    }
    if a.histogram > 0 {
        let hist = result.cyclictest_histogram();
        match &a.histfile {
            Some(p) => ontime_core::fsio::write_atomic(p, hist.as_bytes())?,
            None if !a.out.json => text = format!("{hist}{text}"),
            None => {}
        }
    }
    a.out.emit(&result, &text)?;
    if stop.load(Ordering::Relaxed) {
        ontime_core::errln!("ontime cyclic: interrupted; results cover the run so far");
    }
    Ok(())
}
