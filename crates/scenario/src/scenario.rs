//! Scenario files: what a lab experiment runs. A scenario declares the host
//! (relay), a tenant template (count, vCPUs, limits, workload), loads, the
//! duration per run and repetitions, and sweeps over any key. Every
//! combination is resolved and checked before anything is created, and
//! errors name the file, the key and the reason.
//!
//! ```toml
//! name = "default"
//! duration = "30s"
//! repetitions = 1
//!
//! [host]
//! relay_delay = "10ms"       # one way, each direction
//! relay_threads = 1
//! relay_policy = "other"     # or "fifo:90" (a prioritised host I/O path)
//! gateway_policy = "fifo:95" # the building side, the undisturbed reference
//!
//! [tenant]
//! count = 2
//! vcpus = 1
//! policy = "other"           # vCPU threads: other, fifo:P, deadline:R/P
//! [tenant.crawl]             # or [tenant.cyclic] interval = "1ms"
//! rate = 200                 # polls/s per tenant
//!
//! [[load]]
//! profile = "kernel"         # kernel, io, net, mixed, cpu, memory
//! place = "host"             # or "tenants"
//!
//! [sweep]
//! "tenant.count" = [1, 2, 3]
//! "host.relay_policy" = ["other", "fifo:90"]
//! ```

use anyhow::{anyhow, bail, Result};
use ontime_core::rt::{parse_cpu_list, Policy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    #[serde(default = "default_delay", with = "ontime_core::duration::text_ns")]
    pub relay_delay: u64,
    #[serde(default = "one")]
    pub relay_threads: usize,
    #[serde(default, with = "ontime_core::rt::policy_text")]
    pub relay_policy: Policy,
    #[serde(default)]
    pub relay_affinity: Option<String>,
    /// The building gateway's threads. Document 000's gateway ran on its
    /// own 32-core machine; here it shares the contended CPUs, so by
    /// default it runs above everything under test ("fifo:95") and stamps
    /// arrivals with the kernel's receive time.
    #[serde(default = "default_gateway_policy", with = "ontime_core::rt::policy_text")]
    pub gateway_policy: Policy,
    /// SCHED_RR time slice for the run (`sched_rr_timeslice_ms`, whole ms;
    /// put back afterwards, also after a kill): Linux's nearest knob to Xen
    /// credit's 30 ms slice (document 000, finding 5).
    #[serde(default, with = "ontime_core::duration::opt_text_ns")]
    pub rr_timeslice: Option<u64>,
    /// Link rate per direction and tenant, Mbit/s.
    #[serde(default)]
    pub relay_rate_mbit: Option<f64>,
    /// Who adds the WAN delay: "auto" (netem where the kernel has it, else
    /// the relay), "relay" or "netem" (the relay then only forwards).
    #[serde(default)]
    pub wan_delay: WanDelay,
    /// QEMU tenants' accelerator: "auto" (KVM when a probe guest boots
    /// with it, else TCG), "kvm" or "tcg".
    #[serde(default)]
    pub accel: crate::vm::AccelChoice,
    /// A memory limit on each QEMU tenant's process beyond its guest's
    /// memory, e.g. "64M": it bounds the host page cache of the tenant's
    /// image (document 004's small Dom0). Absent: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_memory: Option<String>,
    /// Each QEMU tenant's guest memory and its image's host cache together,
    /// e.g. "512M" (document 004: the host's memory is fixed, so what a VM
    /// is not given, the host cache has): the host cache's bound is this
    /// minus tenant.memory. Instead of vmm_memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_memory_budget: Option<String>,
}

impl HostSpec {
    /// The host cache each QEMU tenant may hold (vmm_memory, or what
    /// vm_memory_budget leaves beside the guest's memory); None: unbounded.
    pub fn host_cache_bound(&self, guest_memory: u64) -> Result<Option<u64>, String> {
        match (&self.vmm_memory, &self.vm_memory_budget) {
            (Some(_), Some(_)) => Err("give host.vmm_memory or host.vm_memory_budget, not both".into()),
            (Some(v), None) => parse_bytes(v).map(Some).map_err(|e| format!("host.vmm_memory: {e}")),
            (None, Some(b)) => {
                let b = parse_bytes(b).map_err(|e| format!("host.vm_memory_budget: {e}"))?;
                if b <= guest_memory {
                    return Err(format!(
                        "host.vm_memory_budget ({} MiB) leaves no host cache beside the guest's {} MiB (tenant.memory)",
                        b >> 20,
                        guest_memory >> 20
                    ));
                }
                Ok(Some(b - guest_memory))
            }
            (None, None) => Ok(None),
        }
    }
}

/// Who adds the WAN delay (`host.wan_delay`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum WanDelay {
    /// netem where the kernel has it, else the relay.
    #[default]
    Auto,
    Relay,
    /// netem qdiscs on the host-side links; the relay only forwards.
    Netem,
}

/// The scheduler recorder of each run (`observe.recorder`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Recorder {
    #[default]
    Ontime,
    /// `perf sched record`, the peer.
    Perf,
    Off,
}

impl Recorder {
    pub fn as_str(self) -> &'static str {
        match self {
            Recorder::Ontime => "ontime",
            Recorder::Perf => "perf",
            Recorder::Off => "off",
        }
    }
}

/// What a `[[load]]` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum LoadKind {
    /// A stress-ng profile.
    Stress(ontime_load::LoadProfile),
    /// An iperf3 UDP flow from every tenant to the building side, through
    /// the host relay.
    Wan,
    None,
}

impl TryFrom<String> for LoadKind {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "wan" => Ok(LoadKind::Wan),
            "none" => Ok(LoadKind::None),
            other => other
                .parse()
                .map(LoadKind::Stress)
                .map_err(|e| format!("{e} (or wan, none)")),
        }
    }
}

impl From<LoadKind> for String {
    fn from(k: LoadKind) -> String {
        match k {
            LoadKind::Stress(p) => p.to_string(),
            LoadKind::Wan => "wan".into(),
            LoadKind::None => "none".into(),
        }
    }
}

fn default_gateway_policy() -> Policy {
    Policy::Fifo { priority: 95 }
}

impl Default for HostSpec {
    fn default() -> Self {
        HostSpec {
            relay_delay: default_delay(),
            relay_threads: 1,
            relay_policy: Policy::Other,
            relay_affinity: None,
            gateway_policy: default_gateway_policy(),
            rr_timeslice: None,
            relay_rate_mbit: None,
            wan_delay: WanDelay::Auto,
            accel: crate::vm::AccelChoice::Auto,
            vmm_memory: None,
            vm_memory_budget: None,
        }
    }
}

fn default_delay() -> u64 {
    10_000_000
}
fn one() -> usize {
    1
}
fn ten() -> usize {
    10
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Namespace + cgroup + k vCPU threads.
    #[default]
    Sandbox,
    /// The probe on the host itself: no cgroup limits, as many threads as
    /// CPUs (still behind the relay, like document 000's native baseline).
    Native,
    /// A QEMU guest per tenant (KVM or TCG): `vcpus` vCPU threads, its own
    /// kernel, emulated or virtio devices (`[tenant.vm]`); the probe and
    /// the tenant's loads run inside it.
    Qemu,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sandbox => "sandbox",
            Backend::Native => "native",
            Backend::Qemu => "qemu",
        }
    }
}

/// A crawler's layout of a period's polls (`[tenant.crawl] phase`).
pub use ontime_crawl::config::Phase;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CrawlWorkload {
    /// Polls per second per tenant.
    pub rate: f64,
    #[serde(default = "ten")]
    pub points_per_request: usize,
    #[serde(default = "default_period", with = "ontime_core::duration::text_ns")]
    pub period: u64,
    #[serde(default, with = "ontime_core::duration::opt_text_ns")]
    pub timeout: Option<u64>,
    /// CPU time per answered poll (`ontime crawl --work-per-poll`).
    #[serde(default, with = "ontime_core::duration::opt_text_ns")]
    pub work_per_poll: Option<u64>,
    /// Pareto shape of the per-poll work, same mean (`--work-tail`): the
    /// crawler's own sub-second bursts (document 000, finding 3). 0 is a
    /// fixed cost per poll, so a sweep can compare the two.
    #[serde(default)]
    pub work_tail: Option<f64>,
    /// Where the crawler spends that work: "answer" (default) or
    /// "request" (`--work-at`).
    #[serde(default, skip_serializing_if = "ontime_core::work::WorkAt::is_answer")]
    pub work_at: ontime_core::work::WorkAt,
    /// How a period's polls are laid out (`--phase`): "spread" (default),
    /// "aligned" (each crawler's polls of a period at once) or "clock"
    /// (aligned, and every tenant's on the same instants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// What the crawler and the building gateway speak: "http"
    /// (getValues, default), "modbus" (Modbus/TCP, tenant i reading unit
    /// i + 1) or "bacnet" (BACnet/IP, tenant i reading device i + 1 on
    /// port 47808 + i; docs/protocols.md). Over Modbus and BACnet the
    /// answers carry no receive time, so the run is judged again from the
    /// gateway's receive log (the record's `reference`).
    #[serde(default, skip_serializing_if = "CrawlProtocol::is_http")]
    pub protocol: CrawlProtocol,
}

/// `tenant.command`: a poller of the gateway `[tenant.crawl]` describes,
/// in place of ontime's crawler, where its veth can be captured on.
fn validate_command(c: &RunConfig) -> Result<()> {
    let t = &c.tenant;
    let Some(cmd) = &t.command else {
        return Ok(());
    };
    if cmd.trim().is_empty() {
        bail!("tenant.command is empty: give the poller to run, e.g. \"while :; do mbpoll ...; sleep 1; done\"");
    }
    let Some(cr) = &t.crawl else {
        bail!("tenant.command polls the gateway [tenant.crawl] describes: add [tenant.crawl] (rate, period, protocol)");
    };
    if t.backend == Backend::Qemu {
        bail!("tenant.command: its packets are captured on the tenant's veth, and a QEMU guest has none on the host: use backend = \"sandbox\"");
    }
    if cr.work_per_poll.is_some() || cr.work_tail.is_some() || cr.phase.is_some() || cr.timeout.is_some() {
        bail!("tenant.crawl's work_per_poll, work_tail, phase and timeout shape ontime's own crawler, which tenant.command replaces: drop them");
    }
    Ok(())
}

/// The protocol of `[tenant.crawl] protocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CrawlProtocol {
    #[default]
    Http,
    Modbus,
    Bacnet,
}

impl CrawlProtocol {
    pub fn is_http(&self) -> bool {
        *self == CrawlProtocol::Http
    }
}

