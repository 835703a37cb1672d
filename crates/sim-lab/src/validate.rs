//! `ontime sim validate`: how close the simulator comes to the lab, on the
//! committed sets of lab runs, by one rule, on every basis side by side.
//!
//! Each set of lab runs (a pack, [`ontime_scenario::pack`]) is simulated
//! beside itself with the calibration fitted on the same host (each
//! simulated run starts its tenants as the measured run did). A *cell* is
//! one setting of a scenario and one percentile (p99, p99.9) of the worst
//! tenant's interval error. It agrees when the simulated median lies within
//! a factor of 2 of the lab's median, or inside the lab's interquartile
//! range: with nine noisy runs the extremes say little, so the lab's
//! min-max is never the test.
//!
//! The bases: every set alone; the sets of the manifest's `pool` together
//! (the lab's median and quartiles over all their runs); and the lab
//! against itself (one set's runs in the simulator's place, judged against
//! another's by the same rule): the ceiling no model can be held above.

use anyhow::{Context, Result};
use ontime_core::BadInput;
use ontime_scenario::pack;
use ontime_scenario::results::{read_run, run_dirs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::simulate::{simulate_plan, write_runs, SimOptions};

/// The percentiles a cell compares.
pub const PERCENTILES: [(&str, f64); 2] = [("p99", 99.0), ("p99.9", 99.9)];

/// The share of cells that must agree for the simulator to be trusted
/// where the lab was not run.
pub const TARGET_SHARE: f64 = 0.9;

/// `validate.toml`: the sets of lab runs and how to pool them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Where the scenario files the runs were made from live, relative to
    /// the manifest.
    pub scenarios: PathBuf,
    /// The sets pooled into one basis (each set alone is shown too).
    #[serde(default)]
    pub pool: Vec<String>,
    pub set: Vec<SetSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    pub name: String,
    /// What the set is (host, repetitions).
    pub about: String,
    /// The pack of lab runs, relative to the manifest.
    pub runs: PathBuf,
    /// The calibration fitted on the set's host, relative to the manifest.
    pub calibration: PathBuf,
    /// The real-time budget the lab gave the tenants, for runs whose
    /// run.json predates recording it.
    #[serde(default)]
    pub tenant_rt_budget: Option<String>,
}

/// One run's figures: the worst tenant's percentiles and the missed polls
/// of all tenants.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFigures {
    pub p99_ns: Option<u64>,
    #[serde(rename = "p99.9_ns")]
    pub p999_ns: Option<u64>,
    pub missed: u64,
}

impl RunFigures {
    fn get(&self, p: &str) -> Option<u64> {
        match p {
            "p99" => self.p99_ns,
            _ => self.p999_ns,
        }
    }
}

/// Per scenario, per setting ("count=4, rate=100, ..."): the runs of one
/// side.
type Side = BTreeMap<String, BTreeMap<String, Vec<RunFigures>>>;

/// A set of lab runs and the simulator's runs beside them.
struct SetRuns {
    name: String,
    lab: Side,
    sim: Side,
    /// The unpacked results directories, lab and simulated runs together.
    unpacked: pack::Unpacked,
}

/// One compared cell.
#[derive(Debug, Serialize)]
pub struct Cell {
    pub scenario: String,
    pub setting: String,
    pub percentile: String,
    pub lab_runs: usize,
    pub other_runs: usize,
    pub lab_median_ns: u64,
    pub lab_q1_ns: u64,
    pub lab_q3_ns: u64,
    pub lab_min_ns: u64,
    pub lab_max_ns: u64,
    pub other_median_ns: u64,
    pub ratio: f64,
    pub agrees: bool,
}

/// The tenant count at which polls are first missed (median over the
/// runs), per side, for scenarios that sweep the tenant count.
#[derive(Debug, Serialize)]
pub struct FirstMissed {
    pub scenario: String,
    /// The other settings of the series.
    pub series: String,
    pub lab: Option<u32>,
    pub other: Option<u32>,
}

