//! The lab's side of document 003 (`[net]`): tenants get a channel MTU,
//! the controller runs on the relay's switch table with the BPF data path
//! (stamps on every tenant, checks on every receiver), its API listens on
//! the default socket with a fresh token, the flows' receivers and the
//! best-effort load start, and the scenario's channels are requested (at
//! their flows' start times). The senders are the run's probes. QEMU
//! tenants run their flows' senders, receivers and best-effort clients in
//! their guests' jobs ([`guest_net`]); the stamp and the check stay on the
//! tenant's veth, which every guest frame crosses (tap, bridge, veth).
use crate::sandbox::{iperf3_server, spawn_in, Lab};
use anyhow::{Context, Result};
use ontime_core::proc::{has_socket, Bound, ChildProcess};
use ontime_net::api::{self, ApiServer};
use ontime_net::channel::{ChannelKind, Link};
use ontime_net::controller::{ChannelRequest, Controller, ControllerConfig, ControllerReport, Endpoint};
use ontime_net::Relay;
use ontime_scenario::probe::{FlowReceiveProbe, FlowSendProbe, ProbeSpec};
use ontime_scenario::record::{FlowOutcome, NetOutcome};
use ontime_scenario::scenario::{ChannelMode, FlowSpec, NetSpec, RunConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The deadline label's 4 bytes come off the tenants' MTU.
pub const CHANNEL_MTU: u32 = 1496;
/// Largest frame on the link: Ethernet header, label, a full IP packet.
const MAX_FRAME: f64 = 14.0 + 4.0 + 1496.0;
/// Bytes a datagram of `size` payload bytes takes on the link: Ethernet
/// (14), label (4), IPv4 (20), UDP (8).
fn frame_bytes(size: usize) -> f64 {
    size as f64 + 46.0
}

/// The channel a flow asks for.
pub fn request_for(n: &NetSpec, f: &FlowSpec) -> Option<ChannelRequest> {
    let kind = match (n.channels, f.channel) {
        (ChannelMode::None, _) | (_, false) => return None,
        (ChannelMode::Deadline, _) => ChannelKind::Deadline,
        (ChannelMode::Reservation, _) => ChannelKind::Reservation,
        (ChannelMode::Declared, _) => f.kind.unwrap_or(ChannelKind::Deadline),
    };
    let on_wire = frame_bytes(f.size) / f.size as f64;
    Some(ChannelRequest {
        from: ontime_core::names::tenant_name(f.from),
        to: f.to.clone(),
        port: Some(f.port),
        kind,
        rate_bps: f.declared_rate_mbit.unwrap_or(f.rate_mbit) * 1e6 * on_wire,
        burst_bytes: f.burst as f64 * frame_bytes(f.size),
        max_packet_bytes: Some(frame_bytes(f.size)),
        peak_bps: None,
        deadline_ns: f.deadline,
        vcpu_policy: n.vcpu_policy.clone(),
    })
}

/// The controller's link: the relay's bottleneck; RFC 2212's error terms
/// are one largest frame in service and the relay's fixed delay.
pub fn link_of(n: &NetSpec, relay_delay_ns: u64) -> Link {
    Link {
        rate_bps: n.link_mbit * 1e6,
        mtu_bytes: MAX_FRAME,
        c_tot_bytes: MAX_FRAME,
        d_tot_ns: relay_delay_ns as f64,
        max_share: n.max_share,
    }
}

/// A flow's channel request and its answer: the channel's DSCP (the key of
/// the relay's per-class figures) or why not.
type Requested = (String, Result<u8, String>);

/// Everything a net run started, stopped in reverse by [`NetRun::finish`]
/// (or on drop).
pub struct NetRun {
    controller: Option<Controller>,
    _api: ApiServer,
    receivers: Vec<ChildProcess>,
    best_effort: Vec<ChildProcess>,
    adder: Option<std::thread::JoinHandle<Vec<Requested>>>,
    outcome: NetOutcome,
    _bpf_stats: Option<ontime_core::sysctl::SysctlGuard>,
}

fn endpoint_of<'a>(lab: &'a Lab, name: &str) -> Result<&'a crate::sandbox::Endpoint> {
    if name == "building" {
        return Ok(&lab.building);
    }
    ontime_core::names::tenant_index(name)
        .and_then(|i| lab.tenants.get(i))
        .map(|t| &t.net)
        .with_context(|| format!("no endpoint {name} in this lab"))
}

