//! `ontime agent`: one host's continuous recording (or a replay of a
//! recorded one), each finished window published to JetStream: the file
//! into the windows object store, then a notice on `ontime.windows.<host>`
//! whose message id is the window id, so a retry is never counted twice.
//! While the server is away windows wait in the spool, oldest published
//! first when it returns.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use async_nats::jetstream;
use serde::Deserialize;

use crate::conn::{Checked, NatsArgs, Origin, Refusal};
use crate::probes::{FlightConfig, ProbeCommand, ProbeConfig, ProbeCounts, Probes};
use crate::spool::Spool;
use crate::wire::{self, WindowNotice};

/// The agent's config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// This host's name in the fleet (a NATS subject token).
    pub host: String,
    /// Window length, e.g. "30s".
    #[serde(default = "default_window")]
    pub window: String,
    /// Record live (needs root and BPF) ...
    #[serde(default)]
    pub record: Option<RecordConfig>,
    /// ... or republish a recorded continuous recording's windows at real
    /// time (a test fleet, a demo).
    #[serde(default)]
    pub replay: Option<ReplayConfig>,
    pub spool: SpoolConfig,
    #[serde(default)]
    pub nats: NatsArgs,
    /// Serve Prometheus metrics on this address (path /metrics), e.g.
    /// "0.0.0.0:9464": each tenant's latest window, the agent's counters.
    #[serde(default)]
    pub prometheus: Option<String>,
    /// Wake-up probes run beside the recording (`[[probe]]`): their late
    /// wake-ups travel with the windows and are explained on them.
    #[serde(default, rename = "probe")]
    pub probes: Vec<ProbeConfig>,
    /// Publish only the windows around late wake-ups (`[flight]`).
    #[serde(default)]
    pub flight: Option<FlightConfig>,
}

fn default_window() -> String {
    "30s".into()
}

/// What to record: as `ontime profile record`'s targets.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordConfig {
    #[serde(default)]
    pub lab: bool,
    /// "[NAME=]PATH" cgroups.
    #[serde(default)]
    pub cgroups: Vec<String>,
    /// "[NAME=]PID" processes.
    #[serde(default)]
    pub pids: Vec<String>,
    /// QEMU guests by -name.
    #[serde(default)]
    pub guests: Vec<String>,
    /// Stack samples per second (0: scheduler events only, no profile).
    #[serde(default = "default_hz")]
    pub profile_hz: u32,
}

fn default_hz() -> u32 {
    100
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// A directory of window files (`ontime profile record --continuous -o DIR`).
    pub dir: PathBuf,
    /// Start again at the first window after the last (default true);
    /// false: the agent ends once the windows are published.
    #[serde(default = "yes", rename = "loop")]
    pub repeat: bool,
    /// One window per window length (default), or as fast as they can be
    /// published (`pace = false`: a publishing benchmark, a backlog).
    #[serde(default = "yes")]
    pub pace: bool,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    /// e.g. "1G": beyond it the oldest windows are dropped (and counted).
    #[serde(default = "default_spool")]
    pub max_bytes: String,
}

fn default_spool() -> String {
    "1G".into()
}

impl AgentConfig {
    /// Reads and checks the config: every error is one line of bad input
    /// naming the file (and, for TOML, the line and key), so an agent that
    /// could never publish refuses to start instead of spooling for ever.
    pub fn read(path: &Path) -> Result<AgentConfig> {
        let c: AgentConfig = ontime_core::config::read_toml(path, "agent config")
            .map_err(|e| ontime_core::bad_input(format!("{e:#}")))?;
        c.check()
            .map_err(|e| ontime_core::bad_input(format!("{}: {e}", path.display())))?;
        Ok(c)
    }

    fn check(&self) -> Result<(), String> {
        wire::check_host(&self.host)?;
        let w = self.window_ns()?;
        if !(1_000_000_000..=3_600_000_000_000).contains(&w) {
            return Err(format!("window = {:?}: use 1s to 1h", self.window));
        }
        if self.spool_bytes()? == 0 {
            return Err(format!(
                "spool.max_bytes = {:?}: give a size above 0",
                self.spool.max_bytes
            ));
        }
        match (&self.record, &self.replay) {
            (Some(_), Some(_)) => return Err("give [record] or [replay], not both".into()),
            (None, None) => return Err("nothing to publish: add [record] (targets) or [replay] (dir)".into()),
            (Some(r), None) if r.profile_hz > 10_000 => {
                return Err(format!("record.profile_hz = {}: use 0 to 10000", r.profile_hz))
            }
            (None, Some(r)) if !r.dir.is_dir() => {
                return Err(format!("replay.dir {}: not a directory", r.dir.display()))
            }
            _ => {}
        }
        self.check_probes(w)?;
        self.nats.check(Origin::Config).map_err(|e| format!("{e:#}"))?;
        Ok(())
    }

