//! `ontime crawl`: poll gateways on a fixed period and report send lag,
//! response time, interval error and missed polls.

use crate::flags::DurationFlag;
use crate::output;
use anyhow::Context;
use clap::Args;
use ontime_core::bad_input;
use ontime_core::caps::Capabilities;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_core::manifest::Manifest;
use ontime_core::proc::{ChildProcess, SpawnOptions};
use ontime_core::rt::{CpuList, Policy, ThreadSettings};
use ontime_crawl::config::{CrawlConfig, CrawlFile, Phase};
use ontime_crawl::engine::StopFlags;
use ontime_crawl::CrawlProbe;
use ontime_crawl::RunOptions;
use ontime_gateway::config::{Building, Faults, GatewayConfig};
use ontime_scenario::probe::{GatewayProbe, ProbeSpec};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// `-D` when not given: 10 s.
const DURATION_NS: u64 = 10_000_000_000;

#[derive(Args)]
#[command(mut_arg("duration", DurationFlag::help("Length of the run", Some(DURATION_NS))))]
pub struct CrawlArgs {
    /// Crawl config (TOML: [[gateway]] url/points, period, points_per_request, phase)
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Gateway URL http://HOST:PORT/BUILDING (repeatable); required unless --config or --with-gateway
    /// (then a free port of 127.0.0.1, building b0)
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
    #[command(flatten)]
    duration: DurationFlag,
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
    #[command(flatten)]
    explain: crate::explain::ExplainFlags,
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
    /// Where the per-poll work is spent: on the answer, or before the
    /// request is written (a crawler that builds and sends each request:
    /// a period's burst then goes out one work apart)
    #[arg(long, value_enum, default_value = "answer")]
    work_at: WorkAtArg,
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
    /// Polls spread evenly over the period
    Spread,
    /// Every poll of a period at the crawler's own start (a burst)
    Aligned,
    /// Aligned on whole periods of the host's clock: every crawler on the
    /// host bursts at the same instants
    Clock,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum WorkAtArg {
    Answer,
    Request,
}

/// A TCP port of the loopback nothing listens on now (the kernel's pick).
fn free_local_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).context("finding a free port for --with-gateway")?;
    Ok(l.local_addr()?.port())
}

/// The crawl's gateways and plan from --config or the flags.
fn build_file(a: &CrawlArgs) -> anyhow::Result<CrawlFile> {
    let mut file = match &a.config {
        Some(p) => {
            if !a.url.is_empty() {
                return Err(bad_input("give either --config or --url, not both"));
            }
            CrawlFile::from_file(p).map_err(|e| bad_input(format!("{e:#}")))?
        }
        None => {
            let urls = if !a.url.is_empty() {
                a.url.clone()
            } else if a.with_gateway {
                // The local gateway on a port free now, building b0.
                vec![format!("http://127.0.0.1:{}/b0", free_local_port()?)]
            } else {
                return Err(bad_input(
                    "no gateway to poll: give --url http://HOST:PORT/BUILDING (repeatable), --config FILE, \
                     or --with-gateway for a local one",
                ));
            };
            let n = a.points_per_request.unwrap_or(ontime_crawl::config::DEFAULT_N);
            let period = a.period.unwrap_or(ontime_crawl::config::DEFAULT_PERIOD_NS);
            match (a.points, a.rate) {
                (Some(p), _) => CrawlFile::of_points(urls, p, n, period),
                (None, Some(r)) => CrawlFile::for_rate(urls, r, n, period).map_err(|e| bad_input(format!("--{e}")))?,
                (None, None) => CrawlFile::of_points(urls, 1000, n, period),
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
            PhaseArg::Clock => Phase::Clock,
        });
    }
    if a.timeout.is_some() {
        file.timeout = a.timeout;
    }
    if a.max_connections.is_some() {
        file.max_connections = a.max_connections;
    }
    Ok(file)
}

pub fn run(a: CrawlArgs) -> anyhow::Result<()> {
    let probe = CrawlProbe {
        crawl: build_file(&a)?,
        run: RunOptions {
            vcpus: a.vcpus,
            duration_ns: a.duration.or(DURATION_NS),
            thread: ThreadSettings {
                policy: a.policy,
                affinity: a.affinity.clone().map(|c| c.0).unwrap_or_default(),
                timer_slack_ns: Some(a.timer_slack),
            },
            mlockall: a.mlockall,
            threshold_ns: a.probe.threshold,
            report_interval_ns: a.probe.hlog_interval,
            work: ontime_crawl::work::WorkModel {
                mean_ns: a.work_per_poll,
                tail: a.work_tail,
            },
            work_at: match a.work_at {
                WorkAtArg::Answer => ontime_crawl::work::WorkAt::Answer,
                WorkAtArg::Request => ontime_crawl::work::WorkAt::Request,
            },
            resend: !a.no_resend,
            hlog: a.probe.hlog.clone(),
            polls_file: a.polls.clone(),
            store: a.store.clone(),
            keep_worst: a.explain.keep(),
            explain_over: a.explain.explain_over,
            // A gateway elsewhere stamps on another clock: arrivals are
            // judged in the lab, whose gateway shares the host's.
            path_nominal: None,
        },
        result: a.out.result.clone(),
        dma_latency: !a.probe.no_dma_latency,
    };
    let gateway = a.with_gateway.then(|| LocalGatewayOptions {
        log: a.gateway_log.clone(),
        delay_ns: a.gateway_delay,
    });
    a.explain.check(a.vcpus)?;
    execute(probe, gateway, &a.out, a.config.as_deref(), &a.explain)
}

