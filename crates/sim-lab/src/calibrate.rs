//! `ontime sim calibrate RESULTS`: fits what the simulator cannot know
//! from a scenario file out of recorded lab runs of this host.
//!
//! - the host's own noise: the send lag of the quiet runs (no load, the
//!   crawlers using at most a quarter of the CPUs), merged from their
//!   histogram logs; lags up to 0.5 ms as wake-up jitter (quantiles, a
//!   draw delays every send), longer ones as stalls of the whole host (a
//!   rate and durations; the simulator stops every CPU for them);
//! - the crawler's CPU per poll beyond the work the scenario asked for
//!   (HTTP, JSON, the kernel's network stack): measured CPU per answered
//!   poll minus `work_per_poll`, the median over runs. Only the mean is
//!   fitted: the shape of the per-poll distribution stays the scenario's
//!   work model, because neither the crawler's result nor the scheduler
//!   recording resolves single polls;
//! - the host I/O path's CPU per packet: the relay's on-CPU time in the
//!   run's scheduler recording over two packets per poll, the median over
//!   runs that recorded it;
//! - when lab tenants start against each other (the histogram logs'
//!   start times, modulo the period): they start within a few ms, so their
//!   polls nearly coincide;
//! - the host's other work per poll (the gateway, softirq network work,
//!   the recorder): the host's busy time from /proc/stat minus the
//!   tenants' and the relay's on-CPU time, fitted against the poll rate
//!   over the unloaded runs (least squares; see [`fit_host_work`]);
//! - where the host's kernel queues a waking thread whose last CPU is busy
//!   while another idles: the share it keeps there (observe's wake-up
//!   placement, pooled over every run that recorded the scheduler view;
//!   recordings analysed before it was counted are analysed again).
//!
//! Every file it reads (run.json, the tenants' results, histogram logs,
//! scheduler recordings) is opened under the one input rule
//! (`ontime_core::fsio`): a regular file under a size cap, never a FIFO
//! or a device behind a symlink. A calibration file is checked key by
//! key as it is read ([`Calibration::validate`]), so a hand-edited one
//! cannot make a run stall for ever or never end.

use anyhow::{Context, Result};
use ontime_core::stats::LatencyHistogram;
use ontime_scenario::results::{read_run, run_dirs, ProbeResult, RunResults};
use ontime_sim::noise::{Quantiles, Stalls};
use ontime_sim::sched::MeasuredWakeups;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What `ontime sim --calibration FILE` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub format: String,
    /// The results directories it was fitted from.
    pub from: String,
    /// The runs the host noise came from (the least loaded).
    pub quiet_runs: Vec<String>,
    /// How late a send starts on this host with little else to do.
    pub host_noise: Option<Quantiles>,
    /// Sends the noise was fitted from.
    pub noise_samples: u64,
    /// Send lags above this were taken as stalls of the whole host.
    pub stall_threshold_ns: u64,
    pub host_stalls: Option<Stalls>,
    /// When each tenant's crawler starts after the run's first, as a phase
    /// of its poll spacing (1 / rate) in millionths, from the histogram
    /// logs' start times (1 ms resolution).
    #[serde(default)]
    pub start_offsets: Option<Quantiles>,
    /// Measured CPU per answered poll minus the scenario's work per poll.
    pub cpu_per_poll_overhead_ns: Option<u64>,
    /// Runs (tenants) the overhead is the median of.
    pub cpu_per_poll_samples: usize,
    /// The host I/O path's CPU per packet (two packets per poll).
    pub io_cost_per_packet_ns: Option<u64>,
    pub io_cost_samples: usize,
    /// The host's CPU per poll outside the tenants and the I/O path (the
    /// gateway, softirq network work, the recorder): busy time from
    /// /proc/stat minus the tracked threads' on-CPU time, its slope against
    /// the poll rate over the unloaded runs (`host_work_samples` of them).
    #[serde(default)]
    pub host_work_per_poll_ns: Option<u64>,
    #[serde(default)]
    pub host_work_samples: usize,
    /// Of the tracked threads' wake-ups that found their last CPU busy
    /// while another idled, the share the kernel queued there all the
    /// same (the Linux model's `MeasuredWakeups::stay_on_busy_prev`).
    #[serde(default)]
    pub wake_stay_share: Option<f64>,
    /// Such wake-ups it was measured over.
    #[serde(default)]
    pub wake_stay_samples: u64,
    /// Of the waking threads queued behind a busy CPU while another idled
    /// whose occupant did not go to sleep at once, the share that
    /// preempted it at once (the Linux model's `MeasuredWakeups::preempts`); the rest
    /// waited for it.
    #[serde(default)]
    pub wake_preempt_share: Option<f64>,
    #[serde(default)]
    pub wake_preempt_samples: u64,
    /// The real-time budget per second the lab gave its tenants' cgroups
    /// together (run.json's `tenant_rt_runtime_us` times the tenants), the
    /// median over the runs that recorded one: what the Linux model
    /// throttles real-time vCPU threads at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_rt_budget_ns: Option<u64>,
    pub notes: Vec<String>,
}