/// Stage 2b: before the relay starts: channel MTU and routes between tenants.
pub fn prepare(n: &NetSpec, lab: &Lab) -> Result<()> {
    lab.set_tenant_mtu(CHANNEL_MTU)?;
    let mut receivers: Vec<usize> = n
        .flows
        .iter()
        .filter_map(|f| ontime_core::names::tenant_index(&f.to))
        .collect();
    receivers.extend(ontime_core::names::tenant_index(&n.best_effort_to));
    receivers.sort_unstable();
    receivers.dedup();
    for r in receivers {
        lab.link_tenants(r)?;
    }
    Ok(())
}

/// Whether flows go between tenants (the relay then routes by MAC).
pub fn between_tenants(n: &NetSpec) -> bool {
    n.flows.iter().any(|f| f.to != "building") || n.best_effort_to != "building"
}

/// Stage 3b: controller, API, receivers, best effort, the channels of the
/// flows that start with the run.
/// `in_guests`: the tenants are QEMU guests, whose flows' receivers and
/// best-effort clients their own jobs start ([`guest_net`]).
pub fn start(c: &RunConfig, lab: &Lab, relay: &Relay, dir: &Path, exe: &Path, in_guests: bool) -> Result<NetRun> {
    let Some(n) = &c.net else {
        anyhow::bail!("no [net] in this run");
    };
    // The kernel measures the stamp's and the check's run time only while asked.
    let bpf_stats = ontime_core::sysctl::SysctlGuard::set("/proc/sys/kernel/bpf_stats_enabled", "1").ok();
    let mut endpoints = vec![Endpoint {
        name: "building".into(),
        addr: lab.building.addr,
        threads_file: None,
    }];
    let mut senders = Vec::new();
    for t in &lab.tenants {
        endpoints.push(Endpoint {
            name: ontime_core::names::tenant_name(t.index),
            addr: t.net.addr,
            threads_file: t.cgroup.as_ref().and_then(|cg| cg.threads_file()),
        });
        senders.push((crate::names::netns_file(&t.net.netns), t.net.ns_if.clone()));
    }
    // Every endpoint checks what it receives: a channel may go anywhere.
    let receivers: Vec<(PathBuf, String)> = std::iter::once(&lab.building)
        .chain(lab.tenants.iter().map(|t| &t.net))
        .map(|e| (crate::names::netns_file(&e.netns), e.ns_if.clone()))
        .collect();
    let config = ControllerConfig {
        link: link_of(n, c.host.relay_delay),
        endpoints,
        escalate_after: if n.escalate { 1 } else { u64::MAX },
        hold_ns: 1_000_000_000,
        log: Some(dir.join("net-actions.jsonl")),
        echo: false,
    };
    let controller = Controller::start(config, Some(relay.switch_table()), move || {
        Ok(Box::new(ontime_net::datapath::BpfPlane::attach(&senders, &receivers)?)
            as Box<dyn ontime_net::controller::Plane>)
    })?;
    let token = api::create_token_file(Path::new(api::DEFAULT_TOKEN))?;
    let listen = api::Listen {
        socket: api::DEFAULT_SOCKET.into(),
        tcp: n.listen.as_deref().map(str::parse).transpose().context("net.listen")?,
    };
    let mut api_server = api::serve(&listen, token, controller.handle())?;
    api_server.owns_token_file(Path::new(api::DEFAULT_TOKEN));

    let mut rx = Vec::new();
    if in_guests {
        rx.push(start_clock_echo(n, lab, dir, exe)?);
    }
    for f in &n.flows {
        let to = endpoint_of(lab, &f.to)?;
        let in_guest = in_guests && f.to != "building";
        let spec = ProbeSpec::FlowReceive(FlowReceiveProbe {
            receive: ontime_net::flow::ReceiveSettings {
                listen: std::net::SocketAddr::from((to.addr, f.port)),
                deadline_ns: Some(f.deadline),
                bin_ns: ontime_net::flow::BIN_NS,
                clock_offset_ns: 0,
                keep_late: ontime_net::flow::KEEP_LATE,
                // Its guest's clock is not the windows': a flight recorder
                // follows host receivers only.
                hlog: (!in_guest).then(|| dir.join(ontime_scenario::probe::flow_hlog(&f.name))),
            },
            result: Some(dir.join(format!("flow-{}.json", f.name))),
            clock_offset: in_guest.then(|| guest_clock_file(dir, ontime_core::names::tenant_index(&f.to).unwrap_or(0))),
        });
        let spec_file = dir.join(format!("flow-{}.probe.json", f.name));
        spec.write(&spec_file)?;
        if in_guest {
            continue;
        }
        let mut cmd = Command::new(exe);
        cmd.arg("probe")
            .arg(&spec_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("flow-{}.err", f.name)))?);
        let mut receiver = spawn_in(&mut cmd, &to.netns, None)?;
        // Bound before anyone sends: its socket is in its namespace's table.
        let pid = receiver.id();
        receiver
            .wait_until(crate::sandbox::BIND_LIMIT, || has_socket(pid, Bound::Udp(f.port)))
            .with_context(|| format!("flow {}: its receiver (log: flow-{}.err)", f.name, f.name))?;
        rx.push(receiver);
    }
    let best_effort = start_best_effort(n, lab, c.duration, dir, in_guests)?;

    let mut outcome = NetOutcome {
        controller: None,
        best_effort: Vec::new(),
        error: None,
        flows: n
            .flows
            .iter()
            .map(|f| FlowOutcome {
                name: f.name.clone(),
                from: f.from,
                to: f.to.clone(),
                deadline_ns: f.deadline,
                channel: None,
                refused: None,
                result: None,
                sender: None,
            })
            .collect(),
    };
    let handle = controller.handle();
    let now: Vec<_> = n.flows.iter().filter(|f| f.start == 0).collect();
    for f in now {
        if let Some(r) = request_for(n, f) {
            record(
                &mut outcome,
                &f.name,
                handle.add_blocking(r).map(|s| s.dscp).map_err(|e| e.message),
            );
        }
    }
    let later: Vec<(u64, String, ChannelRequest)> = n
        .flows
        .iter()
        .filter(|f| f.start > 0)
        .filter_map(|f| request_for(n, f).map(|r| (f.start, f.name.clone(), r)))
        .collect();
    let adder = (!later.is_empty())
        .then(|| {
            let t0 = std::time::Instant::now();
            std::thread::Builder::new().name("ontime-netadd".into()).spawn(move || {
                let mut out = Vec::new();
                for (at, name, r) in later {
                    let wait = Duration::from_nanos(at).saturating_sub(t0.elapsed());
                    std::thread::sleep(wait);
                    out.push((name, handle.add_blocking(r).map(|s| s.dscp).map_err(|e| e.message)));
                }
                out
            })
        })
        .transpose()
        .context("cannot start the channel requests' thread")?;
    Ok(NetRun {
        controller: Some(controller),
        _api: api_server,
        receivers: rx,
        best_effort,
        adder,
        outcome,
        _bpf_stats: bpf_stats,
    })
}

