//! The scheduler recorder of a run: `ontime observe` on the tenants'
//! cgroups and the host I/O path (or `perf sched record`, the peer in the
//! overhead benchmark), plus the host's busy CPU over the run.
use ontime_core::export::TextReport;
use ontime_core::proc::{ChildProcess, SpawnOptions};
use ontime_profile::ProfileText;
use ontime_scenario::probe::FlightPlan;
use ontime_scenario::record::{FlightOutcome, ObserveOutcome};
use ontime_scenario::scenario::Recorder;
use ontime_trace::flight;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use ontime_core::time::MonoNs;
use ontime_sched::analyze::AnalysisOptions;
use ontime_trace::recorder::{record, Mechanism, NoSink, RecordOptions, RecordSummary};
use ontime_trace::recording::Recording;
use ontime_trace::targets::{CgroupRoot, TargetGroup, Targets, DEFAULT_HOST_IO};

use crate::names;
use crate::sandbox::Lab;

/// Windows of the per-run analysis; the series kept is the 100 ms one.
pub const WINDOWS: [u64; 4] = [1_000_000, 10_000_000, 100_000_000, 1_000_000_000];
const SERIES_WINDOW: u64 = 100_000_000;

/// Stops the recorder if a run fails before `finish`.
pub struct StopOnDrop(pub Arc<AtomicBool>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub enum Observer {
    Ontime {
        stop: StopOnDrop,
        handle: JoinHandle<Result<RecordSummary>>,
        /// The flight recorder's keeper, when the run has one.
        flight: Option<JoinHandle<flight::Kept>>,
        busy0: Option<u64>,
        t0: MonoNs,
    },
    Perf {
        /// perf writes its data on SIGINT; stopped so if a run fails.
        child: ChildProcess,
        busy0: Option<u64>,
        t0: MonoNs,
    },
    Off {
        busy0: Option<u64>,
        t0: MonoNs,
    },
}

/// Busy (non-idle, non-iowait) time of all CPUs, steal included, ns.
fn host_busy_ns() -> Option<u64> {
    ontime_core::cputime::CpuTimes::now().map(|c| c.busy_ns() + c.steal_ns)
}

/// Starts the recorder chosen by `observe.recorder` once the lab, its relay
/// and gateway exist and before loads and probes start. Its threads run on
/// `housekeeping` (unpinned when empty): a recorder draining a flood's
/// events on the tenant's CPU is itself a cause of the lateness it records.
/// `all_wakeups`: record every task's wake-ups, not only the tenants' and
/// the host I/O path's (a `[net]` run's flow receivers are the lab's own
/// processes, in no tenant).
pub fn start(
    recorder: Recorder,
    sample_hz: Option<u32>,
    flight: Option<FlightPlan>,
    housekeeping: &[usize],
    all_wakeups: bool,
    lab: &Lab,
    dir: &Path,
) -> Result<Observer> {
    let busy0 = host_busy_ns();
    match recorder {
        Recorder::Off => Ok(Observer::Off {
            busy0,
            t0: MonoNs::now(),
        }),
        Recorder::Perf => {
            let mut cmd = std::process::Command::new("perf");
            cmd.args(["sched", "record", "-a", "-q", "-o"])
                .arg(dir.join("perf.data"))
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(dir.join("perf.err"))?);
            let child = ChildProcess::spawn(
                "perf (observe.recorder = \"perf\"; scripts/setup.sh installs linux-perf)",
                &mut cmd,
                SpawnOptions {
                    stop_signal: libc::SIGINT,
                    grace: Duration::from_secs(30),
                    affinity: housekeeping.to_vec(),
                    ..Default::default()
                },
            )?;
            // perf needs a moment to open its events on every CPU.
            std::thread::sleep(Duration::from_millis(500));
            Ok(Observer::Perf {
                child,
                busy0,
                t0: MonoNs::now(),
            })
        }
        Recorder::Ontime => {
            let root = CgroupRoot::detect()?;
            let groups = lab
                .tenants
                .iter()
                .filter(|t| t.cgroup.is_some())
                .map(|t| -> Result<TargetGroup> {
                    let path = root.resolve(&names::tenant_cgroup(t.index))?;
                    Ok(TargetGroup::cgroup(&names::tenant_name(t.index), path, true))
                })
                .collect::<Result<Vec<_>>>()?;
            let (output, window, windows_done, keeper) = match flight {
                None => (dir.join(RECORDING), None, None, None),
                Some(plan) => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    let cpus = housekeeping.to_vec();
                    let keeper = std::thread::Builder::new()
                        .name("ontime-flight".into())
                        .spawn(move || {
                            pin_or_say(&cpus);
                            ontime_trace::flight::keep(plan.options, &plan.logs, rx)
                        })?;
                    (dir.join(FLIGHT_DIR), Some(flight::WINDOW), Some(tx), Some(keeper))
                }
            };
            let opts = RecordOptions {
                targets: Targets {
                    groups,
                    everything: all_wakeups,
                    host_io: DEFAULT_HOST_IO.iter().map(|s| s.to_string()).collect(),
                },
                output: Some(output),
                drain_every: Duration::from_millis(100),
                measure_overhead: true,
                mechanism: Mechanism::Auto,
                sample_hz,
                window,
                windows_done,
            };
            let cpus = housekeeping.to_vec();
            let (stop, handle) = spawn_recorder("observe", move |stop, ready| {
                pin_or_say(&cpus);
                record(&opts, stop, None, &mut NoSink, ready)
            })?;
            Ok(Observer::Ontime {
                stop,
                handle,
                flight: keeper,
                busy0,
                t0: MonoNs::now(),
            })
        }
    }
}

