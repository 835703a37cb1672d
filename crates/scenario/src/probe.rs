//! What a tenant runs, as one typed document: the lab writes a
//! [`ProbeSpec`] into the run directory and starts `ontime probe FILE` in
//! the tenant; `ontime crawl`, `cyclic`, `gateway`, `net send|receive` and
//! `io workload` build the same types from their flags. No command line is
//! assembled anywhere, so a flag renamed in the CLI cannot silently change
//! what the lab's tenants run, and each probe's ranges are checked in one
//! place (the probe type's `validate`), for flags and scenarios alike.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One probe process's whole job.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "probe", rename_all = "snake_case")]
pub enum ProbeSpec {
    Crawl(ontime_crawl::CrawlProbe),
    Cyclic(ontime_cyclic::CyclicProbe),
    Gateway(GatewayProbe),
    IoWorkload(IoWorkloadProbe),
    FlowSend(FlowSendProbe),
    FlowReceive(FlowReceiveProbe),
    ClockEcho(ClockEchoProbe),
    ClockSync(ClockSyncProbe),
    CpuBurst(CpuBurstProbe),
    SoftirqFlood(SoftirqFloodProbe),
    Wire(WireProbe),
}

/// A poller ontime did not write (`tenant.command`), measured from its
/// packets (`ontime wire record`): its result to `result`, every point's
/// interval errors together to `hlog` (as a crawl's, tag
/// `interval_error`). It says "capturing" on its standard output once its
/// capture is open.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireProbe {
    pub options: ontime_wire::WireOptions,
    pub result: PathBuf,
    pub hlog: Option<PathBuf>,
}

/// An injected softirq flood (`[[inject]] cause = "softirq-flood"`): its
/// windows written to `result` as `ontime_explain::truth::Injections`,
/// on `tenant_cpu` (where the lab steered the receipt).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoftirqFloodProbe {
    pub flood: ontime_net::flood::FloodSpec,
    pub tenant_cpu: usize,
    pub result: PathBuf,
}

/// An injected cause (`[[inject]] cause = "cpu-burst"` or `"rt-throttle"`):
/// busy bursts on a CPU, their actual windows written to `result` as
/// `ontime_explain::truth::Injections` when it stops.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuBurstProbe {
    pub bursts: ontime_load::inject::CpuBurstSpec,
    pub result: PathBuf,
    /// Run inside this tenant's guest (its windows on the guest's clock,
    /// its pid the guest's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<String>,
}

/// The host's clock echo for guests' flows (`ontime_net::clock`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockEchoProbe {
    pub listen: std::net::SocketAddr,
}

/// A guest measuring its clock's offset to the host's echo; the offset
/// (JSON) to `result`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockSyncProbe {
    pub server: std::net::SocketAddr,
    pub samples: u32,
    pub result: PathBuf,
}

/// A gateway serving buildings until stopped; its counters to `result`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayProbe {
    pub config: ontime_gateway::config::GatewayConfig,
    pub result: Option<PathBuf>,
    /// Stalls it injects into its own answers (the attribution's ground
    /// truth), each writing the windows it held to its `result`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<InjectedStall>,
}

/// An injected stall: when, and where its windows go (`inject-N.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectedStall {
    pub timing: ontime_load::inject::Timing,
    pub result: PathBuf,
}

/// fio, dd, Postmark or the user's program on a tenant's disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IoWorkloadProbe {
    pub workload: ontime_io::workload::WorkloadSpec,
    /// The directory it works in (the tenant disk's mount point).
    pub dir: PathBuf,
    pub duration_s: u64,
    /// The tool's own output.
    pub log: Option<PathBuf>,
    pub result: Option<PathBuf>,
}

impl IoWorkloadProbe {
    /// Every range, declared once.
    pub fn validate(&self) -> Result<(), String> {
        self.workload.validate().map(|_| ())?;
        ontime_core::limits::count("duration (s)", self.duration_s, 1, 86_400)?;
        Ok(())
    }
}

