//! `run.json`: what one lab run (or a simulated one) was and what it left
//! in its directory. The runner writes it, `ontime sim` writes it for
//! simulated runs, the report and the calibration read it back.

use ontime_core::manifest::Manifest;
use ontime_core::stats::{LatencyHistogram, Summary};
use serde::{Deserialize, Serialize};

/// The environment a run was made in, as the report shows it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Environment {
    pub manifest: Manifest,
    pub cgroup_version: Option<ontime_core::cgroup::Version>,
    /// Whether this kernel has the netem qdisc.
    pub netem: bool,
    pub wan_delay_by: WanDelayBy,
    pub model_note: String,
    /// The SCHED_RR time slice in force during the run, read back from the
    /// kernel, when the scenario set one (`host.rr_timeslice`).
    #[serde(default)]
    pub rr_timeslice_ms: Option<u64>,
    /// Each sandboxed tenant cgroup's real-time budget per second
    /// (`cpu.rt_runtime_us`, RT group scheduling), when the host has it:
    /// real-time vCPU threads beyond it wait for the next period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_rt_runtime_us: Option<u64>,
    /// What the run did to the host beyond the lab (dropped caches ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// QEMU tenants: the accelerator and devices the guests ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmEnvironment>,
}

/// How a run's QEMU guests ran.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct VmEnvironment {
    /// "kvm" or "tcg".
    pub accel: String,
    /// Why, e.g. "kvm: /dev/kvm present, guest did not boot in 5 s: tcg".
    pub accel_why: String,
    /// QEMU's version line.
    pub qemu: String,
    pub nic: String,
    /// vhost-net serves the virtio NIC's rings.
    pub vhost: bool,
    /// "virtio-blk, iothread, cache none, raw", when the guests have a disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    /// Seconds from each guest's start to its job's start (boot), by tenant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boot_s: Vec<f64>,
    /// host.vmm_memory: page cache each QEMU may hold beyond
    /// `vmm_resident_bytes` (the document's Dom0 memory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cache_bound: Option<u64>,
    /// What each tenant's QEMU held besides page cache once its guest was
    /// up (guest RAM, preallocated, and QEMU's own), by tenant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vmm_resident_bytes: Vec<u64>,
}

/// Who added the WAN delay in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WanDelayBy {
    Relay,
    Netem,
    Simulator,
    /// Results imported from runs outside the lab: no WAN was modelled.
    None,
}

impl WanDelayBy {
    pub fn as_str(self) -> &'static str {
        match self {
            WanDelayBy::Relay => "relay",
            WanDelayBy::Netem => "netem",
            WanDelayBy::Simulator => "simulator",
            WanDelayBy::None => "nobody (results imported from outside the lab)",
        }
    }
}

/// What the tenants of a run ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Crawl,
    Cyclic,
    /// fio, dd or Postmark on the tenant's disk (document 004).
    Io,
    /// Measured UDP flows through the bottleneck (document 003).
    Net,
    /// A poller ontime did not write (`tenant.command`), measured from its
    /// packets on the tenant's veth (`ontime wire record`).
    Wire,
}

impl Workload {
    /// What a run of `c` runs.
    pub fn of(c: &crate::scenario::RunConfig) -> Workload {
        if c.tenant.command.is_some() {
            Workload::Wire
        } else if c.tenant.crawl.is_some() {
            Workload::Crawl
        } else if c.net.is_some() {
            Workload::Net
        } else if c.tenant.io.is_some() {
            Workload::Io
        } else {
            Workload::Cyclic
        }
    }

    /// The metric a run is judged by.
    pub fn metric(self) -> &'static str {
        match self {
            Workload::Crawl | Workload::Wire => "interval error",
            Workload::Cyclic => "wake-up latency",
            Workload::Io => "I/O latency",
            Workload::Net => "end-to-end delay",
        }
    }

    /// What a lost period is called.
    pub fn misses(self) -> &'static str {
        match self {
            Workload::Crawl | Workload::Wire => "missed",
            Workload::Cyclic => "overruns",
            Workload::Io => "errors",
            Workload::Net => "deadline misses",
        }
    }
}

