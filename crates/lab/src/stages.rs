//! The lab's own [`RunHost`]: each run as stages that each own what they
//! start: lab (tenants and the WAN delay) -> relay -> gateway -> recorder
//! -> loads -> probes -> wait -> results, in sandboxes (network namespace
//! + cgroup + k vCPU threads). Needs root.

use crate::cgroup::Limits;
use crate::runner::{Event, RunHost, RunnerOptions};
use crate::sandbox::{iperf3_server, spawn_in, Lab, TenantSpec};
use crate::{names, sys};
use anyhow::{bail, Context, Result};
use ontime_core::fsio::write_atomic;
use ontime_core::proc::{ChildProcess, SpawnOptions};
use ontime_core::rt::{parse_cpu_list, ThreadSettings};
use ontime_load::{LoadGuard, LoadProfile};
use ontime_net::{Relay, RelaySettings};
use ontime_scenario::probe::{GatewayProbe, ProbeSpec};
use ontime_scenario::record::{HostCpu, ReferenceJudgement, RunRecord, TenantOutcome, WanDelayBy, GATEWAY_RESULT};
use ontime_scenario::scenario::{parse_bytes, Backend, LoadKind, Place, PlannedRun, WanDelay};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs in sandboxes on this host.
#[derive(Default)]
pub struct Sandboxes;

impl RunHost for Sandboxes {
    fn prepare(&mut self, plan: &ontime_scenario::scenario::Plan) -> Result<Box<dyn std::any::Any>> {
        anyhow::ensure!(
            sys::is_root(),
            "the lab needs root (namespaces, cgroups, packet sockets): run it with sudo"
        );
        // What this host must have for the plan's guests, before anything
        // is made.
        for run in plan.runs.iter().filter(|r| r.config.tenant.backend == Backend::Qemu) {
            crate::qemu::preflight(&run.config).map_err(|e| crate::qemu::HostCannot(format!("{e:#}")))?;
        }
        // Before anything is created: a second lab would collide with this one.
        let lock = crate::lock::LabLock::acquire()?;
        // A run killed before it could put a kernel setting back: do it now.
        for s in ontime_core::sysctl::restore_leftovers()? {
            ontime_core::errln!("ontime lab: restored {s}, left changed by a run that was killed");
        }
        crate::clean::remove_killed_labs_leftovers()?;
        Ok(Box::new(lock))
    }

    fn run(
        &mut self,
        run: &PlannedRun,
        dir: &Path,
        opts: &RunnerOptions,
        rec: &mut RunRecord,
        on: &mut dyn FnMut(Event),
    ) -> Result<()> {
        one_run(run, dir, opts, rec, on)
    }
}