/// A paced UDP flow (document 003's measured flows).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSendProbe {
    pub send: ontime_net::flow::SendSettings,
    pub result: Option<PathBuf>,
    /// A clock offset measured by a [`ClockSyncProbe`] before this starts
    /// (a guest's), applied to the send times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset: Option<PathBuf>,
}

/// The receiver timing every datagram of a flow.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowReceiveProbe {
    pub receive: ontime_net::flow::ReceiveSettings,
    pub result: Option<PathBuf>,
    /// As [`FlowSendProbe::clock_offset`], applied to arrival times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset: Option<PathBuf>,
}

impl ProbeSpec {
    /// Writes the spec whole (the probe reads it once it starts).
    pub fn write(&self, path: &Path) -> Result<()> {
        ontime_core::fsio::write_atomic(path, &serde_json::to_vec_pretty(self)?)
    }

    /// Reads a spec; a wrong field names the file and the field.
    pub fn read(path: &Path) -> Result<ProbeSpec> {
        let text = ontime_core::fsio::read_text(path, "probe spec (JSON)")?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(de).with_context(|| format!("{} is not a probe spec", path.display()))
    }
}

impl ProbeSpec {
    /// Every range of the probe, declared once in its own crate.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            ProbeSpec::Crawl(p) => p.validate(),
            ProbeSpec::Cyclic(p) => p.validate(),
            ProbeSpec::Gateway(p) => p.config.validate().map_err(|e| format!("{e:#}")),
            ProbeSpec::IoWorkload(p) => p.validate(),
            ProbeSpec::FlowSend(_) | ProbeSpec::FlowReceive(_) | ProbeSpec::ClockEcho(_) => Ok(()),
            ProbeSpec::ClockSync(p) => {
                ontime_core::limits::count("clock samples", p.samples as u64, 1, 100_000).map(|_| ())
            }
            ProbeSpec::CpuBurst(p) => p.bursts.check().map_err(|e| format!("{e:#}")),
            ProbeSpec::SoftirqFlood(p) => p.flood.timing.check().map_err(|e| format!("{e:#}")),
            ProbeSpec::Wire(p) => p.options.validate(),
        }
    }
}

/// A tenant's network end as an injector needs it: the host end of its
/// veth, and its own end's MAC and address.
#[derive(Clone, Debug)]
pub struct TenantVeth {
    pub host_if: String,
    pub mac: [u8; 6],
    pub addr: std::net::Ipv4Addr,
}

/// A run's flight recorder: what it keeps and what triggers it.
#[derive(Clone, Debug)]
pub struct FlightPlan {
    pub options: ontime_recording::flight::FlightOptions,
    /// Histogram logs (tN.hlog) and the tag whose interval maxima count.
    pub logs: Vec<(std::path::PathBuf, &'static str)>,
}

/// Late events a tenant's probe keeps per thread for the run's
/// explanation (`explain.json`).
const KEEP_LATE: usize = 1000;

/// A lab flow's receiver's interval log (`ontime_net::flow::HLOG_TAG`),
/// in its run's directory.
pub fn flow_hlog(flow: &str) -> String {
    format!("flow-{flow}.hlog")
}

impl crate::scenario::RunConfig {
    /// Late events a tenant's probe keeps: the host's recording explains
    /// them for sandboxed and native tenants, whose threads are the
    /// host's; a QEMU guest's probe threads are the guest's.
    fn keep_late(&self) -> usize {
        match self.tenant.backend {
            crate::scenario::Backend::Qemu if !self.records_guests() => 0,
            _ => KEEP_LATE,
        }
    }

    /// A QEMU tenant's guest records its own scheduling and measures its
    /// clock against the host's, so its probe's late events (in a `[net]`
    /// run, its flows' receivers') can be explained on both sides:
    /// `observe.guest`, with the scheduler recorder on.
    pub fn records_guests(&self) -> bool {
        self.tenant.backend == crate::scenario::Backend::Qemu
            && self.observe.guest
            && self.observe.recorder == crate::scenario::Recorder::Ontime
    }