/// What a run's tenants stand for, said in its record and report.
pub fn model_note(backend: crate::scenario::Backend) -> &'static str {
    match backend {
        crate::scenario::Backend::Qemu => QEMU_NOTE,
        _ => MODEL_NOTE,
    }
}

pub const IMPORTED_NOTE: &str = "Imported: ontime crawl or ontime cyclic results from runs outside the lab (e.g. inside a guest); no relay, gateway or recorder of the lab took part, and the scenario shown is what the results say of themselves.";

pub const QEMU_NOTE: &str = "QEMU tenants run a guest kernel with emulated or virtio devices behind a VMM; under TCG (no working KVM) guest instructions are translated: everything in the guest is slower and there are no VM exits, so device emulation costs translated code instead of exits.";

pub const MODEL_NOTE: &str = "Sandbox tenants model the host-scheduling side of virtualisation (vCPU threads compete on the host scheduler, I/O crosses a host path with WAN delay), not instruction emulation.";

#[derive(Debug, Serialize, Deserialize)]
pub struct TenantOutcome {
    pub index: usize,
    pub result: Option<String>,
    pub exit: Option<i32>,
}

/// `run.json`.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub complete: bool,
    pub index: usize,
    pub repetition: u32,
    pub vars: Vec<(String, String)>,
    pub config: crate::scenario::RunConfig,
    pub workload: Workload,
    pub environment: Environment,
    pub relay: Option<ontime_net::RelayReport>,
    /// The building gateway's counters and receive stamps (kernel vs
    /// handler), from its `gateway.json`.
    #[serde(default)]
    pub gateway: Option<ontime_gateway::server::GatewayStats>,
    /// The scheduler recorder of the run (`[observe]`).
    pub observe: Option<ObserveOutcome>,
    /// The I/O recorder of the run (`[observe] io = true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<IoOutcome>,
    /// Document 003's flows and controller (`[net]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetOutcome>,
    pub tenants: Vec<TenantOutcome>,
    pub started_utc: String,
    pub finished_utc: String,
    pub error: Option<String>,
    /// Set when `ontime sim` made this run instead of the lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<Simulated>,
    /// The whole host's CPU time from /proc/stat while the probes ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu: Option<HostCpu>,
    /// Crawlers judged again from the gateway's kernel receive stamps:
    /// QEMU tenants' (a guest's clock is its own) and Modbus runs' (the
    /// answers carry no receive time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ReferenceJudgement>,
}

impl RunRecord {
    /// The record of `run` before anything is measured: no outcomes, no
    /// tenants, not complete.
    pub fn new(run: &crate::scenario::PlannedRun, environment: Environment, started_utc: String) -> RunRecord {
        RunRecord {
            complete: false,
            index: run.index,
            repetition: run.repetition,
            vars: run.vars.clone(),
            config: run.config.clone(),
            workload: Workload::of(&run.config),
            environment,
            relay: None,
            gateway: None,
            observe: None,
            io: None,
            net: None,
            tenants: Vec::new(),
            started_utc,
            finished_utc: String::new(),
            error: None,
            simulated: None,
            host_cpu: None,
            reference: None,
        }
    }
}

impl Environment {
    /// What `manifest` says of the host; the lab's own details (cgroups,
    /// netem, notes, guests) are the caller's to add.
    pub fn new(manifest: Manifest, wan_delay_by: WanDelayBy, model_note: String) -> Environment {
        Environment {
            manifest,
            cgroup_version: None,
            netem: false,
            wan_delay_by,
            model_note,
            rr_timeslice_ms: None,
            tenant_rt_runtime_us: None,
            notes: Vec::new(),
            vm: None,
        }
    }
}

