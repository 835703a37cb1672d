//! The agent's flight recorder: wake-up probes it runs beside its
//! recording (`[[probe]]`), each streaming its late wake-ups through a
//! FIFO (`ontime cyclic --late-log`), and the late events each finished
//! window holds, attached to the window before it is spooled so that a
//! worker explains them on the window's own recording. With `[flight]`,
//! only the windows holding late events (and those within `keep_around`
//! of one) are published.

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ontime_core::late::{LateInterval, MAX_LATE_LINE_BYTES};
use ontime_core::proc::{ChildProcess, SpawnOptions};
use serde::{Deserialize, Serialize};

pub use crate::wire::ProbeLate;

/// A wake-up probe the agent runs (`[[probe]]` in agent.toml).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// Its name in the fleet's results (letters, digits, '-', '_').
    pub name: String,
    /// Wake-up period, e.g. "1ms".
    #[serde(default = "default_interval")]
    pub interval: String,
    /// Probe threads, pinned round-robin to `cpus` (empty: unpinned).
    #[serde(default = "one")]
    pub threads: usize,
    #[serde(default)]
    pub cpus: Vec<usize>,
    /// "other", "fifo:PRIO", "rr:PRIO" or "deadline:RUNTIME/PERIOD".
    #[serde(default = "default_policy")]
    pub policy: String,
    /// A wake-up later than this is late: streamed, kept with its window
    /// and explained.
    #[serde(default = "default_late_over")]
    pub late_over: String,
}

fn default_interval() -> String {
    "1ms".into()
}
fn one() -> usize {
    1
}
fn default_policy() -> String {
    "other".into()
}
fn default_late_over() -> String {
    "1ms".into()
}

/// The agent's flight recorder (`[flight]`): publish only the windows that
/// hold a late event, or lie within `keep_around` of one.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlightConfig {
    /// e.g. "2s"; at most one window.
    #[serde(default = "default_keep_around")]
    pub keep_around: String,
}

fn default_keep_around() -> String {
    "2s".into()
}

/// At most this many probes per agent: their late events travel in the
/// window's notice, which a worker reads up to 64 KiB.
pub const MAX_PROBES: usize = 8;
/// Late events attached to one window, over all its probes (the worst;
/// the rest are counted): about 70 bytes each in the notice.
pub const MAX_LATE_PER_WINDOW: usize = 200;
/// How long a finished window waits for its probes' late logs to pass its
/// end (a log line comes once a second, a late wake-up adds its lateness)
/// before it is spooled with what is known (`complete = false`).
pub const LATE_WAIT: Duration = Duration::from_secs(5);
/// Intervals a probe's log may run ahead of the windows (ten minutes of
/// 1 s intervals); older ones are dropped and counted.
const MAX_PENDING_INTERVALS: usize = 600;
/// A probe's stderr log is begun again past this at its next start.
const MAX_PROBE_LOG_BYTES: u64 = 1 << 20;
/// Probe threads at most: each late log line carries up to 64 events per
/// thread, and a line must stay well under what the agent reads.
pub const MAX_PROBE_THREADS: usize = 16;
/// How long a probe that exited waits before it is started again.
const RESTART_AFTER: Duration = Duration::from_secs(5);

impl ProbeConfig {
    pub fn check(&self) -> Result<(), String> {
        crate::wire::check_host(&self.name).map_err(|e| format!("probe name: {e}"))?;
        if !(1..=MAX_PROBE_THREADS).contains(&self.threads) {
            return Err(format!(
                "probe {:?}: threads = {}: use 1 to {MAX_PROBE_THREADS}",
                self.name, self.threads
            ));
        }
        let probe = self.cyclic(Path::new("/dev/null"))?;
        probe.validate().map_err(|e| format!("probe {:?}: {e}", self.name))?;
        Ok(())
    }

    pub fn late_over_ns(&self) -> Result<u64, String> {
        ontime_core::duration::parse_ns(&self.late_over)
            .map_err(|e| format!("probe {:?}: late_over = {:?}: {e}", self.name, self.late_over))
    }

