//! `ontime lab run`: runs every combination of a scenario, one run at a
//! time, each in a fresh lab (relay, building side, tenants, loads,
//! probes), streaming raw results into `DIR/runs/<run>/`:
//! `run.json` (written last, with `complete`), the probes' JSON results,
//! histogram logs and output, and the relay's measured delay.

use anyhow::{bail, Context, Result};
use ontime_core::caps::Capabilities;
use ontime_core::fsio::write_atomic;
use ontime_core::manifest::Manifest;
use ontime_scenario::record::{model_note, Environment, RunRecord, WanDelayBy, Workload};
use ontime_scenario::scenario::{Plan, PlannedRun};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct RunnerOptions {
    pub results: PathBuf,
    pub resume: bool,
    /// The ontime binary to run probes and gateways with.
    pub exe: PathBuf,
    pub stop: Arc<AtomicBool>,
}

/// Progress events for the caller to show.
pub enum Event<'a> {
    Skipped {
        run: &'a PlannedRun,
    },
    Started {
        run: &'a PlannedRun,
        total: usize,
        remaining_ns: u64,
    },
    Tick {
        run: &'a PlannedRun,
        elapsed_ns: u64,
    },
    Finished {
        run: &'a PlannedRun,
        summary: String,
        /// A stop (Ctrl-C, SIGTERM) ended the run before its end: its
        /// record is written incomplete and `summary` covers what it made.
        interrupted: bool,
    },
}

/// What a sweep came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SweepOutcome {
    /// Runs of the plan.
    pub planned: usize,
    /// Runs made now and complete.
    pub done: usize,
    /// Runs skipped as complete already (`--resume`).
    pub skipped: usize,
    /// A stop ended the sweep before its end, during a run (written
    /// incomplete) or between runs; no run started after it.
    pub interrupted: bool,
}

impl SweepOutcome {
    /// Runs of the plan complete in the results directory.
    pub fn complete(&self) -> usize {
        self.done + self.skipped
    }
}

/// What makes one run happen on this host. The lab's own is
/// `stages::Sandboxes` (namespaces, cgroups, the relay: root);
/// tests give the orchestration below a host that writes results without
/// any of that.
pub trait RunHost {
    /// Before the first run: what must hold for the whole sweep (the
    /// sandboxes' root check and host-wide lab lock), released on drop.
    fn prepare(&mut self, plan: &Plan) -> Result<Box<dyn std::any::Any>>;
    /// One run into `dir`: the tenants' results there and `rec` filled in
    /// (tenants, relay, recorders); `run.json` is the caller's.
    fn run(
        &mut self,
        run: &PlannedRun,
        dir: &Path,
        opts: &RunnerOptions,
        rec: &mut RunRecord,
        on: &mut dyn FnMut(Event),
    ) -> Result<()>;
}

pub fn run_dir(results: &Path, run: &PlannedRun) -> PathBuf {
    results.join("runs").join(run.dir_name())
}

/// True when a run's record says it completed (an unreadable record is
/// not complete: the run is made again).
pub fn is_complete(dir: &Path) -> bool {
    ontime_scenario::results::read_record(dir)
        .map(|r| r.complete)
        .unwrap_or(false)
}