fn record(o: &mut NetOutcome, name: &str, r: Result<u8, String>) {
    if let Some(f) = o.flows.iter_mut().find(|f| f.name == name) {
        match r {
            Ok(id) => f.channel = Some(id),
            Err(e) => f.refused = Some(e),
        }
    }
}

/// iperf3 UDP servers at the best-effort receiver, one client per tenant
/// that sends no flow, the rate split between them.
fn start_best_effort(
    n: &NetSpec,
    lab: &Lab,
    duration_ns: u64,
    dir: &Path,
    in_guests: bool,
) -> Result<Vec<ChildProcess>> {
    if n.best_effort_mbit <= 0.0 {
        return Ok(Vec::new());
    }
    anyhow::ensure!(
        ontime_core::caps::which("iperf3").is_some(),
        "net.best_effort_mbit needs iperf3: run scripts/setup.sh or apt-get install iperf3"
    );
    let to = endpoint_of(lab, &n.best_effort_to)?;
    let mut out = Vec::new();
    let clients = best_effort_clients(n, lab, duration_ns, dir)?;
    // A guest runs its own servers and clients (`guest_net`).
    if !(in_guests && n.best_effort_to != "building") {
        for (i, _) in &clients {
            out.push(iperf3_server(&to.netns, to.addr, 5201 + *i as u16, true)?);
        }
    }
    if !in_guests {
        for (i, args) in clients {
            let mut cli = Command::new("iperf3");
            cli.args(args).stdout(Stdio::null()).stderr(Stdio::null());
            out.push(lab.tenants[i].spawn(&mut cli, false, Default::default())?);
        }
    }
    Ok(out)
}

