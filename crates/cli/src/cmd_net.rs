//! `ontime net controller|channel|misses|actions|send|receive|clock`: document
//! 003's real-time channels between lab tenants. The controller runs inside
//! a lab run (it needs the tenants and the relay's switch); the channel
//! verbs are its clients over the HTTP/JSON API.

use crate::flags::DurationFlag;
use clap::{Args, Subcommand, ValueEnum};
use ontime_core::bad_input;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_net::api::{self, Client, Target};
use ontime_net::channel::ChannelKind;
use ontime_net::controller::{ChannelRequest, MissEvent};
use ontime_scenario::probe::{FlowReceiveProbe, FlowSendProbe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The controller scenario used when none is given: three tenants behind
/// a 100 Mbit/s bottleneck, no flows of its own.
const DEFAULT_SCENARIO: &str = include_str!("../../../scenarios/net-controller.toml");

#[derive(Args)]
pub struct NetArgs {
    #[command(subcommand)]
    action: NetAction,
}

#[derive(Subcommand)]
enum NetAction {
    /// Run the lab's tenants, the bottleneck and the channel controller until
    /// interrupted (or -D), for `ontime net channel` to use
    Controller(ControllerArgs),
    /// Add, list, remove channels, or show their counters
    Channel(ChannelArgs),
    /// Follow missed deadlines as the receivers' checks report them
    Misses(MissesArgs),
    /// What the controller did: admissions, refusals, escalations
    Actions(ClientArgs),
    /// Attach the stamp and the check to interfaces by hand (no lab, no
    /// controller): channels from the command line, counters and per-packet
    /// cost at the end
    Datapath(DatapathArgs),
    /// Send a paced UDP flow that carries its send times (a measured flow)
    Send(SendArgs),
    /// Receive a measured flow and time every datagram end to end
    Receive(ReceiveArgs),
    /// A guest's clock against its host's: the host answers (`echo`), the
    /// guest measures its offset (`measure`), for `ontime explain --guest`
    /// and measured flows
    Clock(ClockArgs),
}

#[derive(Args)]
struct ClockArgs {
    #[command(subcommand)]
    action: ClockAction,
}

#[derive(Subcommand)]
enum ClockAction {
    /// Answer clock requests on ADDRESS:PORT (UDP) until Ctrl-C: run it on
    /// the host
    Echo {
        /// ADDRESS:PORT to answer on, reachable from the guest
        #[arg(long, default_value = "0.0.0.0:5399")]
        listen: std::net::SocketAddr,
    },
    /// Measure this clock's offset to an echo (host = this + offset): run
    /// it in the guest, during or right after the run it explains
    Measure {
        /// The host's echo, ADDRESS:PORT
        #[arg(long)]
        server: std::net::SocketAddr,
        /// Exchanges, 1 ms apart; the one with the shortest round trip is kept
        #[arg(long, default_value_t = 50)]
        samples: u32,
        /// Write the offset here (JSON) instead of printing it
        #[arg(long)]
        result: Option<PathBuf>,
    },
}

/// `net controller -D` when not given: 1 h.
const CONTROLLER_DURATION_NS: u64 = 3_600_000_000_000;

#[derive(Args)]
#[command(mut_arg("duration", DurationFlag::help("How long to serve", Some(CONTROLLER_DURATION_NS))))]
struct ControllerArgs {
    /// A lab scenario with [net] [default: scenarios/net-controller.toml, built in]
    scenario: Option<PathBuf>,
    #[command(flatten)]
    duration: DurationFlag,
    /// Results directory (channels, actions, relay counters)
    #[arg(short = 'o', long, default_value = "results/net-controller")]
    results: PathBuf,
}

#[derive(Args, Clone)]
struct ClientArgs {
    /// The controller's Unix socket
    #[arg(long, default_value = api::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Reach it over TCP instead (ADDRESS:PORT, see [net] listen)
    #[arg(long)]
    tcp: Option<String>,
    /// The file holding the bearer token (mode 0600)
    #[arg(long, default_value = api::DEFAULT_TOKEN)]
    token: PathBuf,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

impl ClientArgs {
    fn client(&self) -> anyhow::Result<Client> {
        let token = api::read_token_file(&self.token)?;
        let target = match &self.tcp {
            Some(a) => Target::Tcp(a.clone()),
            None => Target::Socket(self.socket.clone()),
        };
        Client::new(target, token)
    }
}

#[derive(Args)]
struct ChannelArgs {
    #[command(subcommand)]
    action: ChannelAction,
}

#[derive(Subcommand)]
enum ChannelAction {
    /// Ask for a channel: admitted (its number is printed) or refused with the reason
    Add(AddArgs),
    /// The channels and their counters
    List(ClientArgs),
    /// The channels' counters: stamped, on time, missed, delay
    Stats(ClientArgs),
    /// Remove a channel: its packets go best effort again
    Rm(RmArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    /// EDF, soft: best effort goes first while no deadline is at risk
    Deadline,
    /// WFQ with a reserved rate, hard: admitted by the delay bound
    Reservation,
}

#[derive(Args)]
struct AddArgs {
    /// Sending tenant (t0, t1, ...)
    #[arg(long)]
    from: String,
    /// Receiving tenant or "building"
    #[arg(long, default_value = "building")]
    to: String,
    /// Destination port [default: any]
    #[arg(long)]
    port: Option<u16>,
    #[arg(long, value_enum, default_value = "deadline")]
    kind: Kind,
    /// Token rate, Mbit/s on the wire
    #[arg(long)]
    rate_mbit: f64,
    /// Bucket depth, bytes [default: one largest packet]
    #[arg(long)]
    burst: Option<f64>,
    /// Largest packet, bytes on the wire [default: the link's MTU]
    #[arg(long)]
    max_packet: Option<f64>,
    /// Deadline, one way (e.g. 5ms)
    #[arg(long, value_parser = parse_ns)]
    deadline: u64,
    /// Real-time policy for the sender's vCPU threads (fifo:70, rr:50, deadline:1ms/10ms)
    #[arg(long)]
    vcpu_policy: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct RmArgs {
    /// The channel's id (as `add` printed it; ids are never reused)
    id: u64,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
struct MissesArgs {
    /// Only this sender's channels
    #[arg(long)]
    from: Option<String>,
    /// Stop after this many misses
    #[arg(long)]
    count: Option<u64>,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Args)]
#[command(mut_arg(
    "duration",
    DurationFlag::help("How long to stay attached [default: until Ctrl-C]", None)
))]
struct DatapathArgs {
    /// Stamp what NETNS:INTERFACE sends (tc egress); repeatable
    #[arg(long)]
    stamp: Vec<String>,
    /// Check what NETNS:INTERFACE receives (XDP); repeatable
    #[arg(long)]
    check: Vec<String>,
    /// A channel: ID,SOURCE,DESTINATION[:PORT],DEADLINE[,reservation], e.g.
    /// 1,10.0.0.1,10.0.0.2:5000,5ms (ID 1..63 is its DSCP); repeatable
    #[arg(long)]
    channel: Vec<String>,
    #[command(flatten)]
    duration: DurationFlag,
    /// Write the counters and the per-packet cost here (JSON) at the end
    #[arg(long)]
    result: Option<PathBuf>,
}

/// `net send -D` when not given: 10 s.
const SEND_DURATION_NS: u64 = 10_000_000_000;

#[derive(Args)]
#[command(mut_arg("duration", DurationFlag::help("How long to send", Some(SEND_DURATION_NS))))]
struct SendArgs {
    /// Destination ADDRESS:PORT
    #[arg(long)]
    to: std::net::SocketAddr,
    /// UDP payload rate, Mbit/s
    #[arg(long)]
    rate_mbit: f64,
    /// UDP payload bytes per datagram
    #[arg(long, default_value_t = 1000)]
    size: usize,
    /// Datagrams sent back to back each time
    #[arg(long, default_value_t = 1)]
    burst: u32,
    #[command(flatten)]
    duration: DurationFlag,
    /// Wait this long before sending
    #[arg(long, default_value = "0s", value_parser = parse_ns)]
    start_after: u64,
    /// Write the sender's counters here (JSON)
    #[arg(long)]
    result: Option<PathBuf>,
}

#[derive(Args)]
struct ReceiveArgs {
    /// ADDRESS:PORT to receive on
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Datagrams later than this count as misses
    #[arg(long, value_parser = parse_ns)]
    deadline: Option<u64>,
    /// Time-series bin width
    #[arg(long, default_value = "100ms", value_parser = parse_ns)]
    bin: u64,
    /// Keep this many of the worst late datagrams in the result
    /// (`late_events`), for `ontime explain RESULT RECORDING`
    #[arg(long, default_value_t = ontime_net::flow::KEEP_LATE)]
    keep_late: usize,
    /// Write the result here (JSON) when stopped (SIGINT/SIGTERM)
    #[arg(long)]
    result: Option<PathBuf>,
    /// Also write each second's datagram lateness past --deadline as an
    /// HdrHistogram interval log (tag `lateness`), flushed as it goes
    #[arg(long, value_name = "FILE", requires = "deadline")]
    hlog: Option<PathBuf>,
}

pub fn run(a: NetArgs) -> anyhow::Result<()> {
    match a.action {
        NetAction::Controller(c) => controller(c),
        NetAction::Channel(c) => match c.action {
            ChannelAction::Add(a) => add(a),
            ChannelAction::List(c) | ChannelAction::Stats(c) => list(c),
            ChannelAction::Rm(r) => rm(r),
        },
        NetAction::Misses(m) => misses(m),
        NetAction::Actions(c) => actions(c),
        NetAction::Datapath(d) => datapath(d),
        NetAction::Send(s) => send(s),
        NetAction::Receive(r) => receive(r),
        NetAction::Clock(c) => match c.action {
            ClockAction::Echo { listen } => execute_clock_echo(ontime_scenario::probe::ClockEchoProbe { listen }),
            ClockAction::Measure {
                server,
                samples,
                result,
            } => {
                crate::output::check_outputs(&[("--result", result.as_deref())])?;
                let o = ontime_net::clock::measure_offset(server, samples).map_err(|e| {
                    bad_input(format!(
                        "{e:#}: is `ontime net clock echo` running on the host, and {server} reachable?"
                    ))
                })?;
                put_result(&o, result.as_deref())
            }
        },
    }
}

fn controller(a: ControllerArgs) -> anyhow::Result<()> {
    let (text, origin) = match &a.scenario {
        Some(p) => (ontime_scenario::scenario::read_text(p)?, p.clone()),
        None => (
            DEFAULT_SCENARIO.to_string(),
            PathBuf::from("net-controller.toml (built in)"),
        ),
    };
    let mut plan = ontime_scenario::scenario::load_str(&text, &origin).map_err(|e| bad_input(format!("{e:#}")))?;
    let Some(first) = plan.runs.first_mut() else {
        return Err(bad_input("the scenario has no runs"));
    };
    if first.config.net.is_none() {
        return Err(bad_input(format!(
            "{}: the controller needs a [net] section (see scenarios/net-controller.toml)",
            origin.display()
        )));
    }
    first.config.duration = a.duration.or(CONTROLLER_DURATION_NS);
    plan.runs.truncate(1);
    ontime_core::errln!(
        "ontime net controller: API on {} (token in {}); add channels with\n  ontime net channel add --from t0 --to building --port 5000 --rate-mbit 2 --deadline 5ms\nCtrl-C stops it.",
        api::DEFAULT_SOCKET,
        api::DEFAULT_TOKEN
    );
    // Ctrl-C is how the controller ends: its stop is no interruption.
    crate::cmd_lab::execute(&plan, &text, a.results, false, false).map(|_| ())
}

/// The answer's body as T, or the controller's error as ours.
/// A request the controller refused for its own fault is bad input (exit 2).
fn refused_is_bad_input(e: anyhow::Error) -> anyhow::Error {
    match e.downcast_ref::<api::Refused>() {
        Some(r) if r.is_bad_request() => bad_input(r.to_string()),
        _ => e,
    }
}

fn add(a: AddArgs) -> anyhow::Result<()> {
    let c = a.client.client()?;
    let req = ChannelRequest {
        from: a.from,
        to: a.to,
        port: a.port,
        kind: match a.kind {
            Kind::Deadline => ChannelKind::Deadline,
            Kind::Reservation => ChannelKind::Reservation,
        },
        rate_bps: a.rate_mbit * 1e6,
        burst_bytes: a.burst.or(a.max_packet).unwrap_or(1514.0),
        max_packet_bytes: a.max_packet,
        peak_bps: None,
        deadline_ns: a.deadline,
        vcpu_policy: a.vcpu_policy,
    };
    let s = c.add_channel(&req).map_err(refused_is_bad_input)?;
    if a.client.json {
        crate::outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        let r = s
            .reserved_bps
            .map(|b| format!(", reserved {:.3} Mbit/s", b / 1e6))
            .unwrap_or_default();
        crate::outln!(
            "admitted: channel {} ({} -> {} port {}, deadline {}{r})",
            s.id,
            s.from,
            s.to,
            s.port.map(|p| p.to_string()).unwrap_or_else(|| "any".into()),
            format_ns(s.spec.deadline_ns)
        );
    }
    Ok(())
}

/// With --json the value is printed as JSON (None), else handed back.
fn shown<T: serde::Serialize>(a: &ClientArgs, v: anyhow::Result<T>) -> anyhow::Result<Option<T>> {
    let v = v.map_err(refused_is_bad_input)?;
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(None);
    }
    Ok(Some(v))
}

