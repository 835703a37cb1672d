//! `--explain` for the probes: a scheduler recording of the whole host made
//! beside the probe (ontime-trace), then each late event's lateness split
//! into causes with culprits (ontime-explain). Shared by crawl and cyclic.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use ontime_core::late::LateSet;
use ontime_explain::RunExplanation;
use ontime_trace::flight::{FlightOptions, Kept};
use ontime_trace::recorder::{self, NoSink, RecordOptions, RecordSummary};
use ontime_trace::recording::Recording;
use ontime_trace::targets::Targets;

/// The flags of `--explain`, declared once for crawl and cyclic.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ExplainFlags {
    /// Record every CPU's scheduler events during the run (BPF, else perf)
    /// and say why each late event was late: its lateness split into
    /// causes (waited for a CPU behind whom, own work, blocked, late
    /// timer, ...) with culprits; docs/explain.md
    #[arg(long)]
    pub explain: bool,
    /// Keep the late events (the worst, each with its thread, planned and
    /// actual time) in the result, without recording: `ontime explain
    /// RESULT RECORDING` explains them with a recording made beside the
    /// run (`ontime observe record --all`)
    #[arg(long, conflicts_with = "explain")]
    pub keep_late: bool,
    /// Late means later than this [default: the run's p99.9]
    #[arg(long, value_name = "DURATION", value_parser = ontime_core::duration::parse_ns)]
    pub explain_over: Option<u64>,
    /// Late events kept at most per probe thread, the worst
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub explain_max: usize,
    /// Keep the recording there (for `ontime explain`, `observe report`);
    /// otherwise it is deleted after the run. With the flight recorder it
    /// is a directory of the kept 1 s windows
    #[arg(long, value_name = "FILE", requires = "explain")]
    pub keep_recording: Option<PathBuf>,
    /// Write the scheduling around the worst late events as a Perfetto
    /// trace (open it at ui.perfetto.dev): CPU tracks, thread states, the
    /// late events as slices on their probe's thread
    #[arg(long, value_name = "FILE", requires = "explain")]
    pub perfetto: Option<PathBuf>,
    /// Keep the recording only around late intervals (1 s windows; the
    /// others deleted as the run goes): auto turns it on for runs longer
    /// than 5 minutes, whose whole recording would take gigabytes
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "on", "off"], requires = "explain")]
    pub flight: String,
    /// With the flight recorder: kept on either side of a late interval
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = ontime_core::duration::parse_ns, requires = "explain")]
    pub keep_around: u64,
}

/// Runs longer than this get the flight recorder under `--flight auto`.
const FLIGHT_AUTO_NS: u64 = 300_000_000_000;
/// With the flight recorder: windows kept at most (an hour).
const FLIGHT_MAX_KEPT: u64 = 3600;

impl ExplainFlags {
    /// The flight recorder for a run of `duration_ns` whose probe logs
    /// its intervals' maxima under `tag`; None: record the whole run.
    pub fn flight(&self, duration_ns: u64, tag: &'static str) -> Option<FlightBeside> {
        let on = match self.flight.as_str() {
            "on" => true,
            "off" => false,
            _ => duration_ns > FLIGHT_AUTO_NS,
        };
        on.then(|| FlightBeside {
            options: FlightOptions {
                // A probe logs an interval a second or so after it began.
                ring_ns: self.keep_around + 30_000_000_000,
                keep_around_ns: self.keep_around,
                max_kept: FLIGHT_MAX_KEPT,
                threshold_ns: self.explain_over.unwrap_or(0),
            },
            tag,
        })
    }

    /// Worst events each probe thread keeps (0 without --explain).
    pub fn keep(&self) -> usize {
        if self.explain || self.keep_late {
            self.explain_max
        } else {
            0
        }
    }

    /// `threads`: the probe threads, each keeping up to --explain-max.
    pub fn check(&self, threads: usize) -> Result<()> {
        let keeping = self.explain || self.keep_late;
        if keeping {
            if self.explain_max == 0 {
                return Err(ontime_core::bad_input("--explain-max must be at least 1"));
            }
            ontime_core::limits::kept_events("--explain-max", self.explain_max, threads)
                .map_err(ontime_core::bad_input)?;
        }
        if !keeping && self.explain_over.is_some() {
            return Err(ontime_core::bad_input(
                "--explain-over goes with --explain or --keep-late",
            ));
        }
        Ok(())
    }
}