impl CrawlWorkload {
    /// The per-poll work this tenant's crawler does (`work_tail = 0`: a
    /// fixed cost), as `ontime crawl` and the simulator take it.
    pub fn work_model(&self) -> ontime_core::work::WorkModel {
        ontime_core::work::WorkModel {
            mean_ns: self.work_per_poll.unwrap_or(0),
            tail: self.work_tail.filter(|&t| t != 0.0),
        }
    }
}

fn default_period() -> u64 {
    1_000_000_000
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CyclicWorkload {
    #[serde(default = "default_interval", with = "ontime_core::duration::text_ns")]
    pub interval: u64,
}

fn default_interval() -> u64 {
    1_000_000
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantTemplate {
    #[serde(default = "one")]
    pub count: usize,
    #[serde(default)]
    pub backend: Backend,
    #[serde(default = "one")]
    pub vcpus: usize,
    /// Memory limit, e.g. "512M" or "2G" (QEMU tenants: the guest's
    /// memory, 256M when absent).
    #[serde(default)]
    pub memory: Option<String>,
    /// QEMU tenants' network card and VMM threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<crate::vm::VmConfig>,
    /// A virtual disk per tenant (document 004): an image file on the
    /// host through a loop device, ext4, mounted at /mnt/ontime-disk in the
    /// tenant's own mount namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskConfig>,
    /// Swap beyond `memory` (document 004): "none" (the tenant never
    /// swaps), "memory" (as much as its memory) or a size; a swap file of
    /// that size on its disk is switched on. Absent: the host's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<String>,
    #[serde(default)]
    pub cpu_quota: Option<f64>,
    #[serde(default)]
    pub cpu_shares: Option<u64>,
    #[serde(default)]
    pub cpuset: Option<String>,
    /// Policy of the vCPU threads.
    #[serde(default, with = "ontime_core::rt::policy_text")]
    pub policy: Policy,
    #[serde(default)]
    pub crawl: Option<CrawlWorkload>,
    /// A poller ontime did not write, run in each tenant (`sh -c`) in
    /// place of ontime's crawler, against the gateway `[tenant.crawl]`
    /// describes; measured from its packets on the tenant's veth (`ontime
    /// wire record`, the crawl's period given). Its environment names its
    /// target: ONTIME_URL, ONTIME_HOST, ONTIME_PORT, ONTIME_UNIT (Modbus
    /// unit or BACnet device), ONTIME_POINTS, ONTIME_PERIOD_S,
    /// ONTIME_DURATION_S, ONTIME_TENANT; and ONTIME_RUN_DIR, the run's
    /// directory, for what it writes. It runs in the directory the lab
    /// was started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default)]
    pub cyclic: Option<CyclicWorkload>,
    /// An I/O workload on the tenant's disk (document 004): fio, dd or
    /// Postmark (`ontime io workload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<ontime_io::workload::WorkloadSpec>,
}

impl TenantTemplate {
    /// Swap in bytes the tenant may use: None = host default, Some(0) = none.
    pub fn swap_bytes(&self) -> Result<Option<u64>, String> {
        match self.swap.as_deref() {
            None => Ok(None),
            Some("none") => Ok(Some(0)),
            Some("memory") => match self.memory.as_deref() {
                Some(m) => parse_bytes(m).map(Some),
                None => Err("tenant.swap = \"memory\" needs tenant.memory".into()),
            },
            Some(size) => parse_bytes(size)
                .map(Some)
                .map_err(|e| format!("tenant.swap: {e} (or none, memory)")),
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    #[default]
    Host,
    /// One load inside every tenant (its namespace and cgroup).
    Tenants,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// kernel, io, net, mixed, cpu, memory (stress-ng), wan (an iperf3 UDP flow from
    /// every tenant to the building side, through the host relay) or none.
    pub profile: LoadKind,
    #[serde(default)]
    pub place: Place,
    #[serde(default = "one")]
    pub workers: usize,
    /// For wan: the flow's rate per tenant in Mbit/s.
    #[serde(default = "default_wan_mbit")]
    pub rate_mbit: f64,
    /// For profiles with stress-ng's vm stressor (memory, kernel, mixed):
    /// each worker's anonymous memory, e.g. "64M" (default 128M).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
}

impl LoadSpec {
    /// `bytes` in bytes (checked by scenario validation).
    pub fn vm_bytes(&self) -> Result<Option<u64>, String> {
        self.bytes
            .as_deref()
            .map(|b| parse_bytes(b).map_err(|e| format!("load bytes: {e}")))
            .transpose()
    }
}

fn default_wan_mbit() -> f64 {
    50.0
}

/// One fully resolved run configuration.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(with = "ontime_core::duration::text_ns")]
    pub duration: u64,
    #[serde(default = "one_u32")]
    pub repetitions: u32,
    #[serde(default)]
    pub host: HostSpec,
    pub tenant: TenantTemplate,
    #[serde(default, rename = "load")]
    pub loads: Vec<LoadSpec>,
    /// Named sets of loads, e.g. `[load_sets] kernel = [{ profile = "kernel" }]`.
    #[serde(default)]
    pub load_sets: BTreeMap<String, Vec<LoadSpec>>,
    /// Which set runs (besides `[[load]]`); "none" or absent runs none. Sweep
    /// it to compare loads.
    #[serde(default)]
    pub load_set: Option<String>,
    /// Report settings: which swept key is the x axis.
    #[serde(default)]
    pub report: ReportSpec,
    /// Scheduler recording during each run (`ontime observe`).
    #[serde(default)]
    pub observe: ObserveSpec,
    /// What each tenant must meet; the report opens with the verdict.
    #[serde(default)]
    pub targets: Targets,
    /// Document 003's real-time channels: the bottleneck link, the
    /// controller and the measured flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<NetSpec>,
    /// Causes injected at known times, the attribution's ground truth
    /// (`[[inject]]`; docs/explain.md, "Ground truth").
    #[serde(default, rename = "inject", skip_serializing_if = "Vec::is_empty")]
    pub injections: Vec<InjectSpec>,
}

/// What `[[inject]]` injects.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum InjectCause {
    /// A SCHED_FIFO busy loop on a tenant's CPU, on the host.
    CpuBurst,
    /// A SCHED_FIFO busy loop below a real-time tenant's priority, longer
    /// than the real-time class's budget, with an ordinary busy thread
    /// beside it: when the budget runs out the class is throttled and the
    /// tenant waits behind the ordinary thread.
    RtThrottle,
    /// Bursts of the tenant's probe's own work (its first thread spins):
    /// the events after each are late by work of its own.
    OwnWork,
    /// A UDP flood written onto the tenant's veth from another CPU, its
    /// receipt steered to the tenant's CPU: softirq time there.
    SoftirqFlood,
    /// The host relay's threads held (asleep, carrying nothing) for
    /// `length`: requests reach the gateway late.
    RelayStall,
    /// The building gateway holds every answer due for `length` (it still
    /// receives and stamps requests): answers come back late.
    GatewayStall,
}

/// One injected cause, repeated through the run:
///
/// ```toml
/// [[inject]]
/// cause = "cpu-burst"     # a SCHED_FIFO busy loop on the tenant's CPU
/// tenant = 0              # whose CPU: the first of tenant.cpuset
/// # cpu = 1               # ... or this CPU
/// length = "30ms..80ms"   # each burst's length, drawn uniformly (or "50ms")
/// every = "1s"            # from one burst's start to the next
/// priority = 90           # SCHED_FIFO priority, above the tenant's
/// start_after = "1s"      # the probes measure by then
/// ```
///
/// `cause = "rt-throttle"` holds the CPU at a priority below a real-time
/// tenant's for longer than the class's budget (e.g. `length =
/// "1500ms..2s"`, `every = "4s"`, `priority = 1`), with an ordinary thread
/// busy beside it: the tenant preempts the loop, but not the throttling.
///
/// `cause = "own-work"` makes the tenant's cyclic probe spin for `length`
/// at its first wake-up after each `every` (no CPU or priority).
///
/// On QEMU tenants (with `[observe] guest = true`) a cpu-burst runs on the
/// host, on the vCPU's CPU, or with `inside = "guest"` in the tenant's
/// guest, on its guest CPU `cpu` (default 0), started by the guest's job.
///
/// `cause = "relay-stall"` holds the host relay's threads for `length`
/// every `every` (all tenants' frames wait; no CPU or priority).
///
/// `cause = "gateway-stall"` makes the building gateway hold every answer
/// due for `length` every `every` (it still receives and stamps requests;
/// no CPU or priority).
///
/// `cause = "softirq-flood"` floods the tenant's interface with UDP for
/// `length` every `every` from another CPU, its receipt steered to the
/// tenant's CPU (`cpu`: the flooder's CPU; `rate`: frames per second at
/// most; sandbox tenants).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InjectSpec {
    pub cause: InjectCause,
    #[serde(default)]
    pub tenant: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    pub length: String,
    #[serde(with = "ontime_core::duration::text_ns")]
    pub every: u64,
    #[serde(default = "default_inject_priority")]
    pub priority: u8,
    #[serde(with = "ontime_core::duration::text_ns", default = "default_inject_start")]
    pub start_after: u64,
    /// softirq-flood: frames per second at most (default: as fast as the
    /// flooder sends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u64>,
    /// cpu-burst on a QEMU tenant: on the host (the vCPU's CPU, the
    /// default) or inside the tenant's guest (its guest CPU `cpu`, else 0).
    #[serde(default)]
    pub inside: InjectInside,
}

/// Where a cpu-burst on a QEMU tenant runs.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InjectInside {
    #[default]
    Host,
    Guest,
}

fn default_inject_priority() -> u8 {
    90
}

fn default_inject_start() -> u64 {
    1_000_000_000
}

impl InjectSpec {
    /// `length` as (min, max) ns: "30ms..80ms" or "50ms".
    pub fn length_ns(&self) -> Result<(u64, u64), String> {
        let (a, b) = match self.length.split_once("..") {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (self.length.trim(), self.length.trim()),
        };
        let min = ontime_core::duration::parse_ns(a)?;
        let max = ontime_core::duration::parse_ns(b)?;
        if min == 0 || min > max {
            return Err(format!("\"{}\": give min..max with 0 < min <= max", self.length));
        }
        Ok((min, max))
    }