fn netem_available(dev: &str) -> bool {
    let ok = Command::new("tc")
        .args(["qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        let _ = Command::new("tc").args(["qdisc", "del", "dev", dev, "root"]).status();
    }
    ok
}

/// One run, as stages that each own what they start: lab (tenants and the
/// WAN delay) -> relay -> gateway -> recorder -> loads -> probes -> wait ->
/// results. Whatever fails, the guards of the stages already started undo
/// them in reverse (the probes stop and write their results first).
fn one_run(
    run: &PlannedRun,
    dir: &Path,
    opts: &RunnerOptions,
    rec: &mut RunRecord,
    on: &mut dyn FnMut(Event),
) -> Result<()> {
    let c = &run.config;
    let native = c.tenant.backend == Backend::Native;
    let wall_start = std::time::SystemTime::now();
    let _rr = match c.host.rr_timeslice {
        Some(ns) => {
            let g = ontime_core::sysctl::SysctlGuard::set(
                ontime_core::sysctl::RR_TIMESLICE,
                &(ns / 1_000_000).to_string(),
            )?;
            rec.environment.rr_timeslice_ms = g.current()?.parse().ok();
            Some(g)
        }
        None => None,
    };
    let (mut lab, use_netem) = start_lab(c, rec)?;
    let guests = match c.tenant.backend {
        Backend::Qemu => {
            let g = crate::qemu::GuestSetup::prepare(c, &lab)?;
            rec.environment.vm = Some(g.environment(c));
            Some(g)
        }
        _ => None,
    };
    if let Some(n) = &c.net {
        crate::netlab::prepare(n, &lab)?;
    }
    // Held once for the run, as cyclictest does; probes are told not to.
    let _dma = ontime_core::rt::DmaLatencyGuard::hold(0).ok();
    let relay = start_relay(c, &lab, use_netem)?;
    start_gateway(c, &mut lab, dir, &opts.exe)?;
    let net = match &c.net {
        Some(_) => Some(crate::netlab::start(c, &lab, &relay, dir, &opts.exe, guests.is_some())?),
        None => None,
    };
    // The scheduler recorder watches loads and probes from their start.
    let observer = start_recorder(c, &lab, dir, rec);
    if c.tenant.io.is_some() {
        // Every cell starts from cold caches, guest and host (document 004
        // rebooted its VMs); this drops the whole host's page cache.
        drop_caches()?;
        rec.environment
            .notes
            .push("page cache dropped before the run (host-wide)".into());
    }
    let io_observer = if c.observe.io {
        match crate::iorec::start(&lab, dir, c.observe.io_calls, guests.as_ref()) {
            Ok(o) => Some(o),
            Err(e) => {
                rec.io = Some(ontime_scenario::record::IoOutcome {
                    error: Some(format!("{e:#}")),
                    ..Default::default()
                });
                None
            }
        }
    } else {
        None
    };
    let loads = start_loads(c, &lab, native)?;
    let cpu_before = HostCpu::now();
    let mut guest_files = Vec::new();
    let mut commands = Commands(Vec::new());
    let mut probes = match (&c.net, &guests) {
        // Each guest runs its flows' senders and receivers.
        (Some(_), Some(g)) => {
            let mut out = Vec::new();
            for tn in &lab.tenants {
                let net = crate::netlab::guest_net(c, &lab, tn.index, dir)?;
                let (qemu, files) = g.start(c, tn, dir, &opts.exe, Some(&net))?;
                out.push((tn.index, qemu));
                guest_files.push(files);
            }
            out
        }
        (Some(_), None) => crate::netlab::start_senders(c, &lab, dir, &opts.exe)?,
        (None, _) => {
            if c.records_guests() {
                // Each guest measures its clock against the host's before
                // its probe starts, to place its late events and its own
                // recording on the host's clock.
                let port = crate::netlab::GUEST_CLOCK_PORT;
                let echo = crate::netlab::start_clock_echo_at(port, &lab, dir, &opts.exe)?;
                lab.children().push(echo);
                for t in &lab.tenants {
                    // Each exchange crosses the relay twice: 50 take about
                    // a second of the run (the injections run meanwhile).
                    crate::netlab::write_guest_clock_sync(&lab, port, t.index, dir, 50)?;
                    // The causes injected inside the guest, which its job
                    // starts beside its probe.
                    for (file, spec) in c.guest_injectors(dir, t.index).map_err(|e| anyhow::anyhow!(e))? {
                        spec.write(&file)?;
                    }
                }
            }
            start_probes(
                c,
                &lab,
                dir,
                &opts.exe,
                native,
                guests.as_ref(),
                &mut guest_files,
                &mut commands.0,
            )?
        }
    };
    // Which tenant each probe is (a net run's probes are its flows' senders,
    // or its guests).
    let probe_tenants: Vec<usize> = probes.iter().map(|(i, _)| *i).collect();
    let mut cache_bound = None;
    if let Some(g) = &guests {
        await_guests(c, g, &mut probes, &guest_files, opts, rec)?;
        cache_bound = HostCacheBound::start(c, &lab)?;
        if c.net.is_some() {
            crate::netlab::go_when_guests_ready(dir, &mut probes, &opts.stop, crate::netlab::guest_ready_limit(c))?;
        }
    }
    let injectors = start_injectors(c, &lab, dir, &opts.exe)?;
    let stalls = RelayStalls::start(c, &relay, dir)?;
    let mut exits = if probes.is_empty() && c.net.is_some() {
        // A controller to talk to and no flows of its own (`ontime net controller`).
        hold_for(run, opts, on);
        Vec::new()
    } else {
        wait_for_probes(run, &mut probes, &guest_files, opts, on)?
    };
    stop_commands(commands)?;
    // Stopped, each writes the windows it actually held.
    for mut j in injectors {
        j.stop();
    }
    stalls.finish()?;
    // The probes are done with the gateway (and the guests' clock echo):
    // stopped now, it writes its counters and its stalls' windows before
    // the run is explained.
    for child in lab.children().iter_mut() {
        child.stop();
    }
    if let (Some(b), Some(vm)) = (cache_bound, rec.environment.vm.as_mut()) {
        vm.host_cache_bound = Some(b.bound);
        vm.vmm_resident_bytes = b.finish();
    }
    // A guest's process ends with the guest; its job's status is the probe's.
    for (k, f) in guest_files.iter().enumerate() {
        let oom_kills = lab.tenants.get(f.index).and_then(|t| t.cgroup.as_ref()?.oom_kills());
        match f.job_status(oom_kills) {
            Ok(status) => exits[k] = Some(status),
            // Stopped by the user: the guest went down with its probe.
            Err(_) if opts.stop.load(Ordering::Relaxed) => {}
            Err(e) => return Err(e),
        }
    }
    if let (Some(a), Some(b)) = (cpu_before, HostCpu::now()) {
        rec.host_cpu = Some(a.until(&b));
    }
    let gone = lab.vanished();
    if !gone.is_empty() {
        bail!(
            "the lab was destroyed under the run ({} gone; `ontime lab clean --force`?): its results are not valid",
            gone.join(", ")
        );
    }

    if let Some(o) = io_observer {
        rec.io = Some(o.finish(dir));
    }
    if let Some(o) = observer {
        rec.observe = Some(o.finish(dir));
    }
    if let Some(n) = net {
        let (outcome, report) = n.finish(dir);
        if rec.observe.is_some() {
            let path = crate::netlab::NetPath {
                nominal_ns: c.host.relay_delay,
                in_guests: guests.is_some(),
            };
            if let Err(e) = crate::netlab::explain_net(dir, report.as_ref(), &outcome.flows, path) {
                ontime_core::errln!(
                    "ontime lab: {}: the net's late packets are not explained: {e:#}",
                    dir.display()
                );
            }
        }
        // A flow's receiver result stands for its sending tenant, whose
        // exit is its sender's (its guest's, with QEMU tenants).
        for (k, f) in outcome.flows.iter().enumerate() {
            let probe = if guests.is_some() {
                probe_tenants.iter().position(|t| *t == f.from)
            } else {
                Some(k)
            };
            rec.tenants.push(TenantOutcome {
                index: f.from,
                result: f.result.clone(),
                exit: probe.and_then(|p| exits.get(p).copied().flatten()),
            });
        }
        rec.net = Some(outcome);
    }
    // stress-ng groups, iperf3 clients and servers stop as their guards go.
    drop(loads);
    let report = relay.stop()?;
    write_atomic(
        &dir.join("relay.json"),
        serde_json::to_string_pretty(&report)?.as_bytes(),
    )?;
    rec.relay = Some(report);
    for (k, (i, _)) in probes.iter().enumerate().filter(|_| c.net.is_none()) {
        let result = dir.join(format!("t{i}.json"));
        rec.tenants.push(TenantOutcome {
            index: *i,
            result: result.exists().then(|| format!("t{i}.json")),
            exit: exits[k],
        });
    }
    drop(probes);
    // Tears the lab down (the gateway stopped above and wrote its counters).
    lab.destroy();
    let gw = dir.join(GATEWAY_RESULT);
    if gw.exists() {
        // The gateway's own file: broken, it is ontime's failure, not bad input.
        rec.gateway =
            Some(ontime_scenario::results::read_json(&gw, "gateway result").map_err(|e| anyhow::anyhow!("{e:#}"))?);
    }
    let log = dir.join(GATEWAY_LOG);
    if let (Some(cr), true) = (&c.tenant.crawl, log.exists()) {
        let a = ontime_gateway::recvlog::analyze(&log, cr.period, cr.timeout.unwrap_or(cr.period), None)?;
        let mut hlog = ontime_core::hlog::HlogFile::create(
            &dir.join(GATEWAY_HLOG),
            "ontime lab: every poll's interval error from the gateway's receive log",
            wall_start,
        )?;
        hlog.write(
            "interval_error",
            &a.histogram,
            Duration::ZERO,
            Duration::from_nanos(c.duration),
        )?;
        hlog.flush()?;
        // Tenant i polls building b{i}. One none of whose polls reached
        // the gateway is in no building's judgement: it missed them all.
        let tenants = (0..c.tenant.count)
            .map(|i| {
                let name = format!("b{i}");
                match a.buildings.iter().find(|b| b.building == name) {
                    Some(b) => ontime_scenario::record::TenantReference {
                        index: i,
                        missed: b.missed,
                        interval_error: b.interval_error.clone(),
                    },
                    None => ontime_scenario::record::TenantReference {
                        index: i,
                        missed: (cr.rate * c.duration as f64 / 1e9).round() as u64,
                        interval_error: ontime_core::stats::LatencyHistogram::new().summary(None),
                    },
                }
            })
            .collect();
        rec.reference = Some(ReferenceJudgement {
            log: GATEWAY_LOG.into(),
            missed: a.missed,
            interval_error: a.interval_error,
            incomplete: a.incomplete,
            tenants,
            hlog: Some(GATEWAY_HLOG.into()),
        });
    }
    Ok(())
}

/// Its judgement as a histogram log.
const GATEWAY_HLOG: &str = "gateway.hlog";

/// The building gateway's receive log (QEMU tenants' and Modbus runs).
const GATEWAY_LOG: &str = "gateway.recv.log";

/// Writes back dirty pages and drops the page cache, dentries and inodes.
fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .context("cannot drop the page cache (/proc/sys/vm/drop_caches): I/O tenants need root")
}