    /// The wake-up probe this runs: until stopped (a week at most; the
    /// agent starts it again), its late wake-ups streamed to `late_log`.
    pub fn cyclic(&self, late_log: &Path) -> Result<ontime_cyclic::CyclicProbe, String> {
        let at = |key: &str, v: &str, e: String| format!("probe {:?}: {key} = {v:?}: {e}", self.name);
        let interval_ns =
            ontime_core::duration::parse_ns(&self.interval).map_err(|e| at("interval", &self.interval, e))?;
        let policy = self.policy.parse().map_err(|e: String| at("policy", &self.policy, e))?;
        Ok(ontime_cyclic::CyclicProbe {
            options: ontime_cyclic::CyclicOptions {
                threads: self.threads,
                affinity: self.cpus.clone(),
                interval_ns,
                distance_ns: 0,
                policy,
                mlockall: true,
                loops: None,
                duration_ns: Some(ontime_core::limits::MAX_DURATION_NS),
                histogram_us: 0,
                threshold_ns: None,
                dma_latency: false,
                load: None,
                hlog: None,
                hlog_interval_ns: 1_000_000_000,
                late_log: Some(late_log.to_path_buf()),
                late_log_over_ns: Some(self.late_over_ns()?),
                keep_worst: 0,
                explain_over: None,
                own_work: None,
            },
            load: None,
            load_workers: 1,
            histfile: None,
            histfile_woken: None,
            result: None,
            injected_work_result: None,
        })
    }
}

/// What starts a probe: the command running this spec (`ontime probe
/// SPEC.json`, built by the binary, which owns the probe documents).
pub type ProbeCommand = Box<dyn Fn(&ontime_cyclic::CyclicProbe, &Path) -> Result<std::process::Command> + Send>;

/// A probe as the agent runs it.
struct RunningProbe {
    config: ProbeConfig,
    threshold_ns: u64,
    fifo: PathBuf,
    spec: PathBuf,
    log: PathBuf,
    child: Option<ChildProcess>,
    exited_at: Option<Instant>,
    /// The agent is stopping: an exit is not a failure.
    stopping: bool,
    queue: LateQueue,
}

/// A probe's streamed intervals not yet taken by a window.
#[derive(Default)]
struct LateQueue {
    /// Every late event planned before this is known.
    through_ns: u64,
    pending: VecDeque<Pending>,
}

struct Pending {
    interval: LateInterval,
    /// It crossed a window's end: what it has left belongs to the next.
    carried: bool,
}

impl LateQueue {
    fn push(&mut self, interval: LateInterval, counts: &mut ProbeCounts) {
        self.through_ns = self.through_ns.max(interval.to_ns);
        self.pending.push_back(Pending {
            interval,
            carried: false,
        });
        if self.pending.len() > MAX_PENDING_INTERVALS {
            self.pending.pop_front();
            counts.intervals_dropped += 1;
        }
    }

    /// The late events of [start_ns, end_ns): the worst `keep` planned in
    /// it, counted with every interval's late wake-ups planned in it. An
    /// interval crossing the end is split: its kept events after the end,
    /// and as many of its count, stay for the next window; what it did not
    /// keep is counted where it began.
    fn take(&mut self, start_ns: u64, end_ns: u64, keep: usize, counts: &mut ProbeCounts) -> ProbeLate {
        let mut l = ProbeLate {
            complete: self.through_ns >= end_ns,
            ..Default::default()
        };
        while let Some(front) = self.pending.front_mut() {
            let iv = &mut front.interval;
            if iv.from_ns >= end_ns {
                break;
            }
            iv.events.retain(|e| {
                if e.planned_ns >= end_ns {
                    return true;
                }
                if e.planned_ns >= start_ns {
                    l.events.push(*e);
                }
                false
            });
            let crossing = iv.to_ns > end_ns;
            let stays = if crossing { iv.events.len() as u64 } else { 0 };
            let here = iv.late.saturating_sub(stays);
            // An interval that began before the window and was not carried
            // over came after its own window was spooled.
            if iv.from_ns >= start_ns || front.carried {
                l.late += here;
            } else {
                counts.events_after_window += here;
            }
            iv.late = stays;
            if crossing {
                front.carried = true;
                break;
            }
            self.pending.pop_front();
        }
        l.events
            .sort_by_key(|e| (std::cmp::Reverse(e.lateness_ns()), e.planned_ns));
        l.events.truncate(keep);
        l
    }
}

