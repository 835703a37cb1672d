//! A lab results directory read back as types: `run.json` as a
//! [`RunRecord`], each tenant's probe result as a [`ProbeResult`], and the
//! run's pooled histogram. A file whose fields have the wrong types is an
//! error naming the file and the field, never a report of zero samples.
//! A result file that is not what its name says is bad input
//! ([`BadInput`]: the CLI exits 2), not a failure of ontime.

use crate::record::{RunRecord, Workload};
use anyhow::Result;
use ontime_core::stats::{LatencyHistogram, Summary};
use ontime_core::BadInput;
use ontime_crawl::CrawlResult;
use ontime_cyclic::CyclicResult;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// The largest `run.json` read. The runner's hold a few hundred bytes per
/// tenant beside the run's settings and summaries: under 1 MiB at the
/// scenario's 200 tenants.
pub const MAX_RUN_RECORD_BYTES: u64 = 16 << 20;

/// The largest result or analysis file of a run read (`tN.json`,
/// `observe.json`, `profile.json` ...): a flow's receiver keeps up to
/// 100 000 bins, about 10 MiB of JSON.
pub const MAX_RESULT_BYTES: u64 = 64 << 20;

/// Reads a JSON file of a results directory (at most [`MAX_RESULT_BYTES`])
/// as `T`; a wrong field names the file, line and field.
pub fn read_json<T: DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    read_json_capped(path, what, MAX_RESULT_BYTES)
}

/// [`read_json`] with its own size cap. The file is read under the input
/// rule (a regular file: a FIFO or a device behind a symlink is refused
/// without blocking); every refusal is bad input naming the file.
pub fn read_json_capped<T: DeserializeOwned>(path: &Path, what: &str, cap: u64) -> Result<T> {
    let text = ontime_core::fsio::read_text_capped(path, what, cap).map_err(|e| BadInput(format!("{e:#}")))?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        anyhow::Error::new(BadInput(format!(
            "{} is not a valid {what}: field {field}: {}",
            path.display(),
            e.into_inner()
        )))
    })
}

/// `DIR/run.json`; a directory holding only `ontime crawl` or `ontime
/// cyclic` results (`tN.json`, e.g. written inside a guest) is read as an
/// imported run ([`import_record`]).
pub fn read_record(run_dir: &Path) -> Result<RunRecord> {
    let record = run_dir.join("run.json");
    if !record.exists() && !probe_results(run_dir).is_empty() {
        return import_record(run_dir);
    }
    let r: RunRecord = read_json_capped(&record, "lab run record", MAX_RUN_RECORD_BYTES)?;
    check_record(&r, &record)?;
    Ok(r)
}

/// What a run record claims, checked before anything is read or sized
/// from it. The report reads and holds every tenant's result (about 20 KB
/// each), so a record may list at most [`ontime_core::limits::MAX_TENANTS`]
/// tenants, and each result file once: a forged record cannot make the
/// report read one file ten thousand times. Files it names are plain names
/// in the run directory. A record that claims more is corrupt: bad input
/// naming the file.
fn check_record(r: &RunRecord, path: &Path) -> Result<()> {
    let corrupt = |what: String| {
        anyhow::Error::new(BadInput(format!(
            "{} is not a valid lab run record: {what}",
            path.display()
        )))
    };
    let max = ontime_core::limits::MAX_TENANTS;
    if r.tenants.len() as u64 > max {
        return Err(corrupt(format!(
            "it lists {} tenants, more than a run may have ({max})",
            r.tenants.len()
        )));
    }
    let mut named = std::collections::HashSet::new();
    for t in &r.tenants {
        let Some(f) = &t.result else { continue };
        plain_name(f).map_err(|e| corrupt(format!("tenant {}'s result {e}", t.index)))?;
        if !named.insert(f.as_str()) {
            return Err(corrupt(format!("two tenants name the same result {f:?}")));
        }
    }
    let observe = r.observe.as_ref();
    let others = [
        ("observe.analysis", observe.and_then(|o| o.analysis.as_ref())),
        ("observe.profile", observe.and_then(|o| o.profile.as_ref())),
        ("io.analysis", r.io.as_ref().and_then(|o| o.analysis.as_ref())),
    ];
    for (key, f) in others {
        let Some(f) = f else { continue };
        plain_name(f).map_err(|e| corrupt(format!("{key} {e}")))?;
    }
    Ok(())
}