/// Runs the whole plan, until its end or a stop. A run that fails ends
/// the sweep with its error (its record written); a stop does not: the
/// outcome says the sweep was interrupted.
pub fn run_plan(
    host: &mut dyn RunHost,
    plan: &Plan,
    scenario_text: &str,
    opts: &RunnerOptions,
    on: &mut dyn FnMut(Event),
) -> Result<SweepOutcome> {
    let _held = host.prepare(plan)?;
    std::fs::create_dir_all(opts.results.join("runs"))
        .with_context(|| format!("cannot create {}", opts.results.display()))?;
    write_atomic(&opts.results.join("scenario.toml"), scenario_text.as_bytes())?;
    write_atomic(
        &opts.results.join("plan.json"),
        serde_json::to_string_pretty(plan)?.as_bytes(),
    )?;
    let (mut done, mut skipped) = (0, 0);
    let mut interrupted = false;
    let mut overheads = 0u64;
    for (i, run) in plan.runs.iter().enumerate() {
        if opts.stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        // Absolute: a tenant with a disk runs in its own mount namespace,
        // where entering resets the working directory to /.
        let dir = std::path::absolute(run_dir(&opts.results, run))
            .with_context(|| format!("cannot resolve {}", opts.results.display()))?;
        if opts.resume && is_complete(&dir) {
            on(Event::Skipped { run });
            skipped += 1;
            continue;
        }
        // A run costs its duration plus setting up, recording and
        // analysing; once runs have been made here, their measured
        // overhead replaces the plan's guess.
        let overhead = overheads
            .checked_div(done as u64)
            .unwrap_or(ontime_scenario::scenario::RUN_OVERHEAD_NS);
        let remaining: u64 = plan.runs[i..]
            .iter()
            .filter(|r| !(opts.resume && is_complete(&run_dir(&opts.results, r))))
            .map(|r| r.config.duration + overhead)
            .sum();
        on(Event::Started {
            run,
            total: plan.runs.len(),
            remaining_ns: remaining,
        });
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        let wall = std::time::Instant::now();
        let started = ontime_core::manifest::utc_now();
        let mut record = RunRecord::new(
            run,
            Environment {
                cgroup_version: crate::cgroup::detect(),
                ..Environment::new(
                    Manifest::start(run.config.tenant.backend.as_str(), Capabilities::probe()),
                    WanDelayBy::Relay,
                    model_note(run.config.tenant.backend).into(),
                )
            },
            started,
        );
        let outcome = host
            .run(run, &dir, opts, &mut record, on)
            .and_then(|()| recorders_worked(&record));
        record.finished_utc = ontime_core::manifest::utc_now();
        record.environment.manifest.finish();
        let stopped = opts.stop.load(Ordering::Relaxed);
        // A run that ended without an error, uninterrupted, yet without
        // every tenant's result is a failure, said so.
        let outcome = outcome.and_then(|()| {
            let missing: Vec<String> = record
                .tenants
                .iter()
                .filter(|t| t.result.is_none())
                .map(|t| {
                    format!(
                        "t{} (exit {})",
                        t.index,
                        t.exit.map_or("unknown".into(), |c| c.to_string())
                    )
                })
                .collect();
            if stopped || missing.is_empty() {
                Ok(())
            } else {
                Err(anyhow::anyhow!("tenant(s) {} wrote no result", missing.join(", ")))
            }
        });
        match &outcome {
            Ok(()) => record.complete = !stopped,
            Err(e) => record.error = Some(format!("{e:#}")),
        }
        write_atomic(&dir.join("run.json"), serde_json::to_string_pretty(&record)?.as_bytes())?;
        let summary = summarize(&dir, &record);
        on(Event::Finished {
            run,
            summary,
            interrupted: outcome.is_ok() && stopped,
        });
        outcome.with_context(|| format!("run {}", run.dir_name()))?;
        if stopped {
            // Written, incomplete: not done, and nothing after it starts.
            interrupted = true;
            break;
        }
        overheads += (wall.elapsed().as_nanos() as u64).saturating_sub(run.config.duration);
        done += 1;
    }
    Ok(SweepOutcome {
        planned: plan.runs.len(),
        done,
        skipped,
        interrupted,
    })
}

/// A recorder the scenario asked for that failed fails the run: its
/// figures would be missing from the report, and a run that only says so
/// in run.json passes for a good one.
fn recorders_worked(rec: &RunRecord) -> Result<()> {
    if let Some(e) = rec.io.as_ref().and_then(|o| o.error.as_ref()) {
        bail!("the I/O recorder ([observe] io) failed: {e}");
    }
    if let Some(e) = rec.observe.as_ref().and_then(|o| o.error.as_ref()) {
        bail!("the scheduler recorder ([observe] recorder) failed: {e}");
    }
    Ok(())
}

/// One line about a finished run.
fn summarize(dir: &Path, rec: &RunRecord) -> String {
    if let Some(e) = &rec.error {
        return format!("failed: {e}");
    }
    if rec.workload == Workload::Io {
        let results: Vec<ontime_io::workload::WorkloadResult> = rec
            .tenants
            .iter()
            .filter_map(|t| t.result.as_ref())
            .filter_map(|f| ontime_scenario::results::read_json(&dir.join(f), "I/O workload result").ok())
            .collect();
        let mean = results.iter().map(|r| r.throughput_bps).sum::<f64>() / results.len().max(1) as f64;
        let p99 = results.iter().filter_map(|r| r.latency.percentile(99.0)).max();
        if rec.config.tenant.io.as_ref().is_some_and(|io| !io.command.is_empty()) {
            let longest = results.iter().map(|r| r.elapsed_ns).max().unwrap_or(0);
            return format!(
                "{} tenant(s) ran the command, the longest for {} (bytes per layer in io.txt)",
                results.len(),
                ontime_core::duration::format_ns(longest)
            );
        }
        return format!(
            "{} tenant(s), {:.1} MiB/s mean{}",
            results.len(),
            mean / 1048576.0,
            p99.map(|v| format!(", worst p99 {}", ontime_core::duration::format_ns(v)))
                .unwrap_or_default()
        );
    }
    let mut worst_p = None::<u64>;
    let mut worst_max = 0u64;
    let mut missed = 0u64;
    for t in &rec.tenants {
        let Some(f) = &t.result else { continue };
        let Ok(r) = ontime_scenario::results::ProbeResult::read(&dir.join(f), rec.workload) else {
            continue;
        };
        let s = r.headline();
        worst_max = worst_max.max(s.max_ns.unwrap_or(0));
        worst_p = worst_p.max(s.percentile(99.0));
        missed += r.missed();
    }
    let what = rec.workload.metric();
    let relay = rec
        .relay
        .as_ref()
        .and_then(|r| r.delay.percentile(99.0))
        .map(|v| format!(", relay delay p99 {}", ontime_core::duration::format_ns(v)))
        .unwrap_or_default();
    format!(
        "{what} worst p99 {} max {}, {} {missed}{relay}",
        worst_p
            .map(ontime_core::duration::format_ns)
            .unwrap_or_else(|| "n/a".into()),
        ontime_core::duration::format_ns(worst_max),
        rec.workload.misses(),
    )
}
