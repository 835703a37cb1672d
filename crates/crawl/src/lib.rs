//! `ontime crawl`: the fixed-period crawler of document 000.
//!
//! Owns the crawl plan (gateways, points split into streams of N points,
//! phases), the k vCPU threads that poll on that plan ([`engine`]), the
//! collection of their measurements into totals and HdrHistogram interval
//! logs, the optional per-poll records and SQLite store ([`sink`]), and the
//! crawl result ([`CrawlResult`], its JSON schema in `docs/crawl-json.md`).
//!
//! Does not own the gateway (see `ontime-gateway`) or any presentation
//! beyond the plain-text summary.

pub mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod request;
pub mod sink;
/// The per-poll work model, shared with the simulator (ontime-core).
pub use ontime_core::work;

use anyhow::Result;
use config::{CrawlConfig, Phase};
use engine::{EngineSetup, Report, StopFlags, Stream};
use metrics::{Metrics, Outcomes};
use ontime_core::duration::format_ns;
use ontime_core::hlog::{HlogFile, IntervalMerge};
use ontime_core::manifest::Manifest;
use ontime_core::rt::ThreadSettings;
use ontime_core::stats::Summary;
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// How to run a crawl (as opposed to what to crawl).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunOptions {
    /// vCPU threads that do all the crawl's work.
    pub vcpus: usize,
    pub duration_ns: u64,
    pub thread: ThreadSettings,
    pub mlockall: bool,
    /// Count of samples above this, per metric.
    pub threshold_ns: Option<u64>,
    /// Length of one interval in the histogram log and progress.
    pub report_interval_ns: u64,
    /// CPU time burned per poll (models the crawler's processing).
    pub work: work::WorkModel,
    /// Whether it is burned on the answer or before the request goes out.
    #[serde(default)]
    pub work_at: work::WorkAt,
    /// Resend a poll once when the server closed its connection before any
    /// answer (`--no-resend` turns it off).
    pub resend: bool,
    pub hlog: Option<PathBuf>,
    pub polls_file: Option<PathBuf>,
    pub store: Option<PathBuf>,
    /// Polls each vCPU thread keeps for explanation, the worst by send lag
    /// (0: none), and what counts as late [default: the run's p99.9].
    #[serde(default)]
    pub keep_worst: usize,
    #[serde(default)]
    pub explain_over: Option<u64>,
    /// The path to a gateway stamping on this host's clock, as set up (the
    /// lab's relay delay and controller delay): with it (and `keep_worst`)
    /// each thread also keeps its worst arrivals at the gateway, late by
    /// (gateway receive − planned) − the one-way delay, and its worst
    /// answers, late by (answer back − planned) − the round trip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_nominal: Option<ontime_core::late::PathNominal>,
}

/// Progress, once per report interval.
#[derive(Clone, Debug)]
pub struct Progress {
    pub elapsed_ns: u64,
    pub duration_ns: u64,
    pub outcomes: Outcomes,
    pub send_lag_max_ns: u64,
    pub interval_error_max_ns: u64,
}