    /// When it injects, in a run of `duration_ns` (the draws seeded by
    /// `seed`).
    pub fn timing(&self, duration_ns: u64, seed: u64) -> Result<ontime_load::inject::Timing, String> {
        let (min_ns, max_ns) = self.length_ns()?;
        Ok(ontime_load::inject::Timing {
            min_ns,
            max_ns,
            every_ns: self.every,
            start_after_ns: self.start_after,
            for_ns: duration_ns.saturating_sub(self.start_after),
            seed,
        })
    }

    /// The CPU it holds: `cpu`, else the first of the tenants' cpuset.
    pub fn cpu_of(&self, tenant: &TenantTemplate) -> Result<usize, String> {
        if let Some(c) = self.cpu {
            return Ok(c);
        }
        self.tenant_cpu(tenant)
    }

    /// A flood's flooder: `cpu`, else the first online CPU outside the
    /// tenants' cpuset; never inside it (the flooder's own time would
    /// delay the probe there).
    pub fn flooder_cpu(&self, tenant: &TenantTemplate) -> Result<usize, String> {
        let online = ontime_core::limits::online_cpus();
        let set = tenant
            .cpuset
            .as_deref()
            .ok_or("give tenant.cpuset, so that the flood's receipt goes to a known CPU of the tenant's")?;
        let theirs = ontime_core::rt::parse_cpu_list(set)?;
        let cpu = match self.cpu {
            Some(c) => c,
            None => (0..online)
                .find(|c| !theirs.contains(c))
                .ok_or_else(|| format!("a flood's flooder needs a CPU outside tenant.cpuset \"{set}\""))?,
        };
        if cpu >= online {
            return Err(format!("CPU {cpu} is not online (this host has {online})"));
        }
        if theirs.contains(&cpu) {
            return Err(format!(
                "cpu = {cpu}: the flooder runs outside tenant.cpuset \"{set}\", beside the tenant, not on it"
            ));
        }
        Ok(cpu)
    }

    /// The tenant's CPU: the first of tenant.cpuset.
    pub fn tenant_cpu(&self, tenant: &TenantTemplate) -> Result<usize, String> {
        let set = tenant
            .cpuset
            .as_deref()
            .ok_or("give inject.cpu, or tenant.cpuset so that the tenant's CPU is known")?;
        ontime_core::rt::parse_cpu_list(set)?
            .first()
            .copied()
            .ok_or_else(|| format!("tenant.cpuset \"{set}\" names no CPU"))
    }
}

/// Document 003's experiment (`[net]`): the relay becomes one bottleneck
/// link scheduled by EDF/WFQ, the controller runs (its API on
/// /run/ontime/net-controller.sock), measured UDP flows run between
/// tenants (or to the building side), best effort fills the link.
///
/// ```toml
/// [net]
/// link_mbit = 100            # the bottleneck, both directions share it
/// buffer = "170K"            # best-effort buffer at the bottleneck
/// channels = "deadline"      # none, deadline, reservation or declared (each flow's kind)
/// best_effort_mbit = 110     # UDP (iperf3) from the tenants that send no flow
/// [[net.flow]]
/// name = "A"
/// from = 0                   # tenant index
/// to = "building"            # or "t3" (the same-host case)
/// port = 5001
/// rate_mbit = 2
/// size = 500                 # UDP payload bytes
/// deadline = "5ms"
/// ```
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetSpec {
    pub link_mbit: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<String>,
    #[serde(default)]
    pub channels: ChannelMode,
    /// Share of the link channels may use together.
    #[serde(default = "default_max_share")]
    pub max_share: f64,
    /// Share of each deadline packet's budget best effort may not take
    /// (0: document 003's soft EDF, best effort ahead while the deadline
    /// itself is safe; 0.5: while half the budget remains).
    #[serde(default)]
    pub edf_guard: f64,
    #[serde(default)]
    pub best_effort_mbit: f64,
    #[serde(default = "building_name")]
    pub best_effort_to: String,
    /// Escalate on misses (deadline: priority; reservation: a larger R).
    #[serde(default = "yes")]
    pub escalate: bool,
    /// Real-time policy the controller gives channel senders' threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpu_policy: Option<String>,
    /// Also serve the API on this TCP address (e.g. "127.0.0.1:7733").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(default, rename = "flow")]
    pub flows: Vec<FlowSpec>,
}

/// How a scenario's flows ask for channels.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChannelMode {
    /// No channels: every flow is best effort (document 003's "without").
    None,
    #[default]
    Deadline,
    Reservation,
    /// Each flow's own `kind`.
    Declared,
}

/// One measured flow: a paced UDP sender in tenant `from`, a receiver that
/// times every datagram at `to`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    pub name: String,
    pub from: usize,
    #[serde(default = "building_name")]
    pub to: String,
    pub port: u16,
    /// What it sends, Mbit/s of UDP payload.
    pub rate_mbit: f64,
    /// What its channel declares (default: `rate_mbit`); a flow that sends
    /// more than it declared is how a misbehaving channel is modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_rate_mbit: Option<f64>,
    #[serde(default = "default_flow_size")]
    pub size: usize,
    /// Datagrams sent back to back each time.
    #[serde(default = "one_u32")]
    pub burst: u32,
    #[serde(with = "ontime_core::duration::text_ns")]
    pub deadline: u64,
    /// When it starts after the run does.
    #[serde(default, with = "ontime_core::duration::text_ns")]
    pub start: u64,
    /// Ask for a channel (false: it stays best effort whatever `net.channels` says).
    #[serde(default = "yes")]
    pub channel: bool,
    /// With `net.channels = "declared"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ontime_net::channel::ChannelKind>,
}

fn default_max_share() -> f64 {
    0.9
}

fn building_name() -> String {
    "building".into()
}

fn yes() -> bool {
    true
}

fn default_flow_size() -> usize {
    1000
}

impl NetSpec {
    /// Tenants that send no flow (where best effort comes from).
    pub fn best_effort_tenants(&self, count: usize) -> Vec<usize> {
        (0..count).filter(|i| self.flows.iter().all(|f| f.from != *i)).collect()
    }

    fn validate(&self, count: usize, duration: u64) -> Result<()> {
        if !(self.link_mbit.is_finite() && self.link_mbit >= 1.0 && self.link_mbit <= 10_000.0) {
            bail!("net.link_mbit = {}: give 1 to 10000", self.link_mbit);
        }
        if !(0.0..1.0).contains(&self.edf_guard) {
            bail!(
                "net.edf_guard = {}: give a share from 0 up to (not including) 1",
                self.edf_guard
            );
        }
        if !(self.max_share > 0.0 && self.max_share <= 1.0) {
            bail!("net.max_share = {}: give a share above 0, at most 1", self.max_share);
        }
        if let Some(b) = &self.buffer {
            let n = parse_bytes(b).map_err(|e| anyhow!("net.buffer: {e}"))?;
            if n < 1518 {
                bail!("net.buffer = {b}: smaller than one frame (1518 bytes)");
            }
        }
        if !(self.best_effort_mbit.is_finite() && (0.0..=10_000.0).contains(&self.best_effort_mbit)) {
            bail!("net.best_effort_mbit = {}: give 0 to 10000", self.best_effort_mbit);
        }
        let endpoint = |name: &str, what: &str| -> Result<()> {
            if name == "building" || ontime_core::names::tenant_index(name).is_some_and(|i| i < count) {
                Ok(())
            } else {
                bail!("{what} = \"{name}\": give \"building\" or a tenant t0..t{}", count - 1)
            }
        };
        endpoint(&self.best_effort_to, "net.best_effort_to")?;
        if self.best_effort_mbit > 0.0 {
            let be = self.best_effort_tenants(count);
            let to = ontime_core::names::tenant_index(&self.best_effort_to);
            if be.iter().all(|i| Some(*i) == to) {
                bail!(
                    "net.best_effort_mbit: every tenant sends a flow or receives the best effort; raise tenant.count"
                );
            }
        }
        if let Some(p) = &self.vcpu_policy {
            let p: Policy = p.parse().map_err(|e| anyhow!("net.vcpu_policy: {e}"))?;
            if !p.is_realtime() {
                bail!("net.vcpu_policy: give a real-time policy: fifo:PRIO, rr:PRIO or deadline:RUNTIME/PERIOD");
            }
        }
        if let Some(l) = &self.listen {
            l.parse::<std::net::SocketAddr>()
                .map_err(|e| anyhow!("net.listen = \"{l}\": {e} (give ADDRESS:PORT)"))?;
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut names = std::collections::BTreeSet::new();
        for (k, f) in self.flows.iter().enumerate() {
            let at = format!("net.flow[{k}] ({})", f.name);
            if f.name.is_empty()
                || !f
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                bail!("{at}: name must be letters, digits, - or _");
            }
            // The name is its result file's (flow-NAME.json): one each.
            if !names.insert(f.name.as_str()) {
                bail!("{at}: another flow is already named {}", f.name);
            }
            if !seen.insert((f.to.clone(), f.port)) {
                bail!("{at}: another flow already goes to {} port {}", f.to, f.port);
            }
            if f.from >= count {
                bail!("{at}: from = {}: there are {count} tenants (0..{})", f.from, count - 1);
            }
            endpoint(&f.to, &format!("{at}.to"))?;
            if ontime_core::names::tenant_index(&f.to) == Some(f.from) {
                bail!("{at}: from and to are the same tenant");
            }
            if !(f.rate_mbit.is_finite() && f.rate_mbit > 0.0 && f.rate_mbit <= 10_000.0) {
                bail!("{at}: rate_mbit must be above 0 (at most 10000)");
            }
            if f.declared_rate_mbit.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
                bail!("{at}: declared_rate_mbit must be above 0");
            }
            // The channel MTU (1496, room for the label) less IPv4 and UDP headers.
            if !(20..=1468).contains(&f.size) {
                bail!(
                    "{at}: size = {}: give 20 to 1468 bytes (the tenants' MTU is 1496, room for the label)",
                    f.size
                );
            }
            if f.burst == 0 || f.burst > 1000 {
                bail!("{at}: burst must be 1..1000");
            }
            if f.deadline == 0 {
                bail!("{at}: deadline must be above 0");
            }
            if f.start >= duration {
                bail!("{at}: start is not before the end of the run");
            }
            if self.channels == ChannelMode::Declared && f.channel && f.kind.is_none() {
                bail!("{at}: net.channels = \"declared\" needs each flow's kind (deadline or reservation)");
            }
        }
        Ok(())
    }
}