impl Calibration {
    /// The measured kernel's wake-up placement and preemption, for the
    /// Linux model (none measured: the kernel's rules as written).
    pub fn wakeups(&self) -> MeasuredWakeups {
        MeasuredWakeups {
            stay_on_busy_prev: self.wake_stay_share.unwrap_or(0.0),
            preempts: self.wake_preempt_share,
            // Measured on the lab host's recordings by their threads'
            // policies, which observe's counts do not carry: a host whose
            // placement was measured is taken to leave real-time CPUs as
            // the lab's does (`ontime observe report --wakeups`).
            leave_real_time: self.wake_stay_share.is_some(),
        }
    }

    /// Only its host noise (how late a woken thread starts): for a host
    /// that was not calibrated, such as document 000's Xen host, whose
    /// timers are late too but whose crawler, I/O path, gateway, stalls and
    /// real-time budget are not the lab's. Without any noise, bursts that
    /// start on the same instant interleave the same way every second and
    /// their interval error is exactly 0 (docs/sim.md).
    pub fn host_noise_only(self, path: &Path) -> Result<Calibration> {
        anyhow::ensure!(
            self.host_noise.is_some(),
            "{}: has no host noise (no quiet run with histogram logs was calibrated from): \
             calibrate from a results directory with an unloaded crawler run",
            path.display()
        );
        let mut notes = self.notes;
        notes.push("host noise only (--host-noise)".into());
        Ok(Calibration {
            format: self.format,
            from: self.from,
            quiet_runs: self.quiet_runs,
            host_noise: self.host_noise,
            noise_samples: self.noise_samples,
            stall_threshold_ns: self.stall_threshold_ns,
            host_stalls: None,
            start_offsets: None,
            cpu_per_poll_overhead_ns: None,
            cpu_per_poll_samples: 0,
            io_cost_per_packet_ns: None,
            io_cost_samples: 0,
            host_work_per_poll_ns: None,
            host_work_samples: 0,
            wake_stay_share: None,
            wake_stay_samples: 0,
            wake_preempt_share: None,
            wake_preempt_samples: 0,
            tenant_rt_budget_ns: None,
            notes,
        })
    }
}

pub const FORMAT: &str = "ontime-sim-calibration/2";

/// The scale of a start phase: millionths of the poll spacing.
pub const PHASE_SCALE: u64 = 1_000_000;

/// Send lags longer than this are stalls of the host, not wake-up jitter.
pub const STALL_THRESHOLD_NS: u64 = 500_000;

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// The host's other work: CPU per poll, and CPU beside that no poll
/// accounts for.
#[derive(Clone, Copy, Debug)]
struct HostWork {
    per_poll_ns: f64,
    background_cpus: f64,
}