/// The agent's probes, the late events they streamed, and the windows
/// waiting for them.
pub struct Probes {
    probes: Vec<RunningProbe>,
    command: ProbeCommand,
    rx: mpsc::Receiver<(usize, LateInterval)>,
    /// Finished windows waiting for their probes' logs: (file, its start
    /// and end on CLOCK_MONOTONIC, when it came).
    waiting: VecDeque<(PathBuf, u64, u64, Instant)>,
    flight: Option<Flight>,
    pub counts: ProbeCounts,
}

/// What the probes and the flight recorder did, for the agent's summary.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProbeCounts {
    /// Probes started, restarts included.
    pub starts: u64,
    /// Windows that waited for their late events (every recorded one).
    pub windows_seen: u64,
    /// Late intervals dropped before any window took them (the windows fell
    /// ten minutes behind the probes).
    pub intervals_dropped: u64,
    /// Late events that came after their window was spooled.
    pub events_after_window: u64,
    /// Windows the flight recorder did not publish (no late event near).
    pub windows_quiet: u64,
    /// Windows spooled with a late event.
    pub windows_late: u64,
}

struct Flight {
    keep_around_ns: u64,
    /// The last quiet window, kept until the next says whether it is near
    /// a late event: (file, its end).
    ring: Option<(PathBuf, u64)>,
    /// Windows starting before this are kept (after a late event).
    keep_until_ns: u64,
}