/// Interval error from the building gateway's receive log, over every
/// tenant of the run, by the crawler's own rule (`gateway analyze`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ReferenceJudgement {
    /// The receive log, in the run directory.
    pub log: String,
    pub missed: u64,
    pub interval_error: Summary,
    /// Why the log is not known to be whole ("partial: ..." when it lacks
    /// the end mark a cleanly stopped gateway writes): the judgement then
    /// covers the run only up to where the log ends. Absent when whole,
    /// and in records older than end marks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
    /// Each tenant's polls (its building's) judged from the log: what the
    /// verdict judges a crawler tenant by where its own interval error is
    /// taken at its sends (over Modbus and BACnet). Absent in records
    /// older than it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<TenantReference>,
    /// Every poll's interval error from the log as a histogram log (tag
    /// `interval_error`), in the run directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hlog: Option<String>,
}

/// One tenant's polls as the building gateway received them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantReference {
    pub index: usize,
    pub missed: u64,
    pub interval_error: Summary,
}

/// The whole host's CPU time over a stretch (`core::cputime`): what no
/// tracked thread accounts for (the gateway, softirq network work, the
/// recorder) is the busy time minus the tenants' and the relay's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    pub wall_ns: u64,
    #[serde(flatten)]
    pub cpu: ontime_core::cputime::CpuTimes,
}

impl HostCpu {
    /// CPU time spent running anything (user, system, interrupts).
    pub fn busy_ns(&self) -> u64 {
        self.cpu.busy_ns()
    }

    /// Now (wall_ns: CLOCK_MONOTONIC).
    pub fn now() -> Option<HostCpu> {
        Some(HostCpu {
            wall_ns: ontime_core::time::MonoNs::now().0,
            cpu: ontime_core::cputime::CpuTimes::now()?,
        })
    }

    /// What was spent between `self` (earlier) and `later`.
    pub fn until(&self, later: &HostCpu) -> HostCpu {
        HostCpu {
            wall_ns: later.wall_ns.saturating_sub(self.wall_ns),
            cpu: self.cpu.until(&later.cpu),
        }
    }
}

/// The gateway's counters and receive-stamp figures in a run directory.
pub const GATEWAY_RESULT: &str = "gateway.json";

/// What the run's recorder did and cost.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ObserveOutcome {
    /// "ontime", "perf" or "off".
    pub recorder: String,
    /// The recording (ontime: observe.otrec) and the analysis (observe.json).
    pub file: Option<String>,
    pub analysis: Option<String>,
    pub span_ns: u64,
    /// Recorder CPU: ontime's reader thread + its BPF programs; perf's
    /// process (user + system).
    pub cpu_ns: Option<u64>,
    /// cpu_ns as % of one core over the span.
    pub overhead_pct: Option<f64>,
    pub events: Option<u64>,
    pub lost: Option<u64>,
    /// Bytes written by the recorder.
    pub bytes: Option<u64>,
    /// All CPUs' busy time over the span, % of one core (from /proc/stat).
    pub host_busy_pct: Option<f64>,
    /// With stacks sampled (`[observe] profile`): the profile report
    /// (profile.json), its pprof (profile.pb.gz) and figures (profile/).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The flight recorder, when the run had one: `file` is then the
    /// directory of the windows it kept, and there is no `analysis` (the
    /// scheduler's aggregates need the whole recording).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flight: Option<FlightOutcome>,
    pub error: Option<String>,
}

/// What the flight recorder kept and held, and the runner's memory while
/// it ran (the recorder, its store and the keeper are threads of it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlightOutcome {
    #[serde(flatten)]
    pub ring: ontime_recording::flight::FlightSummary,
    /// The runner's resident memory at its most in the run's first minute
    /// and over the whole run (bytes, /proc/self/statm's resident pages
    /// sampled every second): the second staying at the first says it is
    /// bounded.
    pub rss_first_minute_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    /// The most in each minute of the run, in order (at most a week's).
    #[serde(default)]
    pub rss_by_minute_bytes: Vec<u64>,
}