/// Stage 1: the tenants' sandboxes and the building side, and who adds the
/// WAN delay (netem on the host-side links where the kernel has it and the
/// scenario allows it, else the relay).
fn start_lab(c: &ontime_scenario::scenario::RunConfig, rec: &mut RunRecord) -> Result<(Lab, bool)> {
    let t = &c.tenant;
    let mut limits = Limits {
        cpu_quota: t.cpu_quota,
        cpu_shares: t.cpu_shares,
        cpuset: match &t.cpuset {
            Some(s) => parse_cpu_list(s).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        },
        memory_bytes: t
            .memory
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        swap_bytes: t.swap_bytes().map_err(anyhow::Error::msg)?,
        rt_runtime_us: None,
    };
    let qemu = t.backend == Backend::Qemu;
    if qemu {
        // The guest's memory is inside QEMU's process, and so is QEMU's
        // own (under TCG its translation cache is as large as a small
        // guest's RAM): host.vmm_memory, the host cache's bound, is set
        // above what QEMU holds otherwise (`HostCacheBound`).
        limits.memory_bytes = None;
        limits.swap_bytes = None;
    }
    let disk = match &t.disk {
        Some(_) if qemu => None,
        Some(d) => Some(crate::disk::DiskSpec {
            size: parse_bytes(&d.size).map_err(anyhow::Error::msg)?,
            direct: d.direct,
            swap: t.swap_bytes().map_err(anyhow::Error::msg)?,
        }),
        None => None,
    };
    let specs = vec![TenantSpec { limits, disk }; t.count];
    let lab = Lab::create(&specs)?;
    rec.environment.netem = netem_available(&lab.building.host_if);
    rec.environment.tenant_rt_runtime_us = lab.tenant_rt_runtime_us;
    let use_netem = match c.host.wan_delay {
        WanDelay::Netem if !rec.environment.netem => {
            anyhow::bail!("host.wan_delay = \"netem\" but this kernel has no netem qdisc: use auto or relay")
        }
        WanDelay::Netem => true,
        WanDelay::Auto => rec.environment.netem,
        WanDelay::Relay => false,
    };
    if use_netem {
        // netem on every host-side end delays each direction once: frames
        // to the building leave through its host end, frames to a tenant
        // through the tenant's. The relay then only forwards.
        let us = format!("{}us", c.host.relay_delay / 1000);
        let ends = std::iter::once(&lab.building).chain(lab.tenants.iter().map(|t| &t.net));
        for e in ends {
            let st = Command::new("tc")
                .args([
                    "qdisc", "add", "dev", &e.host_if, "root", "netem", "delay", &us, "limit", "100000",
                ])
                .status()
                .context("cannot run tc")?;
            anyhow::ensure!(st.success(), "tc qdisc add netem on {} failed", e.host_if);
        }
        rec.environment.wan_delay_by = WanDelayBy::Netem;
    }
    Ok((lab, use_netem))
}

