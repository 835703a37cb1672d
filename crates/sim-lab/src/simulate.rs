//! A scenario run in the simulator (`ontime sim`): the same
//! scenario file as `lab run`, each run's crawler tenants as simulated
//! threads on the host's CPUs (the tenant's cpuset, else all), with the
//! host I/O path as a thread when its cost per packet is known, the
//! scenario's `cpu` loads as CPU hogs and, from a calibration, this
//! host's own noise.
//!
//! Without a model named on the command line every thread keeps the class
//! the lab gives it ([`Linux`]: the tenants' policy, the relay's policy for
//! the I/O path, SCHED_OTHER for hogs). A named model (CFS, FIFO, RR, EDF,
//! Xen credit, credit2, RTDS) schedules every thread alike, as a
//! hypervisor schedules vCPUs and Dom0.
//!
//! Wake-up probe tenants (`[tenant.cyclic]`) run as probe threads at the
//! tenant's policy with the host's jitter and stalls; their loads are
//! left out.
//!
//! [`write_runs`] writes the runs in the lab's results layout (run.json,
//! per-tenant results and histogram logs, marked simulated), so `ontime
//! lab report` draws them beside measured runs of the same scenario.
//!
//! Every run's size is checked before the first starts ([`footprint`]):
//! a run holds about 0.53 MB per tenant, 1 KB per thread, 320 bytes per
//! poll stream and, on a host that falls behind, up to 128 bytes per
//! planned poll (640 with `--into`'s scheduler view); one run at a time.

use crate::calibrate::Calibration;
use anyhow::{bail, Context, Result};
use ontime_core::caps::Capabilities;
use ontime_core::manifest::Manifest;
use ontime_core::rt::{parse_cpu_list, Policy};
use ontime_scenario::record::{Environment, RunRecord, SimTenant, Simulated, TenantOutcome, WanDelayBy};
use ontime_scenario::scenario::Phase;
use ontime_scenario::scenario::{Backend, LoadKind, Place, Plan, PlannedRun};

use ontime_sim::crawl::{CrawlTenant, CrawlWorkload, Footprint, HostIo};
use ontime_sim::engine::run_with_stalls;
use ontime_sim::noise::StallSampler;
use ontime_sim::sched::{Linux, LinuxClass, RtBandwidth, Scheduler};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A scheduler model for every thread alike, chosen on the command line
/// instead of the lab's classes.
pub use ontime_sim::sched::Model;

#[derive(Clone, Debug)]
pub struct SimOptions {
    /// CPUs of the simulated host when a tenant has no cpuset.
    pub cpus: usize,
    pub model: Option<Model>,
    pub seed: u64,
    /// CPU per request sent (the crawler's own work besides the answer's).
    pub send_cost_ns: u64,
    /// The host I/O path with this CPU cost per packet (None: the
    /// calibration's, else a constant one-way delay only).
    pub io_cost_ns: Option<u64>,
    /// Its threads (the lab's relay: 1; document 000's Dom0: 8 vCPUs).
    pub io_vcpus: usize,
    pub calibration: Option<(PathBuf, Calibration)>,
    /// Record the engine's scheduling as scheduler events and analyse them
    /// as `ontime observe` does (the scheduler view of a simulated run).
    pub scheduler_view: bool,
    /// A lab results directory whose measured runs of the same scenario
    /// give each simulated run its tenants' start times (the histogram
    /// logs' headers), so a run is simulated under the conditions it was
    /// measured in.
    pub starts_from: Option<PathBuf>,
    /// The real-time budget per second that the sandboxed tenants' cgroups
    /// share under RT group scheduling (`ontime lab` gives them 900 ms of
    /// each second, split evenly, on a host with cgroup v1's
    /// `cpu.rt_runtime_us`). Some(0): none. None: what the measured run
    /// beside which a run is simulated recorded (run.json's
    /// `tenant_rt_runtime_us`, with `starts_from`), else the
    /// calibration's, else none.
    pub tenant_rt_budget_ns: Option<u64>,
}

/// The real-time budget per second a measured run's lab gave its
/// tenants' cgroups together, when its run.json recorded one.
fn measured_rt_budget_ns(results: &Path, run_: &PlannedRun, tenants: usize) -> Option<u64> {
    let dir = results.join("runs").join(run_.dir_name());
    let record = ontime_scenario::results::read_record(&dir).ok()?;
    let per_tenant_us = record.environment.tenant_rt_runtime_us?;
    per_tenant_us.checked_mul(1000)?.checked_mul(tenants as u64)
}

/// How long a crawler's vCPU thread runs before its first poll:
/// `ontime crawl` connects once to measure a round trip, opens its pool
/// from it (a second round trip) and polls from a common start 20 ms
/// after every thread is ready (crates/crawl `warm_up`,
/// `grow_before_start`, `common_start`); the lab's relay holds each
/// packet `one_way_ns` each way. A lab run's recording at 10 ms one way:
/// 61 ms from the thread's first run to its first poll.
fn crawler_warm_up_ns(one_way_ns: u64) -> u64 {
    2 * (2 * one_way_ns) + 20_000_000
}

/// The start offsets of a measured run's tenants against its first, if
/// every tenant's histogram log has one (1 ms resolution).
fn measured_starts(results: &Path, run_: &PlannedRun, tenants: usize, period: u64) -> Option<Vec<u64>> {
    let dir = results.join("runs").join(run_.dir_name());
    let starts: Option<Vec<u64>> = (0..tenants)
        .map(|i| crate::calibrate::hlog_start_ns(&dir.join(format!("t{i}.hlog"))))
        .collect();
    let starts = starts?;
    let first = *starts.iter().min()?;
    Some(starts.iter().map(|s| (s - first) % period.max(1)).collect())
}