    /// The flight recorder of a run in `dir`, when it has one
    /// (`observe.flight`): what it keeps, and the tenants' histogram logs
    /// whose late intervals trigger it, each with the tag to read.
    pub fn flight(&self, dir: &Path) -> Option<FlightPlan> {
        use crate::scenario::{Flight, Recorder, FLIGHT_AUTO_NS};
        let on = match self.observe.flight {
            Flight::On => true,
            Flight::Off => false,
            Flight::Auto => self.duration > FLIGHT_AUTO_NS,
        };
        if !on || self.observe.recorder != Recorder::Ontime {
            return None;
        }
        let tag = self.flight_tag();
        // Without probes that log late intervals nothing would trigger it,
        // and every window would go: such runs record whole.
        let tag = tag?;
        let logs = match &self.net {
            // The flows' receivers log their datagrams' lateness past
            // each flow's deadline.
            Some(n) => n.flows.iter().map(|f| (dir.join(flow_hlog(&f.name)), tag)).collect(),
            None => (0..self.tenant.count)
                .map(|i| (dir.join(format!("t{i}.hlog")), tag))
                .collect(),
        };
        // Checked when the scenario was read.
        let ns = |s: &str| ontime_core::duration::parse_ns(s).unwrap_or(0);
        Some(FlightPlan {
            options: ontime_recording::flight::FlightOptions {
                ring_ns: ns(&self.observe.ring),
                keep_around_ns: ns(&self.observe.keep_around),
                max_kept: self.observe.max_kept,
                // A flow's lateness is already past its deadline.
                threshold_ns: if self.net.is_some() {
                    0
                } else {
                    self.explain_over().unwrap_or(0)
                },
            },
            logs,
        })
    }

    /// The histogram-log tag whose interval maxima trigger the flight
    /// recorder: the lateness the tenants' probes keep late events by, or
    /// in `[net]` runs the flows' receivers (None: they keep none, as QEMU
    /// tenants).
    pub fn flight_tag(&self) -> Option<&'static str> {
        // A guest's histogram logs are on its clock, not the windows'.
        if self.keep_late() == 0 || self.tenant.backend == crate::scenario::Backend::Qemu {
            return None;
        }
        if self.net.as_ref().is_some_and(|n| !n.flows.is_empty()) {
            return Some(ontime_net::flow::HLOG_TAG);
        }
        if self.net.is_some() {
            return None;
        }
        // A poller ontime did not write logs nothing while it runs.
        if self.tenant.command.is_some() {
            return None;
        }
        match (&self.tenant.crawl, &self.tenant.cyclic) {
            (Some(_), _) => Some("send_lag"),
            (None, Some(_)) => Some("latency"),
            _ => None,
        }
    }

    /// Late, for the explanation: over the tightest of the scenario's
    /// targets, else (None) over the run's p99.9.
    fn explain_over(&self) -> Option<u64> {
        self.targets.latency.iter().map(|(_, ns)| *ns).min()
    }