#[derive(Debug, Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BasisKind {
    /// One set of lab runs against the simulator.
    Set,
    /// Several sets pooled against the simulator.
    Pooled,
    /// One set's lab runs against another's.
    LabVsLab,
}

/// One basis: its cells and counts.
#[derive(Debug, Serialize)]
pub struct Basis {
    pub name: String,
    pub kind: BasisKind,
    /// Per scenario: (agreeing cells, cells).
    pub scenarios: BTreeMap<String, (usize, usize)>,
    pub agree: usize,
    pub cells: usize,
    pub first_missed: Vec<FirstMissed>,
    pub detail: Vec<Cell>,
    /// Settings measured on one side with no runs on the other ("scenario:
    /// setting"): a sweep that changed between them.
    pub unmatched: Vec<String>,
}

impl Basis {
    pub fn share(&self) -> f64 {
        if self.cells == 0 {
            0.0
        } else {
            self.agree as f64 / self.cells as f64
        }
    }

    pub fn meets_target(&self) -> bool {
        self.cells > 0 && self.share() >= TARGET_SHARE
    }
}

/// What `ontime sim validate` prints.
#[derive(Debug, Serialize)]
pub struct Validation {
    pub rule: &'static str,
    pub seed: u64,
    pub sets: Vec<(String, String)>,
    pub bases: Vec<Basis>,
}

pub const RULE: &str = "a cell agrees when the simulated median lies within a factor of 2 of the lab's median or inside the lab's interquartile range (linear interpolation between the runs)";

/// Reads a manifest.
pub fn read_manifest(path: &Path) -> Result<Manifest> {
    let text = ontime_core::fsio::read_text(path, "validation manifest").map_err(|e| BadInput(format!("{e:#}")))?;
    let m: Manifest =
        toml::from_str(&text).map_err(|e| BadInput(format!("{} is not a validation manifest: {e}", path.display())))?;
    for p in &m.pool {
        if !m.set.iter().any(|s| &s.name == p) {
            return Err(BadInput(format!("{}: pool names '{p}', which is no [[set]]", path.display())).into());
        }
    }
    if m.set.is_empty() {
        return Err(BadInput(format!("{}: no [[set]]", path.display())).into());
    }
    Ok(m)
}

/// Simulates every set of the manifest beside its lab runs (with `seed`)
/// and compares them on every basis. `only` restricts the sets to those
/// named (and the pool to those among them). `progress` hears one line
/// per scenario simulated. With `into`, the pooled sets' runs, measured
/// and simulated, are left there as one results directory per scenario
/// (`ontime lab report INTO/NAME` draws them side by side).
pub fn validate(
    manifest_path: &Path,
    seed: u64,
    only: &[String],
    into: Option<&Path>,
    progress: &mut dyn FnMut(&str),
) -> Result<Validation> {
    let manifest = read_manifest(manifest_path)?;
    let base = manifest_path.parent().unwrap_or(Path::new("."));
    for name in only {
        if !manifest.set.iter().any(|s| &s.name == name) {
            let names: Vec<&str> = manifest.set.iter().map(|s| s.name.as_str()).collect();
            return Err(BadInput(format!(
                "no set '{name}' in {}: {}",
                manifest_path.display(),
                names.join(", ")
            ))
            .into());
        }
    }
    let chosen: Vec<&SetSpec> = manifest
        .set
        .iter()
        .filter(|s| only.is_empty() || only.contains(&s.name))
        .collect();
    let pooled_chosen = chosen.iter().filter(|s| manifest.pool.contains(&s.name)).count();
    if into.is_some() && pooled_chosen < 2 {
        return Err(BadInput(format!(
            "--into keeps the pooled sets' runs: choose two or more of {}",
            manifest.pool.join(", ")
        ))
        .into());
    }
    let mut sets = Vec::new();
    for spec in &chosen {
        sets.push(simulate_set(
            spec,
            base,
            &base.join(&manifest.scenarios),
            seed,
            progress,
        )?);
    }
    let mut bases = Vec::new();
    for s in &sets {
        bases.push(compare(&s.name, BasisKind::Set, &s.lab, &s.sim));
    }
    let pooled: Vec<&SetRuns> = sets.iter().filter(|s| manifest.pool.contains(&s.name)).collect();
    if pooled.len() > 1 {
        let name = pooled.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join("+");
        let lab = merge(pooled.iter().map(|s| &s.lab));
        let sim = merge(pooled.iter().map(|s| &s.sim));
        bases.push(compare(&name, BasisKind::Pooled, &lab, &sim));
        if let Some(into) = into {
            pool_into(&pooled, into)?;
        }
        for (i, a) in pooled.iter().enumerate() {
            for b in &pooled[i + 1..] {
                bases.push(compare(
                    &format!("{} vs {}", a.name, b.name),
                    BasisKind::LabVsLab,
                    &a.lab,
                    &b.lab,
                ));
            }
        }
    }
    Ok(Validation {
        rule: RULE,
        seed,
        sets: chosen.iter().map(|s| (s.name.clone(), s.about.clone())).collect(),
        bases,
    })
}

