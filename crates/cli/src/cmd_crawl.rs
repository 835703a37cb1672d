//! `ontime crawl`: poll gateways on a fixed period and report send lag,
//! response time, interval error and missed polls.

use crate::output;
use crate::usage;
use anyhow::Context;
use clap::Args;
use ontime_core::caps::Capabilities;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_core::limits;
use ontime_core::manifest::Manifest;
use ontime_core::proc::{ChildProcess, SpawnOptions};
use ontime_core::rt::{CpuList, Policy, ThreadSettings};
use ontime_crawl::config::{CrawlConfig, CrawlFile, GatewaySpec, Phase};
use ontime_crawl::engine::StopFlags;
use ontime_crawl::RunOptions;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct CrawlArgs {
    /// Crawl config (TOML: [[gateway]] url/points, period, points_per_request, phase)
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Gateway URL http://HOST:PORT/BUILDING (repeatable); required unless --config
    #[arg(long)]
    url: Vec<String>,
    /// Points per gateway (ids 0..points) [default: 1000, or from --rate]
    #[arg(long, conflicts_with = "rate")]
    points: Option<u32>,
    /// Polls per second over all --url gateways; sets --points from N and the period
    #[arg(long)]
    rate: Option<f64>,
    /// Points per request (N)
    #[arg(short = 'N', long = "points-per-request")]
    points_per_request: Option<usize>,
    /// Period of every point
    #[arg(long, value_parser = parse_ns)]
    period: Option<u64>,
    /// Phase layout of the polls within a period
    #[arg(long, value_enum)]
    phase: Option<PhaseArg>,
    /// A poll is missed when no answer came this long after its planned time [default: the period]
    #[arg(long, value_parser = parse_ns)]
    timeout: Option<u64>,
    /// Connections per gateway and vCPU thread, at most
    #[arg(long)]
    max_connections: Option<usize>,
    /// Length of the run
    #[arg(short = 'D', long, default_value = "10s", value_parser = parse_ns)]
    duration: u64,
    /// Threads that do all the crawl's work (stands in for a k-vCPU guest)
    #[arg(long, default_value_t = 1)]
    vcpus: usize,
    /// Scheduling policy of the vCPU threads: other, fifo:PRIO, rr:PRIO, deadline:RUNTIME/PERIOD
    #[arg(long, default_value = "other")]
    policy: Policy,
    /// CPUs the vCPU threads may run on, e.g. 0 or 0-1
    #[arg(short = 'a', long)]
    affinity: Option<CpuList>,
    /// Lock all memory (mlockall)
    #[arg(short = 'm', long)]
    mlockall: bool,
    /// Timer slack of the vCPU threads in ns
    #[arg(long, default_value_t = 1)]
    timer_slack: u64,
    #[command(flatten)]
    out: output::OutputFlags,
    #[command(flatten)]
    probe: output::ProbeFlags,
    /// Write one CSV line per poll (planned, sent, gateway receive, done, outcome)
    #[arg(long)]
    polls: Option<PathBuf>,
    /// Store every value read into this SQLite database, off the timing path
    #[arg(long)]
    store: Option<PathBuf>,
    /// CPU time the crawler spends processing each answered poll (parsing,
    /// conversion, storage), burned on the vCPU thread; models a heavier
    /// crawler (document 000's filled a vCPU at ~700 polls/s: about 1.4ms)
    #[arg(long, default_value = "0ns", value_parser = parse_ns)]
    work_per_poll: u64,
    /// Make the per-poll work heavy-tailed: Pareto with this shape and the
    /// --work-per-poll mean (1.05..100; 1.5 bursts as document 000's crawler
    /// did: ~6 % of 100 ms windows above 10/7 of the mean, 200 % at 140 %)
    #[arg(long)]
    work_tail: Option<f64>,
    /// Count a poll whose connection the server closed before answering as
    /// lost at once, instead of sending it once more on a new connection
    /// (the default, as HTTP clients do for reused connections; such polls
    /// are counted as resent)
    #[arg(long)]
    no_resend: bool,
    /// Start a matching local gateway for the run and stop it afterwards
    #[arg(long)]
    with_gateway: bool,
    /// With --with-gateway: the gateway's receive log
    #[arg(long, requires = "with_gateway")]
    gateway_log: Option<PathBuf>,
    /// With --with-gateway: the gateway's fixed controller delay
    #[arg(long, requires = "with_gateway", value_parser = parse_ns)]
    gateway_delay: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PhaseArg {
    Spread,
    Aligned,
}

fn build_config(a: &CrawlArgs) -> anyhow::Result<CrawlConfig> {
    let mut file = match &a.config {
        Some(p) => {
            if !a.url.is_empty() {
                return Err(usage("give either --config or --url, not both"));
            }
            CrawlFile::from_file(p).map_err(|e| usage(format!("{e:#}")))?
        }
        None => {
            if a.url.is_empty() {
                return Err(usage(
                    "no gateway to poll: give --url http://HOST:PORT/BUILDING (repeatable) or --config FILE",
                ));
            }
            let urls = a.url.clone();
            let n = a.points_per_request.unwrap_or(ontime_crawl::config::DEFAULT_N);
            let period = a.period.unwrap_or(ontime_crawl::config::DEFAULT_PERIOD_NS);
            let points = match (a.points, a.rate) {
                (Some(p), _) => p,
                (None, Some(r)) => {
                    limits::rate("--rate", r, limits::MAX_POLLS_PER_SECOND).map_err(usage)?;
                    let per_gw = r / urls.len() as f64 * n as f64 * period as f64 / 1e9;
                    per_gw.round().max(1.0) as u32
                }
                (None, None) => 1000,
            };
            CrawlFile {
                period: None,
                points_per_request: None,
                phase: None,
                timeout: None,
                max_connections: None,
                gateways: urls
                    .into_iter()
                    .map(|url| GatewaySpec {
                        url,
                        points: Some(points),
                        point_ids: None,
                        period: None,
                    })
                    .collect(),
            }
        }
    };
    // Flags override the file.
    if a.points_per_request.is_some() {
        file.points_per_request = a.points_per_request;
    }
    if a.period.is_some() {
        file.period = a.period;
        for g in &mut file.gateways {
            g.period = None;
        }
    }
    if let Some(p) = a.phase {
        file.phase = Some(match p {
            PhaseArg::Spread => Phase::Spread,
            PhaseArg::Aligned => Phase::Aligned,
        });
    }
    if a.timeout.is_some() {
        file.timeout = a.timeout;
    }
    if a.max_connections.is_some() {
        file.max_connections = a.max_connections;
    }
    let where_ = a
        .config
        .as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default();
    CrawlConfig::resolve(file).map_err(|e| usage(format!("{where_}{e:#}")))
}

pub fn run(a: CrawlArgs) -> anyhow::Result<()> {
    let cfg = build_config(&a)?;
    limits::count("--vcpus", a.vcpus as u64, 1, limits::MAX_THREADS).map_err(usage)?;
    output::check_outputs(&[
        ("--result", a.out.result.as_deref()),
        ("--hlog", a.probe.hlog.as_deref()),
        ("--polls", a.polls.as_deref()),
        ("--store", a.store.as_deref()),
        ("--gateway-log", a.gateway_log.as_deref()),
    ])?;
    limits::duration(
        "--duration",
        a.duration,
        limits::MIN_DURATION_NS,
        limits::MAX_DURATION_NS,
    )
    .map_err(usage)?;
    let online = ontime_core::limits::online_cpus();
    if let Some(bad) = a.affinity.iter().flat_map(|c| c.0.iter()).find(|&&c| c >= online) {
        return Err(usage(format!("-a: CPU {bad} is not online (this host has {online})")));
    }
    a.probe.check()?;
    let gateway = if a.with_gateway {
        Some(LocalGateway::start(&cfg, &a)?)
    } else {
        None
    };
    let caps = Capabilities::probe();
    let mut manifest = Manifest::start("native", caps);
    // Deep idle states add wake-up latency; hold them off as cyclictest does.
    let _dma = if a.probe.no_dma_latency {
        None
    } else {
        match ontime_core::rt::DmaLatencyGuard::hold(0) {
            Ok(g) => Some(g),
            Err(e) => {
                manifest.capabilities.missing.push(format!("{e:#}"));
                None
            }
        }
    };
    let flags = Arc::new(StopFlags::default());
    {
        let (f1, f2) = (flags.clone(), flags.clone());
        crate::signals::install(
            move || f1.request_stop(),
            move || f2.abort.store(true, Ordering::Relaxed),
        )?;
    }
    let opts = RunOptions {
        vcpus: a.vcpus,
        duration_ns: a.duration,
        thread: ThreadSettings {
            policy: a.policy,
            affinity: a.affinity.clone().map(|c| c.0).unwrap_or_default(),
            timer_slack_ns: Some(a.timer_slack),
        },
        mlockall: a.mlockall,
        threshold_ns: a.probe.threshold,
        report_interval_ns: a.probe.hlog_interval,
        work: work_model(a.work_per_poll, a.work_tail)?,
        resend: !a.no_resend,
        hlog: a.probe.hlog.clone(),
        polls_file: a.polls.clone(),
        store: a.store.clone(),
    };
    if !a.out.json {
        ontime_core::errln!(
            "ontime crawl: {:.0} polls/s to {} gateway(s) for {} on {} vCPU thread(s)",
            cfg.polls_per_second(),
            cfg.gateways.len(),
            format_ns(a.duration),
            a.vcpus
        );
    }
    let pb = output::progress_bar(a.duration.div_ceil(1_000_000_000));
    let result = ontime_crawl::run(cfg, opts, flags, manifest, &mut |p| {
        pb.set_position(p.elapsed_ns / 1_000_000_000);
        pb.set_message(format!(
            "polls {} missed {} | max send lag {} interval error {}",
            p.outcomes.planned,
            p.outcomes.missed(),
            format_ns(p.send_lag_max_ns),
            format_ns(p.interval_error_max_ns)
        ));
    });
    pb.finish_and_clear();
    let result = result?;
    a.out.emit_report(&result)?;
    // The gateway's receive log is a measurement too: if it could not be
    // stored, the run failed, loudly and naming the file.
    match gateway {
        Some(g) => g.finish(),
        None => Ok(()),
    }
}

/// A gateway child process serving what the crawl will poll; stopped (and
/// its receive log flushed) when dropped.
struct LocalGateway {
    child: ChildProcess,
    _config: tempfile::NamedTempFile,
}

impl LocalGateway {
    fn start(cfg: &CrawlConfig, a: &CrawlArgs) -> anyhow::Result<LocalGateway> {
        let mut toml_text = String::new();
        let first = cfg.gateways[0].addr;
        toml_text.push_str(&format!("listen = \"{first}\"\n"));
        if let Some(d) = a.gateway_delay {
            toml_text.push_str(&format!("[faults]\ndelay = \"{d}ns\"\n"));
        }
        let mut seen = std::collections::HashSet::new();
        for g in &cfg.gateways {
            if !g.addr.ip().is_loopback() {
                return Err(usage(format!(
                    "--with-gateway serves loopback addresses only, not {}",
                    g.addr
                )));
            }
            if !seen.insert((g.addr, g.building.clone())) {
                continue;
            }
            let points = g.point_ids.iter().max().copied().unwrap_or(0) + 1;
            toml_text.push_str(&format!(
                "[[building]]\nname = \"{}\"\npoints = {}\nlisten = \"{}\"\n",
                g.building, points, g.addr
            ));
        }
        let mut file = tempfile::Builder::new()
            .prefix("ontime-gateway-")
            .suffix(".toml")
            .tempfile()?;
        use std::io::Write;
        file.write_all(toml_text.as_bytes())?;
        let exe = std::env::current_exe().context("cannot find the ontime binary")?;
        let mut cmd = Command::new(exe);
        cmd.arg("gateway").arg("--config").arg(file.path());
        if let Some(l) = &a.gateway_log {
            cmd.arg("--log").arg(l);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = ChildProcess::spawn(
            "the local gateway",
            &mut cmd,
            SpawnOptions {
                death_signal: libc::SIGTERM,
                ..Default::default()
            },
        )?;
        let addrs: Vec<_> = seen.iter().map(|(a, _)| *a).collect();
        child.wait_until(Duration::from_secs(5), || {
            addrs
                .iter()
                .all(|a| std::net::TcpStream::connect_timeout(a, Duration::from_millis(100)).is_ok())
        })?;
        Ok(LocalGateway { child, _config: file })
    }
}

impl LocalGateway {
    /// Stops the gateway and reports its failure (e.g. a receive log that
    /// hit a full disk) as the crawl's.
    fn finish(mut self) -> anyhow::Result<()> {
        match self.child.stop() {
            Some(s) if !s.success() => {
                let mut err = String::new();
                if let Some(mut e) = self.child.child_mut().and_then(|c| c.stderr.take()) {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                let err = err.trim().trim_start_matches("ontime: error: ");
                anyhow::bail!("the local gateway failed ({s}): {err}")
            }
            _ => Ok(()),
        }
    }
}

/// The per-poll work from its flags; a bad shape is a usage error.
fn work_model(mean_ns: u64, tail: Option<f64>) -> anyhow::Result<ontime_crawl::work::WorkModel> {
    let m = ontime_crawl::work::WorkModel { mean_ns, tail };
    m.validate().map_err(|e| {
        crate::usage(format!(
            "--work-tail: {e} (with --work-per-poll {})",
            format_ns(mean_ns)
        ))
    })?;
    Ok(m)
}