    /// The seed of the i-th injection's draws in the run directory `dir`:
    /// one per run (FNV-1a of the directory's name), so that repetitions
    /// differ and a run can be repeated.
    fn injection_seed(dir: &Path, i: usize) -> u64 {
        let name = dir.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
        let run = name.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
        });
        run ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    /// The own work injected into tenant `tenant`'s probe
    /// (`cause = "own-work"`), and where its windows go (`inject-i.json`).
    fn own_work_of(
        &self,
        tenant: usize,
        dir: &Path,
    ) -> Result<Option<(ontime_core::work::InjectedWork, PathBuf)>, String> {
        let Some((i, inj)) = self
            .injections
            .iter()
            .enumerate()
            .find(|(_, j)| j.cause == crate::scenario::InjectCause::OwnWork && j.tenant == tenant)
        else {
            return Ok(None);
        };
        let (min_ns, max_ns) = inj.length_ns().map_err(|e| format!("inject[{i}].length: {e}"))?;
        let work = ontime_core::work::InjectedWork {
            min_ns,
            max_ns,
            every_ns: inj.every,
            start_after_ns: inj.start_after,
            seed: Self::injection_seed(dir, i),
        };
        Ok(Some((work, dir.join(format!("inject-{i}.json")))))
    }

    /// The run's relay stalls (`[[inject]] cause = "relay-stall"`, carried
    /// out by the runner, whose threads the relay's are): the i-th's
    /// timing, and the file its windows go to.
    pub fn relay_stalls(&self, dir: &Path) -> Result<Vec<(ontime_load::inject::Timing, PathBuf)>, String> {
        self.stalls_of(crate::scenario::InjectCause::RelayStall, dir)
    }

    /// The run's gateway stalls (`cause = "gateway-stall"`, carried out by
    /// the gateway's process), as [`RunConfig::relay_stalls`].
    pub fn gateway_stalls(&self, dir: &Path) -> Result<Vec<InjectedStall>, String> {
        Ok(self
            .stalls_of(crate::scenario::InjectCause::GatewayStall, dir)?
            .into_iter()
            .map(|(timing, result)| InjectedStall { timing, result })
            .collect())
    }

    fn stalls_of(
        &self,
        cause: crate::scenario::InjectCause,
        dir: &Path,
    ) -> Result<Vec<(ontime_load::inject::Timing, PathBuf)>, String> {
        let mut out = Vec::new();
        for (i, inj) in self.injections.iter().enumerate() {
            if inj.cause == cause {
                let timing = inj
                    .timing(self.duration, Self::injection_seed(dir, i))
                    .map_err(|e| format!("inject[{i}].length: {e}"))?;
                out.push((timing, dir.join(format!("inject-{i}.json"))));
            }
        }
        Ok(out)
    }

    /// The injectors tenant `tenant`'s guest runs (`inside = "guest"`):
    /// each one's spec file in `dir` and the spec, which the runner writes
    /// before the guest starts; the i-th writes `inject-i.json`.
    pub fn guest_injectors(&self, dir: &Path, tenant: usize) -> Result<Vec<(PathBuf, ProbeSpec)>, String> {
        let mut out = Vec::new();
        for (i, inj) in self.injections.iter().enumerate() {
            if inj.inside != crate::scenario::InjectInside::Guest || inj.tenant != tenant {
                continue;
            }
            let timing = inj
                .timing(self.duration, Self::injection_seed(dir, i))
                .map_err(|e| format!("inject[{i}].length: {e}"))?;
            out.push((
                dir.join(format!("inject-{i}.guest.probe.json")),
                ProbeSpec::CpuBurst(CpuBurstProbe {
                    bursts: ontime_load::inject::CpuBurstSpec {
                        cpu: inj.cpu.unwrap_or(0),
                        priority: inj.priority,
                        timing,
                        fair_companion: false,
                    },
                    result: dir.join(format!("inject-{i}.json")),
                    guest: Some(ontime_core::names::tenant_name(tenant)),
                }),
            ));
        }
        Ok(out)
    }

    /// The run's injector processes (`[[inject]]` but own work, which the
    /// tenant's probe does, and relay stalls, the runner's): the i-th
    /// writes `inject-i.json` in `dir`.
    /// `veths` are the tenants' interfaces, by tenant (floods need them).
    pub fn injectors(&self, dir: &Path, veths: &[TenantVeth]) -> Result<Vec<ProbeSpec>, String> {
        let mut out = Vec::new();
        for (i, inj) in self.injections.iter().enumerate() {
            use crate::scenario::InjectCause;
            if matches!(
                inj.cause,
                InjectCause::OwnWork | InjectCause::RelayStall | InjectCause::GatewayStall
            ) || inj.inside == crate::scenario::InjectInside::Guest
            {
                continue;
            }
            let timing = inj
                .timing(self.duration, Self::injection_seed(dir, i))
                .map_err(|e| format!("inject[{i}].length: {e}"))?;
            if inj.cause == InjectCause::SoftirqFlood {
                let veth = veths
                    .get(inj.tenant)
                    .ok_or_else(|| format!("inject[{i}]: tenant {} has no interface", inj.tenant))?;
                out.push(ProbeSpec::SoftirqFlood(SoftirqFloodProbe {
                    flood: ontime_net::flood::FloodSpec {
                        host_if: veth.host_if.clone(),
                        dst_mac: veth.mac,
                        dst_addr: veth.addr,
                        src_addr: ontime_core::names::building_addr(),
                        flooder_cpu: inj.flooder_cpu(&self.tenant).map_err(|e| format!("inject[{i}]: {e}"))?,
                        rate_pps: inj.rate,
                        timing,
                    },
                    tenant_cpu: inj.tenant_cpu(&self.tenant).map_err(|e| format!("inject[{i}]: {e}"))?,
                    result: dir.join(format!("inject-{i}.json")),
                }));
                continue;
            }
            let cpu = inj.cpu_of(&self.tenant).map_err(|e| format!("inject[{i}]: {e}"))?;
            out.push(ProbeSpec::CpuBurst(CpuBurstProbe {
                bursts: ontime_load::inject::CpuBurstSpec {
                    cpu,
                    priority: inj.priority,
                    timing,
                    fair_companion: inj.cause == InjectCause::RtThrottle,
                },
                result: dir.join(format!("inject-{i}.json")),
                guest: None,
            }));
        }
        Ok(out)
    }

    /// `tenant.command`'s capture on tenant `i`'s veth: the gateway's
    /// port for the crawl's protocol only, the crawl's period given.
    fn wire_probe(&self, i: usize, cr: &crate::scenario::CrawlWorkload, dir: &Path) -> WireProbe {
        use crate::scenario::CrawlProtocol;
        let (port, _) = self.gateway_port(i);
        let mut ports = ontime_wire::Ports {
            http: vec![],
            modbus: vec![],
            bacnet: vec![],
        };
        match cr.protocol {
            CrawlProtocol::Http => ports.http.push(port),
            CrawlProtocol::Modbus => ports.modbus.push(port),
            CrawlProtocol::Bacnet => ports.bacnet.push(port),
        }
        WireProbe {
            options: ontime_wire::WireOptions {
                interface: ontime_core::names::tenant_veth(i).0,
                ports,
                period_ns: Some(cr.period),
                duration_ns: Some(self.duration),
                threshold_ns: None,
            },
            result: dir.join(format!("t{i}.json")),
            hlog: Some(dir.join(format!("t{i}.hlog"))),
        }
    }

    /// The port tenant `i` reaches its building's gateway on, and the unit
    /// (Modbus) or device (BACnet) it polls there.
    pub fn gateway_port(&self, i: usize) -> (u16, u32) {
        match self.tenant.crawl.as_ref().map(|c| c.protocol) {
            // A device per address: building i on port 47808 + i.
            Some(crate::scenario::CrawlProtocol::Bacnet) => (
                (ontime_fieldbus::bacnet::DEFAULT_PORT as usize + i).min(u16::MAX as usize) as u16,
                i as u32 + 1,
            ),
            // The gateway's buildings are units 1.. in order.
            _ => (8080, i as u32 + 1),
        }
    }

    /// What `tenant.command` finds in its environment in tenant `i`: its
    /// target, as ontime's crawler would have polled it.
    pub fn command_env(&self, i: usize) -> Vec<(String, String)> {
        let Some(cr) = &self.tenant.crawl else {
            return Vec::new();
        };
        let (port, unit) = self.gateway_port(i);
        let host = ontime_core::names::building_addr().to_string();
        let url = self.gateway_url(i);
        vec![
            ("ONTIME_URL".into(), url),
            ("ONTIME_HOST".into(), host),
            ("ONTIME_PORT".into(), port.to_string()),
            ("ONTIME_UNIT".into(), unit.to_string()),
            ("ONTIME_POINTS".into(), self.gateway_points().to_string()),
            ("ONTIME_PERIOD_S".into(), format!("{}", cr.period as f64 / 1e9)),
            ("ONTIME_DURATION_S".into(), format!("{}", self.duration as f64 / 1e9)),
            ("ONTIME_TENANT".into(), i.to_string()),
        ]
    }

    /// The URL ontime's crawler in tenant `i` polls: building i of the
    /// gateway, over the crawl's protocol.
    pub fn gateway_url(&self, i: usize) -> String {
        let (port, unit) = self.gateway_port(i);
        let host = ontime_core::names::building_addr();
        match self.tenant.crawl.as_ref().map(|c| c.protocol) {
            Some(crate::scenario::CrawlProtocol::Modbus) => format!("modbus://{host}:{port}/{unit}"),
            Some(crate::scenario::CrawlProtocol::Bacnet) => format!("bacnet://{host}:{port}/{unit}"),
            _ => format!("http://{host}:{port}/b{i}"),
        }
    }

    /// Points each building's gateway serves: a crawl's polls in one
    /// period, times the points per poll.
    pub fn gateway_points(&self) -> u32 {
        self.tenant.crawl.as_ref().map_or(0, |cr| {
            (cr.rate * cr.points_per_request as f64 * cr.period as f64 / 1e9)
                .ceil()
                .clamp(1.0, u32::MAX as f64) as u32
        })
    }

    /// What tenant `i` of this run runs (None: a `[net]` run, whose flows
    /// are its tenants' work), its files in `dir`. `vcpus` is the crawler's
    /// thread count (the host's CPUs for native runs).
    pub fn probe(&self, i: usize, vcpus: usize, dir: &Path) -> Result<Option<ProbeSpec>, String> {
        let t = &self.tenant;
        let file = |suffix: &str| Some(dir.join(format!("t{i}.{suffix}")));
        if let Some(cr) = &t.crawl {
            let url = self.gateway_url(i);
            if t.command.is_some() {
                return Ok(Some(ProbeSpec::Wire(self.wire_probe(i, cr, dir))));
            }
            let mut crawl =
                ontime_crawl::config::CrawlFile::for_rate(vec![url], cr.rate, cr.points_per_request, cr.period)
                    .map_err(|e| format!("tenant.crawl.{e}"))?;
            crawl.timeout = cr.timeout;
            crawl.phase = cr.phase;
            return Ok(Some(ProbeSpec::Crawl(ontime_crawl::CrawlProbe {
                crawl,
                run: ontime_crawl::RunOptions {
                    vcpus,
                    duration_ns: self.duration,
                    thread: ontime_core::rt::ThreadSettings {
                        policy: t.policy,
                        affinity: vec![],
                        timer_slack_ns: Some(1),
                    },
                    mlockall: false,
                    threshold_ns: None,
                    report_interval_ns: 1_000_000_000,
                    work: cr.work_model(),
                    work_at: cr.work_at,
                    resend: true,
                    hlog: file("hlog"),
                    polls_file: None,
                    store: None,
                    keep_worst: self.keep_late(),
                    explain_over: self.explain_over(),
                    // The gateway stamps on this host's clock (not a
                    // guest's); the relay's delay is the path's one way,
                    // and the lab's gateway runs with the default faults
                    // (its controller delay).
                    path_nominal: (self.keep_late() > 0 && t.backend != crate::scenario::Backend::Qemu).then_some(
                        ontime_core::late::PathNominal {
                            one_way_ns: self.host.relay_delay,
                            gateway_ns: ontime_gateway::config::Faults::default().delay_ns,
                        },
                    ),
                },
                result: file("json"),
                // The runner holds /dev/cpu_dma_latency once for the run.
                dma_latency: false,
            })));
        }
        if let Some(io) = &t.io {
            return Ok(Some(ProbeSpec::IoWorkload(IoWorkloadProbe {
                workload: io.clone(),
                dir: ontime_core::names::DISK_MOUNT.into(),
                duration_s: (self.duration / 1_000_000_000).max(1),
                log: file("tool.log"),
                result: file("json"),
            })));
        }
        if let Some(cy) = &t.cyclic {
            let own_work = self.own_work_of(i, dir)?;
            return Ok(Some(ProbeSpec::Cyclic(ontime_cyclic::CyclicProbe {
                options: ontime_cyclic::CyclicOptions {
                    // The same program natively and in a tenant (document
                    // 001's native baseline): its thread count does not
                    // grow with the host as a crawler's vCPUs do.
                    threads: t.vcpus,
                    affinity: vec![],
                    interval_ns: cy.interval,
                    distance_ns: 0,
                    policy: t.policy,
                    mlockall: true,
                    loops: None,
                    duration_ns: Some(self.duration),
                    histogram_us: 20_000,
                    threshold_ns: None,
                    dma_latency: false,
                    load: None,
                    hlog: file("hlog"),
                    hlog_interval_ns: 1_000_000_000,
                    late_log: None,
                    late_log_over_ns: None,
                    keep_worst: self.keep_late(),
                    explain_over: self.explain_over(),
                    own_work: own_work.as_ref().map(|(w, _)| *w),
                },
                load: None,
                load_workers: 1,
                histfile: file("hist"),
                histfile_woken: None,
                result: file("json"),
                injected_work_result: own_work.map(|(_, f)| f),
            })));
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shipped scenario's tenants get a spec that reads back as it
    /// was written and passes its probe's own checks (what `ontime probe`
    /// does first).
    #[test]
    fn shipped_scenarios_give_specs_that_read_back_and_validate() {
        let dir = tempfile::tempdir().unwrap();
        let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut seen = 0;
        if ontime_core::limits::online_cpus() < 2 {
            ontime_testkit::skip("shipped scenarios pin tenants to CPU 1: needs 2 CPUs");
            return;
        }
        for f in std::fs::read_dir(&scenarios).unwrap().flatten() {
            // Lab scenarios only (gateway and crawl configs sit beside them).
            if !std::fs::read_to_string(f.path())
                .unwrap_or_default()
                .contains("[tenant]")
            {
                continue;
            }
            let plan = crate::scenario::load(&f.path()).unwrap_or_else(|e| panic!("{}: {e:#}", f.path().display()));
            for run in plan.runs.iter().take(3) {
                let Some(spec) = run.config.probe(0, run.config.tenant.vcpus, dir.path()).unwrap() else {
                    continue;
                };
                let file = dir.path().join("t0.probe.json");
                spec.write(&file).unwrap();
                let back = ProbeSpec::read(&file).unwrap();
                assert_eq!(
                    serde_json::to_value(&back).unwrap(),
                    serde_json::to_value(&spec).unwrap(),
                    "{}",
                    f.path().display()
                );
                back.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", f.path().display()));
                seen += 1;
            }
        }
        assert!(seen > 10, "specs checked: {seen}");
    }

    /// A crawler tenant's `phase` and `work_at` reach the crawler it runs.
    #[test]
    fn the_crawlers_phase_and_work_place_reach_its_spec() {
        let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/sim-doc-000-8core.toml");
        let plan = crate::scenario::load(&scenario).unwrap();
        let run = &plan.runs[0];
        let Some(ProbeSpec::Crawl(c)) = run.config.probe(0, 1, Path::new("/")).unwrap() else {
            panic!("a crawl spec");
        };
        assert_eq!(c.crawl.phase, Some(ontime_crawl::config::Phase::Clock));
        assert_eq!(c.run.work_at, ontime_core::work::WorkAt::Request);
    }

    /// A spec with a field this version does not know is refused, naming it.
    #[test]
    fn an_unknown_field_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.json");
        std::fs::write(&file, r#"{"probe": "flow_send", "send": {"to": "127.0.0.1:1", "rate_bps": 1.0, "size": 100, "duration_ns": 1, "start_after_ns": 0, "burst": 1, "speed": 3}, "result": null}"#).unwrap();
        let e = format!("{:#}", ProbeSpec::read(&file).unwrap_err());
        assert!(e.contains("speed"), "{e}");
    }
}