/// Stage 2: the host I/O path.
fn start_relay(c: &ontime_scenario::scenario::RunConfig, lab: &Lab, use_netem: bool) -> Result<Relay> {
    let relay_settings = RelaySettings {
        delay_ns: if use_netem { 0 } else { c.host.relay_delay },
        rate_bps: c.host.relay_rate_mbit.map(|m| (m * 1e6) as u64),
        threads: c.host.relay_threads,
        thread: ThreadSettings {
            policy: c.host.relay_policy,
            affinity: match &c.host.relay_affinity {
                Some(a) => parse_cpu_list(a).map_err(anyhow::Error::msg)?,
                None => Vec::new(),
            },
            timer_slack_ns: Some(1),
        },
        // Document 003's bottleneck: EDF/WFQ on one link.
        channels: c.net.as_ref().map(|n| ontime_net::relay::ChannelLink {
            rate_bps: (n.link_mbit * 1e6) as u64,
            best_effort_buffer_bytes: n.buffer.as_deref().and_then(|b| parse_bytes(b).ok()),
            edf_guard: n.edf_guard,
        }),
        between_tenants: c.net.as_ref().is_some_and(crate::netlab::between_tenants),
    };
    let ports: Vec<_> = lab.tenants.iter().map(|t| t.net.port()).collect();
    Relay::start(lab.building.port(), &ports, relay_settings)
}

/// Stage 3: the building side: one gateway process with a building per
/// tenant (crawl workloads only), owned by the lab.
fn start_gateway(c: &ontime_scenario::scenario::RunConfig, lab: &mut Lab, dir: &Path, exe: &Path) -> Result<()> {
    let t = &c.tenant;
    if let Some(cr) = &t.crawl {
        use ontime_scenario::scenario::CrawlProtocol;
        // Building 0's port: BACnet/IP gives each building its own
        // address (port 47808 + i); HTTP and Modbus serve all on one.
        let (port, _) = c.gateway_port(0);
        let bacnet = cr.protocol == CrawlProtocol::Bacnet;
        let mut config = ontime_gateway::config::GatewayConfig::generated(
            std::net::SocketAddr::from((names::building_addr(), port)),
            t.count as u32,
            c.gateway_points(),
            bacnet,
        );
        config.policy = c.host.gateway_policy;
        config.protocol = match cr.protocol {
            CrawlProtocol::Http => ontime_gateway::config::Protocol::Http,
            CrawlProtocol::Modbus => ontime_gateway::config::Protocol::Modbus,
            CrawlProtocol::Bacnet => ontime_gateway::config::Protocol::Bacnet,
        };
        // A guest's clock is its own: its crawler's interval error is
        // judged again from the gateway's kernel receive stamps (the host's
        // clock), so a drifting guest cannot hide an error. Modbus and
        // BACnet answers carry no receive time: the crawler judges its own
        // sends, and the gateway's log the arrivals.
        let modbus = cr.protocol == CrawlProtocol::Modbus;
        if t.backend == Backend::Qemu || modbus || bacnet {
            config.log = Some(dir.join(GATEWAY_LOG));
        }
        let spec = ProbeSpec::Gateway(GatewayProbe {
            config,
            result: Some(dir.join(GATEWAY_RESULT)),
            stalls: c.gateway_stalls(dir).map_err(|e| anyhow::anyhow!(e))?,
        });
        let spec_file = dir.join("gateway.probe.json");
        spec.write(&spec_file)?;
        let mut gw = Command::new(exe);
        gw.arg("probe")
            .arg(&spec_file)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("gateway.err"))?);
        let mut child = spawn_in(&mut gw, &lab.building.netns, None)?;
        let ready = said(&mut child, "listening on");
        lab.children().push(child);
        ready
            .recv_timeout(Duration::from_secs(10))
            .context("the gateway did not start listening within 10 s (see gateway.err)")?;
    }

    Ok(())
}