impl Probes {
    /// Starts every probe, each with its FIFO and spec in `dir`.
    pub fn start(
        configs: &[ProbeConfig],
        flight: Option<&FlightConfig>,
        dir: &Path,
        command: ProbeCommand,
    ) -> Result<Probes> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let (tx, rx) = mpsc::channel();
        let mut probes = Vec::new();
        for (i, c) in configs.iter().enumerate() {
            let fifo = dir.join(format!("{}.late", c.name));
            // An earlier agent's FIFO (or a file in its place) is made anew.
            let _ = std::fs::remove_file(&fifo);
            make_fifo(&fifo)?;
            follow(i, fifo.clone(), tx.clone())?;
            probes.push(RunningProbe {
                threshold_ns: c.late_over_ns().map_err(anyhow::Error::msg)?,
                config: c.clone(),
                spec: dir.join(format!("{}.probe.json", c.name)),
                log: dir.join(format!("{}.log", c.name)),
                fifo,
                child: None,
                exited_at: None,
                stopping: false,
                queue: LateQueue::default(),
            });
        }
        let flight = match flight {
            Some(f) => Some(Flight {
                keep_around_ns: ontime_core::duration::parse_ns(&f.keep_around)
                    .map_err(|e| anyhow::anyhow!("flight.keep_around = {:?}: {e}", f.keep_around))?,
                ring: None,
                keep_until_ns: 0,
            }),
            None => None,
        };
        let mut p = Probes {
            probes,
            command,
            rx,
            waiting: VecDeque::new(),
            flight,
            counts: ProbeCounts::default(),
        };
        for i in 0..p.probes.len() {
            p.launch(i)?;
        }
        Ok(p)
    }

    /// The probes as tenants of their own ("probe-NAME"), to record.
    pub fn groups(&self) -> Vec<ontime_trace::targets::TargetGroup> {
        self.probes
            .iter()
            .filter_map(|p| {
                p.child
                    .as_ref()
                    .map(|c| ontime_trace::targets::TargetGroup::process(&format!("probe-{}", p.config.name), c.id()))
            })
            .collect()
    }

    fn launch(&mut self, i: usize) -> Result<()> {
        let p = &mut self.probes[i];
        make_fifo(&p.fifo)?;
        let spec = p.config.cyclic(&p.fifo).map_err(anyhow::Error::msg)?;
        let mut cmd = (self.command)(&spec, &p.spec)?;
        // Appended to: a restarted probe's log keeps why the last one ended;
        // begun again past 1 MiB (a probe that fails at every start).
        let big = std::fs::metadata(&p.log).is_ok_and(|m| m.len() > MAX_PROBE_LOG_BYTES);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(!big)
            .write(true)
            .truncate(big)
            .open(&p.log)
            .with_context(|| format!("cannot write {}", p.log.display()))?;
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        let child = ChildProcess::spawn(
            &format!("probe {}", p.config.name),
            &mut cmd,
            SpawnOptions {
                death_signal: libc::SIGTERM,
                // A Ctrl-C at the agent's terminal is the agent's to
                // handle: it stops its probes itself.
                own_group: true,
                ..Default::default()
            },
        )?;
        p.child = Some(child);
        p.exited_at = None;
        self.counts.starts += 1;
        Ok(())
    }

    /// Takes in what the probes streamed; restarts a probe that exited
    /// (after a pause, saying why on stderr).
    pub fn poll(&mut self) {
        while let Ok((i, interval)) = self.rx.try_recv() {
            self.probes[i].queue.push(interval, &mut self.counts);
        }
        for i in 0..self.probes.len() {
            let p = &mut self.probes[i];
            if p.stopping {
                continue;
            }
            if let Some(status) = p.child.as_mut().and_then(|c| c.try_wait()) {
                ontime_core::errln!(
                    "ontime agent: probe {} exited ({status}; its log: {}); starting it again in {} s",
                    p.config.name,
                    p.log.display(),
                    RESTART_AFTER.as_secs()
                );
                p.child = None;
                p.exited_at = Some(Instant::now());
            }
            if p.exited_at.is_some_and(|t| t.elapsed() >= RESTART_AFTER) {
                if let Err(e) = self.launch(i) {
                    ontime_core::errln!("ontime agent: probe {}: {e:#}", self.probes[i].config.name);
                    self.probes[i].exited_at = Some(Instant::now());
                }
            }
        }
    }

    /// A finished window, to wait for its late events.
    pub fn window_finished(&mut self, file: PathBuf, start_ns: u64, end_ns: u64) {
        self.waiting.push_back((file, start_ns, end_ns, Instant::now()));
    }

    /// The windows whose late events are known (or that waited
    /// [`LATE_WAIT`], or all when `all`), each with its late events
    /// written beside it: the files to spool, oldest first. With the
    /// flight recorder, quiet windows away from any late event are deleted
    /// instead.
    pub fn ready(&mut self, all: bool) -> Vec<PathBuf> {
        self.poll();
        let mut out = Vec::new();
        while let Some(&(_, _, end_ns, came)) = self.waiting.front() {
            let known = self.probes.iter().all(|p| p.queue.through_ns >= end_ns);
            if !(all || known || came.elapsed() >= LATE_WAIT) {
                break;
            }
            let Some((file, start_ns, end_ns, _)) = self.waiting.pop_front() else {
                break;
            };
            self.counts.windows_seen += 1;
            let late = self.take(start_ns, end_ns);
            let any = late.iter().any(|l| l.late > 0 || !l.events.is_empty());
            if any {
                self.counts.windows_late += 1;
            }
            // A window whose late events may be missing says so too.
            if any || late.iter().any(|l| !l.complete) {
                let side = late_file(&file);
                match serde_json::to_vec(&late).map(|b| ontime_core::fsio::write_atomic(&side, &b)) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => ontime_core::errln!(
                        "ontime agent: {}: {e:#}; the window goes without its late events",
                        side.display()
                    ),
                    Err(e) => ontime_core::errln!("ontime agent: late events of {}: {e}", file.display()),
                }
            }
            match self.flight.as_mut() {
                None => out.push(file),
                Some(f) => f.decide(file, start_ns, end_ns, &late, any, &mut out, &mut self.counts),
            }
        }
        if all {
            if let Some((file, _)) = self.flight.as_mut().and_then(|f| f.ring.take()) {
                remove_quiet(&file, &mut self.counts);
            }
        }
        out
    }

    /// The late events of [start_ns, end_ns), taken out of the pending
    /// intervals; the worst [`MAX_LATE_PER_WINDOW`] over all probes kept.
    fn take(&mut self, start_ns: u64, end_ns: u64) -> Vec<ProbeLate> {
        let per_probe = MAX_LATE_PER_WINDOW / self.probes.len().max(1);
        let counts = &mut self.counts;
        self.probes
            .iter_mut()
            .map(|p| {
                let mut l = p.queue.take(start_ns, end_ns, per_probe, counts);
                l.probe = p.config.name.clone();
                l.threshold_ns = p.threshold_ns;
                l
            })
            .collect()
    }

    /// Stops every probe.
    pub fn stop(&mut self) {
        // Every probe told at once: the stop waits for the slowest, not
        // for each in turn.
        self.signal_stop();
        for p in &mut self.probes {
            if let Some(mut c) = p.child.take() {
                c.stop();
            }
        }
    }

    /// Tells every probe to stop (SIGTERM), not waiting; none is started
    /// again.
    pub fn signal_stop(&mut self) {
        for p in self.probes.iter_mut().filter(|p| !p.stopping) {
            if let Some(c) = &p.child {
                c.signal(libc::SIGTERM);
            }
            p.exited_at = None;
            p.stopping = true;
        }
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Flight {
    /// Publishes a late window with the quiet one before it when that is
    /// within `keep_around` of its first late event, and a quiet window
    /// when it starts within `keep_around` after the last late event.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &mut self,
        file: PathBuf,
        start_ns: u64,
        end_ns: u64,
        late: &[ProbeLate],
        any: bool,
        out: &mut Vec<PathBuf>,
        counts: &mut ProbeCounts,
    ) {
        if any {
            let first = late
                .iter()
                .flat_map(|l| &l.events)
                .map(|e| e.planned_ns)
                .min()
                .unwrap_or(start_ns);
            let last = late
                .iter()
                .flat_map(|l| &l.events)
                .map(|e| e.actual_ns)
                .max()
                .unwrap_or(end_ns);
            if let Some((prev, prev_end)) = self.ring.take() {
                if first.saturating_sub(self.keep_around_ns) < prev_end {
                    out.push(prev);
                } else {
                    remove_quiet(&prev, counts);
                }
            }
            self.keep_until_ns = self.keep_until_ns.max(last.saturating_add(self.keep_around_ns));
            out.push(file);
        } else if start_ns < self.keep_until_ns {
            if let Some((prev, _)) = self.ring.take() {
                remove_quiet(&prev, counts);
            }
            out.push(file);
        } else {
            if let Some((prev, _)) = self.ring.replace((file, end_ns)) {
                remove_quiet(&prev, counts);
            }
        }
    }
}