fn list(a: ClientArgs) -> anyhow::Result<()> {
    let Some(l) = shown(&a, a.client()?.channels())? else {
        return Ok(());
    };
    if l.is_empty() {
        crate::outln!("no channels");
        return Ok(());
    }
    crate::outln!(
        "{:>3} {:<12} {:<24} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10}  state",
        "id",
        "kind",
        "flow",
        "deadline",
        "stamped",
        "on time",
        "missed",
        "lost",
        "mean delay",
        "max delay"
    );
    for s in l {
        let k = &s.counts;
        let mean = (k.delay_count > 0).then(|| k.delay_sum_ns / k.delay_count);
        let state = match (s.priority, s.reserved_bps) {
            (true, _) => "priority (escalated)".to_string(),
            (false, Some(r)) => format!("R {:.3} Mbit/s", r / 1e6),
            _ => "normal".into(),
        };
        crate::outln!(
            "{:>3} {:<12} {:<24} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10} {:>10}  {state}",
            s.id,
            format!("{:?}", s.spec.kind).to_lowercase(),
            format!(
                "{}->{}:{}",
                s.from,
                s.to,
                s.port.map(|p| p.to_string()).unwrap_or_else(|| "*".into())
            ),
            format_ns(s.spec.deadline_ns),
            k.stamped,
            k.on_time,
            k.missed,
            k.stamped.saturating_sub(k.on_time + k.missed),
            mean.map(format_ns).unwrap_or_else(|| "-".into()),
            if k.delay_count > 0 {
                format_ns(k.delay_max_ns)
            } else {
                "-".into()
            },
        );
    }
    Ok(())
}

