//! `ontime cyclic`: the periodic wake-up probe of document 001.
//!
//! Owns the probe loop ([`probe_loop`]), its per-thread statistics, the run
//! of several probe threads with their scheduling settings ([`run`]), and
//! the cyclictest-compatible histogram text ([`CyclicResult::cyclictest_histogram`]).
//!
//! Each thread plans wake-up k at `start + k * interval` and sleeps with
//! `clock_nanosleep(TIMER_ABSTIME)`. Latency = actual - planned wake-up.
//! Where cyclictest silently skips periods it overran, this probe records
//! every planned wake-up it missed as a sample with its full lateness and
//! counts it as an overrun. Does not own load generation (ontime-load).

use anyhow::Result;
use ontime_core::duration::format_ns;
use ontime_core::late::{ProbeEvent, WorstEvents};
use ontime_core::manifest::Manifest;
use ontime_core::rt::{Policy, ThreadSettings};
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_core::time::{Clock, SystemClock};
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// What one probe thread measured.
#[derive(Debug, Default)]
pub struct ThreadStats {
    /// Every planned wake-up, overrun periods included.
    pub latency: LatencyHistogram,
    /// Only wake-ups that happened (what cyclictest reports): how late the
    /// thread ran, apart from how many periods it lost.
    pub woken: LatencyHistogram,
    /// 1-us bins of `woken`, for comparison with cyclictest's histogram.
    pub woken_bins: Vec<u64>,
    /// Planned wake-ups that had already passed when the thread woke.
    pub overruns: u64,
    /// 1-us bins for the cyclictest histogram; the last counts overflows.
    pub bins: Vec<u64>,
    /// Wake-up numbers (0-based) whose latency overflowed the bins.
    pub overflow_at: Vec<u64>,
    pub sum_ns: u128,
    /// Per-interval histograms handed to the collector (`--hlog`).
    pub split: Option<IntervalSplit>,
    /// This probe thread's id, and its worst wake-ups kept for
    /// explanation (`--explain`; capacity 0 keeps none).
    pub tid: u32,
    pub worst: WorstEvents,
    /// Own work injected at known times (the first thread's, when the
    /// options ask for it): ground truth for the attribution.
    pub own_work: Option<ontime_core::work::WorkBursts>,
}

/// One interval's samples of one thread, on their way to the histogram log
/// and the late log.
pub struct IntervalPart {
    pub thread: usize,
    /// Interval number: planned wake-up time since start / interval length.
    pub index: u64,
    pub buffers: PartBuffers,
}

/// What a thread fills for one interval, handed back and forth between the
/// thread and the collector so that neither allocates in steady state.
pub struct PartBuffers {
    pub latency: Box<LatencyHistogram>,
    /// The interval's wake-ups over the late log's threshold, the worst
    /// kept (capacity 0 without a late log).
    pub late: WorstEvents,
}

impl PartBuffers {
    fn new(late_capacity: usize) -> PartBuffers {
        PartBuffers {
            latency: Box::default(),
            late: WorstEvents::new(late_capacity),
        }
    }
}

/// Splits a thread's samples into fixed intervals of planned time and hands
/// each finished one to the collector, taking recycled buffers back, so
/// the probe loop never allocates in steady state.
pub struct IntervalSplit {
    thread: usize,
    wake_interval_ns: u64,
    every_ns: u64,
    index: u64,
    /// Wake-ups later than this go to the late log (u64::MAX: none).
    late_over_ns: u64,
    late_capacity: usize,
    current: PartBuffers,
    out: std::sync::mpsc::Sender<IntervalPart>,
    recycled: std::sync::mpsc::Receiver<PartBuffers>,
}

impl std::fmt::Debug for IntervalSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IntervalSplit(thread {}, interval {})", self.thread, self.index)
    }
}

impl IntervalSplit {
    #[inline]
    fn record(&mut self, cycle: u64, event: ProbeEvent) {
        let index = cycle.saturating_mul(self.wake_interval_ns) / self.every_ns;
        if index != self.index {
            self.ship();
            self.index = index;
        }
        let lat_ns = event.lateness_ns();
        self.current.latency.record(lat_ns);
        if lat_ns > self.late_over_ns {
            self.current.late.offer(event);
        }
    }

    fn ship(&mut self) {
        if self.current.latency.is_empty() {
            return;
        }
        let cap = self.late_capacity;
        let fresh = self.recycled.try_recv().unwrap_or_else(|_| PartBuffers::new(cap));
        let full = std::mem::replace(&mut self.current, fresh);
        let _ = self.out.send(IntervalPart {
            thread: self.thread,
            index: self.index,
            buffers: full,
        });
    }
}