/// The best effort's iperf3 clients: (tenant, arguments), one per tenant
/// that sends it, the rate split between them, each as long as the flows
/// (what its server received is then the run's).
fn best_effort_clients(n: &NetSpec, lab: &Lab, duration_ns: u64, dir: &Path) -> Result<Vec<(usize, Vec<String>)>> {
    if n.best_effort_mbit <= 0.0 {
        return Ok(Vec::new());
    }
    let to = endpoint_of(lab, &n.best_effort_to)?;
    let to_index = ontime_core::names::tenant_index(&n.best_effort_to);
    let from: Vec<usize> = n
        .best_effort_tenants(lab.tenants.len())
        .into_iter()
        .filter(|i| Some(*i) != to_index)
        .collect();
    let each = n.best_effort_mbit / from.len().max(1) as f64;
    let secs = (duration_ns / 1_000_000_000).max(1).to_string();
    Ok(from
        .iter()
        .map(|&i| {
            let args = [
                "-c",
                &to.addr.to_string(),
                "-p",
                &(5201 + i).to_string(),
                "-u",
                "-l",
                "1200",
                "-b",
                &format!("{each}M"),
                "-t",
                &secs,
                "-J",
                "--logfile",
                &dir.join(format!("best-effort-t{i}.json")).display().to_string(),
            ]
            .map(String::from)
            .to_vec();
            (i, args)
        })
        .collect())
}

/// Stage 6 for net runs: one sender per flow, in its tenant (namespace and
/// cgroup): (tenant index, process).
pub fn start_senders(c: &RunConfig, lab: &Lab, dir: &Path, exe: &Path) -> Result<Vec<(usize, ChildProcess)>> {
    let Some(n) = &c.net else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for f in &n.flows {
        let spec_file = write_sender_spec(c, f, lab, dir, false)?;
        let mut cmd = Command::new(exe);
        cmd.arg("probe")
            .arg(&spec_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("flow-{}.send.err", f.name)))?);
        let tn = &lab.tenants[f.from];
        out.push((f.from, tn.spawn(&mut cmd, false, Default::default())?));
    }
    Ok(out)
}

/// Flow `f`'s sender spec, beside the results; its path. `in_guest`: it
/// runs in its tenant's guest, on the guest's clock.
fn write_sender_spec(c: &RunConfig, f: &FlowSpec, lab: &Lab, dir: &Path, in_guest: bool) -> Result<PathBuf> {
    let to = endpoint_of(lab, &f.to)?;
    let spec = ProbeSpec::FlowSend(FlowSendProbe {
        send: ontime_net::flow::SendSettings {
            to: std::net::SocketAddr::from((to.addr, f.port)),
            rate_bps: f.rate_mbit * 1e6,
            size: f.size,
            duration_ns: c.duration,
            start_after_ns: f.start,
            burst: f.burst,
            clock_offset_ns: 0,
        },
        result: Some(dir.join(format!("flow-{}.send.json", f.name))),
        clock_offset: in_guest.then(|| guest_clock_file(dir, f.from)),
    });
    let spec_file = dir.join(format!("flow-{}.send.probe.json", f.name));
    spec.write(&spec_file)?;
    Ok(spec_file)
}