/// Pins the calling thread to `cpus`; a recorder that cannot be pinned
/// still records, and says so.
fn pin_or_say(cpus: &[usize]) {
    if let Err(e) = ontime_core::rt::set_affinity(cpus) {
        ontime_core::errln!("ontime lab: the recorder stays unpinned: {e:#}");
    }
}

/// A run's whole recording.
pub const RECORDING: &str = "observe.otrec";
/// The flight recorder's windows.
pub const FLIGHT_DIR: &str = "observe";

/// Runs a recorder (`record(stop, ready)`) on its own thread and waits up
/// to 20 s for it to call `ready` (its probes attached); a recorder that
/// fails or does not start in time is stopped and its error returned.
pub fn spawn_recorder<T: Send + 'static>(
    name: &str,
    record: impl FnOnce(&AtomicBool, &mut dyn FnMut(u64)) -> Result<T> + Send + 'static,
) -> Result<(StopOnDrop, JoinHandle<Result<T>>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new().name(name.into()).spawn(move || {
        record(&stop2, &mut |_| {
            let _ = tx.send(());
        })
    })?;
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => Ok((StopOnDrop(stop), handle)),
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            let err = match handle.join() {
                Ok(Err(e)) => format!("{e:#}"),
                _ => format!("the {name} recorder did not start within 20 s"),
            };
            anyhow::bail!("{err}")
        }
    }
}

impl Observer {
    /// Stops recording; analyses an ontime recording into observe.json.
    pub fn finish(self, dir: &Path) -> ObserveOutcome {
        let busy = |busy0: Option<u64>, t0: MonoNs| {
            let span = MonoNs::now().since(t0).max(1);
            let pct = match (busy0, host_busy_ns()) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 * 100.0 / span as f64),
                _ => None,
            };
            (span, pct)
        };
        match self {
            Observer::Off { busy0, t0 } => {
                let (span_ns, host_busy_pct) = busy(busy0, t0);
                ObserveOutcome {
                    recorder: "off".into(),
                    span_ns,
                    host_busy_pct,
                    ..Default::default()
                }
            }
            Observer::Perf { mut child, busy0, t0 } => {
                let (span_ns, host_busy_pct) = busy(busy0, t0);
                let (_, ru) = child.stop_with_usage();
                let cpu = ru.map(|ru| ontime_core::time::rusage_cpu_ns(&ru)).unwrap_or(0);
                let data = dir.join("perf.data");
                let bytes = std::fs::metadata(&data).map(|m| m.len()).ok();
                // The data is only the peer's cost; it is not analysed.
                let _ = std::fs::remove_file(&data);
                ObserveOutcome {
                    recorder: "perf".into(),
                    span_ns,
                    cpu_ns: Some(cpu),
                    overhead_pct: Some(cpu as f64 * 100.0 / span_ns as f64),
                    bytes,
                    host_busy_pct,
                    ..Default::default()
                }
            }
            Observer::Ontime {
                stop,
                handle,
                flight,
                busy0,
                t0,
            } => {
                let (span_ns, host_busy_pct) = busy(busy0, t0);
                stop.0.store(true, Ordering::Relaxed);
                let mut out = ObserveOutcome {
                    recorder: "ontime".into(),
                    span_ns,
                    host_busy_pct,
                    ..Default::default()
                };
                let summary = handle.join();
                // The keeper ends once the recorder's windows are all
                // finished (its channel closes with the recorder).
                let kept = flight.map(|k| k.join());
                let summary = match summary {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        out.error = Some(format!("{e:#}"));
                        return out;
                    }
                    Err(_) => {
                        out.error = Some("the recorder thread panicked".into());
                        return out;
                    }
                };
                out.cpu_ns = Some(summary.reader_cpu_ns + summary.bpf_run_ns.unwrap_or(0));
                out.overhead_pct = Some(summary.overhead_pct());
                out.events = Some(summary.events);
                out.lost = Some(summary.lost);
                if let Some(kept) = kept {
                    out.file = Some(FLIGHT_DIR.into());
                    let Ok(kept) = kept else {
                        out.error = Some("the flight recorder's keeper panicked".into());
                        return out;
                    };
                    out.bytes = Some(kept.summary.bytes_kept);
                    out.flight = Some(FlightOutcome {
                        ring: kept.summary.clone(),
                        rss_first_minute_bytes: kept.rss_first_minute_bytes,
                        rss_peak_bytes: kept.rss_peak_bytes,
                        rss_by_minute_bytes: kept.rss_by_minute_bytes.clone(),
                    });
                    if let Err(e) = explain_kept(&kept.stretches, dir) {
                        out.error = Some(format!("explaining the kept windows: {e:#}"));
                    }
                    return out;
                }
                let file = dir.join(RECORDING);
                out.file = Some(RECORDING.into());
                out.bytes = std::fs::metadata(&file).map(|m| m.len()).ok();
                match analyse(&file, dir) {
                    Ok(sampled) => {
                        out.analysis = Some("observe.json".into());
                        out.profile = sampled.then(|| "profile.json".into());
                    }
                    Err(e) => out.error = Some(format!("analysis: {e:#}")),
                }
                out
            }
        }
    }
}