#[derive(Debug, Serialize)]
pub struct SimRun {
    pub name: String,
    pub vars: Vec<(String, String)>,
    pub simulated: Simulated,
    pub tenants: Vec<SimTenant>,
    #[serde(skip)]
    planned: PlannedRun,
    /// What `ontime observe` would have recorded and computed from the run.
    #[serde(skip)]
    view: Option<SchedulerView>,
}

/// A simulated run's scheduling as `ontime observe` would have recorded it
/// (written as observe.otrec) and its analysis (observe.json).
#[derive(Debug)]
struct SchedulerView {
    recording: ontime_recording::recording::Recording,
    analysis: ontime_sched::Analysis,
}

/// The engine's scheduling as the scheduler events `ontime observe`
/// records: thread i is tid 1000 + i (kept when `keep_events`), and the
/// host I/O path's CPU in each second of the run.
#[derive(Default)]
struct EventTracer {
    keep_events: bool,
    events: Vec<ontime_recording::event::Event>,
    io_path: IoPathSeconds,
}

/// The host I/O path's (Dom0's) CPU time per second of the run: document
/// 000 read Dom0's share each second with xentop and saw it fall to ~6 %
/// of a CPU where the tenants collapsed.
#[derive(Default)]
struct IoPathSeconds {
    threads: std::ops::Range<usize>,
    /// Per CPU, the I/O path thread running there and since when.
    running: Vec<Option<(usize, u64)>>,
    /// CPU ns per whole second (bounded by the run's length).
    per_second: Vec<u64>,
}

impl IoPathSeconds {
    fn new(threads: std::ops::Range<usize>, cpus: usize, horizon_ns: u64) -> IoPathSeconds {
        IoPathSeconds {
            threads,
            running: vec![None; cpus],
            per_second: vec![0; horizon_ns.div_ceil(1_000_000_000) as usize],
        }
    }

    fn switch(&mut self, ts: u64, cpu: usize, next: Option<usize>) {
        if self.threads.is_empty() || cpu >= self.running.len() {
            return;
        }
        if let Some((_, since)) = self.running[cpu].take() {
            self.charge(since, ts);
        }
        self.running[cpu] = next.filter(|t| self.threads.contains(t)).map(|t| (t, ts));
    }

    /// Spreads [from, to) over the seconds it covers.
    fn charge(&mut self, mut from: u64, to: u64) {
        while from < to {
            let s = (from / 1_000_000_000) as usize;
            let Some(slot) = self.per_second.get_mut(s) else { return };
            let end = to.min((s as u64 + 1) * 1_000_000_000);
            *slot += end - from;
            from = end;
        }
    }

    /// (least, mean) CPUs over the whole seconds in `polling`; None
    /// without an I/O path or such a second.
    fn cpus(mut self, horizon_ns: u64, polling: &std::ops::Range<u64>) -> Option<(f64, f64)> {
        if self.threads.is_empty() {
            return None;
        }
        for cpu in 0..self.running.len() {
            if let Some((_, since)) = self.running[cpu].take() {
                self.charge(since, horizon_ns);
            }
        }
        let (from, to) = ((polling.start / SECOND) as usize, (polling.end / SECOND) as usize);
        let secs = self.per_second.get(from..to.min(self.per_second.len()))?;
        let least = secs.iter().min()?;
        let mean = secs.iter().sum::<u64>() as f64 / secs.len() as f64;
        Some((*least as f64 / 1e9, mean / 1e9))
    }
}

const SIM_TID_BASE: u32 = 1000;
const SECOND: u64 = 1_000_000_000;

fn sim_tid(thread: usize) -> u32 {
    SIM_TID_BASE + thread as u32
}

impl ontime_sim::engine::Tracer for EventTracer {
    fn wakeup(&mut self, ts: u64, thread: usize, cpu: usize, waker: Option<(usize, usize)>) {
        use ontime_recording::event::{kind, Event};
        if !self.keep_events {
            return;
        }
        self.events.push(Event {
            ts,
            a: sim_tid(thread),
            // The waker, as the recorder stores the thread current at the
            // wake-up (0: none, as an interrupt on an idle CPU).
            b: waker.map_or(0, |(w, _)| sim_tid(w)),
            // The target CPU, as sched_wakeup's task_cpu.
            c: cpu as u32,
            // Recorded on the waker's CPU; a timer's on the target's.
            cpu: waker.map_or(cpu, |(_, c)| c) as u16,
            kind: kind::WAKEUP,
            flags: 0,
        });
    }
    fn switch(&mut self, ts: u64, cpu: usize, prev: Option<usize>, next: Option<usize>, prev_runnable: bool) {
        use ontime_recording::event::{kind, Event, F_PREEMPT, F_PREV_RUNNABLE};
        self.io_path.switch(ts, cpu, next);
        if !self.keep_events {
            return;
        }
        self.events.push(Event {
            ts,
            a: prev.map_or(0, sim_tid),
            b: next.map_or(0, sim_tid),
            // TASK_INTERRUPTIBLE: asleep by choice.
            c: u32::from(!prev_runnable),
            cpu: cpu as u16,
            kind: kind::SWITCH,
            flags: if prev_runnable { F_PREV_RUNNABLE | F_PREEMPT } else { 0 },
        });
    }
}

/// Where a simulated run's threads belong: `vcpus` per tenant, then the
/// host I/O path's.
#[derive(Clone)]
struct ViewShape {
    tenants: usize,
    vcpus: usize,
    io_threads: std::ops::Range<usize>,
    /// The thread doing the gateway's work, when modelled.
    gateway: Option<usize>,
    cpus: usize,
    /// The seconds every tenant polls in (the I/O path's leanest second is
    /// looked for there, not in the start-up or the tail).
    polling: std::ops::Range<u64>,
}