/// Copies the runs of `sets` into `into`, one results directory per
/// scenario; runs of every set after the first get its name as a prefix.
fn pool_into(sets: &[&SetRuns], into: &Path) -> Result<()> {
    for (i, set) in sets.iter().enumerate() {
        for results in &set.unpacked.results {
            let Some(name) = results.file_name() else { continue };
            let dest = into.join(name);
            std::fs::create_dir_all(dest.join("runs")).with_context(|| format!("cannot create {}", dest.display()))?;
            for f in ["scenario.toml", "plan.json"] {
                if results.join(f).is_file() && !dest.join(f).exists() {
                    std::fs::copy(results.join(f), dest.join(f))?;
                }
            }
            for run in run_dirs(results)? {
                let Some(run_name) = run.file_name() else { continue };
                let to = dest.join("runs").join(if i == 0 {
                    run_name.to_string_lossy().into_owned()
                } else {
                    format!("{}-{}", set.name, run_name.to_string_lossy())
                });
                std::fs::create_dir_all(&to)?;
                for f in std::fs::read_dir(&run)?.flatten() {
                    if f.path().is_file() {
                        std::fs::copy(f.path(), to.join(f.file_name()))?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn merge<'a>(sides: impl Iterator<Item = &'a Side>) -> Side {
    let mut out = Side::new();
    for side in sides {
        for (scenario, settings) in side {
            for (setting, runs) in settings {
                out.entry(scenario.clone())
                    .or_default()
                    .entry(setting.clone())
                    .or_default()
                    .extend(runs.iter().cloned());
            }
        }
    }
    out
}

fn simulate_set(
    spec: &SetSpec,
    base: &Path,
    scenarios: &Path,
    seed: u64,
    progress: &mut dyn FnMut(&str),
) -> Result<SetRuns> {
    let unpacked = pack::unpack(&base.join(&spec.runs))?;
    let calibration_path = base.join(&spec.calibration);
    let calibration = crate::calibrate::read(&calibration_path)
        .map_err(|e| BadInput(format!("set {}: calibration: {e:#}", spec.name)))?;
    let rt_budget = match &spec.tenant_rt_budget {
        Some(t) => Some(
            ontime_core::duration::parse_ns(t)
                .map_err(|e| BadInput(format!("set {}: tenant_rt_budget: {e}", spec.name)))?,
        ),
        None => None,
    };
    let mut lab = Side::new();
    let mut sim = Side::new();
    for results in &unpacked.results {
        let name = results
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The scenario the runs were made from, as packed beside them; the
        // repository's only for packs without one.
        let packed = results.join("scenario.toml");
        let scenario_file = if packed.is_file() {
            packed
        } else {
            scenarios.join(format!("{name}.toml"))
        };
        let plan = ontime_scenario::scenario::load(&scenario_file).map_err(|e| {
            BadInput(format!(
                "set {}: its runs of '{name}' need {}: {e:#}",
                spec.name,
                scenario_file.display()
            ))
        })?;
        let dirs = run_dirs(results)?;
        let Some(first) = dirs.first() else { continue };
        let cpus = ontime_scenario::results::read_record(first)?
            .environment
            .manifest
            .cpus_online;
        ontime_core::limits::count("cpus_online", cpus as u64, 1, ontime_core::limits::MAX_SIM_CPUS)
            .map_err(|e| BadInput(format!("set {}: {}: {e}", spec.name, first.display())))?;
        progress(&format!(
            "set {}: simulating {name} ({} lab runs)",
            spec.name,
            dirs.len()
        ));
        let opts = SimOptions {
            cpus,
            model: None,
            seed,
            send_cost_ns: 10_000,
            io_cost_ns: None,
            io_vcpus: 1,
            calibration: Some((calibration_path.clone(), calibration.clone())),
            scheduler_view: false,
            starts_from: Some(results.clone()),
            tenant_rt_budget_ns: rt_budget,
        };
        simulate_plan(&plan, &opts, &mut |r| {
            write_runs(results, std::slice::from_ref(&r)).map(|_| ())
        })?;
        for dir in run_dirs(results)? {
            let run = read_run(&dir)?;
            if run.record.simulated.is_none() && !run.record.complete {
                continue;
            }
            let side = if run.record.simulated.is_some() {
                &mut sim
            } else {
                &mut lab
            };
            side.entry(name.clone())
                .or_default()
                .entry(run.setting())
                .or_default()
                .push(figures(&run));
        }
    }
    Ok(SetRuns {
        name: spec.name.clone(),
        lab,
        sim,
        unpacked,
    })
}

fn figures(run: &ontime_scenario::results::RunResults) -> RunFigures {
    RunFigures {
        p99_ns: run.worst_tenant(Some(99.0)),
        p999_ns: run.worst_tenant(Some(99.9)),
        missed: run.missed(),
    }
}

/// The `q`-quantile (0..=1) of sorted values, interpolated linearly
/// between neighbours (numpy's default), so three runs have quartiles.
pub fn quantile(sorted: &[u64], q: f64) -> f64 {
    ontime_core::stats::quantile_sorted(sorted, q, |v| v as f64)
}

/// The rule, on one cell's values.
pub fn agrees(lab: &[u64], other: &[u64]) -> Option<(bool, f64, [f64; 5], f64)> {
    if lab.is_empty() || other.is_empty() {
        return None;
    }
    let mut l = lab.to_vec();
    l.sort_unstable();
    let mut o = other.to_vec();
    o.sort_unstable();
    let (lmed, q1, q3) = (quantile(&l, 0.5), quantile(&l, 0.25), quantile(&l, 0.75));
    let omed = quantile(&o, 0.5);
    let ratio = if lmed > 0.0 { omed / lmed } else { f64::INFINITY };
    let ok = (0.5..=2.0).contains(&ratio) || (q1..=q3).contains(&omed);
    Some((ok, ratio, [l[0] as f64, q1, lmed, q3, l[l.len() - 1] as f64], omed))
}

fn compare(name: &str, kind: BasisKind, lab: &Side, other: &Side) -> Basis {
    let mut basis = Basis {
        name: name.to_string(),
        kind,
        scenarios: BTreeMap::new(),
        agree: 0,
        cells: 0,
        first_missed: Vec::new(),
        detail: Vec::new(),
        unmatched: Vec::new(),
    };
    for (scenario, settings) in lab {
        let Some(other_settings) = other.get(scenario) else {
            basis.unmatched.push(format!("{scenario}: every setting"));
            continue;
        };
        basis.unmatched.extend(
            other_settings
                .keys()
                .filter(|k| !settings.contains_key(*k))
                .map(|k| format!("{scenario}: {k} (no lab runs)")),
        );
        let counts = basis.scenarios.entry(scenario.clone()).or_insert((0, 0));
        for (setting, lab_runs) in settings {
            let Some(other_runs) = other_settings.get(setting) else {
                basis
                    .unmatched
                    .push(format!("{scenario}: {setting} (no runs to compare)"));
                continue;
            };
            for (p, _) in PERCENTILES {
                let lv: Vec<u64> = lab_runs.iter().filter_map(|r| r.get(p)).collect();
                let ov: Vec<u64> = other_runs.iter().filter_map(|r| r.get(p)).collect();
                let Some((ok, ratio, five, omed)) = agrees(&lv, &ov) else {
                    continue;
                };
                counts.1 += 1;
                counts.0 += ok as usize;
                basis.detail.push(Cell {
                    scenario: scenario.clone(),
                    setting: setting.clone(),
                    percentile: p.to_string(),
                    lab_runs: lv.len(),
                    other_runs: ov.len(),
                    lab_min_ns: five[0] as u64,
                    lab_q1_ns: five[1] as u64,
                    lab_median_ns: five[2] as u64,
                    lab_q3_ns: five[3] as u64,
                    lab_max_ns: five[4] as u64,
                    other_median_ns: omed as u64,
                    ratio,
                    agrees: ok,
                });
            }
        }
        basis
            .first_missed
            .extend(first_missed(scenario, settings, other_settings));
    }
    basis.agree = basis.scenarios.values().map(|c| c.0).sum();
    basis.cells = basis.scenarios.values().map(|c| c.1).sum();
    basis
}

/// Per series of a tenant-count sweep, the first count whose median missed
/// polls are above zero, on each side.
fn first_missed(
    scenario: &str,
    lab: &BTreeMap<String, Vec<RunFigures>>,
    other: &BTreeMap<String, Vec<RunFigures>>,
) -> Vec<FirstMissed> {
    let mut series: BTreeMap<String, (Option<u32>, Option<u32>)> = BTreeMap::new();
    for (side, settings) in [(0, lab), (1, other)] {
        for (setting, runs) in settings {
            let mut count = None;
            let rest: Vec<&str> = setting
                .split(", ")
                .filter(|kv| match kv.strip_prefix("count=") {
                    Some(c) => {
                        count = c.parse::<u32>().ok();
                        false
                    }
                    None => true,
                })
                .collect();
            let Some(count) = count else { return Vec::new() };
            let mut missed: Vec<u64> = runs.iter().map(|r| r.missed).collect();
            missed.sort_unstable();
            let entry = series.entry(rest.join(", ")).or_default();
            let slot = if side == 0 { &mut entry.0 } else { &mut entry.1 };
            if quantile(&missed, 0.5) > 0.0 && slot.is_none_or(|c| count < c) {
                *slot = Some(count);
            }
        }
    }
    series
        .into_iter()
        .map(|(s, (lab, other))| FirstMissed {
            scenario: scenario.to_string(),
            series: if s.is_empty() { "all".into() } else { s },
            lab,
            other,
        })
        .collect()
}

fn ms(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

impl Validation {
    /// The side-by-side table: per basis, agreeing cells of each scenario.
    pub fn markdown(&self, cells: bool) -> String {
        let mut out = String::new();
        let scenarios: Vec<&String> = {
            let mut s: Vec<&String> = self.bases.iter().flat_map(|b| b.scenarios.keys()).collect();
            s.sort();
            s.dedup();
            s
        };
        out.push_str(&format!("Rule: {}. Simulator seed {}.\n\n", self.rule, self.seed));
        out.push_str("| basis | ");
        for s in &scenarios {
            out.push_str(&format!("{s} | "));
        }
        out.push_str("all | share |\n|---|");
        for _ in 0..scenarios.len() + 2 {
            out.push_str("---|");
        }
        out.push('\n');
        for b in &self.bases {
            let label = match b.kind {
                BasisKind::Set => format!("set {} alone", b.name),
                BasisKind::Pooled => format!("sets {} pooled", b.name),
                BasisKind::LabVsLab => format!("lab {} (ceiling)", b.name),
            };
            out.push_str(&format!("| {label} | "));
            for s in &scenarios {
                match b.scenarios.get(*s) {
                    Some((a, c)) => out.push_str(&format!("{a}/{c} | ")),
                    None => out.push_str("- | "),
                }
            }
            out.push_str(&format!("{}/{} | {:.1} % |\n", b.agree, b.cells, 100.0 * b.share()));
        }
        out.push_str(&format!(
            "\nTarget: {:.0} % of cells; each basis is shown, none is chosen.\n",
            100.0 * TARGET_SHARE
        ));
        for b in self.bases.iter().filter(|b| !b.unmatched.is_empty()) {
            out.push_str(&format!(
                "\n{}: {} setting(s) not compared, one side has no runs: {}\n",
                b.name,
                b.unmatched.len(),
                b.unmatched.join("; ")
            ));
        }
        for b in &self.bases {
            let differ: Vec<&FirstMissed> = b.first_missed.iter().filter(|f| f.lab != f.other).collect();
            let total = b.first_missed.len();
            if total > 0 {
                out.push_str(&format!(
                    "\n{}: polls first missed at the same tenant count in {} of {total} series",
                    b.name,
                    total - differ.len()
                ));
                for f in differ {
                    let n = |c: Option<u32>| c.map_or("never".to_string(), |c| c.to_string());
                    out.push_str(&format!(
                        "; {} {}: lab {}, other {}",
                        f.scenario,
                        f.series,
                        n(f.lab),
                        n(f.other)
                    ));
                }
                out.push('\n');
            }
        }
        if cells {
            for b in &self.bases {
                out.push_str(&format!(
                    "\n### {}\n\n| scenario | setting | p | runs lab / other | lab median (IQR; min-max), ms | other median, ms | ratio | agrees |\n|---|---|---|---|---|---|---|---|\n",
                    b.name
                ));
                for c in &b.detail {
                    out.push_str(&format!(
                        "| {} | {} | {} | {} / {} | {} ({}-{}; {}-{}) | {} | {:.2} | {} |\n",
                        c.scenario,
                        c.setting,
                        c.percentile,
                        c.lab_runs,
                        c.other_runs,
                        ms(c.lab_median_ns),
                        ms(c.lab_q1_ns),
                        ms(c.lab_q3_ns),
                        ms(c.lab_min_ns),
                        ms(c.lab_max_ns),
                        ms(c.other_median_ns),
                        c.ratio,
                        if c.agrees { "yes" } else { "no" }
                    ));
                }
            }
        }
        out
    }

    /// The counts alone, as the committed `validation.json` holds them.
    pub fn counts(&self) -> serde_json::Value {
        let bases: Vec<serde_json::Value> = self
            .bases
            .iter()
            .map(|b| {
                serde_json::json!({
                    "name": b.name,
                    "kind": b.kind,
                    "agree": b.agree,
                    "cells": b.cells,
                    "scenarios": b.scenarios.iter().map(|(k, (a, c))| (k.clone(), serde_json::json!({"agree": a, "cells": c}))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect();
        serde_json::json!({ "seed": self.seed, "rule": self.rule, "bases": bases })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quartiles_of_three_runs_interpolate() {
        let v = [1, 2, 10];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.25), 1.5);
        assert_eq!(quantile(&v, 0.75), 6.0);
    }

    #[test]
    fn agreement_is_a_factor_two_of_the_median_or_inside_the_iqr() {
        // Nine runs spread 50x: min-max would accept 6x the median; the
        // rule does not.
        let lab = [50, 60, 80, 100, 100, 120, 200, 900, 2510];
        assert!(!agrees(&lab, &[639]).unwrap().0, "outside 2x and above Q3");
        assert!(agrees(&lab, &[199]).unwrap().0, "within 2x");
        assert!(agrees(&lab, &[51]).unwrap().0, "within 2x below");
        let wide = [10, 100, 400, 500, 600];
        // median 400, Q3 500: 900 is 2.25x but ... outside the IQR.
        assert!(!agrees(&wide, &[900]).unwrap().0);
        // 100 is 0.25x but on Q1.
        assert!(agrees(&wide, &[100]).unwrap().0);
        assert!(agrees(&[], &[1]).is_none());
    }
}