const MAX_OVERFLOW_RECORDS: usize = 1000;

impl ThreadStats {
    pub fn new(histogram_us: usize) -> ThreadStats {
        ThreadStats {
            bins: vec![0; histogram_us],
            woken_bins: vec![0; histogram_us],
            overflow_at: Vec::with_capacity(MAX_OVERFLOW_RECORDS),
            ..Default::default()
        }
    }

    #[inline]
    fn record(&mut self, cycle: u64, planned: MonoNs, lat_ns: u64) {
        let event = ProbeEvent {
            tid: self.tid,
            planned_ns: planned.0,
            actual_ns: planned.0 + lat_ns,
            sent_ns: None,
            gateway: None,
            received_ns: None,
        };
        if let Some(s) = self.split.as_mut() {
            s.record(cycle, event);
        }
        self.worst.offer(event);
        self.latency.record(lat_ns);
        self.sum_ns += lat_ns as u128;
        if !self.bins.is_empty() {
            let us = (lat_ns / 1000) as usize;
            if us < self.bins.len() {
                self.bins[us] += 1;
            } else if self.overflow_at.len() < MAX_OVERFLOW_RECORDS {
                self.overflow_at.push(cycle);
            }
        }
    }
}

/// Live counters a thread publishes for progress display.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub cycles: AtomicU64,
    pub max_ns: AtomicU64,
    pub overruns: AtomicU64,
}

/// When a probe thread wakes: `start + k * interval_ns`, for `loops`
/// wake-ups or until `end`, whichever comes first.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    pub start: MonoNs,
    pub interval_ns: u64,
    pub loops: Option<u64>,
    pub end: Option<MonoNs>,
}