/// Runs `w` on the shape's CPUs with the calibration's host stalls, and
/// the scheduler view when the options ask for it.
fn run_simulated(
    w: &mut dyn ontime_sim::engine::Workload,
    sched: &mut dyn Scheduler,
    horizon: u64,
    seed: u64,
    opts: &SimOptions,
    shape: &ViewShape,
) -> (ontime_sim::engine::SimOutcome, Option<SchedulerView>, Simulated) {
    let mut stalls = opts
        .calibration
        .as_ref()
        .and_then(|(_, c)| c.host_stalls.clone())
        .map(|st| StallSampler::new(st, seed.wrapping_add(0x57a11)));
    let mut tracer = EventTracer {
        keep_events: opts.scheduler_view,
        events: Vec::new(),
        io_path: IoPathSeconds::new(shape.io_threads.clone(), shape.cpus, horizon),
    };
    let traced = opts.scheduler_view || !shape.io_threads.is_empty();
    let o = run_with_stalls(
        w,
        shape.cpus,
        sched,
        horizon,
        stalls.as_mut(),
        traced.then_some(&mut tracer as &mut dyn ontime_sim::engine::Tracer),
    );
    let io_path = std::mem::take(&mut tracer.io_path).cpus(horizon, &shape.polling);
    let view = opts
        .scheduler_view
        .then(|| scheduler_view(tracer.events, shape, horizon));
    let model = opts.model.map_or_else(|| sched.name().to_string(), |m| m.label());
    let busy_cpus = o.busy_ns as f64 / horizon.max(1) as f64;
    let mut simulated = simulated_of(model, shape.cpus, seed, opts, busy_cpus);
    simulated.io_path_cpus_least = io_path.map(|(least, _)| least);
    simulated.io_path_cpus_mean = io_path.map(|(_, mean)| mean);
    (o, view, simulated)
}

impl SimRun {
    fn new(run_: &PlannedRun, simulated: Simulated, tenants: Vec<SimTenant>, view: Option<SchedulerView>) -> SimRun {
        SimRun {
            name: format!("sim-{}-{}", simulated.model, run_.dir_name()),
            vars: run_.vars.clone(),
            simulated,
            tenants,
            planned: run_.clone(),
            view,
        }
    }
}

/// CPU time of tenant `i`'s `threads` threads, which the workloads number
/// tenant by tenant.
fn tenant_cpu_ns(o: &ontime_sim::engine::SimOutcome, i: usize, threads: usize) -> u64 {
    o.tasks[i * threads..(i + 1) * threads].iter().map(|x| x.cpu_ns).sum()
}

/// Analyses a simulated run's events with the scheduler view's own code:
/// a group per tenant (its vCPU threads) and the host I/O path.
fn scheduler_view(events: Vec<ontime_recording::event::Event>, shape: &ViewShape, end_ns: u64) -> SchedulerView {
    let ViewShape {
        tenants,
        vcpus,
        ref io_threads,
        gateway,
        cpus,
        polling: _,
    } = *shape;
    use ontime_recording::recording::{Group, GroupKind, Meta, Recording, ThreadInfo};
    let mut groups: Vec<Group> = (0..tenants)
        .map(|i| Group {
            name: format!("t{i}"),
            kind: GroupKind::Tenant,
            source: vec!["simulated".into()],
            vcpu_names: false,
        })
        .collect();
    let mut threads = std::collections::HashMap::new();
    for th in 0..tenants * vcpus {
        let tid = sim_tid(th);
        threads.insert(
            tid,
            ThreadInfo {
                tid,
                tgid: sim_tid(th - th % vcpus),
                comm: format!("crawl-vcpu{}", th % vcpus),
                group: Some((th / vcpus) as u32),
            },
        );
    }
    if !io_threads.is_empty() {
        groups.push(Group {
            name: "host-io".into(),
            kind: GroupKind::HostIo,
            source: vec!["simulated".into()],
            vcpu_names: false,
        });
    }
    for (i, io) in io_threads.clone().enumerate() {
        let tid = sim_tid(io);
        threads.insert(
            tid,
            ThreadInfo {
                tid,
                tgid: sim_tid(io_threads.start),
                comm: if io_threads.len() == 1 {
                    "relay".into()
                } else {
                    format!("io-vcpu{i}")
                },
                group: Some(tenants as u32),
            },
        );
    }
    if let Some(gw) = gateway {
        // Named as the lab's gateway thread, and untracked as it is.
        let tid = sim_tid(gw);
        threads.insert(
            tid,
            ThreadInfo {
                tid,
                tgid: tid,
                comm: "gw-worker".into(),
                group: None,
            },
        );
    }
    let meta = Meta {
        version: 1,
        mechanism: "sim".into(),
        start_ns: 0,
        start_realtime_ns: 0,
        cpus,
        kernel: "simulated".into(),
        hostname: "ontime sim".into(),
        groups,
        track_all: false,
        unavailable: vec![],
        command_line: vec![],
        ontime_version: env!("CARGO_PKG_VERSION").into(),
        clocksource: "simulated".into(),
        sample_period_ns: None,
        io: None,
    };
    let recording = Recording::of_events(meta, threads, events, end_ns);
    let analysis = ontime_sched::analyze(&recording, &ontime_sched::analyze::AnalysisOptions::default());
    SchedulerView { recording, analysis }
}