/// A receiver's grace after its flows' time: the last datagrams, and the
/// guests' go seen up to a poll apart.
const RECEIVE_GRACE: Duration = Duration::from_secs(3);

/// QEMU tenant `i`'s part of a net run, for its job: the channel MTU,
/// static neighbours (the building and the other tenants), the receivers
/// of the flows to it, the senders of the flows from it and its best
/// effort. Writes the senders' specs (the receivers' are written by
/// [`start`]).
pub fn guest_net(c: &RunConfig, lab: &Lab, i: usize, dir: &Path) -> Result<ontime_guest::job::GuestNet> {
    let n = c.net.as_ref().context("no [net] in this run")?;
    let name = ontime_core::names::tenant_name(i);
    let mut neighbours = vec![(lab.building.addr, crate::sandbox::mac_text(&lab.building.mac))];
    for t in lab.tenants.iter().filter(|t| t.index != i) {
        neighbours.push((t.net.addr, crate::sandbox::mac_text(&t.net.mac)));
    }
    let receivers = n
        .flows
        .iter()
        .filter(|f| f.to == name)
        .map(|f| ontime_guest::job::GuestFlow {
            spec: dir.join(format!("flow-{}.probe.json", f.name)),
            err: dir.join(format!("flow-{}.err", f.name)),
            port: f.port,
        })
        .collect();
    let mut senders = Vec::new();
    for f in n.flows.iter().filter(|f| f.from == i) {
        senders.push(ontime_guest::job::GuestFlow {
            spec: write_sender_spec(c, f, lab, dir, true)?,
            err: dir.join(format!("flow-{}.send.err", f.name)),
            port: f.port,
        });
    }
    let clients = best_effort_clients(n, lab, c.duration, dir)?;
    let best_effort_servers = if n.best_effort_to == name {
        clients.iter().map(|(t, _)| 5201 + *t as u16).collect()
    } else {
        Vec::new()
    };
    let last_start = n.flows.iter().map(|f| f.start).max().unwrap_or(0);
    Ok(ontime_guest::job::GuestNet {
        mtu: Some(CHANNEL_MTU),
        neighbours,
        receivers,
        senders,
        best_effort_servers,
        best_effort: clients.into_iter().filter(|(t, _)| *t == i).map(|(_, a)| a).collect(),
        clock_sync: Some(guest_clock_sync(n, lab, i, dir)?),
        ready: guest_ready_file(dir, i),
        go: dir.join("net.go"),
        receive_for: Duration::from_nanos(c.duration.max(last_start)) + RECEIVE_GRACE,
    })
}

/// Guest `i`'s clock offset to the host's (`ontime_net::clock`), measured
/// by its job before its flows start.
pub(crate) fn guest_clock_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(ontime_core::names::guest_clock_file(i))
}

/// The clock echo's port on the building side: the first from 5399 down
/// that no flow to the building uses.
fn clock_echo_port(n: &NetSpec) -> u16 {
    (1024..=5399u16)
        .rev()
        .find(|p| !n.flows.iter().any(|f| f.to == "building" && f.port == *p))
        .unwrap_or(5399)
}

/// Guest `i`'s clock measurement: its spec, written beside the results.
fn guest_clock_sync(n: &NetSpec, lab: &Lab, i: usize, dir: &Path) -> Result<PathBuf> {
    write_guest_clock_sync(lab, clock_echo_port(n), i, dir, 200)
}

/// Guest `i`'s clock measurement against the echo at `port` on the
/// building side: its spec (`tN.clock.probe.json`), beside the results;
/// the guest's job runs it and writes `tN.clock.json`.
pub(crate) fn write_guest_clock_sync(lab: &Lab, port: u16, i: usize, dir: &Path, samples: u32) -> Result<PathBuf> {
    let spec = ProbeSpec::ClockSync(ontime_scenario::probe::ClockSyncProbe {
        server: std::net::SocketAddr::from((lab.building.addr, port)),
        samples,
        result: guest_clock_file(dir, i),
    });
    let file = dir.join(ontime_core::names::guest_clock_probe(i));
    spec.write(&file)?;
    Ok(file)
}