fn rm(a: RmArgs) -> anyhow::Result<()> {
    let c = a.client.client()?;
    let s = c.remove_channel(a.id).map_err(refused_is_bad_input)?;
    crate::outln!(
        "removed channel {}: {} stamped, {} on time, {} missed",
        s.id,
        s.counts.stamped,
        s.counts.on_time,
        s.counts.missed
    );
    Ok(())
}

fn actions(a: ClientArgs) -> anyhow::Result<()> {
    let Some(l) = shown(&a, a.client()?.actions())? else {
        return Ok(());
    };
    for x in l {
        crate::outln!("{:>10.3} s  {:<16} {}", x.at_ns as f64 / 1e9, x.kind, x.message);
    }
    Ok(())
}

fn misses(a: MissesArgs) -> anyhow::Result<()> {
    let c = a.client.client()?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let mut n = 0u64;
    let json = a.client.json;
    c.follow_misses(a.from.as_deref(), &stop, |line| {
        if json {
            crate::outln!("{}", String::from_utf8_lossy(line));
        } else if let Ok(m) = serde_json::from_slice::<MissEvent>(line) {
            // The largest part of the overrun, where the relay recorded the frame.
            let why = m
                .why
                .first()
                .map(|p| format!("; {} {}", format_ns(p.ns), p.part.words()))
                .unwrap_or_default();
            crate::outln!(
                "{:>10.3} s  channel {:>2} from {:<4} late by {:>10}  (IP id {}{why})",
                m.at_ns as f64 / 1e9,
                m.channel,
                m.from,
                format_ns(m.overrun_ns),
                m.ip_id
            );
        }
        n += 1;
        a.count.is_none_or(|c| n < c)
    })
}