/// Where this host's kernel queues a waking fair thread and whether it
/// preempts there, as measured (the calibration); uncalibrated, the model
/// keeps its own rules (an idle CPU first, run to parity). The named
/// `--model`s keep theirs.
fn measured_wakeups(linux: Linux, cal: Option<&crate::calibrate::Calibration>) -> Linux {
    linux.measured(cal.map(|c| c.wakeups()).unwrap_or_default())
}

/// What every simulated run records; the workload adds the rest.
fn simulated_of(model: String, cpus: usize, seed: u64, opts: &SimOptions, busy_cpus: f64) -> Simulated {
    let cal = opts.calibration.as_ref();
    Simulated {
        model,
        cpus,
        seed,
        calibration: cal.map(|(p, _)| p.display().to_string()),
        io_cost_per_packet_ns: None,
        host_noise: cal.is_some_and(|(_, c)| c.host_noise.is_some()),
        host_stalls: cal.and_then(|(_, c)| c.host_stalls.as_ref()).map(|s| s.per_second),
        host_work_per_poll_ns: None,
        starts_measured: false,
        tenant_rt_budget_ns: None,
        // The lab's own Linux model applies them; a named model does not.
        wake_stay_share: cal
            .and_then(|(_, c)| c.wake_stay_share)
            .filter(|_| opts.model.is_none()),
        wake_preempt_share: cal
            .and_then(|(_, c)| c.wake_preempt_share)
            .filter(|_| opts.model.is_none()),
        cpu_hogs: 0,
        busy_cpus,
        io_path_cpus_least: None,
        io_path_cpus_mean: None,
        left_out: Vec::new(),
    }
}

/// Simulates every run of `plan`, handing each to `on_run` as it is done
/// (a run holds its histograms and scheduler view: a sweep's runs are
/// never all in memory at once).
pub fn simulate_plan(plan: &Plan, opts: &SimOptions, on_run: &mut dyn FnMut(SimRun) -> Result<()>) -> Result<()> {
    simulate_plan_until(plan, opts, &std::sync::atomic::AtomicBool::new(false), on_run).map(|_| ())
}

/// [`simulate_plan`], stopping between runs once `stop` is set (Ctrl-C):
/// returns how many runs were simulated, so the caller can keep what is
/// done, as `lab run` keeps its finished runs. Every run's size is checked
/// against the simulator's limits before the first starts.
pub fn simulate_plan_until(
    plan: &Plan,
    opts: &SimOptions,
    stop: &std::sync::atomic::AtomicBool,
    on_run: &mut dyn FnMut(SimRun) -> Result<()>,
) -> Result<usize> {
    if plan.runs.iter().any(|r| r.config.tenant.io.is_some()) {
        anyhow::bail!("the simulator models CPU scheduling; I/O tenants ([tenant.io]) run only in the lab");
    }
    if plan.runs.iter().any(|r| r.config.tenant.command.is_some()) {
        anyhow::bail!(
            "the simulator models ontime's crawler; a poller of your own (tenant.command) runs only in the lab"
        );
    }
    for r in &plan.runs {
        footprint(r, opts)?.check().map_err(|e| {
            ontime_core::bad_input(format!(
                "run {}: {e}; give fewer tenants, a lower rate or a shorter duration",
                r.dir_name()
            ))
        })?;
    }
    let mut done = 0;
    for r in &plan.runs {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        on_run(simulate_run(r, opts)?)?;
        done += 1;
    }
    Ok(done)
}

/// What `run_` will hold (see [`Footprint`]), counted from its
/// description as `simulate_run` and `simulate_cyclic` build it.
pub fn footprint(run_: &PlannedRun, opts: &SimOptions) -> Result<Footprint> {
    let c = &run_.config;
    let t = &c.tenant;
    let cpus = host_cpus(run_, opts)?;
    let tenants = t.count as u64;
    let Some(cr) = &t.crawl else {
        // A probe: each thread plans a wake-up every interval.
        let threads = tenants * t.vcpus.max(1) as u64;
        let interval = t.cyclic.as_ref().map_or(u64::MAX, |cz| cz.interval.max(1));
        let wakeups = threads as f64 * c.duration as f64 / interval as f64;
        return Ok(Footprint {
            tenants,
            threads,
            streams: threads,
            polls: wakeups.ceil() as u64,
            view: opts.scheduler_view,
        });
    };
    let vcpus = (if t.backend == Backend::Native { cpus } else { t.vcpus }) as u64;
    let cal = opts.calibration.as_ref().map(|(_, c)| c);
    let io_threads = match opts.io_cost_ns.or(cal.and_then(|c| c.io_cost_per_packet_ns)) {
        Some(_) => opts.io_vcpus.max(1) as u64,
        None => 0,
    };
    let host_work = u64::from(cal.and_then(|c| c.host_work_per_poll_ns).is_some());
    let hogs: u64 = c
        .effective_loads()
        .iter()
        .filter(|l| matches!(l.profile, LoadKind::Stress(ontime_load::LoadProfile::Cpu)))
        .map(|l| l.workers as u64 * if l.place == Place::Tenants { tenants } else { 1 })
        .sum();
    let streams = tenants as f64 * (cr.rate * cr.period as f64 / 1e9).round().max(1.0);
    let polls = tenants as f64 * cr.rate * c.duration as f64 / 1e9;
    Ok(Footprint {
        tenants,
        threads: tenants * vcpus + io_threads + host_work + hogs,
        streams: streams as u64,
        polls: polls.ceil() as u64,
        view: opts.scheduler_view,
    })
}