/// The clock echo's port for guests that run a probe (no flows).
pub(crate) const GUEST_CLOCK_PORT: u16 = 5399;

/// The host's clock echo, on the building side, for the guests' flows.
fn start_clock_echo(n: &NetSpec, lab: &Lab, dir: &Path, exe: &Path) -> Result<ChildProcess> {
    start_clock_echo_at(clock_echo_port(n), lab, dir, exe)
}

/// The host's clock echo on the building side at `port`, for the guests
/// to measure their clocks against.
pub(crate) fn start_clock_echo_at(port: u16, lab: &Lab, dir: &Path, exe: &Path) -> Result<ChildProcess> {
    let spec = ProbeSpec::ClockEcho(ontime_scenario::probe::ClockEchoProbe {
        listen: std::net::SocketAddr::from((lab.building.addr, port)),
    });
    let spec_file = dir.join("clock-echo.probe.json");
    spec.write(&spec_file)?;
    let mut cmd = Command::new(exe);
    cmd.arg("probe")
        .arg(&spec_file)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("clock-echo.err"))?);
    let mut echo = spawn_in(&mut cmd, &lab.building.netns, None)?;
    let pid = echo.id();
    echo.wait_until(crate::sandbox::BIND_LIMIT, || has_socket(pid, Bound::Udp(port)))
        .context("the clock echo for the guests (log: clock-echo.err)")?;
    Ok(echo)
}

fn guest_ready_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("t{i}.net-ready"))
}

/// How long the guests' receivers may take to be bound once the guests
/// run their jobs: 120 s, and 180 s more for each recorder a guest's job
/// first waits to start (its scheduler recorder, `observe.guest`; its I/O
/// recorder, `observe.io`: a TCG guest loading BPF on a busy host).
pub fn guest_ready_limit(c: &RunConfig) -> Duration {
    let recorders = c.records_guests() as u64 + c.observe.io as u64;
    Duration::from_secs(120 + 180 * recorders)
}