/// A message once `child`'s standard output (piped) has said `what` on
/// a line; its output is read to its end meanwhile.
fn said(child: &mut ChildProcess, what: &'static str) -> std::sync::mpsc::Receiver<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(stdout) = child.child_mut().and_then(|c| c.stdout.take()) {
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains(what) {
                    let _ = tx.send(());
                }
            }
        });
    }
    rx
}

/// The causes injected at known times (`[[inject]]`), on the host, once the
/// probes run; the run's directory name seeds their draws.
fn start_injectors(
    c: &ontime_scenario::scenario::RunConfig,
    lab: &Lab,
    dir: &Path,
    exe: &Path,
) -> Result<Vec<ChildProcess>> {
    let veths: Vec<ontime_scenario::probe::TenantVeth> = lab
        .tenants
        .iter()
        .map(|t| ontime_scenario::probe::TenantVeth {
            host_if: t.net.host_if.clone(),
            mac: t.net.mac,
            addr: t.net.addr,
        })
        .collect();
    let specs = c.injectors(dir, &veths).map_err(|e| anyhow::anyhow!(e))?;
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let mut options = SpawnOptions::default();
        if let ontime_scenario::probe::ProbeSpec::SoftirqFlood(f) = spec {
            // The flood's receipt on the tenant's CPU, not the flooder's.
            if let Some(t) = lab.tenants.iter().find(|t| t.net.host_if == f.flood.host_if) {
                t.net.steer_receipt_to(f.tenant_cpu)?;
            }
            // Pinned from its exec: its start-up (2 ms once) on the
            // tenant's CPU was charged to the flooder, who is never the
            // culprit the ground truth names.
            options.affinity = vec![f.flood.flooder_cpu];
        }
        let file = dir.join(format!("inject-{i}.probe.json"));
        spec.write(&file)?;
        let mut cmd = Command::new(exe);
        cmd.arg("probe")
            .arg(&file)
            .stderr(std::fs::File::create(dir.join(format!("inject-{i}.err")))?);
        out.push(ChildProcess::spawn("an injector", &mut cmd, options)?);
    }
    Ok(out)
}

/// The run's relay stalls (`cause = "relay-stall"`): threads of the
/// runner that hold its relay in the windows each draws; dropped, they
/// stop holding it.
struct RelayStalls {
    stop: Arc<AtomicBool>,
    /// Each stall's thread and its file.
    threads: Vec<ontime_explain::truth::Holder>,
}

impl RelayStalls {
    fn start(c: &ontime_scenario::scenario::RunConfig, relay: &Relay, dir: &Path) -> Result<RelayStalls> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (timing, file) in c.relay_stalls(dir).map_err(|e| anyhow::anyhow!(e))? {
            let hold = relay.hold();
            let t = ontime_load::inject::spawn_holder("ontime-stall", timing, stop.clone(), move |until| {
                hold.hold_until(until)
            })?;
            threads.push((t, file));
        }
        Ok(RelayStalls { stop, threads })
    }

    /// Stops holding the relay and writes each stall's windows.
    fn finish(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        ontime_explain::truth::Injections::write_held(
            ontime_explain::truth::InjectedClass::RelayStall,
            std::mem::take(&mut self.threads),
        )
    }
}