/// The result of a crawl; see `docs/crawl-json.md`.
#[derive(Debug, Serialize, Deserialize)]
pub struct CrawlResult {
    pub manifest: Manifest,
    pub config: CrawlConfig,
    pub vcpus: usize,
    pub thread_settings: ThreadSettings,
    /// Mean work set per answered poll.
    pub work_per_poll_ns: u64,
    /// Pareto shape of the per-poll work, when heavy-tailed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_tail: Option<f64>,
    /// Where the work was burned (absent in results before it could be
    /// chosen: on the answer).
    #[serde(default)]
    pub work_at: work::WorkAt,
    pub planned_polls_per_second: f64,
    pub streams: usize,
    /// How long polls were planned for: the requested length, or up to the
    /// stop when interrupted.
    pub duration_ns: u64,
    /// The requested length.
    #[serde(default)]
    pub planned_duration_ns: u64,
    /// True when the run was stopped before its duration (Ctrl-C).
    pub interrupted: bool,
    pub polls: Outcomes,
    pub missed: u64,
    pub send_lag: Summary,
    pub response_time: Summary,
    pub interval_error: Summary,
    /// CPU time of the vCPU threads, and of the whole process.
    pub vcpu_cpu_ns: u64,
    pub process_cpu_ns: u64,
    /// Wall time of the whole crawl (warm-up to the last answer or
    /// timeout): what the CPU shares are taken over.
    #[serde(default)]
    pub wall_ns: u64,
    /// Who stamped the receive times the interval error comes from (per
    /// answered poll): the gateway's kernel, its handler, or unknown.
    #[serde(default)]
    pub receive_stamps: metrics::StampCounts,
    /// What the crawl used, measured (document 000, finding 1).
    #[serde(default)]
    pub resources: Resources,
    /// Per-poll or store records lost because the writer fell behind.
    pub records_dropped: u64,
    pub sink: sink::SinkStats,
    /// Files written during the run (`--hlog`, `--polls`, `--store`) that
    /// stopped at a write error (a full disk), each as "FLAG: cannot write
    /// FILE: ERROR". Such a file holds the run only up to that error;
    /// `ontime crawl` exits 1 after writing this result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete_files: Vec<String>,
    pub warnings: Vec<String>,
    /// Why the late polls were sent late (`--explain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<ontime_explain::RunExplanation>,
    /// The polls sent late (`--explain`, `--keep-late`): the worst kept,
    /// each with its vCPU thread, planned and send time; what
    /// `ontime explain RESULT RECORDING` explains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_events: Option<ontime_core::late::LateSet>,
    /// The requests that arrived late at the gateway (with
    /// `path_nominal`): each event's `actual_ns` is the gateway's receive
    /// stamp less the nominal one-way delay, `sent_ns` when it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_arrivals: Option<ontime_core::late::LateArrivals>,
    /// The requests whose answers came back late (with `path_nominal`, from
    /// a gateway that stamps its answers): each event's `actual_ns` is the
    /// answer's arrival less the nominal round trip, with `sent_ns` and
    /// the gateway's receive and answer stamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_answers: Option<ontime_core::late::LateAnswers>,
}

/// What a crawl used, measured on the run: CPU per poll (document 000's
/// figure 4: CPU linear in rate), network, memory and storage (finding 1:
/// small; 600 kbit/s at 1000 polls/s).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    /// vCPU-thread CPU time per answered poll, the set work included.
    pub cpu_per_poll_ns: Option<u64>,
    pub traffic: metrics::Traffic,
    /// Both directions over the run's length, kbit/s.
    pub net_kbit_per_s: f64,
    /// Peak resident memory of the process (getrusage).
    pub max_rss_bytes: u64,
    /// Storage the process read and wrote (/proc/self/io; None where the
    /// kernel does not account it).
    pub disk_read_bytes: Option<u64>,
    pub disk_write_bytes: Option<u64>,
}

impl Resources {
    fn measure(totals: &Metrics, vcpu_cpu_ns: u64, duration_ns: u64) -> Resources {
        let ok = totals.outcomes.ok;
        // SAFETY: rusage is plain data; getrusage fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid out pointer.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
        };
        let t = totals.traffic;
        Resources {
            cpu_per_poll_ns: (ok > 0).then(|| vcpu_cpu_ns / ok),
            traffic: t,
            net_kbit_per_s: if duration_ns > 0 {
                (t.tx_bytes + t.rx_bytes) as f64 * 8.0 / 1e3 / (duration_ns as f64 / 1e9)
            } else {
                0.0
            },
            max_rss_bytes: (ru.ru_maxrss.max(0) as u64) * 1024,
            disk_read_bytes: field("read_bytes:"),
            disk_write_bytes: field("write_bytes:"),
        }
    }
}