fn remove_quiet(file: &Path, counts: &mut ProbeCounts) {
    let _ = std::fs::remove_file(file);
    counts.windows_quiet += 1;
}

/// Where a window's late events wait in the spool beside it.
pub fn late_file(window: &Path) -> PathBuf {
    window.with_extension("late.json")
}

/// The late events spooled beside a window (none: no file). A file that
/// does not read is said and left out: the window goes without them.
pub fn read_late_file(window: &Path) -> Vec<ProbeLate> {
    let f = late_file(window);
    match std::fs::read(&f) {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
            ontime_core::errln!(
                "ontime agent: {}: {e}; the window goes without its late events",
                f.display()
            );
            Vec::new()
        }),
        Err(_) => Vec::new(),
    }
}

/// Makes the FIFO a probe writes its late log to, unless it is there: a
/// probe opening a missing path would make a plain file the agent never
/// reads.
fn make_fifo(fifo: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(fifo) {
        Ok(m) if m.file_type().is_fifo() => return Ok(()),
        Ok(_) => {
            let _ = std::fs::remove_file(fifo);
        }
        Err(_) => {}
    }
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).context("a FIFO path with a NUL byte")?;
    // SAFETY: a valid C string; mkfifo has no other precondition.
    if unsafe { libc::mkfifo(path.as_ptr(), 0o600) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot make the FIFO {}", fifo.display()));
    }
    Ok(())
}