/// A verb's JSON result: to `file` (whole or not at all) or to stdout.
fn put_result<T: serde::Serialize>(value: &T, file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    match file {
        Some(p) => ontime_core::fsio::write_atomic(p, text.as_bytes())?,
        None => crate::outln!("{text}"),
    }
    Ok(())
}

/// A stop flag set by Ctrl-C or SIGTERM, once `--result` is known writable.
fn stop_flag(result: Option<&std::path::Path>) -> anyhow::Result<Arc<AtomicBool>> {
    crate::output::check_outputs(&[("--result", result)])?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    Ok(stop)
}

fn send(a: SendArgs) -> anyhow::Result<()> {
    execute_send(FlowSendProbe {
        send: ontime_net::flow::SendSettings {
            to: a.to,
            rate_bps: a.rate_mbit * 1e6,
            size: a.size,
            duration_ns: a.duration.or(SEND_DURATION_NS),
            start_after_ns: a.start_after,
            burst: a.burst,
            clock_offset_ns: 0,
        },
        result: a.result,
        clock_offset: None,
    })
}

/// A paced flow, whether its flags or a lab spec built it.
pub fn execute_send(mut p: FlowSendProbe) -> anyhow::Result<()> {
    let stop = stop_flag(p.result.as_deref())?;
    if let Some(f) = &p.clock_offset {
        p.send.clock_offset_ns = ontime_net::clock::read_offset(f)?.offset_ns;
    }
    let report = ontime_net::flow::send(&p.send, &stop).map_err(|e| bad_input(format!("{e:#}")))?;
    put_result(&report, p.result.as_deref())
}