/// Timeliness targets of a scenario, on each tenant's headline metric
/// (interval error, or wake-up latency of every planned wake-up):
///
/// ```toml
/// [targets]
/// "p99.9" = "10ms"   # any reported percentile, p50 ... p99.9999
/// max = "50ms"
/// missed = 0         # missed polls / overrun periods, at most
/// ```
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(try_from = "BTreeMap<String, toml::Value>", into = "BTreeMap<String, toml::Value>")]
pub struct Targets {
    /// (percentile name or "max", at most ns), in file order of names.
    pub latency: Vec<(String, u64)>,
    pub missed: Option<u64>,
}

impl Targets {
    pub fn is_empty(&self) -> bool {
        self.latency.is_empty() && self.missed.is_none()
    }
}

impl TryFrom<BTreeMap<String, toml::Value>> for Targets {
    type Error = String;
    fn try_from(m: BTreeMap<String, toml::Value>) -> Result<Self, String> {
        let mut t = Targets::default();
        for (k, v) in m {
            match (k.as_str(), &v) {
                ("missed", toml::Value::Integer(n)) if *n >= 0 => t.missed = Some(*n as u64),
                ("missed", _) => return Err(format!("targets.missed = {v}: give a count, e.g. 0")),
                (name, toml::Value::String(d))
                    if name == "max" || ontime_core::stats::PERCENTILES.iter().any(|(p, _)| *p == name) =>
                {
                    let ns = ontime_core::duration::parse_ns(d).map_err(|e| format!("targets.\"{name}\": {e}"))?;
                    t.latency.push((name.to_string(), ns));
                }
                (name, _) => {
                    return Err(format!(
                    "targets.\"{name}\" = {v}: use a percentile (\"p99.9\" = \"10ms\"), max = \"50ms\" or missed = 0"
                ))
                }
            }
        }
        Ok(t)
    }
}

impl From<Targets> for BTreeMap<String, toml::Value> {
    fn from(t: Targets) -> Self {
        let mut m: BTreeMap<String, toml::Value> = t
            .latency
            .into_iter()
            .map(|(k, ns)| (k, toml::Value::String(ontime_core::duration::format_exact(ns))))
            .collect();
        if let Some(n) = t.missed {
            m.insert("missed".into(), toml::Value::Integer(n as i64));
        }
        m
    }
}

impl RunConfig {
    /// `[[load]]` plus the selected load set.
    pub fn effective_loads(&self) -> Vec<LoadSpec> {
        let mut v = self.loads.clone();
        if let Some(set) = self.load_set.as_deref().and_then(|s| self.load_sets.get(s)) {
            v.extend(set.iter().cloned());
        }
        v
    }
}

fn one_u32() -> u32 {
    1
}

/// `[tenant.disk]`: size = "1G" (sparse image), direct = false (the loop
/// device through the host page cache; true bypasses it).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    pub size: String,
    #[serde(default)]
    pub direct: bool,
    /// QEMU tenants: the guest's disk controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::vm::DiskModel>,
    /// QEMU tenants: the disk served by its own I/O thread (virtio-blk).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub iothread: bool,
    /// QEMU tenants: "writeback" (through the host page cache) or "none".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::vm::DiskCache>,
    /// QEMU tenants: how QEMU submits the image's I/O, "threads" (its
    /// thread pool), "native" (Linux AIO; needs cache = "none") or
    /// "io_uring".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aio: Option<crate::vm::DiskAio>,
    /// QEMU tenants: "raw" or "qcow2".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<crate::vm::ImageFormat>,
}

/// `[observe]`: which recorder watches the run's scheduler. "ontime" (the
/// default) records tenants and the host I/O path with BPF and the report
/// shows their per-window CPU, contention and host-path minimum; "perf" runs
/// `perf sched record -a` instead (the overhead benchmark's peer); "off"
/// records nothing. `profile = 1000` also samples the tenants' stacks at
/// that rate (Hz) and the report shows where their time went (`ontime
/// profile`: steal by whom and by function). `io = true` records the
/// tenants' I/O per layer (`ontime io`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ObserveSpec {
    #[serde(default)]
    pub recorder: Recorder,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<u32>,
    /// Also record the tenants' I/O at the application, virtual-disk and
    /// physical-disk layers (`ontime io record`); the report shows what
    /// each cache absorbed.
    #[serde(default)]
    pub io: bool,
    /// The I/O recorder traces every file call (sizes, latency, files) at
    /// the application layer (`ontime io record --calls`), the default in
    /// the lab: the guest cache's absorption needs file I/O told apart from
    /// a workload's reads of /dev/zero or writes to /dev/null. `false`
    /// reads the threads' counters instead, which costs the tenants
    /// nothing but counts those too.
    #[serde(default = "yes")]
    pub io_calls: bool,
    /// The flight recorder (docs/lab.md, "The flight recorder"): the
    /// recording kept only around the tenants' late intervals, so a long
    /// run's disk stays bounded. "auto" (the default) turns it on for runs
    /// longer than [`FLIGHT_AUTO_NS`].
    #[serde(default)]
    pub flight: Flight,
    /// Kept on either side of a late interval.
    #[serde(default = "default_keep_around")]
    pub keep_around: String,
    /// How long a finished 1 s window is held at most before it is kept or
    /// deleted (sooner once every tenant's probe has logged past it).
    #[serde(default = "default_ring")]
    pub ring: String,
    /// Kept windows at most (1 s each).
    #[serde(default = "default_max_kept")]
    pub max_kept: u64,
    /// QEMU tenants: each guest also records its own scheduling (`ontime
    /// observe record --all` inside it) and measures its clock against the
    /// host's, so its probe's late events are explained on the guest's
    /// side and split by the host's (docs/explain.md, "Guest and host").
    /// Off by default: the guest's recorder runs on the guest's vCPUs,
    /// beside the probe it explains.
    #[serde(default)]
    pub guest: bool,
}

/// `observe.flight`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Flight {
    #[default]
    Auto,
    On,
    Off,
}

/// Runs longer than this get the flight recorder by default: five minutes
/// of a whole recording is a few hundred MB on a busy host.
pub const FLIGHT_AUTO_NS: u64 = 300_000_000_000;

fn default_keep_around() -> String {
    "2s".into()
}

fn default_ring() -> String {
    "30s".into()
}

fn default_max_kept() -> u64 {
    300
}

impl Default for ObserveSpec {
    fn default() -> Self {
        ObserveSpec {
            recorder: Recorder::Ontime,
            profile: None,
            io: false,
            io_calls: true,
            flight: Flight::Auto,
            keep_around: default_keep_around(),
            ring: default_ring(),
            max_kept: default_max_kept(),
            guest: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    #[serde(default)]
    pub x: Option<String>,
}

/// A run of the plan: its settings and the swept values that made it.
#[derive(Clone, Debug, Serialize)]
pub struct PlannedRun {
    pub index: usize,
    pub repetition: u32,
    /// (key, value as text) for every swept key, in sweep order.
    pub vars: Vec<(String, String)>,
    pub config: RunConfig,
}

impl PlannedRun {
    /// Directory name: index, swept values, repetition.
    pub fn dir_name(&self) -> String {
        let mut s = format!("{:03}", self.index);
        for (k, v) in &self.vars {
            let key = k.rsplit('.').next().unwrap_or(k);
            let v: String = v
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' })
                .collect();
            s.push_str(&format!("-{key}={v}"));
        }
        s.push_str(&format!("-rep{}", self.repetition));
        s
    }
}

/// The expanded plan of a scenario file.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub name: String,
    pub sweep_keys: Vec<String>,
    pub runs: Vec<PlannedRun>,
}

impl Plan {
    pub fn total_duration_ns(&self) -> u64 {
        self.runs.iter().map(|r| r.config.duration + RUN_OVERHEAD_NS).sum()
    }
}

/// Set-up and teardown per run, for time estimates.
pub const RUN_OVERHEAD_NS: u64 = 3_000_000_000;

/// The largest scenario file read. A person writes it (the largest
/// shipped is 3 KB), and a plan holds its settings once per run, up to
/// [`ontime_core::limits::MAX_RUNS`] runs: the cap bounds that product.
pub const MAX_SCENARIO_BYTES: u64 = 64 << 10;

/// A scenario file's text under the input rule (a regular file of at most
/// [`MAX_SCENARIO_BYTES`], UTF-8); a refusal is bad input naming the file.
pub fn read_text(path: &Path) -> Result<String> {
    ontime_core::fsio::read_text_capped(path, "scenario (TOML)", MAX_SCENARIO_BYTES)
}

/// Reads and expands a scenario file; every error names the file and key.
pub fn load(path: &Path) -> Result<Plan> {
    let text = read_text(path)?;
    load_str(&text, path)
}

/// [`load`] of a scenario's text; `path` names it in errors.
pub fn load_str(text: &str, path: &Path) -> Result<Plan> {
    let text = text.to_string();
    let origin = path.display().to_string();
    let mut root: toml::Value = ontime_core::config::parse_toml(&text, &origin)?;
    let table = root
        .as_table_mut()
        .ok_or_else(|| anyhow!("{origin}: not a TOML table"))?;
    let sweep = match table.remove("sweep") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t,
        Some(_) => bail!("{origin}: [sweep] must be a table of \"key\" = [values]"),
    };
    // Named sets of settings that change together ("mitigated" = relay
    // and vCPU threads at real-time priority), swept as "variant".
    let variants = match table.remove("variants") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t,
        Some(_) => bail!("{origin}: [variants] must be a table of name = {{ \"key\" = value, ... }}"),
    };
    for (name, settings) in &variants {
        let Some(settings) = settings.as_table() else {
            bail!("{origin}: variants.{name} must be a table of \"key\" = value");
        };
        for k in settings.keys() {
            if k == "variant" || (get_path(&root, k).is_none() && !optional_path(k)) {
                bail!("{origin}: variants.{name}.\"{k}\": no such key in the scenario (declare it first, e.g. under [tenant])");
            }
        }
    }
    let mut keys = Vec::new();
    let mut values: Vec<Vec<toml::Value>> = Vec::new();
    for (k, v) in sweep {
        let toml::Value::Array(list) = v else {
            bail!("{origin}: sweep.\"{k}\" must be a list of values");
        };
        if list.is_empty() {
            bail!("{origin}: sweep.\"{k}\" is empty");
        }
        if k == "variant" {
            for v in &list {
                let known = v.as_str().is_some_and(|n| variants.contains_key(n));
                if !known {
                    bail!(
                        "{origin}: sweep.\"variant\": no variant {v}: declare it under [variants] (known: {})",
                        variants.keys().cloned().collect::<Vec<_>>().join(", ")
                    );
                }
            }
        } else if get_path(&root, &k).is_none() && !optional_path(&k) {
            bail!("{origin}: sweep.\"{k}\": no such key in the scenario (declare it first, e.g. under [tenant])");
        }
        keys.push(k);
        values.push(list);
    }
    // Before any combination is made: a sweep's runs multiply.
    let max_runs = ontime_core::limits::MAX_RUNS;
    let combinations = values
        .iter()
        .try_fold(1u64, |n, l| n.checked_mul(l.len() as u64).filter(|&n| n <= max_runs));
    let Some(combinations) = combinations else {
        bail!(
            "{origin}: the sweep's lists ({}) make more than {max_runs} combinations: sweep fewer values or split the scenario",
            keys.iter()
                .zip(&values)
                .map(|(k, l)| format!("{} x {k}", l.len()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let mut combos: Vec<Vec<toml::Value>> = Vec::with_capacity(combinations as usize);
    combos.push(vec![]);
    for list in &values {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                list.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push(v.clone());
                    c
                })
            })
            .collect();
    }
    let mut runs = Vec::new();
    let mut planned = Vec::new();
    let mut name = String::new();
    for combo in combos {
        let mut v = root.clone();
        let mut vars = Vec::new();
        for (k, val) in keys.iter().zip(combo) {
            if k == "variant" {
                let name = value_text(&val);
                for (vk, vv) in variants[&name].as_table().into_iter().flatten() {
                    set_path(&mut v, vk, vv.clone()).map_err(|e| anyhow!("{origin}: variants.{name}.\"{vk}\": {e}"))?;
                }
            } else {
                set_path(&mut v, k, val.clone()).map_err(|e| anyhow!("{origin}: sweep.\"{k}\": {e}"))?;
            }
            vars.push((k.clone(), value_text(&val)));
        }
        let where_ = if vars.is_empty() {
            String::new()
        } else {
            format!(
                " (with {})",
                vars.iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        // The path of the field at fault ("tenant.policy") leads the error.
        let cfg: RunConfig = serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            let msg = e.into_inner().to_string().trim().replace('\n', " ");
            if msg.contains(&format!("`{path}`")) {
                anyhow!("{origin}{where_}: {msg}")
            } else {
                anyhow!("{origin}{where_}: {path}: {msg}")
            }
        })?;
        validate(&cfg).map_err(|e| anyhow!("{origin}{where_}: {e}"))?;
        name = cfg.name.clone();
        planned.push((vars, cfg));
    }
    // Repetition-major order: every combination once, then again, so slow
    // drift of the host (thermal, page cache, other tenants of the machine)
    // spreads over all combinations instead of biasing the last ones.
    let total: u64 = planned.iter().map(|(_, c)| c.repetitions as u64).sum();
    if total > max_runs {
        bail!("{origin}: {} combination(s) with their repetitions make {total} runs, more than {max_runs}: sweep fewer values or repeat less", planned.len());
    }
    let most = planned.iter().map(|(_, c)| c.repetitions).max().unwrap_or(0);
    for rep in 1..=most {
        for (vars, cfg) in planned.iter().filter(|(_, c)| c.repetitions >= rep) {
            runs.push(PlannedRun {
                index: runs.len(),
                repetition: rep,
                vars: vars.clone(),
                config: cfg.clone(),
            });
        }
    }
    Ok(Plan {
        name,
        sweep_keys: keys,
        runs,
    })
}

