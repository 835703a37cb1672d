//! The runner's orchestration without root: a fake host stands in for the
//! sandboxes and writes the tenants' results (a crawler result from the
//! report's committed fixture), or fails the ways a real run can. What is
//! tested is the runner's own job: run directories and `run.json`, resume,
//! the completeness rule, failures that must be loud, and stopping.

use anyhow::Result;
use ontime_lab::runner::{run_plan, Event, RunHost, RunnerOptions, SweepOutcome};
use ontime_scenario::record::{IoOutcome, RunRecord, TenantOutcome};
use ontime_scenario::scenario::{load_str, Plan, PlannedRun};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What the fake host does in each run.
#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    /// Every tenant writes its result.
    Good,
    /// Tenant 0 exits 1 without a result.
    LoseTenant0,
    /// The I/O recorder the scenario asked for failed.
    RecorderFails,
    /// The host itself fails (a stage could not start).
    HostFails,
    /// The user stops the sweep during the run.
    StopDuring,
    /// The user stops the sweep during its last run.
    StopDuringLast,
}

struct FakeHost {
    behaviour: Behaviour,
    runs: usize,
    prepared: bool,
}

fn crawl_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/fixtures/golden-lab/runs/000-count=1-rep1/t0.json")
}

impl RunHost for FakeHost {
    fn prepare(&mut self, _plan: &ontime_scenario::scenario::Plan) -> Result<Box<dyn std::any::Any>> {
        self.prepared = true;
        Ok(Box::new(()))
    }