fn class_of(p: Policy, rr_slice_ns: u64) -> LinuxClass {
    match p {
        Policy::Other => LinuxClass::Fair { weight: 1024 },
        Policy::Fifo { priority } => LinuxClass::RealTime {
            priority: priority.into(),
            slice_ns: None,
        },
        Policy::Rr { priority } => LinuxClass::RealTime {
            priority: priority.into(),
            slice_ns: Some(rr_slice_ns),
        },
        Policy::Deadline {
            runtime_ns, period_ns, ..
        } => LinuxClass::Deadline { runtime_ns, period_ns },
    }
}

/// The simulated host's CPUs (the tenant's cpuset, else all) for a run.
fn host_cpus(run_: &PlannedRun, opts: &SimOptions) -> Result<usize> {
    let t = &run_.config.tenant;
    Ok(match (&t.cpuset, t.backend) {
        (Some(s), Backend::Sandbox) => parse_cpu_list(s).map_err(anyhow::Error::msg)?.len().max(1),
        _ => opts.cpus.max(1),
    })
}

fn simulate_run(run_: &PlannedRun, opts: &SimOptions) -> Result<SimRun> {
    let c = &run_.config;
    let t = &c.tenant;
    let Some(cr) = &t.crawl else {
        return simulate_cyclic(run_, opts);
    };
    let cal = opts.calibration.as_ref().map(|(_, c)| c);
    let cpus = host_cpus(run_, opts)?;
    let vcpus = if t.backend == Backend::Native { cpus } else { t.vcpus };
    let mut work = cr.work_model();
    if let Some(o) = cal.and_then(|c| c.cpu_per_poll_overhead_ns) {
        work.mean_ns += o;
    }
    let tenant = CrawlTenant {
        vcpus,
        rate: cr.rate,
        period_ns: cr.period,
        work,
        work_at: cr.work_at,
        aligned: cr.phase.is_some_and(Phase::bursts),
        send_cost_ns: opts.send_cost_ns,
        one_way_ns: c.host.relay_delay,
        offset_ns: 0,
        timeout_ns: cr.timeout.unwrap_or(cr.period),
    };
    let mut left_out = Vec::new();
    let (mut hogs, mut hogs_in_tenants) = (0, 0);
    // Host hogs first, then those in tenants (the thread order below).
    let loads = c.effective_loads();
    for l in loads
        .iter()
        .filter(|l| l.place == Place::Host)
        .chain(loads.iter().filter(|l| l.place == Place::Tenants))
    {
        match &l.profile {
            LoadKind::Stress(ontime_load::LoadProfile::Cpu) => {
                let n = l.workers * if l.place == Place::Tenants { t.count } else { 1 };
                hogs += n;
                if l.place == Place::Tenants {
                    hogs_in_tenants += n;
                }
            }
            LoadKind::None => {}
            other => left_out.push(format!("load {other:?} (only cpu loads are modelled, as hogs)")),
        }
    }
    // A sandboxed tenant's cpuset under the lab's own classes: the whole
    // host is simulated, the tenants' threads (and loads placed in them)
    // pinned to the cpuset, the host's threads (I/O path, other host work,
    // host loads) anywhere, as the lab runs them.
    let pinned_to = match (&t.cpuset, t.backend, opts.model) {
        (Some(cs), Backend::Sandbox, None) => {
            let list = parse_cpu_list(cs).map_err(anyhow::Error::msg)?;
            let host = opts.cpus.max(1);
            list.iter()
                .all(|&c| c < host)
                .then(|| (ontime_sim::sched::CpuSet::of(list.iter().copied()), host))
        }
        _ => None,
    };
    if t.cpuset.is_some() && pinned_to.is_none() && hogs > 0 {
        left_out.push("cpusets: hogs share the tenants' CPUs".into());
    }
    // The engine's CPUs: the whole host when the cpuset is pinned, else
    // the cpuset's (or the host's) count.
    let engine_cpus = pinned_to.map_or(cpus, |(_, host)| host);
    let io_cost = opts.io_cost_ns.or(cal.and_then(|c| c.io_cost_per_packet_ns));
    let io = io_cost.map(|cost| HostIo {
        cost_per_packet_ns: cost,
        vcpus: opts.io_vcpus.max(1),
        // The lab's relay holds every packet for the WAN delay (netem, when
        // asked for, holds them in the kernel instead; `auto` means the
        // relay on kernels without netem, as this project's hosts are).
        // Under a hypervisor's `--model` the path is Dom0 or vhost, which
        // forwards at once: the WAN is outside the host.
        holds: opts.model.is_none() && !matches!(c.host.wan_delay, ontime_scenario::scenario::WanDelay::Netem),
    });
    let seed = opts.seed ^ run_.index as u64;
    // The last tenant may start a period late; then its last answers, up
    // to their timeout (every poll unanswered at the end is then a miss).
    let horizon = c.duration + cr.period + cr.timeout.unwrap_or(cr.period).max(cr.period);
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    // Each tenant's start: as the lab's tenants started against each other
    // when the calibration saw it, else anywhere in the period.
    let mut offsets = cal
        .and_then(|c| c.start_offsets.clone())
        .map(|q| ontime_sim::noise::NoiseSampler::new(q, seed.wrapping_add(0x0ff5)));
    let measured = opts
        .starts_from
        .as_deref()
        .and_then(|d| measured_starts(d, run_, t.count, cr.period));
    let rt_budget = opts
        .tenant_rt_budget_ns
        .or_else(|| {
            opts.starts_from
                .as_deref()
                .and_then(|d| measured_rt_budget_ns(d, run_, t.count))
        })
        .or(cal.and_then(|c| c.tenant_rt_budget_ns))
        .filter(|&b| b > 0 && opts.model.is_none() && t.backend == Backend::Sandbox);
    let tenants: Vec<CrawlTenant> = (0..t.count)
        .map(|i| CrawlTenant {
            offset_ns: match (&measured, offsets.as_mut()) {
                (Some(m), _) => m[i],
                // Crawlers that plan on whole periods of the host's clock
                // burst together however they were started.
                _ if cr.phase == Some(Phase::Clock) => 0,
                (None, Some(o)) => {
                    let spacing = (1e9 / cr.rate.max(1e-9)) as u64;
                    (o.next_ns().min(crate::calibrate::PHASE_SCALE) as u128 * spacing as u128
                        / crate::calibrate::PHASE_SCALE as u128) as u64
                }
                (None, None) => rng.gen_range(0..cr.period.max(1)),
            },
            ..tenant.clone()
        })
        .collect();
    let host_work = cal.and_then(|c| c.host_work_per_poll_ns);
    let starts: Vec<u64> = tenants.iter().map(|t| t.offset_ns).collect();
    let mut w = CrawlWorkload::new(tenants, io, c.duration);
    if let Some(ns) = host_work {
        w = w.with_host_work(ns);
    }
    let mut w = w.with_hogs(hogs);
    let noise = cal.and_then(|c| c.host_noise.clone());
    if let Some(q) = noise.clone() {
        w = w.with_host_noise(q, seed.wrapping_add(0x5eed));
    }
    let io_threads = w.io_threads();
    let threads = t.count * vcpus + io_threads.len() + usize::from(host_work.is_some()) + hogs;
    let rr_slice = c.host.rr_timeslice.unwrap_or(100_000_000);
    let mut sched: Box<dyn Scheduler + Send> = match opts.model {
        None => {
            let mut classes = vec![class_of(t.policy, rr_slice); t.count * vcpus];
            classes.extend(io_threads.clone().map(|_| class_of(c.host.relay_policy, rr_slice)));
            // The gateway is most of the host's other work (it runs at
            // `host.gateway_policy`); softirq work would run above it.
            if host_work.is_some() {
                classes.push(class_of(c.host.gateway_policy, rr_slice));
            }
            classes.resize(classes.len() + hogs, LinuxClass::Fair { weight: 1024 });
            // Sandboxed tenants share the lab's parent cgroup (one entity
            // at the root beside host loads and the I/O path); a tenant's
            // own cgroup below it is left out. Loads placed in tenants
            // join them there.
            let in_lab = t.backend == Backend::Sandbox;
            let tenant_hogs = if in_lab { hogs_in_tenants } else { 0 };
            let mut group = vec![in_lab.then_some(0); t.count * vcpus];
            group.resize(
                group.len() + io_threads.len() + usize::from(host_work.is_some()) + hogs - tenant_hogs,
                None,
            );
            group.resize(group.len() + tenant_hogs, Some(0));
            let mut linux = measured_wakeups(Linux::new(classes, engine_cpus).with_groups(group, &[1024]), cal);
            if let Some(total) = rt_budget {
                // Each tenant's cgroup: its share of the budget on every
                // CPU of its cpuset.
                let cpus_of_tenant = pinned_to.map_or(engine_cpus, |(set, host)| set.count(host));
                let bandwidth = RtBandwidth {
                    runtime_ns: total / t.count.max(1) as u64,
                    period_ns: 1_000_000_000,
                    cpus: cpus_of_tenant,
                    first_refill_ns: None,
                };
                // Each group's period timer starts as its vCPU thread first
                // runs real-time (`start_rt_bandwidth`), the crawler's
                // warm-up before its first poll, and pays back a budget
                // every period from then.
                let warm_up = crawler_warm_up_ns(c.host.relay_delay).min(bandwidth.period_ns);
                let bws: Vec<RtBandwidth> = starts
                    .iter()
                    .map(|&start| RtBandwidth {
                        first_refill_ns: Some(start + bandwidth.period_ns - warm_up),
                        ..bandwidth
                    })
                    .collect();
                let of_tenant = (0..t.count * vcpus).map(|th| Some(th / vcpus)).collect();
                linux = linux.with_rt_bandwidth(of_tenant, &bws);
            }
            if let Some((set, _)) = pinned_to {
                let n = linux.classes.len();
                linux.pinned = vec![ontime_sim::sched::CpuSet::ALL; n];
                let tenant_threads = (0..t.count * vcpus).chain(n - tenant_hogs..n);
                for th in tenant_threads {
                    linux.pinned[th] = set;
                }
            }
            Box::new(linux)
        }
        Some(m) => m.build(threads, cpus),
    };
    let shape = ViewShape {
        tenants: t.count,
        vcpus,
        gateway: w.host_work_thread(),
        io_threads,
        cpus: engine_cpus,
        // Every tenant starts within its first period.
        polling: cr.period.min(c.duration / 2).div_ceil(SECOND) * SECOND..c.duration / SECOND * SECOND,
    };
    let (o, view, base) = run_simulated(&mut w, sched.as_mut(), horizon, seed, opts, &shape);
    let simulated = Simulated {
        io_cost_per_packet_ns: io_cost,
        host_work_per_poll_ns: host_work,
        starts_measured: measured.is_some(),
        tenant_rt_budget_ns: rt_budget,
        cpu_hogs: hogs,
        left_out,
        ..base
    };
    // Moved, not copied: a copy was another 264 KiB per tenant.
    let tenants = std::mem::take(&mut w.measures)
        .into_iter()
        .enumerate()
        .map(|(i, m)| SimTenant {
            polls: m.polls,
            missed: m.missed,
            interval_error: Some(m.interval_error.summary(None)),
            send_lag: Some(m.send_lag.summary(None)),
            latency: None,
            cpu_ns: tenant_cpu_ns(&o, i, vcpus),
            histogram: m.interval_error,
        })
        .collect();
    Ok(SimRun::new(run_, simulated, tenants, view))
}