/// Fits the host's untracked CPU (CPUs) against the poll rate (polls per
/// second), one point per unloaded run: least squares, the slope being the
/// CPU per poll. Not each run's ratio: a fixed background divided by few
/// polls inflates the slow runs' ratios, and clamping the negative ones
/// (tick counting) biased the median up, to 83 us per poll on the third
/// VM's host where the slope is 59 us; the
/// difference decides whether six crawlers at 200 polls/s fit two CPUs.
/// All runs at one rate: their total untracked CPU over their polls.
fn fit_host_work(points: &[(f64, f64)]) -> Option<HostWork> {
    let n = points.len() as f64;
    if points.is_empty() {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    // Rates differing by less than a poll per second cannot separate the
    // two terms.
    if sxx < n {
        return (mean_x > 0.0).then(|| HostWork {
            per_poll_ns: (mean_y / mean_x * 1e9).max(0.0),
            background_cpus: 0.0,
        });
    }
    let slope = sxy / sxx;
    Some(HostWork {
        per_poll_ns: (slope * 1e9).max(0.0),
        background_cpus: mean_y - slope * mean_x,
    })
}

/// Fits a calibration from the measured crawler runs under `dirs` (more
/// runs, made at different times, give a steadier picture of a host whose
/// noise comes and goes).
pub fn calibrate(dirs: &[&Path]) -> Result<Calibration> {
    let from = dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut runs: Vec<RunResults> = Vec::new();
    for d in dirs
        .iter()
        .map(|d| run_dirs(d))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
    {
        let r = read_run(&d).with_context(|| format!("cannot read {}", d.display()))?;
        if r.record.simulated.is_none() && r.record.complete {
            runs.push(r);
        }
    }
    let crawl: Vec<&RunResults> = runs
        .iter()
        .filter(|r| {
            r.tenants
                .iter()
                .any(|(_, t)| matches!(t, ProbeResult::Crawl(_) | ProbeResult::CrawlAtDevice(..)))
        })
        .collect();
    anyhow::ensure!(
        !crawl.is_empty(),
        "{} has no complete measured crawler run to calibrate from: run a crawler scenario with `ontime lab run` first",
        from
    );
    // A burst's send lag is the burst's own work, not the host's noise or
    // stalls: only crawlers that spread their polls measure those.
    let spread = |r: &&RunResults| {
        !r.record
            .config
            .tenant
            .crawl
            .as_ref()
            .and_then(|c| c.phase)
            .is_some_and(ontime_scenario::scenario::Phase::bursts)
    };
    let bursting = crawl.iter().filter(|r| !spread(r)).count();
    let crawl: Vec<&RunResults> = crawl.into_iter().filter(|r| spread(r)).collect();
    anyhow::ensure!(
        !crawl.is_empty(),
        "{} has only crawlers that burst (phase = \"aligned\" or \"clock\"): their send lag is the burst's own work, \
         not this host's noise; calibrate from runs whose crawlers spread their polls (e.g. scenarios/doc-000-tenants.toml)",
        from
    );
    let mut notes = Vec::new();
    if bursting > 0 {
        notes.push(format!(
            "{bursting} run(s) whose crawlers burst (phase aligned or clock) left out: their send lag is the burst, not the host's noise"
        ));
    }
    let mut overhead = Vec::new();
    let mut io_cost = Vec::new();
    // Per unloaded run: (polls per second, untracked CPUs).
    let mut host_work: Vec<(f64, f64)> = Vec::new();
    for r in &crawl {
        let asked = r
            .record
            .config
            .tenant
            .crawl
            .as_ref()
            .and_then(|c| c.work_per_poll)
            .unwrap_or(0);
        let mut polls = 0u64;
        for (_, t) in &r.tenants {
            if let ProbeResult::Crawl(c) | ProbeResult::CrawlAtDevice(c, _) = t {
                polls += c.polls.ok;
                if let Some(cpu) = c.resources.cpu_per_poll_ns {
                    overhead.push(cpu.saturating_sub(asked));
                }
            }
        }
        let io = r.analysis.as_ref().and_then(|a| a.host_io()).map(|g| g.on_cpu_ns);
        if let (Some(io), true) = (io, polls > 0) {
            io_cost.push(io / (2 * polls));
        }
        // The host's CPU no tracked thread accounts for (the gateway,
        // softirq network work, the recorder), per poll; only without
        // loads, whose CPU nothing here tracks.
        if let (Some(h), Some(a), true) = (&r.record.host_cpu, &r.analysis, polls > 0) {
            if r.record.config.effective_loads().is_empty() {
                let tracked: u64 = a.tenants().map(|g| g.on_cpu_ns).sum::<u64>() + io.unwrap_or(0);
                let wall = h.wall_ns.max(1) as f64;
                // Signed: /proc/stat's tick counts put a quiet run's
                // untracked CPU below zero as often as above.
                host_work.push((polls as f64 * 1e9 / wall, (h.busy_ns() as f64 - tracked as f64) / wall));
            }
        }
    }
    if host_work.is_empty() {
        notes.push("no unloaded run recorded the host's CPU and the scheduler view: no host work fitted (runs of early versions of ontime lack host_cpu)".into());
    }
    if io_cost.is_empty() {
        notes.push("no run recorded the host I/O path ([observe] in the scenario): no I/O cost fitted".into());
    }
    // Quiet runs: no load, the crawlers' mean CPU at most a quarter of
    // the host's CPUs (else only the least loaded). Their send lags are
    // merged exactly from the histogram logs: rare stalls need samples.
    let demand = |r: &RunResults| {
        let t = &r.record.config.tenant;
        let per_poll = t.crawl.as_ref().and_then(|c| c.work_per_poll).unwrap_or(0) as f64 / 1e9;
        t.count as f64 * t.crawl.as_ref().map_or(0.0, |c| c.rate) * per_poll
    };
    let unloaded: Vec<&&RunResults> = crawl
        .iter()
        .filter(|r| r.record.config.effective_loads().is_empty())
        .collect();
    let cpus = |r: &RunResults| r.record.environment.manifest.cpus_online.max(1) as f64;
    let mut quiet: Vec<&&RunResults> = unloaded
        .iter()
        .copied()
        .filter(|r| demand(r) <= cpus(r) / 4.0)
        .collect();
    if quiet.is_empty() {
        let least = unloaded.iter().map(|r| demand(r)).min_by(f64::total_cmp);
        quiet = unloaded.iter().copied().filter(|r| Some(demand(r)) == least).collect();
    }
    let mut lag = LatencyHistogram::new();
    for r in &quiet {
        for t in &r.record.tenants {
            let hlog = r.dir.join(format!("t{}.hlog", t.index));
            if hlog.exists() {
                lag.add(&ontime_core::hlog::read_merged(&hlog, "send_lag")?);
            }
        }
    }
    // Lags up to the threshold are jitter of single wake-ups; longer ones
    // are taken as the host stalling as a whole (a VM descheduled), each
    // such lag one stall of about that length (crude: a stall seen twice
    // counts twice, one no send fell into is not seen at all).
    let (mut jitter, mut long) = (LatencyHistogram::new(), LatencyHistogram::new());
    for v in lag.inner().iter_recorded() {
        let ns = lag.inner().highest_equivalent(v.value_iterated_to());
        let n = v.count_at_value();
        if ns <= STALL_THRESHOLD_NS {
            jitter.record_n(ns, n);
        } else {
            long.record_n(ns, n);
        }
    }
    let host_noise = Quantiles::from_summary(&jitter.summary(None));
    let observed_s: f64 = quiet
        .iter()
        .map(|r| r.record.tenants.len() as f64 * r.record.config.duration as f64 / 1e9)
        .sum();
    let host_stalls = Quantiles::from_summary(&long.summary(None)).map(|durations| Stalls {
        per_second: long.len() as f64 / observed_s.max(1e-9),
        durations,
    });
    if quiet.is_empty() {
        notes.push("every run had a load: no quiet run to fit the host noise from".into());
    } else if host_noise.is_none() {
        notes.push("the quiet runs have no histogram logs (t<i>.hlog): no host noise fitted".into());
    }
    let noise_samples = lag.len();
    // When each tenant's crawler started against the first, as a phase of
    // the spacing between its polls (1 / rate): what decides whether the
    // tenants' polls coincide. Lab tenants start within a few ms of each
    // other, so they nearly do; the simulator would otherwise spread them.
    let mut offsets = LatencyHistogram::new();
    for r in &crawl {
        let Some(rate) = r.record.config.tenant.crawl.as_ref().map(|c| c.rate) else {
            continue;
        };
        let spacing = (1e9 / rate.max(1e-9)) as u64;
        let starts: Vec<u64> = r
            .record
            .tenants
            .iter()
            .filter_map(|t| hlog_start_ns(&r.dir.join(format!("t{}.hlog", t.index))))
            .collect();
        if starts.len() < 2 || spacing == 0 {
            continue;
        }
        let first = starts.iter().copied().min().unwrap_or(0);
        for s in &starts {
            let phase = (s - first) % spacing;
            offsets.record((phase as u128 * PHASE_SCALE as u128 / spacing as u128) as u64);
        }
    }
    let start_offsets = Quantiles::from_summary(&offsets.summary(None));
    let (mut found_busy, mut stayed, mut preempted, mut waited) = (0u64, 0u64, 0u64, 0u64);
    for r in &crawl {
        if let Some(p) = wake_placement(r)? {
            found_busy += p.prev_busy_while_idle;
            stayed += p.stayed_on_busy_prev;
            preempted += p.preempted_at_once;
            waited += p.waited;
        }
    }
    let tenant_rt_budget_ns = median(
        crawl
            .iter()
            .filter_map(|r| {
                let per_tenant_us = r.record.environment.tenant_rt_runtime_us?;
                Some(per_tenant_us * 1000 * r.record.tenants.len() as u64)
            })
            .collect(),
    );
    let wake_stay_share = (found_busy > 0).then(|| stayed as f64 / found_busy as f64);
    let decided = preempted + waited;
    let wake_preempt_share = (decided > 0).then(|| preempted as f64 / decided as f64);
    if wake_stay_share.is_none() {
        notes.push("no run recorded a wake-up whose last CPU was busy while another idled ([observe] in the scenario): waking threads go to an idle CPU".into());
    }
    let host_work_per_poll_ns = match fit_host_work(&host_work) {
        Some(HostWork {
            per_poll_ns,
            background_cpus,
        }) => {
            notes.push(format!(
                "host work: {:.0} us per poll and {background_cpus:.3} CPUs beside that no poll accounts for (not modelled), from {} unloaded runs",
                per_poll_ns / 1e3,
                host_work.len()
            ));
            (per_poll_ns > 0.0).then_some(per_poll_ns as u64)
        }
        None => None,
    };
    let cal = Calibration {
        format: FORMAT.into(),
        from,
        quiet_runs: quiet.iter().map(|r| r.name.clone()).collect(),
        noise_samples,
        host_noise,
        stall_threshold_ns: STALL_THRESHOLD_NS,
        host_stalls,
        start_offsets,
        cpu_per_poll_samples: overhead.len(),
        cpu_per_poll_overhead_ns: median(overhead),
        io_cost_samples: io_cost.len(),
        io_cost_per_packet_ns: median(io_cost),
        host_work_samples: host_work.len(),
        host_work_per_poll_ns,
        wake_stay_share,
        wake_stay_samples: found_busy,
        wake_preempt_share,
        wake_preempt_samples: decided,
        tenant_rt_budget_ns,
        notes,
    };
    // Never write what `read` would refuse: say which figure the runs
    // gave out of range instead.
    cal.validate()
        .map_err(|e| ontime_core::bad_input(format!("the runs in {}: {e}", cal.from)))?;
    Ok(cal)
}

/// A run's wake-up placement: from observe.json, or from its recording
/// when that analysis predates the count of wake-ups by their last CPU or
/// counted a woken thread that got its CPU as the occupant slept as a
/// preemption (before `occupant_slept_at_once`).
fn wake_placement(r: &RunResults) -> Result<Option<ontime_sched::analysis::WakePlacement>> {
    let counted = r
        .analysis
        .as_ref()
        .and_then(|a| a.work_conservation.as_ref())
        .and_then(|w| w.wakeups);
    let current = |p: &ontime_sched::analysis::WakePlacement| {
        p.prev_busy_while_idle > 0 && (p.occupant_slept_at_once > 0 || p.preempted_at_once == 0)
    };
    if counted.as_ref().is_some_and(current) {
        return Ok(counted);
    }
    let file = r.dir.join("observe.otrec");
    if !file.exists() {
        return Ok(counted);
    }
    // The recording's own reader opens the file as it is: a FIFO would
    // block it and /dev/zero behind a symlink never end.
    ontime_core::fsio::open_input(&file, "scheduler recording", MAX_RECORDING_BYTES)?;
    let rec = ontime_recording::recording::Recording::read(&file)
        .with_context(|| format!("cannot read the scheduler recording {}", file.display()))?;
    let a = ontime_sched::analysis::analyze(
        &rec,
        &ontime_sched::analyze::AnalysisOptions {
            windows: Vec::new(),
            series: false,
        },
    );
    Ok(a.work_conservation.and_then(|w| w.wakeups))
}

/// The largest scheduler recording read back to count wake-ups: a lab
/// run's recording is tens of MB; the events are held in memory (24 bytes
/// each), so a larger file is refused rather than read.
const MAX_RECORDING_BYTES: u64 = 1 << 30;

/// The start time in a histogram log's header, ns since the epoch. Only
/// the head of the log is read (the header comes first), under the input
/// rule.
pub(crate) fn hlog_start_ns(path: &Path) -> Option<u64> {
    use std::io::Read;
    const HEAD: u64 = 64 << 10;
    let (f, _) = ontime_core::fsio::open_input(path, "histogram log", ontime_core::hlog::MAX_HLOG_BYTES).ok()?;
    let mut head = Vec::new();
    f.take(HEAD).read_to_end(&mut head).ok()?;
    let text = String::from_utf8_lossy(&head);
    let at = text.find("[StartTime: ")? + "[StartTime: ".len();
    let secs: f64 = text[at..].split_whitespace().next()?.parse().ok()?;
    Some((secs * 1e9) as u64)
}

/// Reads a calibration file (under the input rule: a regular file of at
/// most `fsio::MAX_TEXT_BYTES`) and checks every key that sizes a run
/// ([`Calibration::validate`]); a refusal is bad input naming the file,
/// the key and its range.
pub fn read(path: &Path) -> Result<Calibration> {
    let c: Calibration = ontime_scenario::results::read_json(path, "simulator calibration")?;
    if c.format != FORMAT {
        return Err(ontime_core::bad_input(format!(
            "{}: format {} is not {FORMAT}: make it again with `ontime sim calibrate`",
            path.display(),
            c.format
        )));
    }
    c.validate().map_err(|e| {
        ontime_core::bad_input(format!(
            "{}: {e}; fix the file or make it again with `ontime sim calibrate`",
            path.display()
        ))
    })?;
    Ok(c)
}

impl Calibration {
    /// Checks what a calibration claims before a run is sized or drawn
    /// from it: delays and costs within their ranges
    /// (`limits::MAX_HOST_DELAY_NS`, `MAX_IO_COST_NS`), quantile functions
    /// that do not decrease, shares between 0 and 1, a stall rate within
    /// `limits::MAX_STALLS_PER_SECOND`. A negative rate, a share of 2 or a
    /// cost of u64::MAX once made `plan` run for minutes.
    pub fn validate(&self) -> std::result::Result<(), String> {
        use ontime_core::limits::{self, MAX_HOST_DELAY_NS, MAX_IO_COST_NS, MAX_STALLS_PER_SECOND};
        const SECOND: u64 = 1_000_000_000;
        if let Some(q) = &self.host_noise {
            q.check("host_noise", MAX_HOST_DELAY_NS)?;
        }
        limits::duration("stall_threshold_ns", self.stall_threshold_ns, 0, MAX_HOST_DELAY_NS)?;
        if let Some(st) = &self.host_stalls {
            st.check("host_stalls", MAX_STALLS_PER_SECOND, MAX_HOST_DELAY_NS)?;
        }
        if let Some(q) = &self.start_offsets {
            q.check("start_offsets", PHASE_SCALE)?;
        }
        let costs = [
            ("cpu_per_poll_overhead_ns", self.cpu_per_poll_overhead_ns, SECOND),
            ("io_cost_per_packet_ns", self.io_cost_per_packet_ns, MAX_IO_COST_NS),
            ("host_work_per_poll_ns", self.host_work_per_poll_ns, SECOND),
            // A share of each second's real-time time, as --tenant-rt-budget.
            ("tenant_rt_budget_ns", self.tenant_rt_budget_ns, SECOND),
        ];
        for (key, v, max) in costs {
            if let Some(v) = v {
                limits::duration(key, v, 0, max)?;
            }
        }
        for (key, v) in [
            ("wake_stay_share", self.wake_stay_share),
            ("wake_preempt_share", self.wake_preempt_share),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                    return Err(format!("{key} = {v} is out of range: give a share, 0 .. 1"));
                }
            }
        }
        Ok(())
    }
}