impl Drop for RelayStalls {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Stage 4: the scheduler recorder; a recorder that cannot start is noted
/// in the record and fails the run once its probes are done
/// ([`recorders_worked`]).
fn start_recorder(
    c: &ontime_scenario::scenario::RunConfig,
    lab: &Lab,
    dir: &Path,
    rec: &mut RunRecord,
) -> Option<crate::observe::Observer> {
    // Off the tenants' CPUs when they are pinned and others remain.
    let housekeeping = ontime_core::rt::housekeeping_cpus(&lab.tenant_cpus);
    match crate::observe::start(
        c.observe.recorder,
        c.observe.profile,
        c.flight(dir),
        &housekeeping,
        // The flows' receivers, to explain their late datagrams.
        c.net.is_some(),
        lab,
        dir,
    ) {
        Ok(o) => Some(o),
        Err(e) => {
            rec.observe = Some(ontime_scenario::record::ObserveOutcome {
                recorder: c.observe.recorder.as_str().into(),
                error: Some(format!("{e:#}")),
                ..Default::default()
            });
            None
        }
    }
}

/// The loads of a run; dropping it stops them all.
struct Loads {
    _stress: Vec<LoadGuard>,
    _wan: Vec<ChildProcess>,
}

/// Stage 5: stress-ng on the host or in every tenant, and the wan flows.
fn start_loads(c: &ontime_scenario::scenario::RunConfig, lab: &Lab, native: bool) -> Result<Loads> {
    let in_guest = c.tenant.backend == Backend::Qemu;
    let mut loads: Vec<LoadGuard> = Vec::new();
    let mut wan: Vec<ChildProcess> = Vec::new();
    for l in &c.effective_loads() {
        let profile: LoadProfile = match l.profile {
            LoadKind::None => continue,
            LoadKind::Wan => {
                wan.extend(start_wan(lab, l.rate_mbit, c.duration, native, in_guest)?);
                continue;
            }
            // Started by each guest's job, beside its probe.
            LoadKind::Stress(_) if in_guest && l.place == Place::Tenants => continue,
            LoadKind::Stress(p) => p,
        };
        let max = Duration::from_nanos(c.duration) + Duration::from_secs(60);
        match l.place {
            Place::Host => loads.push(LoadGuard::start(profile, l.workers, max)?),
            Place::Tenants => {
                for tn in &lab.tenants {
                    let (mut cmd, temp) =
                        ontime_load::command(profile, l.workers, l.vm_bytes().map_err(anyhow::Error::msg)?, max)?;
                    let child = tn.spawn(&mut cmd, native, ontime_load::spawn_options())?;
                    loads.push(LoadGuard::adopt(child, profile, temp)?);
                }
            }
        }
    }
    if !loads.is_empty() {
        std::thread::sleep(Duration::from_millis(500));
    }

    Ok(Loads {
        _stress: loads,
        _wan: wan,
    })
}

/// Stage 6: one probe process per tenant, in its namespace and cgroup:
/// (tenant index, process), stopped (SIGTERM: they write their results)
/// when dropped. QEMU tenants: the guest is the process, the probe runs
/// inside it; `guest_files` gets where each says how it went.
#[allow(clippy::too_many_arguments)]
fn start_probes(
    c: &ontime_scenario::scenario::RunConfig,
    lab: &Lab,
    dir: &Path,
    exe: &Path,
    native: bool,
    guests: Option<&crate::qemu::GuestSetup>,
    guest_files: &mut Vec<crate::qemu::GuestFiles>,
    commands: &mut Vec<(usize, ChildProcess)>,
) -> Result<Vec<(usize, ChildProcess)>> {
    let online = ontime_core::limits::online_cpus();
    let vcpus = if native { online } else { c.tenant.vcpus };
    let mut probes = Vec::new();
    for tn in &lab.tenants {
        let i = tn.index;
        // The tenant's whole job as a typed spec beside its results: no
        // command line is assembled (ontime-scenario::probe).
        let Some(spec) = c.probe(i, vcpus, dir).map_err(anyhow::Error::msg)? else {
            continue;
        };
        let spec_file = dir.join(format!("t{i}.probe.json"));
        spec.write(&spec_file)?;
        if let Some(g) = guests {
            let (qemu, files) = g.start(c, tn, dir, exe, None)?;
            probes.push((i, qemu));
            guest_files.push(files);
            continue;
        }
        if let (ProbeSpec::Wire(_), Some(command)) = (&spec, &c.tenant.command) {
            let housekeeping = ontime_core::rt::housekeeping_cpus(&lab.tenant_cpus);
            probes.push((i, start_wire(dir, exe, &spec_file, i, housekeeping)?));
            commands.push((i, start_command(c, tn, dir, command, native)?));
            continue;
        }
        let mut cmd = Command::new(exe);
        cmd.arg("probe").arg(&spec_file);
        cmd.stdout(std::fs::File::create(dir.join(format!("t{i}.out")))?)
            .stderr(std::fs::File::create(dir.join(format!("t{i}.err")))?);
        let child = tn.spawn(&mut cmd, native, Default::default())?;
        probes.push((i, child));
    }

    Ok(probes)
}

/// `tenant.command`'s capture on tenant `i`'s veth, on the host (outside
/// the tenant, off its CPUs where others remain), returned once it
/// captures: the command starts after it and none of its requests is
/// missed. Its messages go to `t{i}.wire.err`.
fn start_wire(dir: &Path, exe: &Path, spec_file: &Path, i: usize, cpus: Vec<usize>) -> Result<ChildProcess> {
    let mut cmd = Command::new(exe);
    cmd.arg("probe")
        .arg(spec_file)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("t{i}.wire.err")))?);
    let mut child = ChildProcess::spawn(
        &format!("the capture of tenant {i}"),
        &mut cmd,
        SpawnOptions {
            stop_signal: libc::SIGINT,
            affinity: cpus,
            ..Default::default()
        },
    )?;
    said(&mut child, "capturing")
        .recv_timeout(Duration::from_secs(10))
        .with_context(|| format!("tenant {i}'s capture did not start within 10 s (see t{i}.wire.err)"))?;
    Ok(child)
}