    fn check_probes(&self, window_ns: u64) -> Result<(), String> {
        if self.probes.is_empty() {
            return match self.flight {
                Some(_) => Err("[flight] keeps the windows around probes' late wake-ups: add a [[probe]]".into()),
                None => Ok(()),
            };
        }
        if self.record.is_none() {
            return Err("[[probe]] needs [record]: its late wake-ups are explained on the live recording".into());
        }
        if self.probes.len() > crate::probes::MAX_PROBES {
            return Err(format!(
                "{} probes: use at most {}",
                self.probes.len(),
                crate::probes::MAX_PROBES
            ));
        }
        for (i, p) in self.probes.iter().enumerate() {
            p.check()?;
            if self.probes[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("two probes named {:?}", p.name));
            }
        }
        if let Some(f) = &self.flight {
            let k = ontime_core::duration::parse_ns(&f.keep_around)
                .map_err(|e| format!("flight.keep_around = {:?}: {e}", f.keep_around))?;
            if k > window_ns {
                return Err(format!(
                    "flight.keep_around = {:?} is longer than a window ({}): use at most one window",
                    f.keep_around, self.window
                ));
            }
        }
        Ok(())
    }

    pub fn window_ns(&self) -> Result<u64, String> {
        ontime_core::duration::parse_ns(&self.window).map_err(|e| format!("window = {:?}: {e}", self.window))
    }

    fn spool_bytes(&self) -> Result<u64, String> {
        ontime_core::size::parse_bytes(&self.spool.max_bytes)
            .map_err(|e| format!("spool.max_bytes = {:?}: {e}", self.spool.max_bytes))
    }
}

/// What an agent did, for its last line and its test.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AgentSummary {
    /// Windows it had to publish: recorded or replayed, and left in the
    /// spool by an earlier run.
    pub windows: u64,
    pub published: u64,
    /// Publishes the server said it had already (a retry).
    pub duplicates: u64,
    pub dropped: u64,
    pub left_in_spool: usize,
    pub cpu_ns: u64,
    pub max_rss_bytes: u64,
    /// What its probes and flight recorder did (with `[[probe]]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes: Option<ProbeCounts>,
}