/// Keys that may be swept without being declared (they have defaults).
fn optional_path(k: &str) -> bool {
    k.starts_with("host.")
        || matches!(
            k,
            "tenant.count" | "tenant.vcpus" | "tenant.policy" | "tenant.backend" | "tenant.memory" | "load_set"
        )
        // A QEMU tenant's devices: a VM variant beside sandbox ones.
        || k.starts_with("tenant.vm.")
        || k.starts_with("tenant.disk.")
        || (k.starts_with("net.") && !k.starts_with("net.flow"))
}

fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn get_path<'a>(v: &'a toml::Value, path: &str) -> Option<&'a toml::Value> {
    path.split('.').try_fold(v, |cur, k| cur.get(k))
}

fn set_path(v: &mut toml::Value, path: &str, val: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut cur = v;
    for p in &parts[..parts.len() - 1] {
        let t = cur.as_table_mut().ok_or_else(|| format!("'{p}' is not a table"))?;
        cur = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    }
    let t = cur.as_table_mut().ok_or("the parent is not a table")?;
    t.insert(parts[parts.len() - 1].to_string(), val);
    Ok(())
}

/// The longest scenario name: it names the results directory.
pub const MAX_NAME_LEN: usize = 64;

/// Relay threads of one run. Each holds 8192 frame buffers (16 MiB) and a
/// packet socket per port; tenant ports are dealt round-robin, so beyond
/// the tenants (200 at most) and the host's CPUs more threads only idle.
pub const MAX_RELAY_THREADS: u64 = 64;

/// The slowest relay link (`host.relay_rate_mbit`): a 1500-byte frame
/// every 120 ms; slower, an answer takes longer than any period.
const MIN_RELAY_RATE_MBIT: f64 = 0.1;

/// A scenario's name is the directory its results go to (`results/NAME`,
/// `lab run` without `-o`): one path component of letters, digits, '.',
/// '_' or '-', not hidden and not empty, so that `../../x` cannot write
/// outside the results directory and "" cannot write into it.
pub fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.starts_with('.') && name.chars().all(allowed) {
        return Ok(());
    }
    let shown: String = name.chars().take(MAX_NAME_LEN + 1).collect();
    Err(format!(
        "name = {shown:?}{}: give 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-', not starting with '.' (it names the results directory)",
        if shown.len() < name.len() { "..." } else { "" }
    ))
}

/// Checks that the kernel would accept: keys named as in the file.
fn validate(c: &RunConfig) -> Result<()> {
    check_name(&c.name).map_err(anyhow::Error::msg)?;
    ontime_core::limits::duration(
        "duration",
        c.duration,
        1_000_000_000,
        ontime_core::limits::MAX_DURATION_NS,
    )
    .map_err(anyhow::Error::msg)?;
    ontime_core::limits::count("repetitions", c.repetitions as u64, 1, 10_000).map_err(anyhow::Error::msg)?;
    if c.observe.flight == Flight::On && c.observe.recorder != Recorder::Ontime {
        bail!(
            "observe.flight = \"on\" needs observe.recorder = \"ontime\" (the flight recorder keeps ontime's windows)"
        );
    }
    let keep = ontime_core::duration::parse_ns(&c.observe.keep_around)
        .map_err(|e| anyhow::anyhow!("observe.keep_around = {:?}: {e}", c.observe.keep_around))?;
    let ring = ontime_core::duration::parse_ns(&c.observe.ring)
        .map_err(|e| anyhow::anyhow!("observe.ring = {:?}: {e}", c.observe.ring))?;
    if keep > 60_000_000_000 {
        bail!("observe.keep_around = {:?}: give at most 60s", c.observe.keep_around);
    }
    if !(3_000_000_000..=600_000_000_000).contains(&ring) || ring < keep + 3_000_000_000 {
        bail!(
            "observe.ring = {:?}: give 3s to 10m, and at least observe.keep_around + 3s (a probe logs an interval a second or more after it began)",
            c.observe.ring
        );
    }
    if !(1..=3600).contains(&c.observe.max_kept) {
        bail!(
            "observe.max_kept = {}: give 1 to 3600 windows (an hour)",
            c.observe.max_kept
        );
    }
    if c.observe.flight == Flight::On && c.flight_tag().is_none() {
        bail!(
            "observe.flight = \"on\" keeps windows around the late intervals of crawl or cyclic tenants that keep late events, or of `[net]` flows: this scenario's tenants keep none"
        );
    }
    if let Some(hz) = c.observe.profile {
        if !(1..=10_000).contains(&hz) {
            bail!("observe.profile = {hz}: give stack samples per second, 1 to 10000 (e.g. 1000)");
        }
        if c.observe.recorder != Recorder::Ontime {
            bail!("observe.profile needs observe.recorder = \"ontime\" (stacks are sampled by ontime's recorder)");
        }
    }
    let t = &c.tenant;
    if t.count == 0 || t.count > 200 {
        bail!("tenant.count = {}: must be 1..200", t.count);
    }
    if t.vcpus == 0 || t.vcpus > 64 {
        bail!("tenant.vcpus = {}: must be 1..64", t.vcpus);
    }
    if let Some(a) = &c.host.relay_affinity {
        parse_cpu_list(a).map_err(|e| anyhow!("host.relay_affinity: {e}"))?;
    }
    if let Some(cs) = &t.cpuset {
        let cpus = parse_cpu_list(cs).map_err(|e| anyhow!("tenant.cpuset: {e}"))?;
        let online = ontime_core::limits::online_cpus();
        if let Some(bad) = cpus.iter().find(|&&c| c >= online) {
            bail!("tenant.cpuset: CPU {bad} is not online (this host has {online})");
        }
    }
    if let Some(m) = &t.memory {
        parse_bytes(m).map_err(|e| anyhow!("tenant.memory: {e}"))?;
    }
    if let Some(d) = &t.disk {
        let size = parse_bytes(&d.size).map_err(|e| anyhow!("tenant.disk.size: {e}"))?;
        if !(16 << 20..=1 << 40).contains(&size) {
            bail!("tenant.disk.size = {}: give 16M to 1T", d.size);
        }
    }
    if let Some(q) = t.cpu_quota {
        if !q.is_finite() || q <= 0.0 || q > 4096.0 {
            bail!("tenant.cpu_quota = {q}: give a number of CPUs above 0 (e.g. 0.5 or 2)");
        }
    }
    if let Some(s) = c.host.rr_timeslice {
        if !(1_000_000..=1_000_000_000).contains(&s) || s % 1_000_000 != 0 {
            bail!("host.rr_timeslice must be whole milliseconds from 1ms to 1s (the kernel's unit)");
        }
    }
    ontime_core::limits::count("host.relay_threads", c.host.relay_threads as u64, 1, MAX_RELAY_THREADS)
        .map_err(anyhow::Error::msg)?;
    if let Some(r) = c.host.relay_rate_mbit {
        ontime_core::limits::rate("host.relay_rate_mbit", r, 100_000.0).map_err(anyhow::Error::msg)?;
        if r < MIN_RELAY_RATE_MBIT {
            bail!("host.relay_rate_mbit = {r:?} is out of range: give {MIN_RELAY_RATE_MBIT} .. 100000 (Mbit/s)");
        }
    }
    if c.host.relay_delay > 10_000_000_000 {
        bail!("host.relay_delay must be at most 10s");
    }
    // The probe's own ranges, declared once in its crate (the CLI's flags
    // are checked by the same code).
    if let Some(p) = c.probe(0, t.vcpus, Path::new("/")).map_err(anyhow::Error::msg)? {
        p.validate().map_err(|e| anyhow!("tenant: {e}"))?;
    }
    validate_vm(c)?;
    validate_command(c)?;
    let swap = t.swap_bytes().map_err(anyhow::Error::msg)?;
    if swap.is_some() && t.memory.is_none() {
        bail!("tenant.swap needs tenant.memory (the swap limit is memory + swap)");
    }
    if swap.is_some_and(|s| s > 0) && t.disk.is_none() {
        bail!("tenant.swap: the swap file lives on the tenant's disk: add [tenant.disk]");
    }
    if let Some(n) = &c.net {
        n.validate(t.count, c.duration)?;
        if t.crawl.is_some() || t.cyclic.is_some() || t.io.is_some() {
            bail!("[net] flows are the tenants' workload: drop [tenant.crawl], [tenant.cyclic] or [tenant.io]");
        }
        if t.backend == Backend::Native {
            bail!("[net] needs sandbox tenants (their network namespaces carry the stamp and the check)");
        }
        return validate_loads(c);
    }
    if c.observe.io && t.disk.is_none() {
        bail!("observe.io records the tenants' disks: add [tenant.disk] (size = \"1G\")");
    }
    if let Some(io) = &t.io {
        let (data, _) = io.validate().map_err(|e| anyhow!("tenant.{e}"))?;
        let Some(disk) = &t.disk else {
            bail!("tenant.io runs on the tenant's disk: add [tenant.disk] (size = \"1G\")");
        };
        // ext4 keeps about 5 % (journal, inode tables, reserve) of a disk.
        let room = parse_bytes(&disk.size).map_err(|e| anyhow!("tenant.disk.size: {e}"))? / 100 * 90;
        let need = data + swap.unwrap_or(0);
        if need > room {
            bail!(
                "tenant.disk.size = {} is too small for tenant.io.size + tenant.swap ({} MiB); give at least {} MiB",
                disk.size,
                need >> 20,
                (need / 90 * 100) >> 20
            );
        }
        if t.crawl.is_some() || t.cyclic.is_some() {
            bail!("tenant: give one workload: [tenant.io], [tenant.crawl] or [tenant.cyclic]");
        }
        if t.backend == Backend::Native {
            bail!(
                "tenant.io runs in sandbox tenants (their disks and memory limits); backend = \"native\" has neither"
            );
        }
        return validate_loads(c);
    }
    match (&t.crawl, &t.cyclic) {
        (Some(_), Some(_)) => bail!("tenant: give either [tenant.crawl] or [tenant.cyclic], not both"),
        (None, None) => bail!("tenant: needs a workload, [tenant.crawl] (rate = ...), [tenant.cyclic] or [tenant.io]"),
        (Some(cr), None) => {
            use ontime_core::limits;
            limits::rate("tenant.crawl.rate", cr.rate, limits::MAX_POLLS_PER_SECOND).map_err(anyhow::Error::msg)?;
            limits::duration(
                "tenant.crawl.period",
                cr.period,
                limits::MIN_PERIOD_NS,
                limits::MAX_DURATION_NS,
            )
            .map_err(anyhow::Error::msg)?;
            // The crawler plans whole polls per period, at least one: a
            // rate below one poll per period would silently run as one.
            let min_rate = 1e9 / cr.period as f64;
            if cr.rate < min_rate {
                bail!(
                    "tenant.crawl.rate = {:?} is out of range: give {:?} .. {:?} per second (at least one poll per tenant.crawl.period = {}; a longer period allows less)",
                    cr.rate,
                    min_rate,
                    limits::MAX_POLLS_PER_SECOND,
                    ontime_core::duration::format_ns(cr.period)
                );
            }
            // A poll's work beyond its whole period overruns every period
            // on its thread, and keeps the thread past the run's end.
            if let Some(w) = cr.work_per_poll {
                limits::duration("tenant.crawl.work_per_poll", w, 0, cr.period)
                    .map_err(|e| anyhow!("{e} (at most tenant.crawl.period: one poll's work fits its period)"))?;
            }
            let points = cr.rate * cr.points_per_request as f64 * cr.period as f64 / 1e9;
            if points > ontime_core::limits::MAX_POINTS as f64 {
                bail!(
                    "tenant.crawl: rate x points_per_request x period = {points:.0} points, more than one gateway carries ({})",
                    ontime_core::limits::MAX_POINTS
                );
            }
            if cr.points_per_request == 0 || cr.points_per_request > 1000 {
                bail!("tenant.crawl.points_per_request must be 1..1000");
            }
            cr.work_model()
                .validate()
                .map_err(|e| anyhow!("tenant.crawl.work_tail: {e}"))?;
        }
        (None, Some(cy)) => {
            if cy.interval < 10_000 {
                bail!("tenant.cyclic.interval must be at least 10us");
            }
        }
    }
    validate_loads(c)?;
    validate_injections(c)
}