/// Splits every gateway's points into streams of N and lays out phases.
pub fn plan_streams(cfg: &CrawlConfig) -> Vec<Stream> {
    let boot_id = ontime_core::wire::boot_id();
    let per_gw: Vec<Vec<Stream>> = cfg
        .gateways
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            g.requests(cfg.points_per_request)
                .map(|pts| Stream {
                    id: 0,
                    gateway: gi,
                    request: match g.protocol {
                        config::Protocol::Http => request::Request::Http(http::RequestTemplate::new(
                            &g.host_header,
                            &g.building,
                            pts,
                            &boot_id,
                        )),
                        config::Protocol::Modbus { unit, table } => {
                            request::Request::Modbus(request::ModbusRead::new(unit, table.into(), pts))
                        }
                        config::Protocol::Bacnet {
                            object_type, max_apdu, ..
                        } => request::Request::Bacnet(request::BacnetRead::new(object_type.code(), pts, max_apdu)),
                    },
                    period_ns: g.period_ns,
                    phase_ns: 0,
                })
                .collect()
        })
        .collect();
    // Interleave gateways so consecutive phases go to different buildings.
    let mut streams = Vec::new();
    let mut iters: Vec<_> = per_gw.into_iter().map(|v| v.into_iter()).collect();
    loop {
        let mut any = false;
        for it in iters.iter_mut() {
            if let Some(s) = it.next() {
                streams.push(s);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    if cfg.phase == Phase::Spread {
        let mut by_period: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, s) in streams.iter().enumerate() {
            by_period.entry(s.period_ns).or_default().push(i);
        }
        for (period, idx) in by_period {
            let n = idx.len() as u64;
            for (j, i) in idx.into_iter().enumerate() {
                streams[i].phase_ns = period * j as u64 / n;
            }
        }
    }
    for (i, s) in streams.iter_mut().enumerate() {
        s.id = i as u32;
    }
    streams
}

/// Runs a crawl to its end (or until `flags` stop it) and returns the
/// result; `on_progress` is called once per report interval. The stages:
/// streams dealt to the vCPU threads -> threads started with their settings
/// -> pools warmed and one common start -> the sink -> the collector
/// merging each interval -> threads joined -> the result.
pub fn run(
    cfg: CrawlConfig,
    opts: RunOptions,
    flags: Arc<StopFlags>,
    manifest: Manifest,
    on_progress: &mut dyn FnMut(&Progress),
) -> Result<CrawlResult> {
    anyhow::ensure!(opts.vcpus >= 1, "--vcpus must be at least 1");
    anyhow::ensure!(
        opts.report_interval_ns >= 10_000_000,
        "the report interval must be at least 10ms"
    );
    let began = std::time::Instant::now();
    let mut warnings = Vec::new();
    if opts.mlockall {
        ontime_core::rt::mlockall()?;
    }
    // Made before any thread polls: a file that cannot be written fails
    // the crawl now, by name, not after the run.
    let gateway_urls: Vec<String> = cfg.gateways.iter().map(|g| g.url.clone()).collect();
    let sink_files = sink::SinkFiles::open(opts.polls_file.as_deref(), opts.store.as_deref(), &gateway_urls)?;
    let (per_thread, n_streams) = assign_streams(&cfg, opts.vcpus, &mut warnings);
    let k = per_thread.len();
    let mut threads = start_vcpu_threads(&cfg, &opts, &flags, per_thread)?;
    // This thread collects and the sink writes: neither may take CPU time a
    // vCPU thread wants (they may share its CPU or cgroup).
    if let Err(e) = ontime_core::rt::set_idle() {
        warnings.push(format!("collector not at SCHED_IDLE: {e:#}"));
    }
    let align_ns = (cfg.phase == Phase::Clock).then(|| cfg.gateways.iter().map(|g| g.period_ns).max().unwrap_or(1));
    let (start, start_wall) = threads.common_start(align_ns, &mut warnings);
    let sink = Sink::start(sink_files, &mut threads)?;
    let mut collector = Collector::new(&opts, k, start_wall)?;
    let vcpu_cpu_ns = collector.run(&threads.reports, &threads.spares, on_progress);
    let totals = collector.totals;
    let hlog_failure = collector.hlog_failure;

    let mut failures = Vec::new();
    let mut worst = ontime_core::late::WorstEvents::new(opts.keep_worst.saturating_mul(k));
    let on_path_kept = if opts.path_nominal.is_some() {
        opts.keep_worst
    } else {
        0
    };
    let mut worst_arrivals = ontime_core::late::WorstEvents::new(on_path_kept.saturating_mul(k));
    let mut worst_answers = ontime_core::late::WorstEvents::new(on_path_kept.saturating_mul(k));
    for r in threads.group.join() {
        match r {
            Ok(w) => {
                worst.add(&w.send_lag);
                worst_arrivals.add(&w.arrivals);
                worst_answers.add(&w.answers);
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    let late_events =
        (opts.keep_worst > 0).then(|| ontime_core::late::LateSet::choose(worst, &totals.send_lag, opts.explain_over));
    let path = opts.path_nominal.filter(|_| on_path_kept > 0);
    let late_arrivals = path.map(|p| ontime_core::late::LateArrivals {
        nominal_ns: p.one_way_ns,
        set: ontime_core::late::LateSet::choose(worst_arrivals, &totals.arrival_lag, opts.explain_over),
    });
    // A gateway that does not stamp its answers (not ontime's) gives none.
    let late_answers = path
        .filter(|_| !totals.answer_lag.is_empty())
        .map(|path| ontime_core::late::LateAnswers {
            path,
            set: ontime_core::late::LateSet::choose(worst_answers, &totals.answer_lag, opts.explain_over),
        });
    let (sink_stats, mut incomplete_files) = match sink {
        Some(s) => s.finish()?,
        None => (sink::SinkStats::default(), Vec::new()),
    };
    incomplete_files.extend(hlog_failure);
    if !failures.is_empty() {
        anyhow::bail!("crawl failed: {}", failures.join("; "));
    }
    let dropped = threads.records_dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        warnings.push(format!(
            "{dropped} per-poll or store records were lost: the writer fell behind"
        ));
    }
    let mut manifest = manifest;
    manifest.finish();
    let interrupted = flags.stop.load(Ordering::Relaxed) || flags.abort.load(Ordering::Relaxed);
    let stopped_at = flags.stop_requested_ns.load(Ordering::Relaxed);
    let duration_ns = if interrupted && stopped_at > 0 {
        stopped_at.saturating_sub(start.0).min(opts.duration_ns)
    } else {
        opts.duration_ns
    };
    let resources = Resources::measure(&totals, vcpu_cpu_ns, duration_ns);
    Ok(CrawlResult {
        resources,
        receive_stamps: totals.stamps,
        planned_polls_per_second: cfg.polls_per_second(),
        streams: n_streams,
        vcpus: k,
        thread_settings: opts.thread.clone(),
        work_per_poll_ns: opts.work.mean_ns,
        work_tail: opts.work.tail,
        work_at: opts.work_at,
        duration_ns,
        planned_duration_ns: opts.duration_ns,
        interrupted,
        missed: totals.outcomes.missed(),
        send_lag: totals.send_lag.summary(opts.threshold_ns),
        response_time: totals.response_time.summary(opts.threshold_ns),
        interval_error: totals.interval_error.summary(opts.threshold_ns),
        polls: totals.outcomes,
        vcpu_cpu_ns,
        process_cpu_ns: ontime_core::time::clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
        wall_ns: began.elapsed().as_nanos() as u64,
        records_dropped: dropped,
        sink: sink_stats,
        incomplete_files,
        warnings,
        explanation: None,
        late_events,
        late_arrivals,
        late_answers,
        manifest,
        config: cfg,
    })
}

/// Deals the streams round-robin to at most `vcpus` threads (fewer when
/// there are fewer streams, with a warning). Returns them and the count.
fn assign_streams(cfg: &CrawlConfig, vcpus: usize, warnings: &mut Vec<String>) -> (Vec<Vec<Stream>>, usize) {
    let streams = plan_streams(cfg);
    let n_streams = streams.len();
    let k = vcpus.min(n_streams.max(1));
    if k < vcpus {
        warnings.push(format!(
            "only {n_streams} streams: using {k} vCPU threads instead of {vcpus}"
        ));
    }
    let mut per_thread: Vec<Vec<Stream>> = (0..k).map(|_| Vec::new()).collect();
    for s in streams {
        per_thread[s.id as usize % k].push(s);
    }
    (per_thread, n_streams)
}

/// The running vCPU threads and the channels to them.
struct VcpuThreads {
    group: ontime_core::rt::ThreadGroup<engine::KeptPolls>,
    warm: mpsc::Receiver<engine::Warm>,
    starts: Vec<mpsc::Sender<MonoNs>>,
    reports: mpsc::Receiver<Report>,
    /// Per thread: recycled metric sets going back.
    spares: Vec<mpsc::Sender<Box<Metrics>>>,
    poll_records: Vec<rtrb::Consumer<metrics::PollRecord>>,
    store_records: Vec<rtrb::Consumer<metrics::StoreRecord>>,
    records_dropped: Arc<AtomicU64>,
}

/// Starts one engine thread per stream set, each with the run's thread
/// settings, and waits until all run with them.
fn start_vcpu_threads(
    cfg: &CrawlConfig,
    opts: &RunOptions,
    flags: &Arc<StopFlags>,
    per_thread: Vec<Vec<Stream>>,
) -> Result<VcpuThreads> {
    let (warm_tx, warm) = mpsc::channel();
    let (report_tx, reports) = mpsc::channel();
    let aborter = flags.clone();
    let mut t = VcpuThreads {
        group: ontime_core::rt::ThreadGroup::new(move || aborter.abort.store(true, Ordering::Relaxed)),
        warm,
        starts: Vec::new(),
        reports,
        spares: Vec::new(),
        poll_records: Vec::new(),
        store_records: Vec::new(),
        records_dropped: Arc::new(AtomicU64::new(0)),
    };
    for (i, streams) in per_thread.into_iter().enumerate() {
        let (spare_tx, spare_rx) = mpsc::channel();
        // Two spare sets per thread so the steady state never allocates.
        for _ in 0..2 {
            let _ = spare_tx.send(Box::<Metrics>::default());
        }
        t.spares.push(spare_tx);
        let poll_records = opts.polls_file.as_ref().map(|_| {
            let (p, c) = rtrb::RingBuffer::new(1 << 16);
            t.poll_records.push(c);
            p
        });
        let store_records = opts.store.as_ref().map(|_| {
            let (p, c) = rtrb::RingBuffer::new(1 << 18);
            t.store_records.push(c);
            p
        });
        let (start_tx, start) = mpsc::channel();
        t.starts.push(start_tx);
        let setup = EngineSetup {
            thread: i,
            streams,
            gateways: cfg.gateways.iter().map(|g| g.addr).collect(),
            timeout_ns: cfg.timeout_ns,
            max_connections: cfg.max_connections,
            duration_ns: opts.duration_ns,
            warm: warm_tx.clone(),
            start,
            report_interval_ns: opts.report_interval_ns,
            work: opts.work,
            work_at: opts.work_at,
            resend: opts.resend,
            flags: flags.clone(),
            reports: report_tx.clone(),
            spares: spare_rx,
            poll_records,
            store_records,
            records_dropped: t.records_dropped.clone(),
            keep_worst: opts.keep_worst,
            path_nominal: opts.path_nominal,
        };
        t.group.spawn(&format!("crawl-vcpu{i}"), opts.thread.clone(), move || {
            engine::run(setup)
        })?;
    }
    drop(report_tx);
    drop(warm_tx);
    t.group
        .await_ready(Duration::from_secs(5))
        .map_err(anyhow::Error::msg)?;
    Ok(t)
}

impl VcpuThreads {
    /// Waits until every thread has warmed its connection pool (or gave up
    /// waiting), then gives them one start time 20 ms ahead, or with
    /// `align_ns` the first whole multiple of it on CLOCK_MONOTONIC after
    /// that (`phase = "clock"`: every crawler on the host then plans on the
    /// same instants). Returns it on CLOCK_MONOTONIC and the wall clock.
    fn common_start(&self, align_ns: Option<u64>, warnings: &mut Vec<String>) -> (MonoNs, std::time::SystemTime) {
        for _ in 0..self.starts.len() {
            // A thread that failed before warming up sends nothing: do not
            // wait past the warm-up limit for it.
            match self.warm.recv_timeout(Duration::from_secs(5)) {
                Ok(w) if w.connected < w.open => warnings.push(format!(
                    "vCPU thread {}: {} of {} connections were up at the start (the gateway did not answer within 3 s)",
                    w.thread, w.connected, w.open
                )),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        let now = MonoNs::now();
        let earliest = now.0 + 20_000_000;
        let start = match align_ns {
            Some(p) if p > 0 => earliest.div_ceil(p) * p,
            _ => earliest,
        };
        let start_wall = std::time::SystemTime::now() + Duration::from_nanos(start - now.0);
        let start = MonoNs(start);
        for tx in &self.starts {
            let _ = tx.send(start);
        }
        (start, start_wall)
    }
}

/// The thread writing per-poll records and stored values, off the timing
/// path.
struct Sink {
    handle: std::thread::JoinHandle<(sink::SinkStats, Vec<String>)>,
    done: Arc<AtomicBool>,
}

impl Sink {
    /// Starts it on the files made before the run, when there are any.
    fn start(files: sink::SinkFiles, threads: &mut VcpuThreads) -> Result<Option<Sink>> {
        if files.is_empty() {
            return Ok(None);
        }
        let done = Arc::new(AtomicBool::new(false));
        let polls = std::mem::take(&mut threads.poll_records);
        let values = std::mem::take(&mut threads.store_records);
        let flag = done.clone();
        let handle = std::thread::Builder::new()
            .name("crawl-sink".into())
            .spawn(move || sink::run(files, polls, values, flag))?;
        Ok(Some(Sink { handle, done }))
    }

    /// Tells it the threads are done and waits for it to write the rest.
    /// Returns what it wrote and the files it had to give up.
    fn finish(self) -> Result<(sink::SinkStats, Vec<String>)> {
        self.done.store(true, Ordering::Release);
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("the sink thread panicked"))
    }
}

/// Merges the threads' interval reports, in interval order once every
/// thread has passed an interval, into the totals, the histogram log and
/// the progress display.
struct Collector<'o> {
    opts: &'o RunOptions,
    hlog: Option<HlogFile>,
    /// Why the histogram log stopped being written (a full disk), naming
    /// the file; the crawl goes on, and its result says the log is cut.
    hlog_failure: Option<String>,
    intervals: IntervalMerge<Metrics>,
    threads: usize,
    totals: Metrics,
}

impl<'o> Collector<'o> {
    fn new(opts: &'o RunOptions, threads: usize, start_wall: std::time::SystemTime) -> Result<Self> {
        let hlog = match &opts.hlog {
            Some(p) => Some(HlogFile::create(
                p,
                "ontime crawl: send_lag, response_time, interval_error",
                start_wall,
            )?),
            None => None,
        };
        Ok(Collector {
            opts,
            hlog,
            hlog_failure: None,
            intervals: IntervalMerge::new(threads),
            threads,
            totals: Metrics::default(),
        })
    }

    /// Until every thread is done; returns the vCPU threads' CPU time.
    fn run(
        &mut self,
        reports: &mpsc::Receiver<Report>,
        spares: &[mpsc::Sender<Box<Metrics>>],
        on_progress: &mut dyn FnMut(&Progress),
    ) -> u64 {
        let (mut done, mut vcpu_cpu_ns) = (0, 0);
        while done < self.threads {
            match reports.recv() {
                Ok(Report::Interval { thread, index, metrics }) => {
                    self.intervals.add(thread, index, |m| m.add(&metrics));
                    let mut metrics = metrics;
                    metrics.reset();
                    let _ = spares[thread].send(metrics);
                    while let Some((i, m)) = self.intervals.pop_whole() {
                        self.log(i, m, on_progress);
                    }
                }
                Ok(Report::Done { thread, cpu_ns }) => {
                    done += 1;
                    vcpu_cpu_ns += cpu_ns;
                    self.intervals.finish(thread);
                }
                Err(_) => break,
            }
        }
        while let Some((i, m)) = self.intervals.pop_any() {
            self.log(i, m, on_progress);
        }
        vcpu_cpu_ns
    }

    /// Adds a whole interval to the totals and the log.
    fn log(&mut self, i: u64, m: Metrics, on_progress: &mut dyn FnMut(&Progress)) {
        let interval = self.opts.report_interval_ns;
        // The drain after the end has its own interval; leave it out of
        // the log when nothing happened in it.
        let idle = m.send_lag.is_empty() && m.response_time.is_empty() && m.interval_error.is_empty();
        let past_end = i * interval >= self.opts.duration_ns;
        if let Some(h) = self.hlog.as_mut().filter(|_| !(idle && past_end)) {
            let off = Duration::from_nanos(i * interval);
            let len = Duration::from_nanos(interval);
            let written = h
                .write("send_lag", &m.send_lag, off, len)
                .and_then(|_| h.write("response_time", &m.response_time, off, len))
                .and_then(|_| h.write("interval_error", &m.interval_error, off, len))
                .and_then(|_| h.flush());
            // The measurement goes on without its log: the statistics are
            // in memory, and the result will say the log is cut.
            if let Err(e) = written {
                self.hlog_failure = Some(format!("--hlog: {e:#}"));
                self.hlog = None;
            }
        }
        self.totals.add(&m);
        on_progress(&Progress {
            elapsed_ns: (i + 1) * interval,
            duration_ns: self.opts.duration_ns,
            outcomes: self.totals.outcomes.clone(),
            send_lag_max_ns: self.totals.send_lag.max(),
            interval_error_max_ns: self.totals.interval_error.max(),
        });
    }
}

impl ontime_core::export::TextReport for CrawlResult {
    /// The human summary.
    fn text(&self) -> String {
        let mut s = String::new();
        let c = &self.config;
        s.push_str(&format!(
            "ontime crawl: {:.0} polls/s planned ({} streams of <= {} points, {} gateway(s), {:?} phases), {} vCPU thread(s), {}{}\n",
            self.planned_polls_per_second,
            self.streams,
            c.points_per_request,
            c.gateways.len(),
            c.phase,
            self.vcpus,
            format_ns(self.duration_ns),
            if self.interrupted { " (interrupted)" } else { "" },
        ));
        let p = &self.polls;
        s.push_str(&format!(
            "polls: planned {}, ok {}, missed {} (timeout {}, http error {}, device error {}, malformed {}, connection lost {}, not sent {}, abandoned {}); point faults {}; resent {}\n",
            p.planned, p.ok, self.missed, p.timeout, p.http_error, p.device_error, p.malformed, p.connection_lost, p.not_sent, p.abandoned, p.point_faults, p.resent
        ));
        if p.device_error > 0 {
            let by_code: Vec<String> = p
                .modbus_exceptions
                .named()
                .into_iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            s.push_str(&format!("device errors by Modbus exception: {}\n", by_code.join(", ")));
        }
        s.push_str(&format!("{}\n", Summary::text_header()));
        s.push_str(&format!("{}\n", self.send_lag.text_row("send lag")));
        s.push_str(&format!("{}\n", self.response_time.text_row("response time")));
        s.push_str(&format!("{}\n", self.interval_error.text_row("interval error")));
        // Over the wall time the crawl took (results before it was
        // recorded: the duration), never the planned duration alone: an
        // overloaded crawl that ran on past it would show impossible shares.
        let wall = if self.wall_ns > 0 {
            self.wall_ns
        } else {
            self.duration_ns
        };
        let secs = wall as f64 / 1e9;
        s.push_str(&format!(
            "cpu: vCPU threads {:.1}% of one core, process {:.1}% (over {})\n",
            self.vcpu_cpu_ns as f64 / 1e9 / secs * 100.0,
            self.process_cpu_ns as f64 / 1e9 / secs * 100.0,
            format_ns(wall)
        ));
        let st = &self.receive_stamps;
        if st.kernel + st.user + st.unknown > 0 || st.crawler_send == 0 {
            s.push_str(&format!(
                "interval error from gateway receive stamps: kernel {}, handler {}, unknown {}\n",
                st.kernel, st.user, st.unknown
            ));
        }
        if st.crawler_send > 0 {
            s.push_str(&format!(
                "interval error from the crawler's send times (the protocol carries no receive time): {} polls\n",
                st.crawler_send
            ));
        }
        let r = &self.resources;
        s.push_str(&format!(
            "resources: cpu per answered poll {}, network {:.0} kbit/s ({} B sent, {} B received), peak memory {:.1} MiB, disk read {} B, written {} B\n",
            r.cpu_per_poll_ns.map_or("n/a".into(), format_ns),
            r.net_kbit_per_s,
            r.traffic.tx_bytes,
            r.traffic.rx_bytes,
            r.max_rss_bytes as f64 / 1048576.0,
            r.disk_read_bytes.map_or("n/a".into(), |b| b.to_string()),
            r.disk_write_bytes.map_or("n/a".into(), |b| b.to_string()),
        ));
        if self.interval_error.count < 100_000 {
            s.push_str("note: percentiles the sample count cannot support are n/a (p99.999 needs >= 100000 samples)\n");
        }
        for f in &self.incomplete_files {
            s.push_str(&format!(
                "incomplete: {f} (the file holds the run only up to this error)\n"
            ));
        }
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }
}

/// One crawl, whole: what `ontime crawl` runs, whether its flags built it
/// or the lab wrote it for a tenant (`ontime probe SPEC.json`). Typed end
/// to end: no command line is assembled, and every range is checked in
/// [`CrawlProbe::validate`], for flags and scenarios alike.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrawlProbe {
    /// Gateways, points, period, N, phase, timeout, connections.
    pub crawl: config::CrawlFile,
    pub run: RunOptions,
    /// Where the JSON result goes.
    pub result: Option<PathBuf>,
    /// Hold /dev/cpu_dma_latency at 0 (false when the caller holds it).
    pub dma_latency: bool,
}

impl CrawlProbe {
    /// Every range of a crawl, declared once.
    pub fn validate(&self) -> Result<(), String> {
        use ontime_core::limits;
        let r = &self.run;
        limits::count("vcpus", r.vcpus as u64, 1, limits::MAX_THREADS)?;
        limits::kept_events("explain-max", r.keep_worst, r.vcpus)?;
        limits::duration(
            "duration",
            r.duration_ns,
            limits::MIN_DURATION_NS,
            limits::MAX_DURATION_NS,
        )?;
        limits::duration(
            "hlog-interval",
            r.report_interval_ns,
            10_000_000,
            limits::MAX_DURATION_NS,
        )?;
        let online = limits::online_cpus();
        if let Some(bad) = r.thread.affinity.iter().find(|&&c| c >= online) {
            return Err(format!("affinity: CPU {bad} is not online (this host has {online})"));
        }
        r.work.validate().map_err(|e| format!("work-tail: {e}"))?;
        if let Some(p) = self.crawl.period {
            limits::duration("period", p, limits::MIN_PERIOD_NS, limits::MAX_DURATION_NS)?;
        }
        Ok(())
    }

    /// The plan of the crawl (URLs resolved, streams laid out; N checked).
    pub fn config(&self) -> Result<CrawlConfig> {
        CrawlConfig::resolve(self.crawl.clone())
    }
}