/// Runs the agent until `stop`; then publishes what it can within a few
/// seconds and leaves the rest in the spool.
/// With `[[probe]]`, `probe_command` starts each probe, `targets` record
/// every thread (the explanation names whoever delayed a probe).
pub fn run(
    c: &AgentConfig,
    stop: Arc<AtomicBool>,
    targets: Option<ontime_trace::targets::Targets>,
    probe_command: Option<ProbeCommand>,
) -> Result<AgentSummary> {
    let window_ns = c.window_ns().map_err(anyhow::Error::msg)?;
    // Before anything is recorded: a server that could never be reached
    // with these options is refused now.
    let nats = c.nats.check(Origin::Config)?;
    let mut spool = Spool::open(&c.spool.dir, c.spool_bytes().map_err(anyhow::Error::msg)?)?;
    let started = Instant::now();
    let run_dir = spool.run_dir(ontime_core::time::realtime_ns());
    let mut probes = match (c.probes.is_empty(), probe_command) {
        (true, _) => None,
        (false, None) => bail!("[[probe]] given, but nothing to start probes with"),
        (false, Some(command)) => Some(
            Probes::start(&c.probes, c.flight.as_ref(), &c.spool.dir.join("probes"), command)
                .context("starting the agent's probes")?,
        ),
    };
    let (tx, rx) = mpsc::channel::<PathBuf>();
    let producer_stop = Arc::new(AtomicBool::new(false));
    // A replay that does not loop ends; the agent then ends once its
    // spool is published.
    let producer_done = Arc::new(AtomicBool::new(false));
    let producer = match (&c.record, &c.replay) {
        (Some(r), _) => {
            let mut targets = targets.context("recording needs its targets resolved")?;
            if let Some(p) = &probes {
                targets.groups.extend(p.groups());
            }
            let opts = ontime_trace::recorder::RecordOptions {
                targets,
                output: Some(run_dir.clone()),
                measure_overhead: false,
                sample_hz: (r.profile_hz > 0).then_some(r.profile_hz),
                window: Some(Duration::from_nanos(window_ns)),
                windows_done: Some(tx),
                ..Default::default()
            };
            let s = producer_stop.clone();
            std::thread::Builder::new()
                .name("ontime-record".into())
                .spawn(move || {
                    ontime_trace::recorder::record(&opts, &s, None, &mut ontime_trace::recorder::NoSink, &mut |_| {})
                        .map(|_| ())
                })?
        }
        (None, Some(r)) => {
            let r = r.clone();
            let s = producer_stop.clone();
            let done = producer_done.clone();
            let dir = run_dir.clone();
            std::thread::Builder::new()
                .name("ontime-replay".into())
                .spawn(move || {
                    let r = replay(&r, &dir, window_ns, &s, tx);
                    done.store(true, Ordering::Relaxed);
                    r
                })?
        }
        (None, None) => bail!("nothing to publish"),
    };
    let exposition = match &c.prometheus {
        Some(addr) => {
            let body = Arc::new(std::sync::Mutex::new(String::new()));
            ontime_observe::top::serve_metrics("prometheus =", addr, body.clone())?;
            Some(body)
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let control = Control {
        stop: &stop,
        producer_stop: &producer_stop,
        producer_done: &producer_done,
    };
    let result = rt.block_on(publish_loop(
        c,
        &nats,
        Queue {
            spool: &mut spool,
            rx: &rx,
            probes: probes.as_mut(),
        },
        control,
        started,
        exposition,
    ));
    // The client's tasks (a connection still being retried) are not
    // waited for: the stop's bound is the agent's, not theirs.
    rt.shutdown_timeout(Duration::from_millis(200));
    producer_stop.store(true, Ordering::Relaxed);
    let produced = producer
        .join()
        .map_err(|_| anyhow::anyhow!("the recording thread panicked"))?;
    // The recorder's last windows, finished at its stop: into the spool
    // (published at the next start).
    let mut queue = Queue {
        spool: &mut spool,
        rx: &rx,
        probes: probes.as_mut(),
    };
    let mut facts = std::collections::HashMap::new();
    queue.take_finished(&mut facts, None, true);
    if let Some(p) = probes.as_mut() {
        p.stop();
    }
    let mut summary = result?;
    summary.probes = probes.as_ref().map(|p| p.counts.clone());
    produced?;
    summary.windows = spool.queued;
    summary.dropped += spool.dropped;
    summary.left_in_spool = spool.len();
    let (cpu, rss) = own_cost();
    summary.cpu_ns = cpu;
    summary.max_rss_bytes = rss;
    Ok(summary)
}

/// The agent's stop (a signal), and its producer's.
struct Control<'a> {
    stop: &'a AtomicBool,
    producer_stop: &'a AtomicBool,
    /// A replay without loop sent its last window.
    producer_done: &'a AtomicBool,
}

/// How long after the stop the agent goes on publishing what is spooled;
/// the rest waits for its next start (docs/fleet.md: 5 s).
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often a wait (a publish, a pause) looks at the stop and at the
/// server's refusal.
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// The longest one publish may take before the server counts as away.
const PUBLISH_LIMIT: Duration = Duration::from_secs(10);

/// What cuts the agent's waits short: the stop, which stops the producer
/// at once (no window is recorded after it) and leaves [`STOP_GRACE`] to
/// publish, and the server's refusal of the credentials.
struct Watch<'a> {
    stop: &'a AtomicBool,
    producer_stop: &'a AtomicBool,
    refusal: &'a Refusal,
    stopping_at: Option<Instant>,
}

/// How a bounded wait ended.
enum Bounded<T> {
    Done(T),
    /// Its limit, or the stop's grace, ran out.
    TimedOut,
    Refused,
}