fn receive(a: ReceiveArgs) -> anyhow::Result<()> {
    execute_receive(FlowReceiveProbe {
        receive: ontime_net::flow::ReceiveSettings {
            listen: a.listen,
            deadline_ns: a.deadline,
            bin_ns: a.bin,
            clock_offset_ns: 0,
            keep_late: a.keep_late,
            hlog: a.hlog,
        },
        result: a.result,
        clock_offset: None,
    })
}

/// The host's clock echo for guests' flows, until Ctrl-C or SIGTERM.
pub fn execute_clock_echo(p: ontime_scenario::probe::ClockEchoProbe) -> anyhow::Result<()> {
    let stop = stop_flag(None)?;
    let sock = std::net::UdpSocket::bind(p.listen)
        .map_err(|e| bad_input(format!("cannot listen for clock requests on {}: {e}", p.listen)))?;
    ontime_net::clock::serve_echo(&sock, &stop)?;
    Ok(())
}

/// A guest's clock offset to its host's echo, to `p.result` (JSON).
pub fn execute_clock_sync(p: ontime_scenario::probe::ClockSyncProbe) -> anyhow::Result<()> {
    let o = ontime_net::clock::measure_offset(p.server, p.samples)?;
    ontime_core::fsio::write_atomic(&p.result, &serde_json::to_vec_pretty(&o)?)
}

/// A flow's receiver, whether its flags or a lab spec built it.
pub fn execute_receive(mut p: FlowReceiveProbe) -> anyhow::Result<()> {
    let stop = stop_flag(p.result.as_deref())?;
    if let Some(f) = &p.clock_offset {
        p.receive.clock_offset_ns = ontime_net::clock::read_offset(f)?.offset_ns;
    }
    let r = ontime_net::flow::receive(&p.receive, &stop)?;
    put_result(&r, p.result.as_deref())
}