/// A run's Perfetto trace: the recording around its tenants' worst events.
pub const PERFETTO_TRACE: &str = "trace.pftrace";

/// explain.json and the Perfetto trace from the windows a flight recorder
/// kept (no observe.json: the aggregates need the whole recording).
fn explain_kept(stretches: &[Vec<PathBuf>], dir: &Path) -> Result<()> {
    let Some(first) = stretches.first().and_then(|s| s.first()) else {
        return Ok(());
    };
    let tenants = Recording::read_meta(first)?.groups.len();
    let Some(x) = ontime_explain::kept::explain_tenants_in(stretches, dir, tenants)? else {
        return Ok(());
    };
    ontime_core::fsio::write_atomic(&dir.join("explain.json"), &serde_json::to_vec(&x)?)?;
    // The trace around the worst event of all, on the stretch holding it.
    let worst: Vec<_> = x
        .tenants
        .values()
        .flat_map(|t| t.explanation.worst.iter().cloned())
        .collect();
    if let Err(e) = ontime_explain::perfetto::write_kept(stretches, &worst, &dir.join(PERFETTO_TRACE)) {
        ontime_core::errln!("ontime lab: {}: no Perfetto trace: {e:#}", dir.display());
    }
    Ok(())
}

/// observe.json and observe.txt; with stack samples also profile.json,
/// profile.pb.gz and profile/ (figures). True when it profiled.
fn analyse(file: &Path, dir: &Path) -> Result<bool> {
    let rec = Recording::read(file)?;
    let mut a = ontime_sched::analyze(
        &rec,
        &AnalysisOptions {
            windows: WINDOWS.to_vec(),
            series: true,
        },
    );
    for g in &mut a.groups {
        for u in &mut g.usage {
            if u.window_ns != SERIES_WINDOW {
                u.series = None;
            }
        }
    }
    ontime_core::fsio::write_atomic(&dir.join("observe.json"), &serde_json::to_vec(&a)?)?;
    ontime_core::fsio::write_atomic(
        &dir.join("observe.txt"),
        ontime_observe::report::AnalysisText {
            analysis: &a,
            vcpus: true,
        }
        .text()
        .as_bytes(),
    )?;
    // Why each tenant's late polls or wake-ups were late (its probe kept
    // them: `keep_worst` in the probe spec), and with causes injected at
    // known times (`[[inject]]`) how that scores, on one time line of this
    // recording. The run stands without them.
    let (explained, truth) = match ontime_explain::truth::explain_and_check(&rec, dir, rec.meta.groups.len()) {
        Ok(x) => x,
        Err(e) => {
            ontime_core::errln!(
                "ontime lab: {}: no explanation of the late events: {e:#}",
                dir.display()
            );
            (None, None)
        }
    };
    if let Some(x) = explained {
        ontime_core::fsio::write_atomic(&dir.join("explain.json"), &serde_json::to_vec(&x)?)?;
        // The scheduling around every tenant's worst events, for
        // ui.perfetto.dev (a guest's threads are not this recording's).
        let worst: Vec<_> = x
            .tenants
            .values()
            .filter(|t| !t.guest)
            .flat_map(|t| t.explanation.worst.iter().cloned())
            .collect();
        if let Err(e) = ontime_explain::perfetto::write_file(&rec, &worst, &dir.join(PERFETTO_TRACE)) {
            ontime_core::errln!("ontime lab: {}: no Perfetto trace: {e:#}", dir.display());
        }
    }
    if let Some(t) = truth {
        ontime_core::fsio::write_atomic(&dir.join("truth.json"), &serde_json::to_vec(&t)?)?;
    }
    if rec.meta.sample_period_ns.is_none() {
        return Ok(false);
    }
    let p = ontime_profile::profile(&rec)?;
    ontime_core::fsio::write_atomic(&dir.join("profile.json"), &serde_json::to_vec(&p.report)?)?;
    ontime_core::fsio::write_atomic(
        &dir.join("profile.txt"),
        ProfileText {
            report: &p.report,
            top: 30,
            view: ontime_profile::FunctionView::Program,
        }
        .text()
        .as_bytes(),
    )?;
    p.write_pprof(&dir.join("profile.pb.gz"))?;
    p.write_figures(&dir.join("profile"))?;
    Ok(true)
}