impl Watch<'_> {
    /// Looks at the stop flag (and stops the producer on it); once
    /// stopping, the moment the agent must be gone.
    fn deadline(&mut self) -> Option<Instant> {
        if self.stopping_at.is_none() && self.stop.load(Ordering::Relaxed) {
            self.producer_stop.store(true, Ordering::Relaxed);
            self.stopping_at = Some(Instant::now());
        }
        self.stopping_at.map(|t| t + STOP_GRACE)
    }

    /// Runs `work` for at most `limit`, and not past the stop's deadline,
    /// nor once the server refused the credentials.
    async fn bounded<T>(&mut self, limit: Duration, work: impl Future<Output = T>) -> Bounded<T> {
        let started = Instant::now();
        tokio::pin!(work);
        loop {
            let until = self.deadline().map_or(started + limit, |d| d.min(started + limit));
            if self.refusal.refused() {
                return Bounded::Refused;
            }
            let now = Instant::now();
            if now >= until {
                return Bounded::TimedOut;
            }
            if let Ok(v) = tokio::time::timeout((until - now).min(WATCH_EVERY), &mut work).await {
                return Bounded::Done(v);
            }
        }
    }

    /// Waits `d`, less when the stop comes (or its deadline does) or the
    /// server refuses the credentials.
    async fn pause(&mut self, d: Duration) {
        let started = Instant::now();
        let was_stopping = self.stopping_at.is_some();
        loop {
            let deadline = self.deadline();
            if self.refusal.refused() || (!was_stopping && deadline.is_some()) {
                return;
            }
            let until = deadline.map_or(started + d, |dl| dl.min(started + d));
            let now = Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep((until - now).min(WATCH_EVERY)).await;
        }
    }
}

/// Where finished windows go: through the probes' wait for their late
/// events (when there are probes) into the spool.
struct Queue<'a> {
    spool: &'a mut Spool,
    rx: &'a mpsc::Receiver<PathBuf>,
    probes: Option<&'a mut Probes>,
}

impl Queue<'_> {
    /// Takes the windows the producer finished: reads each once, here, for
    /// its facts (the notice's, and with `metrics` its tenants' figures,
    /// scheduler events only: the functions are the workers' job), and
    /// spools those ready (with probes: once their late events are known;
    /// `all`: every one, the agent is stopping).
    fn take_finished(
        &mut self,
        facts: &mut std::collections::HashMap<PathBuf, WindowFacts>,
        mut metrics: Option<&mut crate::metrics::AgentMetrics>,
        all: bool,
    ) {
        let mut ready = Vec::new();
        while let Ok(f) = self.rx.try_recv() {
            let w = window_facts(&f, metrics.is_some()).ok();
            if let (Some(m), Some(w)) = (metrics.as_deref_mut(), &w) {
                // An almost empty window (a recording's last, cut at its
                // stop) has no shares: the exposition keeps the figures of
                // the last window that had them.
                if w.duration_ns >= crate::analysis::MIN_SHARE_WINDOW_NS {
                    m.tenants = w.tenants.clone();
                }
                m.last_window_end_realtime_ns = w.start_realtime_ns.saturating_add(w.duration_ns);
            }
            match self.probes.as_deref_mut() {
                // A window that does not read goes on as it is: publishing
                // says why it cannot be.
                Some(p) => {
                    let (start, end) = w.as_ref().map_or((0, 0), |w| (w.start_ns, w.start_ns + w.duration_ns));
                    p.window_finished(f.clone(), start, end);
                }
                None => ready.push(f.clone()),
            }
            if let Some(w) = w {
                facts.insert(f, w);
            }
        }
        if let Some(p) = self.probes.as_deref_mut() {
            if all {
                // Stopping: the probes end now, their windows go with what
                // is known.
                p.signal_stop();
            }
            ready.extend(p.ready(all));
            // The flight recorder deleted the quiet windows.
            facts.retain(|f, _| f.exists());
        }
        for f in ready {
            for gone in self.spool.push(f) {
                facts.remove(&gone);
            }
        }
    }
}