fn validate_injections(c: &RunConfig) -> Result<()> {
    for (i, inj) in c.injections.iter().enumerate() {
        let what = format!("inject[{i}]");
        // A net run's guests run flows, not the probe injections go beside.
        let probes_in_guests = c.records_guests() && c.net.is_none();
        if c.tenant.backend == Backend::Qemu && !(inj.cause == InjectCause::CpuBurst && probes_in_guests) {
            bail!(
                "{what}: on QEMU tenants only cpu-burst is injected (on the host, on the vCPU's CPU, or inside = \
                 \"guest\"), with observe.guest = true (their probes' late events are explained in the guest)"
            );
        }
        if inj.inside == InjectInside::Guest && c.tenant.backend != Backend::Qemu {
            bail!("{what}.inside = \"guest\" injects inside a QEMU tenant's guest: give tenant.backend = \"qemu\"");
        }
        if inj.tenant >= c.tenant.count {
            bail!("{what}.tenant = {}: there are {} tenants", inj.tenant, c.tenant.count);
        }
        let (_, max) = inj.length_ns().map_err(|e| anyhow::anyhow!("{what}.length: {e}"))?;
        if inj.every <= max {
            bail!("{what}.every must exceed the longest length, or the CPU never frees");
        }
        if inj.cause == InjectCause::OwnWork {
            if c.tenant.cyclic.is_none() {
                bail!("{what}: own-work is injected into a cyclic probe: give the tenant [tenant.cyclic]");
            }
            if c.injections[..i]
                .iter()
                .any(|j| j.cause == InjectCause::OwnWork && j.tenant == inj.tenant)
            {
                bail!("{what}: tenant {} already has own work injected", inj.tenant);
            }
            continue;
        }
        if matches!(inj.cause, InjectCause::RelayStall | InjectCause::GatewayStall) {
            if c.tenant.crawl.is_none() || c.net.is_some() {
                bail!("{what}: relay-stall and gateway-stall delay crawl tenants' requests: give [tenant.crawl] (no [net])");
            }
            continue;
        }
        if inj.cause == InjectCause::SoftirqFlood {
            if c.tenant.backend != Backend::Sandbox {
                bail!("{what}: softirq-flood floods a sandbox tenant's veth: give tenant.backend = \"sandbox\"");
            }
            inj.flooder_cpu(&c.tenant).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
            if let Some(r) = inj.rate {
                ontime_core::limits::count(&format!("{what}.rate"), r, 1_000, 100_000_000)
                    .map_err(anyhow::Error::msg)?;
            }
            continue;
        }
        if inj.rate.is_some() {
            bail!("{what}.rate paces a softirq-flood only");
        }
        if !(1..=99).contains(&inj.priority) {
            bail!("{what}.priority: a SCHED_FIFO priority is 1..=99");
        }
        if inj.cause == InjectCause::RtThrottle {
            let tenant_priority = match c.tenant.policy {
                ontime_core::rt::Policy::Fifo { priority } | ontime_core::rt::Policy::Rr { priority } => priority,
                _ => 0,
            };
            if tenant_priority <= inj.priority {
                bail!(
                    "{what}: rt-throttle throttles a real-time tenant: set tenant.policy to fifo:N or rr:N with N above \
                     the loop's priority {} (a tenant below it waits behind the loop itself: that is cpu-burst)",
                    inj.priority
                );
            }
        }
        let cpu = inj.cpu_of(&c.tenant).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        let online = ontime_core::limits::online_cpus();
        if cpu >= online {
            bail!("{what}: CPU {cpu} is not online (this host has {online})");
        }
    }
    Ok(())
}

impl TenantTemplate {
    /// A QEMU tenant's guest memory: `tenant.memory`, else the default.
    pub fn guest_memory(&self) -> Result<u64, String> {
        match &self.memory {
            Some(m) => ontime_core::size::parse_bytes(m).map_err(|e| format!("tenant.memory: {e}")),
            None => Ok(crate::vm::DEFAULT_GUEST_MEMORY),
        }
    }
}

/// QEMU tenants' settings, and that nobody else uses them.
fn validate_vm(c: &RunConfig) -> Result<()> {
    use crate::vm::{DiskModel, NicModel, MIN_GUEST_MEMORY};
    let t = &c.tenant;
    let disk = t.disk.as_ref();
    if t.backend != Backend::Qemu {
        let vm_only = [
            (t.vm.is_some(), "[tenant.vm]"),
            (c.host.vmm_memory.is_some(), "host.vmm_memory"),
            (c.host.vm_memory_budget.is_some(), "host.vm_memory_budget"),
            (disk.is_some_and(|d| d.model.is_some()), "tenant.disk.model"),
            (disk.is_some_and(|d| d.iothread), "tenant.disk.iothread"),
            (disk.is_some_and(|d| d.cache.is_some()), "tenant.disk.cache"),
            (disk.is_some_and(|d| d.format.is_some()), "tenant.disk.format"),
            (disk.is_some_and(|d| d.aio.is_some()), "tenant.disk.aio"),
        ];
        if let Some((_, what)) = vm_only.iter().find(|(set, _)| *set) {
            bail!("{what} is for QEMU tenants: set tenant.backend = \"qemu\" or drop it");
        }
        return Ok(());
    }
    let memory = t.guest_memory().map_err(anyhow::Error::msg)?;
    if memory < MIN_GUEST_MEMORY {
        bail!(
            "tenant.memory = {}: a QEMU guest needs at least {} MiB (its kernel and the probe)",
            t.memory.as_deref().unwrap_or(""),
            MIN_GUEST_MEMORY >> 20
        );
    }
    c.host.host_cache_bound(memory).map_err(anyhow::Error::msg)?;
    let vm = t.vm.clone().unwrap_or_default();
    if vm.vhost && vm.nic != NicModel::VirtioNet {
        bail!(
            "tenant.vm.vhost serves a virtio NIC's rings: set tenant.vm.nic = \"virtio-net\" (not \"{}\") or vhost = false",
            vm.nic.as_str()
        );
    }
    if let Some(d) = disk {
        if d.iothread && d.model.unwrap_or_default() != DiskModel::VirtioBlk {
            bail!("tenant.disk.iothread needs tenant.disk.model = \"virtio-blk\"");
        }
        if d.direct {
            bail!("tenant.disk.direct is for sandbox tenants: a QEMU tenant's is tenant.disk.cache = \"none\"");
        }
        if d.aio == Some(crate::vm::DiskAio::Native) && d.cache.unwrap_or_default() != crate::vm::DiskCache::None {
            bail!("tenant.disk.aio = \"native\" (Linux AIO) needs tenant.disk.cache = \"none\": QEMU refuses it through the host page cache");
        }
    }
    let io_in_guest = c
        .effective_loads()
        .iter()
        .any(|l| l.place == Place::Tenants && l.profile == LoadKind::Stress(ontime_load::LoadProfile::Io));
    if io_in_guest && disk.is_none() {
        bail!("an io load inside a QEMU tenant writes to the guest's disk: add [tenant.disk] (size = \"1G\")");
    }
    Ok(())
}