/// `--with-gateway`: a local gateway serving what the crawl polls.
pub struct LocalGatewayOptions {
    pub log: Option<PathBuf>,
    pub delay_ns: Option<u64>,
}

/// Runs a crawl, whether its flags or a lab spec built it. `origin` names
/// the crawl config file in errors.
pub fn execute(
    mut p: CrawlProbe,
    gateway: Option<LocalGatewayOptions>,
    out: &output::OutputFlags,
    origin: Option<&std::path::Path>,
    explain: &crate::explain::ExplainFlags,
) -> anyhow::Result<()> {
    p.validate().map_err(|e| bad_input(format!("--{e}")))?;
    if gateway.is_some() {
        // The local gateway starts after the plan is made: its devices'
        // APDU size is known, not asked.
        let bacnet = |url: &str| {
            ontime_crawl::config::parse_url(url)
                .is_ok_and(|t| matches!(t.protocol, ontime_crawl::config::Protocol::Bacnet { .. }))
        };
        for g in p.crawl.gateways.iter_mut().filter(|g| bacnet(&g.url)) {
            g.max_apdu.get_or_insert(ontime_gateway::bacnet::MAX_APDU);
        }
    }
    let where_ = origin.map(|f| format!("{}: ", f.display())).unwrap_or_default();
    let cfg = p.config().map_err(|e| bad_input(format!("{where_}{e:#}")))?;
    output::check_outputs(&[
        ("--result", p.result.as_deref()),
        ("--hlog", p.run.hlog.as_deref()),
        ("--polls", p.run.polls_file.as_deref()),
        ("--store", p.run.store.as_deref()),
        ("--gateway-log", gateway.as_ref().and_then(|g| g.log.as_deref())),
        ("--keep-recording", explain.keep_recording.as_deref()),
        ("--perfetto", explain.perfetto.as_deref()),
    ])?;
    let gateway = match gateway {
        Some(g) => Some(LocalGateway::start(&cfg, &g)?),
        None => None,
    };
    let caps = Capabilities::probe();
    let mut manifest = Manifest::start("native", caps);
    // Deep idle states add wake-up latency; hold them off as cyclictest does.
    let _dma = if !p.dma_latency {
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
    let duration = p.run.duration_ns;
    if !out.json {
        ontime_core::errln!(
            "ontime crawl: {:.0} polls/s to {} gateway(s) for {} on {} vCPU thread(s)",
            cfg.polls_per_second(),
            cfg.gateways.len(),
            format_ns(duration),
            p.run.vcpus
        );
    }
    let recording = if explain.explain {
        let r = crate::explain::RecordingBeside::start(
            explain.keep_recording.as_deref(),
            &p.run.thread.affinity,
            explain.flight(p.run.duration_ns, "send_lag"),
            p.run.hlog.as_deref(),
        )?;
        // The flight recorder follows the probe's histogram log.
        if let Some(log) = r.flight_log() {
            p.run.hlog = Some(log.to_path_buf());
        }
        Some(r)
    } else {
        None
    };
    let pb = output::progress_bar(duration.div_ceil(1_000_000_000));
    let result = ontime_crawl::run(cfg, p.run.clone(), flags, manifest, &mut |pr| {
        pb.set_position(pr.elapsed_ns / 1_000_000_000);
        pb.set_message(format!(
            "polls {} missed {} | max send lag {} interval error {}",
            pr.outcomes.planned,
            pr.outcomes.missed(),
            format_ns(pr.send_lag_max_ns),
            format_ns(pr.interval_error_max_ns)
        ));
    });
    pb.finish_and_clear();
    let mut result = result?;
    let mut why = String::new();
    if let (Some(r), Some(late)) = (recording, result.late_events.as_ref()) {
        // The measurement stands without its explanation.
        match r
            .finish()
            .and_then(|(recorded, _)| crate::explain::explain(&recorded, late, explain.perfetto.as_deref()))
        {
            Ok(x) => {
                why = x.text("polls sent late");
                result.explanation = Some(x);
            }
            Err(e) => {
                ontime_core::errln!("ontime: --explain: {e:#}; the result has no explanation");
                result.warnings.push(format!("--explain: {e:#}"));
            }
        }
    }
    {
        use ontime_core::export::{Exporter, Text};
        output::emit(&result, &(Text.export(&result)? + &why), out.json, p.result.as_deref())?;
    }
    // The gateway's receive log is a measurement too: if it could not be
    // stored, the run failed, loudly and naming the file. So did a run
    // whose own files were cut (the result, written above, says which).
    let gateway = match gateway {
        Some(g) => g.finish(),
        None => Ok(()),
    };
    let mut failed: Vec<String> = gateway.err().map(|e| format!("{e:#}")).into_iter().collect();
    if !result.incomplete_files.is_empty() {
        failed.push(format!("incomplete: {}", result.incomplete_files.join("; ")));
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", failed.join("; "))
    }
}

/// A gateway child process serving what the crawl will poll; stopped (and
/// its receive log flushed) when dropped.
struct LocalGateway {
    child: ChildProcess,
    _config: tempfile::NamedTempFile,
}

impl LocalGateway {
    fn start(cfg: &CrawlConfig, g: &LocalGatewayOptions) -> anyhow::Result<LocalGateway> {
        if let Some(d) = g.delay_ns {
            ontime_core::limits::duration("--gateway-delay", d, 0, ontime_core::limits::MAX_INJECTED_DELAY_NS)
                .map_err(bad_input)?;
        }
        let mut buildings = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // One gateway process speaks one protocol.
        let protocol = match cfg.gateways[0].protocol {
            ontime_crawl::config::Protocol::Http => ontime_gateway::config::Protocol::Http,
            ontime_crawl::config::Protocol::Modbus { .. } => ontime_gateway::config::Protocol::Modbus,
            ontime_crawl::config::Protocol::Bacnet { .. } => ontime_gateway::config::Protocol::Bacnet,
        };
        if cfg
            .gateways
            .iter()
            .any(|g| std::mem::discriminant(&g.protocol) != std::mem::discriminant(&cfg.gateways[0].protocol))
        {
            return Err(bad_input(
                "--with-gateway serves one protocol: give URLs of one scheme (http://, modbus:// or bacnet://)",
            ));
        }
        for gw in &cfg.gateways {
            if !gw.addr.ip().is_loopback() {
                return Err(bad_input(format!(
                    "--with-gateway serves loopback addresses only, not {}",
                    gw.addr
                )));
            }
            // The gateway's names are identifiers; a URL path may hold more.
            ontime_gateway::config::check_name(&gw.building)
                .map_err(|e| bad_input(format!("--with-gateway cannot serve --url {}: {e}", gw.url)))?;
            if !seen.insert((gw.addr, gw.building.clone())) {
                continue;
            }
            let (name, unit, device) = match gw.protocol {
                ontime_crawl::config::Protocol::Http => (gw.building.clone(), None, None),
                ontime_crawl::config::Protocol::Modbus { unit, .. } => (format!("unit{unit}"), Some(unit), None),
                ontime_crawl::config::Protocol::Bacnet { device, .. } => {
                    (format!("device{device}"), None, Some(device))
                }
            };
            buildings.push(Building {
                name,
                points: gw.point_ids.iter().max().copied().unwrap_or(0) + 1,
                analog_percent: 70,
                listen: Some(gw.addr),
                unit,
                device,
            });
        }
        let config = GatewayConfig {
            protocol,
            listen: cfg.gateways[0].addr,
            threads: 1,
            policy: Policy::Other,
            faults: Faults {
                delay_ns: g.delay_ns.unwrap_or(0),
                ..Faults::default()
            },
            log: g.log.clone(),
            buildings,
        };
        config
            .validate()
            .map_err(|e| bad_input(format!("--with-gateway: {e:#}")))?;
        let file = tempfile::Builder::new()
            .prefix("ontime-gateway-")
            .suffix(".json")
            .tempfile()?;
        ProbeSpec::Gateway(GatewayProbe {
            config,
            result: None,
            stalls: Vec::new(),
        })
        .write(file.path())?;
        let exe = std::env::current_exe().context("cannot find the ontime binary")?;
        let mut cmd = Command::new(exe);
        cmd.arg("probe").arg(file.path());
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
        let udp = protocol == ontime_gateway::config::Protocol::Bacnet;
        child.wait_until(Duration::from_secs(5), || {
            addrs.iter().all(|a| {
                if udp {
                    // Bound by the gateway once this bind is refused.
                    std::net::UdpSocket::bind(a).is_err()
                } else {
                    std::net::TcpStream::connect_timeout(a, Duration::from_millis(100)).is_ok()
                }
            })
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