/// NETNS:INTERFACE as (namespace file, interface).
fn ns_if(text: &str) -> anyhow::Result<(PathBuf, String)> {
    let (ns, ifname) = text.split_once(':').ok_or_else(|| {
        bad_input(format!(
            "'{text}': give NETNS:INTERFACE (a namespace from `ip netns list`)"
        ))
    })?;
    let file = ontime_core::names::netns_file(ns);
    if !file.exists() {
        return Err(bad_input(format!("no network namespace '{ns}' (see `ip netns list`)")));
    }
    Ok((file, ifname.to_string()))
}

/// ID,SOURCE,DESTINATION[:PORT],DEADLINE[,reservation].
fn channel_arg(text: &str) -> anyhow::Result<(u8, ontime_net::controller::FlowMatch, u8, u64)> {
    let bad = |why: &str| {
        bad_input(format!(
            "--channel '{text}': {why} (give ID,SOURCE,DESTINATION[:PORT],DEADLINE[,reservation])"
        ))
    };
    let parts: Vec<&str> = text.split(',').collect();
    if !(4..=5).contains(&parts.len()) {
        return Err(bad("four or five fields"));
    }
    let id: u8 = parts[0].parse().map_err(|_| bad("ID is a number"))?;
    if !(1..64).contains(&id) {
        return Err(bad("ID must be 1..63"));
    }
    let src = parts[1].parse().map_err(|_| bad("SOURCE is an IPv4 address"))?;
    let (dst, dport) = match parts[2].split_once(':') {
        Some((a, p)) => (a, Some(p.parse::<u16>().map_err(|_| bad("PORT is a number"))?)),
        None => (parts[2], None),
    };
    let dst = dst.parse().map_err(|_| bad("DESTINATION is an IPv4 address"))?;
    let deadline = parse_ns(parts[3]).map_err(|e| bad(&e))?;
    if deadline == 0 {
        return Err(bad("the deadline must be above 0"));
    }
    let tc = match parts.get(4) {
        None | Some(&"deadline") => 1,
        Some(&"reservation") => 2,
        Some(_) => return Err(bad("the kind is deadline or reservation")),
    };
    Ok((id, ontime_net::controller::FlowMatch { src, dst, dport }, tc, deadline))
}

fn datapath(a: DatapathArgs) -> anyhow::Result<()> {
    use ontime_net::controller::Plane;
    if a.stamp.is_empty() && a.check.is_empty() {
        return Err(bad_input("give at least one --stamp or --check NETNS:INTERFACE"));
    }
    let stamps = a.stamp.iter().map(|s| ns_if(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let checks = a.check.iter().map(|s| ns_if(s)).collect::<anyhow::Result<Vec<_>>>()?;
    let channels = a
        .channel
        .iter()
        .map(|c| channel_arg(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let stop = stop_flag(a.result.as_deref())?;
    // The kernel times BPF programs only while asked; put back at the end.
    let _stats = ontime_core::sysctl::SysctlGuard::set("/proc/sys/kernel/bpf_stats_enabled", "1").ok();
    let mut plane = ontime_net::datapath::BpfPlane::attach(&stamps, &checks)?;
    for (id, flow, tc, deadline) in &channels {
        plane.install(*id, *flow, *tc, *deadline)?;
    }
    ontime_core::errln!(
        "ontime net datapath: {} stamp(s), {} check(s), {} channel(s); Ctrl-C stops",
        stamps.len(),
        checks.len(),
        channels.len()
    );
    let t0 = std::time::Instant::now();
    let mut missed = 0u64;
    while !stop.load(Ordering::Relaxed)
        && a.duration
            .until_stopped()
            .is_none_or(|d| t0.elapsed().as_nanos() < d as u128)
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
        missed += plane.misses().len() as u64;
    }
    let (malformed, stamp_failures) = plane.errors();
    let cost = plane.cost();
    let report = serde_json::json!({
        "channels": channels.iter().map(|(id, _, _, _)| serde_json::json!({"id": id, "counts": plane.counts(*id)})).collect::<Vec<_>>(),
        "misses_reported": missed,
        "malformed_dropped": malformed,
        "stamp_failures": stamp_failures,
        "cost": cost,
        "stamp_ns_per_packet": cost.and_then(|c| c.stamp_ns_per_packet()),
        "check_ns_per_packet": cost.and_then(|c| c.check_ns_per_packet()),
    });
    put_result(&report, a.result.as_deref())
}