/// The probe loop on any clock: wakes on `plan` until it is done or `stop`
/// is set.
pub fn probe_loop<C: Clock>(
    clock: &C,
    plan: Schedule,
    stop: &AtomicBool,
    stats: &mut ThreadStats,
    live: &LiveCounters,
) {
    let Schedule {
        start,
        interval_ns,
        loops,
        end,
    } = plan;
    let mut k: u64 = 0;
    loop {
        if loops.is_some_and(|l| k >= l) || stop.load(Ordering::Relaxed) {
            return;
        }
        let planned = start.add_ns(k * interval_ns);
        if end.is_some_and(|e| planned >= e) {
            return;
        }
        clock.sleep_until(planned);
        let now = clock.now();
        let lat = now.since(planned);
        stats.record(k, planned, lat);
        stats.woken.record(lat);
        if let Some(b) = stats.woken_bins.get_mut((lat / 1000) as usize) {
            *b += 1;
        }
        k += 1;
        // Every later wake-up already due was missed: a sample each, with the
        // lateness it has now, never skipped.
        loop {
            let next = start.add_ns(k * interval_ns);
            if next > now || loops.is_some_and(|l| k >= l) || end.is_some_and(|e| next >= e) {
                break;
            }
            stats.record(k, next, now.since(next));
            stats.overruns += 1;
            k += 1;
        }
        // After the wake-up is recorded: the burst delays the ones after.
        if let Some(w) = stats.own_work.as_mut() {
            w.burn_if_due(now);
        }
        live.cycles.store(k, Ordering::Relaxed);
        live.overruns.store(stats.overruns, Ordering::Relaxed);
        live.max_ns.store(stats.latency.max(), Ordering::Relaxed);
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CyclicOptions {
    pub threads: usize,
    /// CPUs; thread i is pinned to `affinity[i % len]`. Empty: unpinned.
    pub affinity: Vec<usize>,
    pub interval_ns: u64,
    /// Added to the interval of each further thread (cyclictest -d).
    pub distance_ns: u64,
    pub policy: Policy,
    pub mlockall: bool,
    pub loops: Option<u64>,
    pub duration_ns: Option<u64>,
    /// Number of 1-us histogram bins (cyclictest -h); 0 = none.
    pub histogram_us: usize,
    pub threshold_ns: Option<u64>,
    /// Hold /dev/cpu_dma_latency at 0 during the run, as cyclictest does.
    pub dma_latency: bool,
    /// Label of the load running meanwhile, for the record.
    pub load: Option<String>,
    /// HdrHistogram interval log of every planned wake-up's latency (tag
    /// `latency`), one histogram per `hlog_interval_ns` of planned time.
    #[serde(default)]
    pub hlog: Option<std::path::PathBuf>,
    #[serde(default = "one_second")]
    pub hlog_interval_ns: u64,
    /// A JSON line per `hlog_interval_ns` of planned time with the
    /// interval's wake-ups later than `late_log_over_ns`, as it goes
    /// (`ontime_core::late::LateInterval`): what a fleet agent follows. A
    /// FIFO works; a reader that goes away ends the probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_log: Option<std::path::PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_log_over_ns: Option<u64>,
    /// Wake-ups kept per thread for explanation, the worst ones (0: none),
    /// and what counts as late [default: the run's p99.9].
    #[serde(default)]
    pub keep_worst: usize,
    #[serde(default)]
    pub explain_over: Option<u64>,
    /// Bursts of the first thread's own work at known times (a lab
    /// scenario's `[[inject]] cause = "own-work"`); their windows are the
    /// result's `injected_work`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_work: Option<ontime_core::work::InjectedWork>,
}

fn one_second() -> u64 {
    1_000_000_000
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ThreadResult {
    pub thread: usize,
    pub tid: i32,
    pub cpu: Option<usize>,
    pub interval_ns: u64,
    pub overruns: u64,
    pub avg_ns: Option<u64>,
    pub latency: Summary,
    pub woken: Summary,
    #[serde(skip)]
    pub stats: ThreadStats,
}

impl ThreadResult {
    fn bins(&self, woken: bool) -> &[u64] {
        if woken {
            &self.stats.woken_bins
        } else {
            &self.stats.bins
        }
    }

    fn summary_of(&self, woken: bool) -> &Summary {
        if woken {
            &self.woken
        } else {
            &self.latency
        }
    }
}

/// The result of a cyclic run; see `docs/cyclic-json.md`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CyclicResult {
    pub manifest: Manifest,
    pub options: CyclicOptions,
    pub interrupted: bool,
    /// Time covered by planned wake-ups (the longest thread's count x its
    /// interval): the requested length, or less when interrupted.
    #[serde(default)]
    pub duration_ns: u64,
    pub overruns: u64,
    /// All threads together: every planned wake-up.
    pub latency: Summary,
    /// All threads together: wake-ups that happened (overruns excluded).
    pub woken: Summary,
    /// Every planned wake-up of all threads in log-spaced bins (for plots).
    pub histogram_log: Vec<ontime_core::stats::LogBin>,
    pub threads: Vec<ThreadResult>,
    pub warnings: Vec<String>,
    /// Why the late wake-ups were late (`--explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<ontime_explain::RunExplanation>,
    /// The late wake-ups (`--explain`, `--keep-late`): the worst kept, each
    /// with its thread, planned and actual time; what `ontime explain
    /// RESULT RECORDING` explains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_events: Option<ontime_core::late::LateSet>,
    /// When the injected own work ran (`options.own_work`): [start, end)
    /// on CLOCK_MONOTONIC, as the thread actually spun.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected_work: Vec<(u64, u64)>,
}

/// Runs the probe threads to the end (or until `stop`), with `on_tick`
/// called about once a second with the live counters.
pub fn run(
    opts: CyclicOptions,
    stop: Arc<AtomicBool>,
    manifest: Manifest,
    on_tick: &mut dyn FnMut(&[Arc<LiveCounters>]),
) -> Result<CyclicResult> {
    anyhow::ensure!(opts.threads >= 1, "at least one thread is needed (-t)");
    anyhow::ensure!(opts.interval_ns >= 1_000, "the interval must be at least 1us");
    anyhow::ensure!(
        opts.loops.is_some() || opts.duration_ns.is_some(),
        "give a duration (-D) or a loop count (-l)"
    );
    let mut warnings = Vec::new();
    let _dma = if opts.dma_latency {
        match ontime_core::rt::DmaLatencyGuard::hold(0) {
            Ok(g) => Some(g),
            Err(e) => {
                warnings.push(format!("{e:#}: deep idle states may add latency"));
                None
            }
        }
    } else {
        None
    };
    if opts.mlockall {
        ontime_core::rt::mlockall()?;
    }
    let stopper = stop.clone();
    let mut group = ontime_core::rt::ThreadGroup::new(move || stopper.store(true, Ordering::Relaxed));
    let mut lives = Vec::new();
    // Each thread waits for the common start (and its share of the
    // histogram log) until every thread runs with its settings: a start
    // planned before the threads exist (a loaded guest takes a while to
    // make them) would count their first wake-ups late.
    let mut go = Vec::with_capacity(opts.threads);
    let mut intervals = Vec::with_capacity(opts.threads);
    for t in 0..opts.threads {
        let live = Arc::new(LiveCounters::default());
        lives.push(live.clone());
        let cpu = (!opts.affinity.is_empty()).then(|| opts.affinity[t % opts.affinity.len()]);
        let settings = ThreadSettings {
            policy: opts.policy,
            affinity: cpu.into_iter().collect(),
            timer_slack_ns: Some(1),
        };
        let interval = opts.interval_ns + t as u64 * opts.distance_ns;
        intervals.push(interval);
        let (loops, hist_us, keep, stop) = (opts.loops, opts.histogram_us, opts.keep_worst, stop.clone());
        let own_work = opts.own_work.filter(|_| t == 0);
        let duration_ns = opts.duration_ns;
        let for_ns = opts
            .duration_ns
            .unwrap_or_else(|| opts.loops.unwrap_or(0).saturating_mul(interval));
        let (go_tx, go_rx) = std::sync::mpsc::channel::<(MonoNs, Option<IntervalSplit>)>();
        go.push(go_tx);
        group.spawn(&format!("cyclic{t}"), settings, move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            // The group's stop (a thread that failed its settings, the
            // ready wait timing out) ends the wait too.
            let (start, split) = loop {
                match go_rx.recv_timeout(std::time::Duration::from_millis(50)) {
                    Ok(go) => break go,
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !stop.load(Ordering::Relaxed) => {}
                    Err(_) => anyhow::bail!("the probe stopped before its threads started"),
                }
            };
            let mut stats = ThreadStats::new(hist_us);
            stats.tid = tid as u32;
            stats.worst = WorstEvents::new(keep);
            stats.own_work = own_work.map(|w| ontime_core::work::WorkBursts::new(w, start, for_ns));
            let plan = Schedule {
                start,
                interval_ns: interval,
                loops,
                end: duration_ns.map(|d| start.add_ns(d)),
            };
            stats.split = split;
            probe_loop(&SystemClock, plan, &stop, &mut stats, &live);
            if let Some(mut s) = stats.split.take() {
                s.ship();
            }
            Ok(ThreadResult {
                thread: t,
                tid,
                cpu,
                interval_ns: interval,
                overruns: stats.overruns,
                avg_ns: (!stats.latency.is_empty()).then(|| (stats.sum_ns / stats.latency.len() as u128) as u64),
                latency: stats.latency.summary(None),
                woken: stats.woken.summary(None),
                stats,
            })
        })?;
    }
    group
        .await_ready(std::time::Duration::from_secs(5))
        .map_err(anyhow::Error::msg)?;
    // Opened before the start is set: a FIFO's open waits for its reader.
    let late_log = open_late_log(&opts)?;
    let start = MonoNs::now().add_ns(100_000_000);
    let start_wall = std::time::SystemTime::now() + std::time::Duration::from_millis(100);
    let mut collector = IntervalCollector::create(&opts, start, start_wall, late_log)?;
    for (t, (tx, interval)) in go.into_iter().zip(intervals).enumerate() {
        let split = collector.as_mut().map(|c| c.split_for(t, interval));
        // A thread that already failed has said why (joined below).
        let _ = tx.send((start, split));
    }
    while !group.all_finished() {
        std::thread::sleep(std::time::Duration::from_millis(200));
        on_tick(&lives);
        if let Some(c) = collector.as_mut() {
            c.drain(false)?;
        }
    }
    let mut threads = Vec::new();
    let (mut all, mut woken) = (LatencyHistogram::new(), LatencyHistogram::new());
    let mut worst = WorstEvents::new(opts.keep_worst.saturating_mul(opts.threads));
    for r in group.join() {
        let mut r = r?;
        worst.add(&std::mem::take(&mut r.stats.worst));
        all.add(&r.stats.latency);
        woken.add(&r.stats.woken);
        r.latency = r.stats.latency.summary(opts.threshold_ns);
        r.woken = r.stats.woken.summary(opts.threshold_ns);
        threads.push(r);
    }
    if let Some(c) = collector.as_mut() {
        c.drain(true)?;
    }
    let mut manifest = manifest;
    manifest.finish();
    let injected_work = threads
        .iter()
        .filter_map(|t| t.stats.own_work.as_ref())
        .flat_map(|w| w.windows().iter().copied())
        .collect();
    Ok(CyclicResult {
        interrupted: stop.load(Ordering::Relaxed),
        duration_ns: threads
            .iter()
            .map(|t| t.stats.latency.len().saturating_mul(t.interval_ns))
            .max()
            .unwrap_or(0),
        overruns: threads.iter().map(|t| t.overruns).sum(),
        latency: all.summary(opts.threshold_ns),
        woken: woken.summary(opts.threshold_ns),
        histogram_log: all.log_bins(),
        threads,
        warnings,
        explanation: None,
        late_events: (opts.keep_worst > 0).then(|| ontime_core::late::LateSet::choose(worst, &all, opts.explain_over)),
        injected_work,
        manifest,
        options: opts,
    })
}

/// The late log's file (`--late-log`), if asked for.
fn open_late_log(opts: &CyclicOptions) -> Result<Option<std::fs::File>> {
    let Some(p) = &opts.late_log else { return Ok(None) };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(p)
        .map_err(|e| anyhow::anyhow!("cannot write the late log {}: {e}", p.display()))?;
    Ok(Some(f))
}

/// An interval's samples of every thread, merged.
#[derive(Default)]
struct IntervalTotal {
    latency: LatencyHistogram,
    late: u64,
    events: Vec<ProbeEvent>,
}

/// Gathers the threads' intervals and writes each to the histogram log
/// and the late log once every thread has moved past it (or at the end).
struct IntervalCollector {
    hlog: Option<ontime_core::hlog::HlogFile>,
    /// The late log, and its threshold.
    late_log: Option<(std::io::BufWriter<std::fs::File>, u64)>,
    start: MonoNs,
    every_ns: u64,
    rx: std::sync::mpsc::Receiver<IntervalPart>,
    tx: std::sync::mpsc::Sender<IntervalPart>,
    recycle: Vec<std::sync::mpsc::Sender<PartBuffers>>,
    intervals: ontime_core::hlog::IntervalMerge<IntervalTotal>,
}

impl IntervalCollector {
    /// None when neither log is asked for; `late_log`: the late log's file,
    /// opened by [`open_late_log`].
    fn create(
        opts: &CyclicOptions,
        start: MonoNs,
        start_wall: std::time::SystemTime,
        late_log: Option<std::fs::File>,
    ) -> Result<Option<Self>> {
        if opts.hlog.is_none() && opts.late_log.is_none() {
            return Ok(None);
        }
        let every_ns = opts.hlog_interval_ns;
        anyhow::ensure!(
            every_ns >= 10_000_000,
            "the histogram log interval must be at least 10ms"
        );
        let hlog = match &opts.hlog {
            Some(p) => Some(ontime_core::hlog::HlogFile::create(
                p,
                "ontime cyclic: latency (every planned wake-up)",
                start_wall,
            )?),
            None => None,
        };
        let late_log = match late_log {
            Some(f) => {
                let over = opts
                    .late_log_over_ns
                    .ok_or_else(|| anyhow::anyhow!("a late log needs its threshold (--late-over)"))?;
                Some((std::io::BufWriter::new(f), over))
            }
            None => None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        Ok(Some(IntervalCollector {
            hlog,
            late_log,
            start,
            every_ns,
            rx,
            tx,
            recycle: Vec::with_capacity(opts.threads),
            intervals: ontime_core::hlog::IntervalMerge::new(opts.threads),
        }))
    }

    /// The split for thread `t`, with two spare buffers so that it never
    /// allocates while the collector keeps up.
    fn split_for(&mut self, t: usize, wake_interval_ns: u64) -> IntervalSplit {
        let (late_over_ns, late_capacity) = match &self.late_log {
            Some((_, over)) => (*over, ontime_core::late::LATE_LOG_PER_THREAD),
            None => (u64::MAX, 0),
        };
        let (back_tx, back_rx) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let _ = back_tx.send(PartBuffers::new(late_capacity));
        }
        self.recycle.push(back_tx);
        IntervalSplit {
            thread: t,
            wake_interval_ns,
            every_ns: self.every_ns,
            index: 0,
            late_over_ns,
            late_capacity,
            current: PartBuffers::new(late_capacity),
            out: self.tx.clone(),
            recycled: back_rx,
        }
    }

    /// Logs every whole interval; `all`: every interval (the threads are done).
    fn drain(&mut self, all: bool) -> Result<()> {
        while let Ok(part) = self.rx.try_recv() {
            let mut b = part.buffers;
            self.intervals.add(part.thread, part.index, |t| {
                t.latency.add(&b.latency);
                t.late += b.late.drain_into(&mut t.events);
            });
            b.latency.reset();
            let _ = self.recycle[part.thread].send(b);
        }
        let len = std::time::Duration::from_nanos(self.every_ns);
        loop {
            let next = if all {
                self.intervals.pop_any()
            } else {
                self.intervals.pop_whole()
            };
            let Some((i, mut t)) = next else { break };
            if let Some(log) = self.hlog.as_mut() {
                let off = std::time::Duration::from_nanos(i.saturating_mul(self.every_ns));
                log.write("latency", &t.latency, off, len)?;
            }
            if let Some((w, over)) = self.late_log.as_mut() {
                t.events
                    .sort_by_key(|e| (std::cmp::Reverse(e.lateness_ns()), e.planned_ns));
                let from_ns = self.start.0.saturating_add(i.saturating_mul(self.every_ns));
                let line = ontime_core::late::LateInterval {
                    from_ns,
                    to_ns: from_ns.saturating_add(self.every_ns),
                    threshold_ns: *over,
                    late: t.late,
                    events: t.events,
                };
                use std::io::Write;
                // A reader gone (a FIFO's agent) ends the probe.
                serde_json::to_writer(&mut *w, &line)
                    .map_err(std::io::Error::from)
                    .and_then(|_| w.write_all(b"\n"))
                    .map_err(|e| anyhow::anyhow!("writing the late log: {e}"))?;
            }
        }
        if let Some(log) = self.hlog.as_mut() {
            log.flush()?;
        }
        if let Some((w, _)) = self.late_log.as_mut() {
            use std::io::Write;
            w.flush().map_err(|e| anyhow::anyhow!("writing the late log: {e}"))?;
        }
        Ok(())
    }
}

impl ontime_core::export::TextReport for CyclicResult {
    fn text(&self) -> String {
        let o = &self.options;
        let mut s = format!(
            "ontime cyclic: {} thread(s), interval {}, policy {}, load {}{}\n",
            o.threads,
            format_ns(o.interval_ns),
            o.policy,
            o.load.as_deref().unwrap_or("none"),
            if self.interrupted { " (interrupted)" } else { "" }
        );
        s.push_str(&format!("{}  overruns\n", Summary::text_header()));
        for t in &self.threads {
            let label = format!("T{} wake-up", t.thread);
            s.push_str(&format!("{}  {}\n", t.latency.text_row(&label), t.overruns));
            if t.overruns > 0 {
                s.push_str(&format!("{}\n", t.woken.text_row(&format!("T{} woken only", t.thread))));
            }
        }
        if self.threads.len() > 1 {
            s.push_str(&format!(
                "{}  {}\n",
                self.latency.text_row("all wake-up"),
                self.overruns
            ));
        }
        if self.latency.count < 100_000 {
            s.push_str("note: percentiles the sample count cannot support are n/a (p99.999 needs >= 100000 samples)\n");
        }
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }
}

impl CyclicResult {
    /// The histogram in cyclictest's `-h` layout, so its plot scripts work.
    /// Unlike cyclictest, overrun wake-ups are included as samples.
    pub fn cyclictest_histogram(&self) -> String {
        self.histogram_text(false)
    }

    /// The same layout from wake-ups that happened only, counted the way
    /// cyclictest counts (for like-for-like comparisons).
    pub fn cyclictest_histogram_woken(&self) -> String {
        self.histogram_text(true)
    }

    fn histogram_text(&self, woken: bool) -> String {
        let mut s = String::from("# Histogram\n");
        for i in 0..self.options.histogram_us {
            s.push_str(&format!("{i:06}"));
            for (j, t) in self.threads.iter().enumerate() {
                s.push_str(if j == 0 { " " } else { "\t" });
                s.push_str(&format!("{:06}", t.bins(woken)[i]));
            }
            s.push('\n');
        }
        let row = |label: &str, f: &dyn Fn(&ThreadResult) -> String| {
            let cells: Vec<String> = self.threads.iter().map(f).collect();
            format!("# {label}: {}\n", cells.join(" "))
        };
        let in_bins = |t: &ThreadResult| t.bins(woken).iter().sum::<u64>();
        s.push_str(&row("Total", &|t| format!("{:09}", in_bins(t))));
        s.push_str(&row("Min Latencies", &|t| {
            format!("{:05}", t.summary_of(woken).min_ns.unwrap_or(0) / 1000)
        }));
        s.push_str(&row("Avg Latencies", &|t| {
            format!("{:05}", t.summary_of(woken).mean_ns.unwrap_or(0) / 1000)
        }));
        s.push_str(&row("Max Latencies", &|t| {
            format!("{:05}", t.summary_of(woken).max_ns.unwrap_or(0) / 1000)
        }));
        s.push_str(&row("Histogram Overflows", &|t| {
            format!("{:05}", t.summary_of(woken).count - in_bins(t))
        }));
        s.push_str("# Histogram Overflow at cycle number:\n");
        for t in &self.threads {
            s.push_str(&format!("# Thread {}:", t.thread));
            if !woken {
                for c in &t.stats.overflow_at {
                    s.push_str(&format!(" {c:05}"));
                }
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_core::time::FakeClock;

    /// Two threads, 1 ms wake-ups, 1 s log intervals, late over 2 ms: each
    /// interval's line comes once both threads are past it, with its late
    /// wake-ups counted and the worst kept, on the probe's clock.
    #[test]
    fn the_late_log_streams_each_interval_once_every_thread_is_past_it() {
        let dir = std::env::temp_dir().join(format!("ontime-late-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("late.jsonl");
        let opts = CyclicOptions {
            threads: 2,
            affinity: vec![],
            interval_ns: 1_000_000,
            distance_ns: 0,
            policy: Policy::Other,
            mlockall: false,
            loops: Some(3000),
            duration_ns: None,
            histogram_us: 0,
            threshold_ns: None,
            dma_latency: false,
            load: None,
            hlog: None,
            hlog_interval_ns: 1_000_000_000,
            late_log: Some(path.clone()),
            late_log_over_ns: Some(2_000_000),
            keep_worst: 0,
            explain_over: None,
            own_work: None,
        };
        let start = MonoNs(5_000_000_000);
        let file = open_late_log(&opts).unwrap();
        let mut c = IntervalCollector::create(&opts, start, std::time::SystemTime::now(), file)
            .unwrap()
            .unwrap();
        let mut splits = [c.split_for(0, 1_000_000), c.split_for(1, 1_000_000)];
        let wake = |tid: u32, k: u64, late_ms: u64| ProbeEvent {
            tid,
            planned_ns: start.0 + k * 1_000_000,
            actual_ns: start.0 + k * 1_000_000 + late_ms * 1_000_000,
            sent_ns: None,
            gateway: None,
            received_ns: None,
        };
        let lines = |p: &std::path::Path| -> Vec<ontime_core::late::LateInterval> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        // Thread 0 runs into interval 1; thread 1 is still in interval 0.
        for k in 0..1500 {
            let late = if k == 10 || k == 20 { 5 } else { 0 };
            splits[0].record(k, wake(1, k, late));
        }
        for k in 0..500 {
            splits[1].record(k, wake(2, k, if k == 30 { 9 } else { 1 }));
        }
        c.drain(false).unwrap();
        assert!(lines(&path).is_empty(), "thread 1 has not finished interval 0");
        for k in 500..1200 {
            splits[1].record(k, wake(2, k, 0));
        }
        c.drain(false).unwrap();
        let got = lines(&path);
        assert_eq!(got.len(), 1, "{got:?}");
        let first = &got[0];
        assert_eq!((first.from_ns, first.to_ns), (start.0, start.0 + 1_000_000_000));
        assert_eq!((first.threshold_ns, first.late), (2_000_000, 3));
        let worst: Vec<(u32, u64)> = first
            .events
            .iter()
            .map(|e| (e.tid, (e.planned_ns - start.0) / 1_000_000))
            .collect();
        assert_eq!(worst, vec![(2, 30), (1, 10), (1, 20)], "worst first, then the earlier");
        for s in &mut splits {
            s.ship();
        }
        c.drain(true).unwrap();
        assert_eq!(lines(&path).len(), 2, "the rest at the end");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn overrun_periods_are_samples_with_full_lateness() {
        // Interval 1000 ns. Wake-up 2 is 3500 ns late, so wake-ups 3, 4 and 5
        // (planned 3000, 4000, 5000) have passed when the thread runs at 5500.
        let clock = FakeClock::new(0, vec![10, 10, 3500, 10]);
        let mut st = ThreadStats::new(10);
        let stop = AtomicBool::new(false);
        let plan = Schedule {
            start: MonoNs(0),
            interval_ns: 1000,
            loops: Some(8),
            end: None,
        };
        probe_loop(&clock, plan, &stop, &mut st, &LiveCounters::default());
        assert_eq!(st.latency.len(), 8, "every planned wake-up is one sample");
        assert_eq!(st.overruns, 3);
        assert_eq!(st.latency.max(), 3500);
        // 5500 - 3000 = 2500, 5500 - 4000 = 1500, 5500 - 5000 = 500.
        assert_eq!(st.latency.inner().count_at(2500), 1);
        assert_eq!(st.latency.inner().count_at(1500), 1);
        assert_eq!(st.latency.inner().count_at(500), 1);
        assert_eq!(st.bins[3], 1, "3500 ns falls in the 3 us bin");
        assert_eq!(st.woken.len(), 5, "8 planned, 3 overrun: 5 wake-ups happened");
        assert_eq!(st.woken_bins.iter().sum::<u64>(), 5);
    }

    #[test]
    fn stops_at_end_time() {
        let clock = FakeClock::new(0, vec![0]);
        let mut st = ThreadStats::new(0);
        let stop = AtomicBool::new(false);
        let plan = Schedule {
            start: MonoNs(0),
            interval_ns: 1000,
            loops: None,
            end: Some(MonoNs(10_000)),
        };
        probe_loop(&clock, plan, &stop, &mut st, &LiveCounters::default());
        assert_eq!(st.latency.len(), 10);
    }
}

/// One wake-up probe run, whole: what `ontime cyclic` runs, whether its
/// flags built it or the lab wrote it for a tenant (`ontime probe
/// SPEC.json`); every range is checked in [`CyclicProbe::validate`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CyclicProbe {
    pub options: CyclicOptions,
    /// A stress-ng load beside the probe (`--load`), and its workers.
    pub load: Option<String>,
    pub load_workers: usize,
    /// Where the cyclictest-layout histograms go (of every planned
    /// wake-up, and of those that woke).
    pub histfile: Option<std::path::PathBuf>,
    pub histfile_woken: Option<std::path::PathBuf>,
    pub result: Option<std::path::PathBuf>,
    /// Where the injected own work's windows go, as the ground truth's
    /// `Injections` (`inject-i.json` in a lab run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_work_result: Option<std::path::PathBuf>,
}

impl CyclicProbe {
    /// Every range of a wake-up probe, declared once (named by the
    /// cyclictest flag that sets it).
    pub fn validate(&self) -> Result<(), String> {
        use ontime_core::limits;
        let o = &self.options;
        if o.loops.is_none() && o.duration_ns.is_none() {
            return Err("give a duration (-D 60s) or a loop count (-l 100000)".into());
        }
        limits::count("-t", o.threads as u64, 1, limits::MAX_THREADS)?;
        limits::kept_events("--explain-max", o.keep_worst, o.threads)?;
        limits::duration("-i", o.interval_ns, limits::MIN_INTERVAL_NS, limits::MAX_DURATION_NS)?;
        limits::duration("-d", o.distance_ns, 0, limits::MAX_DURATION_NS)?;
        limits::count("-h", o.histogram_us as u64, 0, limits::MAX_HISTOGRAM_BINS)?;
        limits::duration(
            "--hlog-interval",
            o.hlog_interval_ns,
            10_000_000,
            limits::MAX_DURATION_NS,
        )?;
        if let Some(l) = o.loops {
            limits::count("-l", l, 1, limits::MAX_DURATION_NS / limits::MIN_INTERVAL_NS)?;
        }
        if let Some(d) = o.duration_ns {
            limits::duration("-D", d, limits::MIN_DURATION_NS, limits::MAX_DURATION_NS)?;
        }
        let online = limits::online_cpus();
        if let Some(bad) = o.affinity.iter().find(|&&c| c >= online) {
            return Err(format!("CPU {bad} is not online (this host has {online})"));
        }
        // stress-ng starts this many workers per stressor of the load.
        limits::count("--load-workers", self.load_workers as u64, 1, limits::MAX_THREADS)?;
        match (&o.late_log, o.late_log_over_ns) {
            (Some(_), None) => return Err("a late log needs its threshold (--late-over)".into()),
            (None, Some(_)) => return Err("--late-over goes with --late-log".into()),
            (Some(_), Some(over)) => {
                limits::duration("--late-over", over, 1, limits::MAX_DURATION_NS)?;
            }
            (None, None) => {}
        }
        if (self.histfile.is_some() || self.histfile_woken.is_some()) && o.histogram_us == 0 {
            return Err("a histogram file needs histogram bins (-h)".into());
        }
        Ok(())
    }

    /// How long the run lasts, planned.
    pub fn expected_ns(&self) -> u64 {
        let o = &self.options;
        o.duration_ns.unwrap_or_else(|| {
            o.loops
                .unwrap_or(0)
                .saturating_mul(o.interval_ns + o.distance_ns * o.threads as u64)
        })
    }
}