/// `tenant.command` in tenant `tn` (`sh -c`, in its own process group so
/// a stop reaches a loop's children), its target in its environment and
/// the run's directory in ONTIME_RUN_DIR, in the directory the lab was
/// started from (where a scenario's relative paths point), its output in
/// `t{i}.out` and `t{i}.err`.
fn start_command(
    c: &ontime_scenario::scenario::RunConfig,
    tn: &crate::sandbox::Tenant,
    dir: &Path,
    command: &str,
    native: bool,
) -> Result<ChildProcess> {
    let i = tn.index;
    let run_dir = std::path::absolute(dir).with_context(|| format!("{}: no absolute path", dir.display()))?;
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .envs(c.command_env(i))
        .env("ONTIME_RUN_DIR", run_dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("t{i}.out")))?)
        .stderr(std::fs::File::create(dir.join(format!("t{i}.err")))?);
    tn.spawn(
        &mut cmd,
        native,
        SpawnOptions {
            own_group: true,
            ..Default::default()
        },
    )
    .with_context(|| format!("cannot start tenant {i}'s command"))
}

/// The runs' `tenant.command`s: dropped (a run's end, or its failure on
/// the way), each one's whole process group is killed, so a poller it
/// put in the background, or a child that outlived the stop, cannot poll
/// the next run's gateway.
struct Commands(Vec<(usize, ChildProcess)>);

impl Drop for Commands {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            child.stop();
            child.signal_group_kill();
        }
    }
}