/// A file a run record names: a plain name in the run directory (a path
/// joined to the directory could name any file on the host).
fn plain_name(f: &str) -> Result<(), String> {
    let p = Path::new(f);
    let mut parts = p.components();
    match (parts.next(), parts.next()) {
        (Some(std::path::Component::Normal(_)), None) => Ok(()),
        _ => Err(format!("{f:?} is not a file name in the run directory")),
    }
}

/// `tN.json` files of a run directory, by tenant index.
fn probe_results(run_dir: &Path) -> Vec<(usize, PathBuf)> {
    let mut out: Vec<(usize, PathBuf)> = std::fs::read_dir(run_dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let i = name.strip_prefix('t')?.strip_suffix(".json")?.parse().ok()?;
                    Some((i, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A run record for results the lab did not make: `ontime crawl --json`
/// or `ontime cyclic --json` output saved as `tN.json` (one per tenant,
/// e.g. run inside guests). The scenario is what the results say of
/// themselves (duration, rate or interval, tenant count), the environment
/// the first result's manifest; no relay, gateway or recorder took part.
pub fn import_record(run_dir: &Path) -> Result<RunRecord> {
    let files = probe_results(run_dir);
    let Some((_, first)) = files.first() else {
        anyhow::bail!(BadInput(format!(
            "{} holds no run.json and no tN.json results",
            run_dir.display()
        )));
    };
    let value: serde_json::Value = read_json(first, "crawl or cyclic result")?;
    // The workload follows from the table (`RunRecord::new`).
    let table = if value.get("polls").is_some() {
        let planned = value["polls"]["planned"].as_u64().unwrap_or(0);
        let secs = value["duration_ns"].as_u64().unwrap_or(0) as f64 / 1e9;
        let rate = if secs > 0.0 { planned as f64 / secs } else { 1.0 };
        // At least one poll per period, as a scenario must plan.
        let rate = ((rate * 1000.0).round() / 1000.0).max(0.001);
        let period_s = (1.0 / rate).ceil().max(1.0);
        format!("[tenant.crawl]\nrate = {rate:.3}\nperiod = \"{period_s}s\"\n")
    } else if value.get("latency").is_some() && value.get("overruns").is_some() {
        let interval = value["options"]["interval_ns"].as_u64().unwrap_or(1_000_000);
        format!("[tenant.cyclic]\ninterval = \"{}ns\"\n", interval.max(10_000))
    } else {
        anyhow::bail!(BadInput(format!(
            "{} is neither an ontime crawl nor an ontime cyclic result",
            first.display()
        )));
    };
    let manifest: ontime_core::manifest::Manifest = serde_json::from_value(value["manifest"].clone())
        .map_err(|e| BadInput(format!("{}: manifest: {e}", first.display())))?;
    let duration = value["duration_ns"].as_u64().unwrap_or(0).max(1_000_000_000);
    // The directory's name, as a scenario name may be (run directories
    // are named "000-count=1-rep1").
    let name: String = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .skip_while(|&c| c == '.')
        .take(crate::scenario::MAX_NAME_LEN)
        .collect();
    let name = if name.is_empty() { "imported".to_string() } else { name };
    let scenario = format!(
        "name = {name:?}\nduration = \"{duration}ns\"\n[tenant]\ncount = {}\n{table}",
        files.len()
    );
    let plan = crate::scenario::load_str(&scenario, &run_dir.join("run.json"))?;
    let run = plan.runs.first().ok_or_else(|| anyhow::anyhow!("no run"))?;
    let environment = crate::record::Environment::new(
        manifest.clone(),
        crate::record::WanDelayBy::None,
        crate::record::IMPORTED_NOTE.into(),
    );
    Ok(RunRecord {
        complete: true,
        tenants: files
            .iter()
            .map(|(i, f)| crate::record::TenantOutcome {
                index: *i,
                result: f.file_name().map(|n| n.to_string_lossy().into_owned()),
                exit: None,
            })
            .collect(),
        finished_utc: manifest.end_utc.clone().unwrap_or_default(),
        ..RunRecord::new(run, environment, manifest.start_utc.clone())
    })
}

/// One tenant's probe result.
#[derive(Debug)]
pub enum ProbeResult {
    Crawl(Box<CrawlResult>),
    /// A crawler tenant over Modbus or BACnet in the lab, judged by its
    /// polls as the building gateway received them (its own interval
    /// error is taken at its sends: the answers carry no receive time).
    CrawlAtDevice(Box<CrawlResult>, Box<crate::record::TenantReference>),
    Cyclic(Box<CyclicResult>),
    /// fio, dd or Postmark (`ontime io workload`).
    Io(Box<ontime_io::workload::WorkloadResult>),
    /// A measured flow's receiver (document 003), for its sending tenant.
    Flow(Box<ontime_net::flow::FlowResult>),
    /// A crawler tenant as `ontime sim` scored it.
    Simulated(Box<crate::record::SimTenant>),
    /// A poller ontime did not write, from its packets (`tenant.command`).
    Wire(Box<ontime_wire::WireResult>),
}

impl ProbeResult {
    pub fn read(path: &Path, workload: Workload) -> Result<ProbeResult> {
        Ok(match workload {
            Workload::Crawl => ProbeResult::Crawl(Box::new(read_json(path, "crawl result")?)),
            Workload::Cyclic => ProbeResult::Cyclic(Box::new(read_json(path, "cyclic result")?)),
            Workload::Io => ProbeResult::Io(Box::new(read_json(path, "I/O workload result")?)),
            Workload::Net => ProbeResult::Flow(Box::new(read_json(path, "flow result")?)),
            Workload::Wire => ProbeResult::Wire(Box::new(read_json(path, "wire result")?)),
        })
    }

    /// The metric the run is judged by: interval error, or wake-up latency
    /// of every planned wake-up.
    pub fn headline(&self) -> &Summary {
        match self {
            ProbeResult::Crawl(c) => &c.interval_error,
            ProbeResult::CrawlAtDevice(_, r) => &r.interval_error,
            ProbeResult::Cyclic(c) => &c.latency,
            ProbeResult::Io(r) => &r.latency,
            ProbeResult::Flow(f) => &f.delay,
            ProbeResult::Simulated(s) => s.headline(),
            ProbeResult::Wire(w) => &w.interval_error,
        }
    }

    /// Missed polls, or overrun periods.
    pub fn missed(&self) -> u64 {
        match self {
            ProbeResult::Crawl(c) => c.missed,
            ProbeResult::CrawlAtDevice(_, r) => r.missed,
            ProbeResult::Cyclic(c) => c.overruns,
            // The tools stop at an error; a result was written, so none.
            ProbeResult::Io(_) => 0,
            ProbeResult::Flow(f) => f.misses,
            ProbeResult::Simulated(s) => s.missed,
            ProbeResult::Wire(w) => w.missed,
        }
    }

    pub fn send_lag(&self) -> Option<&Summary> {
        match self {
            ProbeResult::Crawl(c) | ProbeResult::CrawlAtDevice(c, _) => Some(&c.send_lag),
            ProbeResult::Simulated(s) => s.send_lag.as_ref(),
            ProbeResult::Cyclic(_) | ProbeResult::Io(_) | ProbeResult::Flow(_) | ProbeResult::Wire(_) => None,
        }
    }
}

/// One run directory, read back.
pub struct RunResults {
    pub dir: PathBuf,
    pub name: String,
    pub record: RunRecord,
    /// (tenant index, its result), for tenants that wrote one.
    pub tenants: Vec<(usize, ProbeResult)>,
    /// Every tenant's headline samples together, from the exact histogram
    /// logs (`t<i>.hlog`); older cyclic runs without one fall back to the
    /// result's log bins, which round each sample up to its bin's bound.
    pub pooled: LatencyHistogram,
    /// True when `pooled` came from log bins for some tenant.
    pub pooled_from_bins: bool,
    /// True when some tenant's histogram log holds no samples though its
    /// result counted some (cut to its header, as `ontime lab report --pack`
    /// packs lab runs): `pooled` lacks that tenant.
    pub pooled_incomplete: bool,
    /// The scheduler recording's analysis (`observe.json`), when the run
    /// has one.
    pub analysis: Option<ontime_sched::Analysis>,
    /// Why the tenants' late polls or wake-ups were late (`explain.json`,
    /// written beside observe.json when the probes kept their late events).
    pub explanations: Option<ontime_explain::kept::RunExplanations>,
    /// The causes injected at known times and how the attribution scored
    /// against them (`truth.json`, with `[[inject]]`).
    pub truth: Option<ontime_explain::truth::RunTruth>,
}

impl RunResults {
    /// The run's worst tenant: the largest of the tenants' headline
    /// percentile `p` (their maximum for None). None when some tenant's
    /// sample count does not support `p`: the worst of the others would
    /// pass for the run's (a p99.999 of the one flow with 100 000 packets
    /// below the p99.9 of the flows with fewer). The lab report, its
    /// Markdown tables and `ontime sim validate` all judge a run by this.
    pub fn worst_tenant(&self, p: Option<f64>) -> Option<u64> {
        match p {
            Some(p) => {
                let mut worst = None;
                for (_, t) in &self.tenants {
                    worst = worst.max(Some(t.headline().percentile(p)?));
                }
                worst
            }
            None => self.tenants.iter().filter_map(|(_, t)| t.headline().max_ns).max(),
        }
    }

    /// Polls missed (or periods overrun) by all of the run's tenants.
    pub fn missed(&self) -> u64 {
        self.tenants
            .iter()
            .map(|(_, t)| t.missed())
            .fold(0, u64::saturating_add)
    }

    /// "count=4, rate=100": the run's swept values by their last name
    /// segment; empty for a run of no sweep.
    pub fn setting(&self) -> String {
        self.record
            .vars
            .iter()
            .map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The histogram log tag of a workload's headline metric.
fn hlog_tag(w: Workload) -> &'static str {
    match w {
        Workload::Crawl | Workload::Wire => "interval_error",
        Workload::Cyclic | Workload::Io | Workload::Net => "latency",
    }
}

pub fn read_run(dir: &Path) -> Result<RunResults> {
    let record = read_record(dir)?;
    let mut tenants = Vec::new();
    let mut pooled = LatencyHistogram::new();
    let mut pooled_from_bins = false;
    let mut pooled_incomplete = false;
    // Crawlers over Modbus and BACnet are judged at the device where the
    // lab ran it and judged each tenant's building (newer records).
    let at_device = record
        .reference
        .as_ref()
        .filter(|_| record.workload == Workload::Crawl && record.simulated.is_none())
        .filter(|_| {
            record
                .config
                .tenant
                .crawl
                .as_ref()
                .is_some_and(|c| c.protocol != crate::scenario::CrawlProtocol::Http)
        })
        .filter(|r| !r.tenants.is_empty());
    if let Some(r) = at_device {
        if let Some(f) = &r.hlog {
            pooled = ontime_core::hlog::read_merged(&dir.join(f), "interval_error")?;
        }
        // Cut to its header in a pack, as the tenants' logs are.
        pooled_incomplete |= pooled.is_empty() && r.interval_error.count > 0;
    }
    for t in &record.tenants {
        let Some(f) = &t.result else { continue };
        let mut result = if record.simulated.is_some() {
            ProbeResult::Simulated(Box::new(read_json(&dir.join(f), "simulated tenant")?))
        } else {
            ProbeResult::read(&dir.join(f), record.workload)?
        };
        if let Some(own) = at_device.and_then(|r| r.tenants.iter().find(|x| x.index == t.index)) {
            result = match result {
                ProbeResult::Crawl(c) => ProbeResult::CrawlAtDevice(c, Box::new(own.clone())),
                other => other,
            };
        }
        let hlog = dir.join(format!("t{}.hlog", t.index));
        if at_device.is_some() {
            // Pooled from the gateway's judgement above.
        } else if hlog.exists() {
            let merged = ontime_core::hlog::read_merged(&hlog, hlog_tag(record.workload))?;
            pooled_incomplete |= merged.is_empty() && result.headline().count > 0;
            pooled.add(&merged);
        } else if let ProbeResult::Cyclic(c) = &result {
            for b in &c.histogram_log {
                pooled.record_n(b.le_ns, b.count);
            }
            pooled_from_bins = true;
        }
        tenants.push((t.index, result));
    }
    let analysis = match record.observe.as_ref().and_then(|o| o.analysis.as_ref()) {
        Some(f) => Some(read_json(&dir.join(f), "observe analysis")?),
        None => None,
    };
    let explain = dir.join("explain.json");
    let explanations = if explain.exists() {
        Some(read_json(&explain, "explanation of the late events")?)
    } else {
        None
    };
    let truth_file = dir.join("truth.json");
    let truth = if truth_file.exists() {
        Some(read_json(&truth_file, "ground-truth check")?)
    } else {
        None
    };
    Ok(RunResults {
        analysis,
        explanations,
        truth,
        dir: dir.to_path_buf(),
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        record,
        tenants,
        pooled,
        pooled_from_bins,
        pooled_incomplete,
    })
}

/// Every run directory under `DIR/runs` that has a `run.json`, in name
/// order.
pub fn run_dirs(results: &Path) -> Result<Vec<PathBuf>> {
    let runs_dir = results.join("runs");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs_dir)
        .map_err(|_| {
            BadInput(format!(
                "{} has no runs/ directory: is it a lab results directory (ontime lab run -o DIR)?",
                results.display()
            ))
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("run.json").exists() || !probe_results(p).is_empty())
        .collect();
    dirs.sort();
    Ok(dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of the report's committed crawler run, its record changed by
    /// `edit`.
    fn forged(edit: impl FnOnce(&mut serde_json::Value)) -> (tempfile::TempDir, PathBuf) {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/fixtures/golden-lab/runs/000-count=1-rep1");
        let d = tempfile::tempdir().unwrap();
        let run = d.path().join("000-rep1");
        std::fs::create_dir(&run).unwrap();
        for f in ["run.json", "t0.json", "t0.hlog"] {
            std::fs::copy(fixture.join(f), run.join(f)).unwrap();
        }
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(run.join("run.json"), serde_json::to_string(&v).unwrap()).unwrap();
        (d, run)
    }

    fn bad(run: &Path) -> String {
        let e = read_run(run).err().expect("refused");
        assert!(e.downcast_ref::<BadInput>().is_some(), "{e:#}");
        format!("{e:#}")
    }

    #[test]
    fn the_committed_run_reads() {
        let (_d, run) = forged(|_| {});
        let r = read_run(&run).unwrap();
        assert_eq!(r.tenants.len(), 1);
        assert!(!r.pooled.is_empty());
    }

    /// A 9 MB run.json listing 200 000 tenants took 4.3 GB in `lab
    /// report`; one naming the same result for every tenant reads it
    /// that many times.
    #[test]
    fn a_record_claiming_more_tenants_than_a_run_has_is_refused() {
        let (_d, run) = forged(|v| {
            let one = v["tenants"][0].clone();
            v["tenants"] = serde_json::Value::Array(
                (0..=ontime_core::limits::MAX_TENANTS)
                    .map(|i| {
                        let mut t = one.clone();
                        t["index"] = i.into();
                        t["result"] = serde_json::Value::Null;
                        t
                    })
                    .collect(),
            );
        });
        let e = bad(&run);
        assert!(
            e.contains("run.json") && e.contains("10001 tenants") && e.contains("10000"),
            "{e}"
        );
        let (_d, run) = forged(|v| {
            let one = v["tenants"][0].clone();
            v["tenants"] = serde_json::Value::Array(vec![one.clone(), one]);
        });
        assert!(bad(&run).contains("two tenants name the same result"));
        for name in ["../../../etc/passwd", "/etc/passwd", ""] {
            let (_d, run) = forged(|v| v["tenants"][0]["result"] = name.into());
            assert!(bad(&run).contains("not a file name in the run directory"), "{name}");
        }
    }

    #[test]
    fn results_that_are_no_regular_files_are_refused_without_blocking() {
        let (_d, run) = forged(|_| {});
        std::fs::remove_file(run.join("t0.hlog")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", run.join("t0.hlog")).unwrap();
        assert!(bad(&run).contains("t0.hlog is not a regular file"));
        std::fs::remove_file(run.join("t0.json")).unwrap();
        let made = std::process::Command::new("mkfifo").arg(run.join("t0.json")).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        assert!(bad(&run).contains("t0.json is not a regular file"));
        std::fs::remove_file(run.join("run.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", run.join("run.json")).unwrap();
        assert!(bad(&run).contains("run.json is not a regular file"));
    }

    #[test]
    fn a_corrupt_histogram_log_is_bad_input_naming_it() {
        let (_d, run) = forged(|_| {});
        std::fs::write(
            run.join("t0.hlog"),
            b"#[StartTime: 1.000 (seconds since epoch)]\nnot an interval\n",
        )
        .unwrap();
        assert!(bad(&run).contains("t0.hlog is not a valid histogram log: line 2"));
    }
}