/// Waits until every guest's receivers are bound (each guest says so),
/// then tells them all to start sending. A guest whose QEMU ends first, or
/// a stop request, ends the wait.
pub fn go_when_guests_ready(
    dir: &Path,
    guests: &mut [(usize, ChildProcess)],
    stop: &std::sync::atomic::AtomicBool,
    limit: Duration,
) -> Result<()> {
    let t0 = std::time::Instant::now();
    loop {
        let waiting: Vec<usize> = guests
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| !guest_ready_file(dir, *i).exists())
            .collect();
        if waiting.is_empty() || stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        if let Some(i) = guests
            .iter_mut()
            .find_map(|(i, q)| q.try_wait().is_some().then_some(*i))
        {
            anyhow::bail!("tenant {i}'s guest ended before its flows' receivers were bound (console: t{i}.console.log, flow-*.err)");
        }
        if t0.elapsed() > limit {
            anyhow::bail!(
                "the flows' receivers in guest(s) {} were not bound within {} s (flow-*.err, t*.console.log)",
                waiting.iter().map(|i| format!("t{i}")).collect::<Vec<_>>().join(", "),
                limit.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(dir.join("net.go"), b"").context("telling the guests to send (net.go)")
}

impl NetRun {
    /// Stops receivers (they write their results), the best effort and the
    /// controller (its report goes to `net.json`, and back to the caller
    /// for the run's explanation).
    pub fn finish(mut self, dir: &Path) -> (NetOutcome, Option<ControllerReport>) {
        if let Some(a) = self.adder.take() {
            if let Ok(list) = a.join() {
                for (name, r) in list {
                    record(&mut self.outcome, &name, r);
                }
            }
        }
        for r in &mut self.receivers {
            r.stop();
        }
        // The clients end with the flows; a moment for their last report.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(5) && self.best_effort.iter_mut().any(|c| c.try_wait().is_none()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.best_effort.clear();
        self.outcome.best_effort = std::fs::read_dir(dir)
            .map(|d| {
                let mut v: Vec<String> = d
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("best-effort-t") && n.ends_with(".json"))
                    .collect();
                v.sort();
                v
            })
            .unwrap_or_default();
        let report: Result<ControllerReport> = match self.controller.take() {
            Some(c) => c.stop(),
            None => Ok(ControllerReport::default()),
        };
        let report = match report.and_then(|r| {
            ontime_core::fsio::write_atomic(&dir.join("net.json"), serde_json::to_string_pretty(&r)?.as_bytes())?;
            Ok(r)
        }) {
            Ok(r) => {
                self.outcome.controller = Some("net.json".into());
                Some(r)
            }
            Err(e) => {
                self.outcome.error = Some(format!("{e:#}"));
                None
            }
        };
        for f in &mut self.outcome.flows {
            let (r, s) = (format!("flow-{}.json", f.name), format!("flow-{}.send.json", f.name));
            f.result = dir.join(&r).exists().then_some(r);
            f.sender = dir.join(&s).exists().then_some(s);
        }
        (self.outcome.clone(), report)
    }
}

/// What a run's flows crossed, for explaining their late datagrams.
#[derive(Clone, Copy, Debug)]
pub struct NetPath {
    /// The relay's set one-way delay.
    pub nominal_ns: u64,
    /// The tenants are QEMU guests: their senders' and receivers'
    /// threads are the guests', not in the host's recording.
    pub in_guests: bool,
}

/// `net-explain.json`: the relay thread's part of each channel's worst
/// misses (net.json's `miss_causes`) and each flow's worst late datagrams
/// (its receiver's `late_events`), explained on the run's recording along
/// their path: the sender's thread (from `flow-NAME.send.json`), the
/// relay's, the receiver's. Nothing when there is neither, or no whole
/// recording (a flight recorder's windows are not read here). A receiver
/// in a QEMU guest is not explained (its thread is the guest's).
pub fn explain_net(dir: &Path, report: Option<&ControllerReport>, flows: &[FlowOutcome], path: NetPath) -> Result<()> {
    use ontime_explain::kept::{FlowLateExplanation, NetExplanation, RelayPartOfMisses, NET_EXPLANATION};
    let recording = dir.join(crate::observe::RECORDING);
    let windows = dir.join(crate::observe::FLIGHT_DIR);
    let whole = recording.exists();
    if !whole && !windows.is_dir() {
        return Ok(());
    }
    let per_channel: Vec<(&ontime_net::miss::MissCauses, Vec<(u64, u64)>)> = report
        .iter()
        .flat_map(|r| r.miss_causes.iter())
        .map(|c| (c, c.worst.iter().flat_map(|w| w.relay_stretches()).collect::<Vec<_>>()))
        .filter(|(_, s)| !s.is_empty())
        .collect();
    let mut late_flows = Vec::new();
    // Receivers in QEMU guests: (flow, events, tenant index).
    let mut guest_flows = Vec::new();
    for f in flows {
        let Some(result) = &f.result else { continue };
        if path.in_guests && f.to != "building" {
            if let Some((set, _)) = ontime_explain::kept::read(&dir.join(result))? {
                if !set.events.is_empty() {
                    let i = ontime_core::names::tenant_index(&f.to).unwrap_or(0);
                    guest_flows.push((f.name.clone(), set, i));
                }
            }
            continue;
        }
        if let Some((set, _)) = ontime_explain::kept::read(&dir.join(result))? {
            if !set.events.is_empty() {
                let sender_tid = match (&f.sender, path.in_guests) {
                    (Some(s), false) => sender_tid(&dir.join(s)),
                    _ => None,
                };
                let datagrams = ontime_explain::summary::DatagramPath {
                    sender_tid,
                    nominal_ns: path.nominal_ns,
                };
                late_flows.push((f.name.clone(), set, datagrams));
            }
        }
    }
    if per_channel.is_empty() && late_flows.is_empty() && guest_flows.is_empty() {
        return Ok(());
    }
    let mut out = NetExplanation::default();
    if !whole {
        // A flight recorder's windows: each flow's datagrams on the kept
        // stretches that hold them; the relay's part of the channels'
        // misses is read from whole recordings only.
        if !guest_flows.is_empty() {
            out.notes.push(
                "datagrams late at receivers in guests are explained on whole recordings only (observe.flight = \"off\")"
                    .into(),
            );
        }
        if !per_channel.is_empty() {
            out.notes.push(
                "the relay's part of the channels' misses is explained on whole recordings only (observe.flight = \"off\"); net.json has their causes"
                    .into(),
            );
        }
        let stretches = ontime_trace::store::contiguous(ontime_trace::store::window_files(&windows)?);
        let sets: Vec<_> = late_flows
            .iter()
            .map(|(_, set, datagrams)| ontime_explain::summary::StretchSet::datagrams(set, *datagrams))
            .collect();
        let explained = ontime_explain::summary::explain_stretches(&stretches, &sets);
        for ((flow, _, _), explanation) in late_flows.iter().zip(explained) {
            out.flows.push(FlowLateExplanation {
                flow: flow.clone(),
                explanation,
            });
        }
        return ontime_core::fsio::write_atomic(&dir.join(NET_EXPLANATION), &serde_json::to_vec(&out)?);
    }
    let rec = ontime_trace::recording::Recording::read(&recording)?;
    for (c, stretches) in per_channel {
        let Some(explanation) = ontime_explain::summary::explain_relay_stretches(&rec, &stretches) else {
            anyhow::bail!("the relay's thread is not in {}", recording.display());
        };
        out.channels.push(RelayPartOfMisses {
            channel: c.channel,
            from: c.from.clone(),
            explanation,
        });
    }
    for (flow, set, datagrams) in late_flows {
        let explanation = ontime_explain::summary::explain_datagrams(&rec, &set, datagrams);
        out.flows.push(FlowLateExplanation { flow, explanation });
    }
    for (flow, set, i) in guest_flows {
        match explain_in_guest(&rec, dir, i, &set) {
            Ok(explanation) => out.flows.push(FlowLateExplanation { flow, explanation }),
            Err(why) => out
                .notes
                .push(format!("flow {flow}: its late datagrams are not explained: {why}")),
        }
    }
    ontime_core::fsio::write_atomic(&dir.join(NET_EXPLANATION), &serde_json::to_vec(&out)?)
}

/// A flow's late datagrams at its receiver in tenant `i`'s guest, on the
/// recording the guest made of itself (`observe.guest`) placed on the
/// host's clock and split by `rec`, the host's, at the guest's vCPU
/// threads; Err says why not.
fn explain_in_guest(
    rec: &ontime_trace::recording::Recording,
    dir: &Path,
    i: usize,
    set: &ontime_core::late::LateSet,
) -> std::result::Result<ontime_explain::RunExplanation, String> {
    let side = ontime_explain::kept::guest_side(dir, i)
        .ok_or_else(|| format!("t{i}'s guest did not record itself (observe.guest = true records it)"))??;
    let guest = ontime_trace::recording::Recording::read(&side.recording).map_err(|e| format!("{e:#}"))?;
    let name = ontime_core::names::tenant_name(i);
    let mut tids = ontime_explain::summary::guest_threads(rec, &name);
    tids.extend(ontime_explain::summary::relay_tid(rec));
    let tl = ontime_explain::timeline::Timeline::from_recording(rec, &tids);
    let vcpus = ontime_explain::summary::vcpu_threads(rec, &name);
    Ok(ontime_explain::summary::explain_guest_datagrams_on(
        &tl,
        rec,
        &guest,
        side.offset_ns,
        &vcpus,
        set,
    ))
}

/// The sending thread a flow's sender report names (None: an older
/// report, or unreadable).
fn sender_tid(report: &Path) -> Option<u32> {
    let text = std::fs::read(report).ok()?;
    serde_json::from_slice::<ontime_net::flow::SendReport>(&text).ok()?.tid
}
