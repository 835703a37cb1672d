//! `ontime gateway`: serve emulated building gateways; `ontime gateway
//! analyze`: interval error from a gateway's receive log.

use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_core::duration::parse_ns;
use ontime_explain::truth::{InjectedClass, Injections};
use ontime_gateway::{Faults, GatewayConfig};
use ontime_scenario::probe::GatewayProbe;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GatewayArgs {
    #[command(subcommand)]
    action: Option<GatewayAction>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum GatewayAction {
    /// Interval error of every point from a gateway's receive log
    Analyze(AnalyzeArgs),
}

#[derive(Args)]
struct AnalyzeArgs {
    /// The receive log written with --log
    log: PathBuf,
    /// The period the points were polled at
    #[arg(long, default_value = "1s", value_parser = parse_ns)]
    period: u64,
    /// After how long past its planned time the crawler gave a poll up
    /// (its --timeout) [default: the period]
    #[arg(long, value_parser = parse_ns)]
    timeout: Option<u64>,
    /// Count samples above this interval error
    #[arg(long, value_parser = parse_ns)]
    threshold: Option<u64>,
    #[command(flatten)]
    out: crate::output::OutputFlags,
}

#[derive(Args)]
struct ServeArgs {
    /// TOML file with [[building]] tables and [faults] (flags below override)
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// What to speak: getValues over HTTP, Modbus/TCP (each building a
    /// unit, 1 to N, whose registers 0..points are its points in
    /// hundredths) or BACnet/IP (each building a device, 1 to N, on a port
    /// of its own: --port-per-building; analog-input 0..points) [default:
    /// http, or the config's]
    #[arg(long, value_enum)]
    protocol: Option<ProtocolArg>,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Number of buildings, served at /b0 ... /b{N-1} (Modbus: units 1 to N)
    #[arg(long, default_value_t = 1)]
    buildings: u32,
    /// Points per building
    #[arg(long, default_value_t = 10_000)]
    points: u32,
    /// Give building i its own port (listen port + i) instead of a path prefix only
    #[arg(long)]
    port_per_building: bool,
    /// Server worker threads
    #[arg(long)]
    threads: Option<usize>,
    /// Stream every point's receive time to this file
    #[arg(long)]
    log: Option<PathBuf>,
    /// Scheduling policy of the server threads: other, fifo:PRIO, rr:PRIO
    /// (the lab runs its gateway at fifo so contention cannot delay it)
    #[arg(long)]
    policy: Option<ontime_core::rt::Policy>,
    /// At exit, write the counters and the receive-stamp figures (kernel
    /// vs handler stamp) to this JSON file
    #[arg(long)]
    result: Option<PathBuf>,
    /// Fixed local-controller delay, e.g. 2ms
    #[arg(long, value_parser = parse_ns)]
    delay: Option<u64>,
    /// Random extra controller delay, uniform in 0..this
    #[arg(long, value_parser = parse_ns)]
    delay_random: Option<u64>,
    /// Probability of a delay spike per request
    #[arg(long)]
    spike_probability: Option<f64>,
    /// Length of a delay spike
    #[arg(long, value_parser = parse_ns)]
    spike: Option<u64>,
    /// Probability of answering 503
    #[arg(long)]
    error_probability: Option<f64>,
    /// Probability of closing the connection without an answer
    #[arg(long)]
    drop_probability: Option<f64>,
    /// Probability of a truncated JSON body
    #[arg(long)]
    malformed_probability: Option<f64>,
    /// Probability that a point answers status "fault"
    #[arg(long)]
    point_fault_probability: Option<f64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ProtocolArg {
    Http,
    Modbus,
    Bacnet,
}

impl ServeArgs {
    fn to_config(&self) -> anyhow::Result<GatewayConfig> {
        let mut cfg = match &self.config {
            Some(p) => GatewayConfig::from_file(p).map_err(|e| bad_input(format!("{e:#}")))?,
            None => {
                // Before anything is made: the buildings are built in memory.
                GatewayConfig::check_size(
                    self.buildings as u64,
                    self.buildings as u64 * self.points as u64,
                    self.threads.unwrap_or(1) as u64,
                )
                .map_err(|e| bad_input(format!("{e:#}")))?;
                if self.port_per_building && self.listen.port() as u64 + self.buildings as u64 - 1 > 65535 {
                    return Err(bad_input(format!(
                        "--port-per-building: {} buildings from port {} go past port 65535",
                        self.buildings,
                        self.listen.port()
                    )));
                }
                GatewayConfig::generated(self.listen, self.buildings, self.points, self.port_per_building)
            }
        };
        if let Some(t) = self.threads {
            cfg.threads = t;
        }
        match self.protocol {
            Some(ProtocolArg::Http) => cfg.protocol = ontime_gateway::config::Protocol::Http,
            Some(ProtocolArg::Modbus) => cfg.protocol = ontime_gateway::config::Protocol::Modbus,
            Some(ProtocolArg::Bacnet) => cfg.protocol = ontime_gateway::config::Protocol::Bacnet,
            None => {}
        }
        if self.log.is_some() {
            cfg.log = self.log.clone();
        }
        if let Some(p) = self.policy {
            cfg.policy = p;
        }
        // Named by flag here; a config file's values are checked by key in
        // Faults::validate.
        for (flag, v) in [
            ("--delay", self.delay),
            ("--delay-random", self.delay_random),
            ("--spike", self.spike),
        ] {
            if let Some(ns) = v {
                ontime_core::limits::duration(flag, ns, 0, ontime_core::limits::MAX_INJECTED_DELAY_NS)
                    .map_err(bad_input)?;
            }
        }
        for (flag, v) in [
            ("--spike-probability", self.spike_probability),
            ("--error-probability", self.error_probability),
            ("--drop-probability", self.drop_probability),
            ("--malformed-probability", self.malformed_probability),
            ("--point-fault-probability", self.point_fault_probability),
        ] {
            if let Some(p) = v.filter(|p| !(0.0..=1.0).contains(p)) {
                return Err(bad_input(format!(
                    "{flag} {p} is out of range: give a probability 0 .. 1"
                )));
            }
        }
        let f: &mut Faults = &mut cfg.faults;
        macro_rules! over {
            ($($field:ident => $target:ident),*) => {$(
                if let Some(v) = self.$field { f.$target = v; }
            )*};
        }
        over!(delay => delay_ns, delay_random => delay_random_ns, spike => spike_ns,
              spike_probability => spike_probability, error_probability => error_probability,
              drop_probability => drop_probability, malformed_probability => malformed_probability,
              point_fault_probability => point_fault_probability);
        cfg.validate().map_err(|e| bad_input(format!("{e:#}")))?;
        Ok(cfg)
    }
}

pub fn run(a: GatewayArgs) -> anyhow::Result<()> {
    match a.action {
        Some(GatewayAction::Analyze(an)) => analyze(an),
        None => serve(a.serve),
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    execute(GatewayProbe {
        config: a.to_config()?,
        result: a.result,
        stalls: Vec::new(),
    })
}

/// Serves a gateway until stopped, whether its flags or a spec built it.
pub fn execute(p: GatewayProbe) -> anyhow::Result<()> {
    let GatewayProbe {
        config: cfg,
        result,
        stalls,
    } = p;
    cfg.validate().map_err(|e| bad_input(format!("{e:#}")))?;
    crate::output::check_outputs(&[("--result", result.as_deref()), ("--log", cfg.log.as_deref())])?;
    use ontime_gateway::config::Protocol;
    let summary: Vec<String> = (0..cfg.buildings.len())
        .map(|bi| {
            let b = &cfg.buildings[bi];
            match (cfg.protocol, cfg.unit_of(bi)) {
                (Protocol::Modbus, Some(unit)) => format!("{} as unit {unit} ({} registers)", b.name, b.points),
                (Protocol::Bacnet, _) => format!(
                    "{} as device {} (analog-input 0..{})",
                    b.name,
                    cfg.device_of(bi),
                    b.points
                ),
                _ => format!("/{} ({} points)", b.name, b.points),
            }
        })
        .collect();
    let gw = ontime_gateway::server::start(cfg.clone())?;
    let scheme = match cfg.protocol {
        Protocol::Http => "http",
        Protocol::Modbus => "modbus",
        Protocol::Bacnet => "bacnet",
    };
    for addr in gw.addrs() {
        crate::outln!("ontime gateway: listening on {scheme}://{addr}");
    }
    crate::outln!("ontime gateway: buildings {}", summary.join(", "));
    if let Some(l) = &cfg.log {
        crate::outln!("ontime gateway: receive log {}", l.display());
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let mut stallers = Vec::new();
    for s in stalls {
        let stall = gw.stall();
        let t = ontime_load::inject::spawn_holder("ontime-gw-stall", s.timing, stop.clone(), move |until| {
            stall.stall_until(until)
        })?;
        stallers.push((t, s.result));
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if let Some(e) = gw.log_failure() {
            // Measurements are no longer stored: stop now, not at exit
            // (the stalls' windows written first).
            stop.store(true, Ordering::Relaxed);
            Injections::write_held(InjectedClass::GatewayStall, stallers)?;
            let _ = gw.stop();
            anyhow::bail!("{e}; the gateway stopped (free space and run again)");
        }
    }
    Injections::write_held(InjectedClass::GatewayStall, stallers)?;
    let stats = gw.stop()?;
    crate::outln!("ontime gateway: stopped; {}", stats.stamps.text());
    crate::outln!("ontime gateway: {}", serde_json::to_string(&stats)?);
    if let Some(p) = &result {
        ontime_core::fsio::write_atomic(p, &serde_json::to_vec_pretty(&stats)?)?;
    }
    Ok(())
}

fn analyze(a: AnalyzeArgs) -> anyhow::Result<()> {
    if !a.log.exists() {
        return Err(bad_input(format!("no receive log at {}", a.log.display())));
    }
    ontime_core::limits::duration(
        "--period",
        a.period,
        ontime_core::limits::MIN_PERIOD_NS,
        ontime_core::limits::MAX_DURATION_NS,
    )
    .map_err(bad_input)?;
    if a.log.is_dir() {
        return Err(bad_input(format!(
            "{} is a directory, not a receive log",
            a.log.display()
        )));
    }
    if let Some(t) = a.timeout {
        ontime_core::limits::duration(
            "--timeout",
            t,
            ontime_core::limits::MIN_PERIOD_NS,
            ontime_core::limits::MAX_DURATION_NS,
        )
        .map_err(bad_input)?;
    }
    crate::output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    // The log is the user's input: a line that is not a receive-log line,
    // or a count that cannot be true, is bad input (exit 2).
    let r = ontime_gateway::recvlog::analyze(&a.log, a.period, a.timeout.unwrap_or(a.period), a.threshold)
        .map_err(|e| bad_input(format!("{e:#}")))?;
    let text = ontime_core::export::TextReport::text(&r);
    a.out.emit(&r, &text)
}
