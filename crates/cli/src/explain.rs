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
    /// otherwise it is deleted after the run
    #[arg(long, value_name = "FILE", requires = "explain")]
    pub keep_recording: Option<PathBuf>,
    /// Write the scheduling around the worst late events as a Perfetto
    /// trace (open it at ui.perfetto.dev): CPU tracks, thread states, the
    /// late events as slices on their probe's thread
    #[arg(long, value_name = "FILE", requires = "explain")]
    pub perfetto: Option<PathBuf>,
}

impl ExplainFlags {
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

/// A recording of every CPU's scheduler events running beside a probe;
/// stopped and joined when dropped (an error on the way), before its
/// temporary directory goes.
pub struct RecordingBeside {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<RecordSummary>>>,
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
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
    pub fn start(keep: Option<&Path>, probe_cpus: &[usize]) -> Result<RecordingBeside> {
        let (dir, path) = match keep {
            Some(p) => (None, p.to_path_buf()),
            None => {
                let d = tempfile::Builder::new()
                    .prefix("ontime-explain-")
                    .tempdir()
                    .context("a temporary directory for the --explain recording")?;
                let p = d.path().join("explain.otrec");
                (Some(d), p)
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
            window: None,
            windows_done: None,
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
            _dir: dir,
        })
    }

    /// Stops recording and reads the recording back.
    pub fn finish(mut self) -> Result<(Recording, RecordSummary)> {
        self.stop.store(true, Ordering::Relaxed);
        let summary = self
            .thread
            .take()
            .map(|t| t.join())
            .ok_or_else(|| anyhow::anyhow!("--explain: the recorder was already stopped"))?
            .map_err(|_| anyhow::anyhow!("--explain: the recorder thread panicked"))??;
        let rec = Recording::read(&self.path).with_context(|| format!("reading {}", self.path.display()))?;
        Ok((rec, summary))
    }
}

/// Explains a run's late events on the recording made beside it, and
/// writes the Perfetto trace of the worst when asked.
pub fn explain(rec: &Recording, late: &LateSet, perfetto: Option<&Path>) -> Result<RunExplanation> {
    let x = ontime_explain::explain_run(rec, &late.events, late.late, late.threshold_ns, &late.threshold_from);
    if let Some(path) = perfetto {
        ontime_explain::perfetto::write_file(rec, &x.worst, path)?;
    }
    Ok(x)
}