/// The flight recorder beside a probe: what it keeps, and the tag of the
/// probe's histogram log whose interval maxima trigger it.
#[derive(Clone, Debug)]
pub struct FlightBeside {
    pub options: FlightOptions,
    pub tag: &'static str,
}

/// A recording of every CPU's scheduler events running beside a probe;
/// stopped and joined when dropped (an error on the way), before its
/// temporary directory goes.
pub struct RecordingBeside {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<RecordSummary>>>,
    /// The file, or with the flight recorder the windows' directory.
    path: PathBuf,
    keeper: Option<std::thread::JoinHandle<Kept>>,
    /// The histogram log the probe writes for the flight recorder.
    log: Option<PathBuf>,
    _dir: Option<tempfile::TempDir>,
}

/// What was recorded beside the probe.
pub enum Recorded {
    Whole(Box<Recording>),
    /// The windows the flight recorder kept.
    Kept(Box<Kept>),
}

impl Drop for RecordingBeside {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl RecordingBeside {
    /// Starts recording and returns once the recorder is attached, so the
    /// probe's first event is inside the recording. The recorder's thread
    /// keeps off `probe_cpus` where other CPUs are online (it would
    /// otherwise delay the probe it explains; where it cannot, it is in the
    /// recording and named like any culprit).
    ///
    /// With `flight`, the recording is 1 s windows in a directory (`keep`,
    /// else a temporary one), and only those around the intervals the
    /// probe logs over the threshold are kept: the probe must write its
    /// histogram log to [`RecordingBeside::flight_log`] (or `hlog`, the
    /// one it writes anyway).
    pub fn start(
        keep: Option<&Path>,
        probe_cpus: &[usize],
        flight: Option<FlightBeside>,
        hlog: Option<&Path>,
    ) -> Result<RecordingBeside> {
        let temp = || {
            tempfile::Builder::new()
                .prefix("ontime-explain-")
                .tempdir()
                .context("a temporary directory for the --explain recording")
        };
        let (dir, path) = match (keep, &flight) {
            (Some(p), _) => (None, p.to_path_buf()),
            (None, None) => {
                let d = temp()?;
                let p = d.path().join("explain.otrec");
                (Some(d), p)
            }
            (None, Some(_)) => {
                let d = temp()?;
                let p = d.path().join("windows");
                (Some(d), p)
            }
        };
        let log = match (&flight, hlog) {
            (None, _) => None,
            (Some(_), Some(h)) => Some(h.to_path_buf()),
            (Some(_), None) => Some(match &dir {
                Some(d) => d.path().join("probe.hlog"),
                None => path.join("probe.hlog"),
            }),
        };
        let (window, windows_done, keeper) = match &flight {
            None => (None, None, None),
            Some(f) => {
                let (tx, rx) = std::sync::mpsc::channel();
                let logs = vec![(log.clone().unwrap_or_default(), f.tag)];
                let options = f.options;
                let keeper = std::thread::Builder::new()
                    .name("ontime-flight".into())
                    .spawn(move || ontime_trace::flight::keep(options, &logs, rx))
                    .context("starting the flight recorder")?;
                (Some(ontime_trace::flight::WINDOW), Some(tx), Some(keeper))
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let opts = RecordOptions {
            targets: Targets {
                groups: Vec::new(),
                everything: true,
                host_io: Vec::new(),
            },
            output: Some(path.clone()),
            drain_every: Duration::from_millis(100),
            measure_overhead: false,
            mechanism: Default::default(),
            sample_hz: None,
            window,
            windows_done,
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let flag = stop.clone();
        let elsewhere: Vec<usize> = (0..ontime_core::limits::online_cpus())
            .filter(|c| !probe_cpus.contains(c))
            .collect();
        let thread = std::thread::Builder::new()
            .name("explain-rec".into())
            .spawn(move || {
                if !elsewhere.is_empty() {
                    // Best effort: a cpuset may forbid it.
                    let _ = ontime_core::rt::set_affinity(&elsewhere);
                }
                recorder::record(&opts, &flag, None, &mut NoSink, &mut |_| {
                    let _ = ready_tx.send(());
                })
            })
            .context("starting the --explain recorder")?;
        if ready_rx.recv_timeout(Duration::from_secs(30)).is_err() {
            stop.store(true, Ordering::Relaxed);
            return match thread.join() {
                Ok(Err(e)) => Err(e.context("--explain: the scheduler recorder could not start")),
                _ => Err(anyhow::anyhow!(
                    "--explain: the scheduler recorder did not start within 30 s"
                )),
            };
        }
        Ok(RecordingBeside {
            stop,
            thread: Some(thread),
            path,
            keeper,
            log,
            _dir: dir,
        })
    }

    /// Where the probe writes the histogram log the flight recorder
    /// follows (None: no flight recorder).
    pub fn flight_log(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// Stops recording and reads the recording back (with the flight
    /// recorder: what it kept).
    pub fn finish(mut self) -> Result<(Recorded, RecordSummary)> {
        self.stop.store(true, Ordering::Relaxed);
        let summary = self
            .thread
            .take()
            .map(|t| t.join())
            .ok_or_else(|| anyhow::anyhow!("--explain: the recorder was already stopped"))?
            .map_err(|_| anyhow::anyhow!("--explain: the recorder thread panicked"));
        // The keeper ends once the recorder's last window is finished.
        let kept = self.keeper.take().map(|k| k.join());
        let summary = summary??;
        if let Some(kept) = kept {
            let kept = kept.map_err(|_| anyhow::anyhow!("--explain: the flight recorder's keeper panicked"))?;
            return Ok((Recorded::Kept(Box::new(kept)), summary));
        }
        let rec = Recording::read(&self.path).with_context(|| format!("reading {}", self.path.display()))?;
        Ok((Recorded::Whole(Box::new(rec)), summary))
    }
}

/// Explains a run's late events on the recording made beside it, and
/// writes the Perfetto trace of the worst when asked.
pub fn explain(recorded: &Recorded, late: &LateSet, perfetto: Option<&Path>) -> Result<RunExplanation> {
    let rec = match recorded {
        Recorded::Whole(rec) => rec,
        Recorded::Kept(kept) => return explain_kept(kept, late, perfetto),
    };
    let x = ontime_explain::explain_run(rec, &late.events, late.late, late.threshold_ns, &late.threshold_from);
    write_perfetto(rec, x, perfetto)
}

/// A flow receiver's late datagrams: it waits for them, not for its
/// timer ([`ontime_explain::summary::explain_datagrams`]).
pub fn explain_datagrams(
    rec: &Recording,
    late: &LateSet,
    path: ontime_explain::summary::DatagramPath,
    perfetto: Option<&Path>,
) -> Result<RunExplanation> {
    write_perfetto(
        rec,
        ontime_explain::summary::explain_datagrams(rec, late, path),
        perfetto,
    )
}

fn write_perfetto(rec: &Recording, x: RunExplanation, perfetto: Option<&Path>) -> Result<RunExplanation> {
    if let Some(path) = perfetto {
        ontime_explain::perfetto::write_file(rec, &x.worst, path)?;
    }
    Ok(x)
}

/// On the windows the flight recorder kept; the trace covers the stretch
/// holding the worst event.
fn explain_kept(kept: &Kept, late: &LateSet, perfetto: Option<&Path>) -> Result<RunExplanation> {
    let set = ontime_explain::summary::StretchSet::probe(late);
    let mut x = ontime_explain::summary::explain_stretches(&kept.stretches, &[set])
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no explanation"))?;
    let s = &kept.summary;
    x.notes.push(format!(
        "flight recorder: kept {} of {} 1 s windows ({:.1} MB) around {} late intervals{}",
        s.kept,
        s.windows,
        s.bytes_kept as f64 / 1e6,
        s.triggers,
        if s.evicted > 0 {
            format!("; {} dropped over the cap", s.evicted)
        } else {
            String::new()
        }
    ));
    if let Some(path) = perfetto {
        ontime_explain::perfetto::write_kept(&kept.stretches, &x.worst, path)?;
    }
    Ok(x)
}