/// What the run's I/O recorder did.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct IoOutcome {
    /// io.otrec, io.json (the analysis), io/ (figures).
    pub file: Option<String>,
    pub analysis: Option<String>,
    pub events: Option<u64>,
    pub lost: Option<u64>,
    pub reader_cpu_ns: Option<u64>,
    pub error: Option<String>,
}

/// What `run.json` says of the flows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NetOutcome {
    pub flows: Vec<FlowOutcome>,
    /// The controller's report (`net.json`), when it ran.
    pub controller: Option<String>,
    /// iperf3's own results of the best-effort clients (`best-effort-tN.json`).
    #[serde(default)]
    pub best_effort: Vec<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlowOutcome {
    pub name: String,
    pub from: usize,
    pub to: String,
    pub deadline_ns: u64,
    /// The channel it got (its DSCP), or why not.
    pub channel: Option<u8>,
    pub refused: Option<String>,
    /// The receiver's measurements (`flow-NAME.json`) and the sender's.
    pub result: Option<String>,
    pub sender: Option<String>,
}

/// How a run was simulated (`run.json`'s `simulated`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Simulated {
    /// `linux` (the lab's own classes) or the named model.
    pub model: String,
    pub cpus: usize,
    pub seed: u64,
    pub calibration: Option<String>,
    pub io_cost_per_packet_ns: Option<u64>,
    pub host_noise: bool,
    /// Stalls of the whole host per second, from the calibration.
    #[serde(default)]
    pub host_stalls: Option<f64>,
    /// The host's other work per poll (gateway, softirq), from the
    /// calibration, on its own thread at the gateway's policy.
    #[serde(default)]
    pub host_work_per_poll_ns: Option<u64>,
    /// The tenants started when the measured run's did (`--into`).
    #[serde(default)]
    pub starts_measured: bool,
    /// The real-time budget per second the tenants' cgroups shared (the
    /// Linux model's RT group throttling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_rt_budget_ns: Option<u64>,
    /// The Linux model kept this share of fair wake-ups on their busy last
    /// CPU while another idled (the calibration's measured placement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_stay_share: Option<f64>,
    /// ... and let this share of fair threads woken behind a fair one
    /// preempt it at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_preempt_share: Option<f64>,
    pub cpu_hogs: usize,
    /// CPU busy over the run, CPUs.
    pub busy_cpus: f64,
    /// The host I/O path's (Dom0's) CPU in its leanest whole second of the
    /// run, and over the run, in CPUs (document 000's figure 10 is the
    /// former, read with xentop each second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_path_cpus_least: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_path_cpus_mean: Option<f64>,
    /// What the scenario asks that the simulator left out.
    pub left_out: Vec<String>,
}

/// One simulated crawler tenant, scored as the crawler scores itself.
#[derive(Debug, Serialize, Deserialize)]
pub struct SimTenant {
    /// Polls sent, or the probe's wake-ups.
    pub polls: u64,
    /// Polls answered after the crawler's timeout, or the probe's overruns.
    pub missed: u64,
    /// A crawler's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_error: Option<Summary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag: Option<Summary>,
    /// A wake-up probe's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Summary>,
    /// CPU its vCPU threads received.
    pub cpu_ns: u64,
    #[serde(skip)]
    pub histogram: LatencyHistogram,
}

impl SimTenant {
    /// What the run is judged by: interval error, or wake-up latency.
    pub fn headline(&self) -> &Summary {
        static NONE: std::sync::OnceLock<Summary> = std::sync::OnceLock::new();
        self.latency
            .as_ref()
            .or(self.interval_error.as_ref())
            .unwrap_or_else(|| NONE.get_or_init(Summary::default))
    }
}