/// A cyclic (wake-up probe) run: `vcpus` probe threads per tenant at the
/// tenant's policy, the host's jitter and stalls; loads are left out.
fn simulate_cyclic(run_: &PlannedRun, opts: &SimOptions) -> Result<SimRun> {
    use ontime_sim::cyclic::{CyclicTenant, CyclicWorkload};
    let c = &run_.config;
    let t = &c.tenant;
    let Some(cz) = &t.cyclic else {
        bail!("{}: the tenant has neither a crawler nor a probe", run_.dir_name());
    };
    let cal = opts.calibration.as_ref().map(|(_, c)| c);
    let cpus = host_cpus(run_, opts)?;
    // The probe keeps its thread count natively too.
    let threads = t.vcpus.max(1);
    let seed = opts.seed ^ run_.index as u64;
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let tenants: Vec<CyclicTenant> = (0..t.count)
        .map(|_| CyclicTenant {
            threads,
            interval_ns: cz.interval,
            cpu_ns: 5_000,
            offset_ns: rng.gen_range(0..cz.interval.max(1)),
        })
        .collect();
    let mut w = CyclicWorkload::new(tenants, c.duration);
    let noise = cal.and_then(|c| c.host_noise.clone());
    if let Some(q) = noise.clone() {
        w = w.with_host_noise(q, seed.wrapping_add(0x5eed));
    }
    let left_out: Vec<String> = c
        .effective_loads()
        .iter()
        .filter(|l| l.profile != LoadKind::None)
        .map(|l| format!("load {:?} (not modelled with a wake-up probe)", l.profile))
        .collect();
    let n = t.count * threads;
    let rr_slice = c.host.rr_timeslice.unwrap_or(100_000_000);
    let mut sched: Box<dyn Scheduler + Send> = match opts.model {
        None => Box::new(measured_wakeups(
            Linux::new(vec![class_of(t.policy, rr_slice); n], cpus),
            cal,
        )),
        Some(m) => m.build(n, cpus),
    };
    let horizon = c.duration + 2 * cz.interval;
    let shape = ViewShape {
        tenants: t.count,
        vcpus: threads,
        io_threads: 0..0,
        gateway: None,
        cpus,
        polling: 0..c.duration,
    };
    let (o, view, base) = run_simulated(&mut w, sched.as_mut(), horizon, seed, opts, &shape);
    let tenants = std::mem::take(&mut w.measures)
        .into_iter()
        .enumerate()
        .map(|(i, m)| SimTenant {
            polls: m.wakeups,
            missed: m.overruns,
            interval_error: None,
            send_lag: None,
            latency: Some(m.latency.summary(None)),
            cpu_ns: tenant_cpu_ns(&o, i, threads),
            histogram: m.latency,
        })
        .collect();
    Ok(SimRun::new(run_, Simulated { left_out, ..base }, tenants, view))
}