    fn run(
        &mut self,
        run: &PlannedRun,
        dir: &Path,
        opts: &RunnerOptions,
        rec: &mut RunRecord,
        on: &mut dyn FnMut(Event),
    ) -> Result<()> {
        self.runs += 1;
        if self.behaviour == Behaviour::HostFails {
            anyhow::bail!("the relay could not start");
        }
        on(Event::Tick { run, elapsed_ns: 0 });
        for i in 0..run.config.tenant.count {
            let lost = self.behaviour == Behaviour::LoseTenant0 && i == 0;
            if !lost {
                std::fs::copy(crawl_fixture(), dir.join(format!("t{i}.json")))?;
            }
            rec.tenants.push(TenantOutcome {
                index: i,
                result: (!lost).then(|| format!("t{i}.json")),
                exit: Some(if lost { 1 } else { 0 }),
            });
        }
        if self.behaviour == Behaviour::RecorderFails {
            rec.io = Some(IoOutcome {
                error: Some("attaching the BPF I/O probes failed".into()),
                ..Default::default()
            });
        }
        let last = run.index + 1 == plan().runs.len();
        if self.behaviour == Behaviour::StopDuring || (self.behaviour == Behaviour::StopDuringLast && last) {
            opts.stop.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

const SCENARIO: &str = "name = 'fake'\nduration = '1s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 50\n[observe]\nrecorder = 'off'\n[sweep]\n\"tenant.count\" = [1, 2]\n";

fn plan() -> Plan {
    load_str(SCENARIO, Path::new("fake.toml")).unwrap()
}

/// What a sweep on the fake host gave.
struct Swept {
    outcome: Result<SweepOutcome>,
    /// Each finished run's summary line, and whether a stop cut it.
    lines: Vec<(String, bool)>,
    /// Runs the host was asked to make.
    runs: usize,
}

/// What a sweep of `done` runs made and `skipped` skipped, of two.
fn sweep_of(done: usize, skipped: usize, interrupted: bool) -> SweepOutcome {
    SweepOutcome {
        planned: 2,
        done,
        skipped,
        interrupted,
    }
}

/// Runs the plan on a fake host into `results`.
fn sweep(results: &Path, behaviour: Behaviour, resume: bool) -> Swept {
    let opts = RunnerOptions {
        results: results.to_path_buf(),
        resume,
        exe: PathBuf::from("/nonexistent/ontime"),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let mut host = FakeHost {
        behaviour,
        runs: 0,
        prepared: false,
    };
    let mut lines = Vec::new();
    let outcome = run_plan(&mut host, &plan(), SCENARIO, &opts, &mut |e| {
        if let Event::Finished {
            summary, interrupted, ..
        } = e
        {
            lines.push((summary, interrupted));
        }
    });
    assert!(host.prepared, "the host prepares before the first run");
    Swept {
        outcome,
        lines,
        runs: host.runs,
    }
}

fn record(results: &Path, run: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(results.join("runs").join(run).join("run.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn good_runs_are_complete_and_resume_skips_them() {
    let dir = tempfile::tempdir().unwrap();
    let s = sweep(dir.path(), Behaviour::Good, false);
    assert_eq!(s.outcome.unwrap(), sweep_of(2, 0, false));
    assert_eq!(s.runs, 2);
    assert!(dir.path().join("scenario.toml").exists() && dir.path().join("plan.json").exists());
    for run in ["000-count=1-rep1", "001-count=2-rep1"] {
        let rec = record(dir.path(), run);
        assert_eq!(rec["complete"], true, "{rec}");
        assert!(rec["error"].is_null(), "{rec}");
        assert!(!rec["finished_utc"].as_str().unwrap_or("").is_empty());
    }
    assert!(
        s.lines
            .iter()
            .all(|(l, cut)| l.starts_with("interval error worst p99") && !cut),
        "{:?}",
        s.lines
    );
    // Resumed: both complete, nothing run again.
    let s = sweep(dir.path(), Behaviour::Good, true);
    assert_eq!(s.outcome.unwrap(), sweep_of(0, 2, false));
    assert_eq!(s.runs, 0);
}

#[test]
fn a_tenant_without_a_result_fails_the_run_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let s = sweep(dir.path(), Behaviour::LoseTenant0, false);
    let e = format!("{:#}", s.outcome.unwrap_err());
    assert!(
        e.contains("000-count=1-rep1") && e.contains("t0 (exit 1) wrote no result"),
        "{e}"
    );
    assert_eq!(s.runs, 1, "the sweep stops at the failed run");
    let rec = record(dir.path(), "000-count=1-rep1");
    assert_eq!(rec["complete"], false);
    assert!(rec["error"].as_str().unwrap().contains("wrote no result"), "{rec}");
    assert!(s.lines[0].0.starts_with("failed:"), "{:?}", s.lines);
    assert!(!s.lines[0].1, "a failed run is not an interrupted one");
}

#[test]
fn a_requested_recorder_that_failed_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let s = sweep(dir.path(), Behaviour::RecorderFails, false);
    let e = format!("{:#}", s.outcome.unwrap_err());
    assert!(e.contains("the I/O recorder ([observe] io) failed"), "{e}");
    assert!(
        s.lines[0].0.contains("I/O recorder"),
        "the run's line says so: {:?}",
        s.lines
    );
    assert_eq!(record(dir.path(), "000-count=1-rep1")["complete"], false);
}

#[test]
fn a_host_failure_is_recorded_and_returned() {
    let dir = tempfile::tempdir().unwrap();
    let s = sweep(dir.path(), Behaviour::HostFails, false);
    assert!(format!("{:#}", s.outcome.unwrap_err()).contains("the relay could not start"));
    let rec = record(dir.path(), "000-count=1-rep1");
    assert_eq!(rec["complete"], false);
    assert!(rec["error"].as_str().unwrap().contains("relay"));
}

#[test]
fn a_stop_ends_the_sweep_with_the_run_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let s = sweep(dir.path(), Behaviour::StopDuring, false);
    assert_eq!(
        s.outcome.unwrap(),
        sweep_of(0, 0, true),
        "the stopped run is written but not done, the next not started"
    );
    assert_eq!(s.runs, 1);
    assert_eq!(s.lines.len(), 1);
    assert!(s.lines[0].1, "its line says it was interrupted");
    let rec = record(dir.path(), "000-count=1-rep1");
    assert_eq!(rec["complete"], false, "a stopped run is not complete");
    assert!(rec["error"].is_null(), "and not an error");
    assert!(!dir.path().join("runs/001-count=2-rep1").exists());
}

/// Ctrl-C during run 3 of 3 printed "[3/3] done ... 3 run(s) done" and
/// exited 0 with that run's record incomplete. The outcome and the run's
/// line now say the sweep was interrupted, whether the stop came during
/// the last run or between runs.
#[test]
fn a_stop_during_the_last_run_is_an_interrupted_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let s = sweep(dir.path(), Behaviour::StopDuringLast, false);
    let outcome = s.outcome.unwrap();
    assert_eq!(outcome, sweep_of(1, 0, true));
    assert_eq!(outcome.complete(), 1, "1 of 2 runs complete");
    assert_eq!(s.runs, 2);
    let cut: Vec<bool> = s.lines.iter().map(|(_, cut)| *cut).collect();
    assert_eq!(cut, [false, true]);
    assert_eq!(record(dir.path(), "000-count=1-rep1")["complete"], true);
    assert_eq!(record(dir.path(), "001-count=2-rep1")["complete"], false);
    // Resumed after it: the complete run is skipped, the cut one made.
    let s = sweep(dir.path(), Behaviour::Good, true);
    assert_eq!(s.outcome.unwrap(), sweep_of(1, 1, false));
}

/// A stop that comes between runs (after one run's record is written,
/// before the next starts) is the same interruption.
#[test]
fn a_stop_between_runs_is_an_interrupted_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let opts = RunnerOptions {
        results: dir.path().to_path_buf(),
        resume: false,
        exe: PathBuf::from("/nonexistent/ontime"),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let mut host = FakeHost {
        behaviour: Behaviour::Good,
        runs: 0,
        prepared: false,
    };
    let stop = opts.stop.clone();
    let outcome = run_plan(&mut host, &plan(), SCENARIO, &opts, &mut |e| {
        if let Event::Finished { .. } = e {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert_eq!(outcome, sweep_of(1, 0, true));
    assert_eq!(host.runs, 1);
}

/// The real knob, as root (CI): set for a run and back afterwards.
#[test]
fn the_rr_time_slice_is_set_and_restored() {
    if unsafe { libc::geteuid() } != 0 || !std::path::Path::new(ontime_core::sysctl::RR_TIMESLICE).exists() {
        ontime_testkit::skip("needs root and /proc/sys/kernel/sched_rr_timeslice_ms");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let before = std::fs::read_to_string(ontime_core::sysctl::RR_TIMESLICE).unwrap();
    let other = if before.trim() == "7" { "9" } else { "7" };
    {
        let g = ontime_core::sysctl::SysctlGuard::set_in(
            d.path(),
            std::path::Path::new(ontime_core::sysctl::RR_TIMESLICE),
            other,
        )
        .unwrap();
        assert_eq!(g.current().unwrap(), other);
    }
    assert_eq!(
        std::fs::read_to_string(ontime_core::sysctl::RR_TIMESLICE).unwrap(),
        before
    );
}