/// `tenant.command`s still running at the run's end are stopped (their
/// groups); one that ended early with a failure fails the run: its
/// capture saw a poller that was not there.
fn stop_commands(mut commands: Commands) -> Result<()> {
    let mut failed = Vec::new();
    for (i, child) in &mut commands.0 {
        if let Some(st) = child.try_wait().filter(|st| !st.success()) {
            failed.push(format!(
                "tenant {i}'s command ended early with {} (see t{i}.err)",
                st.code()
                    .map_or_else(|| "a signal".to_string(), |c| format!("exit status {c}"))
            ));
        }
    }
    drop(commands);
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// QEMU tenants: waits until every guest runs its job (its boot time goes
/// in the record), then gives the vCPU and VMM threads their policies.
fn await_guests(
    c: &ontime_scenario::scenario::RunConfig,
    g: &crate::qemu::GuestSetup,
    probes: &mut [(usize, ChildProcess)],
    files: &[crate::qemu::GuestFiles],
    opts: &RunnerOptions,
    rec: &mut RunRecord,
) -> Result<()> {
    let mut boot = Vec::new();
    for ((_, qemu), f) in probes.iter_mut().zip(files) {
        boot.push(f.await_job(qemu, &opts.stop)?);
        if c.tenant.policy != ontime_core::rt::Policy::Other || g.vm.io_policy != ontime_core::rt::Policy::Other {
            crate::qemu::set_thread_policies(qemu, c.tenant.vcpus, c.tenant.policy, g.vm.io_policy)?;
        }
    }
    if let Some(vm) = rec.environment.vm.as_mut() {
        vm.boot_s = boot;
    }
    Ok(())
}

/// host.vmm_memory as document 004's small Dom0: each QEMU tenant may hold
/// `bound` bytes of page cache (its image's host cache) beyond the memory
/// QEMU holds otherwise (the guest's RAM, preallocated, and QEMU's own,
/// which under TCG keeps growing with its translation cache long after
/// boot). A thread raises each memory cgroup's limit to that sum every
/// 100 ms; between two raises the kernel takes any growth out of the cache.
struct HostCacheBound {
    bound: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<u64>>>,
}

impl HostCacheBound {
    fn start(c: &ontime_scenario::scenario::RunConfig, lab: &Lab) -> Result<Option<HostCacheBound>> {
        let guest = crate::qemu::guest_memory(c)?;
        let Some(bound) = c.host.host_cache_bound(guest).map_err(anyhow::Error::msg)? else {
            return Ok(None);
        };
        let groups: Vec<crate::cgroup::Cgroup> = lab
            .tenants
            .iter()
            .map(|t| {
                t.cgroup
                    .clone()
                    .context("host.vmm_memory needs the tenants' cgroups (memory controller)")
            })
            .collect::<Result<_>>()?;
        let mut resident = Vec::new();
        for (i, g) in groups.iter().enumerate() {
            let r = g.resident_without_cache()?;
            g.set_memory_limit(r + bound)
                .with_context(|| format!("bounding tenant {i}'s host cache (host.vmm_memory)"))?;
            resident.push(r);
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                for (g, top) in groups.iter().zip(resident.iter_mut()) {
                    // A group whose QEMU is gone has nothing left to bound.
                    let Ok(r) = g.resident_without_cache() else { continue };
                    if r > *top {
                        *top = r;
                        let _ = g.set_memory_limit(r + bound);
                    }
                }
            }
            resident
        });
        Ok(Some(HostCacheBound {
            bound,
            stop,
            thread: Some(thread),
        }))
    }

    /// Stops the thread; the largest resident memory of each QEMU (beside
    /// its page cache) while it ran.
    fn finish(mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for HostCacheBound {
    // A run that fails half-way must not leave the thread behind.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A run without probes (a controller for people to use): waits out the
/// duration or a stop request.
fn hold_for(run: &PlannedRun, opts: &RunnerOptions, on: &mut dyn FnMut(Event)) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_nanos(run.config.duration) && !opts.stop.load(Ordering::Relaxed) {
        on(Event::Tick {
            run,
            elapsed_ns: t0.elapsed().as_nanos() as u64,
        });
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// How long a stopped guest may take to write its results and power off.
const GUEST_STOP_LIMIT: Duration = Duration::from_secs(30);

/// Stage 7: waits for every probe to exit; a stop request (Ctrl-C) is
/// passed on to them so they write what they measured: SIGINT to a
/// sandbox's probe, a stop request to a guest's job (`guests`, in the
/// order of `probes`), whose QEMU gets SIGTERM only if the guest is not
/// down within [`GUEST_STOP_LIMIT`]. Returns their exit codes in order.
fn wait_for_probes(
    run: &PlannedRun,
    probes: &mut [(usize, ChildProcess)],
    guests: &[crate::qemu::GuestFiles],
    opts: &RunnerOptions,
    on: &mut dyn FnMut(Event),
) -> Result<Vec<Option<i32>>> {
    let t0 = Instant::now();
    let mut exits: Vec<Option<i32>> = vec![None; probes.len()];
    let mut signalled: Option<Instant> = None;
    let mut guests_forced = false;
    loop {
        let mut running = 0;
        for (k, (_, child)) in probes.iter_mut().enumerate() {
            if exits[k].is_some() {
                continue;
            }
            match child.try_wait() {
                Some(st) => exits[k] = Some(st.code().unwrap_or(-1)),
                None => running += 1,
            }
        }
        if running == 0 {
            return Ok(exits);
        }
        if opts.stop.load(Ordering::Relaxed) && signalled.is_none() {
            for (k, (_, c)) in probes.iter().enumerate() {
                match guests.get(k) {
                    Some(g) if exits[k].is_none() => {
                        if !g.request_stop() {
                            c.signal(libc::SIGTERM);
                        }
                    }
                    Some(_) => {}
                    None => c.signal(libc::SIGINT),
                }
            }
            signalled = Some(Instant::now());
        }
        // A guest that did not take the request (still booting, hung).
        if !guests_forced && signalled.is_some_and(|at| at.elapsed() > GUEST_STOP_LIMIT) {
            for (k, (_, c)) in probes.iter().enumerate().take(guests.len()) {
                if exits[k].is_none() {
                    c.signal(libc::SIGTERM);
                }
            }
            guests_forced = true;
        }
        // dd and Postmark make whole passes over their data, however long
        // the tenant's memory and disk make them; fio and the probes stop
        // at the duration.
        let grace = if run.config.tenant.io.is_some() { 900 } else { 60 };
        if t0.elapsed() > Duration::from_nanos(run.config.duration) + Duration::from_secs(grace) {
            anyhow::bail!("probes did not finish within the duration + {grace} s (see t*.err)");
        }
        on(Event::Tick {
            run,
            elapsed_ns: t0.elapsed().as_nanos() as u64,
        });
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The wan load: an iperf3 server per tenant on the building side and a UDP
/// flow to it from every tenant (in its namespace and cgroup), so the host
/// relay carries it (document 001's UDP between host and guest). QEMU
/// tenants' clients run in their guests (`in_guest`: servers only here).
fn start_wan(lab: &Lab, rate_mbit: f64, duration_ns: u64, native: bool, in_guest: bool) -> Result<Vec<ChildProcess>> {
    anyhow::ensure!(
        ontime_core::caps::which("iperf3").is_some(),
        "the wan load needs iperf3: run scripts/setup.sh or apt-get install iperf3"
    );
    let mut out = Vec::new();
    let secs = (duration_ns / 1_000_000_000 + 5).to_string();
    for tn in &lab.tenants {
        let port = 5201 + tn.index as u16;
        out.push(iperf3_server(&lab.building.netns, names::building_addr(), port, false)?);
    }
    for tn in lab.tenants.iter().filter(|_| !in_guest) {
        let port = (5201 + tn.index).to_string();
        let mut cli = Command::new("iperf3");
        cli.args([
            "-c",
            &names::building_addr().to_string(),
            "-p",
            &port,
            "-u",
            "-l",
            "1200",
        ])
        .args(["-b", &format!("{rate_mbit}M"), "-t", &secs])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        out.push(tn.spawn(&mut cli, native, Default::default())?);
    }
    Ok(out)
}