async fn publish_loop(
    c: &AgentConfig,
    nats: &Checked,
    queue: Queue<'_>,
    control: Control<'_>,
    started: Instant,
    exposition: Option<Arc<std::sync::Mutex<String>>>,
) -> Result<AgentSummary> {
    let Control {
        stop,
        producer_stop,
        producer_done,
    } = control;
    let mut queue = queue;
    let mut metrics = crate::metrics::AgentMetrics {
        host: c.host.clone(),
        ..Default::default()
    };
    let (client, refusal) = nats.connect_in_background(&format!("ontime-agent {}", c.host)).await?;
    let js = jetstream::new(client.clone());
    let mut watch = Watch {
        stop,
        producer_stop,
        refusal: &refusal,
        stopping_at: None,
    };
    let mut ready = false;
    let mut summary = AgentSummary::default();
    let mut away_since: Option<Instant> = None;
    // Facts of the windows received this run, until published or dropped.
    let mut facts: std::collections::HashMap<PathBuf, WindowFacts> = std::collections::HashMap::new();
    loop {
        if refusal.refused() {
            return Err(nats.refused());
        }
        let deadline = watch.deadline();
        queue.take_finished(
            &mut facts,
            exposition.is_some().then_some(&mut metrics),
            deadline.is_some(),
        );
        if let Some(body) = &exposition {
            let (cpu, rss) = own_cost();
            metrics.windows_queued = queue.spool.queued;
            metrics.windows_published = summary.published;
            metrics.windows_dropped = queue.spool.dropped + summary.dropped;
            metrics.spool_bytes = queue.spool.bytes();
            metrics.spool_windows = queue.spool.len();
            metrics.cpu_ns = cpu;
            metrics.max_rss_bytes = rss;
            if let Ok(mut b) = body.lock() {
                *b = metrics.text();
            }
        }
        if let Some(d) = deadline {
            if queue.spool.is_empty() || Instant::now() >= d {
                return Ok(summary);
            }
        }
        // Everything replayed was sent (the channel is drained after the
        // flag, so no window is left behind).
        if producer_done.load(Ordering::Relaxed) && queue.spool.is_empty() {
            queue.take_finished(&mut facts, None, true);
            if queue.spool.is_empty() {
                return Ok(summary);
            }
        }
        let mut failed = false;
        while let Some(front) = queue.spool.front().map(Path::to_path_buf) {
            let attempt = async {
                if !ready {
                    crate::conn::ensure(&js).await?;
                }
                // A window left by an earlier run is read now.
                let w = match facts.get(&front) {
                    Some(w) => w.clone(),
                    None => window_facts(&front, false)?,
                };
                publish(c, &js, &front, w, queue.spool.dropped, started).await
            };
            match watch.bounded(PUBLISH_LIMIT, attempt).await {
                Bounded::Done(Ok(duplicate)) => {
                    ready = true;
                    if let Some(t) = away_since.take() {
                        ontime_core::errln!(
                            "ontime agent: NATS is back after {:.1} s: publishing {} spooled window(s)",
                            t.elapsed().as_secs_f64(),
                            queue.spool.len()
                        );
                    }
                    facts.remove(&front);
                    queue.spool.published();
                    summary.published += 1;
                    summary.duplicates += duplicate as u64;
                }
                Bounded::Done(Err(e)) if is_bad_window(&e) => {
                    ontime_core::errln!("ontime agent: {} cannot be published: {e:#}; dropped", front.display());
                    facts.remove(&front);
                    queue.spool.published();
                    summary.dropped += 1;
                }
                Bounded::Refused => return Err(nats.refused()),
                res => {
                    // Cut short by the stop's deadline: what is left stays
                    // in the spool, said once by the summary.
                    if away_since.is_none() && watch.stopping_at.is_none() {
                        let why = match res {
                            Bounded::Done(Err(e)) => format!("{e:#}"),
                            _ => format!("no answer in {} s", PUBLISH_LIMIT.as_secs()),
                        };
                        ontime_core::errln!(
                            "ontime agent: cannot publish ({why}): spooling in {}",
                            c.spool.dir.display()
                        );
                        away_since = Some(Instant::now());
                    }
                    failed = true;
                    break;
                }
            }
        }
        // New windows come every few seconds at most: poll gently, and
        // while the server is away retry once a second.
        watch
            .pause(if failed {
                Duration::from_secs(1)
            } else {
                Duration::from_millis(200)
            })
            .await;
    }
}

/// A window file that cannot be read is not worth retrying.
#[derive(Debug)]
struct BadWindow(String);
impl std::fmt::Display for BadWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BadWindow {}

fn is_bad_window(e: &anyhow::Error) -> bool {
    e.is::<BadWindow>()
}

/// Publishes one window; true when the server had it already.
async fn publish(
    c: &AgentConfig,
    js: &jetstream::Context,
    file: &Path,
    w: WindowFacts,
    dropped: u64,
    started: Instant,
) -> Result<bool> {
    let id = WindowNotice::id_of(&c.host, w.start_realtime_ns);
    let bucket = js
        .get_object_store(wire::WINDOW_BUCKET)
        .await
        .map_err(|e| anyhow::anyhow!("the windows object store: {e}"))?;
    let mut f = tokio::fs::File::open(file)
        .await
        .with_context(|| format!("cannot open {}", file.display()))?;
    let info = bucket
        .put(id.as_str(), &mut f)
        .await
        .map_err(|e| anyhow::anyhow!("storing window {id}: {e}"))?;
    let (cpu, rss) = own_cost();
    let notice = WindowNotice {
        version: wire::VERSION,
        host: c.host.clone(),
        id: id.clone(),
        start_realtime_ns: w.start_realtime_ns,
        duration_ns: w.duration_ns,
        bytes: info.size as u64,
        targets: w.targets,
        dropped,
        replayed: w.replayed,
        agent_cpu_ns: cpu,
        agent_rss_bytes: rss,
        agent_uptime_ns: started.elapsed().as_nanos() as u64,
        late: crate::probes::read_late_file(file),
    };
    let ack = js
        .send_publish(
            wire::windows_subject(&c.host),
            jetstream::message::PublishMessage::build()
                .payload(serde_json::to_vec(&notice)?.into())
                .message_id(&id),
        )
        .await
        .map_err(|e| anyhow::anyhow!("publishing window {id}: {e}"))?
        .await
        .map_err(|e| anyhow::anyhow!("window {id} not acknowledged: {e}"))?;
    Ok(ack.duplicate)
}