/// Follows probe `i`'s FIFO on a thread of its own: each line an interval,
/// sent on; reopened when its writer goes (a restarted probe opens it
/// again). The thread ends when the agent does.
fn follow(i: usize, fifo: PathBuf, tx: mpsc::Sender<(usize, LateInterval)>) -> Result<()> {
    std::thread::Builder::new()
        .name(format!("ontime-late{i}"))
        .spawn(move || loop {
            // Blocks until the probe opens it for writing. A FIFO that is
            // gone is made again before the probe's next start.
            let Ok(f) = std::fs::File::open(&fifo) else {
                std::thread::sleep(Duration::from_secs(1));
                continue;
            };
            let mut r = std::io::BufReader::new(f);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut r)
                    .take(MAX_LATE_LINE_BYTES as u64 + 1)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.last() != Some(&b'\n') {
                    // Over the bound, or cut by the writer's end: skip to
                    // the next line.
                    let mut rest = Vec::new();
                    let _ = (&mut r).take(MAX_LATE_LINE_BYTES as u64).read_until(b'\n', &mut rest);
                    ontime_core::errln!(
                        "ontime agent: {}: a line over {} bytes, left out",
                        fifo.display(),
                        MAX_LATE_LINE_BYTES
                    );
                    continue;
                }
                match serde_json::from_slice::<LateInterval>(&line) {
                    Ok(interval) => {
                        if tx.send((i, interval)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        ontime_core::errln!("ontime agent: {}: a line that is no late interval: {e}", fifo.display())
                    }
                }
            }
        })
        .context("starting a probe's follower")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_core::late::ProbeEvent;

    fn ev(planned_ms: u64, late_ms: u64) -> ProbeEvent {
        ProbeEvent {
            tid: 7,
            planned_ns: planned_ms * 1_000_000,
            actual_ns: (planned_ms + late_ms) * 1_000_000,
            sent_ns: None,
            gateway: None,
            received_ns: None,
        }
    }

    fn interval(from_ms: u64, late: u64, events: Vec<ProbeEvent>) -> LateInterval {
        LateInterval {
            from_ns: from_ms * 1_000_000,
            to_ns: (from_ms + 1000) * 1_000_000,
            threshold_ns: 1_000_000,
            late,
            events,
        }
    }

    #[test]
    fn a_window_takes_its_events_and_leaves_the_next_ones() {
        let mut counts = ProbeCounts::default();
        let mut q = LateQueue::default();
        q.push(interval(0, 2, vec![ev(100, 5), ev(900, 3)]), &mut counts);
        // Crosses the window's end at 1500 ms.
        q.push(
            interval(1000, 3, vec![ev(1200, 9), ev(1600, 4), ev(1700, 2)]),
            &mut counts,
        );
        let w = q.take(0, 1_500_000_000, 10, &mut counts);
        assert!(w.complete);
        assert_eq!(w.late, 3, "the first interval's 2, the second's one before the end");
        let kept: Vec<u64> = w.events.iter().map(|e| e.planned_ns / 1_000_000).collect();
        assert_eq!(kept, vec![1200, 100, 900], "worst first, none planned after the end");
        // The next window gets the crossing interval's later events, and
        // is incomplete: the log has not passed its end.
        let next = q.take(1_500_000_000, 2_500_000_000, 10, &mut counts);
        assert!(!next.complete);
        assert_eq!(
            next.late, 2,
            "the crossing interval's two after the end: 5 in all, none twice"
        );
        assert_eq!(next.events.len(), 2);
        assert!(q.pending.is_empty());
    }

    #[test]
    fn a_window_keeps_the_worst_and_counts_what_came_too_late() {
        let mut counts = ProbeCounts::default();
        let mut q = LateQueue::default();
        q.push(interval(0, 40, (0..40).map(|i| ev(i * 10, i)).collect()), &mut counts);
        let w = q.take(0, 1_000_000_000, 3, &mut counts);
        assert_eq!(w.late, 40);
        assert_eq!(
            w.events.iter().map(|e| e.lateness_ns() / 1_000_000).collect::<Vec<_>>(),
            vec![39, 38, 37]
        );
        // An interval of an already spooled window.
        q.push(interval(500, 4, vec![ev(600, 2)]), &mut counts);
        let w = q.take(1_000_000_000, 2_000_000_000, 3, &mut counts);
        assert_eq!((w.late, w.events.len()), (0, 0));
        assert_eq!(counts.events_after_window, 4);
    }

    #[test]
    fn the_pending_intervals_are_bounded() {
        let mut counts = ProbeCounts::default();
        let mut q = LateQueue::default();
        for i in 0..(MAX_PENDING_INTERVALS as u64 + 5) {
            q.push(interval(i * 1000, 0, vec![]), &mut counts);
        }
        assert_eq!(q.pending.len(), MAX_PENDING_INTERVALS);
        assert_eq!(counts.intervals_dropped, 5);
    }

    #[test]
    fn the_flight_recorder_keeps_the_windows_around_late_events() {
        let d = tempfile::tempdir().unwrap();
        let file = |i: u64| {
            let p = d.path().join(format!("window-{i}.otrec"));
            std::fs::write(&p, b"w").unwrap();
            p
        };
        let late_at = |planned_ms: &[u64]| {
            vec![ProbeLate {
                late: planned_ms.len() as u64,
                events: planned_ms.iter().map(|&p| ev(p, 10)).collect(),
                ..Default::default()
            }]
        };
        let mut f = Flight {
            keep_around_ns: 200_000_000,
            ring: None,
            keep_until_ns: 0,
        };
        let mut counts = ProbeCounts::default();
        let mut out = Vec::new();
        let s = |ms: u64| ms * 1_000_000;
        // Windows of 1 s: 0 and 1 quiet, 2 late 100 ms in (1 is within
        // 200 ms before it) and 850 ms in, ending 140 ms before its end (3,
        // quiet, starts within 200 ms after it), 4 and 5 quiet, 6 late
        // 500 ms in (5 is not near).
        f.decide(file(0), s(0), s(1000), &[], false, &mut out, &mut counts);
        f.decide(file(1), s(1000), s(2000), &[], false, &mut out, &mut counts);
        f.decide(
            file(2),
            s(2000),
            s(3000),
            &late_at(&[2100, 2850]),
            true,
            &mut out,
            &mut counts,
        );
        f.decide(file(3), s(3000), s(4000), &[], false, &mut out, &mut counts);
        f.decide(file(4), s(4000), s(5000), &[], false, &mut out, &mut counts);
        f.decide(file(5), s(5000), s(6000), &[], false, &mut out, &mut counts);
        f.decide(
            file(6),
            s(6000),
            s(7000),
            &late_at(&[6500]),
            true,
            &mut out,
            &mut counts,
        );
        let kept: Vec<String> = out
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            kept,
            ["window-1.otrec", "window-2.otrec", "window-3.otrec", "window-6.otrec"]
        );
        assert_eq!(counts.windows_quiet, 3, "0, 4 and 5");
        assert!(!d.path().join("window-0.otrec").exists());
    }
}