/// Writes `runs` into `results/runs/<run name>/` in the lab's layout, each
/// marked simulated; returns the directories written. An existing
/// simulated run of the same name is replaced, a measured one never.
pub fn write_runs(results: &Path, runs: &[SimRun]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for r in runs {
        let dir = results.join("runs").join(&r.name);
        if dir.join("run.json").exists() {
            let old = ontime_scenario::results::read_record(&dir)?;
            anyhow::ensure!(
                old.simulated.is_some(),
                "{} holds a measured run: not overwriting it",
                dir.display()
            );
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let now = ontime_core::manifest::utc_now();
        let mut tenants = Vec::new();
        for (i, t) in r.tenants.iter().enumerate() {
            let name = format!("t{i}.json");
            ontime_core::fsio::write_atomic(&dir.join(&name), serde_json::to_string_pretty(t)?.as_bytes())?;
            let mut h = ontime_core::hlog::HlogFile::create(
                &dir.join(format!("t{i}.hlog")),
                "ontime sim: simulated headline metric",
                std::time::SystemTime::now(),
            )?;
            let len = std::time::Duration::from_nanos(r.planned.config.duration);
            let tag = if t.latency.is_some() {
                "latency"
            } else {
                "interval_error"
            };
            h.write(tag, &t.histogram, std::time::Duration::ZERO, len)?;
            h.flush()?;
            tenants.push(TenantOutcome {
                index: i,
                result: Some(name),
                exit: None,
            });
        }
        let observe = match &r.view {
            Some(SchedulerView { recording, analysis: a }) => {
                ontime_core::fsio::write_atomic(
                    &dir.join("observe.json"),
                    serde_json::to_string_pretty(a)?.as_bytes(),
                )?;
                // The same events as a recording, for what reads events
                // one by one (`ontime observe report`, with `--wakeups` who
                // woke whom).
                recording.write(&dir.join("observe.otrec"))?;
                Some(ontime_scenario::record::ObserveOutcome {
                    recorder: "sim".into(),
                    file: Some("observe.otrec".into()),
                    analysis: Some("observe.json".into()),
                    span_ns: a.recording.duration_ns,
                    events: Some(a.recording.events),
                    lost: Some(0),
                    ..Default::default()
                })
            }
            None => None,
        };
        let mut manifest = Manifest::start("simulated", Capabilities::default());
        manifest.finish();
        let note = format!(
            "Simulated by ontime sim (model {}), not measured: see docs/sim.md for what the model leaves out.",
            r.simulated.model
        );
        let record = RunRecord {
            complete: true,
            observe,
            tenants,
            finished_utc: now.clone(),
            simulated: Some(r.simulated.clone()),
            ..RunRecord::new(
                &r.planned,
                Environment {
                    rr_timeslice_ms: r.planned.config.host.rr_timeslice.map(|n| n / 1_000_000),
                    ..Environment::new(manifest, WanDelayBy::Simulator, note)
                },
                now,
            )
        };
        ontime_core::fsio::write_atomic(&dir.join("run.json"), serde_json::to_string_pretty(&record)?.as_bytes())?;
        out.push(dir);
    }
    Ok(out)
}

/// One simulated run as `ontime sim` lists it: the worst tenant's
/// percentiles of what the run is judged by.
#[derive(Clone, Debug, Serialize)]
pub struct SimLine {
    pub name: String,
    pub model: String,
    pub cpus: usize,
    pub busy_cpus: f64,
    pub p99_ns: Option<u64>,
    pub p99_9_ns: Option<u64>,
    pub p99_999_ns: Option<u64>,
    pub max_ns: Option<u64>,
    /// The host I/O path's CPU in its leanest second, CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_path_cpus_least: Option<f64>,
}

impl SimLine {
    pub fn of(r: &SimRun) -> SimLine {
        let worst = |p: f64| r.tenants.iter().filter_map(|t| t.headline().percentile(p)).max();
        SimLine {
            name: r.name.clone(),
            model: r.simulated.model.clone(),
            cpus: r.simulated.cpus,
            busy_cpus: r.simulated.busy_cpus,
            p99_ns: worst(99.0),
            p99_9_ns: worst(99.9),
            p99_999_ns: worst(99.999),
            max_ns: r.tenants.iter().filter_map(|t| t.headline().max_ns).max(),
            io_path_cpus_least: r.simulated.io_path_cpus_least,
        }
    }
}

impl ontime_core::export::TextReport for SimLine {
    fn text(&self) -> String {
        let f = |v: Option<u64>| v.map_or("n/a".into(), ontime_core::duration::format_ns);
        format!(
            "{:<56} {:>8} {:>4} {:>6.2} {:>10} {:>10} {:>10} {:>10} {:>7}\n",
            self.name,
            self.model,
            self.cpus,
            self.busy_cpus,
            f(self.p99_ns),
            f(self.p99_9_ns),
            f(self.p99_999_ns),
            f(self.max_ns),
            self.io_path_cpus_least.map_or("-".into(), |c| format!("{c:.3}"))
        )
    }
}

/// What `ontime sim` shows of a scenario: a line per run, kept as the
/// runs stream by, and where they were written.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimListing {
    pub scenario: String,
    pub lines: Vec<SimLine>,
    /// Runs written beside measured ones (`--into`), and where.
    pub written_into: Option<(usize, PathBuf)>,
    /// What the host's noise and costs came from, said on the first line.
    pub basis: Option<String>,
    /// Stopped by Ctrl-C: (runs done, runs planned).
    pub interrupted: Option<(usize, usize)>,
}