fn validate_loads(c: &RunConfig) -> Result<()> {
    if let Some(set) = c.load_set.as_deref().filter(|s| *s != "none") {
        if !c.load_sets.contains_key(set) {
            let known: Vec<&str> = c.load_sets.keys().map(String::as_str).collect();
            bail!(
                "load_set = \"{set}\": no such set in [load_sets] (known: none, {})",
                known.join(", ")
            );
        }
    }
    for (i, l) in c.effective_loads().iter().enumerate() {
        if l.profile == LoadKind::Wan {
            if l.place != Place::Tenants {
                bail!("load[{i}]: the wan load runs from the tenants: set place = \"tenants\"");
            }
            ontime_core::limits::rate(&format!("load[{i}].rate_mbit"), l.rate_mbit, 100_000.0)
                .map_err(anyhow::Error::msg)?;
        }
        if let Some(b) = l.vm_bytes().map_err(|e| anyhow!("load[{i}]: {e}"))? {
            let has_vm = matches!(l.profile, LoadKind::Stress(p) if p.stressors().contains(&"vm"));
            if !has_vm {
                bail!("load[{i}].bytes sizes stress-ng's vm stressor: give it to a memory, kernel or mixed load");
            }
            if !(4096..=(64u64 << 30)).contains(&b) {
                bail!("load[{i}].bytes = {b}: give 4K to 64G per worker");
            }
        }
        ontime_core::limits::count(
            &format!("load[{i}].workers"),
            l.workers as u64,
            1,
            ontime_core::limits::MAX_THREADS,
        )
        .map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

pub use ontime_core::size::parse_bytes;

/// Key/value pairs of every sweep for display.
pub fn vars_text(vars: &[(String, String)]) -> String {
    if vars.is_empty() {
        return "(no sweep)".into();
    }
    vars.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// For report grouping.
pub type Vars = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<Plan> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.toml");
        std::fs::write(&p, text).unwrap();
        load(&p)
    }

    const BASE: &str = "name = 'x'\nduration = '2s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 100\n";

    #[test]
    fn sweeps_expand_in_file_order() {
        let p = plan(&format!(
            "{BASE}[sweep]\n\"tenant.count\" = [1, 2]\n\"host.relay_policy\" = ['other', 'fifo:90']\n"
        ))
        .unwrap();
        assert_eq!(p.runs.len(), 4);
        assert_eq!(p.sweep_keys, vec!["tenant.count", "host.relay_policy"]);
        assert_eq!(p.runs[1].vars[1].1, "fifo:90");
        assert_eq!(p.runs[2].config.tenant.count, 2);
        assert!(p.runs[3].dir_name().starts_with("003-count=2-relay_policy=fifo_90"));
    }

    #[test]
    fn a_variant_sets_its_keys_together() {
        let p = plan(&format!(
            "{BASE}[variants]\nplain = {{}}\nmitigated = {{ \"tenant.policy\" = \"fifo:80\", \"host.relay_policy\" = \"fifo:90\" }}\n[sweep]\n\"variant\" = [\"plain\", \"mitigated\"]\n"
        ))
        .unwrap();
        assert_eq!(p.runs.len(), 2);
        assert_eq!(p.runs[0].config.tenant.policy, Policy::Other);
        assert_eq!(p.runs[1].config.tenant.policy, Policy::Fifo { priority: 80 });
        assert_eq!(p.runs[1].config.host.relay_policy, Policy::Fifo { priority: 90 });
        assert_eq!(p.runs[1].vars, vec![("variant".to_string(), "mitigated".to_string())]);
        let e = err(&format!("{BASE}[variants]\na = {{}}\n[sweep]\n\"variant\" = [\"b\"]\n"));
        assert!(e.contains("no variant \"b\"") && e.contains("known: a"), "{e}");
        let e = err(&format!("{BASE}[variants]\na = {{ \"tenant.nope\" = 1 }}\n"));
        assert!(e.contains("variants.a.\"tenant.nope\""), "{e}");
    }

    #[test]
    fn the_host_cache_bound_is_fixed_or_what_the_budget_leaves() {
        let mut h = HostSpec::default();
        assert_eq!(h.host_cache_bound(192 << 20), Ok(None));
        h.vmm_memory = Some("128M".into());
        assert_eq!(h.host_cache_bound(192 << 20), Ok(Some(128 << 20)));
        h.vm_memory_budget = Some("448M".into());
        assert!(h.host_cache_bound(192 << 20).unwrap_err().contains("not both"));
        h.vmm_memory = None;
        assert_eq!(h.host_cache_bound(192 << 20), Ok(Some(256 << 20)));
        assert_eq!(h.host_cache_bound(320 << 20), Ok(Some(128 << 20)));
        assert!(h
            .host_cache_bound(448 << 20)
            .unwrap_err()
            .contains("leaves no host cache"));
    }

    #[test]
    fn a_loads_bytes_size_its_vm_stressor_only() {
        let p = plan(&format!("{BASE}[[load]]\nprofile = 'memory'\nbytes = '64M'\n")).unwrap();
        let l = &p.runs[0].config.effective_loads()[0];
        assert_eq!(l.vm_bytes(), Ok(Some(64 << 20)));
        let args = ontime_load::LoadProfile::Memory.args(
            1,
            l.vm_bytes().unwrap(),
            Path::new("/tmp"),
            std::time::Duration::from_secs(1),
        );
        assert!(
            args.windows(2)
                .any(|w| w[0] == "--vm-bytes" && w[1] == (64u64 << 20).to_string()),
            "{args:?}"
        );
        let e = err(&format!("{BASE}[[load]]\nprofile = 'cpu'\nbytes = '64M'\n"));
        assert!(
            e.contains("load[0].bytes") && e.contains("memory, kernel or mixed"),
            "{e}"
        );
        let e = err(&format!("{BASE}[[load]]\nprofile = 'memory'\nbytes = 'lots'\n"));
        assert!(e.contains("load[0]"), "{e}");
    }

    /// Every scenario shipped in scenarios/ plans without error (and the
    /// gateway and crawler configurations there parse).
    #[test]
    fn shipped_scenarios_plan() {
        if ontime_core::limits::online_cpus() < 2 {
            ontime_testkit::skip("shipped scenarios pin tenants to CPU 1: needs 2 CPUs");
            return;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.display();
            if text.contains("[tenant]") {
                let plan = load(&p).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert!(!plan.runs.is_empty(), "{name}");
            } else if text.contains("ontime gateway --config") {
                ontime_gateway::GatewayConfig::from_file(&p).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            } else {
                ontime_crawl::config::CrawlFile::from_file(&p).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            }
            n += 1;
        }
        assert!(n >= 10, "only {n} scenarios found in {}", dir.display());
    }

    fn err(text: &str) -> String {
        format!("{:#}", plan(text).unwrap_err())
    }

    #[test]
    fn errors_name_the_file_key_and_reason() {
        let e = err(&format!("bogus = 1\n{BASE}"));
        assert!(e.contains("s.toml") && e.contains("bogus"), "{e}");
        let e = err(&BASE.replace("rate = 100", "rate = 0"));
        assert!(e.contains("tenant.crawl.rate"), "{e}");
        let e = err(&format!("{BASE}[sweep]\n\"tenant.count\" = [1, 0]\n"));
        assert!(
            e.contains("tenant.count = 0") && e.contains("with tenant.count = 0"),
            "{e}"
        );
        let e = err(&format!("{BASE}[sweep]\n\"tenant.nothing\" = [1]\n"));
        assert!(e.contains("tenant.nothing") && e.contains("no such key"), "{e}");
        let e = err(&format!("load_set = 'heavy'\n{BASE}"));
        assert!(e.contains("load_set") && e.contains("heavy"), "{e}");
        let e = err(&BASE.replace("[tenant]\n", "[tenant]\npolicy = 'fifo:200'\n"));
        assert!(e.contains("tenant.policy"), "{e}");
        let e = err(&BASE.replace("[tenant]\n", "[tenant]\ncpuset = '64'\n"));
        assert!(e.contains("tenant.cpuset") && e.contains("not online"), "{e}");
        let e = err("name = 'x'\nduration = '2s'\n[tenant]\n");
        assert!(e.contains("needs a workload"), "{e}");
        let e = err(&format!("{BASE}[[load]]\nprofile = 'disk'\n"));
        assert!(e.contains("load[0].profile"), "{e}");
        assert_eq!(err("name = 'x'\nduration = 5\n").lines().count(), 1);
        // Values no host can run fail at planning (so in --dry-run too).
        let e = err(&BASE.replace("rate = 100", "rate = 1e12"));
        assert!(e.contains("tenant.crawl.rate") && e.contains("out of range"), "{e}");
        let e = err(&format!("{BASE}[targets]\n\"p42\" = '1ms'\n"));
        assert!(e.contains("targets") && e.contains("p42"), "{e}");
        // Injections: a CPU to hold, lengths that leave it free between.
        let inject = |extra: &str| format!("{BASE}[[inject]]\ncause = 'cpu-burst'\nevery = '1s'\n{extra}");
        let e = err(&inject("length = '30ms'\n"));
        assert!(e.contains("inject[0]") && e.contains("tenant.cpuset"), "{e}");
        let e = err(&inject("cpu = 0\nlength = '80ms..30ms'\n"));
        assert!(e.contains("inject[0].length"), "{e}");
        let e = err(&inject("cpu = 0\nlength = '2s'\n"));
        assert!(e.contains("inject[0].every"), "{e}");
        let e = err(&inject("cpu = 0\nlength = '30ms'\ntenant = 5\n"));
        assert!(e.contains("inject[0].tenant"), "{e}");
        let e = err(&inject("cpu = 0\nlength = '30ms'\ncause2 = 1\n"));
        assert!(e.contains("cause2"), "{e}");
        // Own work goes into a cyclic probe, once per tenant.
        let own = "[[inject]]\ncause = 'own-work'\nlength = '30ms'\nevery = '1s'\n";
        let e = err(&format!("{BASE}{own}"));
        assert!(e.contains("inject[0]") && e.contains("[tenant.cyclic]"), "{e}");
        // Throttling needs a real-time tenant above the loop.
        let throttle = |policy: &str| {
            BASE.replace("[tenant]\n", &format!("[tenant]\npolicy = '{policy}'\n"))
                + "[[inject]]\ncause = 'rt-throttle'\ncpu = 0\nlength = '1500ms..2s'\nevery = '4s'\npriority = 1\n"
        };
        let e = err(&throttle("other"));
        assert!(e.contains("inject[0]") && e.contains("tenant.policy"), "{e}");
        let e = err(&throttle("fifo:80").replace("priority = 1", "priority = 90"));
        assert!(e.contains("above the loop's priority 90"), "{e}");
        assert!(plan(&throttle("fifo:80")).is_ok());
        let ok = plan(&format!("{BASE}[targets]\n\"p99.9\" = '10ms'\nmissed = 0\n")).unwrap();
        let t = &ok.runs[0].config.targets;
        assert_eq!(t.latency, vec![("p99.9".to_string(), 10_000_000)]);
        assert_eq!(t.missed, Some(0));
        let e = err(&BASE.replace("duration = '2s'", "duration = '1000d'"));
        assert!(e.contains("duration"), "{e}");
        let e = err(&BASE.replace("[tenant]\n", "[tenant]\nmemory = '99999999999999999G'\n"));
        assert!(e.contains("tenant.memory"), "{e}");
    }

    /// Values a hostile test found accepted: a million relay threads
    /// (4.3 GB, then "cannot start thread"), a rate of 1e-300 (run as one
    /// poll per period), 100 h of work per poll, and names that put the
    /// results outside the results directory or into it. Each is refused
    /// at planning (so in --dry-run too), naming the key and its range.
    /// `tenant.command` polls the gateway a crawl section describes, on a
    /// veth it can be captured on; what only ontime's crawler does is
    /// refused, and its tenants' probe is the capture of their veth.
    #[test]
    fn a_command_tenant_needs_a_gateway_and_a_veth() {
        let with = BASE.replace("count = 1\n", "count = 2\ncommand = 'mbpoll'\n");
        let p = plan(&with).unwrap();
        let c = &p.runs[0].config;
        assert_eq!(crate::record::Workload::of(c), crate::record::Workload::Wire);
        match c.probe(1, 1, Path::new("/r")).unwrap() {
            Some(crate::probe::ProbeSpec::Wire(w)) => {
                assert_eq!(w.options.interface, "ontime1h");
                assert_eq!(w.options.ports.http, vec![8080]);
                assert!(w.options.ports.modbus.is_empty());
                assert_eq!(w.options.period_ns, Some(1_000_000_000));
                assert_eq!(w.result, Path::new("/r/t1.json"));
            }
            other => panic!("{other:?}"),
        }
        let env = c.command_env(1);
        assert!(
            env.contains(&("ONTIME_URL".into(), "http://10.77.0.1:8080/b1".into())),
            "{env:?}"
        );
        let e = err(&with.replace("[tenant.crawl]\nrate = 100\n", ""));
        assert!(e.contains("tenant.command") && e.contains("[tenant.crawl]"), "{e}");
        let e = err(&with.replace("count = 2\n", "count = 2\nbackend = 'qemu'\n"));
        assert!(e.contains("tenant.command") && e.contains("veth"), "{e}");
        let e = err(&with.replace("rate = 100", "rate = 100\nwork_per_poll = '1ms'"));
        assert!(e.contains("work_per_poll"), "{e}");
        let e = err(&with.replace("command = 'mbpoll'", "command = ' '"));
        assert!(e.contains("tenant.command is empty"), "{e}");
    }

    #[test]
    fn values_no_run_can_take_are_refused_with_the_key_and_range() {
        let e = err(&BASE.replace("[tenant]\n", "[host]\nrelay_threads = 1000000\n[tenant]\n"));
        assert!(
            e.contains("host.relay_threads = 1000000") && e.contains("1 .. 64"),
            "{e}"
        );
        let e = err(&BASE.replace("[tenant]\n", "[host]\nrelay_rate_mbit = 1e-300\n[tenant]\n"));
        assert!(e.contains("host.relay_rate_mbit") && e.contains("out of range"), "{e}");
        let e = err(&BASE.replace("rate = 100", "rate = 1e-300"));
        assert!(
            e.contains("tenant.crawl.rate") && e.contains("out of range") && e.contains("one poll per"),
            "{e}"
        );
        // A longer period allows a lower rate.
        plan(&BASE.replace("rate = 100", "rate = 0.1\nperiod = '10s'")).unwrap();
        let e = err(&BASE.replace("rate = 100", "rate = 100\nwork_per_poll = '100h'"));
        assert!(
            e.contains("tenant.crawl.work_per_poll") && e.contains("out of range"),
            "{e}"
        );
        plan(&BASE.replace("rate = 100", "rate = 100\nwork_per_poll = '1.4ms'")).unwrap();
        let e = err(&BASE.replace("rate = 100", "rate = 100\nperiod = '100000h'"));
        assert!(e.contains("period = ") && e.contains("out of range"), "{e}");
        for name in ["../../escaped-by-name", "", ".hidden", "a/b", "with space"] {
            let e = err(&BASE.replace("name = 'x'", &format!("name = {name:?}")));
            assert!(
                e.contains("name = ") && e.contains("results directory"),
                "{name:?}: {e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let long = "n".repeat(MAX_NAME_LEN + 1);
        let e = err(&BASE.replace("name = 'x'", &format!("name = '{long}'")));
        assert!(e.contains("results directory"), "{e}");
        plan(&BASE.replace("name = 'x'", "name = 'doc-000.v2_b'")).unwrap();
    }

    #[test]
    fn the_flight_recorder_is_on_for_long_runs_of_probes_that_keep_late_events() {
        let dir = std::path::Path::new("/r");
        let p = plan(BASE).unwrap();
        assert!(p.runs[0].config.flight(dir).is_none(), "2 s: whole recording");
        let p = plan(&BASE.replace("duration = '2s'", "duration = '20m'")).unwrap();
        let f = p.runs[0].config.flight(dir).expect("auto: on over 5 minutes");
        assert_eq!(f.logs, vec![(dir.join("t0.hlog"), "send_lag")]);
        assert_eq!(f.options.ring_ns, 30_000_000_000);
        let p = plan(&format!("{BASE}[observe]\nflight = 'off'\n").replace("'2s'", "'20m'")).unwrap();
        assert!(p.runs[0].config.flight(dir).is_none());
        let e = err(&format!(
            "{BASE}[observe]\nflight = 'on'\nring = '3s'\nkeep_around = '2s'\n"
        ));
        assert!(e.contains("observe.ring") && e.contains("keep_around + 3s"), "{e}");
        let e = err(&format!("{BASE}[observe]\nflight = 'on'\nrecorder = 'perf'\n"));
        assert!(e.contains("observe.flight"), "{e}");
    }

    #[test]
    fn a_flood_needs_a_flooder_outside_the_tenants_cpus() {
        let flood = "[[inject]]\ncause = 'softirq-flood'\nlength = '100ms'\nevery = '1s'\n";
        let e = err(&format!("{BASE}{flood}"));
        assert!(e.contains("inject[0]") && e.contains("tenant.cpuset"), "{e}");
        let on_it = BASE.replace("count = 1\n", "count = 1\ncpuset = '0'\n");
        let e = err(&format!("{on_it}{flood}cpu = 0\n"));
        assert!(e.contains("outside tenant.cpuset"), "{e}");
    }

    #[test]
    fn a_scenario_file_is_read_under_the_input_rule() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.toml");
        let filler = format!("# {}\n", "x".repeat(100)).repeat((MAX_SCENARIO_BYTES / 100) as usize);
        std::fs::write(&big, format!("{BASE}{filler}")).unwrap();
        let e = load(&big).unwrap_err();
        assert!(e.downcast_ref::<ontime_core::BadInput>().is_some(), "{e:#}");
        assert!(format!("{e:#}").contains(&MAX_SCENARIO_BYTES.to_string()), "{e:#}");
        let link = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = load(&link).unwrap_err();
        assert!(format!("{e:#}").contains("not a regular file"), "{e:#}");
    }

    proptest::proptest! {
        /// Any text, and any mix of the scenario's own keys and values,
        /// gives a plan or an error, never a panic or a plan no host can run.
        #[test]
        fn any_scenario_text_plans_or_fails(text in "[ -~\n]{0,200}") {
            let _ = plan(&text);
        }

        #[test]
        fn scenario_shaped_text_plans_or_fails(
            count in "-?[0-9]{1,12}|1e9|nan|'x'",
            rate in "-?[0-9]{1,14}(\\.[0-9])?|1e12|inf|nan",
            dur in "'[0-9]{0,6}(ns|us|ms|s|h|d)?'|[0-9]{1,3}",
            sweep in "\\[[0-9, ]{0,12}\\]|\\[\\]|'a'",
        ) {
            let text = format!(
                "name = 'p'\nduration = {dur}\n[tenant]\ncount = {count}\n[tenant.crawl]\nrate = {rate}\n[sweep]\n\"tenant.count\" = {sweep}\n"
            );
            if let Ok(p) = plan(&text) {
                for r in &p.runs {
                    proptest::prop_assert!(r.config.tenant.count >= 1 && r.config.tenant.count <= 200);
                    let cr = r.config.tenant.crawl.as_ref().unwrap();
                    proptest::prop_assert!(cr.rate > 0.0 && cr.rate <= ontime_core::limits::MAX_POLLS_PER_SECOND);
                }
            }
        }
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("512M").unwrap(), 512 << 20);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("99999999999999999G").is_err());
    }
}