impl ontime_core::export::TextReport for Calibration {
    fn text(&self) -> String {
        use ontime_core::duration::format_ns;
        let f = |v: Option<u64>| v.map_or("not fitted".into(), format_ns);
        let mut s = format!("ontime sim calibrate: from {}\n", self.from);
        s += &format!(
            "  host noise (send lag of {} sends in {} quiet run(s)): {}\n",
            self.noise_samples,
            self.quiet_runs.len(),
            match &self.host_noise {
                Some(q) => format!(
                    "p50 {} p99 {} max {}",
                    format_ns(q.at(0.5)),
                    format_ns(q.at(0.99)),
                    format_ns(q.at(1.0))
                ),
                None => "not fitted".into(),
            }
        );
        s += &format!(
            "  host stalls (send lags above {}): {}\n",
            ontime_core::duration::format_ns(self.stall_threshold_ns),
            match &self.host_stalls {
                Some(st) => format!(
                    "{:.2} per second, p50 {} max {}",
                    st.per_second,
                    ontime_core::duration::format_ns(st.durations.at(0.5)),
                    ontime_core::duration::format_ns(st.durations.at(1.0))
                ),
                None => "none seen".into(),
            }
        );
        s += &format!(
            "  tenants' start offsets: {}\n",
            match &self.start_offsets {
                Some(q) => format!(
                    "phase of the poll spacing p50 {:.2}, p90 {:.2}",
                    q.at(0.5) as f64 / PHASE_SCALE as f64,
                    q.at(0.9) as f64 / PHASE_SCALE as f64
                ),
                None => "not seen (single-tenant runs only): drawn uniformly over the period".into(),
            }
        );
        s += &format!(
            "  CPU per poll beyond the work asked: {} (median of {})\n",
            f(self.cpu_per_poll_overhead_ns),
            self.cpu_per_poll_samples
        );
        s += &format!(
            "  host I/O path CPU per packet: {} (median of {} runs)\n",
            f(self.io_cost_per_packet_ns),
            self.io_cost_samples
        );
        s += &format!(
            "  host CPU per poll outside tenants and I/O path: {} (slope over {} unloaded runs)\n",
            f(self.host_work_per_poll_ns),
            self.host_work_samples
        );
        s += &format!(
            "  waking threads kept on their busy last CPU while another idled: {}\n",
            match self.wake_stay_share {
                Some(v) => format!("{:.0}% of {} such wake-ups", 100.0 * v, self.wake_stay_samples),
                None => "not measured".into(),
            }
        );
        s += &format!(
            "  waking threads queued behind a busy CPU that preempted it at once (not waited): {}\n",
            match self.wake_preempt_share {
                Some(v) => format!("{:.0}% of {} such wake-ups", 100.0 * v, self.wake_preempt_samples),
                None => "not measured".into(),
            }
        );
        s += &format!(
            "  tenants' real-time budget (RT group scheduling): {}\n",
            match self.tenant_rt_budget_ns {
                Some(b) => format!("{} per second between them", format_ns(b)),
                None => "none recorded".into(),
            }
        );
        for n in &self.notes {
            s += &format!("  note: {n}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 40 us per poll over 0.05 CPUs of background, each run off by up to
    /// a tick of /proc/stat either way (0.01 s of 15 s per CPU): the slope
    /// recovers the per-poll cost where each run's ratio would not (at
    /// 100 polls/s the background alone is 500 us per poll).
    #[test]
    fn host_work_is_the_slope_against_the_poll_rate() {
        let mut points = Vec::new();
        for (i, rate) in [100.0, 200.0, 400.0, 600.0, 800.0, 1200.0].iter().enumerate() {
            for k in [-1.0, 0.0, 1.0] {
                let noise = k * 0.01 / 15.0 * 2.0 * if i % 2 == 0 { 1.0 } else { -1.0 };
                points.push((*rate, 0.05 + rate * 40e-6 + noise));
            }
        }
        let w = fit_host_work(&points).expect("fitted");
        assert!((w.per_poll_ns - 40_000.0).abs() < 500.0, "{w:?}");
        assert!((w.background_cpus - 0.05).abs() < 0.005, "{w:?}");
        // One rate only: the total over the polls.
        let one = fit_host_work(&[(500.0, 0.02), (500.0, 0.03)]).expect("fitted");
        assert_eq!(one.per_poll_ns.round(), 50_000.0);
        // Untracked CPU falling with the polls is no cost per poll.
        let falling = fit_host_work(&[(100.0, 0.05), (1000.0, 0.01)]).expect("fitted");
        assert_eq!(falling.per_poll_ns, 0.0);
        assert!(fit_host_work(&[]).is_none());
    }

    /// A calibration is checked as it is read: negative rates, shares of 2
    /// or -1, costs of u64::MAX and decreasing quantiles were accepted and
    /// made `plan` run for minutes. Each is refused as bad input naming
    /// the file, the key and the range.
    #[test]
    fn a_calibration_out_of_range_is_refused_as_it_is_read() {
        let committed = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/results/sim/calibration-clock.json"
        ));
        let good: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cal.json");
        let cases: [(&str, serde_json::Value, &str); 7] = [
            (
                "/host_stalls/per_second",
                serde_json::json!(-3.0),
                "host_stalls.per_second",
            ),
            ("/wake_stay_share", serde_json::json!(2.0), "wake_stay_share = 2"),
            (
                "/wake_preempt_share",
                serde_json::json!(-1.0),
                "wake_preempt_share = -1",
            ),
            (
                "/io_cost_per_packet_ns",
                serde_json::json!(u64::MAX),
                "io_cost_per_packet_ns",
            ),
            (
                "/cpu_per_poll_overhead_ns",
                serde_json::json!(u64::MAX),
                "cpu_per_poll_overhead_ns",
            ),
            ("/host_noise/points/1/1", serde_json::json!(1), "does not decrease"),
            ("/host_stalls/durations/points/0/0", serde_json::json!(1.5), "0 .. 1"),
        ];
        for (at, bad, says) in cases {
            let mut v = good.clone();
            *v.pointer_mut(at)
                .unwrap_or_else(|| panic!("{at} in the committed file")) = bad;
            std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
            let e = read(&path).unwrap_err();
            assert!(e.downcast_ref::<ontime_core::BadInput>().is_some(), "{at}: {e:#}");
            let msg = format!("{e:#}");
            assert!(msg.contains("cal.json") && msg.contains(says), "{at}: {msg}");
        }
        std::fs::write(&path, serde_json::to_string(&good).unwrap()).unwrap();
        assert!(read(&path).is_ok());
    }

    /// `--host-noise` keeps the committed calibration's noise and nothing
    /// the lab's host alone has; a calibration without noise is refused.
    #[test]
    fn host_noise_only_keeps_the_noise_alone() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/results/sim/calibration-clock.json"
        ));
        let full = read(path).expect("committed calibration");
        assert!(full.host_stalls.is_some() && full.host_work_per_poll_ns.is_some());
        let noise = full.clone().host_noise_only(path).expect("has noise");
        assert_eq!(noise.host_noise, full.host_noise);
        assert_eq!(noise.host_stalls, None);
        assert_eq!(noise.cpu_per_poll_overhead_ns, None);
        assert_eq!(noise.io_cost_per_packet_ns, None);
        assert_eq!(noise.host_work_per_poll_ns, None);
        assert_eq!(noise.wakeups(), MeasuredWakeups::default());
        assert_eq!(noise.tenant_rt_budget_ns, None);
        let silent = Calibration {
            host_noise: None,
            ..full
        };
        let e = silent.host_noise_only(path).unwrap_err();
        assert!(format!("{e:#}").contains("has no host noise"), "{e:#}");
    }
}