impl ontime_core::export::TextReport for SimListing {
    fn text(&self) -> String {
        let mut s = format!(
            "ontime sim: scenario '{}', {} run(s), simulated (not measured){}\n{:<56} {:>8} {:>4} {:>6} {:>10} {:>10} {:>10} {:>10} {:>7}\n",
            self.scenario,
            self.lines.len(),
            self.basis.as_deref().map(|b| format!("; {b}")).unwrap_or_default(),
            "run",
            "model",
            "CPUs",
            "busy",
            "p99",
            "p99.9",
            "p99.999",
            "max",
            "I/O min"
        );
        for l in &self.lines {
            s.push_str(&l.text());
        }
        s.push_str("interval error (crawlers) or wake-up latency (probes) of the worst tenant per run; percentiles the sample count cannot support are n/a; I/O min: the host I/O path's (Dom0's) CPUs in its leanest second\n");
        if let Some((done, total)) = self.interrupted {
            s.push_str(&format!(
                "interrupted after {done} of {total} runs: the table (and --result, --into) hold those\n"
            ));
        }
        if let Some((n, dir)) = &self.written_into {
            s.push_str(&format!(
                "wrote {n} simulated run(s) into {}/runs; draw them beside the measured ones: ontime lab report {}\n",
                dir.display(),
                dir.display()
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The I/O path's CPU is charged to the seconds it ran in, split at a
    /// second's edge, and judged only over the seconds every tenant polls.
    #[test]
    fn the_io_paths_leanest_second_is_over_the_polling_seconds() {
        const MS: u64 = 1_000_000;
        // Threads 2 and 3 are the I/O path; 2 CPUs; a 4 s run.
        let mut io = IoPathSeconds::new(2..4, 2, 4 * SECOND);
        // Thread 2 on CPU 0 from 0.9 s to 1.2 s: 100 ms in second 0, 200 in 1.
        io.switch(900 * MS, 0, Some(2));
        io.switch(1_200 * MS, 0, Some(0));
        // A tenant's thread is not charged.
        io.switch(1_300 * MS, 1, Some(1));
        // Thread 3 on CPU 1 from 2.5 s to the run's end: 500 ms in 2, 1 s in 3.
        io.switch(2_500 * MS, 1, Some(3));
        // Still running at the end: charged when the seconds are read.
        assert_eq!(io.per_second, vec![100 * MS, 200 * MS, 0, 0]);
        let least_mean = io.cpus(4 * SECOND, &(SECOND..3 * SECOND));
        let (least, mean) = least_mean.unwrap();
        assert!(
            (least - 0.2).abs() < 1e-9 && (mean - 0.35).abs() < 1e-9,
            "{least} {mean}"
        );
        assert!(IoPathSeconds::new(0..0, 2, SECOND).cpus(SECOND, &(0..SECOND)).is_none());
    }
}
