//! The runner's orchestration without root: a fake host stands in for the
//! sandboxes and writes the tenants' results (a crawler result from the
//! report's committed fixture), or fails the ways a real run can. What is
//! tested is the runner's own job: run directories and `run.json`, resume,
//! the completeness rule, failures that must be loud, and stopping.

use anyhow::Result;
use ontime_lab::runner::{run_plan, Event, RunHost, RunnerOptions};
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
        if self.behaviour == Behaviour::StopDuring {
            opts.stop.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

const SCENARIO: &str = "name = 'fake'\nduration = '1s'\n[tenant]\ncount = 1\n[tenant.crawl]\nrate = 50\n[observe]\nrecorder = 'off'\n[sweep]\n\"tenant.count\" = [1, 2]\n";

fn plan() -> Plan {
    load_str(SCENARIO, Path::new("fake.toml")).unwrap()
}

/// Runs the plan on a fake host into `results`; the summaries it printed.
fn sweep(results: &Path, behaviour: Behaviour, resume: bool) -> (Result<(usize, usize)>, Vec<String>, usize) {
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
    let r = run_plan(&mut host, &plan(), SCENARIO, &opts, &mut |e| {
        if let Event::Finished { summary, .. } = e {
            lines.push(summary);
        }
    });
    assert!(host.prepared, "the host prepares before the first run");
    (r, lines, host.runs)
}

fn record(results: &Path, run: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(results.join("runs").join(run).join("run.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn good_runs_are_complete_and_resume_skips_them() {
    let dir = tempfile::tempdir().unwrap();
    let (r, lines, runs) = sweep(dir.path(), Behaviour::Good, false);
    assert_eq!(r.unwrap(), (2, 0));
    assert_eq!(runs, 2);
    assert!(dir.path().join("scenario.toml").exists() && dir.path().join("plan.json").exists());
    for run in ["000-count=1-rep1", "001-count=2-rep1"] {
        let rec = record(dir.path(), run);
        assert_eq!(rec["complete"], true, "{rec}");
        assert!(rec["error"].is_null(), "{rec}");
        assert!(!rec["finished_utc"].as_str().unwrap_or("").is_empty());
    }
    assert!(
        lines.iter().all(|l| l.starts_with("interval error worst p99")),
        "{lines:?}"
    );
    // Resumed: both complete, nothing run again.
    let (r, _, runs) = sweep(dir.path(), Behaviour::Good, true);
    assert_eq!(r.unwrap(), (0, 2));
    assert_eq!(runs, 0);
}

#[test]
fn a_tenant_without_a_result_fails_the_run_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let (r, lines, runs) = sweep(dir.path(), Behaviour::LoseTenant0, false);
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("000-count=1-rep1") && e.contains("t0 (exit 1) wrote no result"),
        "{e}"
    );
    assert_eq!(runs, 1, "the sweep stops at the failed run");
    let rec = record(dir.path(), "000-count=1-rep1");
    assert_eq!(rec["complete"], false);
    assert!(rec["error"].as_str().unwrap().contains("wrote no result"), "{rec}");
    assert!(lines[0].starts_with("failed:"), "{lines:?}");
}

#[test]
fn a_requested_recorder_that_failed_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (r, lines, _) = sweep(dir.path(), Behaviour::RecorderFails, false);
    let e = format!("{:#}", r.unwrap_err());
    assert!(e.contains("the I/O recorder ([observe] io) failed"), "{e}");
    assert!(lines[0].contains("I/O recorder"), "the run's line says so: {lines:?}");
    assert_eq!(record(dir.path(), "000-count=1-rep1")["complete"], false);
}

#[test]
fn a_host_failure_is_recorded_and_returned() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _, _) = sweep(dir.path(), Behaviour::HostFails, false);
    assert!(format!("{:#}", r.unwrap_err()).contains("the relay could not start"));
    let rec = record(dir.path(), "000-count=1-rep1");
    assert_eq!(rec["complete"], false);
    assert!(rec["error"].as_str().unwrap().contains("relay"));
}

#[test]
fn a_stop_ends_the_sweep_with_the_run_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _, runs) = sweep(dir.path(), Behaviour::StopDuring, false);
    assert_eq!(r.unwrap(), (1, 0), "the stopped run is written, the next not started");
    assert_eq!(runs, 1);
    let rec = record(dir.path(), "000-count=1-rep1");
    assert_eq!(rec["complete"], false, "a stopped run is not complete");
    assert!(rec["error"].is_null(), "and not an error");
    assert!(!dir.path().join("runs/001-count=2-rep1").exists());
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