/// What the agent says of a window: its start (wall clock), length and
/// tenants, and with `figures` each tenant's figures.
#[derive(Clone)]
struct WindowFacts {
    start_realtime_ns: u64,
    /// Its start on CLOCK_MONOTONIC (the probes' clock).
    start_ns: u64,
    duration_ns: u64,
    targets: Vec<String>,
    replayed: bool,
    tenants: Vec<crate::wire::TenantFigures>,
}

/// A window file's facts. A replayed window (copied by [`replay`]) carries
/// its new start in a `.start` file beside it.
fn window_facts(file: &Path, figures: bool) -> Result<WindowFacts> {
    // Sized before it is read: no worker would take a larger one.
    let bytes = std::fs::metadata(file)
        .map_err(|e| anyhow::Error::new(BadWindow(format!("{}: {e}", file.display()))))?
        .len();
    if bytes > wire::MAX_WINDOW_BYTES {
        return Err(anyhow::Error::new(BadWindow(format!(
            "{} is {} bytes, more than a worker takes ({} MiB): use a shorter window",
            file.display(),
            bytes,
            wire::MAX_WINDOW_BYTES >> 20
        ))));
    }
    let rec = ontime_trace::recording::Recording::read(file)
        .map_err(|e| anyhow::Error::new(BadWindow(format!("{}: {e:#}", file.display()))))?;
    let end = rec.end.as_ref().map(|e| e.end_ns).unwrap_or(rec.meta.start_ns);
    let replayed_start = std::fs::read_to_string(file.with_extension("start"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    Ok(WindowFacts {
        start_realtime_ns: replayed_start.unwrap_or(rec.meta.start_realtime_ns),
        start_ns: rec.meta.start_ns,
        duration_ns: end.saturating_sub(rec.meta.start_ns),
        targets: rec
            .meta
            .groups
            .iter()
            .filter(|g| g.kind == ontime_trace::recording::GroupKind::Tenant)
            .map(|g| g.name.clone())
            .collect(),
        replayed: replayed_start.is_some(),
        tenants: if figures {
            crate::analysis::tenant_figures(&rec)
        } else {
            Vec::new()
        },
    })
}

/// Copies the recorded windows into `dir` one window length apart, as if
/// recorded now (each gets this moment as its start, in a `.start` file
/// beside it, so every round of a loop is a new window).
fn replay(r: &ReplayConfig, dir: &Path, window_ns: u64, stop: &AtomicBool, tx: mpsc::Sender<PathBuf>) -> Result<()> {
    let files = ontime_trace::store::window_files(&r.dir)?;
    if files.is_empty() {
        bail!("replay.dir {}: no window files", r.dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut index = 1u64;
    let mut next = Instant::now();
    loop {
        for f in &files {
            let start = ontime_core::time::realtime_ns();
            if r.pace {
                next += Duration::from_nanos(window_ns);
            }
            while Instant::now() < next {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50).min(next.saturating_duration_since(Instant::now())));
            }
            let to = ontime_trace::store::window_file(dir, index);
            std::fs::copy(f, &to).with_context(|| format!("cannot copy {} to the spool", f.display()))?;
            std::fs::write(to.with_extension("start"), start.to_string())?;
            index += 1;
            if tx.send(to).is_err() {
                return Ok(());
            }
        }
        if !r.repeat {
            return Ok(());
        }
    }
}

/// This process's CPU time (all threads) and peak resident memory.
pub fn own_cost() -> (u64, u64) {
    // SAFETY: getrusage fills the zeroed struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0, 0);
    }
    (ontime_core::time::rusage_cpu_ns(&ru), ru.ru_maxrss as u64 * 1024)
}
